/* cu_sample.cu - top-k + temperature sampling by Gumbel-max, on device, one
 * block per row: a threshold select then an argmax, no host round trip.
 * C twin: samp_topk_rows (engine/lm/samp.h), the CPU backend's sampler; the
 * arithmetic of a draw is samp.h's, shared with it; the radix pass logic is
 * samp_core.h's, which also replays this kernel on the host
 * (samp_radix_rows, tested against samp_topk in tests/check_samp.c).
 *
 *  1. greedy rows (temp <= 0): the maximum of the 64-bit rank keys
 *     (samp_key: value, then lower index), one block reduction;
 *  2. top-k rows: the k-th largest rank key by MSD radix select, 8 bits a
 *     pass (at most 8 passes, usually 2-4: it stops as soon as the keys that
 *     share the chosen prefix are exactly the ones still needed); the top k
 *     are then the keys >= that threshold, the same set as the CPU's heap
 *     (all keys of a row are distinct);
 *  3. every thread scores its candidates (samp_score + samp_gumbel in
 *     double) and the block keeps the best (samp_better: score, then lower
 *     index, a total order, so the reduction order does not matter).
 * The row is re-read from global memory each pass (L1/L2 resident: 128 KB
 * for the 32000 text logits).
 */
#include "cu_bf16.cuh"
#include "cu_kern.h"
#include "cu_reduce.cuh"
#include "samp_core.h"

#define SP_THREADS 256
#define SP_WARPS (SP_THREADS / CU_WARP)
#define SP_BINS SAMP_RADIX_BINS

/* Block-wide best (s, i) over every thread's candidate; the result is valid
 * in thread 0. i < 0 means no candidate. */
__device__ __forceinline__ void sp_block_best(double &s, int &i, double *ss, int *si) {
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
#pragma unroll
    for (int o = CU_WARP / 2; o > 0; o >>= 1) {
        double os = __shfl_xor_sync(CU_FULL_MASK, s, o);
        int oi = __shfl_xor_sync(CU_FULL_MASK, i, o);
        if (oi >= 0 && samp_better(os, oi, s, i)) { s = os; i = oi; }
    }
    if (lane == 0) { ss[warp] = s; si[warp] = i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < SP_WARPS; w++)
            if (si[w] >= 0 && samp_better(ss[w], si[w], s, i)) { s = ss[w]; i = si[w]; }
    }
}

/* The k-th largest rank key of the row (1 <= k < N): exactly k keys are >=
 * the returned threshold. Same value in every thread. */
__device__ uint64_t sp_kth_key(const float *l, int N, int k) {
    __shared__ unsigned int hist[SP_BINS];
    __shared__ unsigned long long s_prefix, s_mask;
    __shared__ int s_krem, s_done;
    const int lane = threadIdx.x % CU_WARP;
    if (threadIdx.x == 0) { s_prefix = 0; s_mask = 0; s_krem = k; s_done = 0; }
    for (int shift = 64 - SAMP_RADIX_BITS; shift >= 0; shift -= SAMP_RADIX_BITS) {
        for (int j = threadIdx.x; j < SP_BINS; j += SP_THREADS) hist[j] = 0;
        __syncthreads();
        const unsigned long long prefix = s_prefix, mask = s_mask;
        /* every lane runs the same trip count so the warp can aggregate its
         * atomics (logits crowd into few bins in the first passes) */
        for (int base = 0; base < N; base += SP_THREADS) {
            int i = base + threadIdx.x;
            unsigned int bin = SP_BINS | (unsigned)lane;   /* inactive: a bin of its own */
            if (i < N) {
                uint64_t key = samp_key(l[i], (uint32_t)i);
                if ((key & mask) == prefix) bin = (unsigned)(key >> shift) & (SP_BINS - 1u);
            }
            unsigned int peers = __match_any_sync(CU_FULL_MASK, bin);
            if (bin < SP_BINS && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (unsigned)__popc(peers));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int krem = s_krem, done = 0;
            int d = samp_radix_pick(hist, &krem, &done);
            s_prefix = prefix | ((unsigned long long)d << shift);
            s_mask = mask | ((unsigned long long)(SP_BINS - 1) << shift);
            s_krem = krem;
            s_done = done;
        }
        __syncthreads();
        if (s_done) break;
    }
    return s_prefix;
}

/* The depformer's token feed-back, done by the thread that writes a row's
 * token (cu_samp_topk_feed): prev[b] = target[b * t_stride] where >= 0,
 * else the token; then the token becomes -1 where k >= dep_steps[b]. prev
 * NULL: none (cu_samp_topk_rows). With dy (cu_samp_topk_feed_emb): the
 * next sub-step's input too, by the whole block once the token is known
 * (*fed, shared): dy[b] = base[b] + table[prev[b]], the sum
 * cu_embed_add_rows makes (base[b] where prev[b] is not a row of table). */
typedef struct sp_feed {
    int32_t *prev;
    const int32_t *target;
    int t_stride;
    const int32_t *dep_steps;
    int k;
    float *dy;                /* (B, D) or NULL */
    const float *base;        /* (B, D) */
    const uint16_t *table;    /* (rows, D) bf16 */
    int D, rows;
} sp_feed;

__device__ __forceinline__ void sp_emit(int32_t *out, int b, int32_t tok, const sp_feed &f, int32_t *fed) {
    if (f.prev) {
        int32_t t = f.target[(size_t)b * f.t_stride];
        f.prev[b] = t >= 0 ? t : tok;
        *fed = f.prev[b];
        if (f.dep_steps && f.k >= f.dep_steps[b]) tok = -1;
    }
    out[b] = tok;
}

/* The block's part of the feed-back with dy (above), after sp_emit. */
__device__ __forceinline__ void sp_feed_dy(int b, const sp_feed &f, const int32_t *fed) {
    __syncthreads();
    const int v = *fed;
    const float *x = f.base + (size_t)b * f.D;
    float *y = f.dy + (size_t)b * f.D;
    if (v < 0 || v >= f.rows) {
        for (int d = threadIdx.x; d < f.D; d += SP_THREADS) y[d] = x[d];
    } else {
        for (int d = threadIdx.x; d < f.D; d += SP_THREADS) y[d] = x[d] + cu_bf2f(f.table[(size_t)v * f.D + d]);
    }
}

__global__ void __launch_bounds__(SP_THREADS)
sample_topk_kernel(int32_t *out,          /* (B) */
                   const float *logits,   /* (B, N) */
                   const samp_row *rows,  /* (B) */
                   int N, uint32_t stream_id, sp_feed feed) {
    __shared__ double ss[SP_WARPS];
    __shared__ int si[SP_WARPS];
    __shared__ unsigned long long sk[SP_WARPS];
    __shared__ int32_t fed;   /* the token fed back (feed.dy) */
    const float *l = logits + (size_t)blockIdx.x * N;   /* (N) */
    const samp_row p = rows[blockIdx.x];

    if (!(p.temp > 0.0f)) {   /* greedy: the largest rank key */
        unsigned long long best = 0;   /* every real key is > 0 */
        for (int i = threadIdx.x; i < N; i += SP_THREADS) {
            unsigned long long key = samp_key(l[i], (uint32_t)i);
            best = key > best ? key : best;
        }
#pragma unroll
        for (int o = CU_WARP / 2; o > 0; o >>= 1) {
            unsigned long long ok = __shfl_xor_sync(CU_FULL_MASK, best, o);
            best = ok > best ? ok : best;
        }
        if (threadIdx.x % CU_WARP == 0) sk[threadIdx.x / CU_WARP] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < SP_WARPS; w++) best = sk[w] > best ? sk[w] : best;
            sp_emit(out, blockIdx.x, (int32_t)(0xFFFFFFFFu - (uint32_t)best), feed, &fed);
        }
        if (feed.dy) sp_feed_dy(blockIdx.x, feed, &fed);
        return;
    }

    uint64_t thr = 0;   /* every key is >= 0: all N take part */
    if (p.topk > 0 && p.topk < N) thr = sp_kth_key(l, N, p.topk);
    double bs = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < N; i += SP_THREADS) {
        float v = l[i];
        if (samp_key(v, (uint32_t)i) < thr) continue;
        double g = samp_gumbel(rng_uniform(p.seed, p.step, stream_id, (uint32_t)i));
        double s = samp_score(v, p.temp, g);
        if (samp_better(s, i, bs, bi)) { bs = s; bi = i; }
    }
    sp_block_best(bs, bi, ss, si);
    if (threadIdx.x == 0) sp_emit(out, blockIdx.x, bi, feed, &fed);
    if (feed.dy) sp_feed_dy(blockIdx.x, feed, &fed);
}

extern "C" cudaError_t cu_samp_topk_rows(int32_t *out, const float *logits, const samp_row *rows, int B, int N,
                                         uint32_t stream_id, cudaStream_t stream) {
    if (B < 0 || N <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    sample_topk_kernel<<<(unsigned)B, SP_THREADS, 0, stream>>>(out, logits, rows, N, stream_id,
                                                               sp_feed{NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, 0, 0});
    return cudaGetLastError();
}

extern "C" cudaError_t cu_samp_topk_feed(int32_t *out, const float *logits, const samp_row *rows, int B, int N,
                                         uint32_t stream_id, int32_t *prev, const int32_t *target, int t_stride,
                                         const int32_t *dep_steps, int k, cudaStream_t stream) {
    if (B < 0 || N <= 0 || !prev || !target || t_stride < 1) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    sample_topk_kernel<<<(unsigned)B, SP_THREADS, 0, stream>>>(out, logits, rows, N, stream_id,
                                                               sp_feed{prev, target, t_stride, dep_steps, k, NULL,
                                                                       NULL, NULL, 0, 0});
    return cudaGetLastError();
}

extern "C" cudaError_t cu_samp_topk_feed_emb(int32_t *out, const float *logits, const samp_row *rows, int B, int N,
                                             uint32_t stream_id, int32_t *prev, const int32_t *target, int t_stride,
                                             const int32_t *dep_steps, int k, float *dy, const float *base,
                                             const uint16_t *table, int D, int table_rows, cudaStream_t stream) {
    if (B < 0 || N <= 0 || !prev || !target || t_stride < 1 || (dy && (!base || !table || D <= 0 || table_rows <= 0)))
        return cudaErrorInvalidValue;
    if (!dy) base = NULL, table = NULL, D = 0, table_rows = 0;   /* cu_samp_topk_feed's launch */
    if (B == 0) return cudaSuccess;
    sample_topk_kernel<<<(unsigned)B, SP_THREADS, 0, stream>>>(
        out, logits, rows, N, stream_id, sp_feed{prev, target, t_stride, dep_steps, k, dy, base, table, D, table_rows});
    return cudaGetLastError();
}
