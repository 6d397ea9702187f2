/* emu_blas.c - plain C stand-ins for the cuBLAS entries the project calls
 * (include/cublas_api.h): a loop with cuBLAS's arguments, the compute
 * type's rounding of the inputs and f32 accumulation. They are not fast and
 * not cuBLAS's kernels, but like them they sum in an order that depends on
 * the shape (gemm_order below: k-tiles and split-K chosen from m, n and k as
 * a device's heuristics do), so a result that changes with the batch size
 * on a device changes here too. They check what a device would fault on:
 * every element read or written must lie in a live device buffer, and every
 * element read must have been written. Enqueued in stream order, so a call
 * on a capturing stream becomes a graph node; such a call is refused
 * (CUBLAS_STATUS_NOT_SUPPORTED) unless the handle has a workspace of its
 * own (cublasSetWorkspace after the last cublasSetStream, which resets it),
 * as the cuBLAS guide's "CUDA Graphs Support" asks (docs/cuda.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>

#include "emu_int.h"

#define MAGIC_BLAS 0x424C4153u

struct cublasContext {
    unsigned magic;
    cudaStream_t stream;
    void *ws;         /* the user workspace (cublasSetWorkspace), or NULL: the library's default pool */
    size_t ws_bytes;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    struct cublasContext *c = calloc(1, sizeof *c);
    if (!c) return CUBLAS_STATUS_ALLOC_FAILED;
    c->magic = MAGIC_BLAS;
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h || h->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h || h->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    h->ws = NULL;   /* cublasSetStream resets the workspace to the default pool (cuBLAS guide, cublasSetStream) */
    h->ws_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    if (!h || h->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasSetWorkspace: the stand-in needs no workspace; it checks that the
 * buffer is live device memory of the size given, as a device would use it
 * (a graph captured with a freed or short workspace fails on a GPU). */
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes) {
    if (!h || h->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->ws = NULL;
    h->ws_bytes = 0;
    if (bytes == 0) return CUBLAS_STATUS_SUCCESS;
    int span = 0;
    emu_alloc *a = emu_alloc_at(workspace, bytes, &span);
    if (!workspace || !a || !span || a->freed || a->kind != EMU_A_DEVICE) {
        emu_note("cublasSetWorkspace(%p, %zu): not a live device buffer of that size", workspace, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((uintptr_t)workspace % 256) {   /* the guide: at least 256-byte alignment */
        emu_note("cublasSetWorkspace(%p): not 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->ws = workspace;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

#define STATUSES(X)                                                           \
    X(CUBLAS_STATUS_SUCCESS, "success")                                       \
    X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")       \
    X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")           \
    X(CUBLAS_STATUS_INVALID_VALUE, "an invalid numeric value was used as an argument") \
    X(CUBLAS_STATUS_ARCH_MISMATCH, "an absent device architectural feature is required") \
    X(CUBLAS_STATUS_MAPPING_ERROR, "an access to GPU memory space failed")    \
    X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute")    \
    X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")           \
    X(CUBLAS_STATUS_NOT_SUPPORTED, "the functionality requested is not supported")

const char *cublasGetStatusName(cublasStatus_t s) {
#define N_(c, t) \
    if (s == c) return #c;
    STATUSES(N_)
#undef N_
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s) {
#define S_(c, t) \
    if (s == c) return t;
    STATUSES(S_)
#undef S_
    return "unknown error";
}

/* ---- GemmEx -------------------------------------------------------------------------- */

typedef struct gemm_args {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType at, bt, ct;
    int lda, ldb, ldc;
    cublasComputeType_t compute;
} gemm_args;

static float bf16_round(float f) {   /* to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return f;
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

static float tf32_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return f;
    u = (u + 0xFFFu + ((u >> 13) & 1u)) & 0xFFFFE000u;
    memcpy(&f, &u, 4);
    return f;
}

static size_t esize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float load(const void *p, size_t i, cudaDataType t, cublasComputeType_t c) {
    float f;
    if (t == CUDA_R_16BF) {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        memcpy(&f, &u, 4);
        return f;
    }
    f = ((const float *)p)[i];
    return c == CUBLAS_COMPUTE_32F_FAST_16BF ? bf16_round(f) : c == CUBLAS_COMPUTE_32F_FAST_TF32 ? tf32_round(f) : f;
}

/* Check the rows x cols column-major operand at p (ld) the way a kernel's
 * accesses are checked; read: must be written; write: marks written.
 * Returns 0, or -1 after recording a fault. */
static int operand(const char *name, const void *p, int rows, int cols, int ld, cudaDataType t, int read, int write) {
    const size_t es = esize(t);
    for (int c = 0; c < cols; c++) {
        const char *col = (const char *)p + (size_t)c * (size_t)ld * es;
        size_t n = (size_t)rows * es;
        int span = 0;
        emu_alloc *a = emu_alloc_at(col, n, &span);
        if (!a || a->freed || !span) {
            emu_fault_note(a && a->freed ? EMU_FAULT_FREED : EMU_FAULT_OOB, NULL,
                           "cublasGemmEx: column %d of %s (%p, %zu bytes) is %s", c, name, (const void *)col, n,
                           !a ? "not in a device buffer" : a->freed ? "in a freed buffer" : "past the end of its buffer");
            return -1;
        }
        if (!a->shadow) continue;
        unsigned char *sh = a->shadow + (col - a->ptr);
        if (read)
            for (size_t i = 0; i < n; i++)
                if (!sh[i]) {
                    emu_fault_note(EMU_FAULT_UNINIT_GLOBAL, NULL,
                                   "cublasGemmEx: %s element (%zu, %d) was never written", name, i / es, c);
                    return -1;
                }
        if (write) memset(sh, 1, n);
    }
    return 0;
}

/* The summation order of one output element, from the shape alone (as a
 * device's kernel choice is): the depth k is cut into splits (split-K: used
 * when the output has too few 128 x 128 tiles to fill the H200's 132 SMs and
 * each split keeps at least 256 of k), each split summed k-tile by k-tile
 * (64 deep for outputs under 4096 elements, else 32), a tile's products
 * accumulated in order from zero and added to its split's sum; the splits'
 * sums added in order. So the same row of A and B gives bits that depend on
 * m, n and k, as on a device. */
typedef struct gemm_order { int splits, ktile; } gemm_order;

static gemm_order gemm_order_of(int m, int n, int k) {
    gemm_order o = {1, (long)m * n < 4096 ? 64 : 32};
    long tiles = (long)((m + 127) / 128) * ((n + 127) / 128);
    while (o.splits < 16 && tiles * o.splits * 2 <= 132 && k / (o.splits * 2) >= 256) o.splits *= 2;
    return o;
}

static void gemm_run(const void *arg) {
    const gemm_args *g = arg;
    /* counted when it runs, not when it is called: a graph replay counts its GEMMs */
    emu_traffic_gemm(g->m, g->n, g->k, g->at == CUDA_R_16BF ? 2 : 4, g->bt == CUDA_R_16BF ? 2 : 4,
                     g->ct == CUDA_R_16BF ? 2 : 4, g->beta != 0.0f);
    if (emu_traffic_stride() > 1) return;   /* the model prices it from its shape */
    snprintf(emu_g.kname, sizeof emu_g.kname, "cublasGemmEx (emulator stand-in)");
    memset(&emu_g.bidx, 0, sizeof emu_g.bidx);   /* faults here have no block or thread */
    const int ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
    const int br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
    if (operand("A", g->A, ar, ac, g->lda, g->at, 1, 0) || operand("B", g->B, br, bc, g->ldb, g->bt, 1, 0) ||
        operand("C", g->C, g->m, g->n, g->ldc, g->ct, g->beta != 0.0f, 0))
        return;
    const gemm_order o = gemm_order_of(g->m, g->n, g->k);
    const int per = (g->k + o.splits - 1) / o.splits;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            float acc = 0.0f;
            for (int s0 = 0; s0 < g->k; s0 += per) {
                const int s1 = s0 + per < g->k ? s0 + per : g->k;
                float split = 0.0f;
                for (int t0 = s0; t0 < s1; t0 += o.ktile) {
                    const int t1 = t0 + o.ktile < s1 ? t0 + o.ktile : s1;
                    float tile = 0.0f;
                    for (int l = t0; l < t1; l++) {
                        size_t ia = g->ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * g->lda
                                                         : (size_t)l + (size_t)i * g->lda;
                        size_t ib = g->tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * g->ldb
                                                         : (size_t)j + (size_t)l * g->ldb;
                        tile = fmaf(load(g->A, ia, g->at, g->compute), load(g->B, ib, g->bt, g->compute), tile);
                    }
                    split += tile;
                }
                acc += split;
            }
            size_t ic = (size_t)i + (size_t)j * g->ldc;
            float c = g->alpha * acc;
            if (g->beta != 0.0f) c = fmaf(g->beta, load(g->C, ic, g->ct, CUBLAS_COMPUTE_32F), c);
            if (g->ct == CUDA_R_32F) {
                ((float *)g->C)[ic] = c;
            } else {
                float r = bf16_round(c);
                uint32_t u;
                memcpy(&u, &r, 4);
                ((uint16_t *)g->C)[ic] = (uint16_t)(u >> 16);
            }
        }
    operand("C", g->C, g->m, g->n, g->ldc, g->ct, 0, 1);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h || h->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ok_t = (at == CUDA_R_16BF || at == CUDA_R_32F) && (bt == CUDA_R_16BF || bt == CUDA_R_32F) &&
               (ct == CUDA_R_32F || ct == CUDA_R_16BF);
    int ok_c = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
               compute == CUBLAS_COMPUTE_32F_FAST_16BF || compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (!ok_t || !ok_c || ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
    const int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1) ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(h->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone && !h->ws) {
        emu_note("cublasGemmEx captured into a graph without a workspace of its own: call cublasSetWorkspace after "
                 "cublasSetStream (the cuBLAS guide, \"CUDA Graphs Support\")");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    gemm_args g = {ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, A, B, C, at, bt, ct,
                   lda, ldb, ldc, compute};
    cudaError_t e = emu_enqueue_host(h->stream, gemm_run, &g, sizeof g);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
