/* cu_lm.cu - the LM step's kernels besides the matvec, RMSNorm and the
 * sampler: embeddings, RoPE with the K/V packing (to a chunk's staging
 * rows, or in a step straight to the ring), attention over a slot's ring
 * (split over the ring, the last split of a row combining, one launch),
 * the K/V store through the slot-index array (prefill chunks), the
 * depformer's attention, SiLU gating, residual adds,
 * bf16 rounding for the GEMMs and the random-weight generator (the
 * depformer's token feed-back is the sampler's: cu_samp_topk_feed). C twins (cuda/cu_kern.h): kern_embed_add,
 * kern_rope, kern_attend_ring, kern_attend, kern_silu_gate, kern_add
 * (engine/cpu/kern_cpu.h), st_f32_to_bf16 (engine/base/st.h).
 *
 * Per-row arrays (slot, position, tokens) are device memory that the step
 * uploads once, so the same launches replay inside a CUDA graph for any
 * batch of the bucket's size. Every kernel is written for the emulator's
 * rules too: all threads of a block reach every barrier, warp ops run with
 * full warps, shared memory is written before it is read.
 */
#include <math.h>

#include "cu_bf16.cuh"
#include "cu_kern.h"
#include "cu_q8.cuh"
#include "cu_reduce.cuh"
#include "cu_rope.cuh"
extern "C" {
#include "lm_config.h"   /* LM_MAX_DEP_Q, LM_MAX_NQ */
}

#define EW_THREADS 128   /* element-wise kernels */

/* ---- embeddings ------------------------------------------------------------ */

/* x[b] = sum over q of audio[q][tok[b][1+q]] + text[tok[b][0]], in that
 * order (the CPU backend's embed: audio streams first, then text); -1 (or
 * a token past the table, which the dispatcher refuses) adds nothing. */
__global__ void __launch_bounds__(EW_THREADS)
embed_sum_kernel(float *x, const int32_t *tok, int tok_stride, const uint16_t *audio, const uint16_t *text,
                 int D, int n_q, int card, int text_card) {
    __shared__ int32_t t[LM_MAX_STREAMS];   /* the row's tokens: one load, not one per element */
    const int b = blockIdx.x;
    for (int i = threadIdx.x; i < 1 + n_q; i += EW_THREADS) t[i] = tok[(size_t)b * tok_stride + i];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += EW_THREADS) {
        float s = 0.0f;
        for (int q = 0; q < n_q; q++) {
            int v = t[1 + q];
            if (v >= 0 && v <= card) s += cu_bf2f(audio[((size_t)q * (card + 1) + v) * D + d]);
        }
        int v = t[0];
        if (v >= 0 && v <= text_card) s += cu_bf2f(text[(size_t)v * D + d]);
        x[(size_t)b * D + d] = s;
    }
}

extern "C" cudaError_t cu_embed_sum(float *x, const int32_t *tok, int tok_stride, const uint16_t *audio_emb,
                                    const uint16_t *text_emb, int B, int D, int n_q, int card, int text_card,
                                    cudaStream_t stream) {
    if (B < 0 || D <= 0 || n_q < 0 || n_q > LM_MAX_NQ || card <= 0 || text_card <= 0 || tok_stride < 1 + n_q)
        return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    embed_sum_kernel<<<(unsigned)B, EW_THREADS, 0, stream>>>(x, tok, tok_stride, audio_emb, text_emb, D, n_q, card,
                                                            text_card);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(EW_THREADS)
embed_add_kernel(float *y, const int32_t *tok, const uint16_t *table, int D, int rows) {
    const int b = blockIdx.x;
    const int v = tok[b];
    if (v < 0 || v >= rows) return;   /* the whole block: no barrier below */
    for (int d = threadIdx.x; d < D; d += EW_THREADS) y[(size_t)b * D + d] += cu_bf2f(table[(size_t)v * D + d]);
}

extern "C" cudaError_t cu_embed_add_rows(float *y, const int32_t *tok, const uint16_t *table, int B, int D, int rows,
                                         cudaStream_t stream) {
    if (B < 0 || D <= 0 || rows <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    embed_add_kernel<<<(unsigned)B, EW_THREADS, 0, stream>>>(y, tok, table, D, rows);
    return cudaGetLastError();
}

/* ---- RoPE and the K/V of the new positions ------------------------------- */

/* The 8-bit K/V rule: q8_scale, q8_round (cuda/cu_q8.cuh). */

/* Where a row's new key and value go: the chunk's staging rows (slot ==
 * nullptr: kv + b * 2D, k then v; Q8 scales at scales + b * 2 * heads, k's
 * heads then v's), or the ring row pos[b] % ctx of slot slot[b] (kv is
 * slot 0's view of the layer: keys (ctx, D), values (ctx, D); Q8 scales
 * (2, heads, ctx) after them, cu_kv_q8_layer_bytes' layout; slot_stride in
 * elements of T). */
template <typename T>
struct kv_dst {
    T *kv;
    float *scales;
    size_t slot_stride;
    const int32_t *slot;
    int ctx;
};

/* One block per row: rotate q and k (the first two thirds of the row) as
 * kern_rope does (cu_rope.cuh, which the QKV product's epilogue shares:
 * f = expf(i * rope_k), angle f * (float)pos, float cos and sin), then the
 * row's key and value to dst: bf16(k rotated) and bf16(v); or (T int8) the
 * rotated key and the value, a warp per head, quantized with their scales
 * (k's heads, then v's). */
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
qkv_rope_kernel(float *qkv, kv_dst<T> dst, const int64_t *pos, int heads, int head_dim, float rope_k) {
    constexpr bool Q8 = sizeof(T) == 1;
    __shared__ int64_t row_pos;
    __shared__ int32_t row_slot;
    const int b = blockIdx.x;
    const int D = heads * head_dim, half = head_dim / 2;
    if (threadIdx.x == 0) {
        row_pos = pos[b];
        row_slot = dst.slot ? dst.slot[b] : 0;
    }
    __syncthreads();
    float *q = qkv + (size_t)b * 3 * D, *k = q + D, *v = q + 2 * D;
    /* this row's key row, its value row (vo elements on) and its scales (sstride apart) */
    T *ko;
    size_t vo, sstride;
    float *so = nullptr;
    if (dst.slot) {
        T *base = dst.kv + (size_t)row_slot * dst.slot_stride;
        const size_t row = (size_t)(row_pos % dst.ctx);
        ko = base + row * D;
        vo = (size_t)dst.ctx * D;
        if constexpr (Q8) so = reinterpret_cast<float *>(base + (size_t)2 * dst.ctx * D) + row;
        sstride = (size_t)dst.ctx;
    } else {
        ko = dst.kv + (size_t)b * 2 * D;
        vo = (size_t)D;
        if constexpr (Q8) so = dst.scales + (size_t)b * 2 * heads;
        sstride = 1;
    }
    const float t = (float)row_pos;
    for (int p = threadIdx.x; p < heads * half; p += EW_THREADS) {
        int h = p / half, i = p % half;
        float cr, ci;
        cu_rope_cs(i, t, rope_k, &cr, &ci);
        size_t o = (size_t)h * head_dim + 2 * i;   /* even: the pair is one 8-byte (4 packed) access */
        float2 qv = *reinterpret_cast<const float2 *>(q + o), kv = *reinterpret_cast<const float2 *>(k + o);
        float2 kr = cu_rope_rot(kv.x, kv.y, cr, ci);
        *reinterpret_cast<float2 *>(q + o) = cu_rope_rot(qv.x, qv.y, cr, ci);
        *reinterpret_cast<float2 *>(k + o) = kr;
        if constexpr (!Q8)
            *reinterpret_cast<uint32_t *>(ko + o) = (uint32_t)cu_f2bf(kr.x) | (uint32_t)cu_f2bf(kr.y) << 16;
    }
    if constexpr (!Q8) {
        for (int d = threadIdx.x; d < D; d += EW_THREADS) ko[vo + d] = cu_f2bf(v[d]);
    } else {
        __syncthreads();   /* the rotated keys are written */
        const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
        for (int hw = warp; hw < 2 * heads; hw += EW_THREADS / CU_WARP) {
            const int which = hw / heads, h = hw % heads;
            const float *x = (which ? v : k) + (size_t)h * head_dim;
            float m = 0.0f;
            for (int d = lane; d < head_dim; d += CU_WARP) m = fmaxf(m, fabsf(x[d]));
            const float sc = q8_scale(warp_max(m));
            int8_t *o = ko + (size_t)which * vo + (size_t)h * head_dim;
            for (int d = lane; d < head_dim; d += CU_WARP) o[d] = q8_round(x[d], sc);
            if (lane == 0) so[(size_t)hw * sstride] = sc;
        }
    }
}

template <typename T>
static cudaError_t qkv_rope_launch(float *qkv, kv_dst<T> dst, const int64_t *pos, int B, int heads, int head_dim,
                                   float rope_k, cudaStream_t stream) {
    if (B < 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 || !dst.kv || (dst.slot && dst.ctx <= 0))
        return cudaErrorInvalidValue;
    /* the packed pairs: 4-byte stores of two bf16; the Q8 scales: 4-byte floats after the values */
    if (sizeof(T) == 2 && ((uintptr_t)dst.kv % 4 || (dst.slot && dst.slot_stride % 2))) return cudaErrorInvalidValue;
    if (sizeof(T) == 1 && dst.slot &&
        ((uintptr_t)dst.kv % 4 || dst.slot_stride % 4 || ((size_t)2 * dst.ctx * heads * head_dim) % 4))
        return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    qkv_rope_kernel<T><<<(unsigned)B, EW_THREADS, 0, stream>>>(qkv, dst, pos, heads, head_dim, rope_k);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_qkv_rope(float *qkv, uint16_t *kvl, const int64_t *pos, int B, int heads, int head_dim,
                                   float rope_k, cudaStream_t stream) {
    return qkv_rope_launch<uint16_t>(qkv, {kvl, nullptr, 0, nullptr, 0}, pos, B, heads, head_dim, rope_k, stream);
}

extern "C" cudaError_t cu_qkv_rope_q8(float *qkv, int8_t *kv8, float *kvs, const int64_t *pos, int B, int heads,
                                      int head_dim, float rope_k, cudaStream_t stream) {
    if (!kvs) return cudaErrorInvalidValue;
    return qkv_rope_launch<int8_t>(qkv, {kv8, kvs, 0, nullptr, 0}, pos, B, heads, head_dim, rope_k, stream);
}

extern "C" cudaError_t cu_qkv_rope_ring(float *qkv, uint16_t *kv_layer, size_t slot_stride, const int32_t *slot,
                                        const int64_t *pos, int B, int heads, int head_dim, int ctx, float rope_k,
                                        cudaStream_t stream) {
    if (!slot) return cudaErrorInvalidValue;
    return qkv_rope_launch<uint16_t>(qkv, {kv_layer, nullptr, slot_stride, slot, ctx}, pos, B, heads, head_dim,
                                     rope_k, stream);
}

extern "C" cudaError_t cu_qkv_rope_ring_q8(float *qkv, int8_t *kv_layer, size_t slot_stride, const int32_t *slot,
                                           const int64_t *pos, int B, int heads, int head_dim, int ctx, float rope_k,
                                           cudaStream_t stream) {
    if (!slot) return cudaErrorInvalidValue;
    return qkv_rope_launch<int8_t>(qkv, {kv_layer, nullptr, slot_stride, slot, ctx}, pos, B, heads, head_dim, rope_k,
                                   stream);
}

/* ---- attention over a slot's ring ------------------------------------------ */

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / CU_WARP)
#define ATT_PART (CU_ATT_MAX_HEAD_DIM + 2)   /* floats of one partial: m, l, acc[head_dim] */
/* The partials of row b, head h: (m, l) of every split first, contiguous
 * (the combine reads them with one warp-level load), then each split's
 * acc (CU_ATT_MAX_HEAD_DIM floats): splits * ATT_PART floats in all. */
__device__ __forceinline__ float *att_part(float *part, int b, int h, int heads, int splits) {
    return part + ((size_t)b * heads + h) * splits * ATT_PART;
}
/* Elements of a row a lane holds: CU_ATT_MAX_HEAD_DIM over a warp. */
#define ATT_LANE_ELEMS (CU_ATT_MAX_HEAD_DIM / CU_WARP)

/* The key of position x for row b (query position p, chunk start c0):
 * positions before c0 come from the ring (row x % ctx), the chunk's own
 * ones from kvl (row b - (p - x)); which = 0 keys, 1 values. In a step
 * whose new K/V the RoPE kernel wrote to the ring (kvl nullptr), c0 is
 * p + 1: every key from the ring. T: bf16 (uint16_t) or int8 elements. */
template <typename T>
__device__ __forceinline__ const T *att_row(const T *ring, const T *kvl, int b, int64_t p, int64_t c0, int64_t x,
                                            int ctx, int D, int which) {
    if (x < c0) return ring + (size_t)which * ctx * D + (size_t)(x % ctx) * D;
    return kvl + (size_t)(b - (int)(p - x)) * 2 * D + (size_t)which * D;
}

/* VEC consecutive elements of a row as floats: bf16, one 16-byte load for
 * VEC 8 (the caller checked the alignment), one 2-byte load for VEC 1;
 * int8, one 8-byte load for VEC 8, one byte for VEC 1. */
template <int VEC>
__device__ __forceinline__ void att_load(const uint16_t *p, float f[VEC]) {
    if constexpr (VEC == 8) {
        uint4 v = *reinterpret_cast<const uint4 *>(p);
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else {
        static_assert(VEC == 1, "att_load: VEC 8 or 1");
        f[0] = cu_bf2f(p[0]);
    }
}
template <int VEC>
__device__ __forceinline__ void att_load(const int8_t *p, float f[VEC]) {
    if constexpr (VEC == 8) {
        uint2 v = *reinterpret_cast<const uint2 *>(p);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[i] = (float)(int8_t)((v.x >> (8 * i)) & 0xFFu);
            f[4 + i] = (float)(int8_t)((v.y >> (8 * i)) & 0xFFu);
        }
    } else {
        static_assert(VEC == 1, "att_load: VEC 8 or 1");
        f[0] = (float)p[0];
    }
}

/* How a warp covers the rows of one head: a row is C = head_dim / VEC
 * chunks of VEC elements; a segment of Cp lanes (C rounded up to a power of
 * two, at most a warp) reads one row, lane cl taking chunks cl, cl + Cp, ..
 * (NC of them), so each load instruction of a warp reads 32 / Cp whole rows
 * of contiguous chunks: every sector it touches is used. */
struct att_geom {
    int C, Cp, NC, G;
};
__device__ __forceinline__ att_geom att_geometry(int head_dim, int vec) {
    att_geom g;
    g.C = head_dim / vec;
    g.Cp = 1;
    while (g.Cp < g.C && g.Cp < CU_WARP) g.Cp <<= 1;
    g.NC = (g.C + g.Cp - 1) / g.Cp;
    g.G = CU_WARP / g.Cp;
    return g;
}

/* The attention over the ring, split and combine in one launch. Grid
 * (heads, B, splits): block (h, b, s) takes keys [s * CU_ATT_SPLIT,
 * (s + 1) * CU_ATT_SPLIT) of row b's nk keys and writes its partial
 * softmax: the maximum m, the sum l of exp(score - m) and the unnormalised
 * sum of exp(score - m) v. The row's used = ceil(nk / CU_ATT_SPLIT)
 * splits are the only ones that do anything: the empty ones (a short
 * window) return at once, every block computing used from pos[b] alike.
 * Scores: each warp segment (att_geom) takes one key at a time, its lanes
 * across head_dim, and sums its lanes with shuffles. Values: the same
 * segments, the block's ATT_THREADS / Cp segments each summing every
 * (ATT_THREADS / Cp)-th key, then shuffles and shared memory sum them.
 * T int8 (the 8-bit K/V, cu_kv_q8_layer_bytes' layout): the split's key
 * and value scales are staged in shared memory first (a coalesced load
 * per head, the scales being contiguous over positions); a score is
 * (q . k8) * ks * scale, a value's weight exp(..) * vs.
 *
 * The combine (the last block of (b, h) to arrive does it): out = sum over
 * the used splits of exp(m_s - M) acc_s / sum of exp(m_s - M) l_s, the
 * (m, l) pairs staged through shared memory (one contiguous load), acc_s
 * read a head_dim row at a time (coalesced). Arrival: every thread fences
 * its partial's stores (__threadfence), a barrier, then thread 0 adds one
 * to count[b * heads + h]; the block that brings it to used fences again
 * (its reads of the others' partials come after their arrivals), combines,
 * and sets the counter back to 0 for the next launch (a graph replay). A
 * row of one split (nk <= CU_ATT_SPLIT) writes out = acc / l itself: the
 * combine's arithmetic for one split (exp(0) = 1), bit for bit. */
#define ATT_ML_CHUNK 64   /* (m, l) pairs the combine stages at a time */
#define ATT_OUT_ELEMS (CU_ATT_MAX_HEAD_DIM / ATT_THREADS)   /* outputs a thread of the combine holds */
template <typename T, int VEC>
__global__ void __launch_bounds__(ATT_THREADS)
attend_ring_kernel(float *outp, int out_stride, float *part, unsigned *count, const float *q, int q_stride,
                   const T *kvl, const float *kvs, const T *kv_layer, size_t slot_stride, const int32_t *slot,
                   const int64_t *pos, int head_dim, int D, int ctx, int window, int prefill, float scale) {
    constexpr bool Q8 = sizeof(T) == 1;
    __shared__ float qs[CU_ATT_MAX_HEAD_DIM];
    __shared__ float sc[CU_ATT_SPLIT];
    __shared__ float ksc[Q8 ? CU_ATT_SPLIT : 1], vsc[Q8 ? CU_ATT_SPLIT : 1];
    __shared__ float vred[ATT_WARPS][ATT_LANE_ELEMS][CU_WARP];   /* (warp, lane element, lane) */
    __shared__ float red[ATT_WARPS];
    __shared__ float lsum[ATT_WARPS];
    __shared__ float stat[2];
    __shared__ float mls[2 * ATT_ML_CHUNK];
    __shared__ int64_t row_pos[2];   /* pos[b], the chunk start: read once, not by every thread */
    __shared__ int32_t row_slot;
    __shared__ int last;
    const int h = blockIdx.x, b = blockIdx.y, s = blockIdx.z;
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    if (threadIdx.x == 0) {
        row_pos[0] = pos[b];
        row_pos[1] = prefill ? pos[0] : kvl ? row_pos[0] : row_pos[0] + 1;
    }
    __syncthreads();
    const int64_t p = row_pos[0];
    const int64_t c0 = row_pos[1];
    const int64_t lo = p + 1 > window ? p + 1 - window : 0;
    const int nk = (int)(p - lo + 1);
    const int used = (nk + CU_ATT_SPLIT - 1) / CU_ATT_SPLIT;
    const int j0 = s * CU_ATT_SPLIT, j1 = min(nk, j0 + CU_ATT_SPLIT);
    float *pb = att_part(part, b, h, gridDim.x, gridDim.z), *ml = pb + 2 * s;
    float *out = pb + 2 * gridDim.z + (size_t)s * CU_ATT_MAX_HEAD_DIM;
    float *ob = outp + (size_t)b * out_stride + (size_t)h * head_dim;   /* the row's output of this head */
    if (j0 >= j1) return;   /* an empty split (a short window): neither arrives nor is read */
    if (threadIdx.x == 0) row_slot = slot[b];   /* read after the barrier below */
    const att_geom g = att_geometry(head_dim, VEC);
    const int cl = lane % g.Cp, sub = lane / g.Cp;
    /* q through shared memory (one coalesced load), then this lane's chunks in registers */
    const float *qh = q + (size_t)b * q_stride + (size_t)h * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += ATT_THREADS) qs[d] = qh[d];
    __syncthreads();   /* qs, row_slot */
    const T *ring = kv_layer + (size_t)row_slot * slot_stride;
    if constexpr (Q8) {
        const int heads = gridDim.x;
        const float *rs = reinterpret_cast<const float *>(ring + (size_t)2 * ctx * D) + (size_t)h * ctx;
        for (int j = j0 + threadIdx.x; j < j1; j += ATT_THREADS) {
            const int64_t x = lo + j;
            if (x < c0) {
                ksc[j - j0] = rs[x % ctx];
                vsc[j - j0] = rs[(size_t)heads * ctx + x % ctx];
            } else {
                const float *cs = kvs + (size_t)(b - (int)(p - x)) * 2 * heads + h;
                ksc[j - j0] = cs[0];
                vsc[j - j0] = cs[heads];
            }
        }
        __syncthreads();
    }
    float qr[ATT_LANE_ELEMS];
    for (int k = 0; k < g.NC; k++) {
        int c = cl + k * g.Cp;
#pragma unroll
        for (int e = 0; e < VEC; e++) qr[k * VEC + e] = c < g.C ? qs[c * VEC + e] : 0.0f;
    }
    /* scores: the loop bound is the warp's, so every lane reaches the shuffles */
    for (int base = j0 + warp * g.G; base < j1; base += ATT_WARPS * g.G) {
        const int j = base + sub;
        float a = 0.0f;
        if (j < j1) {
            const T *kr = att_row(ring, kvl, b, p, c0, lo + j, ctx, D, 0) + (size_t)h * head_dim;
            for (int k = 0; k < g.NC; k++) {
                int c = cl + k * g.Cp;
                if (c >= g.C) break;
                float f[VEC];
                att_load<VEC>(kr + c * VEC, f);
#pragma unroll
                for (int e = 0; e < VEC; e++) a = fmaf(qr[k * VEC + e], f[e], a);
            }
        }
        for (int o = g.Cp / 2; o > 0; o >>= 1) a += __shfl_xor_sync(CU_FULL_MASK, a, o);
        if (cl == 0 && j < j1) sc[j - j0] = Q8 ? a * ksc[j - j0] * scale : a * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = j0 + threadIdx.x; j < j1; j += ATT_THREADS) mx = fmaxf(mx, sc[j - j0]);
    /* block maximum */
#pragma unroll
    for (int o = CU_WARP / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(CU_FULL_MASK, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = red[0];
        for (int w = 1; w < ATT_WARPS; w++) m = fmaxf(m, red[w]);
        stat[0] = m;
    }
    __syncthreads();
    const float m = stat[0];
    float l[1] = {0.0f};
    for (int j = j0 + threadIdx.x; j < j1; j += ATT_THREADS) {
        float e = expf(sc[j - j0] - m);
        sc[j - j0] = e;
        l[0] += e;
    }
    float L = cu_block_sum<ATT_THREADS, 1>(l, lsum);
    if (threadIdx.x == 0) stat[1] = L;
    __syncthreads();   /* sc[] complete, stat[1] written */
    /* values: segment t / Cp of the block sums keys j0 + t / Cp, step ATT_THREADS / Cp */
    float acc[ATT_LANE_ELEMS];
#pragma unroll
    for (int i = 0; i < ATT_LANE_ELEMS; i++) acc[i] = 0.0f;
    const int nseg = ATT_THREADS / g.Cp;
    for (int j = j0 + (int)threadIdx.x / g.Cp; j < j1; j += nseg) {
        const float w = Q8 ? sc[j - j0] * vsc[j - j0] : sc[j - j0];
        const T *vr = att_row(ring, kvl, b, p, c0, lo + j, ctx, D, 1) + (size_t)h * head_dim;
        for (int k = 0; k < g.NC; k++) {
            int c = cl + k * g.Cp;
            if (c >= g.C) break;
            float f[VEC];
            att_load<VEC>(vr + c * VEC, f);
#pragma unroll
            for (int e = 0; e < VEC; e++) acc[k * VEC + e] = fmaf(w, f[e], acc[k * VEC + e]);
        }
    }
    /* the warp's segments, then the warps */
    for (int o = g.Cp; o < CU_WARP; o <<= 1) {
#pragma unroll
        for (int i = 0; i < ATT_LANE_ELEMS; i++) acc[i] += __shfl_xor_sync(CU_FULL_MASK, acc[i], o);
    }
    if (sub == 0) {
#pragma unroll
        for (int i = 0; i < ATT_LANE_ELEMS; i++) vred[warp][i][cl] = acc[i];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < head_dim; d += ATT_THREADS) {
        const int c = d / VEC, i = (c / g.Cp) * VEC + d % VEC;
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) a += vred[w][i][c % g.Cp];
        if (used == 1) ob[d] = (0.0f + a) / stat[1];   /* the combine's arithmetic for one split (exp(0) = 1) */
        else out[d] = a;
    }
    if (used == 1) return;
    if (threadIdx.x == 0) {
        ml[0] = m;
        ml[1] = stat[1];
    }
    /* arrive: the partial published (each thread's stores fenced), then one atomic for the block */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = count + (size_t)b * gridDim.x + h;
        const unsigned before = atomicAdd(cnt, 1u);
        last = before + 1 == (unsigned)used;
        if (last) *cnt = 0u;   /* every other block has arrived: none touches it again in this launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();   /* the others' partials are read after their arrivals, through L2 (__ldcg: no stale L1 line) */
    /* the combine: pass 0 the maximum, pass 1 the sums, in split order */
    const float *pp = pb, *pacc = pb + 2 * gridDim.z;
    float M = -INFINITY, LS = 0.0f, a[ATT_OUT_ELEMS];
#pragma unroll
    for (int i = 0; i < ATT_OUT_ELEMS; i++) a[i] = 0.0f;
    for (int pass = 0; pass < 2; pass++)
        for (int s0 = 0; s0 < used; s0 += ATT_ML_CHUNK) {
            const int n = min(ATT_ML_CHUNK, used - s0);
            __syncthreads();   /* the previous chunk is read */
            for (int i = threadIdx.x; i < 2 * n; i += ATT_THREADS) mls[i] = __ldcg(pp + 2 * s0 + i);
            __syncthreads();
            for (int sp = 0; sp < n; sp++) {
                if (pass == 0) {
                    M = fmaxf(M, mls[2 * sp]);
                } else if (mls[2 * sp + 1] > 0.0f) {
                    float f = expf(mls[2 * sp] - M);
                    LS += f * mls[2 * sp + 1];
#pragma unroll
                    for (int i = 0; i < ATT_OUT_ELEMS; i++) {
                        const int d = threadIdx.x + i * ATT_THREADS;
                        if (d < head_dim) a[i] += f * __ldcg(pacc + (size_t)(s0 + sp) * CU_ATT_MAX_HEAD_DIM + d);
                    }
                }
            }
        }
#pragma unroll
    for (int i = 0; i < ATT_OUT_ELEMS; i++) {
        const int d = threadIdx.x + i * ATT_THREADS;
        if (d < head_dim) ob[d] = a[i] / LS;
    }
}

extern "C" int cu_attend_splits(int window) { return (window + CU_ATT_SPLIT - 1) / CU_ATT_SPLIT; }

/* The one launcher of both element types: argument checks, then the
 * kernel with VEC 8 (16-byte bf16 loads, 8-byte int8 loads) when every
 * row of the ring and of kvl starts on such a boundary, else VEC 1. */
template <typename T>
static cudaError_t attend_launch(float *out, float *part, unsigned *count, const float *q, int q_stride, const T *kvl,
                                 const float *kvs, const T *kv_layer, size_t slot_stride, const int32_t *slot,
                                 const int64_t *pos, int B, int heads, int head_dim, int ctx, int window, int prefill,
                                 cudaStream_t stream) {
    constexpr bool Q8 = sizeof(T) == 1;
    const int D = heads * head_dim;
    if (B < 0 || heads <= 0 || head_dim <= 0 || head_dim > CU_ATT_MAX_HEAD_DIM || ctx <= 0 || window <= 0 ||
        window > ctx || !count || (prefill && !kvl) || (Q8 && kvl && !kvs))
        return cudaErrorInvalidValue;
    if (Q8 && ((uintptr_t)kv_layer % 4 || slot_stride % 4 || ((size_t)2 * ctx * D) % 4)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    const int splits = cu_attend_splits(window);
    const dim3 grid((unsigned)heads, (unsigned)B, (unsigned)splits);
    const float scale = 1.0f / sqrtf((float)head_dim);
    const size_t vb = 8 * sizeof(T);   /* bytes of a VEC 8 load */
    if (head_dim % 8 == 0 && (uintptr_t)kvl % vb == 0 && (uintptr_t)kv_layer % vb == 0 && slot_stride % 8 == 0)
        attend_ring_kernel<T, 8><<<grid, ATT_THREADS, 0, stream>>>(out, D, part, count, q, q_stride, kvl, kvs,
                                                                   kv_layer, slot_stride, slot, pos, head_dim, D, ctx,
                                                                   window, prefill, scale);
    else
        attend_ring_kernel<T, 1><<<grid, ATT_THREADS, 0, stream>>>(out, D, part, count, q, q_stride, kvl, kvs,
                                                                   kv_layer, slot_stride, slot, pos, head_dim, D, ctx,
                                                                   window, prefill, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_attend_ring(float *out, float *part, unsigned *count, const float *q, int q_stride,
                                      const uint16_t *kvl, const uint16_t *kv_layer, size_t slot_stride,
                                      const int32_t *slot, const int64_t *pos, int B, int heads, int head_dim, int ctx,
                                      int window, int prefill, cudaStream_t stream) {
    return attend_launch<uint16_t>(out, part, count, q, q_stride, kvl, nullptr, kv_layer, slot_stride, slot, pos, B,
                                   heads, head_dim, ctx, window, prefill, stream);
}

extern "C" size_t cu_kv_q8_layer_bytes(int ctx, int D, int heads) {
    return ((size_t)2 * ctx * D + (size_t)2 * heads * ctx * sizeof(float) + 15) & ~(size_t)15;
}

extern "C" cudaError_t cu_attend_ring_q8(float *out, float *part, unsigned *count, const float *q, int q_stride,
                                         const int8_t *kv8, const float *kvs, const int8_t *kv_layer,
                                         size_t slot_stride, const int32_t *slot, const int64_t *pos, int B, int heads,
                                         int head_dim, int ctx, int window, int prefill, cudaStream_t stream) {
    return attend_launch<int8_t>(out, part, count, q, q_stride, kv8, kvs, kv_layer, slot_stride, slot, pos, B, heads,
                                 head_dim, ctx, window, prefill, stream);
}

/* The int8 ring row pos[b] % ctx of slot slot[b] = kv8[b], its scales
 * from kvs[b] (the layout of cu_kv_q8_layer_bytes). */
__global__ void __launch_bounds__(EW_THREADS)
kv_store_q8_kernel(int8_t *kv_layer, size_t slot_stride, const int8_t *kv8, const float *kvs, const int32_t *slot,
                   const int64_t *pos, int D, int heads, int ctx) {
    const int b = blockIdx.x;
    int8_t *base = kv_layer + (size_t)slot[b] * slot_stride;
    const size_t row = (size_t)(pos[b] % ctx);
    int8_t *k = base + row * D, *v = k + (size_t)ctx * D;
    const int8_t *src = kv8 + (size_t)b * 2 * D;
    for (int d = threadIdx.x; d < D; d += EW_THREADS) {
        k[d] = src[d];
        v[d] = src[D + d];
    }
    float *rs = reinterpret_cast<float *>(base + (size_t)2 * ctx * D);
    for (int i = threadIdx.x; i < 2 * heads; i += EW_THREADS)   /* i / heads: keys, values */
        rs[(size_t)i * ctx + row] = kvs[(size_t)b * 2 * heads + i];
}

extern "C" cudaError_t cu_kv_store_q8(int8_t *kv_layer, size_t slot_stride, const int8_t *kv8, const float *kvs,
                                      const int32_t *slot, const int64_t *pos, int B, int D, int heads, int ctx,
                                      cudaStream_t stream) {
    if (B < 0 || D <= 0 || heads <= 0 || ctx <= 0 || (uintptr_t)kv_layer % 4 || slot_stride % 4 ||
        ((size_t)2 * ctx * D) % 4)
        return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    kv_store_q8_kernel<<<(unsigned)B, EW_THREADS, 0, stream>>>(kv_layer, slot_stride, kv8, kvs, slot, pos, D, heads,
                                                               ctx);
    return cudaGetLastError();
}

/* ring[slot[b]] row pos[b] % ctx = kvl[b] (keys, then values). */
__global__ void __launch_bounds__(EW_THREADS)
kv_store_kernel(uint16_t *kv_layer, size_t slot_stride, const uint16_t *kvl, const int32_t *slot,
                const int64_t *pos, int D, int ctx) {
    const int b = blockIdx.x;
    uint16_t *k = kv_layer + (size_t)slot[b] * slot_stride + (size_t)(pos[b] % ctx) * D;
    uint16_t *v = k + (size_t)ctx * D;
    const uint16_t *src = kvl + (size_t)b * 2 * D;
    for (int d = threadIdx.x; d < D; d += EW_THREADS) {
        k[d] = src[d];
        v[d] = src[D + d];
    }
}

extern "C" cudaError_t cu_kv_store(uint16_t *kv_layer, size_t slot_stride, const uint16_t *kvl, const int32_t *slot,
                                   const int64_t *pos, int B, int D, int ctx, cudaStream_t stream) {
    if (B < 0 || D <= 0 || ctx <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    kv_store_kernel<<<(unsigned)B, EW_THREADS, 0, stream>>>(kv_layer, slot_stride, kvl, slot, pos, D, ctx);
    return cudaGetLastError();
}

/* ---- the depformer's attention -------------------------------------------- */

#define DEP_THREADS 64

/* Grid (heads, B): store sub-step k's key and value of head h (f32, as the
 * CPU keeps them) in the row's cache, then attend over sub-steps lo..k
 * (scores: a warp per key, lanes across head_dim). Q8: the cache holds
 * int8 values then f32 scales (cu_dep_attend_q8), the new key and value
 * quantized per head (a block maximum) before they are read back. */
template <bool Q8>
__global__ void __launch_bounds__(DEP_THREADS)
dep_attend_kernel(float *out, const float *qkv, float *kc, float *vc, size_t cache_stride, int k, int lo,
                  int head_dim, int D, float scale) {
    __shared__ float sc[LM_MAX_DEP_Q];
    __shared__ float stat[2];
    __shared__ float red[2][DEP_THREADS / CU_WARP];
    const int h = blockIdx.x, b = blockIdx.y, heads = gridDim.x;
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const float *q = qkv + (size_t)b * 3 * D + (size_t)h * head_dim;
    float *kb = kc + (size_t)b * cache_stride, *vb = vc + (size_t)b * cache_stride;
    /* Q8 views of the same regions: values (LM_MAX_DEP_Q, D), scales (LM_MAX_DEP_Q, heads) */
    int8_t *kb8 = reinterpret_cast<int8_t *>(kb), *vb8 = reinterpret_cast<int8_t *>(vb);
    float *ks = reinterpret_cast<float *>(kb8 + (size_t)LM_MAX_DEP_Q * D);
    float *vs = reinterpret_cast<float *>(vb8 + (size_t)LM_MAX_DEP_Q * D);
    if constexpr (!Q8) {
        for (int d = threadIdx.x; d < head_dim; d += DEP_THREADS) {
            kb[(size_t)k * D + (size_t)h * head_dim + d] = q[D + d];
            vb[(size_t)k * D + (size_t)h * head_dim + d] = q[2 * D + d];
        }
    } else {
        float mk = 0.0f, mv = 0.0f;
        for (int d = threadIdx.x; d < head_dim; d += DEP_THREADS) {
            mk = fmaxf(mk, fabsf(q[D + d]));
            mv = fmaxf(mv, fabsf(q[2 * D + d]));
        }
        mk = warp_max(mk);
        mv = warp_max(mv);
        if (lane == 0) {
            red[0][warp] = mk;
            red[1][warp] = mv;
        }
        __syncthreads();
        mk = red[0][0];
        mv = red[1][0];
        for (int w = 1; w < DEP_THREADS / CU_WARP; w++) {
            mk = fmaxf(mk, red[0][w]);
            mv = fmaxf(mv, red[1][w]);
        }
        const float sk = q8_scale(mk), sv = q8_scale(mv);
        for (int d = threadIdx.x; d < head_dim; d += DEP_THREADS) {
            kb8[(size_t)k * D + (size_t)h * head_dim + d] = q8_round(q[D + d], sk);
            vb8[(size_t)k * D + (size_t)h * head_dim + d] = q8_round(q[2 * D + d], sv);
        }
        if (threadIdx.x == 0) {
            ks[(size_t)k * heads + h] = sk;
            vs[(size_t)k * heads + h] = sv;
        }
    }
    __syncthreads();
    const int nk = k + 1 - lo;
    /* a warp per key, its lanes across head_dim (coalesced), a shuffle sum */
    for (int j = warp; j < nk; j += DEP_THREADS / CU_WARP) {
        const size_t o = (size_t)(lo + j) * D + (size_t)h * head_dim;
        float a = 0.0f;
        for (int d = lane; d < head_dim; d += CU_WARP) a = fmaf(q[d], Q8 ? (float)kb8[o + d] : kb[o + d], a);
        a = cu_warp_sum(a);
        if (lane == 0) sc[j] = Q8 ? a * ks[(size_t)(lo + j) * heads + h] * scale : a * scale;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int j = 0; j < nk; j++) m = fmaxf(m, sc[j]);
        float l = 0.0f;
        for (int j = 0; j < nk; j++) {
            sc[j] = expf(sc[j] - m);
            l += sc[j];
        }
        stat[0] = 1.0f / l;
    }
    __syncthreads();
    const float inv = stat[0];
    for (int d = threadIdx.x; d < head_dim; d += DEP_THREADS) {
        float a = 0.0f;
        for (int j = 0; j < nk; j++) {
            const size_t o = (size_t)(lo + j) * D + (size_t)h * head_dim + d;
            if constexpr (Q8) a = fmaf(sc[j] * inv * vs[(size_t)(lo + j) * heads + h], (float)vb8[o], a);
            else a = fmaf(sc[j] * inv, vb[o], a);
        }
        out[(size_t)b * D + (size_t)h * head_dim + d] = a;
    }
}

extern "C" cudaError_t cu_dep_attend(float *out, const float *qkv, float *k_cache, float *v_cache, size_t cache_stride,
                                     int k, int window, int B, int heads, int head_dim, cudaStream_t stream) {
    if (B < 0 || heads <= 0 || head_dim <= 0 || k < 0 || k >= LM_MAX_DEP_Q || window <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    int lo = k + 1 > window ? k + 1 - window : 0;
    dep_attend_kernel<false><<<dim3((unsigned)heads, (unsigned)B), DEP_THREADS, 0, stream>>>(
        out, qkv, k_cache, v_cache, cache_stride, k, lo, head_dim, heads * head_dim, 1.0f / sqrtf((float)head_dim));
    return cudaGetLastError();
}

extern "C" cudaError_t cu_dep_attend_q8(float *out, const float *qkv, float *k_cache, float *v_cache,
                                        size_t cache_stride, int k, int window, int B, int heads, int head_dim,
                                        cudaStream_t stream) {
    if (B < 0 || heads <= 0 || head_dim <= 0 || k < 0 || k >= LM_MAX_DEP_Q || window <= 0 || (heads * head_dim) % 4)
        return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    int lo = k + 1 > window ? k + 1 - window : 0;
    dep_attend_kernel<true><<<dim3((unsigned)heads, (unsigned)B), DEP_THREADS, 0, stream>>>(
        out, qkv, k_cache, v_cache, cache_stride, k, lo, head_dim, heads * head_dim, 1.0f / sqrtf((float)head_dim));
    return cudaGetLastError();
}

/* ---- element-wise ---------------------------------------------------------- */

__global__ void __launch_bounds__(EW_THREADS) silu_gate_kernel(float *h, const float *u, int H) {
    const int b = blockIdx.y;
    const int i = blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= H) return;
    const float *ub = u + (size_t)b * 2 * H;
    float g = ub[i];
    h[(size_t)b * H + i] = g / (1.0f + expf(-g)) * ub[H + i];
}

extern "C" cudaError_t cu_silu_gate(float *h, const float *u, int B, int H, cudaStream_t stream) {
    if (B < 0 || H <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    silu_gate_kernel<<<dim3((unsigned)((H + EW_THREADS - 1) / EW_THREADS), (unsigned)B), EW_THREADS, 0, stream>>>(h, u, H);
    return cudaGetLastError();
}

/* hb = bf16(silu(u[:, :H]) * u[:, H:]): the gate and the GEMM's rounding in one launch. */
__global__ void __launch_bounds__(EW_THREADS) silu_gate_bf16_kernel(uint16_t *hb, const float *u, int H) {
    const int b = blockIdx.y;
    const int i = blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= H) return;
    const float *ub = u + (size_t)b * 2 * H;
    float g = ub[i];
    hb[(size_t)b * H + i] = cu_f2bf(g / (1.0f + expf(-g)) * ub[H + i]);
}

extern "C" cudaError_t cu_silu_gate_bf16(uint16_t *hb, const float *u, int B, int H, cudaStream_t stream) {
    if (B < 0 || H <= 0) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    silu_gate_bf16_kernel<<<dim3((unsigned)((H + EW_THREADS - 1) / EW_THREADS), (unsigned)B), EW_THREADS, 0,
                            stream>>>(hb, u, H);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(EW_THREADS) add_kernel(float *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" cudaError_t cu_add(float *y, const float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    add_kernel<<<(unsigned)((n + EW_THREADS - 1) / EW_THREADS), EW_THREADS, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(EW_THREADS) to_bf16_kernel(uint16_t *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) y[i] = cu_f2bf(x[i]);
}

extern "C" cudaError_t cu_f32_to_bf16(uint16_t *y, const float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    to_bf16_kernel<<<(unsigned)((n + EW_THREADS - 1) / EW_THREADS), EW_THREADS, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

/* ---- random weights ----------------------------------------------------------- */

/* w[i] = bf16(scale * (2u - 1)), u = rng_uniform(seed, tensor, i >> 32, i):
 * uniform in (-scale, scale), one counter stream per tensor. */
__global__ void __launch_bounds__(EW_THREADS)
rand_bf16_kernel(uint16_t *w, size_t n, uint64_t seed, uint32_t tensor, float scale) {
    size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x;
    size_t step = (size_t)gridDim.x * EW_THREADS;
    for (; i < n; i += step) {
        double u = rng_uniform(seed, tensor, (uint32_t)(i >> 32), (uint32_t)i);
        w[i] = cu_f2bf((float)(scale * (2.0 * u - 1.0)));
    }
}

extern "C" cudaError_t cu_rand_bf16(uint16_t *w, size_t n, uint64_t seed, uint32_t tensor, float scale,
                                    cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    size_t blocks = (n + EW_THREADS - 1) / EW_THREADS;
    if (blocks > 65536) blocks = 65536;   /* grid-stride beyond */
    rand_bf16_kernel<<<(unsigned)blocks, EW_THREADS, 0, stream>>>(w, n, seed, tensor, scale);
    return cudaGetLastError();
}

/* Random int8 rows for the 8-bit weight scheme: q[i] = rint(127 (2u - 1))
 * with u as cu_rand_bf16 draws it, every row's scale scale / 127, so q * s
 * is uniform in (-scale, scale) as the bf16 generator's values are. */
__global__ void __launch_bounds__(EW_THREADS)
rand_q8_kernel(int8_t *w, float *ws, size_t n, int rows, uint64_t seed, uint32_t tensor, float scale) {
    size_t i = (size_t)blockIdx.x * EW_THREADS + threadIdx.x;
    size_t step = (size_t)gridDim.x * EW_THREADS;
    if (i < (size_t)rows) ws[i] = scale / 127.0f;
    for (; i < n; i += step) {
        double u = rng_uniform(seed, tensor, (uint32_t)(i >> 32), (uint32_t)i);
        w[i] = (int8_t)rint(127.0 * (2.0 * u - 1.0));
    }
}

extern "C" cudaError_t cu_rand_q8(int8_t *w, float *ws, int rows, int cols, uint64_t seed, uint32_t tensor,
                                  float scale, cudaStream_t stream) {
    if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
    size_t n = (size_t)rows * cols;
    if (n == 0) return cudaSuccess;
    size_t blocks = (n + EW_THREADS - 1) / EW_THREADS;
    if (blocks > 65536) blocks = 65536;
    if (blocks * EW_THREADS < (size_t)rows) blocks = ((size_t)rows + EW_THREADS - 1) / EW_THREADS;
    rand_q8_kernel<<<(unsigned)blocks, EW_THREADS, 0, stream>>>(w, ws, n, rows, seed, tensor, scale);
    return cudaGetLastError();
}
