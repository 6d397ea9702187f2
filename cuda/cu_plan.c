/* cu_plan.c - the CUDA backend's memory plan (see cu_plan.h).
 *
 * Exact where the layout is fixed by the model: the weights (every tensor
 * the loader reads, engine/lm/lm.c, at the stored width), the K/V rings and
 * the snapshots. Estimates where it depends on the backend's code or on
 * the driver: the workspaces (what the step keeps per row), the captured
 * graphs, the codec's state and the reserve (CUDA context, cuBLAS
 * workspace, fragmentation). Every estimate is a named constant below with
 * what it stands for; all of them are to be checked on hardware against
 * what cudaMemGetInfo reports after open (the device check), and corrected
 * here.
 *
 * Arithmetic is in size_t with every product and sum checked: a hostile
 * config.json or request cannot wrap a size into a small plan that "fits".
 */
#include "cu_plan.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"   /* LM_MAX_SLOTS */

#define MIB ((size_t)1 << 20)

/* ---- the estimates (unverified on hardware) ---------------------------- */

/* CUDA context of one device: driver, module images of the plugin's
 * kernels (SASS for three architectures), the default stream, printf and
 * malloc heaps. 300 to 500 MiB on the GPUs we target, by NVIDIA's and
 * users' reports; the upper figure is taken. */
#define PLAN_CUDA_CONTEXT (500 * MIB)
/* cuBLAS workspace: 32 MiB per handle on Hopper (NVIDIA's recommended
 * CUBLAS_WORKSPACE_CONFIG for sm_90), one handle per stream, two streams
 * (the LM's and the codec's). */
#define PLAN_CUBLAS_WORKSPACE (2 * 32 * MIB)
/* Fragmentation margin: allocations rounded to the allocator's granularity
 * (2 MiB pages for large buffers) and gaps between them: 3 % of the rest. */
#define PLAN_FRAG_PERCENT 3
/* Captured graph: the driver keeps per kernel node its parameters and a
 * launch descriptor; about 8 KiB a node is a generous figure. Nodes of one
 * step: about 12 kernels per temporal layer, 12 per depformer layer and
 * sub-step, 8 per sub-step for its head and sampler, 32 around them
 * (gather, out_norm, text head, sampler, copies). */
#define PLAN_GRAPH_NODE_BYTES ((size_t)8 << 10)
#define PLAN_GRAPH_NODES_PER_LAYER 12
#define PLAN_GRAPH_NODES_PER_SUBSTEP 8
#define PLAN_GRAPH_NODES_FIXED 32
/* Per row of a step, the small upload (tokens, targets, flags, slot index,
 * position, sampling parameters, seeds) and download (sampled tokens):
 * under 512 bytes for dep_q <= 16. */
#define PLAN_STEP_IO_PER_ROW 512

/* The Mimi codec on the device (cuda/cu_mimi.c), counted when req->codec
 * is set (the CUDA backend sets it unless MOSHID_CU_MIMI=cpu keeps the
 * codec on the host). From ../shared/spec/mimi.md and mimi-tensors.txt:
 * the released checkpoint holds 96,151,393 parameters (all 32 codebooks;
 * the device codec uploads the 8 it uses, so this over-counts by the 24
 * others' 12.6 M), kept in float32 (cu_mimi's storage: the codes must equal the CPU's).
 * Each slot has an encoder and a decoder transformer (8 layers, d_model
 * 512, a K/V ring of 250 steps, float32) plus the causal convolutions'
 * state (under 1 MiB, estimated at 1 MiB). A batch row has, for each of the
 * encode and the decode side (their own workspaces, so that a decode
 * overlaps the next encode), five buffers of the widest SEANet activation
 * (64 channels x 1926 columns, float32, 0.49 MB): 4.7 MiB, counted as
 * 5 MiB. */
#define PLAN_MIMI_PARAMS ((size_t)96151393)
#define PLAN_MIMI_WEIGHT_BYTES 4
#define PLAN_MIMI_TR_LAYERS 8
#define PLAN_MIMI_TR_CONTEXT 250
#define PLAN_MIMI_TR_DIM 512
#define PLAN_MIMI_CONV_STATE (1 * MIB)
#define PLAN_MIMI_WS_PER_ROW (5 * MIB)

/* ---- checked arithmetic: a sticky overflow flag ------------------------ */

static size_t mul(int *ovf, size_t a, size_t b) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        *ovf = 1;
        return 0;
    }
    return r;
}

static size_t mul3(int *ovf, size_t a, size_t b, size_t c) {
    return mul(ovf, mul(ovf, a, b), c);
}

static size_t add(int *ovf, size_t a, size_t b) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        *ovf = 1;
        return 0;
    }
    return r;
}

/* ---- the parts ---------------------------------------------------------- */

/* Elements of every LM tensor the loader reads (engine/lm/lm.c), norm
 * scales included (they are 0.004 % of the 7B and counted at the same
 * width, so the 7B's figure is the checkpoint's own size). */
static size_t weight_elems(const lm_config *c, int *ovf) {
    size_t D = (size_t)c->dim, dd = (size_t)c->depformer_dim;
    size_t H = (size_t)c->hidden, Hd = (size_t)c->dep_hidden;
    size_t card = (size_t)c->card, tcard = (size_t)c->text_card;
    size_t Q = (size_t)c->dep_q;
    size_t e = 0;
    e = add(ovf, e, mul3(ovf, (size_t)c->n_q, card + 1, D));   /* emb.i (card + 1, D) */
    e = add(ovf, e, mul(ovf, tcard + 1, D));                    /* text_emb (text_card + 1, D) */
    e = add(ovf, e, mul(ovf, tcard, D));                        /* text_linear (text_card, D) */
    e = add(ovf, e, D);                                         /* out_norm */
    /* a temporal layer: norm1, norm2 (D); in_proj (3D, D); out_proj (D, D);
     * gating linear_in (2H, D), linear_out (D, H) */
    size_t layer = add(ovf, 2 * D, mul(ovf, D, add(ovf, 4 * D, 3 * H)));
    e = add(ovf, e, mul(ovf, (size_t)c->num_layers, layer));
    /* per depformer step: depformer_in.k (dd, D), linears.k (card, dd); the
     * first dep_q - 1 steps feed their token through depformer_emb.k
     * (card + 1, dd) */
    e = add(ovf, e, mul(ovf, Q, add(ovf, mul(ovf, dd, D), mul(ovf, card, dd))));
    e = add(ovf, e, mul3(ovf, Q - 1, card + 1, dd));
    e = add(ovf, e, mul(ovf, tcard + 1, dd));                   /* depformer_text_emb */
    /* a depformer layer: norm1, norm2 (dd); per step in_proj (3dd, dd),
     * out_proj (dd, dd), gating linear_in (2Hd, dd), linear_out (dd, Hd) */
    size_t step = mul(ovf, dd, add(ovf, 4 * dd, 3 * Hd));
    size_t dlayer = add(ovf, 2 * dd, mul(ovf, Q, step));
    e = add(ovf, e, mul(ovf, (size_t)c->depformer_num_layers, dlayer));
    return e;
}

/* The 8-bit weight scheme's split of weight_elems: *lin the elements of
 * the linear matrices (int8), *rows their rows (a float32 scale each); the
 * rest (embedding tables, norms) keeps its width. */
static void w8_parts(const lm_config *c, size_t *lin, size_t *rows, int *ovf) {
    size_t D = (size_t)c->dim, dd = (size_t)c->depformer_dim, Q = (size_t)c->dep_q;
    size_t H = (size_t)c->hidden, Hd = (size_t)c->dep_hidden, card = (size_t)c->card;
    size_t tcard = (size_t)c->text_card, L = (size_t)c->num_layers, DL = (size_t)c->depformer_num_layers;
    size_t l = mul(ovf, tcard, D);                                                /* text_linear */
    l = add(ovf, l, mul3(ovf, L, D, add(ovf, 4 * D, 3 * H)));                    /* temporal layers */
    l = add(ovf, l, mul(ovf, Q, add(ovf, mul(ovf, dd, D), mul(ovf, card, dd)))); /* depformer_in, linears */
    l = add(ovf, l, mul3(ovf, mul(ovf, DL, Q), dd, add(ovf, 4 * dd, 3 * Hd)));   /* depformer layers */
    *lin = l;
    size_t r = add(ovf, tcard, mul(ovf, L, add(ovf, 5 * D, 2 * H)));
    r = add(ovf, r, mul(ovf, Q, dd + card));
    *rows = add(ovf, r, mul3(ovf, DL, Q, add(ovf, 5 * dd, 2 * Hd)));
}

/* Bytes of K/V for `positions` positions of one slot: keys and values of
 * every temporal layer, bf16; kv8: int8 and a float32 scale per head. */
static size_t kv_bytes(const lm_config *c, size_t positions, int kv8, int *ovf) {
    size_t per = kv8 ? add(ovf, (size_t)c->dim, mul(ovf, (size_t)c->num_heads, sizeof(float)))
                     : mul(ovf, (size_t)c->dim, 2);
    return mul(ovf, mul3(ovf, 2, (size_t)c->num_layers, positions), per);
}

/* A slot's ring: kv_bytes, or with kv8 the backend's layout exactly (each
 * layer's view rounded up to 16 bytes, cu_kv_q8_layer_bytes). */
static size_t ring_bytes(const lm_config *c, size_t ctx, int kv8, int *ovf) {
    if (!kv8) return kv_bytes(c, ctx, 0, ovf);
    size_t layer = add(ovf, mul3(ovf, 2, ctx, (size_t)c->dim), mul3(ovf, 2 * sizeof(float), (size_t)c->num_heads, ctx));
    return mul(ovf, (size_t)c->num_layers, add(ovf, layer, 15) & ~(size_t)15);
}

/* Workspace of a step over `rows` rows at context `ctx` (float32
 * activations; an estimate of what the step keeps, see below). */
static size_t workspace_bytes(const lm_config *c, size_t rows, size_t ctx, int *ovf) {
    size_t D = (size_t)c->dim, dd = (size_t)c->depformer_dim;
    size_t H = (size_t)c->hidden, Hd = (size_t)c->dep_hidden;
    size_t Q = (size_t)c->dep_q;
    size_t f = 0;   /* floats per row */
    /* temporal (cu_backend.c's buffers): residual x, q k v, attention out,
     * the int8 GEMM path's product before its add (D each; the norms are
     * folded into the products, no normed copy), the gated FFN's 2H input
     * and H product, and a prefill chunk's staged bf16 K/V (2D bf16: D
     * floats) */
    f = add(ovf, f, add(ovf, 7 * D, 3 * H));
    /* depformer: the same for dd and Hd (no staged K/V), the dep_q input
     * projections made before the first sub-step (dinp), plus its K/V over
     * the dep_q sub-steps of every depformer layer (float32: it lives one
     * step) */
    f = add(ovf, f, add(ovf, 6 * dd, 3 * Hd));
    f = add(ovf, f, mul(ovf, Q, dd));
    f = add(ovf, f, mul3(ovf, 2 * (size_t)c->depformer_num_layers, Q, dd));
    /* logits sampled from: text, then dep_q x card */
    f = add(ovf, f, add(ovf, (size_t)c->text_card, mul(ovf, Q, (size_t)c->card)));
    /* attention split scratch: per head and split a max, a sum and a
     * head_dim accumulator */
    size_t splits = (ctx + CU_PLAN_ATTN_SPLIT - 1) / CU_PLAN_ATTN_SPLIT;
    f = add(ovf, f, mul3(ovf, (size_t)c->num_heads, splits, (size_t)c->head_dim + 2));
    size_t bytes = mul(ovf, f, sizeof(float));
    /* the GEMMs read bf16 activations: a bf16 copy of the widest input */
    bytes = add(ovf, bytes, mul(ovf, D > H ? D : H, 2));
    bytes = add(ovf, bytes, PLAN_STEP_IO_PER_ROW);
    bytes = mul(ovf, bytes, rows);
    /* a prefill chunk's scores: rows x heads x context, float32 (the
     * chunk's activations share the rows above) */
    bytes = add(ovf, bytes, mul3(ovf, CU_PLAN_PREFILL_ROWS, (size_t)c->num_heads, mul(ovf, ctx, sizeof(float))));
    return bytes;
}

/* Captured graphs' overhead, an estimate (PLAN_GRAPH_*): one graph per
 * bucket, each with the nodes of one step. */
static size_t graph_bytes(const lm_config *c, int buckets, int *ovf) {
    /* a graph holds CU_PLAN_GRAPH_DEP_STEPS sub-steps at most (PersonaPlex's
     * 16 run uncaptured when a call asks for them all) */
    size_t Q = (size_t)(c->dep_q < CU_PLAN_GRAPH_DEP_STEPS ? c->dep_q : CU_PLAN_GRAPH_DEP_STEPS);
    size_t nodes = mul(ovf, (size_t)c->num_layers, PLAN_GRAPH_NODES_PER_LAYER);
    nodes = add(ovf, nodes, mul3(ovf, Q, (size_t)c->depformer_num_layers, PLAN_GRAPH_NODES_PER_LAYER));
    nodes = add(ovf, nodes, mul(ovf, Q, PLAN_GRAPH_NODES_PER_SUBSTEP));
    nodes = add(ovf, nodes, PLAN_GRAPH_NODES_FIXED);
    return mul3(ovf, nodes, PLAN_GRAPH_NODE_BYTES, (size_t)buckets);
}

/* The codec: weights once, state per slot, scratch per bucket row. */
static size_t codec_bytes(size_t slots, size_t rows, int *ovf) {
    size_t w = mul(ovf, PLAN_MIMI_PARAMS, PLAN_MIMI_WEIGHT_BYTES);
    /* encoder and decoder transformers: keys and values, float32 */
    size_t tr = mul(ovf, 2 * 2 * (size_t)PLAN_MIMI_TR_LAYERS * PLAN_MIMI_TR_CONTEXT * PLAN_MIMI_TR_DIM, sizeof(float));
    size_t per_slot = add(ovf, tr, PLAN_MIMI_CONV_STATE);
    return add(ovf, add(ovf, w, mul(ovf, slots, per_slot)), mul(ovf, rows, PLAN_MIMI_WS_PER_ROW));
}

int cu_plan_buckets(int max_bucket, int *sizes, int cap) {
    if (max_bucket < 1 || cap < 0) return -1;
    int n = 0;
    for (int b = 1; b < max_bucket; b *= 2) {
        if (n == cap) return -1;
        sizes[n++] = b;
    }
    if (n == cap) return -1;
    sizes[n++] = max_bucket;
    return n;
}

int cu_plan_compute(const lm_config *cfg, const cu_plan_req *req, cu_plan *out) {
    if (!cfg || !req || !out) return -1;
    memset(out, 0, sizeof *out);
    /* the derived sizes again, on a copy: a hand-made or hostile config
     * is checked against the loader's bounds before anything is sized */
    lm_config c = *cfg;
    if (lm_config_finish(&c, NULL) != MS_OK) return -1;
    int ctx = req->context > 0 ? req->context : c.context;
    if (req->slots < 1 || req->slots > LM_MAX_SLOTS || ctx > LM_MAX_CONTEXT || req->snapshots < 0 ||
        req->snap_positions < 0 || req->snap_positions > ctx ||
        (req->weight_bytes_per_el != 1 && req->weight_bytes_per_el != 2 && req->weight_bytes_per_el != 4))
        return -1;
    /* a bucket larger than the slots would only pad: clamped */
    int bucket = req->max_bucket > 0 && req->max_bucket < req->slots ? req->max_bucket : req->slots;
    int sizes[CU_PLAN_MAX_BUCKETS];
    int nb = cu_plan_buckets(bucket, sizes, CU_PLAN_MAX_BUCKETS);
    if (nb < 1) return -1;
    /* the prefill chunk shares the bucket's rows: whichever is larger */
    size_t rows = bucket > CU_PLAN_PREFILL_ROWS ? (size_t)bucket : CU_PLAN_PREFILL_ROWS;
    int ovf = 0;
    cu_plan p = {0};
    p.weights = mul(&ovf, weight_elems(&c, &ovf), (size_t)req->weight_bytes_per_el);
    if (req->w8) {   /* the linear matrices at 1 byte and a scale per row, the rest as stored */
        size_t lin = 0, wrows = 0;
        w8_parts(&c, &lin, &wrows, &ovf);
        size_t keep = weight_elems(&c, &ovf) - lin;
        p.weights = add(&ovf, add(&ovf, lin, mul(&ovf, wrows, sizeof(float))),
                        mul(&ovf, keep, (size_t)req->weight_bytes_per_el));
    }
    p.kv_per_slot = ring_bytes(&c, (size_t)ctx, req->kv8, &ovf);
    /* one scratch slot more: a bucket's padding rows write their K/V there */
    p.kv = mul(&ovf, p.kv_per_slot, (size_t)req->slots + 1);
    p.snapshots = mul(&ovf, kv_bytes(&c, (size_t)req->snap_positions, req->kv8, &ovf), (size_t)req->snapshots);
    p.workspace = workspace_bytes(&c, rows, (size_t)ctx, &ovf);
    if (req->w8) p.workspace = add(&ovf, p.workspace, CU_PLAN_Q8_SCRATCH * 2);
    p.graphs = graph_bytes(&c, nb, &ovf);
    p.codec = req->codec ? codec_bytes((size_t)req->slots, (size_t)bucket, &ovf) : 0;
    size_t sum = 0;
    sum = add(&ovf, sum, p.weights);
    sum = add(&ovf, sum, p.kv);
    sum = add(&ovf, sum, p.snapshots);
    sum = add(&ovf, sum, p.workspace);
    sum = add(&ovf, sum, p.graphs);
    sum = add(&ovf, sum, p.codec);
    /* 3 % of the rest, rounded up (sum / 100 first: sum * 3 may overflow) */
    size_t frag = add(&ovf, mul(&ovf, sum / 100, PLAN_FRAG_PERCENT), (sum % 100 * PLAN_FRAG_PERCENT + 99) / 100);
    p.reserve = add(&ovf, PLAN_CUDA_CONTEXT + PLAN_CUBLAS_WORKSPACE, frag);
    p.total = add(&ovf, sum, p.reserve);
    if (ovf) return -1;
    *out = p;
    return 0;
}

int cu_plan_max_slots(const lm_config *cfg, const cu_plan_req *req, size_t device_bytes) {
    if (!cfg || !req) return 0;
    /* total(slots) does not decrease with slots (K/V, codec state, the
     * clamped bucket, the margin all grow), so the largest fitting count
     * is found by bisection: lo fits (0 trivially), hi does not. A plan
     * that cannot be computed (invalid, or overflow) does not fit. */
    int lo = 0, hi = LM_MAX_SLOTS + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        cu_plan_req r = *req;
        r.slots = mid;
        cu_plan p;
        if (cu_plan_compute(cfg, &r, &p) == 0 && p.total <= device_bytes) lo = mid;
        else hi = mid;
    }
    return lo;
}

char *cu_plan_describe(const cu_plan *p, int slots, char *buf, size_t len) {
    if (!buf || len == 0) return buf;
    const double G = 1024.0 * 1024.0 * 1024.0;
    snprintf(buf, len,
             "weights %.2f GiB + K/V (%d + 1 scratch) x %.3f GiB + snapshots %.2f GiB + workspace %.2f GiB + "
             "graphs %.2f GiB + codec %.2f GiB + reserve %.2f GiB = %.2f GiB",
             p->weights / G, slots, p->kv_per_slot / G, p->snapshots / G, p->workspace / G, p->graphs / G,
             p->codec / G, p->reserve / G, p->total / G);
    return buf;
}
