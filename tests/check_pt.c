/* check_pt.c - torch.save files read as data (engine/base/pt.c): the voice
 * files torch itself wrote (tests/fixtures/voice_pt, gen_voice_pt.py) read
 * to the same values as their safetensors source, and hostile archives and
 * pickles built here byte by byte refused with a message (never run: the
 * reader has nothing that could run them). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "pt.h"
#include "st.h"

#define FIX "tests/fixtures/voice_pt"
#define PP_VOICE "tests/fixtures/pp/pp_d1/voice.safetensors"

START_TEST(test_torch_fixture_f32) {
    ms_error e = {0};
    pt_file *f = pt_open(FIX "/pp_d1_voice.pt", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    st_file *s = st_open(PP_VOICE, &e);
    ck_assert_msg(s != NULL, "%s", e.msg);
    ck_assert_uint_eq(pt_count(f), 2);
    ck_assert_str_eq(pt_at(f, 0)->name, "embeddings"); /* the dict's order */
    const st_tensor *pe = pt_find(f, "embeddings"), *pc = pt_find(f, "cache");
    const st_tensor *se = st_find(s, "embeddings"), *sc = st_find(s, "cache");
    ck_assert_ptr_nonnull(pe);
    ck_assert_ptr_nonnull(pc);
    ck_assert_int_eq(pe->dtype, ST_F32);
    ck_assert_int_eq(pe->ndim, 4); /* (T, 1, 1, dim) as PersonaPlex stacks them */
    ck_assert_int_eq(pe->shape[0], se->shape[0]);
    ck_assert_int_eq(pe->shape[1], 1);
    ck_assert_int_eq(pe->shape[2], 1);
    ck_assert_int_eq(pe->shape[3], se->shape[1]);
    ck_assert_mem_eq(pe->data, se->data, se->nbytes); /* the same floats, bit for bit */
    ck_assert_int_eq(pc->dtype, ST_I64);
    ck_assert_int_eq(pc->ndim, 3);
    ck_assert_int_eq(pc->shape[0], 1);
    ck_assert_uint_eq(pc->nel, sc->nel);
    for (uint64_t i = 0; i < sc->nel; i++) {
        int64_t a;
        int32_t b;
        memcpy(&a, (const char *)pc->data + 8 * i, 8);
        memcpy(&b, (const char *)sc->data + 4 * i, 4);
        ck_assert_int_eq(a, b);
    }
    ck_assert_ptr_null(pt_find(f, "nothing"));
    pt_close(f);
    st_close(s);
}
END_TEST

START_TEST(test_torch_fixture_bf16) {
    ms_error e = {0};
    pt_file *f = pt_open(FIX "/pp_d1_voice_bf16.pt", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    st_file *s = st_open(PP_VOICE, &e);
    const st_tensor *pe = pt_find(f, "embeddings"), *se = st_find(s, "embeddings");
    ck_assert_int_eq(pe->dtype, ST_BF16);
    float *a = malloc(sizeof(float) * pe->nel), *b = malloc(sizeof(float) * se->nel);
    ck_assert_int_eq(st_to_f32(pe, 0, pe->nel, a), MS_OK);
    ck_assert_int_eq(st_to_f32(se, 0, se->nel, b), MS_OK);
    /* torch's bf16 rounding is to nearest even, as st_f32_to_bf16 */
    for (uint64_t i = 0; i < se->nel; i++) ck_assert_float_eq(a[i], st_bf16_to_f32(st_f32_to_bf16(b[i])));
    free(a);
    free(b);
    pt_close(f);
    st_close(s);
}
END_TEST

/* ---- archives built here ---- */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} buf;

static void put(buf *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 256;
        o->b = realloc(o->b, o->cap);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put16(buf *o, uint32_t x) { uint8_t b[2] = {(uint8_t)x, (uint8_t)(x >> 8)}; put(o, b, 2); }
static void put32(buf *o, uint32_t x) { put16(o, x & 0xffff); put16(o, x >> 16); }

static uint32_t crc32_ref(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

typedef struct {
    const char *name;
    const void *data;
    size_t n;
} ent;

/* A stored zip of the entries (method: 0, or another to test refusals). */
static buf zip_of(const ent *e, int ne, int method) {
    buf o = {0}, cd = {0};
    for (int i = 0; i < ne; i++) {
        uint32_t off = (uint32_t)o.n, crc = crc32_ref(e[i].data, e[i].n), nl = (uint32_t)strlen(e[i].name);
        put32(&o, 0x04034b50u); put16(&o, 20); put16(&o, 0); put16(&o, (uint32_t)method); put32(&o, 0);
        put32(&o, crc); put32(&o, (uint32_t)e[i].n); put32(&o, (uint32_t)e[i].n); put16(&o, nl); put16(&o, 0);
        put(&o, e[i].name, nl);
        put(&o, e[i].data, e[i].n);
        put32(&cd, 0x02014b50u); put16(&cd, 20); put16(&cd, 20); put16(&cd, 0); put16(&cd, (uint32_t)method);
        put32(&cd, 0); put32(&cd, crc); put32(&cd, (uint32_t)e[i].n); put32(&cd, (uint32_t)e[i].n);
        put16(&cd, nl); put16(&cd, 0); put16(&cd, 0); put16(&cd, 0); put16(&cd, 0); put32(&cd, 0); put32(&cd, off);
        put(&cd, e[i].name, nl);
    }
    uint32_t cdo = (uint32_t)o.n;
    put(&o, cd.b, cd.n);
    put32(&o, 0x06054b50u); put16(&o, 0); put16(&o, 0); put16(&o, (uint32_t)ne); put16(&o, (uint32_t)ne);
    put32(&o, (uint32_t)cd.n); put32(&o, cdo); put16(&o, 0);
    free(cd.b);
    return o;
}

/* A pickle of {"x": tensor} in torch.save's opcodes: a float storage "0"
 * of numel elements at location loc, shape (a, b), the given strides.
 * glob: the rebuild function's GLOBAL text (to put another name there). */
static buf pickle_one(const char *glob, const char *stype, const char *loc, int numel, int a, int b, int sa, int sb) {
    buf p = {0};
    const uint8_t head[] = {0x80, 2, '}', 'q', 0, '('};
    put(&p, head, sizeof head);
    put(&p, "X\1\0\0\0x", 6);
    put(&p, "c", 1);
    put(&p, glob, strlen(glob));
    put(&p, "((X\7\0\0\0storage", 14);
    put(&p, "c", 1);
    put(&p, stype, strlen(stype));
    put(&p, "X\1\0\0\0" "0", 6);
    uint8_t ll = (uint8_t)strlen(loc);
    put(&p, "X", 1);
    put32(&p, ll);
    put(&p, loc, ll);
    uint8_t k[] = {'K', (uint8_t)numel, 't', 'Q', 'K', 0, 'K', (uint8_t)a, 'K', (uint8_t)b, 0x86,
                   'K', (uint8_t)sa, 'K', (uint8_t)sb, 0x86, 0x89};
    put(&p, k, sizeof k);
    put(&p, "ccollections\nOrderedDict\n)R", 27);
    put(&p, "tRu.", 4);
    return p;
}

#define REBUILD "torch._utils\n_rebuild_tensor_v2\n"

static pt_file *open_one(const buf *pk, const void *data, size_t n, ms_error *e, buf *keep) {
    ent es[] = {{"v/data.pkl", pk->b, pk->n}, {"v/byteorder", "little", 6}, {"v/data/0", data, n}};
    *keep = zip_of(es, 3, 0);
    return pt_open_mem(keep->b, keep->n, "built.pt", e);
}

static const float six[6] = {1, 2, 3, 4, 5, 6};

START_TEST(test_built_good_and_gpu_location) {
    static const char *const locs[] = {"cpu", "cuda", "cuda:0", "cuda:7"};
    for (size_t i = 0; i < 4; i++) {
        buf pk = pickle_one(REBUILD, "torch\nFloatStorage\n", locs[i], 6, 2, 3, 3, 1), z;
        ms_error e = {0};
        pt_file *f = open_one(&pk, six, sizeof six, &e, &z);
        ck_assert_msg(f != NULL, "%s: %s", locs[i], e.msg);
        const st_tensor *t = pt_find(f, "x");
        ck_assert_int_eq(t->ndim, 2);
        ck_assert_int_eq(t->shape[0], 2);
        ck_assert_int_eq(t->shape[1], 3);
        ck_assert_mem_eq(t->data, six, sizeof six);
        pt_close(f);
        free(pk.b);
        free(z.b);
    }
}
END_TEST

static void refused(buf pk, const void *data, size_t n, const char *frag) {
    buf z;
    ms_error e = {0};
    pt_file *f = open_one(&pk, data, n, &e, &z);
    ck_assert_msg(f == NULL, "accepted (wanted: %s)", frag);
    ck_assert_msg(strstr(e.msg, frag) != NULL, "message \"%s\" lacks \"%s\"", e.msg, frag);
    free(pk.b);
    free(z.b);
}

START_TEST(test_refuses_what_is_not_a_tensor_dict) {
    /* the classic: a pickle that would run a command */
    refused(pickle_one("os\nsystem\n", "torch\nFloatStorage\n", "cpu", 6, 2, 3, 3, 1), six, sizeof six,
            "names os.system: only tensors");
    refused(pickle_one("builtins\neval\n", "torch\nFloatStorage\n", "cpu", 6, 2, 3, 3, 1), six, sizeof six,
            "names builtins.eval");
    refused(pickle_one(REBUILD, "torch\nByteStorage\n", "cpu", 6, 2, 3, 3, 1), six, sizeof six,
            "names torch.ByteStorage");
    refused(pickle_one(REBUILD, "torch\nFloatStorage\n", "disk", 6, 2, 3, 3, 1), six, sizeof six,
            "location other than cpu or cuda");
    refused(pickle_one(REBUILD, "torch\nFloatStorage\n", "cuda:x", 6, 2, 3, 3, 1), six, sizeof six,
            "location other than cpu or cuda");
    /* transposed strides: not contiguous */
    refused(pickle_one(REBUILD, "torch\nFloatStorage\n", "cpu", 6, 2, 3, 1, 2), six, sizeof six, "not a contiguous");
    /* a storage that claims more than its entry holds, or a tensor past it */
    refused(pickle_one(REBUILD, "torch\nFloatStorage\n", "cpu", 7, 2, 3, 3, 1), six, sizeof six, "not 7 elements");
    refused(pickle_one(REBUILD, "torch\nFloatStorage\n", "cpu", 6, 3, 3, 3, 1), six, sizeof six, "run past its storage");
    /* opcodes torch.save does not write for a dict of tensors (BUILD, INST) */
    buf p = {0};
    put(&p, "\x80\x02}(X\1\0\0\0xNb", 12);
    refused(p, six, sizeof six, "opcode 0x62");
    buf q = {0};
    put(&q, "\x80\x02iposix\nsystem\n", 16);
    refused(q, six, sizeof six, "opcode 0x69");
    /* not a dict at the top */
    buf r = {0};
    put(&r, "\x80\x02K\x05.", 5);
    refused(r, six, sizeof six, "no dict of tensors");
    /* a memo read of nothing; marks too deep */
    buf s = {0};
    put(&s, "\x80\x02h\x09.", 5);
    refused(s, six, sizeof six, "never stored");
    buf t = {0};
    put(&t, "\x80\x02", 2);
    for (int i = 0; i < 40; i++) put(&t, "(", 1);
    refused(t, six, sizeof six, "deeper than 32");
}
END_TEST

START_TEST(test_refuses_bad_archives) {
    buf pk = pickle_one(REBUILD, "torch\nFloatStorage\n", "cpu", 6, 2, 3, 3, 1);
    ms_error e = {0};
    /* compressed entries, entries outside the directory, big-endian data */
    ent es[] = {{"v/data.pkl", pk.b, pk.n}, {"v/data/0", six, sizeof six}};
    buf z = zip_of(es, 2, 8);
    ck_assert_ptr_null(pt_open_mem(z.b, z.n, "c.pt", &e));
    ck_assert_msg(strstr(e.msg, "compressed") != NULL, "%s", e.msg);
    free(z.b);
    ent out[] = {{"v/data.pkl", pk.b, pk.n}, {"v/data/0", six, sizeof six}, {"w/evil", "x", 1}};
    z = zip_of(out, 3, 0);
    ck_assert_ptr_null(pt_open_mem(z.b, z.n, "o.pt", &e));
    ck_assert_msg(strstr(e.msg, "outside the archive's directory") != NULL, "%s", e.msg);
    free(z.b);
    ent big[] = {{"v/data.pkl", pk.b, pk.n}, {"v/byteorder", "big", 3}, {"v/data/0", six, sizeof six}};
    z = zip_of(big, 3, 0);
    ck_assert_ptr_null(pt_open_mem(z.b, z.n, "b.pt", &e));
    ck_assert_msg(strstr(e.msg, "not little-endian") != NULL, "%s", e.msg);
    free(z.b);
    /* a flipped data byte: the CRC says so */
    z = zip_of(es, 2, 0);
    z.b[z.n / 3] ^= 0x40;
    ck_assert_ptr_null(pt_open_mem(z.b, z.n, "d.pt", &e));
    free(z.b);
    /* every truncation of a good archive is refused, none crashes (ASan) */
    z = zip_of(es, 2, 0);
    for (size_t n = 0; n < z.n; n++) {
        pt_file *f = pt_open_mem(z.b, n, "t.pt", &e);
        ck_assert_msg(f == NULL, "a %zu-byte prefix accepted", n);
    }
    pt_file *f = pt_open_mem(z.b, z.n, "whole.pt", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    pt_close(f);
    free(z.b);
    free(pk.b);
    ck_assert_ptr_null(pt_open("/nonexistent.pt", &e));
    ck_assert_int_eq(pt_is_zip("PK\3\4", 4), 1);
    ck_assert_int_eq(pt_is_zip("{\"x", 3), 0);
}
END_TEST

/* Every bounded byte of the torch-written fixture flipped in turn: refused
 * or read, never a crash (the CRC catches most; the rest reach the
 * parsers). */
START_TEST(test_fixture_bit_flips) {
    FILE *fp = fopen(FIX "/pp_d1_voice.pt", "rb");
    ck_assert_ptr_nonnull(fp);
    uint8_t img[8192];
    size_t n = fread(img, 1, sizeof img, fp);
    fclose(fp);
    ck_assert_uint_gt(n, 1000);
    ms_error e = {0};
    for (size_t i = 0; i < n; i++) {
        img[i] ^= 0x5a;
        pt_file *f = pt_open_mem(img, n, "flip.pt", &e);
        pt_close(f);
        img[i] ^= 0x5a;
    }
    pt_file *f = pt_open_mem(img, n, "ok.pt", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    pt_close(f);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("pt");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_torch_fixture_f32);
    tcase_add_test(tc, test_torch_fixture_bf16);
    tcase_add_test(tc, test_built_good_and_gpu_location);
    tcase_add_test(tc, test_refuses_what_is_not_a_tensor_dict);
    tcase_add_test(tc, test_refuses_bad_archives);
    tcase_add_test(tc, test_fixture_bit_flips);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
