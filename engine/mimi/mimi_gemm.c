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
#define PR 16            /* rows per panel of the panel layout */
#define PANEL_MAX_N 12   /* widest product the panel kernel takes */
#define PANEL_PREFETCH 96 /* k-steps (64 bytes each) the panel kernel prefetches ahead */

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

/* pack_a from a 16-row panel layout (see mimi_gemm_panel): rows i0.., cols k0.. */
static void pack_a_from_panel(int mc, int kc, const float *P, int K, int i0, int k0, float *dst) {
    for (int i = 0; i < mc; i += MR) {
        int h = mc - i < MR ? mc - i : MR;
        for (int k = 0; k < kc; k++) {
            float *d = dst + (size_t)k * MR;
            int r = 0;
            for (; r < h; r++) {
                int row = i0 + i + r;
                d[r] = P[((size_t)(row / PR) * K + k0 + k) * PR + row % PR];
            }
            for (; r < MR; r++) d[r] = 0.f;
        }
        dst += (size_t)kc * MR;
    }
}

/* The micro-kernel: acc (MR x NR) = sum over kc of a-panel x b-panel; then
 * C[0..h, 0..w) += acc (or = acc when !add). */
static inline __attribute__((always_inline)) void micro_core(int kc, const float *ap, const float *bp,
                                                             const float *const *brow, float *C, int ldc,
                                                             int h, int w, int add) {
#if MIMI_HAVE_AVX2
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        const float *bk = brow ? brow[k] : bp;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
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
        const float *bk = brow ? brow[k] : bp;
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r * NR + j] += ap[r] * bk[j];
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

static void micro(int kc, const float *ap, const float *bp, float *C, int ldc, int h, int w, int add) {
    micro_core(kc, ap, bp, NULL, C, ldc, h, w, add);
}

/* B row k read in place at brow[k] (NR floats), no packing. */
static void micro_rows(int kc, const float *ap, const float *const *brow, float *C, int ldc, int h, int add) {
    micro_core(kc, ap, NULL, brow, C, ldc, h, NR, add);
}

#if MIMI_HAVE_AVX2
static inline float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

/* R rows of A against NC columns of Bt (compile-time R, NC after inlining):
 * R*NC vector accumulators; b read from L1 by the FMAs, A streamed once. */
static inline __attribute__((always_inline)) void small_block(int nrow, int ncol, int K, const float *A, int lda,
                                                              const float *Bt, int ldbt, float *C, int ldc,
                                                              int accumulate) {
    __m256 acc[4][7];
#pragma GCC unroll 4
    for (int r = 0; r < nrow; r++)
#pragma GCC unroll 7
        for (int j = 0; j < ncol; j++) acc[r][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
#pragma GCC unroll 4
        for (int r = 0; r < nrow; r++) {
            __m256 a = _mm256_loadu_ps(A + (size_t)r * lda + k);
#pragma GCC unroll 7
            for (int j = 0; j < ncol; j++)
                acc[r][j] = _mm256_fmadd_ps(a, _mm256_loadu_ps(Bt + (size_t)j * ldbt + k), acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nrow; r++)
#pragma GCC unroll 7
        for (int j = 0; j < ncol; j++) {
            float s = hsum8(acc[r][j]);
            for (int kk = k; kk < K; kk++) s += A[(size_t)r * lda + kk] * Bt[(size_t)j * ldbt + kk];
            float *c = C + (size_t)r * ldc + j;
            *c = accumulate ? *c + s : s;
        }
}

/* rows x columns per block for N columns in all: at most 14 accumulators */
#define SMALL_CASE(R, NCOL)                                                                         \
    for (; m + (R) <= M; m += (R)) small_block(R, NCOL, K, A + (size_t)m * lda, lda, Bt + (size_t)j0 * ldbt, ldbt, \
                                               C + (size_t)m * ldc + j0, ldc, accumulate)
#endif

/* Small N: C[m, j] (+)= dot(A[m, :], Bt[j, :]) with Bt (N, K). A is read
 * once per group of up to 7 columns (once in all for N <= 7). */
static void gemm_small_n(int M, int N, int K, const float *A, int lda, const float *Bt,
                         float *C, int ldc, int accumulate) {
    const int ldbt = K;
    for (int j0 = 0; j0 < N; j0 += 7) {
        int nc = N - j0 < 7 ? N - j0 : 7;
        int m = 0;
#if MIMI_HAVE_AVX2
        switch (nc) {
        case 1: SMALL_CASE(4, 1); break;
        case 2: SMALL_CASE(4, 2); break;
        case 3: SMALL_CASE(4, 3); break;
        case 4: SMALL_CASE(3, 4); break;
        case 5: SMALL_CASE(2, 5); break;
        case 6: SMALL_CASE(2, 6); break;
        default: SMALL_CASE(2, 7); break;
        }
#endif
        for (; m < M; m++) {
            const float *a = A + (size_t)m * lda;
            for (int j = j0; j < j0 + nc; j++) {
                const float *b = Bt + (size_t)j * ldbt;
                float s = 0.f;
                for (int k = 0; k < K; k++) s += a[k] * b[k];
                float *c = C + (size_t)m * ldc + j;
                *c = accumulate ? *c + s : s;
            }
        }
    }
}

size_t mimi_gemm_packed_size(int M, int K) {
    return (size_t)((M + MR - 1) / MR * MR) * (size_t)K;
}

void mimi_gemm_pack_a(int M, int K, const float *A, int lda, float *dst) {
    size_t mpad = (size_t)((M + MR - 1) / MR * MR);
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC;
        pack_a(M, kc, A + k0, lda, dst + (size_t)k0 * mpad);
    }
}

/* The blocked product; A packed on the fly (A, lda) or pre-packed (Ap). */
static void gemm_blocked(int M, int N, int K, const float *A, int lda, const float *Ap, const float *P,
                         const float *B, int ldb, float *C, int ldc, int accumulate, float *scratch) {
    int ncap = N < NC ? N : NC;
    size_t bsz = (size_t)KC * ((ncap + NR - 1) / NR * NR);
    size_t asz = Ap ? 0 : (size_t)MC * KC;
    MS_ASSERT(bsz + asz <= MIMI_GEMM_SCRATCH);
    float *bp = scratch ? scratch : aligned_alloc(64, ((bsz + asz) * sizeof(float) + 63) / 64 * 64);
    MS_ASSERT(bp);
    float *ap = bp + bsz;
    size_t mpad = (size_t)((M + MR - 1) / MR * MR);
    for (int j0 = 0; j0 < N; j0 += NC) {
        int nc = N - j0 < NC ? N - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            int add = accumulate || k0 > 0;
            pack_b(kc, nc, B + (size_t)k0 * ldb + j0, ldb, bp);
            for (int i0 = 0; i0 < M; i0 += MC) {
                int mc = M - i0 < MC ? M - i0 : MC;
                const float *apan;
                if (Ap) apan = Ap + (size_t)k0 * mpad + (size_t)i0 * kc;
                else if (P) {
                    pack_a_from_panel(mc, kc, P, K, i0, k0, ap);
                    apan = ap;
                } else {
                    pack_a(mc, kc, A + (size_t)i0 * lda + k0, lda, ap);
                    apan = ap;
                }
                for (int j = 0; j < nc; j += NR) {
                    int w = nc - j < NR ? nc - j : NR;
                    const float *bpan = bp + (size_t)(j / NR) * kc * NR;
                    for (int i = 0; i < mc; i += MR) {
                        int h = mc - i < MR ? mc - i : MR;
                        micro(kc, apan + (size_t)(i / MR) * kc * MR, bpan,
                              C + (size_t)(i0 + i) * ldc + j0 + j, ldc, h, w, add);
                    }
                }
            }
        }
    }
    if (!scratch) free(bp);
}

static int gemm_trivial(int M, int N, int K, float *C, int ldc, int accumulate) {
    MS_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return 1;
    if (K == 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        return 1;
    }
    return 0;
}

void mimi_gemm_prepacked(int M, int N, int K, const float *Ap, const float *B, int ldb,
                         float *C, int ldc, int accumulate, float *scratch) {
    if (gemm_trivial(M, N, K, C, ldc, accumulate)) return;
    gemm_blocked(M, N, K, NULL, 0, Ap, NULL, B, ldb, C, ldc, accumulate, scratch);
}

void mimi_gemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
               float *C, int ldc, int accumulate) {
    if (gemm_trivial(M, N, K, C, ldc, accumulate)) return;
    if (N < MIMI_GEMM_SMALL_N) {
        float *bt = malloc((size_t)N * K * sizeof(float));
        MS_ASSERT(bt);
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) bt[(size_t)j * K + k] = B[(size_t)k * ldb + j];
        gemm_small_n(M, N, K, A, lda, bt, C, ldc, accumulate);
        free(bt);
        return;
    }
    gemm_blocked(M, N, K, A, lda, NULL, NULL, B, ldb, C, ldc, accumulate, NULL);
}

/* ---- the panel layout: weights streamed once by small-N products ---- */

size_t mimi_panel_size(int M, int K) {
    return (size_t)((M + PR - 1) / PR * PR) * (size_t)K;
}

void mimi_panel_pack(int M, int K, const float *A, int lda, float *dst) {
    int np = (M + PR - 1) / PR;
    for (int p = 0; p < np; p++)
        for (int k = 0; k < K; k++)
            for (int r = 0; r < PR; r++) {
                int row = p * PR + r;
                dst[((size_t)p * K + k) * PR + r] = row < M ? A[(size_t)row * lda + k] : 0.f;
            }
}

#if MIMI_HAVE_AVX2
/* One column group (ncol <= 6) over every panel: per k, two vectors of the
 * panel (16 rows) times ncol broadcast values of B; 2*ncol accumulators. */
static inline __attribute__((always_inline)) void panel_group(int ncol, int M, int K, const float *P, const float *B,
                                                              int ldb, float *C, int ldc, int accumulate) {
    int np = (M + PR - 1) / PR;
    for (int p = 0; p < np; p++) {
        const float *a = P + (size_t)p * K * PR;
        __m256 acc0[6], acc1[6];
#pragma GCC unroll 6
        for (int j = 0; j < ncol; j++) acc0[j] = acc1[j] = _mm256_setzero_ps();
        for (int k = 0; k < K; k++) {
            _mm_prefetch((const char *)(a + (size_t)(k + PANEL_PREFETCH) * PR), _MM_HINT_T0);
            __m256 a0 = _mm256_loadu_ps(a + (size_t)k * PR), a1 = _mm256_loadu_ps(a + (size_t)k * PR + 8);
            const float *b = B + (size_t)k * ldb;
#pragma GCC unroll 6
            for (int j = 0; j < ncol; j++) {
                __m256 bj = _mm256_broadcast_ss(b + j);
                acc0[j] = _mm256_fmadd_ps(a0, bj, acc0[j]);
                acc1[j] = _mm256_fmadd_ps(a1, bj, acc1[j]);
            }
        }
        float t[6][PR];
#pragma GCC unroll 6
        for (int j = 0; j < ncol; j++) {
            _mm256_storeu_ps(t[j], acc0[j]);
            _mm256_storeu_ps(t[j] + 8, acc1[j]);
        }
        int rows = M - p * PR < PR ? M - p * PR : PR;
        for (int r = 0; r < rows; r++) {
            float *c = C + (size_t)(p * PR + r) * ldc;
            for (int j = 0; j < ncol; j++) c[j] = accumulate ? c[j] + t[j][r] : t[j][r];
        }
    }
}
#endif

void mimi_gemm_panel(int M, int N, int K, const float *P, const float *B, int ldb, float *C, int ldc,
                     int accumulate, float *scratch) {
    if (gemm_trivial(M, N, K, C, ldc, accumulate)) return;
    if (N > PANEL_MAX_N) {
        gemm_blocked(M, N, K, NULL, 0, NULL, P, B, ldb, C, ldc, accumulate, scratch);
        return;
    }
    for (int j0 = 0; j0 < N; j0 += 6) {
        int nc = N - j0 < 6 ? N - j0 : 6;
        const float *b = B + j0;
        float *c = C + j0;
#if MIMI_HAVE_AVX2
        switch (nc) {
        case 1: panel_group(1, M, K, P, b, ldb, c, ldc, accumulate); break;
        case 2: panel_group(2, M, K, P, b, ldb, c, ldc, accumulate); break;
        case 3: panel_group(3, M, K, P, b, ldb, c, ldc, accumulate); break;
        case 4: panel_group(4, M, K, P, b, ldb, c, ldc, accumulate); break;
        case 5: panel_group(5, M, K, P, b, ldb, c, ldc, accumulate); break;
        default: panel_group(6, M, K, P, b, ldb, c, ldc, accumulate); break;
        }
#else
        for (int i = 0; i < M; i++)
            for (int j = 0; j < nc; j++) {
                float s = 0.f;
                for (int k = 0; k < K; k++) s += P[((size_t)(i / PR) * K + k) * PR + i % PR] * b[(size_t)k * ldb + j];
                c[(size_t)i * ldc + j] = accumulate ? c[(size_t)i * ldc + j] + s : s;
            }
#endif
    }
}

/* ---- stride-1 convolutions straight from their input ---------------- */

void mimi_gemm_conv_direct(int M, const float *Ap, const mimi_conv_src *c, float *C, int ldc) {
    const int K = c->cin * c->K, nstreams = c->n;
    MS_ASSERT(c->S == 1 && c->Tout % NR == 0);
    size_t mpad = (size_t)((M + MR - 1) / MR * MR);
    const float *brow[KC];
    for (int s = 0; s < nstreams; s++) {
        const float *xs = c->xb + (size_t)s * c->cin * c->L;
        for (int t0 = 0; t0 < c->Tout; t0 += NR) {
            for (int k0 = 0; k0 < K; k0 += KC) {
                int kc = K - k0 < KC ? K - k0 : KC;
                for (int k = 0; k < kc; k++) {
                    int r = k0 + k, ci = r / c->K, kk = r % c->K;
                    brow[k] = xs + (size_t)ci * c->L + (size_t)kk * c->dil + t0;
                }
                const float *ablk = Ap + (size_t)k0 * mpad;
                float *cc = C + (size_t)s * c->Tout + t0;
                for (int i = 0; i < M; i += MR) {
                    int h = M - i < MR ? M - i : MR;
                    micro_rows(kc, ablk + (size_t)i * kc, brow, cc + (size_t)i * ldc, ldc, h, 1);
                }
            }
        }
    }
}
