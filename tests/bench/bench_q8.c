/* bench_q8.c - the 8-bit schemes against bf16 on the CPU, side by side in
 * one run (make bench).
 *
 * 1. Matrix-vector product (kern_matmul, n = 1) on one random bf16 matrix
 *    of Q8_ROWS x Q8_COLS and on its int8 quantization (kern_q8_quantize_rows:
 *    the same matrix, half the bytes). The two run alternately; printed: the
 *    best GB/s of each (of the bytes each reads), and the median over the
 *    repetitions of t_bf16 / t_int8 of adjacent runs (target >= 1.8: the
 *    product is bandwidth bound, int8 reads half the bytes).
 * 2. A 7B-shaped step, scaled down to one temporal layer (dim 4096, 32
 *    heads, hidden 11264, K/V ring full at 3000 positions, batch 1): bf16
 *    weights with the float32 K/V ring, against int8 weights with the int8
 *    K/V ring, alternately. A whole 7B step is 32 such layers plus the text
 *    head and depformer (~2 %% of the bytes); the whole model in both
 *    schemes (15.4 + 7.7 GB) does not fit this 24 GB machine, so the layer
 *    is measured and x32 printed. Median ratio of adjacent runs.
 * Threads: all online CPUs (the pool's default).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern_cpu.h"
#include "st.h"

#define Q8_ROWS 16384
#define Q8_COLS 4096          /* 128 MiB of bf16, 64 MiB of int8 */
#define Q8_REPS 15
#define L_DIM 4096
#define L_HEADS 32
#define L_HIDDEN 11264
#define L_CONTEXT 3000

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rs = 88172645463325252ull;
static inline uint64_t xorshift(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "bench_q8: out of memory\n");
        exit(1);
    }
    return p;
}

/* a random bf16 matrix and its int8 twin */
typedef struct {
    kern_mat b, q;
} mat2;

static mat2 mat(int rows, int cols) {
    size_t n = (size_t)rows * cols;
    uint16_t *w = xalloc(2 * n);
    for (size_t i = 0; i < n; i++) w[i] = st_f32_to_bf16(((float)(xorshift() >> 40) / 16777216.0f - 0.5f) * 0.0625f);
    int8_t *q = xalloc(n);
    float *s = xalloc(sizeof(float) * rows);
    kern_q8_quantize_rows(q, s, w, ST_BF16, rows, cols);
    mat2 m = {{w, ST_BF16, rows, cols, NULL}, {q, ST_I8, rows, cols, s}};
    return m;
}

static void mat_free(mat2 *m) {
    free((void *)m->b.w);
    free((void *)m->q.w);
    free((void *)m->q.scale);
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

typedef struct {
    float *xv, *xn, *qkv, *att, *o, *u, *h, *alpha, *sc;
    float *kc, *vc;          /* (L_CONTEXT, L_DIM) float32 ring */
    int8_t *k8, *v8;         /* (L_CONTEXT, L_DIM) int8 ring */
    float *ks, *vs;          /* (L_CONTEXT, L_HEADS) */
} layer_buf;

/* one temporal layer at position pos, batch 1; int8: weights q, K/V int8 */
static void layer(layer_buf *b, mat2 *ain, mat2 *aout, mat2 *fin, mat2 *fout, int int8, int pos, kern_pool *pool) {
    int hd = L_DIM / L_HEADS, row = pos % L_CONTEXT;
    kern_rmsnorm(b->xn, b->xv, b->alpha, 1, L_DIM, 1e-8f);
    kern_matmul(b->qkv, b->xn, int8 ? &ain->q : &ain->b, 1, pool);
    kern_rope(b->qkv, L_HEADS, hd, pos, 10000);
    kern_rope(b->qkv + L_DIM, L_HEADS, hd, pos, 10000);
    if (int8) {
        kern_q8_quantize_heads(b->k8 + (size_t)row * L_DIM, b->ks + (size_t)row * L_HEADS, b->qkv + L_DIM, L_HEADS, hd);
        kern_q8_quantize_heads(b->v8 + (size_t)row * L_DIM, b->vs + (size_t)row * L_HEADS, b->qkv + 2 * L_DIM, L_HEADS, hd);
        kern_attend_ring_q8_pool(b->att, b->qkv, b->k8, b->ks, b->v8, b->vs, b->sc, L_CONTEXT, (row + 1) % L_CONTEXT,
                                 L_CONTEXT, L_HEADS, hd, L_DIM, L_HEADS, pool);
    } else {
        memcpy(b->kc + (size_t)row * L_DIM, b->qkv + L_DIM, sizeof(float) * L_DIM);
        memcpy(b->vc + (size_t)row * L_DIM, b->qkv + 2 * L_DIM, sizeof(float) * L_DIM);
        kern_attend_ring_pool(b->att, b->qkv, b->kc, b->vc, b->sc, L_CONTEXT, (row + 1) % L_CONTEXT, L_CONTEXT, L_HEADS,
                              hd, L_DIM, pool);
    }
    kern_matmul(b->o, b->att, int8 ? &aout->q : &aout->b, 1, pool);
    kern_add(b->xv, b->o, L_DIM);
    kern_rmsnorm(b->xn, b->xv, b->alpha, 1, L_DIM, 1e-8f);
    kern_matmul(b->u, b->xn, int8 ? &fin->q : &fin->b, 1, pool);
    kern_silu_gate(b->h, b->u, L_HIDDEN);
    kern_matmul(b->o, b->h, int8 ? &fout->q : &fout->b, 1, pool);
    kern_add(b->xv, b->o, L_DIM);
}

int main(void) {
    kern_pool *pool = kern_pool_create(0);
    int threads = kern_pool_threads(pool);
    double sink = 0;

    /* 1. matvec: bf16 against int8 on the same matrix */
    mat2 w = mat(Q8_ROWS, Q8_COLS);
    float *x = xalloc(sizeof(float) * Q8_COLS), *y = xalloc(sizeof(float) * Q8_ROWS);
    for (int i = 0; i < Q8_COLS; i++) x[i] = (float)sin(i);
    double best_b = 1e9, best_q = 1e9, ratio[Q8_REPS];
    for (int r = 0; r < Q8_REPS; r++) {
        double t0 = now();
        kern_matmul(y, x, &w.b, 1, pool);
        double t1 = now();
        sink += y[r];
        kern_matmul(y, x, &w.q, 1, pool);
        double t2 = now();
        sink += y[r];
        if (t1 - t0 < best_b) best_b = t1 - t0;
        if (t2 - t1 < best_q) best_q = t2 - t1;
        ratio[r] = (t1 - t0) / (t2 - t1);
    }
    double nb = 2.0 * Q8_ROWS * Q8_COLS, nq = 1.0 * Q8_ROWS * Q8_COLS + 4.0 * Q8_ROWS;
    printf("matvec %d x %d, %d threads: bf16 best %.2f ms (%.2f GB/s); int8 best %.2f ms (%.2f GB/s); "
           "bf16/int8 time: median of adjacent runs %.2f, of bests %.2f (target >= 1.80)\n",
           Q8_ROWS, Q8_COLS, threads, best_b * 1e3, nb / best_b / 1e9, best_q * 1e3, nq / best_q / 1e9,
           median(ratio, Q8_REPS), best_b / best_q);
    mat_free(&w);
    free(x);
    free(y);

    /* 2. a 7B-shaped temporal layer: bf16 + f32 K/V against int8 + int8 K/V */
    mat2 ain = mat(3 * L_DIM, L_DIM), aout = mat(L_DIM, L_DIM), fin = mat(2 * L_HIDDEN, L_DIM), fout = mat(L_DIM, L_HIDDEN);
    layer_buf b = {0};
    b.xv = calloc(L_DIM, sizeof(float));
    b.xn = calloc(L_DIM, sizeof(float));
    b.qkv = calloc(3 * L_DIM, sizeof(float));
    b.att = calloc(L_DIM, sizeof(float));
    b.o = calloc(L_DIM, sizeof(float));
    b.u = calloc(2 * L_HIDDEN, sizeof(float));
    b.h = calloc(L_HIDDEN, sizeof(float));
    b.alpha = calloc(L_DIM, sizeof(float));
    b.sc = calloc((size_t)L_CONTEXT * threads, sizeof(float));
    b.kc = calloc((size_t)L_CONTEXT * L_DIM, sizeof(float));
    b.vc = calloc((size_t)L_CONTEXT * L_DIM, sizeof(float));
    b.k8 = calloc((size_t)L_CONTEXT * L_DIM, 1);
    b.v8 = calloc((size_t)L_CONTEXT * L_DIM, 1);
    b.ks = calloc((size_t)L_CONTEXT * L_HEADS, sizeof(float));
    b.vs = calloc((size_t)L_CONTEXT * L_HEADS, sizeof(float));
    if (!b.xv || !b.xn || !b.qkv || !b.att || !b.o || !b.u || !b.h || !b.alpha || !b.sc || !b.kc || !b.vc || !b.k8 ||
        !b.v8 || !b.ks || !b.vs) {
        fprintf(stderr, "bench_q8: out of memory\n");
        return 1;
    }
    /* the rings full of realistic rows: each written through its scheme */
    for (int i = 0; i < L_DIM; i++) b.alpha[i] = 1;
    for (int p = 0; p < L_CONTEXT; p++) {
        float *k = b.kc + (size_t)p * L_DIM, *v = b.vc + (size_t)p * L_DIM;
        for (int i = 0; i < L_DIM; i++) {
            k[i] = (float)((p * 7 + i) % 13) * 0.01f - 0.06f;
            v[i] = (float)((p * 3 + i) % 11) * 0.01f - 0.05f;
        }
        kern_q8_quantize_heads(b.k8 + (size_t)p * L_DIM, b.ks + (size_t)p * L_HEADS, k, L_HEADS, L_DIM / L_HEADS);
        kern_q8_quantize_heads(b.v8 + (size_t)p * L_DIM, b.vs + (size_t)p * L_HEADS, v, L_HEADS, L_DIM / L_HEADS);
    }
    double lb = 1e9, lq = 1e9, lr[Q8_REPS];
    for (int r = 0; r < Q8_REPS; r++) {
        for (int i = 0; i < L_DIM; i++) b.xv[i] = (float)cos(i + r);
        double t0 = now();
        layer(&b, &ain, &aout, &fin, &fout, 0, L_CONTEXT + r, pool);
        double t1 = now();
        sink += b.xv[0];
        for (int i = 0; i < L_DIM; i++) b.xv[i] = (float)cos(i + r);
        layer(&b, &ain, &aout, &fin, &fout, 1, L_CONTEXT + r, pool);
        double t2 = now();
        sink += b.xv[0];
        if (t1 - t0 < lb) lb = t1 - t0;
        if (t2 - t1 < lq) lq = t2 - t1;
        lr[r] = (t1 - t0) / (t2 - t1);
    }
    printf("7B-shaped step (one temporal layer measured, x32 printed; K/V ring %d positions), %d threads: "
           "bf16 + f32 K/V best %.1f ms/layer (x32 %.0f ms); int8 + int8 K/V best %.1f ms/layer (x32 %.0f ms); "
           "bf16/int8 time: median of adjacent runs %.2f, of bests %.2f\n",
           L_CONTEXT, threads, lb * 1e3, 32 * lb * 1e3, lq * 1e3, 32 * lq * 1e3, median(lr, Q8_REPS), lb / lq);
    if (sink == 12345.678) printf("%g\n", sink);
    mat_free(&ain); mat_free(&aout); mat_free(&fin); mat_free(&fout);
    free(b.xv); free(b.xn); free(b.qkv); free(b.att); free(b.o); free(b.u); free(b.h); free(b.alpha); free(b.sc);
    free(b.kc); free(b.vc); free(b.k8); free(b.v8); free(b.ks); free(b.vs);
    kern_pool_free(pool);
    return 0;
}
