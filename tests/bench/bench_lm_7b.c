/* bench_lm_7b.c - make bench-7b (outside CI): the real 7B shape loads in
 * 24 GB and steps.
 *
 *   bench_7b DIR [num_layers]
 * Writes DIR/model.safetensors: every tensor of the Moshi 7B (real names
 * and shapes, bf16, 15.4 GB) filled from a fixed seed, and DIR/config.json
 * (the built-in 7B values; num_layers may be lowered for a quick trial).
 * An existing file of the right size is reused. Then opens the CPU backend
 * on it (1 slot), and reports load time, resident memory (anonymous and
 * file-backed), and the time of one step.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend.h"
#include "lm.h"
#include "lmgen.h"
#include "st.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct { uint64_t seed; int alpha; } fill_ctx;

/* random bf16: sign, exponent 2^-10 .. 2^-5, 7 random mantissa bits; norm
 * scales near 1 */
static int fill(void *vctx, void *dst, size_t nbytes) {
    fill_ctx *c = vctx;
    uint64_t s = c->seed * 0x9E3779B97F4A7C15ull + 1;
    uint16_t *o = dst;
    size_t n = nbytes / 2;
    for (size_t i = 0; i < n; i += 4) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        for (int k = 0; k < 4 && i + k < n; k++) {
            uint16_t r = (uint16_t)(s >> (16 * k));
            uint16_t e = c->alpha ? 127 : (uint16_t)(117 + (r >> 8) % 6);
            o[i + k] = (uint16_t)((r & 0x8000u & (c->alpha ? 0 : 0xFFFF)) | (e << 7) | (r & 0x7F));
        }
    }
    return MS_OK;
}

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) v = strtol(line + kl + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

static fill_ctx ctxs[1024];
static int nctx;

static void add(st_writer *w, int ndim, int64_t a, int64_t b, int alpha, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void add(st_writer *w, int ndim, int64_t a, int64_t b, int alpha, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[3] = {a, b, 0};
    if (ndim == 3) { shape[0] = 1; shape[1] = 1; shape[2] = a; }
    ctxs[nctx] = (fill_ctx){(uint64_t)nctx + 1, alpha};
    st_writer_add_fn(w, name, ST_BF16, ndim, shape, fill, &ctxs[nctx]);
    nctx++;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_7b DIR [num_layers]\n");
        return 2;
    }
    const char *dir = argv[1];
    int layers = argc > 2 ? atoi(argv[2]) : 32;
    if (layers < 1 || layers > 32) return 2;
    lm_config c;
    lm_config_default(&c);
    char path[4096];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "%s: %s\n", path, strerror(errno)); return 1; }
    fprintf(f, "{\"num_layers\": %d}\n", layers);
    fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int D = c.dim, dd = c.depformer_dim;
    st_writer *w = st_writer_create();
    for (int i = 0; i < c.n_q; i++) add(w, 2, c.card + 1, D, 0, "emb.%d.weight", i);
    add(w, 2, c.text_card + 1, D, 0, "text_emb.weight");
    add(w, 2, c.text_card, D, 0, "text_linear.weight");
    add(w, 3, D, 0, 1, "out_norm.alpha");
    for (int l = 0; l < layers; l++) {
        add(w, 3, D, 0, 1, "transformer.layers.%d.norm1.alpha", l);
        add(w, 3, D, 0, 1, "transformer.layers.%d.norm2.alpha", l);
        add(w, 2, 3 * D, D, 0, "transformer.layers.%d.self_attn.in_proj_weight", l);
        add(w, 2, D, D, 0, "transformer.layers.%d.self_attn.out_proj.weight", l);
        add(w, 2, 2 * c.hidden, D, 0, "transformer.layers.%d.gating.linear_in.weight", l);
        add(w, 2, D, c.hidden, 0, "transformer.layers.%d.gating.linear_out.weight", l);
    }
    for (int k = 0; k < c.dep_q; k++) {
        add(w, 2, dd, D, 0, "depformer_in.%d.weight", k);
        add(w, 2, c.card, dd, 0, "linears.%d.weight", k);
        if (k + 1 < c.dep_q) add(w, 2, c.card + 1, dd, 0, "depformer_emb.%d.weight", k);
    }
    add(w, 2, c.text_card + 1, dd, 0, "depformer_text_emb.weight");
    for (int l = 0; l < c.depformer_num_layers; l++) {
        add(w, 3, dd, 0, 1, "depformer.layers.%d.norm1.alpha", l);
        add(w, 3, dd, 0, 1, "depformer.layers.%d.norm2.alpha", l);
        add(w, 2, (int64_t)c.dep_q * 3 * dd, dd, 0, "depformer.layers.%d.self_attn.in_proj_weight", l);
        add(w, 2, (int64_t)c.dep_q * dd, dd, 0, "depformer.layers.%d.self_attn.out_proj.weight", l);
        for (int k = 0; k < c.dep_q; k++) {
            add(w, 2, 2 * c.dep_hidden, dd, 0, "depformer.layers.%d.gating.%d.linear_in.weight", l, k);
            add(w, 2, dd, c.dep_hidden, 0, "depformer.layers.%d.gating.%d.linear_out.weight", l, k);
        }
    }
    ms_error err = {0};
    struct stat sb;
    char mark[4200];
    snprintf(mark, sizeof mark, "%s/.complete-%d", dir, layers);
    if (stat(mark, &sb) != 0) {
        double t0 = now();
        printf("writing %d tensors to %s ...\n", nctx, path);
        fflush(stdout);
        if (st_writer_save(w, path, &err) != MS_OK) {
            fprintf(stderr, "bench_7b: %s\n", err.msg);
            return 1;
        }
        FILE *mk = fopen(mark, "w");
        if (mk) fclose(mk);
        printf("written in %.1f s\n", now() - t0);
    } else {
        printf("reusing %s\n", path);
    }
    st_writer_free(w);
    stat(path, &sb);
    double t0 = now();
    lm_backend_opts bo = {.max_slots = 1, .threads = 0, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &bo, &err);
    if (!b) {
        fprintf(stderr, "bench_7b: %s\n", err.msg);
        return 1;
    }
    double t_load = now() - t0;
    long rss0 = status_kb("VmRSS:"), anon0 = status_kb("RssAnon:");
    lm_samp samp;
    lm_samp_defaults(&samp, 1);
    lmgen_slot g;
    lmgen_init(&g, &b->cfg, 0, &samp);
    lmgen_slot *gp = &g;
    int user[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[17], has;
    double ts[3];
    for (int s = 0; s < 3; s++) {
        double a = now();
        if (lmgen_step_batch(b, &gp, 1, user, out, &has, NULL, NULL, &err) != MS_OK) {
            fprintf(stderr, "bench_7b: %s\n", err.msg);
            return 1;
        }
        ts[s] = now() - a;
    }
    lm_backend_stats st;
    lm_backend_stats_get(b, &st);
    printf("7B-shaped checkpoint (%d layers): %.2f GB on disk, weights %.2f GB bf16 (mapped)\n", layers,
           sb.st_size / 1e9, st.weight_bytes / 1e9);
    printf("load %.2f s; after load RSS %.2f GB (anon %.2f GB)\n", t_load, rss0 / 1048576.0, anon0 / 1048576.0);
    printf("step 1 %.2f s (first touch of the mapping), step 2 %.2f s, step 3 %.2f s, %d threads\n", ts[0], ts[1],
           ts[2], st.threads);
    printf("after 3 steps RSS %.2f GB (anon %.2f GB, file %.2f GB); K/V reserved %.2f GB (untouched pages not resident)\n",
           status_kb("VmRSS:") / 1048576.0, status_kb("RssAnon:") / 1048576.0, status_kb("RssFile:") / 1048576.0,
           st.kv_bytes / 1e9);
    lm_backend_close(b);
    return 0;
}
