/* check_lm_util.h - helpers shared by the LM and PersonaPlex test suites:
 * fixture paths, whole-file reads, SHA-256 (FIPS 180-4) and the check of a
 * fixture manifest's files, the normalised error of logits. Include after
 * check_main.h. */
#ifndef MOSHID_CHECK_LM_UTIL_H
#define MOSHID_CHECK_LM_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "json.h"

#define LM_FIX_DIR "tests/fixtures/lm"
static const char *const lm_fix_cases[] __attribute__((unused)) = {"ring_f32", "hs4_f32", "ring_bf16"};
#define LM_FIX_NCASES 3

/* read a whole file; NULL when unreadable. *len set. Caller frees. */
static inline char *slurp(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    *len = n;
    return b;
}

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define SHA_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
static inline void sha_block(uint32_t *h, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = SHA_ROR(w[i - 15], 7) ^ SHA_ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = SHA_ROR(w[i - 2], 17) ^ SHA_ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (SHA_ROR(e, 6) ^ SHA_ROR(e, 11) ^ SHA_ROR(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
        uint32_t t2 = (SHA_ROR(a, 2) ^ SHA_ROR(a, 13) ^ SHA_ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

/* sha256 of buf as 64 lowercase hex digits in hex[65] */
static inline void sha256_hex(const void *buf, size_t len, char hex[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *p = buf;
    size_t i = 0;
    for (; i + 64 <= len; i += 64) sha_block(h, p + i);
    uint8_t tail[128] = {0};
    size_t r = len - i;
    memcpy(tail, p + i, r);
    tail[r] = 0x80;
    size_t tl = r + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int k = 0; k < 8; k++) tail[tl - 1 - k] = (uint8_t)(bits >> (8 * k));
    sha_block(h, tail);
    if (tl == 128) sha_block(h, tail + 64);
    for (int k = 0; k < 8; k++) sprintf(hex + 8 * k, "%08x", h[k]);
}

#if defined(MOSHID_ST_H) && defined(ck_assert)
#include <unistd.h>
/* --- hostile checkpoints: rewrite a fixture with one change ----------- */

typedef struct {
    const char *drop;          /* tensor left out */
    const char *reshape;       /* tensor given rows - 1 */
    int dep_steps;             /* > 0: depformer rewritten with this many steps */
} mutation;

/* fixture ring_f32 rewritten per mu into dir (config.json copied) */
static inline void write_mutant(const char *dir, const mutation *mu) {
    ms_error e = {0};
    st_file *f = st_open(LM_FIX_DIR "/ring_f32/model.safetensors", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    st_writer *w = st_writer_create();
    void *bufs[64];
    int nb = 0;
    const int base_q = 8, dd = 16;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        if (mu->drop && !strcmp(t->name, mu->drop)) continue;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (mu->reshape && !strcmp(t->name, mu->reshape)) shape[0] -= 1;
        if (mu->dep_steps > 0 && strstr(t->name, "self_attn") && !strncmp(t->name, "depformer.", 10)) {
            /* concatenated per-step rows: repeat/cut step blocks */
            size_t blk = t->nbytes / base_q;
            char *b = malloc(blk * mu->dep_steps);
            for (int k = 0; k < mu->dep_steps; k++) memcpy(b + blk * k, (const char *)t->data + blk * (k % base_q), blk);
            shape[0] = t->shape[0] / base_q * mu->dep_steps;
            bufs[nb++] = b;
            st_writer_add(w, t->name, t->dtype, t->ndim, shape, b);
            continue;
        }
        st_writer_add(w, t->name, t->dtype, t->ndim, shape, t->data);
    }
    if (mu->dep_steps > base_q) {
        /* extra per-step tensors for steps 8..n-1, copies of step k % 8 */
        char name[128], src[128];
        for (int k = base_q; k < mu->dep_steps; k++) {
            const char *pats[] = {"depformer_in.%d.weight", "linears.%d.weight", "depformer_emb.%d.weight",
                                  "depformer.layers.0.gating.%d.linear_in.weight",
                                  "depformer.layers.0.gating.%d.linear_out.weight",
                                  "depformer.layers.1.gating.%d.linear_in.weight",
                                  "depformer.layers.1.gating.%d.linear_out.weight"};
            for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
                if (p == 2 && k - 1 >= mu->dep_steps - 1) continue;
                snprintf(name, sizeof name, pats[p], p == 2 ? k - 1 : k);
                snprintf(src, sizeof src, pats[p], p == 2 ? (k - 1) % (base_q - 1) : k % base_q);
                const st_tensor *t = st_find(f, src);
                ck_assert_msg(t != NULL, "%s", src);
                st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data);
            }
        }
    }
    (void)dd;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(st_writer_save(w, path, &e) == MS_OK, "%s", e.msg);
    st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    st_close(f);
    size_t n = 0;
    char *cfg = slurp(LM_FIX_DIR "/ring_f32/config.json", &n);
    ck_assert(cfg != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *o = fopen(path, "w");
    fwrite(cfg, 1, n, o);
    fclose(o);
    free(cfg);
}

#endif

/* check_manifest_files: every entry of a manifest case's "files" object
 * ({name: {"bytes": n, "sha256": hex}}) names a file under dir/case of that
 * size and sha256 (a failed check names the file). Returns the count. */
static inline int check_manifest_files(const char *dir, const char *casename, const js_value *files) {
    int n_ok = 0;
    for (const js_value *f = files ? files->child : NULL; f; f = f->next) {
        char path[512], hex[65];
        snprintf(path, sizeof path, "%s/%s/%s", dir, casename, f->key);
        size_t n;
        char *b = slurp(path, &n);
        ck_assert_msg(b != NULL, "%s: unreadable", path);
        sha256_hex(b, n, hex);
        free(b);
        ck_assert_msg((int64_t)n == js_get(f, "bytes")->i, "%s: %zu bytes, manifest says %lld", path, n,
                      (long long)js_get(f, "bytes")->i);
        ck_assert_msg(strcmp(hex, js_get(f, "sha256")->str) == 0, "%s: sha256 %s, manifest says %s", path, hex,
                      js_get(f, "sha256")->str);
        n_ok++;
    }
    return n_ok;
}

/* rel_err: max |a - ref| / max |ref| over n values (NaN propagates). */
static inline double rel_err(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

/* manifest_open: parse the fixture manifest at path and check the pinned
 * generator versions (moshi 0.2.13, torch 2.9.1). Returns the tree (js_free)
 * and *txt (free). */
static inline js_value *manifest_open(const char *path, char **txt) {
    size_t len;
    *txt = slurp(path, &len);
    ck_assert_msg(*txt != NULL, "cannot read the manifest %s", path);
    ms_error e = {0};
    js_value *root = js_parse(*txt, len, &e);
    ck_assert_msg(root != NULL, "%s: %s", path, e.msg);
    const js_value *v = js_get(root, "versions");
    ck_assert_str_eq(js_get(v, "moshi")->str, "0.2.13");
    ck_assert(strncmp(js_get(v, "torch")->str, "2.9.1", 5) == 0);
    return root;
}

#endif
