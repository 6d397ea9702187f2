/* gpu_model.c - gpu-model: the H200 performance model of the LM step,
 * from the emulator's traffic accounting (tests/gpu/emu/emu_traffic.c).
 * Built against the emulator only (`make gpu-model`); predictions, never
 * measurements: docs/cuda.md, "The performance model".
 *
 * What runs: the launches of one LM step (cuda/cu_backend.c's
 * enqueue_step, temporal() and dep_substep(), in the same order with the
 * same launchers and arguments) at the released 7B's geometry, on buffers
 * of the real shapes, for batches 1, 8 and 64 at positions 0 and 3000.
 * Not the whole step: one representative of each repeated part, its
 * counts multiplied by how often the step repeats it:
 *   - the temporal layer: 32 times;
 *   - the depformer layer: 6 layers x dep_q (8) sub-steps, run at sub-step
 *     4 (its attention over 5 sub-steps; the others differ by a few rows);
 *     its norms and residual adds are folded into its products, as the
 *     temporal layer's (cu_fuse), and its attention into the output
 *     projection below 16 rows, so nothing runs between two layers;
 *   - the depformer sub-step's own launches (the head, the sampler with
 *     the feed-back writing the next sub-step's input): 8 times; its 8
 *     input projections, one launch, are counted once with the text head;
 *   - RoPE with its K/V written to the ring and the attention over the
 *     ring (a step's pair: cu_kv_store is a prefill chunk's only) at 2
 *     rows (slots 0 and 1) scaled to B: their blocks are per row and
 *     alike, and 64 rings of 3000 positions would need 3 GB of emulated
 *     memory. They run unsampled: the attention's last block of a row and
 *     head combines the splits, which never happens when only 1 block in
 *     16 runs (the counter never reaches the row's splits), so its combine
 *     would go uncounted.
 * The other blocks are sampled (every EMU_MODEL_STRIDE-th of each grid;
 * counts scaled), so the emulated memory holds whatever it holds:
 * traffic, not values, is measured (the sampler's data-dependent passes
 * see zeros).
 * The products below CU_GEMM_MIN_ROWS (16) rows are the matvec kernel,
 * measured; from 16 rows they are cuBLAS GEMMs, priced from their shapes.
 *
 * Model (per launch): time = max(DRAM bytes / (HBM peak x fraction),
 * FLOPs / tensor peak (GEMMs only)) + one graph kernel node's cost. DRAM
 * bytes are the emulator's distinct sectors per buffer and launch (see
 * emu_traffic.c). The floor of a step: the bytes it must read (every
 * weight matrix it uses once, the K/V of every row's window) at the HBM
 * peak, nothing else. Constants and their sources: docs/cuda.md.
 *
 * The codec (cuda/cu_mimi.c) at the official Mimi configuration with
 * random weights, the same sampling: one frame encoded and decoded for
 * 1, 8 and 64 slots from a fresh state, then its transformer attention
 * alone at a full context (the steady state: every ring row valid),
 * replacing the fresh state's. Priced by its bytes only: the codec's
 * direct float32 convolutions are bound by arithmetic, which the emulator
 * does not count, so its lines are lower bounds (docs/cuda.md).
 *
 * Output: per (batch, position), one line per kernel
 *   kernel NAME bytes N sector_efficiency R predicted_us T
 * (GEMM rows: sector_efficiency -, not measured), then the step's
 * prediction; then the codec's lines per slot count (GPU_MODEL_NO_CODEC
 * set: skipped; 2 of the 3 minutes; GPU_MODEL_NO_LM set: the LM's points
 * skipped, their figures 0); last, exactly one line
 *   predicted H200 step: B=1 pos=0 X ms (floor Y ms); B=64 pos=3000 X ms (floor Y ms)
 * The 8-bit schemes (int8 weights and int8 K/V, both at once: the
 * backend's int8 launches, cu_matvec_q8 below 16 rows, the rows widened to
 * bf16 chunk by chunk into a GEMM above, the int8 attention) at B=1 and
 * B=128, position 3000, print their tables after the bf16 points and one
 * line before the codec's:
 *   predicted H200 8-bit step (int8 weights and K/V): B=1 pos=3000 X ms (floor Y ms); B=128 pos=3000 X ms (floor Y ms)
 * Exit 0, or 1 when a launch failed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#define CU_CHECK_CUBLAS
#include "cu_check.h"
#include "cu_kern.h"
#include "emu.h"
#include "cu_mimi.h"
#include "lm.h"   /* LM_NORM_EPS */
#include "mimi.h"
#include "lm_config.h"

/* ---- the H200 (docs/cuda.md, "The performance model", for sources) ------------------- */
#define H200_HBM_BPS 4.8e12           /* HBM3e peak, bytes/s */
#define H200_HBM_FRACTION 0.85        /* achievable share of it on streaming reads */
#define H200_BF16_FLOPS 989e12        /* dense bf16 tensor-core peak, FLOP/s */
#define H200_GEMM_FRACTION 0.7        /* of it a cuBLAS GEMM of these shapes reaches */
#define H200_NODE_US 1.3              /* one kernel node of a graph replay: an empty kernel on an H100
                                       * under CUDA graphs (Hazy Research, 2025; docs/cuda.md) */

/* ---- the released 7B (spec/moshi-lm.md section 2; lm-bench --shape 7b) ------------------ */
#define M_DIM 4096
#define M_HEADS 32
#define M_LAYERS 32
#define M_TEXT 32000
#define M_CARD 2048
#define M_NQ 16
#define M_DEPQ 8
#define M_DDIM 1024
#define M_DHEADS 16
#define M_DLAYERS 6
#define M_DFF 4224
#define M_CTX 3000
#define M_GEMM_MIN_ROWS 16            /* cuda/cu_backend.c CU_GEMM_MIN_ROWS */
#define M_ATT_ROWS 2                  /* rows the attention runs at (scaled to B) */
#define M_DEP_K 4                     /* the depformer sub-step run */
#define EMU_MODEL_STRIDE 16           /* blocks sampled: one in this many */
#define EMU_CODEC_STRIDE 64           /* the codec's (its grids are larger, its kernels slower here) */
#define M_MAX_ROWS 128
#define M_Q8_SCRATCH ((size_t)16 << 20)   /* cuda/cu_backend.c CU_Q8_SCRATCH: bf16 elements */
#define M_TABLE 64

typedef struct mrow {
    char name[EMU_NAME_LEN];
    double bytes, gl_bytes, gl_sectors, launches, us, flops;
    int gemm;
} mrow;

static mrow table[M_TABLE];
static int ntable;

/* The table row of a kernel (GEMMs share one row per call site shape). */
static mrow *row_of(const char *name) {
    for (int i = 0; i < ntable; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    if (ntable == M_TABLE) {
        fprintf(stderr, "gpu-model: M_TABLE too small\n");
        exit(1);
    }
    mrow *r = &table[ntable++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* The emulator's rows of what ran since the last call into the table:
 * launches times nmult (how often the step repeats them), traffic times
 * mult (nmult, times the rows a part ran for when it ran for fewer). */
static void collect(double nmult, double mult) {
    emu_traffic t[M_TABLE];
    int n = emu_traffic_get(t, M_TABLE);
    emu_traffic_reset();
    for (int i = 0; i < n; i++) {
        int gemm = t[i].gemm_m > 0;
        mrow *r = row_of(gemm ? "cublasGemmEx" : t[i].kernel);
        double launches = (double)t[i].launches * nmult, bytes = t[i].dram_bytes * mult;
        r->gemm = gemm;
        r->launches += launches;
        r->bytes += bytes;
        r->gl_bytes += t[i].gl_bytes * mult;
        r->gl_sectors += t[i].gl_sectors * mult;
        r->flops += t[i].gemm_flops * mult;
        /* per launch: the longer of the bytes and (GEMMs) the FLOPs, plus a node */
        double per_bytes = bytes / launches;
        double per_flops = gemm ? t[i].gemm_flops * mult / launches : 0.0;
        double us = fmax(per_bytes / (H200_HBM_BPS * H200_HBM_FRACTION),
                         per_flops / (H200_BF16_FLOPS * H200_GEMM_FRACTION)) * 1e6 + H200_NODE_US;
        r->us += us * launches;
    }
}

/* ---- buffers of one step ------------------------------------------------------------------- */

typedef struct mbuf {
    /* weights (bf16): one temporal layer, the text head, one depformer layer, the sub-step's */
    uint16_t *attn_in, *attn_out, *ffn_in, *ffn_out, *text_linear, *emb, *text_emb;
    uint16_t *d_attn_in, *d_attn_out, *d_ffn_in, *d_ffn_out, *dep_in, *dep_emb, *linear;
    float *norm, *dnorm;
    /* K/V: M_ATT_ROWS slots of a (2, ctx, D) ring; the attention's (rows, heads) counters */
    uint16_t *ring;
    unsigned *att_count;
    /* activations */
    float *x, *qkv, *att, *o, *u, *h, *part, *tlog, *alog;
    uint16_t *xb;
    float *dy, *dinp, *dqkv, *datt, *dout, *du, *dh, *dk, *dv;
    int32_t *tok, *slot, *out, *prev, *tgt, *dsteps;
    int64_t *pos;
    samp_row *rows;
    /* the 8-bit schemes: the GEMM path's bf16 scratch. The weight buffers
     * hold int8 rows then (at the next 256 bytes) their scales in the same
     * allocations, the ring the int8 layout (cu_kv_q8_layer_bytes). */
    uint16_t *wdq;
} mbuf;

static int g_q8;   /* 1: the step runs int8 weights and int8 K/V */

static const float *w8s(const uint16_t *w, int N, int K) {   /* cuda/cu_backend.c w8_scales */
    return (const float *)((const unsigned char *)w + (((size_t)N * K + 255) & ~(size_t)255));
}

static void *dz(size_t bytes) {   /* device buffer, zeroed */
    void *p = NULL;
    CU_CHECK_FATAL(cudaMalloc(&p, bytes ? bytes : 1));
    CU_CHECK_FATAL(cudaMemset(p, 0, bytes ? bytes : 1));
    return p;
}

static void *dw(size_t bytes) {   /* a weight: its values never matter here */
    void *p = NULL;
    CU_CHECK_FATAL(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static int g_hidden, g_dhidden;
static cublasHandle_t g_blas;

static void bufs_open(mbuf *m) {
    const size_t D = M_DIM, H = (size_t)g_hidden, dd = M_DDIM, dH = (size_t)g_dhidden, R = M_MAX_ROWS;
    const int splits = cu_attend_splits(M_CTX);
    m->attn_in = dw(2 * 3 * D * D);
    m->attn_out = dw(2 * D * D);
    m->ffn_in = dw(2 * 2 * H * D);
    m->ffn_out = dw(2 * D * H);
    m->text_linear = dw(2 * (size_t)M_TEXT * D);
    m->emb = dw(2 * (size_t)M_NQ * (M_CARD + 1) * D);
    m->text_emb = dw(2 * (size_t)(M_TEXT + 1) * D);
    m->d_attn_in = dw(2 * 3 * dd * dd);
    m->d_attn_out = dw(2 * dd * dd);
    m->d_ffn_in = dw(2 * 2 * dH * dd);
    m->d_ffn_out = dw(2 * dd * dH);
    m->dep_in = dw(2 * M_DEPQ * dd * D);   /* the dep_q input projections, 2 dd D bytes apart */
    m->dep_emb = dw(2 * (size_t)(M_CARD + 1) * dd);
    m->linear = dw(2 * (size_t)M_CARD * dd);
    m->norm = dz(4 * D);
    m->dnorm = dz(4 * dd);
    m->ring = dz(2 * (size_t)M_ATT_ROWS * 2 * M_CTX * D);
    m->att_count = dz(sizeof(unsigned) * M_ATT_ROWS * M_HEADS);
    m->x = dz(4 * R * D);
    m->qkv = dz(4 * R * 3 * D);
    m->att = dz(4 * R * D);
    m->o = dz(4 * R * D);
    m->u = dz(4 * R * 2 * H);
    m->h = dz(4 * R * H);
    m->part = dz(4 * R * M_HEADS * (size_t)splits * CU_ATT_PART_FLOATS);
    m->tlog = dz(4 * R * M_TEXT);
    m->alog = dz(4 * (size_t)M_DEPQ * R * M_CARD);
    m->xb = dz(2 * R * H);
    m->dy = dz(4 * R * dd);
    m->dinp = dz(4 * (size_t)M_DEPQ * R * dd);
    m->dqkv = dz(4 * R * 3 * dd);
    m->datt = dz(4 * R * dd);
    m->dout = dz(4 * R * dd);
    m->du = dz(4 * R * 2 * dH);
    m->dh = dz(4 * R * dH);
    m->dk = dz(4 * R * LM_MAX_DEP_Q * dd);
    m->dv = dz(4 * R * LM_MAX_DEP_Q * dd);
    m->tok = dz(4 * R * (1 + M_NQ));
    m->slot = dz(4 * R);
    m->out = dz(4 * R * (1 + M_DEPQ));
    m->prev = dz(4 * R);
    m->tgt = dz(4 * R * (1 + M_DEPQ));
    m->dsteps = dz(4 * R);
    m->pos = dz(8 * R);
    m->rows = dz(sizeof(samp_row) * R);
    m->wdq = dz(2 * M_Q8_SCRATCH);
}

/* ---- the step's parts (cuda/cu_backend.c, same launches) ------------------------------------- */

#define LT(call) CU_CHECK_FATAL(call)

/* The GEMM on m->xb (cuda/cu_backend.c gemm_xb): bf16 W, or int8 rows
 * widened a chunk at a time into m->wdq, a GEMM each, then the scales;
 * acc: y += (beta = 1; int8: the GEMMs into tmp, the scales and the add in
 * one launch). */
static void gemm_xb(mbuf *m, float *y, const uint16_t *w, int n, int N, int K, int acc, float *tmp) {
    const float one = 1.0f, zero = 0.0f;   /* the stand-in records the shape (sampling: no arithmetic) */
    if (!g_q8) {
        CUBLAS_CHECK_FATAL(cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one, w, CUDA_R_16BF, K, m->xb,
                                        CUDA_R_16BF, K, acc ? &one : &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
        return;
    }
    float *dst = acc ? tmp : y;
    int rows = (int)(M_Q8_SCRATCH / (size_t)K < (size_t)N ? M_Q8_SCRATCH / (size_t)K : (size_t)N);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        LT(cu_q8_to_bf16(m->wdq, (const int8_t *)w + (size_t)r0 * K, (size_t)nr * K, 0));
        CUBLAS_CHECK_FATAL(cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, K, &one, m->wdq, CUDA_R_16BF, K,
                                        m->xb, CUDA_R_16BF, K, &zero, dst + r0, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
    }
    if (acc) LT(cu_scale_cols_add(y, tmp, w8s(w, N, K), n, N, N, 0));
    else LT(cu_scale_cols(y, w8s(w, N, K), n, N, N, 0));
}

/* lin_f(): the matvec below M_GEMM_MIN_ROWS rows with f's fusions in its
 * launch, else the norm (or not) with the bf16 rounding + GEMM. */
static void lin_f(mbuf *m, float *y, const float *x, const uint16_t *w, int n, int N, int K, const cu_fuse *f,
                  float *tmp) {
    if (n < M_GEMM_MIN_ROWS) {
        if (g_q8) LT(cu_matvec_q8_fused(y, x, (const int8_t *)w, w8s(w, N, K), n, N, K, f, 0));
        else LT(cu_matvec_bf16_fused(y, x, w, n, N, K, f, 0));
        return;
    }
    if (f && f->norm) LT(cu_rmsnorm_bf16(m->xb, x, f->norm, n, K, f->eps, 0));
    else LT(cu_f32_to_bf16(m->xb, x, (size_t)n * K, 0));
    gemm_xb(m, y, w, n, N, K, f && f->acc, tmp);
}

static void lin(mbuf *m, float *y, const float *x, const uint16_t *w, int n, int N, int K) {
    lin_f(m, y, x, w, n, N, K, NULL, NULL);
}

/* lin_gated_acc(): y += the gated product: the gated matvec below
 * M_GEMM_MIN_ROWS rows, else the gate and bf16 rounding in one launch +
 * GEMM (beta = 1). */
static void lin_gated_acc(mbuf *m, float *y, const float *u, const uint16_t *w, int n, int N, int K, float *tmp) {
    const cu_fuse add = {.acc = 1};
    if (n < M_GEMM_MIN_ROWS) {
        if (g_q8) LT(cu_matvec_q8_gated_fused(y, u, (const int8_t *)w, w8s(w, N, K), n, N, K, &add, 0));
        else LT(cu_matvec_bf16_gated_fused(y, u, w, n, N, K, &add, 0));
        return;
    }
    LT(cu_silu_gate_bf16(m->xb, u, n, K, 0));
    gemm_xb(m, y, w, n, N, K, 1, tmp);
}

static const cu_fuse g_add = {.acc = 1};

static void temporal_layer(mbuf *m, int B) {
    const int D = M_DIM, H = g_hidden;
    const cu_fuse nrm = {.norm = m->norm, .eps = LM_NORM_EPS};   /* norm1, norm2: one buffer here */
    lin_f(m, m->qkv, m->x, m->attn_in, B, 3 * D, D, &nrm, NULL);
    /* (RoPE with the K/V to the ring, and the attention: attend(), scaled separately) */
    lin_f(m, m->x, m->att, m->attn_out, B, D, D, &g_add, m->o);
    lin_f(m, m->u, m->x, m->ffn_in, B, 2 * H, D, &nrm, NULL);
    lin_gated_acc(m, m->x, m->u, m->ffn_out, B, D, H, m->o);
}

/* A step's attention (cuda/cu_backend.c temporal(), prefill 0): RoPE
 * writes the rows' new K/V into the ring, the attention reads every key
 * there, its splits and their combine in one launch. */
static void attend(mbuf *m, int rows) {
    const int D = M_DIM;
    if (g_q8) {
        size_t lb = cu_kv_q8_layer_bytes(M_CTX, D, M_HEADS);
        LT(cu_qkv_rope_ring_q8(m->qkv, (int8_t *)m->ring, lb, m->slot, m->pos, rows, M_HEADS, D / M_HEADS, M_CTX,
                               -0.01f, 0));
        LT(cu_attend_ring_q8(m->att, m->part, m->att_count, m->qkv, 3 * D, NULL, NULL, (const int8_t *)m->ring, lb,
                             m->slot, m->pos, rows, M_HEADS, D / M_HEADS, M_CTX, M_CTX, 0, 0));
        return;
    }
    LT(cu_qkv_rope_ring(m->qkv, m->ring, (size_t)2 * M_CTX * D, m->slot, m->pos, rows, M_HEADS, D / M_HEADS, M_CTX,
                        -0.01f, 0));
    LT(cu_attend_ring(m->att, m->part, m->att_count, m->qkv, 3 * D, NULL, m->ring, (size_t)2 * M_CTX * D, m->slot,
                      m->pos, rows, M_HEADS, D / M_HEADS, M_CTX, M_CTX, 0, 0));
}

static void step_once(mbuf *m, int B) {   /* before the layers, and the text head */
    LT(cu_embed_sum(m->x, m->tok, 1 + M_NQ, m->emb, m->text_emb, B, M_DIM, M_NQ, M_CARD, M_TEXT, 0));
}

/* out_norm folded into the head's product and into the depformer's input
 * projections (cu_backend.c dep_inputs: one launch for all dep_q below
 * M_GEMM_MIN_ROWS rows); the text sampler writes sub-step 0's input */
static void step_head(mbuf *m, int B) {
    const cu_fuse on = {.norm = m->norm, .eps = LM_NORM_EPS};
    const int dd = M_DDIM, D = M_DIM;
    lin_f(m, m->tlog, m->x, m->text_linear, B, M_TEXT, M_DIM, &on, NULL);
    const void *w[M_DEPQ];
    const float *ws[M_DEPQ];
    for (int k = 0; k < M_DEPQ; k++) {
        w[k] = (const char *)m->dep_in + (size_t)k * 2 * dd * D;
        ws[k] = w8s(w[k], dd, D);
    }
    if (B < M_GEMM_MIN_ROWS) LT(cu_matvec_group_fused(m->dinp, m->x, w, g_q8 ? ws : NULL, M_DEPQ, B, dd, D, &on, 0));
    else
        for (int k = 0; k < M_DEPQ; k++) lin_f(m, m->dinp + (size_t)k * B * dd, m->x, w[k], B, dd, D, &on, NULL);
    LT(cu_samp_topk_feed_emb(m->out, m->tlog, m->rows, B, M_TEXT, SAMP_STREAM_TEXT, m->prev, m->tgt, 1 + M_DEPQ, NULL,
                             0, m->dy, m->dinp, m->text_emb, dd, M_TEXT + 1, 0));
}

/* the head and the sampler, which writes the next sub-step's input (all
 * but the last sub-step's: counted 8 times, a few KB over) */
static void dep_substep_own(mbuf *m, int B) {
    lin(m, m->alog, m->dy, m->linear, B, M_CARD, M_DDIM);
    LT(cu_samp_topk_feed_emb(m->out + B, m->alog, m->rows, B, M_CARD, SAMP_STREAM_AUDIO(0), m->prev, m->tgt + 1,
                             1 + M_DEPQ, m->dsteps, 0, m->dy, m->dinp + (size_t)B * M_DDIM, m->dep_emb, M_DDIM,
                             M_CARD + 1, 0));
}

static void dep_layer(mbuf *m, int B) {
    const int dd = M_DDIM, Hd = g_dhidden;
    const cu_fuse nrm = {.norm = m->dnorm, .eps = LM_NORM_EPS};
    lin_f(m, m->dqkv, m->dy, m->d_attn_in, B, 3 * dd, dd, &nrm, NULL);
    if (B < M_GEMM_MIN_ROWS) {   /* the attention in the out-projection's launch */
        if (g_q8)
            LT(cu_matvec_q8_dep_att(m->dy, m->dqkv, m->dk, m->dv, (size_t)LM_MAX_DEP_Q * dd, 1, M_DEP_K, M_DEPQ,
                                    (const int8_t *)m->d_attn_out, w8s(m->d_attn_out, dd, dd), B, dd, dd, M_DHEADS,
                                    dd / M_DHEADS, 0));
        else
            LT(cu_matvec_bf16_dep_att(m->dy, m->dqkv, m->dk, m->dv, (size_t)LM_MAX_DEP_Q * dd, 0, M_DEP_K, M_DEPQ,
                                      m->d_attn_out, B, dd, dd, M_DHEADS, dd / M_DHEADS, 0));
    } else {
        LT((g_q8 ? cu_dep_attend_q8 : cu_dep_attend)(m->datt, m->dqkv, m->dk, m->dv, (size_t)LM_MAX_DEP_Q * dd,
                                                     M_DEP_K, M_DEPQ, B, M_DHEADS, dd / M_DHEADS, 0));
        lin_f(m, m->dy, m->datt, m->d_attn_out, B, dd, dd, &g_add, m->dout);
    }
    lin_f(m, m->du, m->dy, m->d_ffn_in, B, 2 * Hd, dd, &nrm, NULL);
    lin_gated_acc(m, m->dy, m->du, m->d_ffn_out, B, dd, Hd, m->dout);
}

/* The bytes a step must read: every weight matrix it uses once, the text
 * and audio embedding rows, the K/V of each row's window (bf16; g_q8: one
 * byte an element and a float32 scale per row or per position and head). */
static double floor_bytes(int B, int pos) {
    const double D = M_DIM, H = g_hidden, dd = M_DDIM, dH = g_dhidden, wb = g_q8 ? 1 : 2;
    double temporal = M_LAYERS * (3 * D * D + D * D + 2 * H * D + D * H) * wb;
    double head = (double)M_TEXT * D * wb;
    double dep = M_DEPQ * (M_DLAYERS * (3 * dd * dd + dd * dd + 2 * dH * dd + dd * dH) + dd * D + (double)M_CARD * dd) * wb;
    if (g_q8) {   /* the row scales */
        temporal += M_LAYERS * (3 * D + D + 2 * H + D) * 4;
        head += M_TEXT * 4.0;
        dep += M_DEPQ * (M_DLAYERS * (3 * dd + dd + 2 * dH + dd) + dd + M_CARD) * 4;
    }
    double emb = (double)B * (1 + M_NQ) * D * 2;
    double keys = pos + 1 > M_CTX ? M_CTX : pos + 1;
    double kv = (double)B * M_LAYERS * keys * 2 * (g_q8 ? D + 4.0 * M_HEADS : D * 2);
    return temporal + head + dep + emb + kv;
}

/* One (B, pos) point: runs the parts, prints the table; returns the step's ms. */
static double model_point(mbuf *m, int B, int pos, double *floor_ms) {
    ntable = 0;
    int32_t slot[M_MAX_ROWS];
    int64_t p[M_MAX_ROWS];
    for (int b = 0; b < M_MAX_ROWS; b++) {
        slot[b] = b % M_ATT_ROWS;   /* only the attention reads more than M_ATT_ROWS rows' slots */
        p[b] = pos;
    }
    CU_CHECK_FATAL(cudaMemcpy(m->slot, slot, sizeof slot, cudaMemcpyHostToDevice));
    CU_CHECK_FATAL(cudaMemcpy(m->pos, p, sizeof p, cudaMemcpyHostToDevice));
    emu_traffic_reset();
    step_once(m, B);
    step_head(m, B);
    collect(1, 1);
    temporal_layer(m, B);
    collect(M_LAYERS, M_LAYERS);
    int ar = B < M_ATT_ROWS ? B : M_ATT_ROWS;
    emu_traffic_sample(1);   /* every block: the last of a row and head combines */
    attend(m, ar);
    collect(M_LAYERS, (double)M_LAYERS * B / ar);
    emu_traffic_sample(EMU_MODEL_STRIDE);
    dep_substep_own(m, B);
    collect(M_DEPQ, M_DEPQ);
    dep_layer(m, B);
    collect(M_DEPQ * M_DLAYERS, M_DEPQ * M_DLAYERS);
    double us = 0, bytes = 0, launches = 0;
    for (int i = 0; i < ntable; i++) {
        const mrow *r = &table[i];
        if (r->gemm)
            printf("kernel %s bytes %.0f sector_efficiency - predicted_us %.1f\n", r->name, r->bytes, r->us);
        else
            printf("kernel %s bytes %.0f sector_efficiency %.3f predicted_us %.1f\n", r->name, r->bytes,
                   r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : 1.0, r->us);
        us += r->us;
        bytes += r->bytes;
        launches += r->launches;
    }
    *floor_ms = floor_bytes(B, pos) / H200_HBM_BPS * 1e3;
    printf("step B=%d pos=%d: %.0f launches, %.2f GB moved (must read %.2f GB), predicted %.2f ms, floor %.2f ms\n\n",
           B, pos, launches, bytes / 1e9, floor_bytes(B, pos) / 1e9, us / 1e3, *floor_ms);
    return us / 1e3;
}

/* ---- the codec --------------------------------------------------------------------------------- */

/* One frame of n slots through the device codec (encode, then decode of
 * the codes), then the steady-state attention; prints the table. */
static void codec_point(cu_mimi *g, const mimi_model *mm, const mimi_config *c, int n) {
    const int F = mimi_frame_samples(mm), K = mimi_num_codebooks(mm);
    ms_error e = {0};
    float *pcm = calloc((size_t)n * F, sizeof(float));
    int *codes = calloc((size_t)n * K, sizeof(int)), slots[M_MAX_ROWS];
    for (int i = 0; i < n; i++) {
        slots[i] = i;
        if (cu_mimi_reset(g, i, 3, &e)) {
            fprintf(stderr, "gpu-model: codec reset: %s\n", e.msg);
            exit(1);
        }
    }
    ntable = 0;
    emu_traffic_reset();
    int rc = cu_mimi_encode(g, slots, n, pcm, codes, &e);
    /* sampled blocks: most codes were never written; the decode's traffic does not depend on them */
    for (int i = 0; i < n * K; i++) codes[i] = 0;
    if (rc || cu_mimi_decode(g, slots, n, codes, pcm, &e)) {
        fprintf(stderr, "gpu-model: codec: %s\n", e.msg);
        exit(1);
    }
    collect(1, 1);
    /* the fresh state's attention out, the steady state's in: 2 transformers x num_layers launches
     * of T = resample_stride columns per slot over a full ring */
    mrow *fresh = row_of("mimi_attend_kernel");
    memset(fresh, 0, sizeof *fresh);
    snprintf(fresh->name, sizeof fresh->name, "mimi_attend_kernel");
    const int D = c->d_model, T = c->resample_stride, ctx = c->context, N = n * T;
    float *qkv = dz(sizeof(float) * 3 * (size_t)D * N), *att = dz(sizeof(float) * (size_t)D * N);
    float *kv = dz(sizeof(float) * 2 * (size_t)ctx * D * n);
    int32_t hs[M_MAX_ROWS];
    int64_t ho[M_MAX_ROWS];
    for (int i = 0; i < n; i++) {
        hs[i] = i;
        ho[i] = 10 * (int64_t)ctx;   /* long past the first ring: every row valid */
    }
    int32_t *ds = dz(sizeof hs);
    int64_t *dof = dz(sizeof ho);
    CU_CHECK_FATAL(cudaMemcpy(ds, hs, sizeof hs, cudaMemcpyHostToDevice));
    CU_CHECK_FATAL(cudaMemcpy(dof, ho, sizeof ho, cudaMemcpyHostToDevice));
    LT(cu_mimi_attend(att, qkv, kv, (size_t)2 * ctx * D, ds, dof, 0, n, T, D, c->num_heads, ctx, 0));
    collect(2.0 * c->num_layers, 2.0 * c->num_layers);
    double us = 0, bytes = 0;
    for (int i = 0; i < ntable; i++) {
        const mrow *r = &table[i];
        if (r->launches == 0) continue;
        printf("kernel %s bytes %.0f sector_efficiency %.3f predicted_us %.1f\n", r->name, r->bytes,
               r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : 1.0, r->us);
        us += r->us;
        bytes += r->bytes;
    }
    printf("codec B=%d (encode + decode of one frame, full context): %.3f GB moved, predicted >= %.3f ms "
           "(bytes only)\n\n", n, bytes / 1e9, us / 1e3);
    cudaFree(qkv); cudaFree(att); cudaFree(kv); cudaFree(ds); cudaFree(dof);
    free(pcm);
    free(codes);
}

int main(void) {
    g_hidden = lm_gated_hidden(M_DIM, (int)(4.125 * M_DIM));
    g_dhidden = lm_gated_hidden(M_DDIM, M_DFF);
    emu_set_quiet(0);
    printf("gpu-model: the LM step at the 7B's geometry on the emulator (blocks sampled 1 in %d); H200: HBM %.1f TB/s "
           "x %.2f, bf16 %.0f TFLOP/s x %.2f, %.1f us a graph node (docs/cuda.md)\n\n",
           EMU_MODEL_STRIDE, H200_HBM_BPS / 1e12, H200_HBM_FRACTION, H200_BF16_FLOPS / 1e12, H200_GEMM_FRACTION,
           H200_NODE_US);
    mbuf m;
    memset(&m, 0, sizeof m);
    bufs_open(&m);
    CUBLAS_CHECK_FATAL(cublasCreate(&g_blas));
    emu_traffic_start(EMU_MODEL_STRIDE);
    static const int batches[] = {1, 8, 64}, positions[] = {0, 3000};
    double ms[3][2], fl[3][2];
    const int no_lm = getenv("GPU_MODEL_NO_LM") != NULL;
    for (int bi = 0; bi < 3; bi++)
        for (int pi = 0; pi < 2; pi++)
            ms[bi][pi] = no_lm ? (fl[bi][pi] = 0) : model_point(&m, batches[bi], positions[pi], &fl[bi][pi]);
    /* the 8-bit schemes: the same buffers (the int8 layouts fit in the bf16 sizes) */
    g_q8 = 1;
    double ms8[2] = {0, 0}, fl8[2] = {0, 0};
    if (!no_lm) {
        printf("8-bit schemes (int8 weights, int8 K/V):\n\n");
        ms8[0] = model_point(&m, 1, 3000, &fl8[0]);
        ms8[1] = model_point(&m, 128, 3000, &fl8[1]);
    }
    g_q8 = 0;
    emu_traffic_stop();
    printf("predicted H200 8-bit step (int8 weights and K/V): B=1 pos=3000 %.2f ms (floor %.2f ms); B=128 pos=3000 "
           "%.2f ms (floor %.2f ms)\n\n", ms8[0], fl8[0], ms8[1], fl8[1]);
    if (!getenv("GPU_MODEL_NO_CODEC")) {
        mimi_config mc;
        mimi_config_default(&mc);
        mimi_model *mm = NULL;
        cu_mimi *g = NULL;
        ms_error e = {0};
        /* sampled from the open on: its warm-up runs every bucket's launches once */
        emu_traffic_start(EMU_CODEC_STRIDE);
        if (mimi_model_random(&mm, &mc, 11, &e) || cu_mimi_open(&g, mm, M_MAX_ROWS, &e)) {
            fprintf(stderr, "gpu-model: codec: %s\n", e.msg);
            return 1;
        }
        for (int bi = 0; bi < 3; bi++) codec_point(g, mm, &mc, batches[bi]);
        emu_traffic_stop();
        cu_mimi_close(g);
        mimi_model_free(mm);
    }
    printf("predicted H200 step: B=1 pos=0 %.2f ms (floor %.2f ms); B=64 pos=3000 %.2f ms (floor %.2f ms)\n", ms[0][0],
           fl[0][0], ms[2][1], fl[2][1]);
    return 0;
}
