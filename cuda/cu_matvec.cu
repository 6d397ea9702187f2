/* cu_matvec.cu - batched bf16 weight matrix-vector product, the core of the
 * LM step at small batch: y(B, N) = x(B, K) . W(N, K)^T, W bf16 row-major,
 * x and y f32, accumulation in f32. C twin: kern_matvec_bf16
 * (engine/cpu/kern_cpu.h), the CPU backend's bf16 matmul.
 * The same kernels read int8 rows with one f32 scale per row (the 8-bit
 * weight scheme, W8A16): the row's sum of q * x times its scale, the C
 * twin kern_matmul_rows_i8 (engine/cpu/kern_q8.c). Their chunk is 4 bytes
 * (4 int8), so that W's and x's loads stay whole-sector as in the bf16
 * kernel: a warp reads 128 contiguous bytes of a row and 512 of x per
 * load instruction.
 *
 * Memory-bandwidth bound: every byte of W is read once per launch (per batch
 * tile), x is small and stays in L1/L2. A block of MV_THREADS threads owns
 * MV_ROWS output rows; its threads stride over K in 8-byte chunks of W
 * (4 bf16) and read the matching 16 bytes of x (one float4), so every
 * warp-level load, of W and of x, reads contiguous bytes (issue 25: with
 * 16-byte W chunks each lane needed 32 bytes of x, two float4 loads 32
 * bytes apart across lanes, half of every sector unused); MV_UNROLL chunks
 * per row in flight per thread, each used for every vector of the batch
 * tile before the next is loaded. The block then reduces its partial sums
 * (warp shuffles, then shared memory).
 * Each kernel comes in modes (cu_fuse, cuda/cu_kern.h): plain; with the
 * RMSNorm of its input folded in (a prologue sums the tile's squares in
 * cu_rmsnorm's order, then x is read as x * (alpha * inv)); or adding its
 * output into y (the residual add). Each is bit for bit the launches it
 * replaces, and saves the step one graph node per product. Two more
 * variants for the depformer: its attention computed in each block's
 * prologue into shared memory, then the product with the add
 * (matvec_*_att_acc: the attention's launch saved), and G products of one
 * input in one launch (matvec_*_group: its dep_q input projections). And
 * one for the temporal layers' QKV product in a step: RoPE and the new
 * keys' and values' ring store in its epilogue (matvec_*_norm_rope: RoPE's
 * launch saved). And the whole depformer sub-step, every one of those
 * products of every layer and the head, as the stages of one launch
 * (dep_chain_*: a block per block of each stage's launch, ordered by
 * tickets; cuda/cu_sync.cuh).
 * Parameters are first guesses, to be tuned with engine-bench on hardware.
 * (Over STYLE's 800 lines: the chain runs every body of this file inlined
 * into one kernel, and nvcc without relocatable device code sees device
 * functions of one translation unit only.)
 */
#include "cu_bf16.cuh"
#include "cu_kern.h"
#include "cu_norm.cuh"
#include "cu_q8.cuh"
#include "cu_reduce.cuh"
#include "cu_rope.cuh"
#include "cu_sync.cuh"
extern "C" {
#include "lm_config.h"   /* LM_MAX_DEP_Q */
}

#define MV_THREADS 128  /* threads per block */
#define MV_ROWS 2       /* output rows per block */
#define MV_UNROLL 8     /* 8-byte W chunks per row in flight per thread */
#define MV_UNROLL_Q8 16 /* 4-byte int8 chunks: the same bytes in flight */

/* What a kernel fuses (cu_fuse, cuda/cu_kern.h): nothing, the RMSNorm of
 * its input (a prologue), or the residual add of its output. */
#define MV_PLAIN 0
#define MV_NORM 1
#define MV_ACC 2

/* The 4 bf16 of an 8-byte chunk as floats (little-endian: element 0 is the
 * low half of .x). */
__device__ __forceinline__ void bf16x4_to_f32(uint2 v, float f[4]) {
    f[0] = __uint_as_float(v.x << 16); f[1] = __uint_as_float(v.x & 0xFFFF0000u);
    f[2] = __uint_as_float(v.y << 16); f[3] = __uint_as_float(v.y & 0xFFFF0000u);
}

/* The 4 int8 of a 4-byte chunk as floats (element 0 in the low byte). */
__device__ __forceinline__ void i8x4_to_f32(uint32_t v, float f[4]) {
    f[0] = (float)(int8_t)(v & 0xFFu); f[1] = (float)(int8_t)((v >> 8) & 0xFFu);
    f[2] = (float)(int8_t)((v >> 16) & 0xFFu); f[3] = (float)(int8_t)(v >> 24);
}
__device__ __forceinline__ void chunk_to_f32(uint2 v, float f[4]) { bf16x4_to_f32(v, f); }
__device__ __forceinline__ void chunk_to_f32(uint32_t v, float f[4]) { i8x4_to_f32(v, f); }

/* Writes the block's MV_ROWS x BT sums, each times its row's scale when ws
 * is not NULL (int8 rows); rows past N and vectors past nb are dropped.
 * ACC: added to y instead (the residual add: y = y + sum, or y + sum *
 * scale, the scale's product rounded first as cu_scale_cols then cu_add
 * round it; __fmul_rn keeps nvcc from contracting the two into an fma). */
template <int BT, bool ACC>
__device__ __forceinline__ void mv_store(float *y, float (&acc)[MV_ROWS * BT], int n0, int b0, int nb, int N,
                                         const float *ws) {
    __shared__ float scratch[(MV_THREADS / CU_WARP) * MV_ROWS * BT];
    float s = cu_block_sum<MV_THREADS, MV_ROWS * BT>(acc, scratch);
    int t = threadIdx.x;
    if (t < MV_ROWS * BT) {
        int r = t / BT, b = t % BT;
        if (n0 + r < N && b < nb) {
            float v = ws ? __fmul_rn(s, ws[n0 + r]) : s;
            float *yo = y + (size_t)(b0 + b) * N + n0 + r;
            *yo = ACC ? *yo + v : v;
        }
    }
}

/* The norm prologue (MV_NORM): inv[b] = 1 / sqrt(mean(x_b^2) + eps) of
 * the tile's rows b < nb (0 past them), summed by cu_rms_inv
 * (cuda/cu_norm.cuh) in cu_rmsnorm's order. Every block of the grid
 * computes its tile's roots itself: x is re-read once per block (from L2;
 * K floats per row, plus K of alpha in the loop: docs/cuda.md gives the
 * counts), which is what saves the norm's launch. */
template <int BT>
__device__ __forceinline__ void mv_norm_prologue(float (&inv)[BT], const float *x, int b0, int nb, int K, float eps) {
    __shared__ float nscratch[CU_RN_WARPS * BT];
    cu_rms_inv<MV_THREADS, BT>(inv, nscratch, x + (size_t)b0 * K, (size_t)K, nb, K, eps);
}

/* A float4 of x: through the read-only path (XRO: x is not written
 * during the whole kernel, so ld.global.nc may serve it), else a plain
 * load (the chain kernels, whose x an earlier stage of the same launch
 * wrote: the non-coherent path could return stale data). */
template <bool XRO>
__device__ __forceinline__ float4 mv_ld4(const float4 *p) {
    if constexpr (XRO) return __ldg(p);
    else return *p;
}

/* The float4 of x at chunk c of row b: x itself, or (GATED, x = u of
 * (B, 2K)) silu(u[:K]) * u[K:] computed as silu_gate_kernel does
 * (cuda/cu_lm.cu, kern_silu_gate), so the gated product equals the two
 * launches bit for bit. */
template <bool GATED, bool SH, bool XRO>
__device__ __forceinline__ float4 mv_x(const float4 *xb, size_t xstride, int b, int c, int K4) {
    if constexpr (SH) {   /* the tile in shared memory (the attention prologue's): a plain load */
        return xb[b * xstride + c];
    } else if constexpr (!GATED) {
        return mv_ld4<XRO>(xb + b * xstride + c);
    } else {
        float4 g = mv_ld4<XRO>(xb + b * xstride + c), up = mv_ld4<XRO>(xb + b * xstride + K4 + c);
        return make_float4(g.x / (1.0f + expf(-g.x)) * up.x, g.y / (1.0f + expf(-g.y)) * up.y,
                           g.z / (1.0f + expf(-g.z)) * up.z, g.w / (1.0f + expf(-g.w)) * up.w);
    }
}

/* Fast path (block (bx, by): rows bx * MV_ROWS.., batch tile by). bf16 (CH uint2, 4 bf16): K % 8 == 0, x and w 16-byte
 * aligned; int8 (CH uint32_t, 4 int8, ws the row scales): K % 4 == 0, x 16-
 * and w 4-byte aligned; MV_NORM: alpha 16-byte aligned. Grid
 * (ceil(N / MV_ROWS), ceil(B / BT)). x: (B, K), or (GATED) u (B, 2K).
 * MODE: MV_PLAIN, MV_NORM (x read as rmsnorm_kernel's output: x * (alpha *
 * inv), the same products in the same order, so the same bits), MV_ACC
 * (y += the product). mv_vec_sums: the block's MV_ROWS x BT partial sums
 * (rows n0.., vectors b0.., nb of them), not yet reduced over the block;
 * mv_vec_body: those, reduced and stored (mv_store), for block (bx, by).
 * XRO: x read through __ldg (false: plain loads, for an x written earlier
 * in the same launch; the norm prologue's loads are plain either way). */
template <int BT, bool GATED, typename CH, int MODE, bool SH = false, bool XRO = true>
__device__ __forceinline__ void mv_vec_sums(float (&acc)[MV_ROWS * BT], const float *__restrict__ x,
                                            const void *__restrict__ w, const float *__restrict__ alpha, int N,
                                            int K, float eps, int n0, int b0, int nb) {
    static_assert(!(GATED && MODE == MV_NORM), "the gated input is never normalised");
    static_assert(!(SH && (GATED || MODE == MV_NORM)), "a shared tile is the attention's output, read as is");
    constexpr int UNROLL = sizeof(CH) == 4 ? MV_UNROLL_Q8 : MV_UNROLL;
    const int K4 = K / 4;   /* chunks per row of W, float4s per row of x */
    float inv[BT];
    if constexpr (MODE == MV_NORM) mv_norm_prologue<BT>(inv, x, b0, nb, K, eps);
    const float4 *al4 = reinterpret_cast<const float4 *>(alpha);   /* (K / 4), MV_NORM only */
    const CH *wr[MV_ROWS];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)   /* rows past N read row N-1, never stored */
        wr[r] = reinterpret_cast<const CH *>(static_cast<const char *>(w) +
                                             (size_t)min(n0 + r, N - 1) * K * (sizeof(CH) / 4));
    const size_t xstride = (size_t)K / 4 * (GATED ? 2 : 1);   /* float4s per row of x (u) */
    /* SH: x is the block's own tile (BT, K) in shared memory, already at row b0 */
    const float4 *xb = reinterpret_cast<const float4 *>(x) + (SH ? 0 : (size_t)b0 * xstride);

#pragma unroll
    for (int j = 0; j < MV_ROWS * BT; j++) acc[j] = 0.0f;

    for (int c0 = threadIdx.x; c0 < K4; c0 += MV_THREADS * UNROLL) {
        CH wv[UNROLL][MV_ROWS];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int c = c0 + u * MV_THREADS;
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) wv[u][r] = c < K4 ? __ldg(wr[r] + c) : CH{};
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int c = c0 + u * MV_THREADS;
            if (c >= K4) break;
            float wf[MV_ROWS][4];
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) chunk_to_f32(wv[u][r], wf[r]);
            float4 al = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if constexpr (MODE == MV_NORM) al = __ldg(al4 + c);
#pragma unroll
            for (int b = 0; b < BT; b++) {
                if (b >= nb) break;
                float4 xa = mv_x<GATED, SH, XRO>(xb, xstride, b, c, K4);
                if constexpr (MODE == MV_NORM)
                    xa = make_float4(xa.x * (al.x * inv[b]), xa.y * (al.y * inv[b]), xa.z * (al.z * inv[b]),
                                     xa.w * (al.w * inv[b]));
#pragma unroll
                for (int r = 0; r < MV_ROWS; r++) {
                    float s = acc[r * BT + b];
                    s = fmaf(wf[r][0], xa.x, s); s = fmaf(wf[r][1], xa.y, s);
                    s = fmaf(wf[r][2], xa.z, s); s = fmaf(wf[r][3], xa.w, s);
                    acc[r * BT + b] = s;
                }
            }
        }
    }
}

template <int BT, bool GATED, typename CH, int MODE, bool SH = false, bool XRO = true>
__device__ __forceinline__ void mv_vec_body(float *__restrict__ y, const float *__restrict__ x,
                                            const void *__restrict__ w, const float *__restrict__ ws,
                                            const float *__restrict__ alpha, int B, int N, int K, float eps,
                                            int bx, int by) {
    const int n0 = bx * MV_ROWS;
    const int b0 = by * BT;
    const int nb = min(BT, B - b0);
    float acc[MV_ROWS * BT];
    mv_vec_sums<BT, GATED, CH, MODE, SH, XRO>(acc, x, w, alpha, N, K, eps, n0, b0, nb);
    mv_store<BT, MODE == MV_ACC>(y, acc, n0, b0, nb, N, ws);
}

/* The kernels, one name per (weights, gate, mode) so that the emulator and
 * the performance model name what ran; all take the same arguments:
 * y (B, N), x (B, K) or u (B, 2K), w (N, K) bf16 or int8, ws (N) int8 row
 * scales (NULL for bf16), alpha (K) norm scales (MV_NORM only). */
#define MV_VEC_KERNEL(name, GATED, CH, MODE)                                                                   \
    template <int BT>                                                                                          \
    __global__ void __launch_bounds__(MV_THREADS)                                                              \
    name(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w,                     \
         const float *__restrict__ ws, const float *__restrict__ alpha, int B, int N, int K, float eps) {      \
        mv_vec_body<BT, GATED, CH, MODE>(y, x, w, ws, alpha, B, N, K, eps, blockIdx.x, blockIdx.y);            \
    }
MV_VEC_KERNEL(matvec_bf16_vec, false, uint2, MV_PLAIN)
MV_VEC_KERNEL(matvec_bf16_norm, false, uint2, MV_NORM)
MV_VEC_KERNEL(matvec_bf16_acc, false, uint2, MV_ACC)
MV_VEC_KERNEL(matvec_bf16_gated, true, uint2, MV_PLAIN)
MV_VEC_KERNEL(matvec_bf16_gated_acc, true, uint2, MV_ACC)
MV_VEC_KERNEL(matvec_q8_vec, false, uint32_t, MV_PLAIN)
MV_VEC_KERNEL(matvec_q8_norm, false, uint32_t, MV_NORM)
MV_VEC_KERNEL(matvec_q8_acc, false, uint32_t, MV_ACC)
MV_VEC_KERNEL(matvec_q8_gated, true, uint32_t, MV_PLAIN)
MV_VEC_KERNEL(matvec_q8_gated_acc, true, uint32_t, MV_ACC)

/* ---- RoPE and the ring store in the QKV product's epilogue -----------------
 * A step's QKV product qkv = rmsnorm(x) W^T (N = 3D: q | k | v; the norm
 * prologue as matvec_*_norm's) doing cu_qkv_rope_ring's work in the block
 * that makes the values (issue 25: RoPE's launch, one graph node per
 * temporal layer, saved). A block owns the MV_ROWS = 2 adjacent rows
 * n0 = 2 bx, n0 + 1; head_dim (so D) is even, so the two never straddle
 * q | k | v or a head: they are exactly one of RoPE's pairs (elements 2i,
 * 2i + 1 of a head, qkv_rope_kernel's o). After the block sum thread b
 * (b < nb) takes row n0 + 1's sum from thread BT + b (a shuffle in warp
 * 0), rotates q and k with RoPE's own arithmetic (cu_rope.cuh) on the
 * values the plain product stores (int8 rows: the sum times the row's
 * scale, rounded first), and stores what the two launches leave: in qkv q
 * and k rotated, v as is; k and v as bf16 at ring row pos % ctx of the
 * row's slot (RoPE's packed 4-byte store). The attention then reads the
 * new key and value from the ring, as after cu_qkv_rope_ring. The int8
 * K/V ring keeps its own launch (cu_qkv_rope_ring_q8): a head's scale is
 * the maximum over its head_dim values, which head_dim / 2 blocks make. */
#if MV_ROWS != 2
#error "the RoPE epilogue needs a block's rows to be one rotation pair"
#endif

template <int BT>
__device__ __forceinline__ void mv_store_rope(float *y, float (&acc)[MV_ROWS * BT], int n0, int b0, int nb, int N,
                                              const float *ws, const cu_rope_ring &rr) {
    __shared__ float scratch[(MV_THREADS / CU_WARP) * MV_ROWS * BT];
    float s0 = cu_block_sum<MV_THREADS, MV_ROWS * BT>(acc, scratch);
    /* thread BT + b holds row n0 + 1's sum for vector b: every thread of the block takes part */
    float s1 = __shfl_down_sync(CU_FULL_MASK, s0, BT);
    const int b = threadIdx.x;
    if (b >= nb) return;   /* no barrier below; vectors past nb are never stored */
    float v0 = ws ? __fmul_rn(s0, ws[n0]) : s0, v1 = ws ? __fmul_rn(s1, ws[n0 + 1]) : s1;
    const int D = rr.heads * rr.head_dim, part = n0 / D, o = n0 % D;   /* q, k or v; the pair's place in it */
    const int64_t p = rr.pos[b0 + b];
    if (part < 2) {
        float cr, ci;
        cu_rope_cs((o % rr.head_dim) / 2, (float)p, rr.rope_k, &cr, &ci);
        const float2 r = cu_rope_rot(v0, v1, cr, ci);
        v0 = r.x;
        v1 = r.y;
    }
    float *yo = y + (size_t)(b0 + b) * N + n0;
    yo[0] = v0;
    yo[1] = v1;
    if (part > 0) {
        uint16_t *row = rr.kv_layer + (size_t)rr.slot[b0 + b] * rr.slot_stride +
                        (size_t)(part - 1) * rr.ctx * D + (size_t)(p % rr.ctx) * D;
        *reinterpret_cast<uint32_t *>(row + o) = (uint32_t)cu_f2bf(v0) | (uint32_t)cu_f2bf(v1) << 16;
    }
}

/* y (B, N = 3D) with RoPE and the ring store; the other arguments as the
 * vector kernels' (alpha: norm1's scales). */
#define MV_ROPE_KERNEL(name, CH)                                                                              \
    template <int BT>                                                                                          \
    __global__ void __launch_bounds__(MV_THREADS)                                                              \
    name(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w,                     \
         const float *__restrict__ ws, const float *__restrict__ alpha, int B, int N, int K, float eps,       \
         cu_rope_ring rr) {                                                                                    \
        const int n0 = blockIdx.x * MV_ROWS, b0 = blockIdx.y * BT, nb = min(BT, B - b0);                      \
        float acc[MV_ROWS * BT];                                                                               \
        mv_vec_sums<BT, false, CH, MV_NORM>(acc, x, w, alpha, N, K, eps, n0, b0, nb);                          \
        mv_store_rope<BT>(y, acc, n0, b0, nb, N, ws, rr);                                                      \
    }
MV_ROPE_KERNEL(matvec_bf16_norm_rope, uint2)
MV_ROPE_KERNEL(matvec_q8_norm_rope, uint32_t)

/* ---- the depformer attention folded into its out-projection ----------------
 * y += attend(qkv, cache) W^T at the matvec path (issue 25: the attention's
 * launch, one graph node per layer and sub-step, saved). Every block of the
 * product needs the whole attention output of its batch tile (all heads),
 * so each computes it itself into shared memory, in dep_attend_kernel's
 * arithmetic order (cuda/cu_lm.cu: a warp per (row, head, key) for the
 * scores, lanes across head_dim and a shuffle sum; one thread per (row,
 * head) for the softmax; one per output element for the weighted sum of
 * the values), so the output is the two launches' bit for bit. Only block
 * (0, tile) stores the rows' current key and value at sub-step k of the
 * cache; every block reads them from qkv (Q8: quantized there by the same
 * rule), the cache only for the earlier sub-steps, which no block of this
 * launch writes: no race between blocks. The price: each of the
 * ceil(N / MV_ROWS) blocks re-reads q, k, v (3 D floats a row) and the
 * k - lo cached keys and values of its rows (docs/cuda.md counts it). */

#define MV_ATT_MAX_D 1024    /* the tile (BT, D) in shared memory */
#define MV_ATT_MAX_HEADS 16

/* The attention's operands (cu_dep_attend's). */
typedef struct mv_dep_att {
    const float *qkv;     /* (B, 3D) */
    float *kc, *vc;       /* (B, cache_stride) each; Q8: int8 values then the scales */
    size_t cache_stride;
    int k, lo, heads, head_dim;
    float scale;          /* 1 / sqrt(head_dim) */
} mv_dep_att;

/* xs (nb, D) = the attention output of rows b0 .. b0 + nb - 1 (above);
 * store: this block writes the current key and value into the cache (one
 * block per batch tile: its column bx == 0). */
template <int BT, bool Q8>   /* Q8: the int8 K/V cache (cu_dep_attend_q8's) */
__device__ __forceinline__ void mv_dep_att_tile(float *xs, const mv_dep_att &a, int b0, int nb, int D, bool store) {
    __shared__ float sc[BT * MV_ATT_MAX_HEADS * LM_MAX_DEP_Q];   /* scores, then weights */
    __shared__ float sinv[BT * MV_ATT_MAX_HEADS];                /* 1 / the softmax's sum */
    __shared__ float cur_s[2][BT * MV_ATT_MAX_HEADS];            /* Q8: the current key's, value's scales */
    constexpr int NW = MV_THREADS / CU_WARP;
    const int heads = a.heads, hd = a.head_dim, k = a.k, lo = a.lo, nk = k + 1 - lo;
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    if constexpr (Q8) {
        /* a warp per (row, head): the current key's and value's scales (a maximum: any order) */
        for (int t = warp; t < nb * heads; t += NW) {
            const int b = t / heads, h = t % heads;
            const float *cur = a.qkv + (size_t)(b0 + b) * 3 * D + D + (size_t)h * hd;
            float mk = 0.0f, mv = 0.0f;
            for (int d = lane; d < hd; d += CU_WARP) {
                mk = fmaxf(mk, fabsf(cur[d]));
                mv = fmaxf(mv, fabsf(cur[D + d]));
            }
            const float sk = q8_scale(warp_max(mk)), sv = q8_scale(warp_max(mv));
            if (lane == 0) {
                cur_s[0][t] = sk;
                cur_s[1][t] = sv;
            }
            if (store) {
                int8_t *kb8 = reinterpret_cast<int8_t *>(a.kc + (size_t)(b0 + b) * a.cache_stride);
                int8_t *vb8 = reinterpret_cast<int8_t *>(a.vc + (size_t)(b0 + b) * a.cache_stride);
                for (int d = lane; d < hd; d += CU_WARP) {
                    kb8[(size_t)k * D + (size_t)h * hd + d] = q8_round(cur[d], sk);
                    vb8[(size_t)k * D + (size_t)h * hd + d] = q8_round(cur[D + d], sv);
                }
                if (lane == 0) {
                    reinterpret_cast<float *>(kb8 + (size_t)LM_MAX_DEP_Q * D)[(size_t)k * heads + h] = sk;
                    reinterpret_cast<float *>(vb8 + (size_t)LM_MAX_DEP_Q * D)[(size_t)k * heads + h] = sv;
                }
            }
        }
    } else if (store) {
        for (int i = threadIdx.x; i < nb * D; i += MV_THREADS) {
            const int b = i / D, e = i % D;
            const float *cur = a.qkv + (size_t)(b0 + b) * 3 * D;
            a.kc[(size_t)(b0 + b) * a.cache_stride + (size_t)k * D + e] = cur[D + e];
            a.vc[(size_t)(b0 + b) * a.cache_stride + (size_t)k * D + e] = cur[2 * D + e];
        }
    }
    __syncthreads();
    /* the scores: a warp per (row, head, key), lanes across head_dim */
    for (int t = warp; t < nb * heads * nk; t += NW) {
        const int j = t % nk, bh = t / nk, b = bh / heads, h = bh % heads;
        const float *q = a.qkv + (size_t)(b0 + b) * 3 * D + (size_t)h * hd;
        float s = 0.0f, ks;
        if (lo + j == k) {   /* the current key, from qkv */
            ks = Q8 ? cur_s[0][bh] : 1.0f;
            for (int d = lane; d < hd; d += CU_WARP)
                s = fmaf(q[d], Q8 ? (float)q8_round(q[D + d], ks) : q[D + d], s);
        } else {
            const float *kb = a.kc + (size_t)(b0 + b) * a.cache_stride;
            const int8_t *kb8 = reinterpret_cast<const int8_t *>(kb);
            const size_t o = (size_t)(lo + j) * D + (size_t)h * hd;
            ks = Q8 ? reinterpret_cast<const float *>(kb8 + (size_t)LM_MAX_DEP_Q * D)[(size_t)(lo + j) * heads + h]
                    : 1.0f;
            for (int d = lane; d < hd; d += CU_WARP) s = fmaf(q[d], Q8 ? (float)kb8[o + d] : kb[o + d], s);
        }
        s = cu_warp_sum(s);
        if (lane == 0) sc[bh * LM_MAX_DEP_Q + j] = Q8 ? s * ks * a.scale : s * a.scale;
    }
    __syncthreads();
    /* the softmax: a thread per (row, head), in order over the keys */
    for (int t = threadIdx.x; t < nb * heads; t += MV_THREADS) {
        float *w = sc + t * LM_MAX_DEP_Q;
        float m = -INFINITY;
        for (int j = 0; j < nk; j++) m = fmaxf(m, w[j]);
        float l = 0.0f;
        for (int j = 0; j < nk; j++) {
            w[j] = expf(w[j] - m);
            l += w[j];
        }
        sinv[t] = 1.0f / l;
    }
    __syncthreads();
    /* the output: a thread per element, the values in order over the keys */
    for (int i = threadIdx.x; i < nb * D; i += MV_THREADS) {
        const int b = i / D, e = i % D, h = e / hd, bh = b * heads + h;
        const float *w = sc + bh * LM_MAX_DEP_Q, inv = sinv[bh];
        const float *vb = a.vc + (size_t)(b0 + b) * a.cache_stride;
        const int8_t *vb8 = reinterpret_cast<const int8_t *>(vb);
        const float *vs = reinterpret_cast<const float *>(vb8 + (size_t)LM_MAX_DEP_Q * D);
        const float vcur = a.qkv[(size_t)(b0 + b) * 3 * D + 2 * D + e];
        float s = 0.0f;
        for (int j = 0; j < nk; j++) {
            const size_t o = (size_t)(lo + j) * D + e;
            if (lo + j == k) {   /* the current value, from qkv */
                if constexpr (Q8) s = fmaf(w[j] * inv * cur_s[1][bh], (float)q8_round(vcur, cur_s[1][bh]), s);
                else s = fmaf(w[j] * inv, vcur, s);
            } else {
                if constexpr (Q8) s = fmaf(w[j] * inv * vs[(size_t)(lo + j) * heads + h], (float)vb8[o], s);
                else s = fmaf(w[j] * inv, vb[o], s);
            }
        }
        xs[(size_t)b * D + e] = s;
    }
    __syncthreads();
}

/* y (B, N) += attend(a) (B, K) W^T, K = heads * head_dim <= MV_ATT_MAX_D:
 * the attention tile, then the vector path's product from shared memory
 * with the add (MV_ACC). Block (bx, by); the one of column bx == 0 of
 * each batch tile stores the cache. */
template <int BT, typename CH, bool KV8>
__device__ __forceinline__ void mv_att_body(float *__restrict__ y, const void *__restrict__ w,
                                            const float *__restrict__ ws, int B, int N, int K, const mv_dep_att &a,
                                            int bx, int by) {
    __shared__ float4 xs4[BT * MV_ATT_MAX_D / 4];   /* float4: the vector loads' 16-byte alignment */
    float *xs = reinterpret_cast<float *>(xs4);
    const int b0 = by * BT;
    mv_dep_att_tile<BT, KV8>(xs, a, b0, min(BT, B - b0), K, bx == 0);
    mv_vec_body<BT, false, CH, MV_ACC, true>(y, xs, w, ws, nullptr, B, N, K, 0.0f, bx, by);
}
#define MV_ATT_KERNEL(name, CH)                                                                               \
    template <int BT, bool KV8>                                                                                \
    __global__ void __launch_bounds__(MV_THREADS)                                                              \
    name(float *__restrict__ y, const void *__restrict__ w, const float *__restrict__ ws, int B, int N, int K, \
         mv_dep_att a) {                                                                                       \
        mv_att_body<BT, CH, KV8>(y, w, ws, B, N, K, a, blockIdx.x, blockIdx.y);                                \
    }
MV_ATT_KERNEL(matvec_bf16_att_acc, uint2)
MV_ATT_KERNEL(matvec_q8_att_acc, uint32_t)

/* ---- one launch for G products of one input ------------------------------
 * y (G, B, N): y[g] = x W_g^T with the fusions of f, for G matrices of one
 * shape (the depformer's G input projections, which all read out_norm(h)):
 * the vector path's blocks of product g at blockIdx.z, each exactly the
 * block of a launch of its own (so the same bits), one
 * graph node instead of G. The matrix is selected with constant indices
 * (a dynamic index into the parameter struct made ptxas spill). */
#define MV_MAX_GROUP LM_MAX_DEP_Q
typedef struct mv_group {
    const void *w[MV_MAX_GROUP];
    size_t ws_off;   /* int8: bytes from each w[g] to its row scales (one offset for all: fewer registers) */
} mv_group;

#define MV_GROUP_KERNEL(name, CH)                                                                             \
    template <int BT, int MODE>                                                                                \
    __global__ void __launch_bounds__(MV_THREADS)                                                              \
    name(float *__restrict__ y, const float *__restrict__ x, mv_group gw, const float *__restrict__ alpha,     \
         int B, int N, int K, float eps) {                                                                     \
        const int g = blockIdx.z;                                                                              \
        const void *wg = gw.w[0];                                                                              \
        _Pragma("unroll") for (int i = 1; i < MV_MAX_GROUP; i++) if (i == g) wg = gw.w[i];                     \
        const float *wsg = sizeof(CH) == 4                                                                     \
                               ? reinterpret_cast<const float *>(static_cast<const char *>(wg) + gw.ws_off)   \
                               : nullptr;                                                                      \
        mv_vec_body<BT, false, CH, MODE>(y + (size_t)g * B * N, x, wg, wsg, alpha, B, N, K, eps, blockIdx.x,   \
                                         blockIdx.y);                                                          \
    }
MV_GROUP_KERNEL(matvec_bf16_group, uint2)
MV_GROUP_KERNEL(matvec_q8_group, uint32_t)

/* ---- the depformer sub-step in one launch: the chain ---------------------
 * (cu_dep_chain, cuda/cu_kern.h; the protocol in cuda/cu_sync.cuh.) A 1-D
 * grid of one block per block of every stage's own launch, in stage order
 * per layer QKV, OUT, FFN_IN, FFN_OUT, then HEAD; the stage's blocks
 * (bx, by) in its grid's linear order (x fastest). A block's ticket, not
 * its blockIdx, names its stage and (bx, by). Each stage runs the body of
 * its launch with (bx, by) passed in, x read with plain loads (dy, dqkv
 * and du are written by earlier stages of this launch: ld.global.nc is
 * only for data read-only during the whole kernel); weights, scales and
 * norm alphas stay on the read-only path. So each output is computed by
 * the same code in the same order as in the launches: the same bits. */
enum { DC_QKV, DC_OUT, DC_FFN_IN, DC_FFN_OUT, DC_HEAD };

/* MV_GRID_CONST: the parameter block is read in place with a computed
 * layer index (__grid_constant__: no per-thread copy of its 1.6 KB). */
#ifdef MOSHID_EMU_DEVICE_H
#define MV_GRID_CONST
#else
#define MV_GRID_CONST __grid_constant__
#endif

template <int BT, typename CH, bool KV8>
__device__ __forceinline__ void dc_body(const cu_dep_chain_args &p, int lo, float scale) {
    __shared__ unsigned dc_ticket;
    /* row blocks per batch tile of each kind (nq: QKV, nd: OUT and
     * FFN_OUT, ni: FFN_IN, nh: HEAD), batch tiles, blocks per layer */
    const unsigned nq = (unsigned)((3 * p.D + MV_ROWS - 1) / MV_ROWS), nd = (unsigned)((p.D + MV_ROWS - 1) / MV_ROWS);
    const unsigned ni = (unsigned)((2 * p.H + MV_ROWS - 1) / MV_ROWS), nh = (unsigned)((p.card + MV_ROWS - 1) / MV_ROWS);
    const unsigned nby = (unsigned)((p.B + BT - 1) / BT), per_layer = nby * (nq + 2 * nd + ni);
    const unsigned t = cu_chain_ticket(&p.ctl->ticket, &dc_ticket);
    /* the ticket's layer, kind, block j in its stage, the stage's row
     * blocks nx and the previous stage's (np) */
    int l = (int)(t / per_layer), kind;
    unsigned j = t - (unsigned)l * per_layer, nx, np;
    if (l >= p.layers) {
        l = p.layers;
        j = t - (unsigned)p.layers * per_layer;
        kind = DC_HEAD, nx = nh, np = nd;
    } else if (j < nby * nq) {
        kind = DC_QKV, nx = nq, np = nd;   /* after the layer before's FFN_OUT */
    } else if ((j -= nby * nq) < nby * nd) {
        kind = DC_OUT, nx = nd, np = nq;
    } else if ((j -= nby * nd) < nby * ni) {
        kind = DC_FFN_IN, nx = ni, np = nd;
    } else {
        j -= nby * ni;
        kind = DC_FFN_OUT, nx = nd, np = ni;
    }
    const int s = 4 * l + (kind == DC_HEAD ? 0 : kind), bx = (int)(j % nx), by = (int)(j / nx);
#ifdef MOSHID_EMU_DEVICE_H
    /* gpu-model samples the grid's blocks, but a chain must run every one
     * (its counters): an unsampled virtual block skips its work and still
     * waits and arrives (emu_traffic_vblock_skip, tests/gpu/emu/emu.h) */
    const bool skip = emu_traffic_vblock_skip(t) != 0;
#else
    constexpr bool skip = false;
#endif
    const cu_dep_chain_layer &L = p.layer[l < p.layers ? l : 0];
    const void *w;
    const float *ws;
    int N, K;
    switch (kind) {
    case DC_QKV: w = L.attn_in; ws = L.attn_in_s; N = 3 * p.D; K = p.D; break;
    case DC_OUT: w = L.attn_out; ws = L.attn_out_s; N = p.D; K = p.D; break;
    case DC_FFN_IN: w = L.ffn_in; ws = L.ffn_in_s; N = 2 * p.H; K = p.D; break;
    case DC_FFN_OUT: w = L.ffn_out; ws = L.ffn_out_s; N = p.D; K = p.H; break;
    default: w = p.head; ws = p.head_s; N = p.card; K = p.D; break;
    }
    if (s > 0 && !skip) {
        /* The block's weight rows do not depend on the stage before: ask
         * for them into L2 now, so that the wait overlaps their reads (the
         * point of the chain: the weights stream while earlier stages
         * finish, instead of after a launch boundary). */
        const size_t row = (size_t)K * (sizeof(CH) / 4), lines = (row + 127) / 128;
        const int n0 = bx * MV_ROWS, nr = min(MV_ROWS, N - n0);
        for (size_t i = threadIdx.x; i < (size_t)nr * lines; i += MV_THREADS)
            cu_prefetch_l2(static_cast<const char *>(w) + (size_t)(n0 + (int)(i / lines)) * row + i % lines * 128);
    }
    if (s > 0) cu_chain_wait(&p.ctl->done[s - 1], nby * np);
    switch (skip ? -1 : kind) {
    case -1: break;
    case DC_QKV:
    case DC_FFN_IN:
        mv_vec_body<BT, false, CH, MV_NORM, false, false>(kind == DC_QKV ? p.dqkv : p.du, p.dy, w, ws,
                                                          kind == DC_QKV ? L.norm1 : L.norm2, p.B, N, K, p.eps,
                                                          bx, by);
        break;
    case DC_OUT: {
        const mv_dep_att a = {p.dqkv, L.k_cache, L.v_cache, p.cache_stride, p.k, lo, p.heads, p.head_dim, scale};
        mv_att_body<BT, CH, KV8>(p.dy, w, ws, p.B, N, K, a, bx, by);
        break;
    }
    case DC_FFN_OUT:
        mv_vec_body<BT, true, CH, MV_ACC, false, false>(p.dy, p.du, w, ws, nullptr, p.B, N, K, 0.0f, bx, by);
        break;
    default:
        mv_vec_body<BT, false, CH, MV_PLAIN, false, false>(p.logits, p.dy, w, ws, nullptr, p.B, N, K, 0.0f, bx,
                                                           by);
        break;
    }
    const unsigned before = cu_chain_arrive(&p.ctl->done[s]);
    /* The last block of the last stage sets the counters back for the next
     * launch (a graph replay): every block has taken its ticket (the last
     * stage's are the highest) and is past its wait (each block arrived on
     * its stage's counter after its wait, and the last stage's counter is
     * full only once the one before it was, and so on down), so nothing
     * reads them again in this launch. */
    if (threadIdx.x == 0 && kind == DC_HEAD && before + 1 == nby * nh) {
        atomicExch(&p.ctl->ticket, 0u);
        for (int i = 0; i <= s; i++) atomicExch(&p.ctl->done[i], 0u);
    }
}

/* The chain kernels: grid (blocks of all stages), MV_THREADS threads; lo
 * and scale: the attention's first key and 1 / sqrt(head_dim), computed
 * on the host as the out-projection's launcher does. Launch bounds with a
 * minimum of 1 block per SM: with the maximum alone ptxas held the kernel
 * to 128 registers and the int8 body of the batch tile of 8 spilled (76
 * bytes); now 144, no spill (docs/cuda-ptxas.txt). */
#define DC_KERNEL(name, CH)                                                                                   \
    template <int BT, bool KV8>                                                                                \
    __global__ void __launch_bounds__(MV_THREADS, 1)                                                           \
    name(const MV_GRID_CONST cu_dep_chain_args p, int lo, float scale) {                                      \
        dc_body<BT, CH, KV8>(p, lo, scale);                                                                    \
    }
DC_KERNEL(dep_chain_bf16, uint2)
DC_KERNEL(dep_chain_q8, uint32_t)

/* Any K and alignment: one element at a time; W bf16, or (Q8) int8 rows
 * with their scales ws; the modes as mv_vec_body's. Grid (ceil(N /
 * MV_ROWS), ceil(B / CU_MATVEC_BATCH_TILE)). */
template <bool Q8, int MODE>
__device__ __forceinline__ void mv_scalar_body(float *__restrict__ y, const float *__restrict__ x,
                                               const void *__restrict__ w, const float *__restrict__ ws,
                                               const float *__restrict__ alpha, int B, int N, int K, float eps) {
    constexpr int BT = CU_MATVEC_BATCH_TILE;
    const int n0 = blockIdx.x * MV_ROWS;
    const int b0 = blockIdx.y * BT;
    const int nb = min(BT, B - b0);
    float inv[BT];
    if constexpr (MODE == MV_NORM) mv_norm_prologue<BT>(inv, x, b0, nb, K, eps);
    float acc[MV_ROWS * BT];
#pragma unroll
    for (int j = 0; j < MV_ROWS * BT; j++) acc[j] = 0.0f;
    for (int k = threadIdx.x; k < K; k += MV_THREADS) {
        const float a = MODE == MV_NORM ? alpha[k] : 0.0f;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            size_t i = (size_t)min(n0 + r, N - 1) * K + k;
            float wf = Q8 ? (float)static_cast<const int8_t *>(w)[i]
                          : __uint_as_float((uint32_t) static_cast<const uint16_t *>(w)[i] << 16);
#pragma unroll
            for (int b = 0; b < BT; b++) {
                if (b >= nb) break;
                float xv = x[(size_t)(b0 + b) * K + k];
                if constexpr (MODE == MV_NORM) xv = xv * (a * inv[b]);
                acc[r * BT + b] = fmaf(wf, xv, acc[r * BT + b]);
            }
        }
    }
    mv_store<BT, MODE == MV_ACC>(y, acc, n0, b0, nb, N, ws);
}

#define MV_SCALAR_KERNEL(name, MODE)                                                                          \
    template <bool Q8>                                                                                         \
    __global__ void __launch_bounds__(MV_THREADS)                                                              \
    name(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w,                     \
         const float *__restrict__ ws, const float *__restrict__ alpha, int B, int N, int K, float eps) {      \
        mv_scalar_body<Q8, MODE>(y, x, w, ws, alpha, B, N, K, eps);                                            \
    }
MV_SCALAR_KERNEL(matvec_scalar, MV_PLAIN)
MV_SCALAR_KERNEL(matvec_scalar_norm, MV_NORM)
MV_SCALAR_KERNEL(matvec_scalar_acc, MV_ACC)

/* ---- launchers ---------------------------------------------------------------- */

/* The arguments every matvec kernel takes. */
typedef struct mv_args {
    float *y;
    const float *x;
    const void *w;
    const float *ws, *alpha;
    int B, N, K;
    float eps;
} mv_args;

#define MV_ARGS(a) (a).y, (a).x, (a).w, (a).ws, (a).alpha, (a).B, (a).N, (a).K, (a).eps

template <int BT, bool Q8, bool GATED, int MODE>
static void launch_vec(const mv_args &a, cudaStream_t stream) {
    dim3 grid((unsigned)((a.N + MV_ROWS - 1) / MV_ROWS), (unsigned)((a.B + BT - 1) / BT));
    if constexpr (!Q8 && !GATED && MODE == MV_PLAIN) matvec_bf16_vec<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!Q8 && !GATED && MODE == MV_NORM) matvec_bf16_norm<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!Q8 && !GATED) matvec_bf16_acc<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!Q8 && MODE == MV_PLAIN) matvec_bf16_gated<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!Q8) matvec_bf16_gated_acc<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!GATED && MODE == MV_PLAIN) matvec_q8_vec<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!GATED && MODE == MV_NORM) matvec_q8_norm<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (!GATED) matvec_q8_acc<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if constexpr (MODE == MV_PLAIN) matvec_q8_gated<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else matvec_q8_gated_acc<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
}

/* The batch tile: 1, 2, 4, else CU_MATVEC_BATCH_TILE (tiles of it). */
template <bool Q8, bool GATED, int MODE>
static void launch_tile(const mv_args &a, cudaStream_t stream) {
    if (a.B == 1) launch_vec<1, Q8, GATED, MODE>(a, stream);
    else if (a.B == 2) launch_vec<2, Q8, GATED, MODE>(a, stream);
    else if (a.B <= 4) launch_vec<4, Q8, GATED, MODE>(a, stream);
    else launch_vec<CU_MATVEC_BATCH_TILE, Q8, GATED, MODE>(a, stream);
}

template <bool Q8>
static void launch_scalar(const mv_args &a, int mode, cudaStream_t stream) {
    dim3 grid((unsigned)((a.N + MV_ROWS - 1) / MV_ROWS),
              (unsigned)((a.B + CU_MATVEC_BATCH_TILE - 1) / CU_MATVEC_BATCH_TILE));
    if (mode == MV_NORM) matvec_scalar_norm<Q8><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else if (mode == MV_ACC) matvec_scalar_acc<Q8><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
    else matvec_scalar<Q8><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a));
}

/* The mode of a fusion request; -1: norm and acc both asked (refused). */
static int mv_mode(const cu_fuse *f) {
    if (!f) return MV_PLAIN;
    if (f->norm && f->acc) return -1;
    return f->norm ? MV_NORM : f->acc ? MV_ACC : MV_PLAIN;
}

/* Checks shared by the launchers: dimensions, the grid's y limit, the
 * fusion (eps a number, not both modes). */
static int mv_bad(int B, int N, int K, const cu_fuse *f) {
    return B < 0 || N < 0 || K < 0 || (B + CU_MATVEC_BATCH_TILE - 1) / CU_MATVEC_BATCH_TILE > 65535 ||
           mv_mode(f) < 0 || (f && f->norm && !(f->eps >= 0.0f));
}

/* The vector path's alignment of the norm scales (one float4 per chunk). */
static int mv_norm_ok(const cu_fuse *f) { return !f || !f->norm || ((uintptr_t)f->norm % 16) == 0; }

template <bool Q8, bool GATED>
static void launch_mode(const mv_args &a, int mode, cudaStream_t stream) {
    if (mode == MV_ACC) launch_tile<Q8, GATED, MV_ACC>(a, stream);
    else if constexpr (!GATED) {
        if (mode == MV_NORM) launch_tile<Q8, false, MV_NORM>(a, stream);
        else launch_tile<Q8, false, MV_PLAIN>(a, stream);
    } else {
        launch_tile<Q8, true, MV_PLAIN>(a, stream);
    }
}

extern "C" int cu_matvec_gated_ok(const float *u, const uint16_t *w, int K) {
    return K % 8 == 0 && ((uintptr_t)u % 16) == 0 && ((uintptr_t)w % 16) == 0;
}

extern "C" cudaError_t cu_matvec_bf16_fused(float *y, const float *x, const uint16_t *w, int B, int N, int K,
                                            const cu_fuse *f, cudaStream_t stream) {
    if (mv_bad(B, N, K, f)) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    const mv_args a = {y, x, w, nullptr, f ? f->norm : nullptr, B, N, K, f ? f->eps : 0.0f};
    int aligned = K % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 16) == 0 && mv_norm_ok(f);
    if (aligned) launch_mode<false, false>(a, mv_mode(f), stream);
    else launch_scalar<false>(a, mv_mode(f), stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_bf16(float *y, const float *x, const uint16_t *w, int B, int N, int K,
                                      cudaStream_t stream) {
    return cu_matvec_bf16_fused(y, x, w, B, N, K, nullptr, stream);
}

extern "C" cudaError_t cu_matvec_bf16_gated_fused(float *y, const float *u, const uint16_t *w, int B, int N, int K,
                                                  const cu_fuse *f, cudaStream_t stream) {
    if (mv_bad(B, N, K, f) || (f && f->norm) || !cu_matvec_gated_ok(u, w, K)) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    const mv_args a = {y, u, w, nullptr, nullptr, B, N, K, 0.0f};
    launch_mode<false, true>(a, mv_mode(f), stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_bf16_gated(float *y, const float *u, const uint16_t *w, int B, int N, int K,
                                            cudaStream_t stream) {
    return cu_matvec_bf16_gated_fused(y, u, w, B, N, K, nullptr, stream);
}

/* ---- int8 rows (W8A16) ------------------------------------------------------ */

extern "C" int cu_matvec_q8_ok(const float *x, const int8_t *w, int K) {
    return K % 4 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 4) == 0;
}

extern "C" cudaError_t cu_matvec_q8_fused(float *y, const float *x, const int8_t *w, const float *ws, int B, int N,
                                          int K, const cu_fuse *f, cudaStream_t stream) {
    if (mv_bad(B, N, K, f) || !ws) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    const mv_args a = {y, x, w, ws, f ? f->norm : nullptr, B, N, K, f ? f->eps : 0.0f};
    if (cu_matvec_q8_ok(x, w, K) && mv_norm_ok(f)) launch_mode<true, false>(a, mv_mode(f), stream);
    else launch_scalar<true>(a, mv_mode(f), stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_q8(float *y, const float *x, const int8_t *w, const float *ws, int B, int N, int K,
                                    cudaStream_t stream) {
    return cu_matvec_q8_fused(y, x, w, ws, B, N, K, nullptr, stream);
}

extern "C" cudaError_t cu_matvec_q8_gated_fused(float *y, const float *u, const int8_t *w, const float *ws, int B,
                                                int N, int K, const cu_fuse *f, cudaStream_t stream) {
    if (mv_bad(B, N, K, f) || (f && f->norm) || !ws || !cu_matvec_q8_ok(u, w, K)) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    const mv_args a = {y, u, w, ws, nullptr, B, N, K, 0.0f};
    launch_mode<true, true>(a, mv_mode(f), stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_q8_gated(float *y, const float *u, const int8_t *w, const float *ws, int B, int N,
                                          int K, cudaStream_t stream) {
    return cu_matvec_q8_gated_fused(y, u, w, ws, B, N, K, nullptr, stream);
}

/* ---- RoPE and the ring store in the QKV product: launchers ---------------- */

extern "C" int cu_matvec_rope_ok(const float *x, const void *w, int w8, int K, const cu_fuse *f,
                                 const cu_rope_ring *rr) {
    if (!f || !f->norm || f->acc || !mv_norm_ok(f) || !rr || !rr->kv_layer || !rr->slot || !rr->pos)
        return 0;
    if (rr->heads <= 0 || rr->head_dim <= 0 || rr->head_dim % 2 || rr->ctx <= 0 ||
        3LL * rr->heads * rr->head_dim > 0x7fffffffLL)
        return 0;
    /* the ring's packed pairs: 4-byte stores of two bf16 */
    if ((uintptr_t)rr->kv_layer % 4 || rr->slot_stride % 2) return 0;
    return w8 ? cu_matvec_q8_ok(x, static_cast<const int8_t *>(w), K)
              : K % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 16) == 0;
}

template <int BT>
static void launch_rope(const mv_args &a, const cu_rope_ring &rr, cudaStream_t stream) {
    dim3 grid((unsigned)(a.N / MV_ROWS), (unsigned)((a.B + BT - 1) / BT));
    if (a.ws) matvec_q8_norm_rope<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a), rr);
    else matvec_bf16_norm_rope<BT><<<grid, MV_THREADS, 0, stream>>>(MV_ARGS(a), rr);
}

/* ws NULL: bf16 rows, else int8 rows with these scales. */
static cudaError_t rope_launch(float *qkv, const float *x, const void *w, const float *ws, int B, int K,
                               const cu_fuse *f, const cu_rope_ring *rr, cudaStream_t stream) {
    if (!cu_matvec_rope_ok(x, w, ws != nullptr, K, f, rr)) return cudaErrorInvalidValue;
    const int N = 3 * rr->heads * rr->head_dim;
    if (mv_bad(B, N, K, f)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    const mv_args a = {qkv, x, w, ws, f->norm, B, N, K, f->eps};
    if (B == 1) launch_rope<1>(a, *rr, stream);
    else if (B == 2) launch_rope<2>(a, *rr, stream);
    else if (B <= 4) launch_rope<4>(a, *rr, stream);
    else launch_rope<CU_MATVEC_BATCH_TILE>(a, *rr, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_bf16_norm_rope(float *qkv, const float *x, const uint16_t *w, int B, int K,
                                                const cu_fuse *f, const cu_rope_ring *rr, cudaStream_t stream) {
    return rope_launch(qkv, x, w, nullptr, B, K, f, rr, stream);
}

extern "C" cudaError_t cu_matvec_q8_norm_rope(float *qkv, const float *x, const int8_t *w, const float *ws, int B,
                                              int K, const cu_fuse *f, const cu_rope_ring *rr, cudaStream_t stream) {
    if (!ws) return cudaErrorInvalidValue;
    return rope_launch(qkv, x, w, ws, B, K, f, rr, stream);
}

/* ---- the depformer attention folded into its out-projection: launchers ---- */

template <int BT, bool KV8>
static void launch_att(float *y, const void *w, const float *ws, int B, int N, int K, const mv_dep_att &a,
                       cudaStream_t stream) {
    dim3 grid((unsigned)((N + MV_ROWS - 1) / MV_ROWS), (unsigned)((B + BT - 1) / BT));
    if (ws) matvec_q8_att_acc<BT, KV8><<<grid, MV_THREADS, 0, stream>>>(y, w, ws, B, N, K, a);
    else matvec_bf16_att_acc<BT, KV8><<<grid, MV_THREADS, 0, stream>>>(y, w, ws, B, N, K, a);
}

template <bool KV8>
static void launch_att_tile(float *y, const void *w, const float *ws, int B, int N, int K, const mv_dep_att &a,
                            cudaStream_t stream) {
    if (B == 1) launch_att<1, KV8>(y, w, ws, B, N, K, a, stream);
    else if (B == 2) launch_att<2, KV8>(y, w, ws, B, N, K, a, stream);
    else if (B <= 4) launch_att<4, KV8>(y, w, ws, B, N, K, a, stream);
    else launch_att<CU_MATVEC_BATCH_TILE, KV8>(y, w, ws, B, N, K, a, stream);
}

extern "C" int cu_matvec_dep_att_ok(const void *w, int w8, int kv8, int K, int heads, int head_dim) {
    return heads > 0 && heads <= MV_ATT_MAX_HEADS && head_dim > 0 && K == heads * head_dim && K <= MV_ATT_MAX_D &&
           (!kv8 || K % 4 == 0) && (w8 ? K % 4 == 0 && (uintptr_t)w % 4 == 0 : K % 8 == 0 && (uintptr_t)w % 16 == 0);
}

/* ws NULL: bf16 rows, else int8 rows with these scales. */
static cudaError_t dep_att_launch(float *y, const float *qkv, float *k_cache, float *v_cache, size_t cache_stride,
                                  int kv8, int k, int window, const void *w, const float *ws, int B, int N, int K,
                                  int heads, int head_dim, cudaStream_t stream) {
    if (mv_bad(B, N, K, nullptr) || k < 0 || k >= LM_MAX_DEP_Q || window <= 0 ||
        !cu_matvec_dep_att_ok(w, ws != nullptr, kv8, K, heads, head_dim))
        return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    const mv_dep_att a = {qkv, k_cache, v_cache, cache_stride, k, k + 1 > window ? k + 1 - window : 0, heads,
                          head_dim, 1.0f / sqrtf((float)head_dim)};
    if (kv8) launch_att_tile<true>(y, w, ws, B, N, K, a, stream);
    else launch_att_tile<false>(y, w, ws, B, N, K, a, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_bf16_dep_att(float *y, const float *qkv, float *k_cache, float *v_cache,
                                              size_t cache_stride, int kv8, int k, int window, const uint16_t *w,
                                              int B, int N, int K, int heads, int head_dim, cudaStream_t stream) {
    return dep_att_launch(y, qkv, k_cache, v_cache, cache_stride, kv8, k, window, w, nullptr, B, N, K, heads,
                          head_dim, stream);
}

extern "C" cudaError_t cu_matvec_q8_dep_att(float *y, const float *qkv, float *k_cache, float *v_cache,
                                            size_t cache_stride, int kv8, int k, int window, const int8_t *w,
                                            const float *ws, int B, int N, int K, int heads, int head_dim,
                                            cudaStream_t stream) {
    if (!ws) return cudaErrorInvalidValue;
    return dep_att_launch(y, qkv, k_cache, v_cache, cache_stride, kv8, k, window, w, ws, B, N, K, heads, head_dim,
                          stream);
}

/* ---- one launch for G products of one input: launchers -------------------- */

template <int BT, bool Q8, int MODE>
static void launch_group(float *y, const float *x, const mv_group &gw, int G, const mv_args &a, cudaStream_t stream) {
    dim3 grid((unsigned)((a.N + MV_ROWS - 1) / MV_ROWS), (unsigned)((a.B + BT - 1) / BT), (unsigned)G);
    if constexpr (Q8) matvec_q8_group<BT, MODE><<<grid, MV_THREADS, 0, stream>>>(y, x, gw, a.alpha, a.B, a.N, a.K, a.eps);
    else matvec_bf16_group<BT, MODE><<<grid, MV_THREADS, 0, stream>>>(y, x, gw, a.alpha, a.B, a.N, a.K, a.eps);
}

template <bool Q8, int MODE>
static void launch_group_tile(float *y, const float *x, const mv_group &gw, int G, const mv_args &a,
                              cudaStream_t stream) {
    if (a.B == 1) launch_group<1, Q8, MODE>(y, x, gw, G, a, stream);
    else if (a.B == 2) launch_group<2, Q8, MODE>(y, x, gw, G, a, stream);
    else if (a.B <= 4) launch_group<4, Q8, MODE>(y, x, gw, G, a, stream);
    else launch_group<CU_MATVEC_BATCH_TILE, Q8, MODE>(y, x, gw, G, a, stream);
}

extern "C" cudaError_t cu_matvec_group_fused(float *y, const float *x, const void *const *w, const float *const *ws,
                                             int G, int B, int N, int K, const cu_fuse *f, cudaStream_t stream) {
    const int mode = mv_mode(f), q8 = ws != nullptr;
    if (mv_bad(B, N, K, f) || G < 0 || G > MV_MAX_GROUP || (f && f->acc)) return cudaErrorInvalidValue;
    if (G == 0 || B == 0 || N == 0) return cudaSuccess;
    mv_group gw = {};
    int vec = mv_norm_ok(f) && (q8 ? K % 4 == 0 && ((uintptr_t)x % 16) == 0 : K % 8 == 0 && ((uintptr_t)x % 16) == 0);
    if (q8) gw.ws_off = (size_t)((const char *)ws[0] - (const char *)w[0]);
    for (int g = 0; g < G; g++) {
        if (q8 && !ws[g]) return cudaErrorInvalidValue;
        gw.w[g] = w[g];
        vec = vec && ((uintptr_t)w[g] % (q8 ? 4 : 16)) == 0;
        /* one launch: every matrix's scales at the same offset from its rows (the backend's layout) */
        if (q8) vec = vec && (const char *)ws[g] - (const char *)w[g] == (ptrdiff_t)gw.ws_off;
    }
    if (!vec || mode != MV_NORM) {   /* a launch per product (the one launch: the norm mode only) */
        for (int g = 0; g < G; g++) {
            cudaError_t e = q8 ? cu_matvec_q8_fused(y + (size_t)g * B * N, x, static_cast<const int8_t *>(w[g]), ws[g],
                                                    B, N, K, f, stream)
                               : cu_matvec_bf16_fused(y + (size_t)g * B * N, x, static_cast<const uint16_t *>(w[g]),
                                                      B, N, K, f, stream);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    const mv_args a = {y, x, nullptr, nullptr, f ? f->norm : nullptr, B, N, K, f ? f->eps : 0.0f};
    if (q8) launch_group_tile<true, MV_NORM>(y, x, gw, G, a, stream);
    else launch_group_tile<false, MV_NORM>(y, x, gw, G, a, stream);
    return cudaGetLastError();
}

/* ---- the depformer sub-step in one launch: launcher ----------------------- */

/* The vector path's conditions of a product x (B, K) . W^T: bf16 K % 8,
 * x and w 16-byte aligned; int8 K % 4, x 16- and w 4-byte aligned. */
static int dc_vec_ok(const void *x, const void *w, int w8, int K) {
    return w && ((uintptr_t)x % 16) == 0 &&
           (w8 ? K % 4 == 0 && ((uintptr_t)w % 4) == 0 : K % 8 == 0 && ((uintptr_t)w % 16) == 0);
}

extern "C" int cu_dep_chain_ok(const cu_dep_chain_args *a) {
    if (!a || !a->ctl || a->layers < 1 || a->layers > CU_DEP_CHAIN_MAX_LAYERS || a->B < 1 || a->D < 1 ||
        a->H < 1 || a->card < 1 || a->k < 0 || a->k >= LM_MAX_DEP_Q || a->window <= 0 || !(a->eps >= 0.0f) ||
        !dc_vec_ok(a->dy, a->head, a->w8, a->D) || (a->w8 && !a->head_s) || ((uintptr_t)a->dqkv % 16) != 0)
        return 0;
    for (int l = 0; l < a->layers; l++) {
        const cu_dep_chain_layer *L = &a->layer[l];
        if (!dc_vec_ok(a->dy, L->attn_in, a->w8, a->D) || !dc_vec_ok(a->dy, L->ffn_in, a->w8, a->D) ||
            !dc_vec_ok(a->du, L->ffn_out, a->w8, a->H) ||
            !cu_matvec_dep_att_ok(L->attn_out, a->w8, a->kv8, a->D, a->heads, a->head_dim) ||
            ((uintptr_t)L->norm1 % 16) || ((uintptr_t)L->norm2 % 16) || !L->norm1 || !L->norm2 ||
            (a->w8 && (!L->attn_in_s || !L->attn_out_s || !L->ffn_in_s || !L->ffn_out_s)))
            return 0;
    }
    return 1;
}

template <int BT, bool KV8>
static void dc_launch(const cu_dep_chain_args &a, int lo, float scale, unsigned blocks, cudaStream_t stream) {
    if (a.w8) dep_chain_q8<BT, KV8><<<blocks, MV_THREADS, 0, stream>>>(a, lo, scale);
    else dep_chain_bf16<BT, KV8><<<blocks, MV_THREADS, 0, stream>>>(a, lo, scale);
}

/* The batch tile as the stages' own launches choose it (launch_tile). */
template <int BT>
static unsigned dc_blocks(const cu_dep_chain_args &a) {
    const size_t nby = (size_t)(a.B + BT - 1) / BT, rows = (size_t)MV_ROWS;
    const size_t layer = (3 * (size_t)a.D + rows - 1) / rows + 2 * (((size_t)a.D + rows - 1) / rows) +
                         (2 * (size_t)a.H + rows - 1) / rows;
    const size_t n = nby * ((size_t)a.layers * layer + ((size_t)a.card + rows - 1) / rows);
    return n > 0x7fffffffu ? 0u : (unsigned)n;
}

template <int BT>
static cudaError_t dc_tile(const cu_dep_chain_args &a, int lo, float scale, cudaStream_t stream) {
    const unsigned blocks = dc_blocks<BT>(a);
    if (!blocks) return cudaErrorInvalidValue;
    if (a.kv8) dc_launch<BT, true>(a, lo, scale, blocks, stream);
    else dc_launch<BT, false>(a, lo, scale, blocks, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_dep_chain(const cu_dep_chain_args *a, cudaStream_t stream) {
    if (!cu_dep_chain_ok(a)) return cudaErrorInvalidValue;
    const int lo = a->k + 1 > a->window ? a->k + 1 - a->window : 0;
    const float scale = 1.0f / sqrtf((float)a->head_dim);
    if (a->B == 1) return dc_tile<1>(*a, lo, scale, stream);
    if (a->B == 2) return dc_tile<2>(*a, lo, scale, stream);
    if (a->B <= 4) return dc_tile<4>(*a, lo, scale, stream);
    return dc_tile<CU_MATVEC_BATCH_TILE>(*a, lo, scale, stream);
}

/* The large-batch path's operands: wb = (bf16) w, exact (|q| <= 127 has 8
 * significant bits, bf16 carries 8); 4 int8 in, 4 bf16 out per thread. */
__global__ void __launch_bounds__(MV_THREADS)
q8_to_bf16_kernel(uint2 *__restrict__ wb, const uint32_t *__restrict__ w, size_t n4) {
    size_t i = (size_t)blockIdx.x * MV_THREADS + threadIdx.x;
    if (i >= n4) return;
    float f[4];
    i8x4_to_f32(__ldg(w + i), f);
    /* an integer of at most 8 bits is exact in bf16: the high half of its f32 */
    wb[i] = make_uint2((__float_as_uint(f[0]) >> 16) | (__float_as_uint(f[1]) & 0xFFFF0000u),
                       (__float_as_uint(f[2]) >> 16) | (__float_as_uint(f[3]) & 0xFFFF0000u));
}

extern "C" cudaError_t cu_q8_to_bf16(uint16_t *wb, const int8_t *w, size_t n, cudaStream_t stream) {
    if (n % 4 || (uintptr_t)w % 4 || (uintptr_t)wb % 8) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    size_t n4 = n / 4, blocks = (n4 + MV_THREADS - 1) / MV_THREADS;
    if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;
    q8_to_bf16_kernel<<<(unsigned)blocks, MV_THREADS, 0, stream>>>(reinterpret_cast<uint2 *>(wb),
                                                                   reinterpret_cast<const uint32_t *>(w), n4);
    return cudaGetLastError();
}

/* y[b][n] *= ws[n] over columns [0, N) of a (B, ldy) matrix. */
__global__ void __launch_bounds__(MV_THREADS)
scale_cols_kernel(float *__restrict__ y, const float *__restrict__ ws, int N, int ldy) {
    const int b = blockIdx.y;
    const int n = blockIdx.x * MV_THREADS + threadIdx.x;
    if (n < N) y[(size_t)b * ldy + n] *= ws[n];
}

extern "C" cudaError_t cu_scale_cols(float *y, const float *ws, int B, int N, int ldy, cudaStream_t stream) {
    if (B < 0 || N < 0 || ldy < N || B > 65535) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    scale_cols_kernel<<<dim3((unsigned)((N + MV_THREADS - 1) / MV_THREADS), (unsigned)B), MV_THREADS, 0, stream>>>(
        y, ws, N, ldy);
    return cudaGetLastError();
}

/* y[b][n] += p[b][n] * ws[n] (the product rounded first, as cu_scale_cols
 * then cu_add round it). */
__global__ void __launch_bounds__(MV_THREADS)
scale_cols_add_kernel(float *__restrict__ y, const float *__restrict__ p, const float *__restrict__ ws, int N,
                      int ld) {
    const int b = blockIdx.y;
    const int n = blockIdx.x * MV_THREADS + threadIdx.x;
    if (n < N) y[(size_t)b * ld + n] += __fmul_rn(p[(size_t)b * ld + n], ws[n]);
}

extern "C" cudaError_t cu_scale_cols_add(float *y, const float *p, const float *ws, int B, int N, int ld,
                                         cudaStream_t stream) {
    if (B < 0 || N < 0 || ld < N || B > 65535) return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    scale_cols_add_kernel<<<dim3((unsigned)((N + MV_THREADS - 1) / MV_THREADS), (unsigned)B), MV_THREADS, 0,
                            stream>>>(y, p, ws, N, ld);
    return cudaGetLastError();
}
