/* mimi_gemm.c - the single-thread float32 matrix product behind every Mimi
 * layer: C (M, N) [+]= A (M, K) . B (K, N), row-major.
 *
 * Two paths:
 *  - N >= MIMI_GEMM_SMALL_N: blocked and packed (KC x NC panels of B,
 *    MC x KC panels of A) with a 6 x 16 AVX2/FMA micro-kernel (12 vector
 *    accumulators), the classic layout of high-performance BLAS;
 *  - small N (the transformer steps and the low-rate SEANet layers, where
 *    A is a big weight matrix read once): B is transposed and each row of A
 *    is dotted with the N columns, 8 floats at a time; memory bound on A.
 * Without AVX2/FMA the same blocking runs plain C loops.
 */
#include <stdlib.h>
#include <string.h>

#include "mimi_int.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MIMI_HAVE_AVX2 1
#else
#define MIMI_HAVE_AVX2 0
#endif

#define MR 6
#define NR 16
#define KC 256
#define MC 96            /* multiple of MR */
#define NC 2048          /* multiple of NR */
#define MIMI_GEMM_SMALL_N 8

/* Pack B[k0..k0+kc, j0..j0+nc) into panels of NR columns: panel p holds
 * kc rows of NR floats (zero beyond N). */
static void pack_b(int kc, int nc, const float *B, int ldb, float *dst) {
    for (int j = 0; j < nc; j += NR) {
        int w = nc - j < NR ? nc - j : NR;
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)k * ldb + j;
            float *d = dst + (size_t)k * NR;
            if (w == NR) memcpy(d, src, NR * sizeof(float));
            else {
                memcpy(d, src, (size_t)w * sizeof(float));
                memset(d + w, 0, (size_t)(NR - w) * sizeof(float));
            }
        }
        dst += (size_t)kc * NR;
    }
}

/* Pack A[i0..i0+mc, k0..k0+kc) into panels of MR rows, column-interleaved:
 * panel p holds kc groups of MR floats (zero beyond M). */
static void pack_a(int mc, int kc, const float *A, int lda, float *dst) {
    for (int i = 0; i < mc; i += MR) {
        int h = mc - i < MR ? mc - i : MR;
        for (int k = 0; k < kc; k++) {
            float *d = dst + (size_t)k * MR;
            int r = 0;
            for (; r < h; r++) d[r] = A[(size_t)(i + r) * lda + k];
            for (; r < MR; r++) d[r] = 0.f;
        }
        dst += (size_t)kc * MR;
    }
}

/* The micro-kernel: acc (MR x NR) = sum over kc of a-panel x b-panel; then
 * C[0..h, 0..w) += acc (or = acc when !add). */
static void micro(int kc, const float *ap, const float *bp, float *C, int ldc, int h, int w, int add) {
#if MIMI_HAVE_AVX2
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        __m256 a;
        a = _mm256_broadcast_ss(ap + 0); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
        ap += MR;
        bp += NR;
    }
    if (h == MR && w == NR) {
#define ROW(r, v0, v1)                                                          \
        do {                                                                    \
            float *cr = C + (size_t)(r) * ldc;                                  \
            if (add) {                                                          \
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));                    \
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));                \
            }                                                                   \
            _mm256_storeu_ps(cr, v0);                                           \
            _mm256_storeu_ps(cr + 8, v1);                                       \
        } while (0)
        ROW(0, c00, c01); ROW(1, c10, c11); ROW(2, c20, c21);
        ROW(3, c30, c31); ROW(4, c40, c41); ROW(5, c50, c51);
#undef ROW
        return;
    }
    float acc[MR * NR];
    _mm256_storeu_ps(acc + 0 * NR, c00); _mm256_storeu_ps(acc + 0 * NR + 8, c01);
    _mm256_storeu_ps(acc + 1 * NR, c10); _mm256_storeu_ps(acc + 1 * NR + 8, c11);
    _mm256_storeu_ps(acc + 2 * NR, c20); _mm256_storeu_ps(acc + 2 * NR + 8, c21);
    _mm256_storeu_ps(acc + 3 * NR, c30); _mm256_storeu_ps(acc + 3 * NR + 8, c31);
    _mm256_storeu_ps(acc + 4 * NR, c40); _mm256_storeu_ps(acc + 4 * NR + 8, c41);
    _mm256_storeu_ps(acc + 5 * NR, c50); _mm256_storeu_ps(acc + 5 * NR + 8, c51);
#else
    float acc[MR * NR] = {0};
    for (int k = 0; k < kc; k++) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r * NR + j] += ap[r] * bp[j];
        ap += MR;
        bp += NR;
    }
#endif
    for (int r = 0; r < h; r++)
        for (int j = 0; j < w; j++) {
            float *c = C + (size_t)r * ldc + j;
            *c = add ? *c + acc[r * NR + j] : acc[r * NR + j];
        }
}

/* Small N: C[m, j] (+)= dot(A[m, :], Bt[j, :]) with Bt (N, K). */
static void gemm_small_n(int M, int N, int K, const float *A, int lda, const float *Bt,
                         float *C, int ldc, int accumulate) {
    int m = 0;
#if MIMI_HAVE_AVX2
    for (; m + 4 <= M; m += 4) {
        const float *a0 = A + (size_t)m * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
        for (int j0 = 0; j0 < N; j0 += 2) {
            int nj = N - j0 < 2 ? N - j0 : 2;
            const float *b0 = Bt + (size_t)j0 * K, *b1 = nj > 1 ? b0 + K : b0;
            __m256 s00 = _mm256_setzero_ps(), s01 = _mm256_setzero_ps();
            __m256 s10 = _mm256_setzero_ps(), s11 = _mm256_setzero_ps();
            __m256 s20 = _mm256_setzero_ps(), s21 = _mm256_setzero_ps();
            __m256 s30 = _mm256_setzero_ps(), s31 = _mm256_setzero_ps();
            int k = 0;
            for (; k + 8 <= K; k += 8) {
                __m256 x0 = _mm256_loadu_ps(b0 + k), x1 = _mm256_loadu_ps(b1 + k);
                __m256 v;
                v = _mm256_loadu_ps(a0 + k); s00 = _mm256_fmadd_ps(v, x0, s00); s01 = _mm256_fmadd_ps(v, x1, s01);
                v = _mm256_loadu_ps(a1 + k); s10 = _mm256_fmadd_ps(v, x0, s10); s11 = _mm256_fmadd_ps(v, x1, s11);
                v = _mm256_loadu_ps(a2 + k); s20 = _mm256_fmadd_ps(v, x0, s20); s21 = _mm256_fmadd_ps(v, x1, s21);
                v = _mm256_loadu_ps(a3 + k); s30 = _mm256_fmadd_ps(v, x0, s30); s31 = _mm256_fmadd_ps(v, x1, s31);
            }
            float t[8][8];
            _mm256_storeu_ps(t[0], s00); _mm256_storeu_ps(t[1], s01);
            _mm256_storeu_ps(t[2], s10); _mm256_storeu_ps(t[3], s11);
            _mm256_storeu_ps(t[4], s20); _mm256_storeu_ps(t[5], s21);
            _mm256_storeu_ps(t[6], s30); _mm256_storeu_ps(t[7], s31);
            const float *ar[4] = {a0, a1, a2, a3};
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < nj; q++) {
                    const float *tv = t[2 * r + q];
                    float s = ((tv[0] + tv[4]) + (tv[1] + tv[5])) + ((tv[2] + tv[6]) + (tv[3] + tv[7]));
                    const float *bq = q ? b1 : b0;
                    for (int kk = k; kk < K; kk++) s += ar[r][kk] * bq[kk];
                    float *c = C + (size_t)(m + r) * ldc + j0 + q;
                    *c = accumulate ? *c + s : s;
                }
        }
    }
#endif
    for (; m < M; m++) {
        const float *a = A + (size_t)m * lda;
        for (int j = 0; j < N; j++) {
            const float *b = Bt + (size_t)j * K;
            float s = 0.f;
            for (int k = 0; k < K; k++) s += a[k] * b[k];
            float *c = C + (size_t)m * ldc + j;
            *c = accumulate ? *c + s : s;
        }
    }
}

void mimi_gemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
               float *C, int ldc, int accumulate) {
    MS_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    if (N < MIMI_GEMM_SMALL_N) {
        float *bt = malloc((size_t)N * K * sizeof(float));
        MS_ASSERT(bt);
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) bt[(size_t)j * K + k] = B[(size_t)k * ldb + j];
        gemm_small_n(M, N, K, A, lda, bt, C, ldc, accumulate);
        free(bt);
        return;
    }
    int ncap = N < NC ? N : NC;
    size_t bsz = (size_t)KC * ((ncap + NR - 1) / NR * NR);
    float *bp = aligned_alloc(64, ((bsz + MC * KC) * sizeof(float) + 63) / 64 * 64);
    MS_ASSERT(bp);
    float *ap = bp + bsz;
    for (int j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? N - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            int add = accumulate || k0 > 0;
            pack_b(kc, nc, B + (size_t)k0 * ldb + j0, ldb, bp);
            for (int i0 = 0; i0 < M; i0 += MC) {
                int mc = M - i0 < MC ? M - i0 : MC;
                pack_a(mc, kc, A + (size_t)i0 * lda + k0, lda, ap);
                for (int j = 0; j < nc; j += NR) {
                    int w = nc - j < NR ? nc - j : NR;
                    const float *bpan = bp + (size_t)(j / NR) * kc * NR;
                    for (int i = 0; i < mc; i += MR) {
                        int h = mc - i < MR ? mc - i : MR;
                        micro(kc, ap + (size_t)(i / MR) * kc * MR, bpan,
                              C + (size_t)(i0 + i) * ldc + j0 + j, ldc, h, w, add);
                    }
                }
            }
        }
    }
    free(bp);
}
