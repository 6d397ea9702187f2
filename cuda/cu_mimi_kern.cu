/* cu_mimi_kern.cu - the Mimi codec's kernels, float32 storage and arithmetic,
 * over a batch of slots: the causal convolution's kept-state staging, the
 * direct convolution, the transposed and depthwise transposed convolutions
 * with their overlap state, ELU, GELU, the codec transformer's LayerNorm,
 * RoPE with the K/V ring store, ring attention, the residual add with layer
 * scale, a plain matrix product, the RVQ nearest-codebook search and the
 * RVQ sum. Layouts are the CPU codec's (engine/mimi/mimi_int.h): channel-
 * major activations (C, n*T), batch item s owning columns [s*T, (s+1)*T).
 *
 * Direct kernels, one thread per output value, rather than im2col and
 * cuBLAS: they are the CPU codec's loops with the batch and output index
 * spread over threads, which made them the simpler to make equal to the C
 * (the codes must be the CPU's, so the arithmetic is float32 throughout and
 * each sum runs in the C loop's order where the C has one). Speed on a
 * device is unmeasured; a tiled or cuBLAS product is the first thing to try
 * if the device check finds them slow (docs/cuda.md, "Mimi on the device").
 *
 * Per-slot state lives in slabs indexed through a slot array uploaded per
 * call: conv states (stride floats per slot, the CPU's state offsets
 * inside), and the transformer K/V (per slot (layers, 2, context, D)). A
 * ring row's position is implied by the slot's offset (steps since its
 * reset): row k holds the latest position p <= offset + T - 1 with p % ctx
 * == k, valid when p >= 0, which is what the CPU's pos[] array records.
 *
 * One writer per address: real rows name distinct slots (the host refuses
 * a repeat), and a graph bucket's padding rows, last in the batch, all
 * name the scratch slot; a kernel that stores a slot's state (the kept
 * conv and transposed-conv state, the K/V ring) stores it only for a row
 * whose slot differs from the previous row's (mm_stores), so of the
 * padding rows only the first writes the scratch slot and no two blocks of
 * a launch store to one address, whatever the bucket's real-row count. */
#include <float.h>
#include <limits.h>
#include <math.h>

#include "cu_kern.h"
#include "cu_reduce.cuh"
#include "mimi_elu.h" /* the CPU's ELU, the same operations */

#define MM_THREADS 128
/* Dynamic shared memory a launch may take without opting in (48 KiB). */
#define CU_MIMI_ATT_MAX_SMEM (48 * 1024)
#define RVQ_THREADS 256

static unsigned blocks_for(size_t n) { return (unsigned)((n + MM_THREADS - 1) / MM_THREADS); }

/* Whether row s stores its slot's state: not a padding row after the
 * first (the file's header). */
__device__ static inline bool mm_stores(const int32_t *slot, int s) { return s == 0 || slot[s] != slot[s - 1]; }


/* ---- element-wise ---------------------------------------------------------- */

__global__ void __launch_bounds__(MM_THREADS) mimi_elu_kernel(float *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i < n) y[i] = mimi_elu1(x[i]);
}

extern "C" cudaError_t cu_mimi_elu(float *y, const float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    mimi_elu_kernel<<<blocks_for(n), MM_THREADS, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(MM_THREADS) mimi_gelu_kernel(float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i < n) x[i] = 0.5f * x[i] * (1.f + erff(x[i] * (float)M_SQRT1_2));
}

extern "C" cudaError_t cu_mimi_gelu(float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    mimi_gelu_kernel<<<blocks_for(n), MM_THREADS, 0, stream>>>(x, n);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(MM_THREADS) mimi_add_scaled_kernel(float *x, const float *h, const float *g, int D,
                                                                      int N) {
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i >= (size_t)D * N) return;
    float s = g ? g[i / N] : 1.f;
    x[i] += s * h[i];
}

extern "C" cudaError_t cu_mimi_add_scaled(float *x, const float *h, const float *g, int D, int N, cudaStream_t stream) {
    if (D <= 0 || N < 0) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    mimi_add_scaled_kernel<<<blocks_for((size_t)D * N), MM_THREADS, 0, stream>>>(x, h, g, D, N);
    return cudaGetLastError();
}

/* ---- matrix product -------------------------------------------------------- */

/* C (M, N) [+]= A (M, K) . B (K, N), row-major: the tiled convolution below
 * with one item, a kernel of 1 and (cin, L, Tout) = (K, N, N), which is
 * exactly this product (its A is the weight matrix, its input B). */
extern "C" cudaError_t cu_mimi_gemm(float *C, const float *A, const float *B, int M, int N, int K, int accumulate,
                                    cudaStream_t stream) {
    if (M <= 0 || N < 0 || K <= 0) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    return cu_mimi_conv(C, B, A, NULL, 1, K, M, 1, 1, 1, N, N, accumulate, NULL, stream);
}

/* ---- convolutions ---------------------------------------------------------- */

/* xb[s] (cin, P + T) = [the slot's kept state (cin, P) | elu?(x) of item s];
 * with first[s] set, the state part is the first input column repeated
 * (the replicate-initialised downsample). */
__global__ void __launch_bounds__(MM_THREADS) mimi_stage_kernel(float *xb, const float *state, size_t state_stride,
                                                                 size_t state_off, const float *x,
                                                                 const int32_t *slot, const int32_t *first, int n,
                                                                 int cin, int T, int P, int elu) {
    const int L = P + T;
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i >= (size_t)n * cin * L) return;
    int l = (int)(i % L), ci = (int)(i / L % cin), s = (int)(i / L / cin);
    const size_t NT = (size_t)n * T;
    float v;
    if (l >= P) {
        v = x[ci * NT + (size_t)s * T + (l - P)];
        if (elu) v = mimi_elu1(v);
    } else if (first && first[s]) {
        v = x[ci * NT + (size_t)s * T];
        if (elu) v = mimi_elu1(v);
    } else {
        v = state[(size_t)slot[s] * state_stride + state_off + (size_t)ci * P + l];
    }
    xb[i] = v;
}

/* The slot's new state: the last P columns of xb[s] (beside the direct
 * convolution; the tiled one keeps it from its staged windows). */
__global__ void __launch_bounds__(MM_THREADS) mimi_keep_kernel(float *state, size_t state_stride, size_t state_off,
                                                                const float *xb, const int32_t *slot, int n, int cin,
                                                                int T, int P) {
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i >= (size_t)n * cin * P) return;
    int p = (int)(i % P), ci = (int)(i / P % cin), s = (int)(i / P / cin);
    if (!mm_stores(slot, s)) return;
    state[(size_t)slot[s] * state_stride + state_off + (size_t)ci * P + p] = xb[((size_t)s * cin + ci) * (P + T) + T + p];
}

extern "C" cudaError_t cu_mimi_conv_stage(float *xb, float *state, size_t state_stride, size_t state_off,
                                          const float *x, const int32_t *slot, const int32_t *first, int n, int cin,
                                          int T, int P, int elu, cudaStream_t stream) {
    if (n <= 0 || cin <= 0 || T <= 0 || P < 0) return cudaErrorInvalidValue;
    size_t tot = (size_t)n * cin * (P + T);
    mimi_stage_kernel<<<blocks_for(tot), MM_THREADS, 0, stream>>>(xb, state, state_stride, state_off, x, slot, first,
                                                                   n, cin, T, P, elu);
    return cudaGetLastError();
}

/* y[co, s*Tout + t] = [y +] b[co] + sum over ci, kk (in that order) of
 * w[co, ci*K + kk] * xb[s][ci][t*S + kk*dil].
 *
 * Tiled, so that every global load is a run of contiguous floats: a block
 * takes TNc consecutive output columns (those of one or more items) and TM
 * output channels, and walks the input channels in chunks of CC. Per chunk
 * it stages the weights (TM rows of CC*K floats, each row contiguous) and,
 * for each item its columns touch, the input window they read (CC rows of
 * at most Wmax contiguous floats of xb[s]) into shared memory; then each
 * thread adds its TL_RM outputs' terms from shared memory, in the C's order
 * (ci ascending across the chunks, kk within). TNc is the smallest power of
 * two from 4 to 128 that covers the columns, and the threads a column does
 * not use take more channels (TM = 128 / TNc * rm, rm <= TL_RM rows per
 * thread, fewer when the grid would be small: tile_rows), so a narrow
 * product (one item, T = 2) still runs every thread. The shapes are cu_mimi_conv's
 * (tile_plan); one whose chunk of a single channel would not fit takes the
 * direct kernel below. */
#define TL_THREADS 128
#define TL_RM 4
#define TL_SMEM_FLOATS (CU_MIMI_ATT_MAX_SMEM / (int)sizeof(float))

typedef struct tile_plan {
    int TNc, TM, CC, nsl, Wmax;
} tile_plan;

/* The channels a tile takes: cg channel groups of rm rows each, rm the
 * largest of max_rm, max_rm / 2, ... 1 that still gives TL_MIN_BLOCKS
 * blocks (a narrow layer spread over the SMs rather than a few blocks). */
#define TL_MIN_BLOCKS 128
static int tile_rows(int cg, int max_rm, size_t col_tiles, int cout) {
    int rm = max_rm;
    while (rm > 1 && col_tiles * (size_t)((cout + cg * rm - 1) / (cg * rm)) < TL_MIN_BLOCKS) rm /= 2;
    return cg * rm;
}

/* 0 when no chunk fits (the caller takes the direct kernel). */
static int conv_tile_plan(tile_plan *p, int n, int cin, int cout, int K, int S, int dil, int Tout) {
    const size_t NO = (size_t)n * Tout;
    int TNc = 4;
    while (TNc < 128 && (size_t)TNc < NO) TNc *= 2;
    const int TM = tile_rows(TL_THREADS / TNc, TL_RM, (NO + TNc - 1) / TNc, cout);
    const int span = TNc < Tout ? TNc : Tout;
    int nsl = (TNc - 1) / Tout + 2;
    if (nsl > n) nsl = n;
    const long Wmax = (long)(span - 1) * S + (long)(K - 1) * dil + 1;
    const long per = (long)TM * K + (long)nsl * Wmax;
    long CC = (TL_SMEM_FLOATS - TM) / per;   /* and the TM biases */
    if (CC > 32) CC -= CC % 32;   /* chunks start on 128-byte (32-byte) multiples of a weight row */
    else if (CC > 8) CC -= CC % 8;
    if (CC > cin) CC = cin;
    if (CC < 1) return 0;
    p->TNc = TNc;
    p->TM = TM;
    p->CC = (int)CC;
    p->nsl = nsl;
    p->Wmax = (int)Wmax;
    return 1;
}

__global__ void __launch_bounds__(TL_THREADS) mimi_conv_tiled_kernel(float *y, const float *xb, const float *w,
                                                                      const float *b, int n, int cin, int cout, int K,
                                                                      int S, int dil, int L, int Tout, int accumulate,
                                                                      tile_plan p, cu_mimi_keep kp) {
    extern __shared__ float tl_smem[];
    const int TNc = p.TNc, TM = p.TM, CC = p.CC, Wmax = p.Wmax, CG = TL_THREADS / TNc, CK = CC * K;
    float *ws = tl_smem, *xs = tl_smem + (size_t)TM * CK, *bs = xs + (size_t)p.nsl * CC * Wmax;
    const int NO = n * Tout;
    const int c0 = blockIdx.x * TNc, co0 = blockIdx.y * TM;
    const int cend = min(c0 + TNc, NO);
    const int s_first = c0 / Tout, s_last = (cend - 1) / Tout;
    const int tid = threadIdx.x, rg = tid / TNc, col = c0 + tid % TNc;
    const int s = col / Tout, t = col % Tout;
    const int tlo = s == s_first ? c0 % Tout : 0;
    float acc[TL_RM];
#pragma unroll
    for (int r = 0; r < TL_RM; r++) acc[r] = 0.f;
    for (int ci0 = 0; ci0 < cin; ci0 += CC) {
        const int cc = min(CC, cin - ci0), ck = cc * K;
        __syncthreads();   /* the previous chunk is consumed */
        if (ci0 == 0)
            for (int i = tid; i < TM; i += TL_THREADS) bs[i] = b && co0 + i < cout ? b[co0 + i] : 0.f;
        /* the loops run over the valid elements only, so a warp's lanes
         * load in step (no lane skips an iteration another one loads in) */
        const int nr = min(TM, cout - co0);
        for (int i = tid; i < nr * ck; i += TL_THREADS) {
            const int rl = i / ck, e = i % ck;
            ws[rl * CK + e] = w[((size_t)(co0 + rl) * cin + ci0) * K + e];
        }
        for (int sj = s_first; sj <= s_last; sj++) {
            const int lo = (sj == s_first ? c0 % Tout : 0) * S;
            const int wd = (sj == s_last ? (cend - 1) % Tout : Tout - 1) * S + (K - 1) * dil - lo + 1;
            const float *src = xb + ((size_t)sj * cin + ci0) * L + lo;
            float *dst = xs + (size_t)(sj - s_first) * CC * Wmax;
            for (int i = tid; i < cc * wd; i += TL_THREADS)
                dst[(i / wd) * Wmax + i % wd] = src[(size_t)(i / wd) * L + i % wd];
        }
        __syncthreads();
        /* the kept state: the blocks of the first channel tile write it for
         * each item whose last column is theirs (their windows then reach
         * the input's last column), a contiguous run per item and chunk */
        if (kp.P > 0 && blockIdx.y == 0)
            for (int sj = s_first; sj <= s_last; sj++) {
                if ((sj + 1) * Tout > cend) continue;   /* its last column is another tile's */
                if (!mm_stores(kp.slot, sj)) continue;
                const int lo = (sj == s_first ? c0 % Tout : 0) * S, T = L - kp.P;
                float *dst = kp.state + (size_t)kp.slot[sj] * kp.stride + kp.off + (size_t)ci0 * kp.P;
                const float *src = xs + (size_t)(sj - s_first) * CC * Wmax + (T - lo);
                for (int i = tid; i < cc * kp.P; i += TL_THREADS) dst[i] = src[(size_t)(i / kp.P) * Wmax + i % kp.P];
            }
        if (col >= NO) continue;
        const float *xr = xs + (size_t)(s - s_first) * CC * Wmax + (size_t)(t - tlo) * S;
#pragma unroll
        for (int r = 0; r < TL_RM; r++) {
            const int rl = rg + CG * r;
            if (rl >= TM || co0 + rl >= cout) break;
            const float *wr = ws + (size_t)rl * CK;
            float a = acc[r];
            for (int cil = 0; cil < cc; cil++)
                for (int kk = 0; kk < K; kk++) a += wr[cil * K + kk] * xr[(size_t)cil * Wmax + kk * dil];
            acc[r] = a;
        }
    }
    if (col >= NO) return;
#pragma unroll
    for (int r = 0; r < TL_RM; r++) {
        const int co = co0 + rg + CG * r;
        if (rg + CG * r >= TM || co >= cout) break;
        const size_t i = (size_t)co * NO + col;
        float base = bs[co - co0];
        if (accumulate) base += y[i];
        y[i] = base + acc[r];
    }
}

/* The direct form: one thread per output value, the same sum. */
__global__ void __launch_bounds__(MM_THREADS) mimi_conv_kernel(float *y, const float *xb, const float *w,
                                                                const float *b, int n, int cin, int cout, int K, int S,
                                                                int dil, int L, int Tout, int accumulate) {
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    const size_t NO = (size_t)n * Tout;
    if (i >= (size_t)cout * NO) return;
    int co = (int)(i / NO), col = (int)(i % NO), s = col / Tout, t = col % Tout;
    const float *wr = w + (size_t)co * cin * K;
    const float *xs = xb + (size_t)s * cin * L + (size_t)t * S;
    float acc = 0.f;
    for (int ci = 0; ci < cin; ci++)
        for (int kk = 0; kk < K; kk++) acc += wr[ci * K + kk] * xs[(size_t)ci * L + (size_t)kk * dil];
    float base = b ? b[co] : 0.f;
    if (accumulate) base += y[i];
    y[i] = base + acc;
}

extern "C" cudaError_t cu_mimi_conv(float *y, const float *xb, const float *w, const float *b, int n, int cin,
                                    int cout, int K, int S, int dil, int L, int Tout, int accumulate,
                                    const cu_mimi_keep *keep, cudaStream_t stream) {
    if (n <= 0 || cin <= 0 || cout <= 0 || K <= 0 || S <= 0 || dil <= 0 || Tout <= 0 ||
        (size_t)(Tout - 1) * S + (size_t)(K - 1) * dil >= (size_t)L ||
        (keep && keep->P > 0 && (keep->P >= L || (size_t)Tout * S + keep->P != (size_t)L)))
        return cudaErrorInvalidValue;
    cu_mimi_keep kp = {NULL, 0, 0, NULL, 0};
    if (keep && keep->P > 0) kp = *keep;
    tile_plan p;
    if (conv_tile_plan(&p, n, cin, cout, K, S, dil, Tout)) {
        const size_t smem = sizeof(float) * ((size_t)p.TM * p.CC * K + (size_t)p.nsl * p.CC * p.Wmax + p.TM);
        const dim3 grid((unsigned)(((size_t)n * Tout + p.TNc - 1) / p.TNc), (unsigned)((cout + p.TM - 1) / p.TM));
        mimi_conv_tiled_kernel<<<grid, TL_THREADS, smem, stream>>>(y, xb, w, b, n, cin, cout, K, S, dil, L, Tout,
                                                                    accumulate, p, kp);
        return cudaGetLastError();
    }
    if (kp.P > 0) {
        mimi_keep_kernel<<<blocks_for((size_t)n * cin * kp.P), MM_THREADS, 0, stream>>>(
            kp.state, kp.stride, kp.off, xb, kp.slot, n, cin, L - kp.P, kp.P);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    mimi_conv_kernel<<<blocks_for((size_t)cout * n * Tout), MM_THREADS, 0, stream>>>(y, xb, w, b, n, cin, cout, K, S,
                                                                                      dil, L, Tout, accumulate);
    return cudaGetLastError();
}

/* Transposed convolution, step one: full[s][co][u] (u < Tout + PT) =
 * sum over kk (in order) of z(co, kk, s, t) for t*S + kk == u, then the
 * slot's kept partial sums added on u < PT; z = w[co*K + kk, :] . x[:, s*T
 * + t] (depthwise: w[co, kk] * x[co, s*T + t]).
 *
 * Tiled as the convolution: a block takes TNc consecutive (item, u)
 * columns and TM output channels and walks the input channels in chunks of
 * CC, staging the weights (for each of its channels and kk, CC contiguous
 * floats) and the input columns its outputs read (per input channel one
 * contiguous run of x: the items' columns are adjacent) in shared memory.
 * Each output keeps one partial z per term (at most TR_TERMS: K <=
 * TR_TERMS * S), summed over ci in order across the chunks, then added in
 * kk order. Shapes outside the plan take the direct kernel. */
#define TR_TERMS 4
#define TR_RM 8
#define TR_THREADS 128

typedef struct tr_plan {
    int TNc, TM, CC, Wx;
} tr_plan;

static int convtr_tile_plan(tr_plan *p, int n, int cin, int cout, int K, int S, int T) {
    const int U = T * S + K - S;
    const size_t NU = (size_t)n * U;
    if (K > TR_TERMS * S) return 0;
    int TNc = 4;
    while (TNc < TR_THREADS && (size_t)TNc < NU) TNc *= 2;
    const int TM = tile_rows(TR_THREADS / TNc, TR_RM, (NU + TNc - 1) / TNc, cout);
    int nsl = (TNc - 1) / U + 2;
    if (nsl > n) nsl = n;
    long Wx = ((long)TNc + (long)nsl * K) / S + nsl + 1;
    if (Wx > (long)n * T) Wx = (long)n * T;
    long CC = TL_SMEM_FLOATS / ((long)TM * K + Wx);
    if (CC > 32) CC -= CC % 32;
    else if (CC > 8) CC -= CC % 8;
    if (CC > cin) CC = cin;
    if (CC < 1) return 0;
    p->TNc = TNc;
    p->TM = TM;
    p->CC = (int)CC;
    p->Wx = (int)Wx;
    return 1;
}

/* The first input column (item-major, s*T + t) the outputs of columns
 * [c, ...) of this tile read: slot c / U's earliest t. */
__device__ static inline int tr_first_col(int c, int U, int T, int K, int S) {
    const int s = c / U, u = c % U, d = u - K + 1;
    const int t = d <= 0 ? 0 : (d + S - 1) / S;
    return s * T + t;
}

__global__ void __launch_bounds__(TR_THREADS) mimi_convtr_tiled_kernel(float *full, const float *state,
                                                                        size_t state_stride, size_t state_off,
                                                                        const float *x, const float *w,
                                                                        const int32_t *slot, int n, int cin, int cout,
                                                                        int K, int S, int T, tr_plan p) {
    extern __shared__ float tl_smem[];
    const int TNc = p.TNc, TM = p.TM, CC = p.CC, Wx = p.Wx, CG = TR_THREADS / TNc;
    const int PT = K - S, U = T * S + PT, NU = n * U, NT = n * T;
    float *ws = tl_smem, *xs = tl_smem + (size_t)TM * K * CC;
    const int c0 = blockIdx.x * TNc, co0 = blockIdx.y * TM, cend = min(c0 + TNc, NU);
    const int cA = tr_first_col(c0, U, T, K, S);
    const int sl = (cend - 1) / U, ul = (cend - 1) % U;
    const int cB = sl * T + min(T - 1, ul / S);   /* the last column read */
    const int tid = threadIdx.x, rg = tid / TNc, c = c0 + tid % TNc;
    const int s = c / U, u = c % U;
    const int ttop = min(T - 1, u / S), kk0 = u - ttop * S;   /* the first term: kk ascending, t descending */
    float z[TR_RM][TR_TERMS];
#pragma unroll
    for (int r = 0; r < TR_RM; r++)
#pragma unroll
        for (int m = 0; m < TR_TERMS; m++) z[r][m] = 0.f;
    for (int ci0 = 0; ci0 < cin; ci0 += CC) {
        const int cc = min(CC, cin - ci0);
        __syncthreads();   /* the previous chunk is consumed */
        /* over the valid elements only: a warp's lanes load in step */
        const int nrk = min(TM, cout - co0) * K, run = cB - cA + 1;
        for (int i = tid; i < nrk * cc; i += TR_THREADS) {
            const int cil = i % cc, rk = i / cc;
            ws[rk * CC + cil] = w[((size_t)co0 * K + rk) * cin + ci0 + cil];
        }
        for (int i = tid; i < cc * run; i += TR_THREADS) {
            const int e = i % run, cil = i / run;
            xs[cil * Wx + e] = x[(size_t)(ci0 + cil) * NT + cA + e];
        }
        __syncthreads();
        if (c >= NU) continue;
#pragma unroll
        for (int r = 0; r < TR_RM; r++) {
            const int rl = rg + CG * r;
            if (rl >= TM || co0 + rl >= cout) break;
#pragma unroll
            for (int m = 0; m < TR_TERMS; m++) {
                const int kk = kk0 + m * S, t = ttop - m;
                if (kk >= K || t < 0) break;
                const float *wr = ws + ((size_t)rl * K + kk) * CC, *xr = xs + (s * T + t - cA);
                float a = z[r][m];
                for (int cil = 0; cil < cc; cil++) a += wr[cil] * xr[(size_t)cil * Wx];
                z[r][m] = a;
            }
        }
    }
    if (c >= NU) return;
#pragma unroll
    for (int r = 0; r < TR_RM; r++) {
        const int co = co0 + rg + CG * r;
        if (rg + CG * r >= TM || co >= cout) break;
        float v = 0.f;
#pragma unroll
        for (int m = 0; m < TR_TERMS; m++) {
            if (kk0 + m * S >= K || ttop - m < 0) break;
            v += z[r][m];
        }
        if (u < PT) v += state[(size_t)slot[s] * state_stride + state_off + (size_t)co * PT + u];
        full[((size_t)s * cout + co) * U + u] = v;
    }
}

/* The depthwise form: z = w[co, kk] * x[co, s*T + t]. A block takes DW_CO
 * channels and the columns of up to DW_COLS / T items: it stages each
 * channel's run of x (contiguous) in shared memory, then writes full with
 * its lanes across u and the channels (contiguous in full). */
#define DW_CO 32
#define DW_COLS 256

__global__ void __launch_bounds__(TR_THREADS) mimi_convtr_dw_kernel(float *full, const float *state,
                                                                     size_t state_stride, size_t state_off,
                                                                     const float *x, const float *w,
                                                                     const int32_t *slot, int n, int cout, int K,
                                                                     int S, int T, int ns) {
    __shared__ float xs[DW_CO * DW_COLS];
    const int PT = K - S, U = T * S + PT, NT = n * T;
    const int co0 = blockIdx.x * DW_CO, s0 = blockIdx.y * ns, nco = min(DW_CO, cout - co0), nsl = min(ns, n - s0);
    const int W = nsl * T;
    for (int i = threadIdx.x; i < nco * W; i += TR_THREADS) {
        const int e = i % W, cl = i / W;
        xs[cl * W + e] = x[(size_t)(co0 + cl) * NT + (size_t)s0 * T + e];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nsl * nco * U; i += TR_THREADS) {
        const int u = i % U, cl = i / U % nco, sl = i / U / nco, co = co0 + cl, s = s0 + sl;
        float v = 0.f;
        for (int kk = 0; kk < K; kk++) {
            int d = u - kk;
            if (d < 0 || d % S) continue;
            int t = d / S;
            if (t >= T) continue;
            v += w[(size_t)co * K + kk] * xs[cl * W + sl * T + t];
        }
        if (u < PT) v += state[(size_t)slot[s] * state_stride + state_off + (size_t)co * PT + u];
        full[((size_t)s * cout + co) * U + u] = v;
    }
}

__global__ void __launch_bounds__(MM_THREADS) mimi_convtr_kernel(float *full, const float *state, size_t state_stride,
                                                                  size_t state_off, const float *x, const float *w,
                                                                  const int32_t *slot, int n, int cin, int cout, int K,
                                                                  int S, int T, int depthwise) {
    const int PT = K - S, Tout = T * S, U = Tout + PT;
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i >= (size_t)n * cout * U) return;
    int u = (int)(i % U), co = (int)(i / U % cout), s = (int)(i / U / cout);
    const size_t NT = (size_t)n * T;
    float v = 0.f;
    for (int kk = 0; kk < K; kk++) {
        int d = u - kk;
        if (d < 0 || d % S) continue;
        int t = d / S;
        if (t >= T) continue;
        float z;
        if (depthwise) {
            z = w[(size_t)co * K + kk] * x[co * NT + (size_t)s * T + t];
        } else {
            const float *wr = w + ((size_t)co * K + kk) * cin;
            z = 0.f;
            for (int ci = 0; ci < cin; ci++) z += wr[ci] * x[ci * NT + (size_t)s * T + t];
        }
        v += z;
    }
    if (u < PT) v += state[(size_t)slot[s] * state_stride + state_off + (size_t)co * PT + u];
    full[i] = v;
}

/* Step two: y = [y +] full + b over u < Tout; the slot keeps full[u >= Tout]. */
__global__ void __launch_bounds__(MM_THREADS) mimi_convtr_out_kernel(float *y, float *state, size_t state_stride,
                                                                      size_t state_off, const float *full,
                                                                      const float *b, const int32_t *slot, int n,
                                                                      int cout, int K, int S, int T, int accumulate) {
    const int PT = K - S, Tout = T * S, U = Tout + PT;
    size_t i = (size_t)blockIdx.x * MM_THREADS + threadIdx.x;
    if (i >= (size_t)n * cout * U) return;
    int u = (int)(i % U), co = (int)(i / U % cout), s = (int)(i / U / cout);
    if (u >= Tout) {
        if (mm_stores(slot, s))
            state[(size_t)slot[s] * state_stride + state_off + (size_t)co * PT + (u - Tout)] = full[i];
        return;
    }
    float bb = b ? b[co] : 0.f;
    float *yp = y + (size_t)co * n * Tout + (size_t)s * Tout + u;
    *yp = accumulate ? *yp + (full[i] + bb) : full[i] + bb;
}

extern "C" cudaError_t cu_mimi_convtr(float *y, float *full, float *state, size_t state_stride, size_t state_off,
                                      const float *x, const float *w, const float *b, const int32_t *slot, int n,
                                      int cin, int cout, int K, int S, int T, int depthwise, int accumulate,
                                      cudaStream_t stream) {
    if (n <= 0 || cin <= 0 || cout <= 0 || S <= 0 || K < S || T <= 0 || (depthwise && cin != cout))
        return cudaErrorInvalidValue;
    size_t tot = (size_t)n * cout * (T * S + K - S);
    tr_plan p;
    if (depthwise && T <= DW_COLS) {
        const int ns = DW_COLS / T;
        const dim3 grid((unsigned)((cout + DW_CO - 1) / DW_CO), (unsigned)((n + ns - 1) / ns));
        mimi_convtr_dw_kernel<<<grid, TR_THREADS, 0, stream>>>(full, state, state_stride, state_off, x, w, slot, n,
                                                                cout, K, S, T, ns);
    } else if (!depthwise && convtr_tile_plan(&p, n, cin, cout, K, S, T)) {
        const size_t smem = sizeof(float) * ((size_t)p.TM * K * p.CC + (size_t)p.CC * p.Wx);
        const dim3 grid((unsigned)(((size_t)n * (T * S + K - S) + p.TNc - 1) / p.TNc),
                        (unsigned)((cout + p.TM - 1) / p.TM));
        mimi_convtr_tiled_kernel<<<grid, TR_THREADS, smem, stream>>>(full, state, state_stride, state_off, x, w, slot,
                                                                      n, cin, cout, K, S, T, p);
    } else {
        mimi_convtr_kernel<<<blocks_for(tot), MM_THREADS, 0, stream>>>(full, state, state_stride, state_off, x, w,
                                                                        slot, n, cin, cout, K, S, T, depthwise);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    mimi_convtr_out_kernel<<<blocks_for(tot), MM_THREADS, 0, stream>>>(y, state, state_stride, state_off, full, b,
                                                                        slot, n, cout, K, S, T, accumulate);
    return cudaGetLastError();
}

/* ---- transformer ----------------------------------------------------------- */

/* y[:, j] = LayerNorm(x[:, j]) * w + b (mean and variance in double, as
 * the C). A block takes LN_TJ = the smallest power of two >= min(N, 32)
 * columns; its threads are (column, channel group): thread (jl, g) sums the
 * channels g, g + G, ... (G = LN_THREADS / LN_TJ) of column jl, so a warp's
 * lanes read contiguous floats of x (whole rows of the tile, or, with few
 * columns, consecutive rows); the G partial sums of a column are added in
 * group order. */
#define LN_THREADS 128

/* The mean over D channels of column jl from each thread's partial sum a:
 * the G partials of the column added in group order by group 0. Starts
 * with a barrier, so stat may still be read by the caller before it. */
__device__ double ln_column_mean(double a, double *part, double *stat, int TJ, int G, int jl, int g, int D) {
    __syncthreads();   /* every thread has read stat (a previous mean) */
    part[threadIdx.x] = a;
    __syncthreads();
    if (g == 0) {
        double m = 0;
        for (int q = 0; q < G; q++) m += part[q * TJ + jl];
        stat[jl] = m / D;
    }
    __syncthreads();
    return stat[jl];
}

__global__ void __launch_bounds__(LN_THREADS) mimi_layer_norm_kernel(float *y, const float *x, const float *w,
                                                                      const float *b, int D, int N, int TJ) {
    __shared__ double part[LN_THREADS];
    __shared__ double stat[LN_THREADS];
    const int G = LN_THREADS / TJ, jl = threadIdx.x % TJ, g = threadIdx.x / TJ, j = blockIdx.x * TJ + jl;
    const int ok = j < N;
    double a = 0;
    if (ok)
        for (int d = g; d < D; d += G) a += x[(size_t)d * N + j];
    const double mean = ln_column_mean(a, part, stat, TJ, G, jl, g, D);
    a = 0;
    if (ok)
        for (int d = g; d < D; d += G) {
            double e = x[(size_t)d * N + j] - mean;
            a += e * e;
        }
    const double var = ln_column_mean(a, part, stat, TJ, G, jl, g, D);
    if (!ok) return;
    const float inv = (float)(1.0 / sqrt(var + 1e-5));
    const float mu = (float)mean;
    for (int d = g; d < D; d += G) y[(size_t)d * N + j] = (x[(size_t)d * N + j] - mu) * inv * w[d] + b[d];
}

extern "C" cudaError_t cu_mimi_layer_norm(float *y, const float *x, const float *w, const float *b, int D, int N,
                                          cudaStream_t stream) {
    if (D <= 0 || N < 0) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    int TJ = 1;
    while (TJ < 32 && TJ < N) TJ *= 2;
    mimi_layer_norm_kernel<<<(unsigned)((N + TJ - 1) / TJ), LN_THREADS, 0, stream>>>(y, x, w, b, D, N, TJ);
    return cudaGetLastError();
}

/* Rotate q and k of column j = s*T + t at position offset[s] + t (the C's
 * interleaved RoPE: angle freq[i] * (float)pos, float cos and sin) and
 * store k and v in the slot's ring row pos % ctx of this layer. Two
 * launches, so the store reads rotated keys.
 *
 * The rotation: q and k are the first 2D rows of qkv, and the pair
 * (2m, 2m+1) of rows is pair m % (hd / 2) of its head. A block takes RB
 * pairs of rows over all N columns, 2 RB N contiguous floats, loads them
 * into shared memory as one run, rotates them there (a thread per (pair,
 * column)) and writes the run back. */
#define RP_THREADS 128
#define RP_MAX_N (CU_MIMI_ATT_MAX_SMEM / (2 * (int)sizeof(float)))

__global__ void __launch_bounds__(RP_THREADS) mimi_rope_kernel(float *qkv, const int64_t *offset, const float *freq,
                                                                int n, int T, int D, int hd, int RB) {
    extern __shared__ float rp[];
    const int N = n * T, half = hd / 2;
    const int m0 = blockIdx.x * RB, nm = min(RB, D - m0);
    float *g = qkv + (size_t)2 * m0 * N;
    const int cnt = 2 * nm * N;
    for (int i = threadIdx.x; i < cnt; i += RP_THREADS) rp[i] = g[i];
    __syncthreads();
    for (int i = threadIdx.x; i < nm * N; i += RP_THREADS) {
        const int ml = i / N, j = i % N, k = (m0 + ml) % half;
        long pos = (long)offset[j / T] + j % T;
        float ang = freq[k] * (float)pos;
        float cs = cosf(ang), sn = sinf(ang);
        float *a = rp + (size_t)2 * ml * N + j, *b = a + N;
        float re = *a, im = *b;
        *a = re * cs - im * sn;
        *b = re * sn + im * cs;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += RP_THREADS) g[i] = rp[i];
}

/* The store: a block takes a tile of KS_TJ columns (the smallest power of
 * two >= min(N, 32)) x KS_THREADS / KS_TJ channels, reads k and v with its
 * lanes across the columns (contiguous in qkv) and writes each column's
 * ring row with its lanes across the channels (contiguous in the ring),
 * through shared memory. */
#define KS_THREADS 256

__global__ void __launch_bounds__(KS_THREADS) mimi_kv_store_kernel(float *kv, size_t kv_slot, const float *qkv,
                                                                    const int32_t *slot, const int64_t *offset,
                                                                    int layer, int n, int T, int D, int ctx, int TJ) {
    __shared__ float tk[2 * KS_THREADS], tv[2 * KS_THREADS];   /* TD rows of TJ + 1 (padded by one) */
    const int N = n * T, TD = KS_THREADS / TJ, j0 = blockIdx.x * TJ, d0 = blockIdx.y * TD;
    {
        const int jl = threadIdx.x % TJ, dl = threadIdx.x / TJ, j = j0 + jl, d = d0 + dl;
        if (j < N && d < D) {
            tk[dl * (TJ + 1) + jl] = qkv[(size_t)(D + d) * N + j];
            tv[dl * (TJ + 1) + jl] = qkv[(size_t)(2 * D + d) * N + j];
        }
    }
    __syncthreads();
    const int dl = threadIdx.x % TD, jl = threadIdx.x / TD, j = j0 + jl, d = d0 + dl;
    if (j >= N || d >= D) return;
    const int s = j / T;
    if (!mm_stores(slot, s)) return;
    long pos = (long)offset[s] + j % T;
    float *kr = kv + (size_t)slot[s] * kv_slot + (size_t)layer * 2 * ctx * D, *vr = kr + (size_t)ctx * D;
    int row = (int)(pos % ctx);
    kr[(size_t)row * D + d] = tk[dl * (TJ + 1) + jl];
    vr[(size_t)row * D + d] = tv[dl * (TJ + 1) + jl];
}

extern "C" cudaError_t cu_mimi_rope_store(float *qkv, float *kv, size_t kv_slot, const int32_t *slot,
                                          const int64_t *offset, const float *freq, int layer, int n, int T, int D,
                                          int heads, int ctx, cudaStream_t stream) {
    if (n <= 0 || T <= 0 || heads <= 0 || D % heads || (D / heads) % 2 || ctx < T) return cudaErrorInvalidValue;
    const int hd = D / heads, N = n * T;
    if (N > RP_MAX_N) return cudaErrorInvalidValue;
    int RB = RP_THREADS / N;
    if (RB < 1) RB = 1;
    mimi_rope_kernel<<<(unsigned)((D + RB - 1) / RB), RP_THREADS, sizeof(float) * 2 * (size_t)RB * N, stream>>>(
        qkv, offset, freq, n, T, D, hd, RB);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    int TJ = 1;
    while (TJ < 32 && TJ < N) TJ *= 2;
    const dim3 grid((unsigned)((N + TJ - 1) / TJ), (unsigned)((D + KS_THREADS / TJ - 1) / (KS_THREADS / TJ)));
    mimi_kv_store_kernel<<<grid, KS_THREADS, 0, stream>>>(kv, kv_slot, qkv, slot, offset, layer, n, T, D, ctx, TJ);
    return cudaGetLastError();
}

/* att[h*hd + d, j] = softmax over the valid ring rows of q . k / sqrt(hd),
 * times v, as the C's three passes (max, sum of exponentials, then the
 * weighted sum with weight e * (1 / sum)), each score computed once. A row
 * is valid when its implied position p (see the header) satisfies
 * 0 <= p <= pos and pos - p < ctx. Grid (N columns, heads), MA_THREADS
 * threads; dynamic shared memory (mimi_attend_smem): the scores (ctx), q
 * (hd) and the value partial sums (max(MA_THREADS, hd)).
 * Scores: a warp per ring row, its lanes across the head's channels
 * (coalesced), a shuffle sum. Values: thread t takes channel t % hd over
 * every (MA_THREADS / hd)-th row, then the partial sums are added. */
#define MA_THREADS 128
#define MA_WARPS (MA_THREADS / CU_WARP)

static size_t mimi_attend_smem(int hd, int ctx) {
    return sizeof(float) * ((size_t)ctx + (size_t)hd + (size_t)(hd > MA_THREADS ? hd : MA_THREADS));
}

__global__ void __launch_bounds__(MA_THREADS) mimi_attend_kernel(float *att, const float *qkv, const float *kv,
                                                                  size_t kv_slot, const int32_t *slot,
                                                                  const int64_t *offset, int layer, int n, int T,
                                                                  int D, int hd, int ctx) {
    extern __shared__ float ma_smem[];
    __shared__ float red[MA_WARPS];
    __shared__ float stat[2];
    float *sc = ma_smem, *qs = sc + ctx, *acc = qs + hd;
    const int N = n * T, j = blockIdx.x, h = blockIdx.y, s = j / T;
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const long last = (long)offset[s] + T - 1, pos = (long)offset[s] + j % T;
    const float *kr = kv + (size_t)slot[s] * kv_slot + (size_t)layer * 2 * ctx * D + (size_t)h * hd;
    const float *vr = kr + (size_t)ctx * D;
    const float scale = 1.f / sqrtf((float)hd);
    for (int d = threadIdx.x; d < hd; d += MA_THREADS) qs[d] = qkv[(size_t)(h * hd + d) * N + j];
    __syncthreads();
    /* scores; the validity test is the warp's, so the shuffles run full */
    for (int k = warp; k < ctx; k += MA_WARPS) {
        long pk = last - ((last - k) % ctx + ctx) % ctx;
        if (pk < 0 || pk > pos || pos - pk >= ctx) {
            if (lane == 0) sc[k] = -INFINITY;
            continue;
        }
        float a = 0.f;
        for (int d = lane; d < hd; d += CU_WARP) a = fmaf(qs[d], kr[(size_t)k * D + d], a);
        a = cu_warp_sum(a);
        if (lane == 0) sc[k] = a * scale;
    }
    __syncthreads();
    float mx = -FLT_MAX;
    for (int k = threadIdx.x; k < ctx; k += MA_THREADS) mx = fmaxf(mx, sc[k]);
#pragma unroll
    for (int o = CU_WARP / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(CU_FULL_MASK, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = red[0];
        for (int w = 1; w < MA_WARPS; w++) m = fmaxf(m, red[w]);
        stat[0] = m;
    }
    __syncthreads();
    const float m = stat[0];
    float l = 0.f;
    for (int k = threadIdx.x; k < ctx; k += MA_THREADS) {
        float e = sc[k] == -INFINITY ? 0.f : expf(sc[k] - m);
        sc[k] = e;
        l += e;
    }
    l = cu_warp_sum(l);
    if (lane == 0) red[warp] = l;   /* thread 0 read the maxima before the barrier above */
    __syncthreads();
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int w = 0; w < MA_WARPS; w++) L += red[w];
        stat[1] = 1.f / L;
    }
    __syncthreads();
    const float inv = stat[1];
    const int G = hd < MA_THREADS ? MA_THREADS / hd : 1;   /* row groups */
    for (int i = threadIdx.x; i < G * hd; i += MA_THREADS) {
        const int d = i % hd, g = i / hd;
        float a = 0.f;
        for (int k = g; k < ctx; k += G) {
            float e = sc[k];
            if (e == 0.f) continue;
            a = fmaf(e * inv, vr[(size_t)k * D + d], a);
        }
        acc[i] = a;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += MA_THREADS) {
        float a = 0.f;
        for (int g = 0; g < G; g++) a += acc[g * hd + d];
        att[(size_t)(h * hd + d) * N + j] = a;
    }
}

extern "C" cudaError_t cu_mimi_attend(float *att, const float *qkv, const float *kv, size_t kv_slot,
                                      const int32_t *slot, const int64_t *offset, int layer, int n, int T, int D,
                                      int heads, int ctx, cudaStream_t stream) {
    if (n <= 0 || T <= 0 || heads <= 0 || D % heads || ctx < T) return cudaErrorInvalidValue;
    size_t smem = mimi_attend_smem(D / heads, ctx);
    if (smem > CU_MIMI_ATT_MAX_SMEM) return cudaErrorInvalidValue;
    mimi_attend_kernel<<<dim3((unsigned)(n * T), (unsigned)heads), MA_THREADS, smem, stream>>>(
        att, qkv, kv, kv_slot, slot, offset, layer, n, T, D, D / heads, ctx);
    return cudaGetLastError();
}

/* ---- RVQ -------------------------------------------------------------------- */

/* One level for item s = blockIdx.x: the entry j minimising |e_j|^2 - 2 e_j . r
 * (the C's distance, lowest index on ties), code written, r -= e_code.
 * Thread t scores the entries t, t + RVQ_THREADS, ...; the codebook is read
 * in tiles of RVQ_THREADS entries x RVQ_DC dimensions staged through shared
 * memory (each entry's RVQ_DC floats a contiguous run), and the residual
 * column once, so each dot product still runs over d in order. */
#define RVQ_DC 32
#define RVQ_MAX_DQ 2048   /* the residual column in shared memory beside the tile: under 48 KiB */

__global__ void __launch_bounds__(RVQ_THREADS) mimi_rvq_level_kernel(int32_t *codes, int code_stride, float *r,
                                                                      const float *cb, const float *norms, int n,
                                                                      int Dq, int bins) {
    __shared__ float bd[RVQ_THREADS];
    __shared__ int bi[RVQ_THREADS];
    __shared__ float tile[RVQ_THREADS * (RVQ_DC + 1)];   /* +1: a thread's row starts in its own bank */
    extern __shared__ float rv[];                        /* the residual column (Dq) */
    const int s = blockIdx.x, tid = threadIdx.x;
    for (int d = tid; d < Dq; d += RVQ_THREADS) rv[d] = r[(size_t)d * n + s];
    float best = INFINITY;
    int besti = INT_MAX;
    for (int j0 = 0; j0 < bins; j0 += RVQ_THREADS) {
        const int nj = min(RVQ_THREADS, bins - j0), j = j0 + tid;
        float dot = 0.f;
        for (int d0 = 0; d0 < Dq; d0 += RVQ_DC) {
            const int dc = min(RVQ_DC, Dq - d0);
            __syncthreads();   /* the previous tile is consumed (and rv written) */
            for (int i = tid; i < nj * dc; i += RVQ_THREADS) {
                const int jl = i / dc, e = i % dc;
                tile[jl * (RVQ_DC + 1) + e] = cb[(size_t)(j0 + jl) * Dq + d0 + e];
            }
            __syncthreads();
            if (tid < nj)
                for (int e = 0; e < dc; e++) dot += tile[tid * (RVQ_DC + 1) + e] * rv[d0 + e];
        }
        if (tid < nj) {
            float dist = norms[j] - 2.f * dot;
            if (dist < best) {
                best = dist;
                besti = j;
            }
        }
    }
    bd[tid] = best;
    bi[tid] = besti;
    __syncthreads();
    for (int w = RVQ_THREADS / 2; w > 0; w /= 2) {
        if (tid < w) {
            float d2 = bd[tid + w];
            int i2 = bi[tid + w];
            if (d2 < bd[tid] || (d2 == bd[tid] && i2 < bi[tid])) {
                bd[tid] = d2;
                bi[tid] = i2;
            }
        }
        __syncthreads();
    }
    const int code = bi[0] == INT_MAX ? 0 : bi[0];   /* no finite distance: entry 0, as the C */
    if (tid == 0) codes[(size_t)s * code_stride] = code;
    const float *e = cb + (size_t)code * Dq;
    for (int d = tid; d < Dq; d += RVQ_THREADS) r[(size_t)d * n + s] = rv[d] - e[d];
}

extern "C" cudaError_t cu_mimi_rvq_level(int32_t *codes, int code_stride, float *r, const float *cb,
                                         const float *norms, int n, int Dq, int bins, cudaStream_t stream) {
    if (n <= 0 || Dq <= 0 || bins <= 0 || Dq > RVQ_MAX_DQ) return cudaErrorInvalidValue;
    mimi_rvq_level_kernel<<<(unsigned)n, RVQ_THREADS, sizeof(float) * (size_t)Dq, stream>>>(codes, code_stride, r, cb,
                                                                                            norms, n, Dq, bins);
    return cudaGetLastError();
}

/* sum[d, s] = sum over levels (in order) of cb[l][codes[s*stride + l]][d].
 * A block takes TS items (the smallest power of two >= min(n, RS_MAX_TS))
 * x RS_THREADS / TS dimensions: the codebook rows are read with the lanes
 * across the dimensions (a warp's lanes on one item: its code is one
 * broadcast load), the sums written with the lanes across the items
 * (contiguous in the channel-major result), through shared memory. */
#define RS_THREADS 256
#define RS_MAX_TS 8

__global__ void __launch_bounds__(RS_THREADS) mimi_rvq_sum_kernel(float *sum, const int32_t *codes, int code_stride,
                                                                   const float *cb, int levels, int n, int Dq,
                                                                   int bins, int TS) {
    __shared__ float t[2 * RS_THREADS];   /* TS rows of TD + 1 */
    const int TD = RS_THREADS / TS, s0 = blockIdx.x * TS, d0 = blockIdx.y * TD;
    {
        const int dl = threadIdx.x % TD, sl = threadIdx.x / TD, s = s0 + sl, d = d0 + dl;
        if (s < n && d < Dq) {
            float v = 0.f;
            for (int l = 0; l < levels; l++) {
                int c = codes[(size_t)s * code_stride + l];
                if (c < 0 || c >= bins) c = 0;   /* refused on the host before the upload */
                v += cb[((size_t)l * bins + c) * Dq + d];
            }
            t[sl * (TD + 1) + dl] = v;
        }
    }
    __syncthreads();
    const int sl = threadIdx.x % TS, dl = threadIdx.x / TS, s = s0 + sl, d = d0 + dl;
    if (s < n && d < Dq) sum[(size_t)d * n + s] = t[sl * (TD + 1) + dl];
}

extern "C" cudaError_t cu_mimi_rvq_sum(float *sum, const int32_t *codes, int code_stride, const float *cb, int levels,
                                       int n, int Dq, int bins, cudaStream_t stream) {
    if (n <= 0 || Dq <= 0 || bins <= 0 || levels < 0) return cudaErrorInvalidValue;
    int TS = 1;
    while (TS < RS_MAX_TS && TS < n) TS *= 2;
    const dim3 grid((unsigned)((n + TS - 1) / TS), (unsigned)((Dq + RS_THREADS / TS - 1) / (RS_THREADS / TS)));
    mimi_rvq_sum_kernel<<<grid, RS_THREADS, 0, stream>>>(sum, codes, code_stride, cb, levels, n, Dq, bins, TS);
    return cudaGetLastError();
}
