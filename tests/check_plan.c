/* check_plan.c - the CUDA backend's memory plan (cuda/cu_plan.c) on the CPU.
 *
 * A tiny configuration whose byte counts are worked out by hand below,
 * tensor by tensor from the loader's list (engine/lm/lm.c), not through the
 * planner's own grouping; the 7B's weights against the released checkpoint
 * (../shared/spec/moshiko-7b-tensors.txt); that the plan grows with what is
 * asked; the boundaries of cu_plan_max_slots; refusals (invalid requests,
 * overflow).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "check_main.h"
#include "cu_plan.h"
#include "lm_config.h"

#define MIB ((size_t)1 << 20)
#define GB ((size_t)1000 * 1000 * 1000)

/* dim 8 (2 heads of 4), 2 layers, hidden 22 (hidden_scale 4.125: int(33)
 * is not 4 x 8, so 2 x 33 / 3), context 10, 4 audio streams, dep_q 2,
 * card 5, text_card 7, depformer dim 4 (2 heads), 1 layer, hidden 8
 * (2 x 12 / 3). */
static void tiny(lm_config *c) {
    memset(c, 0, sizeof *c);
    c->dim = 8;
    c->num_heads = 2;
    c->num_layers = 2;
    c->hidden_scale = 4.125;
    c->context = 10;
    c->max_period = 10000;
    c->n_q = 4;
    c->dep_q = 2;
    c->card = 5;
    c->text_card = 7;
    c->existing_text_padding_id = 3;
    c->depformer_dim = 4;
    c->depformer_num_heads = 2;
    c->depformer_num_layers = 1;
    c->depformer_dim_feedforward = 12;
    c->variant = LM_VARIANT_KYUTAI;
    ms_error e;
    ck_assert_int_eq(lm_config_finish(c, &e), MS_OK);
    ck_assert_int_eq(c->hidden, 22);
    ck_assert_int_eq(c->dep_hidden, 8);
}

/* The tiny model's tensors as the loader reads them: count x rows x cols. */
static const struct { const char *name; long count, rows, cols; } tiny_tensors[] = {
    {"emb.i", 4, 6, 8},
    {"text_emb", 1, 8, 8},
    {"text_linear", 1, 7, 8},
    {"out_norm", 1, 1, 8},
    {"transformer.layers.l.norm1/norm2", 2 * 2, 1, 8},
    {"transformer.layers.l.self_attn.in_proj_weight", 2, 24, 8},
    {"transformer.layers.l.self_attn.out_proj.weight", 2, 8, 8},
    {"transformer.layers.l.gating.linear_in.weight", 2, 44, 8},
    {"transformer.layers.l.gating.linear_out.weight", 2, 8, 22},
    {"depformer_in.k", 2, 4, 8},
    {"linears.k", 2, 5, 4},
    {"depformer_emb.k (k < dep_q - 1)", 1, 6, 4},
    {"depformer_text_emb", 1, 8, 4},
    {"depformer.layers.0.norm1/norm2", 2, 1, 4},
    {"depformer.layers.0.self_attn.in_proj_weight (dep_q x 3dd rows)", 1, 24, 4},
    {"depformer.layers.0.self_attn.out_proj.weight (dep_q x dd rows)", 1, 8, 4},
    {"depformer.layers.0.gating.k.linear_in.weight", 2, 16, 4},
    {"depformer.layers.0.gating.k.linear_out.weight", 2, 4, 8},
};

static cu_plan plan_of(const lm_config *c, cu_plan_req r) {
    cu_plan p;
    ck_assert_msg(cu_plan_compute(c, &r, &p) == 0, "plan refused: slots %d context %d", r.slots, r.context);
    return p;
}

START_TEST(test_tiny_exact) {
    lm_config c;
    tiny(&c);
    long elems = 0;
    for (size_t i = 0; i < sizeof tiny_tensors / sizeof tiny_tensors[0]; i++)
        elems += tiny_tensors[i].count * tiny_tensors[i].rows * tiny_tensors[i].cols;
    ck_assert_int_eq(elems, 2408);   /* the table's sum, also added up by hand */
    cu_plan_req r = {.slots = 3, .snapshots = 2, .snap_positions = 6, .weight_bytes_per_el = 2};
    cu_plan p = plan_of(&c, r);
    ck_assert_uint_eq(p.weights, 2408 * 2);
    /* keys and values x 2 layers x 10 positions x dim 8 x bf16 */
    ck_assert_uint_eq(p.kv_per_slot, 2 * 2 * 10 * 8 * 2);
    ck_assert_uint_eq(p.kv, 640 * (3 + 1));   /* the scratch slot */
    ck_assert_uint_eq(p.snapshots, 2 * (2 * 2 * 6 * 8 * 2));
    /* Workspace (the planner's estimate, pinned here so that a change to
     * it is a deliberate one): rows = max(bucket 3, prefill 64) = 64; per
     * row in floats: temporal 7 x 8 + 3 x 22 = 122, depformer 6 x 4 + 3 x 8
     * = 48, its inputs 2 sub-steps x 4 = 8, its K/V 2 x 1 layer x 2
     * sub-steps x 4 = 16, logits 7 + 2 x 5 = 17, attention splits 2 heads x
     * ceil(10 / 256) x (4 + 2) = 12: 223 floats = 892 bytes, + the bf16 copy
     * of max(8, 22) = 44, + 512 of step I/O = 1448 a row; + the prefill
     * chunk's scores 64 x 2 heads x 10 x 4. */
    ck_assert_uint_eq(p.workspace, 1448 * 64 + 64 * 2 * 10 * 4);
    /* graphs: buckets 1, 2, 3; nodes 2 x 12 + 2 x 1 x 12 + 2 x 8 + 32 = 96,
     * 8 KiB each */
    ck_assert_uint_eq(p.graphs, 3 * 96 * 8192);
    ck_assert_uint_eq(p.codec, 0);
    size_t sum = 4816 + 2560 + 768 + 97792 + 2359296;
    /* 3 % of 2,465,232 is 73,956.96: rounded up */
    ck_assert_uint_eq(p.reserve, 500 * MIB + 64 * MIB + 73957);
    ck_assert_uint_eq(p.total, sum + p.reserve);
    ck_assert_uint_eq(p.total, 593936053);

    /* the codec: 96,151,393 float32 weights; per slot two transformers' K/V
     * (2 x 2 x 8 layers x 250 x 512 x 4 bytes) + 1 MiB of conv state; 5 MiB
     * a bucket row (cu_mimi's two sides' workspaces) */
    r.codec = 1;
    cu_plan q = plan_of(&c, r);
    ck_assert_uint_eq(q.codec, 96151393u * 4 + 3 * (16384000 + MIB) + 3 * 5 * MIB);
    ck_assert_uint_eq(q.weights, p.weights);
}
END_TEST

/* The released Moshi 7B (moshiko, bf16): its 355 tensors in
 * ../shared/spec/moshiko-7b-tensors.txt hold 7,687,729,152 parameters (the
 * product of each listed shape, summed: 15,375,458,304 bytes in bf16, the
 * "15.4 GB" of the file, depformer and embeddings included). The planner,
 * from lm_config_default alone, must give exactly that. */
START_TEST(test_7b_weights) {
    lm_config c;
    lm_config_default(&c);
    cu_plan_req r = {.slots = 1, .weight_bytes_per_el = 2};
    cu_plan p = plan_of(&c, r);
    ck_assert_uint_eq(p.weights, (size_t)7687729152 * 2);
    /* K/V of one slot: 2 x 32 x 3000 x 4096 x 2 = 1.57 GB */
    ck_assert_uint_eq(p.kv_per_slot, (size_t)2 * 32 * 3000 * 4096 * 2);
    r.weight_bytes_per_el = 4;
    ck_assert_uint_eq(plan_of(&c, r).weights, (size_t)7687729152 * 4);
    /* PersonaPlex: the same shape with 16 depformer sub-steps. Each extra
     * sub-step adds, from the per-step tensors of the list above:
     * depformer_in.k 1024 x 4096, linears.k 2048 x 1024, depformer_emb.k
     * 2049 x 1024, and per depformer layer (6) a 3 x 1024 row block of
     * in_proj, a 1024 row block of out_proj, gating.k linear_in 5632 x 1024
     * and linear_out 1024 x 2816. */
    size_t per_step = (size_t)1024 * 4096 + 2048 * 1024 + 2049 * 1024 +
                      6 * ((size_t)3 * 1024 * 1024 + 1024 * 1024 + 5632 * 1024 + 1024 * 2816);
    c.dep_q = 16;
    c.variant = LM_VARIANT_PERSONAPLEX;
    ms_error e;
    ck_assert_int_eq(lm_config_finish(&c, &e), MS_OK);
    r.weight_bytes_per_el = 2;
    ck_assert_uint_eq(plan_of(&c, r).weights, ((size_t)7687729152 + 8 * per_step) * 2);
}
END_TEST

/* More of anything asked never needs less memory. */
START_TEST(test_monotonic) {
    lm_config c;
    lm_config_default(&c);
    cu_plan_req r = {.slots = 1, .max_bucket = 64, .weight_bytes_per_el = 2, .codec = 1};
    size_t prev = 0, prev_kv = 0;
    for (int n = 1; n <= 200; n++) {
        r.slots = n;
        cu_plan p = plan_of(&c, r);
        ck_assert_msg(p.total >= prev, "slots %d: %zu < %zu", n, p.total, prev);
        ck_assert(p.kv > prev_kv);   /* each slot adds its ring */
        prev = p.total;
        prev_kv = p.kv;
    }
    r.slots = 8;
    prev = 0;
    for (int ctx = 1; ctx <= 6000; ctx += 97) {
        r.context = ctx;
        cu_plan p = plan_of(&c, r);
        ck_assert_msg(p.total > prev, "context %d", ctx);
        prev = p.total;
    }
    r.context = 3000;
    r.snap_positions = 300;
    prev = 0;
    for (int s = 0; s <= 40; s++) {
        r.snapshots = s;
        cu_plan p = plan_of(&c, r);
        ck_assert(s == 0 ? p.snapshots == 0 : p.total > prev);
        prev = p.total;
    }
    /* the parts add up to the total */
    cu_plan p = plan_of(&c, r);
    ck_assert_uint_eq(p.total, p.weights + p.kv + p.snapshots + p.workspace + p.graphs + p.codec + p.reserve);
}
END_TEST

/* cu_plan_max_slots: plan(max) fits, plan(max + 1) does not, at both
 * ends and for the card sizes of docs/operations.md. */
START_TEST(test_max_slots_boundaries) {
    lm_config c;
    lm_config_default(&c);
    cu_plan_req r = {.slots = 1, .max_bucket = 64, .weight_bytes_per_el = 2, .codec = 1};
    const size_t cards[] = {24 * GB, 48 * GB, 80 * GB, 141 * GB};
    const int contexts[] = {3000, 750};
    int last = 0;
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t k = 0; k < 4; k++) {
            r.context = contexts[ci];
            int m = cu_plan_max_slots(&c, &r, cards[k]);
            ck_assert_int_ge(m, 1);
            if (ci == 0) {
                ck_assert_int_gt(m, last);
                last = m;
            }
            cu_plan_req a = r, b = r;
            a.slots = m;
            b.slots = m + 1;
            ck_assert_uint_le(plan_of(&c, a).total, cards[k]);
            cu_plan pb;
            ck_assert(cu_plan_compute(&c, &b, &pb) != 0 || pb.total > cards[k]);
        }
    /* exactly one slot's plan: 1; a byte less: 0 */
    r.context = 3000;
    cu_plan_req one = r;
    one.slots = 1;
    size_t t1 = plan_of(&c, one).total;
    ck_assert_int_eq(cu_plan_max_slots(&c, &r, t1), 1);
    ck_assert_int_eq(cu_plan_max_slots(&c, &r, t1 - 1), 0);
    ck_assert_int_eq(cu_plan_max_slots(&c, &r, 0), 0);
    /* the tiny model on a vast card: the backend's slot limit */
    lm_config t;
    tiny(&t);
    ck_assert_int_eq(cu_plan_max_slots(&t, &r, SIZE_MAX), LM_MAX_SLOTS);
    /* an invalid request fits nowhere */
    r.weight_bytes_per_el = 3;
    ck_assert_int_eq(cu_plan_max_slots(&t, &r, SIZE_MAX), 0);
}
END_TEST

START_TEST(test_refused) {
    lm_config c;
    tiny(&c);
    cu_plan p;
    cu_plan_req ok = {.slots = 2, .weight_bytes_per_el = 2};
    ck_assert_int_eq(cu_plan_compute(&c, &ok, &p), 0);
    cu_plan_req r = ok;
    r.slots = 0;
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    r.slots = LM_MAX_SLOTS + 1;
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    r = ok;
    r.weight_bytes_per_el = 0;
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    r = ok;
    r.snap_positions = 11;   /* more than the context of 10 */
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    r = ok;
    r.snapshots = -1;
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    r = ok;
    r.context = LM_MAX_CONTEXT + 1;
    ck_assert_int_eq(cu_plan_compute(&c, &r, &p), -1);
    ck_assert_int_eq(cu_plan_compute(NULL, &ok, &p), -1);
    /* a config the loader would refuse (dim not divisible by heads) */
    lm_config bad = c;
    bad.num_heads = 3;
    ck_assert_int_eq(cu_plan_compute(&bad, &ok, &p), -1);

    /* Overflow: the largest config the loader accepts, a full-length
     * snapshot of 2^20 positions, and INT_MAX snapshots: 2 x 256 layers x
     * 2^20 x 16384 x 2 bytes = 2^44 bytes each, x 2^31 = 2^75 > SIZE_MAX. */
    lm_config big;
    lm_config_default(&big);
    big.dim = LM_MAX_DIM;
    big.num_heads = 128;
    big.num_layers = LM_MAX_LAYERS;
    big.context = LM_MAX_CONTEXT;
    ms_error e;
    ck_assert_int_eq(lm_config_finish(&big, &e), MS_OK);
    cu_plan_req o = {.slots = 1, .snapshots = INT_MAX, .snap_positions = LM_MAX_CONTEXT, .weight_bytes_per_el = 2};
    memset(&p, 0x5a, sizeof p);
    ck_assert_int_eq(cu_plan_compute(&big, &o, &p), -1);
    ck_assert_uint_eq(p.total, 0);   /* zeroed, not a wrapped figure */
    /* one snapshot of it is 16 TiB (2^44 bytes): computed, not refused */
    o.snapshots = 1;
    ck_assert_int_eq(cu_plan_compute(&big, &o, &p), 0);
    ck_assert_uint_eq(p.snapshots, (size_t)1 << 44);
}
END_TEST

START_TEST(test_buckets_describe) {
    int s[CU_PLAN_MAX_BUCKETS];
    ck_assert_int_eq(cu_plan_buckets(12, s, CU_PLAN_MAX_BUCKETS), 5);
    ck_assert(s[0] == 1 && s[1] == 2 && s[2] == 4 && s[3] == 8 && s[4] == 12);
    ck_assert_int_eq(cu_plan_buckets(1, s, CU_PLAN_MAX_BUCKETS), 1);
    ck_assert_int_eq(s[0], 1);
    ck_assert_int_eq(cu_plan_buckets(64, s, CU_PLAN_MAX_BUCKETS), 7);
    ck_assert_int_eq(s[6], 64);
    ck_assert_int_eq(cu_plan_buckets(LM_MAX_SLOTS, s, CU_PLAN_MAX_BUCKETS), 11);
    ck_assert_int_eq(cu_plan_buckets(64, s, 6), -1);   /* does not fit in cap */
    ck_assert_int_eq(cu_plan_buckets(0, s, CU_PLAN_MAX_BUCKETS), -1);

    lm_config c;
    lm_config_default(&c);
    cu_plan_req r = {.slots = 32, .max_bucket = 32, .weight_bytes_per_el = 2};
    cu_plan p = plan_of(&c, r);
    char buf[512];
    cu_plan_describe(&p, 32, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "weights 14.32 GiB") && strstr(buf, "(32 + 1 scratch) x 1.465 GiB") &&
                      strstr(buf, " = ") && strstr(buf, "GiB"),
                  "%s", buf);
    /* bounded: a short buffer is cut, terminated */
    char small[16];
    memset(small, 'x', sizeof small);
    cu_plan_describe(&p, 32, small, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_ptr_eq(cu_plan_describe(&p, 32, small, 0), small);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_tiny_exact);
    tcase_add_test(tc, test_7b_weights);
    tcase_add_test(tc, test_monotonic);
    tcase_add_test(tc, test_max_slots_boundaries);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_buckets_describe);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
