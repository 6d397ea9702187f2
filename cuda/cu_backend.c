/* cu_backend.c - the CUDA backend table (engine/lm/backend.h, interface v2)
 * for the LM, and the Mimi codec on the device (cuda/cu_mimi.c; the
 * engine's CPU Mimi on host state per slot with cuda.codec = host).
 *
 * Device memory (docs/cuda.md, "The backend"), all allocated at open:
 *  - weights: one slab, every matrix bf16 (f32 and f16 checkpoints are
 *    rounded on upload, nearest even), each at a 256-byte offset, the
 *    n_q audio embeddings as one (n_q, card + 1, dim) table; norm scales
 *    f32. With opts.random_weights the slab is filled on the device from
 *    the seed (uniform, variance 1/fan_in; embeddings uniform(-1, 1); norms 1).
 *    The 8-bit weight scheme (opts.weights int8, or a q8 checkpoint): every
 *    linear matrix is int8 (rows, cols), quantized at load by the CPU
 *    loader's rule (lm_model_load_ex), then at the next 256-byte boundary
 *    its rows' f32 scales (w8_scales); embeddings and norms as above.
 *  - K/V: one bf16 slab, per slot and layer a ring of `context` rows of keys
 *    (after RoPE) then values: view(slot, layer) = kv + (slot * L + layer) *
 *    2 * context * dim. Slot max_slots is the scratch slot the padding rows
 *    of a bucket write to. Zeroed at open (nothing reads an unwritten row).
 *    The 8-bit K/V (opts.kv int8): per slot and layer cu_kv_q8_layer_bytes
 *    (int8 keys, int8 values, then their f32 scales per head and position).
 *  - workspaces for R rows (the largest bucket or a prefill chunk), the
 *    per-step upload block and the sampled tokens.
 * A step uploads one block (positions, sampling rows, slot indices,
 * dep_steps, tokens, forced targets) with one cudaMemcpyAsync, replays the
 * bucket's CUDA graph (or enqueues the same launches when the graph does not
 * cover the call: more than CU_GRAPH_DEP_STEPS depformer sub-steps, logits
 * asked for, graphs off), downloads the sampled tokens with one copy and
 * waits for an event after it: no allocation and no other host
 * synchronisation inside a step.
 *
 * Rows of a step are distinct slots (the dispatcher checks). Matrix
 * products: cu_matvec_bf16 below CU_GEMM_MIN_ROWS rows, cublasGemmEx
 * (bf16 x bf16, f32 accumulation) at and above, which rounds the
 * activations to bf16 first (tests/gpu/backend_test.c's tolerances say so).
 * int8 matrices: cu_matvec_q8 below CU_GEMM_MIN_ROWS; at and above, the
 * rows are widened to bf16 (exact) into a scratch buffer of at most
 * CU_Q8_SCRATCH elements, a chunk of rows at a time, each chunk a GEMM,
 * then the columns times the row scales (cu_scale_cols).
 * The RMSNorms and the residual adds have no launches of their own: each
 * is folded into the product that reads or makes it (cu_fuse: the
 * matvec's norm prologue or accumulate mode; on the GEMM path the norm in
 * the bf16 conversion, cu_rmsnorm_bf16, and the add as beta = 1, or for
 * int8 in cu_scale_cols_add), bit for bit the launches they replace.
 *
 * Errors: every CUDA or cuBLAS failure is MS_ERR_DEVICE naming the call,
 * file:line and the runtime's text. A failure inside step, prefill,
 * snapshot or restore leaves the device state unknown (a sticky error such
 * as cudaErrorIllegalAddress poisons the context anyway), so the backend
 * marks itself dead and every later call answers MS_ERR_DEVICE with the
 * first message.
 *
 * Threads: the engine thread only (backend.h).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>   /* first: the _v2 names of cublasCreate and friends */

#define CU_CHECK_CUBLAS
#include "cu_check.h"
#include "cu_kern.h"
#include "cu_mimi.h"
#include "cu_plan.h"

#include "backend.h"
#include "lm.h"
#include "log.h"
#include "mimi.h"
#include "samp.h"

/* Rows at and above which a matrix product runs as a cuBLAS GEMM rather
 * than the matvec (which re-reads W once per CU_MATVEC_BATCH_TILE rows).
 * A first guess, NOT measured: the device check must measure the crossover
 * on hardware (matvec vs GEMM time per shape at B = 4..64) and set it. */
#define CU_GEMM_MIN_ROWS 16
/* Positions of one prefill pass (at most context, see cu_prefill). */
#define CU_PREFILL_CHUNK 64
/* Depformer sub-steps a captured graph runs (rows asking for fewer are
 * masked). A call asking more (PersonaPlex's 16 with the user's streams)
 * takes the uncaptured path. */
#define CU_GRAPH_DEP_STEPS 8
/* cuBLAS workspace, set before any capture so that no GEMM allocates while
 * a graph is being captured (NVIDIA recommends 32 MiB on Hopper; it is in
 * the plan's reserve). */
#define CU_BLAS_WORKSPACE (32u << 20)
/* Elements of the int8 path's bf16 scratch (32 MiB; the plan counts it). */
#define CU_Q8_SCRATCH CU_PLAN_Q8_SCRATCH
/* Most batch-size buckets (the plan's: 1, 2, 4, ... then max_slots). */
#define CU_MAX_BUCKETS CU_PLAN_MAX_BUCKETS

/* The plan (cuda/cu_plan.c) sizes the workspaces with the same numbers. */
_Static_assert(CU_PREFILL_CHUNK == CU_PLAN_PREFILL_ROWS, "prefill chunk differs from the memory plan's");
_Static_assert(CU_ATT_SPLIT == CU_PLAN_ATTN_SPLIT, "attention split differs from the memory plan's");
_Static_assert(CU_GRAPH_DEP_STEPS == CU_PLAN_GRAPH_DEP_STEPS, "captured sub-steps differ from the memory plan's");
_Static_assert(CU_Q8_SCRATCH == CU_PLAN_Q8_SCRATCH, "int8 scratch differs from the memory plan's");

/* Per-row data of one step or prefill chunk, as laid out in the upload
 * block (the same layout in pinned host memory and on the device). */
typedef struct cu_rows {
    int64_t *pos;       /* (B) absolute position */
    samp_row *text;     /* (B) text sampling */
    samp_row *audio;    /* (B) audio sampling */
    int32_t *slot;      /* (B) K/V slot (max_slots: the scratch slot) */
    int32_t *dsteps;    /* (B) depformer sub-steps wanted */
    int32_t *tok;       /* (B, n_streams) */
    int32_t *tgt;       /* (B, 1 + dep_q) forced token or -1 */
} cu_rows;

typedef struct cu_layer {
    float *norm1, *norm2;
    uint16_t *attn_in, *attn_out, *ffn_in, *ffn_out;
} cu_layer;

typedef struct cu_dep_layer {
    float *norm1, *norm2;
    uint16_t *attn_in[LM_MAX_DEP_Q], *attn_out[LM_MAX_DEP_Q], *ffn_in[LM_MAX_DEP_Q], *ffn_out[LM_MAX_DEP_Q];
} cu_dep_layer;

struct lm_kv_snap {
    int P, num_layers, dim, heads;
    int q8;             /* 1: the int8 K/V layout */
    /* device, in a buffer of cap bytes: bf16 (num_layers, 2, P, dim); q8
     * per layer int8 keys (P, dim), values (P, dim), f32 scales (2, heads, P) */
    unsigned char *kv;
    size_t cap;
};

/* Snapshot buffers are cudaMalloc'd in whole multiples of CU_SNAP_GRAIN
 * positions and, when freed, kept (up to CU_SNAP_POOL of them) for the
 * next snapshot that fits: cudaMalloc and cudaFree may synchronise the
 * whole device, stalling every session's frame, so a persona cache that
 * takes and evicts snapshots in its steady state makes none. */
#define CU_SNAP_GRAIN 64
#define CU_SNAP_POOL 8

typedef struct cu_ctx {
    lm_config cfg;
    lm_model *m;                 /* the mapped checkpoint during open (NULL after, or with random weights) */
    int nslots, R, maxB;         /* slots, workspace rows, largest bucket */
    int nbuckets, buckets[CU_MAX_BUCKETS];
    int device;
    cudaStream_t st;
    cudaEvent_t done;
    cublasHandle_t blas;
    /* weights */
    unsigned char *wslab;
    size_t wbytes, woff;
    int wpass;                   /* 0: sizing, 1: placing and filling */
    uint32_t wtensor;            /* random weights: tensor counter */
    uint64_t rseed;
    uint16_t *emb, *text_emb, *text_linear, *dep_in[LM_MAX_DEP_Q], *dep_text_emb, *dep_emb[LM_MAX_DEP_Q];
    uint16_t *linears[LM_MAX_DEP_Q];
    float *out_norm;
    cu_layer *layers;
    cu_dep_layer *dep_layers;
    int w8;                      /* 1: the linear matrices are int8 + row scales */
    uint16_t *wdq;               /* int8 path: bf16 scratch of wdq_n elements (GEMM rows) */
    size_t wdq_n;
    /* K/V */
    uint16_t *kv;
    size_t kv_slot;              /* elements per slot: L * 2 * ctx * D */
    int q8kv;                    /* 1: the int8 K/V (kv8 instead of kv) */
    int8_t *kv8;
    size_t kv8_layer, kv8_slot;  /* bytes per layer view, per slot */
    int8_t *kvl8;                /* (R, 2D) the chunk's keys | values, int8 */
    float *kvs8;                 /* (R, 2, heads) their scales */
    int64_t *pos;                /* (nslots) host: next position */
    /* workspaces (R rows) */
    float *x, *qkv, *att, *o, *u, *h, *part;   /* o: the int8 GEMM path's product before its add */
    unsigned *att_count;         /* (R, heads) the attention's arrival counters: 0 between launches */
    cu_dep_chain_ctl *chain_ctl; /* the depformer chain's counters (cu_dep_chain): 0 between launches */
    int dep_chain;               /* 1: a sub-step at the matvec path is one launch (lm_gpu_opts.dep_chain_off) */
    uint16_t *kvl, *xb;
    void *blas_ws;
    float *tlog, *alog;          /* (R, text_card), (dep_q, R, card) */
    float *dy, *dqkv, *datt, *dout, *du, *dh, *dk, *dv;
    float *dinp;                 /* (dep_q, R, ddim): depformer_in[k](out_norm(h)), all k in one launch */
    int32_t *prev, *out;         /* (R), (1 + dep_q, R) */
    size_t dcache;               /* floats per row of dk/dv: dep_layers * LM_MAX_DEP_Q * ddim */
    unsigned char *dup, *hup;    /* upload block: device, pinned host */
    size_t up_bytes;
    int32_t *hout;               /* pinned: (1 + dep_q, R) */
    float *hlog;                 /* pinned: text then audio logits of the largest bucket */
    size_t ws_bytes;
    /* graphs */
    int graphs;                  /* 1: captured */
    cudaGraphExec_t exec[CU_MAX_BUCKETS];
    int graph_dep;               /* sub-steps captured */
    /* snapshots and state */
    size_t snap_bytes;
    struct { unsigned char *kv; size_t cap; } snap_pool[CU_SNAP_POOL];   /* freed snapshot buffers, for reuse */
    int snap_pool_n;
    int gemm_min;                /* CU_GEMM_MIN_ROWS, or lm_gpu_opts.gemm_min_rows */
    int dead;
    ms_error dead_err;
    lm_backend_stats st_;
    /* codec: the CPU model (weights read from it at open; the sizes), then
     * the device codec, or (MOSHID_CU_MIMI=cpu) host streams */
    mimi_model *mimi;
    cu_mimi *gm;
    int pipeline;                /* frame_submit leaves the frame's decode running (opts.pipeline, device codec) */
    int fq[LM_MAX_INFLIGHT];     /* frames submitted, not waited: their decode tickets (-1: none), FIFO */
    lm_frame_stages stages;      /* the frame step's stages (frame_stages, before any frame) */
    int fq_head, fq_n;
    mimi_stream **streams;
    mimi_ws *enc_ws, *dec_ws;
    mimi_stream **tab;
} cu_ctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* kill: the device state is unknown from now on (see the header). */
static int kill_ctx(cu_ctx *c, ms_error *err) {
    if (!c->dead) {
        c->dead = 1;
        c->dead_err = err ? *err : (ms_error){.code = MS_ERR_DEVICE};
        if (!err) snprintf(c->dead_err.msg, sizeof c->dead_err.msg, "cuda backend: device error");
        LOGE("cuda_dead", "msg=\"%s\"", c->dead_err.msg);
    }
    return MS_ERR_DEVICE;
}

/* cu_bind: make c's device current on the calling thread. The current
 * device is per host thread, and the thread that calls a backend entry
 * (the engine thread) is not the one that opened it: without this, with
 * opts.device != 0, its work would go to device 0 (a launch into c's
 * stream then fails with an invalid handle). Every entry point that
 * touches the device starts here; when the device is already current this
 * is a thread-local check in the runtime. MS_OK, or the context is dead. */
static int kill_ctx(cu_ctx *c, ms_error *err);
static int cu_bind(cu_ctx *c, ms_error *err) {
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) return MS_OK;
    cu_err_set(err, e, "cudaSetDevice(c->device)", __FILE__, __LINE__);
    return kill_ctx(c, err);
}
#define CU_BIND(c, err)                       \
    do {                                      \
        int bind_rc_ = cu_bind((c), (err));   \
        if (bind_rc_ != MS_OK) return bind_rc_; \
    } while (0)

static int dead_answer(cu_ctx *c, ms_error *err) {
    return ms_err_set(err, MS_ERR_DEVICE, "cuda backend unusable after an earlier device error: %s", c->dead_err.msg);
}

/* Upload block layout for B rows: byte offsets of each array. */
typedef struct cu_layout {
    size_t pos, text, audio, slot, dsteps, tok, tgt, total;
} cu_layout;

/* The named views of the K/V slab: slot s, layer l, keys (K) or values (V),
 * (context, dim) bf16 each; slot nslots is the scratch slot. */
static uint16_t *kv_keys(const cu_ctx *c, int slot, int layer) {
    return c->kv + (size_t)slot * c->kv_slot + (size_t)layer * 2 * c->cfg.context * c->cfg.dim;
}
static uint16_t *kv_values(const cu_ctx *c, int slot, int layer) {
    return kv_keys(c, slot, layer) + (size_t)c->cfg.context * c->cfg.dim;
}

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

static cu_layout layout(const lm_config *g, int B) {
    cu_layout l;
    size_t o = 0;
    l.pos = o; o = al16(o + sizeof(int64_t) * B);
    l.text = o; o = al16(o + sizeof(samp_row) * B);
    l.audio = o; o = al16(o + sizeof(samp_row) * B);
    l.slot = o; o = al16(o + sizeof(int32_t) * B);
    l.dsteps = o; o = al16(o + sizeof(int32_t) * B);
    l.tok = o; o = al16(o + sizeof(int32_t) * B * g->n_streams);
    l.tgt = o; o = al16(o + sizeof(int32_t) * B * (1 + g->dep_q));
    l.total = o;
    return l;
}

static cu_rows rows_at(const lm_config *g, unsigned char *base, int B) {
    cu_layout l = layout(g, B);
    return (cu_rows){.pos = (int64_t *)(base + l.pos), .text = (samp_row *)(base + l.text),
                     .audio = (samp_row *)(base + l.audio), .slot = (int32_t *)(base + l.slot),
                     .dsteps = (int32_t *)(base + l.dsteps), .tok = (int32_t *)(base + l.tok),
                     .tgt = (int32_t *)(base + l.tgt)};
}

/* ---- weights -------------------------------------------------------------- */

/* wmat: place a bf16 matrix (rows, cols) in the slab (pass 0 counts) and,
 * in pass 1, fill it from src (NULL with random weights: uniform with the
 * given scale). dst_off: element offset inside an already placed block
 * (the audio embedding table), or -1 to place a new block. */
static int wfill(cu_ctx *c, uint16_t *dst, const kern_mat *src, size_t n, float scale, ms_error *err) {
    if (!src) {
        CU_CHECK(err, cu_rand_bf16(dst, n, c->rseed, c->wtensor++, scale, c->st));
        return MS_OK;
    }
    uint16_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return ms_err_set(err, MS_ERR_NOMEM, "cuda backend: out of host memory converting weights");
    for (size_t i = 0; i < n; i++) {
        switch (src->dtype) {
        case ST_BF16: tmp[i] = ((const uint16_t *)src->w)[i]; break;
        case ST_F16: tmp[i] = st_f32_to_bf16(st_f16_to_f32(((const uint16_t *)src->w)[i])); break;
        default: tmp[i] = st_f32_to_bf16(((const float *)src->w)[i]); break;
        }
    }
    cudaError_t e = cudaMemcpy(dst, tmp, n * sizeof *tmp, cudaMemcpyHostToDevice);
    free(tmp);
    CU_CHECK(err, e);
    return MS_OK;
}

static void *wplace(cu_ctx *c, size_t bytes) {
    size_t off = c->woff;
    c->woff = (c->woff + bytes + 255) & ~(size_t)255;
    return c->wpass ? c->wslab + off : NULL;
}

static int wmat(cu_ctx *c, uint16_t **dst, const kern_mat *src, int rows, int cols, float scale, ms_error *err) {
    size_t n = (size_t)rows * cols;
    *dst = wplace(c, n * 2);
    if (!c->wpass) return MS_OK;
    return wfill(c, *dst, src, n, scale, err);
}

/* The row scales of an int8 matrix (rows, cols) placed by wlin. */
static const float *w8_scales(const uint16_t *w, int rows, int cols) {
    return (const float *)((const unsigned char *)w + (((size_t)rows * cols + 255) & ~(size_t)255));
}

/* wlin: a linear layer's matrix: wmat, or with int8 weights its int8 rows
 * then their scales (w8_scales), from src (ST_I8 with scales: the loader
 * quantized it or the checkpoint stored it) or random. */
static int wlin(cu_ctx *c, uint16_t **dst, const kern_mat *src, int rows, int cols, float scale, ms_error *err) {
    if (!c->w8) return wmat(c, dst, src, rows, cols, scale, err);
    size_t n = (size_t)rows * cols;
    *dst = wplace(c, n);
    float *ws = wplace(c, (size_t)rows * sizeof(float));
    if (!c->wpass) return MS_OK;
    if (ws != w8_scales(*dst, rows, cols))
        return ms_err_set(err, MS_ERR_STATE, "cuda backend: int8 matrix layout (scales misplaced)");
    if (!src) {
        CU_CHECK(err, cu_rand_q8((int8_t *)*dst, ws, rows, cols, c->rseed, c->wtensor++, scale, c->st));
        return MS_OK;
    }
    if (src->dtype != ST_I8 || !src->scale || src->rows != rows || src->cols != cols)
        return ms_err_set(err, MS_ERR_FORMAT, "cuda backend: a %d x %d matrix is not int8 in an int8 model", rows, cols);
    CU_CHECK(err, cudaMemcpy(*dst, src->w, n, cudaMemcpyHostToDevice));
    CU_CHECK(err, cudaMemcpy(ws, src->scale, (size_t)rows * sizeof(float), cudaMemcpyHostToDevice));
    return MS_OK;
}

static int wnorm(cu_ctx *c, float **dst, const float *src, int n, ms_error *err) {
    *dst = wplace(c, (size_t)n * sizeof(float));
    if (!c->wpass) return MS_OK;
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return ms_err_set(err, MS_ERR_NOMEM, "cuda backend: out of host memory");
    for (int i = 0; i < n; i++) tmp[i] = src ? src[i] : 1.0f;
    cudaError_t e = cudaMemcpy(*dst, tmp, (size_t)n * sizeof *tmp, cudaMemcpyHostToDevice);
    free(tmp);
    CU_CHECK(err, e);
    return MS_OK;
}

#define WTRY(call) do { int rc_ = (call); if (rc_ != MS_OK) return rc_; } while (0)

/* One pass over every tensor (see wmat). */
static int weights_pass(cu_ctx *c, ms_error *err) {
    const lm_config *g = &c->cfg;
    const lm_model *m = c->m;
    int D = g->dim, dd = g->depformer_dim, H = g->hidden, Hd = g->dep_hidden;
    float sD = 1.0f / sqrtf((float)D) * sqrtf(3.0f), sdd = sqrtf(3.0f / dd), sH = sqrtf(3.0f / H),
          sHd = sqrtf(3.0f / Hd);
    c->woff = 0;
    c->wtensor = 0;
    /* audio embeddings: one table */
    size_t per = (size_t)(g->card + 1) * D;
    c->emb = wplace(c, (size_t)g->n_q * per * 2);
    for (int q = 0; c->wpass && q < g->n_q; q++)
        WTRY(wfill(c, c->emb + q * per, m ? &m->emb[q] : NULL, per, 1.0f, err));
    WTRY(wmat(c, &c->text_emb, m ? &m->text_emb : NULL, g->text_card + 1, D, 1.0f, err));
    WTRY(wlin(c, &c->text_linear, m ? &m->text_linear : NULL, g->text_card, D, sD, err));
    WTRY(wnorm(c, &c->out_norm, m ? m->out_norm : NULL, D, err));
    for (int l = 0; l < g->num_layers; l++) {
        cu_layer *L = &c->layers[l];
        const lm_layer_w *S = m ? &m->layers[l] : NULL;
        WTRY(wnorm(c, &L->norm1, S ? S->norm1 : NULL, D, err));
        WTRY(wnorm(c, &L->norm2, S ? S->norm2 : NULL, D, err));
        WTRY(wlin(c, &L->attn_in, S ? &S->attn_in : NULL, 3 * D, D, sD, err));
        WTRY(wlin(c, &L->attn_out, S ? &S->attn_out : NULL, D, D, sD, err));
        WTRY(wlin(c, &L->ffn_in, S ? &S->ffn_in : NULL, 2 * H, D, sD, err));
        WTRY(wlin(c, &L->ffn_out, S ? &S->ffn_out : NULL, D, H, sH, err));
    }
    for (int k = 0; k < g->dep_q; k++) {
        WTRY(wlin(c, &c->dep_in[k], m ? &m->dep_in[k] : NULL, dd, D, sD, err));
        WTRY(wlin(c, &c->linears[k], m ? &m->linears[k] : NULL, g->card, dd, sdd, err));
        if (k < g->dep_q - 1) WTRY(wmat(c, &c->dep_emb[k], m ? &m->dep_emb[k] : NULL, g->card + 1, dd, 1.0f, err));
    }
    WTRY(wmat(c, &c->dep_text_emb, m ? &m->dep_text_emb : NULL, g->text_card + 1, dd, 1.0f, err));
    for (int l = 0; l < g->depformer_num_layers; l++) {
        cu_dep_layer *L = &c->dep_layers[l];
        const lm_dep_layer_w *S = m ? &m->dep_layers[l] : NULL;
        WTRY(wnorm(c, &L->norm1, S ? S->norm1 : NULL, dd, err));
        WTRY(wnorm(c, &L->norm2, S ? S->norm2 : NULL, dd, err));
        for (int k = 0; k < g->dep_q; k++) {
            WTRY(wlin(c, &L->attn_in[k], S ? &S->attn_in[k] : NULL, 3 * dd, dd, sdd, err));
            WTRY(wlin(c, &L->attn_out[k], S ? &S->attn_out[k] : NULL, dd, dd, sdd, err));
            WTRY(wlin(c, &L->ffn_in[k], S ? &S->ffn_in[k] : NULL, 2 * Hd, dd, sdd, err));
            WTRY(wlin(c, &L->ffn_out[k], S ? &S->ffn_out[k] : NULL, dd, Hd, sHd, err));
        }
    }
    return MS_OK;
}

/* ---- the launches of a step ------------------------------------------------ */

#define ETRY(call) CU_CHECK(err, call)

/* y (n, N) = xb (n, K) W^T, xb = c->xb (bf16 activations), or with acc
 * y += it (the residual add): one cuBLAS GEMM, beta = 1 to accumulate;
 * int8 W, chunks of rows widened into c->wdq, a GEMM each, then the row
 * scales: cu_scale_cols on y, or with acc the GEMMs write tmp (n, N) and
 * cu_scale_cols_add adds the scaled product to y (the scale must come
 * before the add, and beta cannot scale by column). tmp: read only then. */
static int gemm_xb(cu_ctx *c, float *y, const uint16_t *w, int n, int N, int K, int acc, float *tmp, ms_error *err) {
    const float one = 1.0f, zero = 0.0f;
    if (!c->w8) {
        /* column-major: C (N, n) = W^T viewed (K, N) transposed times xb (K, n) */
        CUBLAS_CHECK(err, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one, w, CUDA_R_16BF, K, c->xb,
                                       CUDA_R_16BF, K, acc ? &one : &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
        return MS_OK;
    }
    float *dst = acc ? tmp : y;
    int rows = (int)(c->wdq_n / (size_t)K < (size_t)N ? c->wdq_n / (size_t)K : (size_t)N);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        ETRY(cu_q8_to_bf16(c->wdq, (const int8_t *)w + (size_t)r0 * K, (size_t)nr * K, c->st));
        CUBLAS_CHECK(err, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, K, &one, c->wdq, CUDA_R_16BF, K,
                                       c->xb, CUDA_R_16BF, K, &zero, dst + r0, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    }
    if (acc) ETRY(cu_scale_cols_add(y, tmp, w8_scales(w, N, K), n, N, N, c->st));
    else ETRY(cu_scale_cols(y, w8_scales(w, N, K), n, N, N, c->st));
    return MS_OK;
}

/* The GEMM path applies (int8: its scratch holds a whole row, K % 4 == 0). */
static int use_gemm(const cu_ctx *c, int n, int K) {
    return n >= c->gemm_min && (!c->w8 || (K % 4 == 0 && c->wdq_n >= (size_t)K));
}

/* y (n, N) = x (n, K) W^T with f's fusions (cu_fuse, cuda/cu_kern.h; NULL:
 * none): the matvec for few rows, the norm and the add inside its launch;
 * else a cuBLAS GEMM on bf16-rounded activations, the norm in the rounding
 * launch (cu_rmsnorm_bf16) and the add in the GEMM (gemm_xb). tmp (n, N):
 * the int8 GEMM path's product before the add (f->acc only). */
static int lin_f(cu_ctx *c, float *y, const float *x, const uint16_t *w, int n, int N, int K, const cu_fuse *f,
                 float *tmp, ms_error *err) {
    if (!use_gemm(c, n, K)) {
        if (c->w8) ETRY(cu_matvec_q8_fused(y, x, (const int8_t *)w, w8_scales(w, N, K), n, N, K, f, c->st));
        else ETRY(cu_matvec_bf16_fused(y, x, w, n, N, K, f, c->st));
        return MS_OK;
    }
    if (f && f->norm) ETRY(cu_rmsnorm_bf16(c->xb, x, f->norm, n, K, f->eps, c->st));
    else ETRY(cu_f32_to_bf16(c->xb, x, (size_t)n * K, c->st));
    return gemm_xb(c, y, w, n, N, K, f && f->acc, tmp, err);
}

static int lin(cu_ctx *c, float *y, const float *x, const uint16_t *w, int n, int N, int K, ms_error *err) {
    return lin_f(c, y, x, w, n, N, K, NULL, NULL, err);
}

/* y (n, N) += silu_gate(u) (n, K) W^T, u (n, 2K): the gated FFN's output
 * product with the gate and the residual add fused into it (the gated
 * matvec, or the gate and the bf16 rounding in one launch before the GEMM,
 * beta = 1); two launches where the gated matvec's vector path does not
 * apply (h (n, K) the gate). tmp as lin_f's. */
static int lin_gated_acc(cu_ctx *c, float *y, float *h, const float *u, const uint16_t *w, int n, int N, int K,
                         float *tmp, ms_error *err) {
    const cu_fuse add = {.acc = 1};
    if (!use_gemm(c, n, K)) {
        if (c->w8 && cu_matvec_q8_ok(u, (const int8_t *)w, K)) {
            ETRY(cu_matvec_q8_gated_fused(y, u, (const int8_t *)w, w8_scales(w, N, K), n, N, K, &add, c->st));
            return MS_OK;
        }
        if (!c->w8 && cu_matvec_gated_ok(u, w, K)) {
            ETRY(cu_matvec_bf16_gated_fused(y, u, w, n, N, K, &add, c->st));
            return MS_OK;
        }
        ETRY(cu_silu_gate(h, u, n, K, c->st));
        return lin_f(c, y, h, w, n, N, K, &add, tmp, err);
    }
    ETRY(cu_silu_gate_bf16(c->xb, u, n, K, c->st));
    return gemm_xb(c, y, w, n, N, K, 1, tmp, err);
}

/* Layer l's q, k, v for n rows in c->qkv: the QKV product (norm1 folded
 * in), then RoPE on q and k with the new positions' keys and values
 * stored: in a step (prefill 0: one row per slot) straight into the ring,
 * in a prefill chunk staged in kvl (kvl8, kvs8) for attention(). A step
 * on the matvec path with bf16 K/V runs RoPE and the ring store in the
 * product's epilogue (cu_matvec_*_norm_rope: one launch, bit for bit the
 * two); the int8 ring keeps RoPE's own launch (a head's scale is a
 * maximum over values that many of the product's blocks make). */
static int qkv_rope(cu_ctx *c, int l, int n, const cu_rows *r, int prefill, float rope_k, ms_error *err) {
    const lm_config *g = &c->cfg;
    const cu_layer *L = &c->layers[l];
    int D = g->dim, ctx = g->context, heads = g->num_heads, hd = g->head_dim;
    const cu_fuse n1 = {.norm = L->norm1, .eps = LM_NORM_EPS};
    const cu_rope_ring rr = {c->q8kv ? NULL : kv_keys(c, 0, l), c->kv_slot, r->slot, r->pos, heads, hd, ctx, rope_k};
    if (!prefill && !c->q8kv && !use_gemm(c, n, D) && cu_matvec_rope_ok(c->x, L->attn_in, c->w8, D, &n1, &rr)) {
        if (c->w8)
            ETRY(cu_matvec_q8_norm_rope(c->qkv, c->x, (const int8_t *)L->attn_in, w8_scales(L->attn_in, 3 * D, D),
                                        n, D, &n1, &rr, c->st));
        else ETRY(cu_matvec_bf16_norm_rope(c->qkv, c->x, L->attn_in, n, D, &n1, &rr, c->st));
        return MS_OK;
    }
    WTRY(lin_f(c, c->qkv, c->x, L->attn_in, n, 3 * D, D, &n1, NULL, err));
    int8_t *kv8_layer = c->q8kv ? c->kv8 + (size_t)l * c->kv8_layer : NULL;   /* slot 0's view */
    if (c->q8kv && !prefill)
        ETRY(cu_qkv_rope_ring_q8(c->qkv, kv8_layer, c->kv8_slot, r->slot, r->pos, n, heads, hd, ctx, rope_k, c->st));
    else if (c->q8kv) ETRY(cu_qkv_rope_q8(c->qkv, c->kvl8, c->kvs8, r->pos, n, heads, hd, rope_k, c->st));
    else if (!prefill) ETRY(cu_qkv_rope_ring(c->qkv, rr.kv_layer, c->kv_slot, r->slot, r->pos, n, heads, hd, ctx,
                                             rope_k, c->st));
    else ETRY(cu_qkv_rope(c->qkv, c->kvl, r->pos, n, heads, hd, rope_k, c->st));
    return MS_OK;
}

/* Layer l's attention for n rows after qkv_rope(): over each row's ring
 * into c->att. A step's new K/V are in the ring already and the attention
 * reads every key there: 1 launch. A prefill chunk (rows of one slot,
 * which may wrap the ring) reads its own from kvl (kvl8, kvs8), and the
 * store into the ring follows: 2 launches. */
static int attention(cu_ctx *c, int l, int n, const cu_rows *r, int prefill, ms_error *err) {
    const lm_config *g = &c->cfg;
    int D = g->dim, ctx = g->context;
    /* a prefill chunk's own K/V come from the staging buffers (a step's are in the ring already) */
    if (c->q8kv) {
        int8_t *kv8_layer = c->kv8 + (size_t)l * c->kv8_layer;   /* slot 0's view */
        ETRY(cu_attend_ring_q8(c->att, c->part, c->att_count, c->qkv, 3 * D, prefill ? c->kvl8 : NULL,
                               prefill ? c->kvs8 : NULL, kv8_layer, c->kv8_slot, r->slot, r->pos, n, g->num_heads,
                               g->head_dim, ctx, g->window, prefill, c->st));
        if (prefill)
            ETRY(cu_kv_store_q8(kv8_layer, c->kv8_slot, c->kvl8, c->kvs8, r->slot, r->pos, n, D, g->num_heads, ctx,
                                c->st));
        return MS_OK;
    }
    uint16_t *kvl_layer = kv_keys(c, 0, l);   /* slot 0's view; kernels add slot * kv_slot */
    ETRY(cu_attend_ring(c->att, c->part, c->att_count, c->qkv, 3 * D, prefill ? c->kvl : NULL, kvl_layer, c->kv_slot,
                        r->slot, r->pos, n, g->num_heads, g->head_dim, ctx, g->window, prefill, c->st));
    if (prefill) ETRY(cu_kv_store(kvl_layer, c->kv_slot, c->kvl, r->slot, r->pos, n, D, ctx, c->st));
    return MS_OK;
}

/* The temporal transformer for n rows: x in, the embeddings; out, h, the
 * residual stream after the last layer, not normalised (its readers, the
 * text head and depformer_in, fold out_norm into their products). Each
 * RMSNorm is folded into the product that reads it (QKV: norm1, ffn_in:
 * norm2) and each residual add into the product that makes it (the output
 * projection and ffn_out add into x: cu_fuse), so a layer launches its four
 * products and its attention (qkv_rope(): RoPE in the QKV product's launch
 * in a step on the matvec path with bf16 K/V, else its own launch;
 * attention(): the attention, the K/V store too in a prefill chunk),
 * nothing else. */
static int temporal(cu_ctx *c, int n, const cu_rows *r, int prefill, ms_error *err) {
    const lm_config *g = &c->cfg;
    int D = g->dim, H = g->hidden;
    float rope_k = (float)(-log(g->max_period) * 2.0 / g->head_dim);   /* kern_rope's */
    const cu_fuse add = {.acc = 1};
    for (int l = 0; l < g->num_layers; l++) {
        const cu_layer *L = &c->layers[l];
        const cu_fuse n2 = {.norm = L->norm2, .eps = LM_NORM_EPS};
        WTRY(qkv_rope(c, l, n, r, prefill, rope_k, err));
        WTRY(attention(c, l, n, r, prefill, err));
        WTRY(lin_f(c, c->x, c->att, L->attn_out, n, D, D, &add, c->o, err));
        WTRY(lin_f(c, c->u, c->x, L->ffn_in, n, 2 * H, D, &n2, NULL, err));
        WTRY(lin_gated_acc(c, c->x, c->h, c->u, L->ffn_out, n, D, H, c->o, err));
    }
    return MS_OK;
}

/* The depformer sub-step k in one launch (cu_dep_chain, issue 25: 4
 * launches per layer and the head's become one graph node) where it
 * applies: the option on, every product at the matvec path, the chain's
 * conditions (cu_dep_chain_ok). *ran = 1 when it enqueued the launch, 0
 * when the caller runs the separate launches. */
static int dep_chain(cu_ctx *c, int B, int k, int *ran, ms_error *err) {
    const lm_config *g = &c->cfg;
    const int dd = g->depformer_dim, Hd = g->dep_hidden, nl = g->depformer_num_layers;
    *ran = 0;
    if (!c->dep_chain || use_gemm(c, B, dd) || use_gemm(c, B, Hd) || nl > CU_DEP_CHAIN_MAX_LAYERS) return MS_OK;
    cu_dep_chain_args a = {.dy = c->dy, .dqkv = c->dqkv, .du = c->du, .logits = c->alog + (size_t)k * B * g->card,
                           .head = c->linears[k], .ctl = c->chain_ctl, .cache_stride = c->dcache, .w8 = c->w8,
                           .kv8 = c->q8kv, .layers = nl, .B = B, .D = dd, .H = Hd, .card = g->card,
                           .heads = g->depformer_num_heads, .head_dim = g->dep_head_dim, .k = k,
                           .window = g->dep_window, .eps = LM_NORM_EPS};
    if (c->w8) a.head_s = w8_scales(c->linears[k], g->card, dd);
    for (int l = 0; l < nl; l++) {
        const cu_dep_layer *L = &c->dep_layers[l];
        cu_dep_chain_layer *o = &a.layer[l];
        *o = (cu_dep_chain_layer){.attn_in = L->attn_in[k], .attn_out = L->attn_out[k], .ffn_in = L->ffn_in[k],
                                  .ffn_out = L->ffn_out[k], .norm1 = L->norm1, .norm2 = L->norm2,
                                  .k_cache = c->dk + (size_t)l * LM_MAX_DEP_Q * dd,
                                  .v_cache = c->dv + (size_t)l * LM_MAX_DEP_Q * dd};
        if (c->w8) {
            o->attn_in_s = w8_scales(L->attn_in[k], 3 * dd, dd);
            o->attn_out_s = w8_scales(L->attn_out[k], dd, dd);
            o->ffn_in_s = w8_scales(L->ffn_in[k], 2 * Hd, dd);
            o->ffn_out_s = w8_scales(L->ffn_out[k], dd, Hd);
        }
    }
    if (!cu_dep_chain_ok(&a)) return MS_OK;
    ETRY(cu_dep_chain(&a, c->st));
    *ran = 1;
    return MS_OK;
}

/* Depformer sub-step k for B rows: dy (B, ddim) in, logits to alog[k].
 * As temporal(): the norms folded into QKV and ffn_in, the residual adds
 * into the output projection and ffn_out (dy +=); the head reads dy as the
 * last add leaves it (the depformer has no final norm). At the matvec path
 * the attention runs inside the output projection's launch too
 * (cu_matvec_*_dep_att): a layer is four launches; and where every
 * product's vector path applies, the whole sub-step, those launches and
 * the head's, is one (dep_chain). */
static int dep_substep(cu_ctx *c, int B, int k, ms_error *err) {
    const lm_config *g = &c->cfg;
    int dd = g->depformer_dim, Hd = g->dep_hidden;
    const cu_fuse add = {.acc = 1};
    int chained = 0;
    WTRY(dep_chain(c, B, k, &chained, err));
    if (chained) return MS_OK;
    for (int l = 0; l < g->depformer_num_layers; l++) {
        const cu_dep_layer *L = &c->dep_layers[l];
        const cu_fuse n1 = {.norm = L->norm1, .eps = LM_NORM_EPS}, n2 = {.norm = L->norm2, .eps = LM_NORM_EPS};
        float *kc = c->dk + (size_t)l * LM_MAX_DEP_Q * dd, *vc = c->dv + (size_t)l * LM_MAX_DEP_Q * dd;
        WTRY(lin_f(c, c->dqkv, c->dy, L->attn_in[k], B, 3 * dd, dd, &n1, NULL, err));
        if (!use_gemm(c, B, dd) &&
            cu_matvec_dep_att_ok(L->attn_out[k], c->w8, c->q8kv, dd, g->depformer_num_heads, g->dep_head_dim)) {
            /* the attention in the out-projection's launch (its prologue) */
            if (c->w8)
                ETRY(cu_matvec_q8_dep_att(c->dy, c->dqkv, kc, vc, c->dcache, c->q8kv, k, g->dep_window,
                                          (const int8_t *)L->attn_out[k], w8_scales(L->attn_out[k], dd, dd), B, dd,
                                          dd, g->depformer_num_heads, g->dep_head_dim, c->st));
            else
                ETRY(cu_matvec_bf16_dep_att(c->dy, c->dqkv, kc, vc, c->dcache, c->q8kv, k, g->dep_window,
                                            L->attn_out[k], B, dd, dd, g->depformer_num_heads, g->dep_head_dim,
                                            c->st));
        } else {
            ETRY((c->q8kv ? cu_dep_attend_q8 : cu_dep_attend)(c->datt, c->dqkv, kc, vc, c->dcache, k, g->dep_window,
                                                              B, g->depformer_num_heads, g->dep_head_dim, c->st));
            WTRY(lin_f(c, c->dy, c->datt, L->attn_out[k], B, dd, dd, &add, c->dout, err));
        }
        WTRY(lin_f(c, c->du, c->dy, L->ffn_in[k], B, 2 * Hd, dd, &n2, NULL, err));
        WTRY(lin_gated_acc(c, c->dy, c->dh, c->du, L->ffn_out[k], B, dd, Hd, c->dout, err));
    }
    WTRY(lin(c, c->alog + (size_t)k * B * g->card, c->dy, c->linears[k], B, g->card, dd, err));
    return MS_OK;
}

/* dinp[k] (B, ddim) = depformer_in[k](out_norm(h)), k < ndep: none of
 * them depends on a sampled token, so all before the first sampler, at the
 * matvec path in one launch (cu_matvec_group_fused); at the GEMM path a
 * product each. */
static int dep_inputs(cu_ctx *c, int B, int ndep, const cu_fuse *on, ms_error *err) {
    const lm_config *g = &c->cfg;
    int dd = g->depformer_dim, D = g->dim;
    if (!use_gemm(c, B, D)) {
        const void *w[LM_MAX_DEP_Q];
        const float *ws[LM_MAX_DEP_Q];
        for (int k = 0; k < ndep; k++) {
            w[k] = c->dep_in[k];
            ws[k] = c->w8 ? w8_scales(c->dep_in[k], dd, D) : NULL;
        }
        ETRY(cu_matvec_group_fused(c->dinp, c->x, w, c->w8 ? ws : NULL, ndep, B, dd, D, on, c->st));
        return MS_OK;
    }
    for (int k = 0; k < ndep; k++)
        WTRY(lin_f(c, c->dinp + (size_t)k * B * dd, c->x, c->dep_in[k], B, dd, D, on, NULL, err));
    return MS_OK;
}

/* Everything of a step after the upload, for a bucket of B rows read from
 * the device upload block: embeddings, the temporal transformer, text
 * head and sampling, ndep depformer sub-steps with feed-back and masking.
 * Sampled tokens to out (1 + dep_q, B): text in row 0, sub-step k in 1 + k. */
static int enqueue_step(cu_ctx *c, int B, int ndep, ms_error *err) {
    const lm_config *g = &c->cfg;
    cu_rows r = rows_at(g, c->dup, B);
    int nt = 1 + g->dep_q;
    /* out_norm(h), which the text head and every depformer_in read, is
     * folded into each of those products (the matvec's prologue, or the
     * GEMM's input conversion): no launch of its own */
    const cu_fuse on = {.norm = c->out_norm, .eps = LM_NORM_EPS};
    ETRY(cu_embed_sum(c->x, r.tok, g->n_streams, c->emb, c->text_emb, B, g->dim, g->n_q, g->card, g->text_card,
                      c->st));
    WTRY(temporal(c, B, &r, 0, err));
    WTRY(lin_f(c, c->tlog, c->x, c->text_linear, B, g->text_card, g->dim, &on, NULL, err));
    WTRY(dep_inputs(c, B, ndep, &on, err));
    /* each sampler feeds its token back and, where a sub-step follows,
     * writes its input, dy = dinp[k] + emb_k[token] (emb_0: the text
     * token's table; dy NULL: none follows) */
    const int dd = g->depformer_dim;
    ETRY(cu_samp_topk_feed_emb(c->out, c->tlog, r.text, B, g->text_card, SAMP_STREAM_TEXT, c->prev, r.tgt, nt, NULL, 0,
                               ndep > 0 ? c->dy : NULL, c->dinp, c->dep_text_emb, dd, g->text_card + 1, c->st));
    for (int k = 0; k < ndep; k++) {
        WTRY(dep_substep(c, B, k, err));
        const int next = k + 1 < ndep;
        ETRY(cu_samp_topk_feed_emb(c->out + (size_t)(1 + k) * B, c->alog + (size_t)k * B * g->card, r.audio, B,
                                   g->card, SAMP_STREAM_AUDIO(k), c->prev, r.tgt + 1 + k, nt, r.dsteps, k,
                                   next ? c->dy : NULL, next ? c->dinp + (size_t)(k + 1) * B * dd : NULL,
                                   next ? c->dep_emb[k] : NULL, dd, g->card + 1, c->st));
    }
    return MS_OK;
}

/* ---- open / close ------------------------------------------------------------- */

static void cu_close(void *vctx) {
    cu_ctx *c = vctx;
    if (!c) return;
    if (cudaSetDevice(c->device) != cudaSuccess) cudaGetLastError();   /* this thread may not be the opener (cu_bind) */
    cu_mimi_close(c->gm);   /* borrows c->mimi */
    for (int i = 0; c->streams && i < c->nslots; i++) mimi_stream_free(c->streams[i]);
    free(c->streams);
    free(c->tab);
    mimi_ws_free(c->enc_ws);
    mimi_ws_free(c->dec_ws);
    mimi_model_free(c->mimi);
    for (int i = 0; i < c->nbuckets; i++)
        if (c->exec[i]) cudaGraphExecDestroy(c->exec[i]);
    if (c->blas) cublasDestroy(c->blas);   /* before its workspace is freed */
    void *dev[] = {c->wslab, c->kv, c->kv8, c->kvl8, c->kvs8, c->wdq, c->x, c->qkv, c->att, c->o, c->u,
                   c->h, c->part, c->att_count, c->chain_ctl, c->kvl, c->xb,
                   c->tlog, c->alog, c->dy, c->dinp, c->dqkv, c->datt, c->dout, c->du, c->dh, c->dk, c->dv,
                   c->prev, c->out, c->dup, c->blas_ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    for (int i = 0; i < c->snap_pool_n; i++) cudaFree(c->snap_pool[i].kv);
    if (c->hup) cudaFreeHost(c->hup);
    if (c->hout) cudaFreeHost(c->hout);
    if (c->hlog) cudaFreeHost(c->hlog);
    if (c->done) cudaEventDestroy(c->done);
    if (c->st) cudaStreamDestroy(c->st);
    lm_model_free(c->m);
    free(c->layers);
    free(c->dep_layers);
    free(c->pos);
    free(c);
}

/* A workspace buffer of n elements of size es; counted in ws_bytes. */
static int dalloc(cu_ctx *c, void **p, size_t n, size_t es, ms_error *err) {
    size_t b = (n ? n : 1) * es;
    CU_CHECK(err, cudaMalloc(p, b));
    c->ws_bytes += b;
    return MS_OK;
}

/* The configuration of a random-weight model: model_dir/config.json, the
 * variant from opts or, as the loader decides it, from dep_q. */
static int random_config(lm_config *g, const char *dir, lm_variant variant, ms_error *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return ms_err_set(err, MS_ERR_ARG, "cuda backend: model directory path too long");
    int rc = lm_config_load(g, path, err);
    if (rc != MS_OK) return rc;
    if (variant == LM_VARIANT_AUTO)
        variant = g->dep_q == LM_PERSONAPLEX_DEP_Q ? LM_VARIANT_PERSONAPLEX : LM_VARIANT_KYUTAI;
    g->variant = variant;
    return lm_config_finish(g, err);
}

/* The codec runs on the device unless cuda.codec = host (or
 * MOSHID_CU_MIMI=cpu, lm_gpu_opts_get) keeps it on the host (the CPU
 * Mimi): for comparisons, and as the fallback should the device codec
 * misbehave. */
static int codec_on_device(const lm_backend_opts *opts) {
    lm_gpu_opts go;
    lm_gpu_opts_get(opts->gpu, &go);
    return opts->mimi && !go.codec_host;
}

static int codec_open(cu_ctx *c, const lm_backend_opts *opts, ms_error *err) {
    if (mimi_model_load(&c->mimi, opts->mimi, opts->mimi_config, err) != MS_OK) return err ? err->code : MS_ERR_FORMAT;
    if (mimi_model_check_serving(c->mimi, err) != MS_OK) return err ? err->code : MS_ERR_UNSUPPORTED;
    if (codec_on_device(opts)) {
        int rc = cu_mimi_open_with(&c->gm, c->mimi, c->nslots, opts->gpu, err);
        if (rc != MS_OK) return rc;
        c->st_.codec_bytes = mimi_model_bytes(c->mimi) + cu_mimi_bytes(c->gm);
        c->pipeline = opts->pipeline != 0;
        c->st_.pipeline = c->pipeline;
        LOGI("cuda_mimi", "where=device slots=%d device_mb=%.1f", c->nslots, cu_mimi_bytes(c->gm) / 1048576.0);
        return MS_OK;
    }
    LOGI("cuda_mimi", "where=host slots=%d (cuda.codec = host)", c->nslots);
    c->streams = calloc((size_t)c->nslots, sizeof *c->streams);
    c->tab = calloc((size_t)c->nslots, sizeof *c->tab);
    if (!c->streams || !c->tab) return ms_err_set(err, MS_ERR_NOMEM, "cuda backend: out of memory");
    for (int i = 0; i < c->nslots; i++)
        if (!(c->streams[i] = mimi_stream_create(c->mimi, err))) return err ? err->code : MS_ERR_NOMEM;
    if (!(c->enc_ws = mimi_ws_create(c->mimi, c->nslots, err)) || !(c->dec_ws = mimi_ws_create(c->mimi, c->nslots, err)))
        return err ? err->code : MS_ERR_NOMEM;
    c->st_.codec_bytes = mimi_model_bytes(c->mimi) + (size_t)c->nslots * mimi_stream_bytes(c->mimi) +
                         2 * mimi_ws_bytes(c->mimi, c->nslots);
    return MS_OK;
}

/* Fill the host upload block for bucket B with padding rows (scratch slot,
 * no tokens, greedy, no sub-steps), each at a position of its own: rows of
 * one launch store their K/V row concurrently, so two padding rows at one
 * position would write one address from two blocks (distinct while a
 * bucket's padding rows are no more than the context). */
static void pad_rows(cu_ctx *c, const cu_rows *h, int i0, int B) {
    const lm_config *g = &c->cfg;
    for (int i = i0; i < B; i++) {
        h->pos[i] = (i - i0) % g->context;
        h->slot[i] = c->nslots;
        h->dsteps[i] = 0;
        h->text[i] = (samp_row){0};
        h->audio[i] = (samp_row){0};
        for (int s = 0; s < g->n_streams; s++) h->tok[(size_t)i * g->n_streams + s] = -1;
        for (int k = 0; k < 1 + g->dep_q; k++) h->tgt[(size_t)i * (1 + g->dep_q) + k] = -1;
    }
}

/* Warm up and capture one graph per bucket (padding rows only). */
static int capture_graphs(cu_ctx *c, ms_error *err) {
    const lm_config *g = &c->cfg;
    c->graph_dep = g->dep_q < CU_GRAPH_DEP_STEPS ? g->dep_q : CU_GRAPH_DEP_STEPS;
    for (int i = 0; i < c->nbuckets; i++) {
        int B = c->buckets[i];
        cu_rows h = rows_at(g, c->hup, B);
        pad_rows(c, &h, 0, B);
        CU_CHECK(err, cudaMemcpyAsync(c->dup, c->hup, layout(g, B).total, cudaMemcpyHostToDevice, c->st));
        WTRY(enqueue_step(c, B, c->graph_dep, err));   /* warm-up: first launches, cuBLAS set-up */
        CU_CHECK(err, cudaStreamSynchronize(c->st));
        cudaGraph_t graph = NULL;
        CU_CHECK(err, cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
        int rc = enqueue_step(c, B, c->graph_dep, err);
        cudaError_t e = cudaStreamEndCapture(c->st, &graph);
        if (rc != MS_OK) {
            if (graph) cudaGraphDestroy(graph);
            return rc;
        }
        CU_CHECK(err, e);
        e = cudaGraphInstantiate(&c->exec[i], graph, 0);
        cudaGraphDestroy(graph);
        CU_CHECK(err, e);
    }
    c->graphs = 1;
    return MS_OK;
}

static int cu_open(void **out, const char *dir, const lm_backend_opts *opts, ms_error *err) {
    cu_ctx *c = calloc(1, sizeof *c);
    if (!c) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    int rc = MS_ERR_DEVICE;
    c->nslots = opts->max_slots;
    c->device = opts->device;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        rc = ms_err_set(err, MS_ERR_DEVICE, "cuda backend: no CUDA device (%s: %s)",
                        e != cudaSuccess ? cudaGetErrorName(e) : "cudaGetDeviceCount",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        goto fail;
    }
    if (opts->device < 0 || opts->device >= ndev) {
        rc = ms_err_set(err, MS_ERR_RANGE, "cuda backend: device %d out of range (%d devices)", opts->device, ndev);
        goto fail;
    }
    CU_CHECK_GOTO(err, cudaSetDevice(opts->device), fail);
    struct cudaDeviceProp prop;
    CU_CHECK_GOTO(err, cudaGetDeviceProperties(&prop, opts->device), fail);
    if (prop.major < 8) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "cuda backend: device %d (%s) is sm_%d%d; sm_80 or newer is needed",
                        opts->device, prop.name, prop.major, prop.minor);
        goto fail;
    }
    /* configuration, and the checkpoint when there is one */
    if (opts->random_weights) {
        if ((rc = random_config(&c->cfg, dir, opts->variant, err)) != MS_OK) goto fail;
        c->rseed = opts->random_weights;
    } else {
        c->m = lm_model_load_ex(dir, opts->variant, (lm_weights)opts->weights, err);
        if (!c->m) {
            rc = err ? err->code : MS_ERR_FORMAT;
            goto fail;
        }
        c->cfg = c->m->cfg;
    }
    /* the 8-bit schemes: int8 matrices when asked for or stored (q8 checkpoints) */
    c->w8 = c->m ? c->m->int8 : opts->weights == LM_WEIGHTS_INT8;
    c->q8kv = opts->kv == LM_KV_INT8;
    const lm_config *g = &c->cfg;
    if (g->head_dim > CU_ATT_MAX_HEAD_DIM || g->dep_head_dim > CU_ATT_MAX_HEAD_DIM || g->head_dim % 2) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "cuda backend: head_dim %d / %d (at most %d, even)", g->head_dim,
                        g->dep_head_dim, CU_ATT_MAX_HEAD_DIM);
        goto fail;
    }
    /* buckets: 1, 2, 4, ... below max_slots, then max_slots (the plan's) */
    c->nbuckets = cu_plan_buckets(c->nslots, c->buckets, CU_MAX_BUCKETS);
    if (c->nbuckets < 1) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "cuda backend: no batch-size buckets for %d slots", c->nslots);
        goto fail;
    }
    c->maxB = c->buckets[c->nbuckets - 1];
    int chunk = g->context < CU_PREFILL_CHUNK ? g->context : CU_PREFILL_CHUNK;
    c->R = c->maxB > chunk ? c->maxB : chunk;
    /* the memory plan, against what the device has free */
    {
        cu_plan_req req = {.slots = c->nslots, .context = g->context, .snapshots = 0, .snap_positions = 0,
                           .max_bucket = c->maxB, .weight_bytes_per_el = 2, .codec = codec_on_device(opts),
                           .w8 = c->w8, .kv8 = c->q8kv};
        cu_plan plan;
        size_t fr = 0, tot = 0;
        CU_CHECK_GOTO(err, cudaMemGetInfo(&fr, &tot), fail);
        if (cu_plan_compute(g, &req, &plan) != 0) {
            rc = ms_err_set(err, MS_ERR_LIMIT, "cuda backend: no memory plan for %d slots at context %d", c->nslots,
                            g->context);
            goto fail;
        }
        if (plan.total > fr) {
            char line[256];
            cu_plan_describe(&plan, req.slots, line, sizeof line);
            rc = ms_err_set(err, MS_ERR_NOMEM,
                            "cuda backend: %d slots at context %d do not fit: %s, device %d has %.2f GiB free of "
                            "%.2f GiB",
                            c->nslots, g->context, line, opts->device, fr / 1073741824.0, tot / 1073741824.0);
            goto fail;
        }
    }
    CU_CHECK_GOTO(err, cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), fail);
    CU_CHECK_GOTO(err, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), fail);
    CUBLAS_CHECK_GOTO(err, cublasCreate(&c->blas), fail);
    CUBLAS_CHECK_GOTO(err, cublasSetStream(c->blas, c->st), fail);
    if (dalloc(c, &c->blas_ws, CU_BLAS_WORKSPACE, 1, err)) goto fail;
    CUBLAS_CHECK_GOTO(err, cublasSetWorkspace(c->blas, c->blas_ws, CU_BLAS_WORKSPACE), fail);
    c->layers = calloc((size_t)g->num_layers, sizeof *c->layers);
    c->dep_layers = calloc((size_t)g->depformer_num_layers, sizeof *c->dep_layers);
    c->pos = calloc((size_t)c->nslots, sizeof *c->pos);
    if (!c->layers || !c->dep_layers || !c->pos) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "cuda backend: out of memory");
        goto fail;
    }
    /* weights: size, allocate, fill */
    c->wpass = 0;
    if ((rc = weights_pass(c, err)) != MS_OK) goto fail;
    c->wbytes = c->woff;
    CU_CHECK_GOTO(err, cudaMalloc((void **)&c->wslab, c->wbytes), fail);
    c->wpass = 1;
    if ((rc = weights_pass(c, err)) != MS_OK) goto fail;
    lm_model_free(c->m);   /* everything is on the device now */
    c->m = NULL;
    /* K/V slab: nslots + the scratch slot */
    rc = MS_ERR_DEVICE;
    size_t D = (size_t)g->dim, R = (size_t)c->R, dd = (size_t)g->depformer_dim;
    size_t kv_bytes;
    if (c->q8kv) {
        if (g->dim % 4 || g->depformer_dim % 4) {
            rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "cuda backend: int8 K/V needs dim and depformer_dim multiples of 4");
            goto fail;
        }
        c->kv8_layer = cu_kv_q8_layer_bytes(g->context, g->dim, g->num_heads);
        c->kv8_slot = (size_t)g->num_layers * c->kv8_layer;
        kv_bytes = (size_t)(c->nslots + 1) * c->kv8_slot;
        CU_CHECK_GOTO(err, cudaMalloc((void **)&c->kv8, kv_bytes), fail);
        CU_CHECK_GOTO(err, cudaMemset(c->kv8, 0, kv_bytes), fail);
    } else {
        c->kv_slot = (size_t)g->num_layers * 2 * (size_t)g->context * D;
        kv_bytes = (size_t)(c->nslots + 1) * c->kv_slot * sizeof(uint16_t);
        CU_CHECK_GOTO(err, cudaMalloc((void **)&c->kv, kv_bytes), fail);
        CU_CHECK_GOTO(err, cudaMemset(c->kv, 0, kv_bytes), fail);
    }
    /* the uploads and the memset ran on the legacy stream, which the
     * backend's non-blocking stream does not wait for: finish them now */
    CU_CHECK_GOTO(err, cudaDeviceSynchronize(), fail);
    /* workspaces */
    size_t H = (size_t)g->hidden, Hd = (size_t)g->dep_hidden;
    size_t maxK = D > H ? D : H;
    if (dd > maxK) maxK = dd;
    if (Hd > maxK) maxK = Hd;
    size_t splits = (size_t)cu_attend_splits(g->window);
    c->dcache = (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd;
    int nt = 1 + g->dep_q;
    if (dalloc(c, (void **)&c->x, R * D, 4, err) ||
        dalloc(c, (void **)&c->qkv, R * 3 * D, 4, err) || dalloc(c, (void **)&c->att, R * D, 4, err) ||
        dalloc(c, (void **)&c->o, R * D, 4, err) || dalloc(c, (void **)&c->u, R * 2 * H, 4, err) ||
        dalloc(c, (void **)&c->h, R * H, 4, err) ||
        dalloc(c, (void **)&c->part, R * (size_t)g->num_heads * splits * CU_ATT_PART_FLOATS, 4, err) ||
        dalloc(c, (void **)&c->att_count, R * (size_t)g->num_heads, sizeof(unsigned), err) ||
        dalloc(c, (void **)&c->chain_ctl, 1, sizeof(cu_dep_chain_ctl), err) ||
        dalloc(c, (void **)&c->kvl, c->q8kv ? 1 : R * 2 * D, 2, err) || dalloc(c, (void **)&c->xb, R * maxK, 2, err) ||
        dalloc(c, (void **)&c->tlog, R * (size_t)g->text_card, 4, err) ||
        dalloc(c, (void **)&c->alog, (size_t)g->dep_q * R * (size_t)g->card, 4, err) ||
        dalloc(c, (void **)&c->dy, R * dd, 4, err) || dalloc(c, (void **)&c->dinp, (size_t)g->dep_q * R * dd, 4, err) ||
        dalloc(c, (void **)&c->dqkv, R * 3 * dd, 4, err) || dalloc(c, (void **)&c->datt, R * dd, 4, err) ||
        dalloc(c, (void **)&c->dout, R * dd, 4, err) || dalloc(c, (void **)&c->du, R * 2 * Hd, 4, err) ||
        dalloc(c, (void **)&c->dh, R * Hd, 4, err) || dalloc(c, (void **)&c->dk, R * c->dcache, 4, err) ||
        dalloc(c, (void **)&c->dv, R * c->dcache, 4, err) || dalloc(c, (void **)&c->prev, R, 4, err) ||
        dalloc(c, (void **)&c->out, (size_t)nt * R, 4, err))
        goto fail;
    /* the counters start at 0; every attention launch leaves them there (on c->st, before any launch) */
    CU_CHECK_GOTO(err, cudaMemsetAsync(c->att_count, 0, R * (size_t)g->num_heads * sizeof(unsigned), c->st), fail);
    CU_CHECK_GOTO(err, cudaMemsetAsync(c->chain_ctl, 0, sizeof(cu_dep_chain_ctl), c->st), fail);
    if (c->q8kv && (dalloc(c, (void **)&c->kvl8, R * 2 * D, 1, err) ||
                   dalloc(c, (void **)&c->kvs8, R * 2 * (size_t)g->num_heads, 4, err)))
        goto fail;
    if (c->w8) {   /* the GEMM path's scratch: the largest matrix, at most CU_Q8_SCRATCH elements */
        size_t big = (size_t)g->text_card * D, m2[] = {3 * D * D, 2 * H * D, D * H, (size_t)g->card * dd,
                                                       dd * D, 3 * dd * dd, 2 * Hd * dd, dd * Hd};
        for (size_t i = 0; i < sizeof m2 / sizeof m2[0]; i++) big = m2[i] > big ? m2[i] : big;
        c->wdq_n = big < CU_Q8_SCRATCH ? big : CU_Q8_SCRATCH;
        if (dalloc(c, (void **)&c->wdq, c->wdq_n, 2, err)) goto fail;
    }
    /* upload block: rows, or a prefill chunk's summed embeddings (which go
     * straight to x) */
    c->up_bytes = layout(g, c->R).total;
    if (dalloc(c, (void **)&c->dup, c->up_bytes, 1, err)) goto fail;
    CU_CHECK_GOTO(err, cudaMallocHost((void **)&c->hup, c->up_bytes), fail);
    CU_CHECK_GOTO(err, cudaMallocHost((void **)&c->hout, (size_t)nt * R * sizeof(int32_t)), fail);
    CU_CHECK_GOTO(err, cudaMallocHost((void **)&c->hlog,
                                      R * ((size_t)g->text_card + (size_t)g->dep_q * g->card) * sizeof(float)), fail);
    CU_CHECK_GOTO(err, cudaStreamSynchronize(c->st), fail);
    c->st_.weight_bytes = c->wbytes;
    c->st_.kv_bytes = kv_bytes;
    c->st_.where = LM_MEM_DEVICE;
    c->st_.weights_scheme = c->w8 ? "int8" : "bf16";
    c->st_.kv_scheme = c->q8kv ? "int8" : "bf16";
    c->st_.threads = 1;
    c->st_.pipeline = 0;
    /* Two knobs for measurements and tests, read once here (lm_gpu_opts:
     * the cuda.* options, the MOSHID_CU_* variables over them):
     * gemm_min_rows moves the matvec/GEMM crossover (the device check times
     * both sides; the emulator tests run most cases with 1, the cuBLAS
     * stand-in being far cheaper to emulate than the matvec); graphs_off
     * leaves the graphs out (every step uncaptured); dep_chain_off runs a
     * depformer sub-step as its separate launches (the chain's tests
     * compare the two). */
    lm_gpu_opts go;
    lm_gpu_opts_get(opts->gpu, &go);
    c->gemm_min = go.gemm_min_rows >= 1 && go.gemm_min_rows <= LM_MAX_SLOTS + 1 ? go.gemm_min_rows : CU_GEMM_MIN_ROWS;
    c->dep_chain = !go.dep_chain_off;
    if (!go.graphs_off && (rc = capture_graphs(c, err)) != MS_OK) goto fail;
    rc = MS_ERR_DEVICE;
    if (opts->mimi && (rc = codec_open(c, opts, err)) != MS_OK) goto fail;
    LOGI("cuda_open",
         "device=%d name=\"%s\" slots=%d context=%d buckets=%d graphs=%d weights=%s kv=%s weights_mb=%.1f kv_mb=%.1f "
         "ws_mb=%.1f random=%d",
         opts->device, prop.name, c->nslots, g->context, c->nbuckets, c->graphs, c->st_.weights_scheme,
         c->st_.kv_scheme, c->wbytes / 1048576.0, kv_bytes / 1048576.0, c->ws_bytes / 1048576.0,
         opts->random_weights != 0);
    *out = c;
    return MS_OK;
fail:
    if (rc == MS_OK) rc = err && err->code ? err->code : MS_ERR_DEVICE;
    cu_close(c);
    cudaGetLastError();   /* a failed allocation is answered here, not by this thread's next launch */
    return rc;
}

/* ---- entries ------------------------------------------------------------------ */

static const lm_config *cu_config(void *vctx) { return &((cu_ctx *)vctx)->cfg; }

static int cu_reset_slot(void *vctx, int slot, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    c->pos[slot] = 0;   /* stale rows are never read: the ring rule */
    return MS_OK;
}

static int64_t cu_pos(void *vctx, int slot) { return ((cu_ctx *)vctx)->pos[slot]; }

static int bucket_of(const cu_ctx *c, int n) {
    for (int i = 0; i < c->nbuckets; i++)
        if (c->buckets[i] >= n) return i;
    return c->nbuckets - 1;
}

static int cu_step(void *vctx, lm_step_slot *slots, int n, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    if (n == 0) return MS_OK;
    double t0 = now_s();
    const lm_config *g = &c->cfg;
    int bi = bucket_of(c, n), B = c->buckets[bi], nt = 1 + g->dep_q;
    int maxdep = 0, logits = 0;
    cu_rows h = rows_at(g, c->hup, B);
    for (int i = 0; i < n; i++) {
        const lm_step_slot *s = &slots[i];
        int nd = s->dep_steps < 0 ? g->dep_q : s->dep_steps;
        if (nd > maxdep) maxdep = nd;
        logits |= s->text_logits != NULL || s->audio_logits != NULL;
        h.pos[i] = c->pos[s->slot];
        h.slot[i] = s->slot;
        h.dsteps[i] = nd;
        h.text[i] = (samp_row){.seed = s->samp.seed, .step = s->step, .temp = s->samp.text_temp, .topk = s->samp.text_topk};
        h.audio[i] = (samp_row){.seed = s->samp.audio_seed, .step = s->step, .temp = s->samp.audio_temp,
                                .topk = s->samp.audio_topk};
        memcpy(h.tok + (size_t)i * g->n_streams, s->tokens, sizeof(int32_t) * g->n_streams);
        for (int k = 0; k < nt; k++)
            h.tgt[(size_t)i * nt + k] = s->target && s->provided[k] ? s->target[k] : -1;
    }
    pad_rows(c, &h, n, B);
    int graph = c->graphs && maxdep <= c->graph_dep && !logits;
    int ndep = graph ? c->graph_dep : maxdep;
    CU_CHECK_GOTO(err, cudaMemcpyAsync(c->dup, c->hup, layout(g, B).total, cudaMemcpyHostToDevice, c->st), dead);
    if (graph) {
        CU_CHECK_GOTO(err, cudaGraphLaunch(c->exec[bi], c->st), dead);
    } else if (enqueue_step(c, B, ndep, err) != MS_OK) {
        goto dead;
    }
    CU_CHECK_GOTO(err, cudaMemcpyAsync(c->hout, c->out, sizeof(int32_t) * (size_t)(1 + ndep) * B,
                                       cudaMemcpyDeviceToHost, c->st), dead);
    if (logits) {
        CU_CHECK_GOTO(err, cudaMemcpyAsync(c->hlog, c->tlog, sizeof(float) * (size_t)B * g->text_card,
                                           cudaMemcpyDeviceToHost, c->st), dead);
        CU_CHECK_GOTO(err, cudaMemcpyAsync(c->hlog + (size_t)B * g->text_card, c->alog,
                                           sizeof(float) * (size_t)ndep * B * g->card, cudaMemcpyDeviceToHost, c->st),
                      dead);
    }
    CU_CHECK_GOTO(err, cudaEventRecord(c->done, c->st), dead);
    CU_CHECK_GOTO(err, cudaEventSynchronize(c->done), dead);
    for (int i = 0; i < n; i++) {
        lm_step_slot *s = &slots[i];
        s->out_text = c->hout[i];
        int nd = h.dsteps[i];
        for (int k = 0; k < LM_MAX_DEP_Q; k++) s->out_audio[k] = k < nd ? c->hout[(size_t)(1 + k) * B + i] : -1;
        if (s->text_logits) memcpy(s->text_logits, c->hlog + (size_t)i * g->text_card, sizeof(float) * g->text_card);
        if (s->audio_logits)
            for (int k = 0; k < nd; k++)
                memcpy(s->audio_logits + (size_t)k * g->card,
                       c->hlog + (size_t)B * g->text_card + ((size_t)k * B + i) * g->card, sizeof(float) * g->card);
        c->pos[s->slot]++;
    }
    c->st_.steps += (uint64_t)n;
    c->st_.step_calls++;
    c->st_.step_seconds += now_s() - t0;
    return MS_OK;
dead:
    return kill_ctx(c, err);
}

static int cu_prefill(void *vctx, int slot, int64_t pos0, int P, const int *tokens, const float *embs, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    const lm_config *g = &c->cfg;
    /* a chunk never holds two positions of one ring row (see cu_attend_ring) */
    int chunk = g->context < CU_PREFILL_CHUNK ? g->context : CU_PREFILL_CHUNK;
    for (int p0 = 0; p0 < P; p0 += chunk) {
        int n = P - p0 < chunk ? P - p0 : chunk;
        cu_rows h = rows_at(g, c->hup, n);
        for (int r = 0; r < n; r++) {
            h.pos[r] = pos0 + p0 + r;
            h.slot[r] = slot;
            if (tokens) memcpy(h.tok + (size_t)r * g->n_streams, tokens + (size_t)(p0 + r) * g->n_streams,
                               sizeof(int32_t) * g->n_streams);
        }
        cu_rows d = rows_at(g, c->dup, n);
        CU_CHECK_GOTO(err, cudaMemcpyAsync(c->dup, c->hup, layout(g, n).total, cudaMemcpyHostToDevice, c->st), dead);
        if (tokens) {
            CU_CHECK_GOTO(err, cu_embed_sum(c->x, d.tok, g->n_streams, c->emb, c->text_emb, n, g->dim, g->n_q, g->card,
                                            g->text_card, c->st), dead);
        } else {
            CU_CHECK_GOTO(err, cudaMemcpyAsync(c->x, embs + (size_t)p0 * g->dim, sizeof(float) * (size_t)n * g->dim,
                                               cudaMemcpyHostToDevice, c->st), dead);
        }
        if (temporal(c, n, &d, 1, err) != MS_OK) goto dead;
        /* the host rows are rewritten by the next chunk */
        CU_CHECK_GOTO(err, cudaStreamSynchronize(c->st), dead);
    }
    c->pos[slot] = pos0 + P;
    c->st_.prefill_positions += (uint64_t)P;
    return MS_OK;
dead:
    return kill_ctx(c, err);
}

/* Bytes of one position of a snapshot: keys and values of every layer,
 * bf16, or int8 and a float32 scale per head. */
static size_t snap_pos_bytes(const lm_kv_snap *s) {
    return 2 * (size_t)s->num_layers * (s->q8 ? (size_t)s->dim + (size_t)s->heads * sizeof(float)
                                              : (size_t)s->dim * sizeof(uint16_t));
}
static size_t snap_bytes(const lm_kv_snap *s) { return (size_t)s->P * snap_pos_bytes(s); }

/* The int8 layout of a snapshot, layer l: keys (P, dim) int8, values
 * (P, dim), then scales (2, heads, P) f32. */
static unsigned char *snap8_layer(const lm_kv_snap *s, int l) {
    return s->kv + (size_t)l * s->P * (2 * (size_t)s->dim + 2 * (size_t)s->heads * sizeof(float));
}

/* Copies between a slot's int8 ring (rows 0..P-1) and a snapshot, layers
 * [l0, l1); to_snap: which way. Keys and values in one copy each, the
 * scales one (head, K|V) row of P at a time (the ring keeps ctx per row). */
static cudaError_t snap8_copy(cu_ctx *c, int slot, const lm_kv_snap *s, int l0, int l1, int to_snap) {
    const lm_config *g = &c->cfg;
    size_t P = (size_t)s->P, D = (size_t)g->dim, ctx = (size_t)g->context;
    for (int l = l0; l < l1; l++) {
        unsigned char *ring = (unsigned char *)c->kv8 + (size_t)slot * c->kv8_slot + (size_t)l * c->kv8_layer;
        unsigned char *sn = snap8_layer(s, l);
        cudaError_t e = cudaSuccess;
        for (int w = 0; w < 2 && e == cudaSuccess; w++) {
            unsigned char *r = ring + (size_t)w * ctx * D, *q = sn + (size_t)w * P * D;
            e = cudaMemcpyAsync(to_snap ? q : r, to_snap ? r : q, P * D, cudaMemcpyDeviceToDevice, c->st);
        }
        float *rs = (float *)(ring + 2 * ctx * D), *ss = (float *)(sn + 2 * P * D);
        for (int i = 0; i < 2 * g->num_heads && e == cudaSuccess; i++)
            e = cudaMemcpyAsync(to_snap ? ss + i * P : rs + i * ctx, to_snap ? rs + i * ctx : ss + i * P,
                                P * sizeof(float), cudaMemcpyDeviceToDevice, c->st);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* snap_take: s->kv = a buffer of at least bytes: the smallest pooled one
 * that fits and is at most twice the size a new one would have, else a new
 * cudaMalloc of whole CU_SNAP_GRAIN positions. cudaSuccess or cudaMalloc's
 * error (left as the thread's last error). Engine thread. */
static cudaError_t snap_take(cu_ctx *c, lm_kv_snap *s, size_t bytes) {
    size_t per_pos = snap_pos_bytes(s);
    size_t grains = ((size_t)s->P + CU_SNAP_GRAIN - 1) / CU_SNAP_GRAIN;
    size_t cap = (grains ? grains : 1) * CU_SNAP_GRAIN * per_pos;
    int best = -1;
    for (int i = 0; i < c->snap_pool_n; i++)
        if (c->snap_pool[i].cap >= bytes && c->snap_pool[i].cap <= 2 * cap &&
            (best < 0 || c->snap_pool[i].cap < c->snap_pool[best].cap))
            best = i;
    if (best >= 0) {
        s->kv = c->snap_pool[best].kv;
        s->cap = c->snap_pool[best].cap;
        c->snap_pool[best] = c->snap_pool[--c->snap_pool_n];
        return cudaSuccess;
    }
    s->cap = cap;
    cudaError_t e = cudaMalloc((void **)&s->kv, s->cap);
    if (e != cudaSuccess) s->kv = NULL;
    return e;
}

/* snap_give: s's buffer back to the pool (or cudaFree'd when the pool is
 * full), then s freed. Engine thread. */
static void snap_give(cu_ctx *c, lm_kv_snap *s) {
    if (s->kv && c->snap_pool_n < CU_SNAP_POOL) {
        c->snap_pool[c->snap_pool_n].kv = s->kv;
        c->snap_pool[c->snap_pool_n++].cap = s->cap;
    } else if (s->kv) {
        cudaFree(s->kv);
    }
    free(s);
}

static int cu_kv_snapshot(void *vctx, int slot, int P, lm_kv_snap **out, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    const lm_config *g = &c->cfg;
    lm_kv_snap *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, MS_ERR_NOMEM, "kv_snapshot: out of memory");
    *s = (lm_kv_snap){.P = P, .num_layers = g->num_layers, .dim = g->dim, .heads = g->num_heads, .q8 = c->q8kv};
    size_t bytes = snap_bytes(s);
    if (snap_take(c, s, bytes) != cudaSuccess) {
        /* out of memory is not sticky, and this thread's last error is
         * left clean: cudaMalloc's error is answered here */
        cudaError_t e = cudaGetLastError();
        free(s);
        return ms_err_set(err, e == cudaErrorMemoryAllocation ? MS_ERR_NOMEM : MS_ERR_DEVICE,
                          "kv_snapshot: cudaMalloc of %.1f MiB for %d positions: %s", bytes / 1048576.0, P,
                          cudaGetErrorString(e));
    }
    size_t per = (size_t)P * g->dim;
    if (c->q8kv) {
        CU_CHECK_GOTO(err, snap8_copy(c, slot, s, 0, g->num_layers, 1), fail);
    } else {
        uint16_t *kv = (uint16_t *)s->kv;
        for (int l = 0; l < g->num_layers; l++)
            for (int w = 0; w < 2; w++)   /* P <= context: rows 0..P-1 hold positions 0..P-1 */
                CU_CHECK_GOTO(err, cudaMemcpyAsync(kv + ((size_t)l * 2 + w) * per,
                                                   w ? kv_values(c, slot, l) : kv_keys(c, slot, l),
                                                   per * sizeof(uint16_t), cudaMemcpyDeviceToDevice, c->st), fail);
    }
    CU_CHECK_GOTO(err, cudaStreamSynchronize(c->st), fail);
    c->snap_bytes += snap_bytes(s);
    *out = s;
    return MS_OK;
fail:
    snap_give(c, s);
    return kill_ctx(c, err);
}

static int cu_kv_restore(void *vctx, int slot, const lm_kv_snap *s, int l0, int l1, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    const lm_config *g = &c->cfg;
    if (s->num_layers != g->num_layers || s->dim != g->dim || s->P > g->context || s->q8 != c->q8kv)
        return ms_err_set(err, MS_ERR_ARG, "kv_restore: snapshot of another model shape or K/V scheme");
    size_t per = (size_t)s->P * g->dim;
    if (c->q8kv) {
        CU_CHECK_GOTO(err, snap8_copy(c, slot, s, l0, l1, 0), dead);
    } else {
        const uint16_t *kv = (const uint16_t *)s->kv;
        for (int l = l0; l < l1; l++)
            for (int w = 0; w < 2; w++)
                CU_CHECK_GOTO(err, cudaMemcpyAsync(w ? kv_values(c, slot, l) : kv_keys(c, slot, l),
                                                   kv + ((size_t)l * 2 + w) * per, per * sizeof(uint16_t),
                                                   cudaMemcpyDeviceToDevice, c->st), dead);
    }
    CU_CHECK_GOTO(err, cudaStreamSynchronize(c->st), dead);
    if (l1 == g->num_layers) c->pos[slot] = s->P;
    return MS_OK;
dead:
    return kill_ctx(c, err);
}

static void cu_kv_snap_free(void *vctx, lm_kv_snap *s) {
    cu_ctx *c = vctx;
    if (!s) return;
    c->snap_bytes -= snap_bytes(s);
    cudaSetDevice(c->device);   /* for a cudaFree past the pool (cu_bind) */
    snap_give(c, s);
}

static int cu_kv_snap_info(void *vctx, const lm_kv_snap *s, lm_snap_info *info) {
    (void)vctx;
    info->positions = s->P;
    info->bytes = snap_bytes(s);
    info->where = LM_MEM_DEVICE;
    return MS_OK;
}

static int cu_kv_snap_len(void *vctx, const lm_kv_snap *s) {
    (void)vctx;
    return s->P;
}

static int cu_kv_snap_read(void *vctx, const lm_kv_snap *s, int layer, int which, float *dst, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    size_t n = (size_t)s->P * s->dim, hd = (size_t)(s->heads ? s->dim / s->heads : 0);
    /* bf16 values, or int8 values then their (heads, P) scales (dequantized: q * s) */
    size_t bytes = s->q8 ? n + (size_t)s->heads * s->P * sizeof(float) : n * sizeof(uint16_t);
    unsigned char *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return ms_err_set(err, MS_ERR_NOMEM, "kv_snap_read: out of memory");
    cudaError_t e;
    if (s->q8) {
        const unsigned char *l = snap8_layer(s, layer);
        e = cudaMemcpy(tmp, l + (size_t)which * n, n, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            e = cudaMemcpy(tmp + n, l + 2 * n + (size_t)which * s->heads * s->P * sizeof(float),
                           (size_t)s->heads * s->P * sizeof(float), cudaMemcpyDeviceToHost);
    } else {
        e = cudaMemcpy(tmp, s->kv + ((size_t)layer * 2 + which) * n * sizeof(uint16_t), bytes, cudaMemcpyDeviceToHost);
    }
    if (e != cudaSuccess) {
        free(tmp);
        cu_err_set(err, e, "cudaMemcpy(snapshot layer)", __FILE__, __LINE__);
        return kill_ctx(c, err);
    }
    if (s->q8) {
        const int8_t *q = (const int8_t *)tmp;
        const float *sc = (const float *)(tmp + n);
        for (size_t i = 0; i < n; i++) {
            size_t p = i / s->dim, h = (i % s->dim) / hd;
            dst[i] = (float)q[i] * sc[h * s->P + p];
        }
    } else {
        const uint16_t *v = (const uint16_t *)tmp;
        for (size_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(v[i]);
    }
    free(tmp);
    return MS_OK;
}

static int cu_stats(void *vctx, lm_backend_stats *st) {
    cu_ctx *c = vctx;
    *st = c->st_;
    st->snap_bytes = c->snap_bytes;
    st->where = LM_MEM_DEVICE;
    size_t pooled = 0;   /* freed snapshot buffers kept for reuse */
    for (int i = 0; i < c->snap_pool_n; i++) pooled += c->snap_pool[i].cap;
    st->mem_used = c->wbytes + c->st_.kv_bytes + c->ws_bytes + c->snap_bytes + pooled;
    size_t fr = 0, tot = 0;
    if (!c->dead && (cudaSetDevice(c->device) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess)) {
        cudaGetLastError();
        fr = 0;
    }
    st->mem_free = fr;
    return MS_OK;
}

/* ---- Mimi: on the device (cu_mimi), or on the host with MOSHID_CU_MIMI=cpu ---------- */

static int cu_codec_books(void *vctx) {
    cu_ctx *c = vctx;
    return c->mimi ? mimi_num_codebooks(c->mimi) : 0;
}

static int cu_codec_reset(void *vctx, int slot, int which, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->gm) {
        if (c->dead) return dead_answer(c, err);
        CU_BIND(c, err);
        int rc = cu_mimi_reset(c->gm, slot, (which & LM_CODEC_ENCODER ? 1 : 0) | (which & LM_CODEC_DECODER ? 2 : 0), err);
        return rc == MS_ERR_DEVICE ? kill_ctx(c, err) : rc;
    }
    if (which & LM_CODEC_ENCODER) mimi_stream_reset_encoder(c->streams[slot]);
    if (which & LM_CODEC_DECODER) mimi_stream_reset_decoder(c->streams[slot]);
    return MS_OK;
}

static int cu_codec_encode(void *vctx, const int *slots, int n, const float *pcm, int *codes, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->gm) {
        if (c->dead) return dead_answer(c, err);
        CU_BIND(c, err);
        int rc = cu_mimi_encode(c->gm, slots, n, pcm, codes, err);
        return rc == MS_ERR_DEVICE ? kill_ctx(c, err) : rc;
    }
    for (int i = 0; i < n; i++) c->tab[i] = c->streams[slots[i]];
    return mimi_encode_batch_ws(c->mimi, c->enc_ws, c->tab, n, pcm, codes, err);
}

static int cu_codec_decode(void *vctx, const int *slots, int n, const int *codes, float *pcm, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->gm) {
        if (c->dead) return dead_answer(c, err);
        CU_BIND(c, err);
        int rc = cu_mimi_decode(c->gm, slots, n, codes, pcm, err);
        return rc == MS_ERR_DEVICE ? kill_ctx(c, err) : rc;
    }
    for (int i = 0; i < n; i++) c->tab[i] = c->streams[slots[i]];
    return mimi_decode_batch_ws(c->mimi, c->dec_ws, c->tab, n, codes, pcm, err);
}

/* ---- the frame step, pipelined ---------------------------------------------
 *
 * frame_submit runs the frame's encode (the codec's encode stream; the
 * host waits for the codes, which LMGen's bookkeeping needs) and its LMGen
 * + LM step (the LM's stream; the host waits for the sampled tokens, which
 * LMGen's commit needs; the stages are the dispatcher's host code,
 * lm_frame_stages, handed once by frame_stages), then enqueues the decode
 * of the rows that have
 * output on the codec's decode stream and returns. So the decode of frame t
 * runs on the device while frame t + 1's encode and LM step do; frame_wait
 * waits for that decode and scatters its PCM. The host work between the LM
 * step and the decode is LMGen's commit and the list of rows to decode: a
 * few integers per slot (the stages' own work, in the same order).
 * Without opts.pipeline, or with the host codec (MOSHID_CU_MIMI=cpu),
 * submit runs all three stages and wait has nothing to do. */

static void cu_frame_stages(void *vctx, const lm_frame_stages *st) {
    cu_ctx *c = vctx;
    c->stages = *st;
}

static int cu_frame_submit(void *vctx, lm_frame *f, ms_error *err) {
    cu_ctx *c = vctx;
    const lm_frame_stages *st = &c->stages;
    if (c->dead) return dead_answer(c, err);
    if (c->fq_n == LM_MAX_INFLIGHT) return ms_err_set(err, MS_ERR_STATE, "frame_submit: %d frames in flight", c->fq_n);
    CU_BIND(c, err);
    int t = -1, rc = st->encode(st->ctx, f, err);
    if (rc == MS_OK) rc = st->step(st->ctx, f, err);
    if (!c->gm || !c->pipeline) {
        if (rc == MS_OK) rc = st->decode(st->ctx, f, err);
    } else {
        if (rc == MS_OK && f->n_dec) {
            rc = cu_mimi_decode_submit(c->gm, f->dec_slots, f->n_dec, f->dec_codes, &t, err);
            if (rc == MS_ERR_DEVICE) return kill_ctx(c, err);
        }
    }
    if (rc != MS_OK) return rc;
    c->fq[(c->fq_head + c->fq_n++) % LM_MAX_INFLIGHT] = t;
    return MS_OK;
}

static int cu_frame_wait(void *vctx, lm_frame *f, ms_error *err) {
    cu_ctx *c = vctx;
    if (c->fq_n == 0) return ms_err_set(err, MS_ERR_STATE, "frame_wait: nothing in flight");
    int t = c->fq[c->fq_head];
    c->fq_head = (c->fq_head + 1) % LM_MAX_INFLIGHT;
    c->fq_n--;
    if (t < 0) return MS_OK;
    if (c->dead) return dead_answer(c, err);
    CU_BIND(c, err);
    if (cu_mimi_decode_finish(c->gm, t, f->dec_pcm, err) != MS_OK) return kill_ctx(c, err);
    for (int j = 0, d = 0; j < f->n; j++)
        if (f->has_out[j])
            memcpy(f->pcm_out + (size_t)j * MS_FRAME_SAMPLES, f->dec_pcm + (size_t)d++ * MS_FRAME_SAMPLES,
                   sizeof(float) * MS_FRAME_SAMPLES);
    return MS_OK;
}

const lm_backend_ops lm_cuda_backend = {
    .name = "cuda",
    .open = cu_open,
    .close = cu_close,
    .config = cu_config,
    .reset_slot = cu_reset_slot,
    .pos = cu_pos,
    .step = cu_step,
    .prefill = cu_prefill,
    .kv_snapshot = cu_kv_snapshot,
    .kv_restore = cu_kv_restore,
    .kv_snap_free = cu_kv_snap_free,
    .kv_snap_len = cu_kv_snap_len,
    .kv_snap_read = cu_kv_snap_read,
    .kv_snap_info = cu_kv_snap_info,
    .codec_books = cu_codec_books,
    .codec_reset = cu_codec_reset,
    .mimi_encode = cu_codec_encode,
    .mimi_decode = cu_codec_decode,
    .frame_stages = cu_frame_stages,
    .frame_submit = cu_frame_submit,
    .frame_wait = cu_frame_wait,
    .stats = cu_stats,
    .schemes = LM_SCHEME_W_BF16 | LM_SCHEME_W_INT8 | LM_SCHEME_KV_INT8,
};
