/* gpu_model.c - gpu-model: the H200 performance model of the LM step,
 * from the emulator's traffic accounting (tests/gpu/emu/emu_traffic.c).
 * Built against the emulator only (`make gpu-model`); predictions, never
 * measurements: docs/cuda.md, "The performance model".
 *
 * What runs: the CUDA backend itself (cuda/cu_backend.c, lm_cuda_backend;
 * nothing copied: whatever its step launches is what is priced), opened on
 * the emulator at the released 7B's geometry with random weights and fewer
 * layers, real steps (lm_backend_step: the bucket's graph) of batches 1, 8
 * and 64 at positions 0 and 3000. A slot is put at position p by a
 * one-position prefill at p - 1 through the table (the dispatcher's
 * next-position rule skipped): the step reads the full window, whatever
 * the rows hold. The layers by differences, row by row of the emulator's
 * table (per kernel, per GEMM shape: launches, bytes, sectors, FLOPs):
 *   whole = run(1, 1) + (32 - 1) (run(2, 1) - run(1, 1))
 *                     + (6 - 1) (run(1, 2) - run(1, 1))
 * (temporal layers, depformer layers), exact for what the emulator counts:
 * every row is a sum over launches, and a layer's launches and traffic do
 * not depend on how many layers there are. The depformer's difference is
 * taken at position 0 (no depformer launch reads the position).
 * Blocks are sampled (every EMU_MODEL_STRIDE-th of each grid; counts
 * scaled; the attention's by (head, row) column, every split of a sampled
 * column, since its last block combines the splits: emu_traffic_whole_z),
 * so the emulated memory holds whatever it holds: traffic, not
 * values, is measured (the sampler's data-dependent passes see zeros). The
 * weights' fill, the graphs' warm-up and the position prefills run one
 * block a grid, uncounted. The emulated device is the H200's size and
 * lazy (emu_set_lazy): only the pages the sampled blocks touch are host
 * memory (64 slots x 3000 positions x 2 layers of K/V is 6.4 GB).
 * The products below CU_GEMM_MIN_ROWS (16) rows are the matvec kernel,
 * measured; from 16 rows they are cuBLAS GEMMs, priced from their shapes.
 *
 * Model (per launch): time = max(DRAM bytes / (HBM peak x fraction),
 * FLOPs / tensor peak (GEMMs only)) + one graph kernel node's cost; a
 * chain (dep_chain_*: a depformer sub-step's stages in one launch, ordered
 * by counters in memory) at the HBM share the one published kernel of that
 * kind reached (H200_CHAIN_FRACTION), every block of it run. DRAM
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
 * set: skipped; GPU_MODEL_NO_LM set: the LM's points skipped, their
 * figures 0; GPU_MODEL_TIMES set: each run's seconds to stderr); last,
 * exactly one line
 *   predicted H200 step: B=1 pos=0 X ms (floor Y ms); B=64 pos=3000 X ms (floor Y ms)
 * The 8-bit schemes (the backend opened with int8 weights and int8 K/V)
 * at B=1 and B=128, position 3000, print their tables after the bf16 points and one
 * line before the codec's:
 *   predicted H200 8-bit step (int8 weights and K/V): B=1 pos=3000 X ms (floor Y ms); B=128 pos=3000 X ms (floor Y ms)
 * Exit 0, or 1 when a launch failed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#define CU_CHECK_CUBLAS
#include "cu_check.h"
#include "cu_kern.h"
#include "emu.h"
#include "cu_mimi.h"
#include "backend.h"
#include "log.h"
#include "lm.h"
#include "mimi.h"
#include "lm_config.h"

/* ---- the H200 (docs/cuda.md, "The performance model", for sources) ------------------- */
#define H200_HBM_BPS 4.8e12           /* HBM3e peak, bytes/s */
#define H200_HBM_FRACTION 0.85        /* achievable share of it on streaming reads */
#define H200_BF16_FLOPS 989e12        /* dense bf16 tensor-core peak, FLOP/s */
#define H200_GEMM_FRACTION 0.7        /* of it a cuBLAS GEMM of these shapes reaches */
#define H200_NODE_US 1.3              /* one kernel node of a graph replay: an empty kernel on an H100
                                       * under CUDA graphs (Hazy Research, 2025; docs/cuda.md) */
#define H200_CHAIN_FRACTION 0.78      /* HBM share of a chain (stages in one launch, ordered by counters in
                                       * memory: cuda/cu_sync.cuh): what the one published kernel of that kind,
                                       * a whole Llama-1B forward in one launch at batch 1, reached on an H100
                                       * (Hazy Research, 2025; docs/cuda.md) */
#define CHAIN_PREFIX "dep_chain"      /* the kernels priced so, and run whole (emu_traffic_whole) */

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
#define EMU_MODEL_STRIDE 16           /* blocks sampled: one in this many */
#define EMU_CODEC_STRIDE 64           /* the codec's (its grids are larger, its kernels slower here) */
#define M_MAX_ROWS 128
#define M_TABLE 96
#define M_DEVICE_BYTES ((size_t)141e9)   /* the H200's HBM, what the emulated device reports for the LM runs */

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

#define LT(call) CU_CHECK_FATAL(call)

static void *dz(size_t bytes) {   /* device buffer, zeroed */
    void *p = NULL;
    CU_CHECK_FATAL(cudaMalloc(&p, bytes ? bytes : 1));
    CU_CHECK_FATAL(cudaMemset(p, 0, bytes ? bytes : 1));
    return p;
}

static int g_hidden, g_dhidden;
static int g_q8;   /* 1: the step runs int8 weights and int8 K/V */

/* ---- the backend's own step, at 1 or 2 layers a side ----------------------------------- */

extern const lm_backend_ops lm_cuda_backend;   /* cuda/cu_backend.c */

/* One emulator table, its counts as doubles (combinations have weights). */
typedef struct ttab {
    int n;
    struct {
        char name[EMU_NAME_LEN];
        double launches, dram, gl_bytes, gl_sectors, flops;
        int gemm;
    } r[M_TABLE];
} ttab;

/* dst += w * the rows of src (matched by the emulator's row names: kernels,
 * and cuBLAS GEMMs by shape), in first-seen order. */
static void tab_add(ttab *dst, const ttab *src, double w) {
    for (int i = 0; i < src->n; i++) {
        int j = 0;
        while (j < dst->n && strcmp(dst->r[j].name, src->r[i].name)) j++;
        if (j == dst->n) {
            if (dst->n == M_TABLE) {
                fprintf(stderr, "gpu-model: M_TABLE too small\n");
                exit(1);
            }
            memset(&dst->r[j], 0, sizeof dst->r[j]);
            snprintf(dst->r[j].name, sizeof dst->r[j].name, "%s", src->r[i].name);
            dst->r[j].gemm = src->r[i].gemm;
            dst->n++;
        }
        dst->r[j].launches += w * src->r[i].launches;
        dst->r[j].dram += w * src->r[i].dram;
        dst->r[j].gl_bytes += w * src->r[i].gl_bytes;
        dst->r[j].gl_sectors += w * src->r[i].gl_sectors;
        dst->r[j].flops += w * src->r[i].flops;
    }
}

/* The emulator's table since the last emu_traffic_start. */
static void tab_get(ttab *t) {
    emu_traffic e[M_TABLE];
    int n = emu_traffic_get(e, M_TABLE);
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n; i++) {
        snprintf(t->r[i].name, sizeof t->r[i].name, "%s", e[i].kernel);
        t->r[i].gemm = e[i].gemm_m > 0;
        t->r[i].launches = (double)e[i].launches;
        t->r[i].dram = e[i].dram_bytes;
        t->r[i].gl_bytes = e[i].gl_bytes;
        t->r[i].gl_sectors = e[i].gl_sectors;
        t->r[i].flops = e[i].gemm_flops;
    }
    t->n = n;
}

/* Prices a table into the printed rows (GEMMs of every shape in one row):
 * per launch, the longer of the bytes and (GEMMs) the FLOPs, plus a node. */
static void price(const ttab *t) {
    ntable = 0;
    for (int i = 0; i < t->n; i++) {
        double launches = t->r[i].launches;
        if (launches < 0.5) continue;   /* a row of the 1-layer run only, cancelled: none here */
        mrow *r = row_of(t->r[i].gemm ? "cublasGemmEx" : t->r[i].name);
        r->gemm = t->r[i].gemm;
        r->launches += launches;
        r->bytes += t->r[i].dram;
        r->gl_bytes += t->r[i].gl_bytes;
        r->gl_sectors += t->r[i].gl_sectors;
        r->flops += t->r[i].flops;
        const int chain = !strncmp(t->r[i].name, CHAIN_PREFIX, strlen(CHAIN_PREFIX));
        double us = fmax(t->r[i].dram / launches / (H200_HBM_BPS * (chain ? H200_CHAIN_FRACTION : H200_HBM_FRACTION)),
                         t->r[i].gemm ? t->r[i].flops / launches / (H200_BF16_FLOPS * H200_GEMM_FRACTION) : 0.0) *
                        1e6 + H200_NODE_US;
        r->us += us * launches;
    }
}

/* A directory holding the config.json of the released 7B (lm-bench
 * --shape 7b's) with lt temporal and ld depformer layers. */
static const char *model_dir(int lt, int ld) {
    static char dir[256];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/gpu-model-%d-%d-%d", tmp, (int)getpid(), lt, ld);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpu-model: mkdir %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    char path[320];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpu-model: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fprintf(f,
            "{\"hidden_scale\": 4.125, \"max_period\": 10000, \"gating\": \"silu\", \"norm\": \"rms_norm_f32\", "
            "\"positional_embedding\": \"rope\", \"causal\": true, \"existing_text_padding_id\": 3, "
            "\"depformer_multi_linear\": true, \"depformer_weights_per_step\": true, \"depformer_pos_emb\": \"none\", "
            "\"dep_q\": %d, \"context\": %d, "
            "\"n_q\": %d, \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1], "
            "\"dim\": %d, \"num_heads\": %d, \"num_layers\": %d, \"card\": %d, \"text_card\": %d, "
            "\"depformer_dim\": %d, \"depformer_num_heads\": %d, \"depformer_num_layers\": %d, "
            "\"depformer_dim_feedforward\": %d}\n",
            M_DEPQ, M_CTX, M_NQ, M_DIM, M_HEADS, lt, M_CARD, M_TEXT, M_DDIM, M_DHEADS, ld, M_DFF);
    fclose(f);
    return dir;
}

static void model_dir_remove(int lt, int ld) {
    char path[320];
    const char *dir = model_dir(lt, ld);
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    rmdir(dir);
}

#define M_POINTS 6
typedef struct mpoint { int B, pos; } mpoint;

/* The backend opened at lt temporal and ld depformer layers, max_slots the
 * largest point's batch, random weights; per point, its slots 0..B-1 set to
 * the position, one real step (lm_backend_step: the bucket's graph) with
 * the accounting on, its table into out[point]. Everything but the
 * measured steps runs with one block a grid (the weights' fill, the
 * graphs' warm-up, the positions): fast, and not counted. */
#define EMU_SKIP_STRIDE (1u << 30)
static void backend_runs(int lt, int ld, const mpoint *pts, int np, ttab *out) {
    int S = 0;
    for (int i = 0; i < np; i++) S = pts[i].B > S ? pts[i].B : S;
    lm_backend_opts o = {.max_slots = S, .threads = 1, .variant = LM_VARIANT_KYUTAI, .random_weights = 1,
                         .weights = g_q8 ? LM_WEIGHTS_INT8 : LM_WEIGHTS_BF16, .kv = g_q8 ? LM_KV_INT8 : LM_KV_NATIVE};
    ms_error e = {0};
    emu_traffic_start(EMU_SKIP_STRIDE);
    lm_backend *b = lm_backend_open(&lm_cuda_backend, model_dir(lt, ld), &o, &e);
    if (!b) {
        fprintf(stderr, "gpu-model: backend open (%d + %d layers): %s\n", lt, ld, e.msg);
        exit(1);
    }
    static lm_step_slot slots[M_MAX_ROWS];
    const int times = getenv("GPU_MODEL_TIMES") != NULL;   /* the emulator's seconds per part, to stderr */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int tok[1 + M_NQ] = {0};
    for (int i = 0; i < np; i++) {
        const int B = pts[i].B, pos = pts[i].pos;
        emu_traffic_start(EMU_SKIP_STRIDE);
        for (int s = 0; s < B; s++) {
            /* pos 0: a reset; else the position by a one-position prefill at pos - 1 through the table (the
             * dispatcher's next-position rule skipped): the step reads the window's rows whatever they hold */
            int rc = pos == 0 ? lm_backend_reset_slot(b, s, &e)
                              : b->ops->prefill(b->ctx, s, pos - 1, 1, tok, NULL, &e);
            if (rc != MS_OK || lm_backend_pos(b, s) != pos) {
                fprintf(stderr, "gpu-model: slot %d to position %d: %s\n", s, pos, e.msg);
                exit(1);
            }
            memset(&slots[s], 0, sizeof slots[s]);
            slots[s].slot = s;
            slots[s].dep_steps = -1;   /* greedy sampling, every sub-step */
        }
        emu_traffic_start(EMU_MODEL_STRIDE);
        if (lm_backend_step(b, slots, B, &e) != MS_OK) {
            fprintf(stderr, "gpu-model: step B=%d pos=%d: %s\n", B, pos, e.msg);
            exit(1);
        }
        tab_get(&out[i]);
        if (times) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            fprintf(stderr, "gpu-model: %d + %d layers%s, B=%d pos=%d: %.1f s\n", lt, ld, g_q8 ? " (8-bit)" : "", B, pos,
                    (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
            t0 = t1;
        }
    }
    emu_traffic_start(EMU_SKIP_STRIDE);
    lm_backend_close(b);
    emu_traffic_stop();
    model_dir_remove(lt, ld);
}

/* Every point's whole-step table: run(1, 1) + (32 - 1) (run(2, 1) -
 * run(1, 1)) + (6 - 1) (run(1, 2) - run(1, 1)). Exact for what the
 * emulator counts: each row (launches, bytes, sectors, FLOPs) is a sum over
 * launches, and a layer's launches and their traffic do not depend on how
 * many layers there are (its K/V view, its weights and workspaces are its
 * own or shared at the same sizes). The depformer's difference is taken at
 * position 0 for every point (no depformer launch reads the position; the
 * temporal part cancels), which spares the 2-depformer-layer run the
 * attention over a full window. */
#define M_RUNS (2 * M_POINTS)
static void step_tables(const mpoint *pts, int np, ttab *whole) {
    static ttab t11[M_RUNS], t21[M_POINTS], t12[M_RUNS];
    mpoint p11[M_RUNS], p12[M_RUNS];
    int n11 = np, n12 = 0, at0[M_POINTS], dep[M_POINTS];
    memcpy(p11, pts, sizeof *pts * (size_t)np);
    for (int i = 0; i < np; i++) {   /* each batch's point at position 0: in the 1 + 1 run, and the 1 + 2 run's */
        int j = 0, k = 0;
        while (j < n11 && !(p11[j].B == pts[i].B && p11[j].pos == 0)) j++;
        if (j == n11) p11[n11++] = (mpoint){pts[i].B, 0};
        while (k < n12 && p12[k].B != pts[i].B) k++;
        if (k == n12) p12[n12++] = (mpoint){pts[i].B, 0};
        at0[i] = j;
        dep[i] = k;
    }
    backend_runs(1, 1, p11, n11, t11);
    backend_runs(2, 1, pts, np, t21);
    backend_runs(1, 2, p12, n12, t12);
    for (int i = 0; i < np; i++) {
        memset(&whole[i], 0, sizeof whole[i]);
        tab_add(&whole[i], &t11[i], 1.0 - (M_LAYERS - 1));
        tab_add(&whole[i], &t21[i], M_LAYERS - 1);
        tab_add(&whole[i], &t12[dep[i]], M_DLAYERS - 1);
        tab_add(&whole[i], &t11[at0[i]], -(M_DLAYERS - 1.0));
    }
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

/* One (B, pos) point: prices its table, prints it; returns the step's ms. */
static double model_point(const ttab *t, int B, int pos, double *floor_ms) {
    price(t);
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
           "x %.2f (%s* chains x %.2f), bf16 %.0f TFLOP/s x %.2f, %.1f us a graph node (docs/cuda.md)\n\n",
           EMU_MODEL_STRIDE, H200_HBM_BPS / 1e12, H200_HBM_FRACTION, CHAIN_PREFIX, H200_CHAIN_FRACTION,
           H200_BF16_FLOPS / 1e12, H200_GEMM_FRACTION, H200_NODE_US);
    static const int batches[] = {1, 8, 64}, positions[] = {0, 3000};
    double ms[3][2], fl[3][2];
    const int no_lm = getenv("GPU_MODEL_NO_LM") != NULL;
    /* the emulated device as large as the H200 and lazy: 64 slots of 3000 positions at 2 layers are 6.4 GB of
     * K/V, of which the sampled blocks read a sixteenth (emu_set_lazy) */
    ms_log_level = ms_log_parse_level("warn");   /* the backend's open lines: not this tool's output */
    emu_set_lazy(1);
    emu_set_device_bytes(M_DEVICE_BYTES);
    /* the attention's last block of a row and head combines its splits: sampled by (head, row), every split */
    emu_traffic_whole_z("attend_ring_kernel");
    /* a chain's blocks wait for each other's stages (tickets and counters): every block runs, or its counters
     * stay short */
    emu_traffic_whole(CHAIN_PREFIX);
    static ttab whole[M_POINTS];
    if (!no_lm) {
        mpoint pts[M_POINTS];
        for (int bi = 0; bi < 3; bi++)
            for (int pi = 0; pi < 2; pi++) pts[bi * 2 + pi] = (mpoint){batches[bi], positions[pi]};
        step_tables(pts, 6, whole);
    }
    for (int bi = 0; bi < 3; bi++)
        for (int pi = 0; pi < 2; pi++)
            ms[bi][pi] = no_lm ? (fl[bi][pi] = 0)
                               : model_point(&whole[bi * 2 + pi], batches[bi], positions[pi], &fl[bi][pi]);
    /* the 8-bit schemes: the backend opened with int8 weights and int8 K/V */
    g_q8 = 1;
    double ms8[2] = {0, 0}, fl8[2] = {0, 0};
    if (!no_lm) {
        const mpoint pts[2] = {{1, 3000}, {128, 3000}};
        step_tables(pts, 2, whole);
        printf("8-bit schemes (int8 weights, int8 K/V):\n\n");
        ms8[0] = model_point(&whole[0], 1, 3000, &fl8[0]);
        ms8[1] = model_point(&whole[1], 128, 3000, &fl8[1]);
    }
    g_q8 = 0;
    emu_set_lazy(0);
    emu_set_device_bytes(0);
    emu_traffic_whole_z(NULL);
    emu_traffic_whole(NULL);
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
