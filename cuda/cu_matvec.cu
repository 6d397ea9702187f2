/* cu_matvec.cu - batched bf16 weight matrix-vector product, the core of the
 * LM step at small batch: y(B, N) = x(B, K) . W(N, K)^T, W bf16 row-major,
 * x and y f32, accumulation in f32. C twin: kern_matvec_bf16
 * (engine/cpu/kern_cpu.h), the CPU backend's bf16 matmul.
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
 * Parameters are first guesses, to be tuned with engine-bench on hardware.
 */
#include "cu_kern.h"
#include "cu_reduce.cuh"

#define MV_THREADS 128  /* threads per block */
#define MV_ROWS 2       /* output rows per block */
#define MV_UNROLL 8     /* 8-byte W chunks per row in flight per thread */

/* The 4 bf16 of an 8-byte chunk as floats (little-endian: element 0 is the
 * low half of .x). */
__device__ __forceinline__ void bf16x4_to_f32(uint2 v, float f[4]) {
    f[0] = __uint_as_float(v.x << 16); f[1] = __uint_as_float(v.x & 0xFFFF0000u);
    f[2] = __uint_as_float(v.y << 16); f[3] = __uint_as_float(v.y & 0xFFFF0000u);
}

/* Writes the block's MV_ROWS x BT sums; rows past N and vectors past nb are
 * dropped. */
template <int BT>
__device__ __forceinline__ void mv_store(float *y, float (&acc)[MV_ROWS * BT], int n0, int b0, int nb, int N) {
    __shared__ float scratch[(MV_THREADS / CU_WARP) * MV_ROWS * BT];
    float s = cu_block_sum<MV_THREADS, MV_ROWS * BT>(acc, scratch);
    int t = threadIdx.x;
    if (t < MV_ROWS * BT) {
        int r = t / BT, b = t % BT;
        if (n0 + r < N && b < nb) y[(size_t)(b0 + b) * N + n0 + r] = s;
    }
}

/* The float4 of x at chunk c of row b: x itself, or (GATED, x = u of
 * (B, 2K)) silu(u[:K]) * u[K:] computed as silu_gate_kernel does
 * (cuda/cu_lm.cu, kern_silu_gate), so the gated product equals the two
 * launches bit for bit. */
template <bool GATED>
__device__ __forceinline__ float4 mv_x(const float4 *xb, size_t xstride, int b, int c, int K4) {
    if constexpr (!GATED) {
        return __ldg(xb + b * xstride + c);
    } else {
        float4 g = __ldg(xb + b * xstride + c), up = __ldg(xb + b * xstride + K4 + c);
        return make_float4(g.x / (1.0f + expf(-g.x)) * up.x, g.y / (1.0f + expf(-g.y)) * up.y,
                           g.z / (1.0f + expf(-g.z)) * up.z, g.w / (1.0f + expf(-g.w)) * up.w);
    }
}

/* Fast path: K % 8 == 0, x and w 16-byte aligned. Grid (ceil(N / MV_ROWS),
 * ceil(B / BT)). x: (B, K), or (GATED) u (B, 2K). */
template <int BT, bool GATED>
__device__ __forceinline__ void mv_vec_body(float *__restrict__ y, const float *__restrict__ x,
                                            const uint16_t *__restrict__ w, int B, int N, int K) {
    const int n0 = blockIdx.x * MV_ROWS;
    const int b0 = blockIdx.y * BT;
    const int nb = min(BT, B - b0);
    const int K4 = K / 4;   /* 8-byte chunks per row of W, float4s per row of x */
    const uint2 *wr[MV_ROWS];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)   /* rows past N read row N-1, never stored */
        wr[r] = reinterpret_cast<const uint2 *>(w + (size_t)min(n0 + r, N - 1) * K);
    const size_t xstride = (size_t)K / 4 * (GATED ? 2 : 1);   /* float4s per row of x (u) */
    const float4 *xb = reinterpret_cast<const float4 *>(x) + (size_t)b0 * xstride;

    float acc[MV_ROWS * BT];
#pragma unroll
    for (int j = 0; j < MV_ROWS * BT; j++) acc[j] = 0.0f;

    for (int c0 = threadIdx.x; c0 < K4; c0 += MV_THREADS * MV_UNROLL) {
        uint2 wv[MV_UNROLL][MV_ROWS];
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++) {
            int c = c0 + u * MV_THREADS;
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) wv[u][r] = c < K4 ? __ldg(wr[r] + c) : make_uint2(0, 0);
        }
#pragma unroll
        for (int u = 0; u < MV_UNROLL; u++) {
            int c = c0 + u * MV_THREADS;
            if (c >= K4) break;
            float wf[MV_ROWS][4];
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) bf16x4_to_f32(wv[u][r], wf[r]);
#pragma unroll
            for (int b = 0; b < BT; b++) {
                if (b >= nb) break;
                float4 xa = mv_x<GATED>(xb, xstride, b, c, K4);
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
    mv_store<BT>(y, acc, n0, b0, nb, N);
}

template <int BT>
__global__ void __launch_bounds__(MV_THREADS)
matvec_bf16_vec(float *__restrict__ y,          /* (B, N) */
                const float *__restrict__ x,    /* (B, K) */
                const uint16_t *__restrict__ w, /* (N, K) bf16 */
                int B, int N, int K) {
    mv_vec_body<BT, false>(y, x, w, B, N, K);
}

template <int BT>
__global__ void __launch_bounds__(MV_THREADS)
matvec_bf16_gated(float *__restrict__ y,          /* (B, N) */
                  const float *__restrict__ u,    /* (B, 2K): gate | up */
                  const uint16_t *__restrict__ w, /* (N, K) bf16 */
                  int B, int N, int K) {
    mv_vec_body<BT, true>(y, u, w, B, N, K);
}

/* Any K and alignment: one element at a time. Grid (ceil(N / MV_ROWS),
 * ceil(B / CU_MATVEC_BATCH_TILE)). */
__global__ void __launch_bounds__(MV_THREADS)
matvec_bf16_scalar(float *__restrict__ y,          /* (B, N) */
                   const float *__restrict__ x,    /* (B, K) */
                   const uint16_t *__restrict__ w, /* (N, K) bf16 */
                   int B, int N, int K) {
    constexpr int BT = CU_MATVEC_BATCH_TILE;
    const int n0 = blockIdx.x * MV_ROWS;
    const int b0 = blockIdx.y * BT;
    const int nb = min(BT, B - b0);
    float acc[MV_ROWS * BT];
#pragma unroll
    for (int j = 0; j < MV_ROWS * BT; j++) acc[j] = 0.0f;
    for (int k = threadIdx.x; k < K; k += MV_THREADS) {
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            float wf = __uint_as_float((uint32_t)w[(size_t)min(n0 + r, N - 1) * K + k] << 16);
#pragma unroll
            for (int b = 0; b < BT; b++)
                if (b < nb) acc[r * BT + b] = fmaf(wf, x[(size_t)(b0 + b) * K + k], acc[r * BT + b]);
        }
    }
    mv_store<BT>(y, acc, n0, b0, nb, N);
}

template <int BT>
static void launch_vec(float *y, const float *x, const uint16_t *w, int B, int N, int K, cudaStream_t stream) {
    dim3 grid((unsigned)((N + MV_ROWS - 1) / MV_ROWS), (unsigned)((B + BT - 1) / BT));
    matvec_bf16_vec<BT><<<grid, MV_THREADS, 0, stream>>>(y, x, w, B, N, K);
}

template <int BT>
static void launch_gated(float *y, const float *u, const uint16_t *w, int B, int N, int K, cudaStream_t stream) {
    dim3 grid((unsigned)((N + MV_ROWS - 1) / MV_ROWS), (unsigned)((B + BT - 1) / BT));
    matvec_bf16_gated<BT><<<grid, MV_THREADS, 0, stream>>>(y, u, w, B, N, K);
}

extern "C" int cu_matvec_gated_ok(const float *u, const uint16_t *w, int K) {
    return K % 8 == 0 && ((uintptr_t)u % 16) == 0 && ((uintptr_t)w % 16) == 0;
}

extern "C" cudaError_t cu_matvec_bf16_gated(float *y, const float *u, const uint16_t *w, int B, int N, int K,
                                            cudaStream_t stream) {
    if (B < 0 || N < 0 || K < 0 || (B + CU_MATVEC_BATCH_TILE - 1) / CU_MATVEC_BATCH_TILE > 65535 ||
        !cu_matvec_gated_ok(u, w, K))
        return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    if (B == 1) launch_gated<1>(y, u, w, B, N, K, stream);
    else if (B == 2) launch_gated<2>(y, u, w, B, N, K, stream);
    else if (B <= 4) launch_gated<4>(y, u, w, B, N, K, stream);
    else launch_gated<CU_MATVEC_BATCH_TILE>(y, u, w, B, N, K, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_matvec_bf16(float *y, const float *x, const uint16_t *w, int B, int N, int K,
                                      cudaStream_t stream) {
    if (B < 0 || N < 0 || K < 0 || (B + CU_MATVEC_BATCH_TILE - 1) / CU_MATVEC_BATCH_TILE > 65535)
        return cudaErrorInvalidValue;
    if (B == 0 || N == 0) return cudaSuccess;
    int aligned = K % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 16) == 0;
    if (!aligned) {
        dim3 grid((unsigned)((N + MV_ROWS - 1) / MV_ROWS),
                  (unsigned)((B + CU_MATVEC_BATCH_TILE - 1) / CU_MATVEC_BATCH_TILE));
        matvec_bf16_scalar<<<grid, MV_THREADS, 0, stream>>>(y, x, w, B, N, K);
    } else if (B == 1) {
        launch_vec<1>(y, x, w, B, N, K, stream);
    } else if (B == 2) {
        launch_vec<2>(y, x, w, B, N, K, stream);
    } else if (B <= 4) {
        launch_vec<4>(y, x, w, B, N, K, stream);
    } else {
        launch_vec<CU_MATVEC_BATCH_TILE>(y, x, w, B, N, K, stream);
    }
    return cudaGetLastError();
}
