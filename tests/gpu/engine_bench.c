/* engine_bench.c - engine-bench: the kernels' speed as ratios measured side
 * by side in one run (house style: achieved / ceiling, not lone times).
 *
 *  - the ceiling: cudaMemcpy device-to-device bandwidth, (read + write
 *    bytes) / time, on a buffer far larger than L2;
 *  - cu_matvec_bf16 on the 7B's shapes at batch 1, 4, 8, 16, 64: bytes read
 *    (W, x) and written (y) per second, as a ratio to the ceiling, and its
 *    time as a ratio to cuBLAS (cublasGemmEx, bf16 x bf16 -> f32, the same
 *    shape); W is rotated over enough copies to exceed L2 four times, so
 *    every launch reads W from HBM as a model step would. One shape is
 *    ffn linear_out with N and K swapped (the same bytes of W, K = 4096
 *    against 11264), and a second table times the scalar fallback (W one
 *    element off) against the vector path: the figures docs/cuda.md ("What
 *    the first GPU run must measure") asks for; a third table times the
 *    matvec with the RMSNorm folded in (cu_fuse) against the plain one and
 *    against the two launches it replaces;
 *  - cu_samp_topk_rows: time per call for the text (32000, k 25; and top-k
 *    off, k 0) and audio (2048, k 250) rows, batch 1 and 8, and the time of
 *    its C twin (the CPU sampler, samp_topk_rows, one thread) on the same
 *    rows as a ratio.
 * Times are means over back-to-back launches timed with CUDA events.
 * Prints markdown tables (docs/benchmarks.md). Without a device it prints
 * "no CUDA device: skipped" and exits 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CU_CHECK_CUBLAS
#include <cublas_v2.h>

#include "cu_check.h"
#include "cu_kern.h"
#include "gpu_util.h"
#include "samp.h"

#define BENCH_ITERS 50        /* timed launches per measurement */
#define BENCH_MAX_WCOPIES 64  /* W copies rotated to defeat L2 */
#define BENCH_COPY_BYTES ((size_t)1 << 30)
#define BENCH_CPU_ITERS 20    /* timed calls of a CPU twin */
#define BENCH_MAX_B 64        /* the largest batch timed */

static cudaEvent_t ev0, ev1;

static void tic(void) {
    CU_CHECK_FATAL(cudaEventRecord(ev0, 0));
}

/* toc: mean milliseconds per iteration since tic. */
static double toc(int iters) {
    CU_CHECK_FATAL(cudaEventRecord(ev1, 0));
    CU_CHECK_FATAL(cudaEventSynchronize(ev1));
    float ms = 0.0f;
    CU_CHECK_FATAL(cudaEventElapsedTime(&ms, ev0, ev1));
    return ms / iters;
}

/* Copies of a W of wbytes, enough to exceed L2 four times (at most
 * BENCH_MAX_WCOPIES), filled with bf16 0x3C3C (a finite value); their
 * number to *copies. */
static uint16_t *bench_weights(size_t wbytes, size_t l2_bytes, int *copies) {
    int n = (int)((4 * l2_bytes + wbytes - 1) / wbytes);
    if (n < 1) n = 1;
    if (n > BENCH_MAX_WCOPIES) n = BENCH_MAX_WCOPIES;
    uint16_t *w = gu_dalloc(wbytes * n);
    CU_CHECK_FATAL(cudaMemset(w, 0x3C, wbytes * n));
    *copies = n;
    return w;
}

/* Device-to-device copy bandwidth, GB/s counting read + write. */
static double copy_gbps(void) {
    size_t half = BENCH_COPY_BYTES / 2;
    char *buf = gu_dalloc(BENCH_COPY_BYTES);
    CU_CHECK_FATAL(cudaMemcpy(buf + half, buf, half, cudaMemcpyDeviceToDevice));   /* warm-up */
    const int iters = 20;
    tic();
    for (int i = 0; i < iters; i++) CU_CHECK_FATAL(cudaMemcpyAsync(buf + half, buf, half, cudaMemcpyDeviceToDevice, 0));
    double ms = toc(iters);
    gu_dfree(buf);
    return 2.0 * (double)half / (ms * 1e6);
}

static void bench_matvec(double ceiling, cublasHandle_t h, size_t l2_bytes) {
    static const struct { const char *what; int N, K; } shapes[] = {
        {"attn in_proj", 12288, 4096},  {"attn out_proj", 4096, 4096}, {"ffn linear_in", 22528, 4096},
        {"ffn linear_out", 4096, 11264}, {"text_linear", 32000, 4096},  {"depformer in_proj", 3072, 1024},
        {"depformer linear_out", 1024, 2816}, {"linear_out, N and K swapped", 11264, 4096},
    };
    static const int batches[] = {1, 4, 8, 16, BENCH_MAX_B};
    printf("\n| matvec (bf16 W) | B | N x K | time us | GB/s | / D2D copy | cuBLAS us | / cuBLAS time |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s].N, K = shapes[s].K;
        size_t wbytes = (size_t)N * K * 2;
        int copies;
        uint16_t *w = bench_weights(wbytes, l2_bytes, &copies);
        float *x = gu_dalloc((size_t)BENCH_MAX_B * K * sizeof(float));
        float *y = gu_dalloc((size_t)BENCH_MAX_B * N * sizeof(float));
        uint16_t *xb = gu_dalloc((size_t)BENCH_MAX_B * K * 2);
        CU_CHECK_FATAL(cudaMemset(x, 0, (size_t)BENCH_MAX_B * K * sizeof(float)));
        CU_CHECK_FATAL(cudaMemset(xb, 0, (size_t)BENCH_MAX_B * K * 2));
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            int B = batches[bi];
            CU_CHECK_FATAL(cu_matvec_bf16(y, x, w, B, N, K, 0));   /* warm-up */
            tic();
            for (int i = 0; i < BENCH_ITERS; i++)
                CU_CHECK_FATAL(cu_matvec_bf16(y, x, w + (size_t)(i % copies) * N * K, B, N, K, 0));
            double ms = toc(BENCH_ITERS);
            double bytes = (double)wbytes + (double)B * K * 4 + (double)B * N * 4;
            double gbps = bytes / (ms * 1e6);
            /* cuBLAS: y^T (N, B) = W (N, K) . x^T (K, B) in column-major terms */
            const float one = 1.0f, zero = 0.0f;
            CUBLAS_CHECK_FATAL(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one, w, CUDA_R_16BF, K, xb,
                                            CUDA_R_16BF, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
            tic();
            for (int i = 0; i < BENCH_ITERS; i++)
                CUBLAS_CHECK_FATAL(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one,
                                                w + (size_t)(i % copies) * N * K, CUDA_R_16BF, K, xb, CUDA_R_16BF,
                                                K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            double cms = toc(BENCH_ITERS);
            printf("| %s | %d | %d x %d | %.1f | %.0f | %.2f | %.1f | %.2f |\n", shapes[s].what, B, N, K, ms * 1e3,
                   gbps, gbps / ceiling, cms * 1e3, cms / ms);
        }
        gu_dfree(w); gu_dfree(x); gu_dfree(y); gu_dfree(xb);
    }
}

/* The scalar fallback (W one bf16 element off: no 16-byte loads) against
 * the vector path on attn out_proj, as a ratio of times. */
static void bench_matvec_scalar(size_t l2_bytes) {
    const int N = 4096, K = 4096;
    size_t welems = (size_t)N * K + 8, wbytes = welems * 2;   /* + 8: room for the offset */
    int copies;
    uint16_t *w = bench_weights(wbytes, l2_bytes, &copies);
    float *x = gu_dalloc((size_t)8 * K * sizeof(float)), *y = gu_dalloc((size_t)8 * N * sizeof(float));
    CU_CHECK_FATAL(cudaMemset(x, 0, (size_t)8 * K * sizeof(float)));
    printf("\n| matvec path (attn out_proj) | B | vector us | scalar us (W + 1 element) | scalar / vector time |\n");
    printf("|---|---|---|---|---|\n");
    static const int batches[] = {1, 8};
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        int B = batches[bi];
        double ms[2];
        for (int off = 0; off < 2; off++) {
            CU_CHECK_FATAL(cu_matvec_bf16(y, x, w + off, B, N, K, 0));   /* warm-up */
            tic();
            for (int i = 0; i < BENCH_ITERS; i++)
                CU_CHECK_FATAL(cu_matvec_bf16(y, x, w + (size_t)(i % copies) * welems + off, B, N, K, 0));
            ms[off] = toc(BENCH_ITERS);
        }
        printf("| attn out_proj | %d | %.1f | %.1f | %.2f |\n", B, ms[0] * 1e3, ms[1] * 1e3, ms[1] / ms[0]);
    }
    gu_dfree(w); gu_dfree(x); gu_dfree(y);
}

/* The norm folded into the product (cu_fuse, cuda/cu_kern.h): the fused
 * matvec (each block sums its rows' squares itself, then reads x * (alpha *
 * inv)) against the plain matvec and against the two launches it replaces
 * (cu_rmsnorm, then the plain matvec), as ratios of times: whether the
 * prologue's re-reads of x and alpha (from L1/L2, every block the same
 * rows) cost more than the node they save (docs/cuda.md). */
static void bench_matvec_norm(size_t l2_bytes) {
    static const struct { const char *what; int N, K; } shapes[] = {
        {"attn in_proj", 12288, 4096}, {"ffn linear_in", 22528, 4096}, {"depformer in_proj", 3072, 1024},
    };
    static const int batches[] = {1, 8};
    printf("\n| matvec with the norm folded | B | N x K | plain us | fused us | fused / plain | rmsnorm + plain us | "
           "fused / (rmsnorm + plain) |\n|---|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s].N, K = shapes[s].K;
        size_t wbytes = (size_t)N * K * 2;
        int copies;
        uint16_t *w = bench_weights(wbytes, l2_bytes, &copies);
        float *x = gu_dalloc((size_t)8 * K * sizeof(float)), *xn = gu_dalloc((size_t)8 * K * sizeof(float));
        float *a = gu_dalloc((size_t)K * sizeof(float)), *y = gu_dalloc((size_t)8 * N * sizeof(float));
        CU_CHECK_FATAL(cudaMemset(x, 0x3C, (size_t)8 * K * sizeof(float)));   /* finite floats */
        CU_CHECK_FATAL(cudaMemset(a, 0x3C, (size_t)K * sizeof(float)));
        const cu_fuse f = {.norm = a, .eps = 1e-8f};
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            int B = batches[bi];
            double ms[3];
            for (int v = 0; v < 3; v++) {
                for (int i = 0; i <= BENCH_ITERS; i++) {   /* launch 0: the warm-up */
                    if (i == 1) tic();
                    const uint16_t *wi = w + (size_t)(i % copies) * N * K;
                    if (v == 0) {
                        CU_CHECK_FATAL(cu_matvec_bf16(y, x, wi, B, N, K, 0));
                    } else if (v == 1) {
                        CU_CHECK_FATAL(cu_matvec_bf16_fused(y, x, wi, B, N, K, &f, 0));
                    } else {
                        CU_CHECK_FATAL(cu_rmsnorm(xn, x, a, B, K, 1e-8f, 0));
                        CU_CHECK_FATAL(cu_matvec_bf16(y, xn, wi, B, N, K, 0));
                    }
                }
                ms[v] = toc(BENCH_ITERS);
            }
            printf("| %s | %d | %d x %d | %.1f | %.1f | %.2f | %.1f | %.2f |\n", shapes[s].what, B, N, K, ms[0] * 1e3,
                   ms[1] * 1e3, ms[1] / ms[0], ms[2] * 1e3, ms[1] / ms[2]);
        }
        gu_dfree(w); gu_dfree(x); gu_dfree(xn); gu_dfree(a); gu_dfree(y);
    }
}

/* Wall-clock seconds (CLOCK_MONOTONIC), for the CPU twins. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void bench_sample(void) {
    static const struct { const char *what; int N, k; float t; } rows[] = {
        {"text", 32000, 25, 0.7f}, {"text, top-k off", 32000, 0, 0.7f}, {"audio", 2048, 250, 0.8f},
        {"text greedy", 32000, 0, 0.0f},
    };
    static const int batches[] = {1, 8};
    printf("\n| sampler | B | N | k | T | GPU us per call | CPU twin us | CPU / GPU |\n|---|---|---|---|---|---|---|---|\n");
    gu_rng r = {42};
    for (size_t s = 0; s < sizeof rows / sizeof rows[0]; s++) {
        int N = rows[s].N;
        size_t n = (size_t)8 * N;
        float *l = malloc(n * sizeof *l);
        for (size_t i = 0; i < n; i++) l[i] = (float)(3.0 * gu_normal(&r));
        samp_row p[8];
        for (int b = 0; b < 8; b++) p[b] = (samp_row){.seed = 1 + (uint64_t)b, .step = 0, .temp = rows[s].t, .topk = rows[s].k};
        float *dl = gu_dalloc(n * sizeof *l);
        samp_row *dp = gu_dalloc(sizeof p);
        int32_t *dout = gu_dalloc(8 * sizeof(int32_t)), hout[8];
        int *scratch = malloc((size_t)N * sizeof *scratch);
        gu_h2d(dl, l, n * sizeof *l);
        gu_h2d(dp, p, sizeof p);
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            int B = batches[bi];
            CU_CHECK_FATAL(cu_samp_topk_rows(dout, dl, dp, B, N, SAMP_STREAM_AUDIO(0), 0));
            tic();
            for (int i = 0; i < BENCH_ITERS; i++)
                CU_CHECK_FATAL(cu_samp_topk_rows(dout, dl, dp, B, N, SAMP_STREAM_AUDIO(0), 0));
            double ms = toc(BENCH_ITERS);
            double t0 = now_s();
            for (int i = 0; i < BENCH_CPU_ITERS; i++) samp_topk_rows(hout, l, p, B, N, SAMP_STREAM_AUDIO(0), scratch);
            double cms = (now_s() - t0) * 1e3 / BENCH_CPU_ITERS;
            printf("| %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f |\n", rows[s].what, B, N, rows[s].k, rows[s].t,
                   ms * 1e3, cms * 1e3, cms / ms);
        }
        gu_dfree(dl); gu_dfree(dp); gu_dfree(dout);
        free(l); free(scratch);
    }
}

int main(void) {
    char why[512];
    if (gu_devices(why, sizeof why) == 0) {
        printf("%s: skipped\n", why);
        return 0;
    }
    struct cudaDeviceProp p;
    CU_CHECK_FATAL(cudaGetDeviceProperties(&p, 0));
    CU_CHECK_FATAL(cudaEventCreate(&ev0));
    CU_CHECK_FATAL(cudaEventCreate(&ev1));
    cublasHandle_t h;
    CUBLAS_CHECK_FATAL(cublasCreate(&h));
    double ceiling = copy_gbps();
    printf("device 0: %s sm_%d%d, %d SMs, L2 %d MiB; cudaMemcpy D2D %.0f GB/s (read + write)\n", p.name, p.major,
           p.minor, p.multiProcessorCount, p.l2CacheSize >> 20, ceiling);
    bench_matvec(ceiling, h, (size_t)p.l2CacheSize);
    bench_matvec_scalar((size_t)p.l2CacheSize);
    bench_matvec_norm((size_t)p.l2CacheSize);
    bench_sample();
    CUBLAS_CHECK_FATAL(cublasDestroy(h));
    return 0;
}
