/* kern_cpu.h - the CPU kernels of the Moshi LM step (plain C + AVX2/FMA).
 *
 * Every kernel is a plain function: outputs first, then inputs, then
 * weights, then sizes; tensor pointers carry their shape in a comment.
 * These are also the C twins of the CUDA kernels (cuda/cu_kern.h): kern_X
 * has the launcher cu_X with the same arguments, the CUDA stream last (where
 * kern_X takes its pool), and tests/gpu/engine_test.c compares each launcher
 * against its kern_X (so far kern_matvec_bf16 and kern_rmsnorm).
 *
 * Weights are matrices stored row-major (rows, cols) in their checkpoint
 * precision (f32, f16 or bf16) and widened to float32 in registers;
 * activations are float32.
 */
#ifndef MOSHID_KERN_CPU_H
#define MOSHID_KERN_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "st.h"

/* A weight matrix (rows, cols), row-major, in its stored dtype (ST_F32,
 * ST_F16 or ST_BF16), or int8 (ST_I8) with one float32 scale per row: row
 * r holds q[r][c] * scale[r] (the 8-bit scheme, kern_q8_quantize_rows). w
 * and scale are borrowed (usually inside the mapped checkpoint, or the
 * loader's quantized copy) and aligned to their element size. */
typedef struct kern_mat {
    const void *w;        /* (rows, cols) */
    st_dtype dtype;
    int rows, cols;
    const float *scale;   /* (rows): ST_I8 only, else NULL */
} kern_mat;

/* kern_mat_rows: the view of rows [r0, r0 + n) of m. */
kern_mat kern_mat_rows(const kern_mat *m, int r0, int n);

typedef struct kern_pool kern_pool;

/* kern_pool_create: a pool of nthreads - 1 workers (the caller is the last
 * one); nthreads <= 0 picks the number of online CPUs. NULL on failure. */
kern_pool *kern_pool_create(int nthreads);
void kern_pool_free(kern_pool *p);
int kern_pool_threads(const kern_pool *p);
/* kern_pool_run: fn(ctx, i, n) for i in [0, n) with n = the pool's thread
 * count, in parallel; returns when all are done. One caller at a time. p
 * may be NULL: then fn(ctx, 0, 1) runs on the caller. */
void kern_pool_run(kern_pool *p, void (*fn)(void *ctx, int i, int n), void *ctx);

/* kern_matmul: y = x W^T for n input vectors, the weights streamed once
 * (rows split over the pool's threads).
 *   y (n, w->rows), x (n, w->cols); y must not alias x. */
void kern_matmul(float *y, const float *x, const kern_mat *w, int n, kern_pool *pool);
/* kern_matvec_bf16: kern_matmul on a bf16 matrix, in the argument order of
 * the CUDA cu_matvec_bf16 (its C twin); pool may be NULL (the caller's
 * thread only).  y (B, N), x (B, K), w (N, K) bf16; y must not alias x. */
void kern_matvec_bf16(float *y, const float *x, const uint16_t *w, int B, int N, int K, kern_pool *pool);

/* kern_matmul_rows: the same for output rows [r0, r1) only (one thread). */
void kern_matmul_rows(float *y, const float *x, const kern_mat *w, int n, int r0, int r1);

/* ---- the 8-bit schemes (kern_q8.c) ---------------------------------- */

/* kern_q8_scale: the scale of a vector or row of largest magnitude absmax:
 * absmax / 127 (a float32 division), 1 for absmax 0. */
float kern_q8_scale(float absmax);
/* kern_q8_quantize_rows: w (rows, cols) of dtype dt (float types or I8)
 * to int8 per output row: s[r] = kern_q8_scale(max_c |w[r][c]| in float32),
 * q[r][c] = w[r][c] / s[r] (float32 division) rounded half to even,
 * clamped to [-127, 127].  q (rows, cols), s (rows). */
void kern_q8_quantize_rows(int8_t *q, float *s, const void *w, st_dtype dt, int rows, int cols);
/* kern_q8_quantize_heads: one K or V vector x (heads * head_dim) to int8
 * with one scale per head, the same rule per head.  q (heads*head_dim),
 * s (heads). */
void kern_q8_quantize_heads(int8_t *q, float *s, const float *x, int heads, int head_dim);
/* kern_matmul_rows_i8: kern_matmul_rows on an ST_I8 matrix: the int8 bytes
 * widened in registers, each row's sum times its scale (no dequantized copy). */
void kern_matmul_rows_i8(float *y, const float *x, const kern_mat *w, int n, int r0, int r1);
/* kern_attend_ring_q8: kern_attend_ring over an int8 ring: key/value row
 * r of head h is k[r*stride + h*head_dim ..] * ks[r*sstride + h] (values
 * alike); the key scale multiplies q . k8, the value scale folds into the
 * softmax weight.  k, v (ring, stride) int8; ks, vs (ring, sstride). */
void kern_attend_ring_q8(float *out, const float *q, const int8_t *k, const float *ks, const int8_t *v,
                         const float *vs, float *scratch, int ring, int first, int nk, int heads, int head_dim,
                         int stride, int sstride);
/* kern_attend_ring_q8_pool: the same, heads split over the pool; scratch
 * (threads, nk) floats. */
void kern_attend_ring_q8_pool(float *out, const float *q, const int8_t *k, const float *ks, const int8_t *v,
                              const float *vs, float *scratch, int ring, int first, int nk, int heads, int head_dim,
                              int stride, int sstride, kern_pool *pool);

/* kern_embed_add: x += table[token] ; token -1 adds nothing.
 *   x (dim), table (card, dim). The caller checks 0 <= token < rows. */
void kern_embed_add(float *x, const kern_mat *table, int token);

/* kern_rmsnorm: y = x * alpha / sqrt(mean(x^2) + eps) per row (eps inside
 * the root): sum of squares in double, then y = x * (alpha * inv) in
 * float32. Same arguments as the CUDA cu_rmsnorm (its C twin).
 *   y (B, C), x (B, C), alpha (C). y may alias x. */
void kern_rmsnorm(float *y, const float *x, const float *alpha, int B, int C, float eps);

/* kern_rope: rotate interleaved pairs (2i, 2i+1) of each head by
 * pos * max_period^(-2i/head_dim), in float32 as the official code.
 *   v (heads, head_dim), in place. */
void kern_rope(float *v, int heads, int head_dim, int64_t pos, float max_period);

/* kern_attend: softmax(q k^T / sqrt(head_dim)) v over nk keys, per head.
 *   out (heads*head_dim), q (heads*head_dim),
 *   k (nk, stride), v (nk, stride) with head h at columns h*head_dim.
 *   scratch (nk) floats. */
void kern_attend(float *out, const float *q, const float *k, const float *v, float *scratch, int nk,
                 int heads, int head_dim, int stride);

/* kern_attend_ring: kern_attend over the nk keys of a ring of `ring` rows
 * that start at row `first` and continue cyclically (0 <= first < ring,
 * 1 <= nk <= ring). Summed in row order: rows 0 .. first + nk - ring - 1
 * (the part past the end), then first .. ring - 1; without a wrap rows
 * first .. first + nk - 1. kern_attend is the case first = 0, ring = nk.
 *   k (ring, stride), v (ring, stride); scratch (nk) floats. */
void kern_attend_ring(float *out, const float *q, const float *k, const float *v, float *scratch, int ring,
                      int first, int nk, int heads, int head_dim, int stride);

/* kern_attend_ring_pool: kern_attend_ring with the heads split over the
 * pool's threads; scratch (threads, nk) floats. */
void kern_attend_ring_pool(float *out, const float *q, const float *k, const float *v, float *scratch, int ring,
                           int first, int nk, int heads, int head_dim, int stride, kern_pool *pool);

/* kern_silu_gate: h = silu(u[0:H]) * u[H:2H].  h (H), u (2H). */
void kern_silu_gate(float *h, const float *u, int H);

/* kern_add: y += x.  y (n), x (n). */
void kern_add(float *y, const float *x, int n);

/* kern_read_bw: sum of n floats, vectorised (a read-bandwidth reference for
 * the benchmarks), rows split over the pool. */
double kern_read_bw(const float *x, size_t n, kern_pool *pool);

#endif
