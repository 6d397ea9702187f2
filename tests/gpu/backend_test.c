/* backend_test.c - backend-test: the CUDA backend table (cuda/cu_backend.c)
 * against the CPU reference backend (engine/cpu/cpu_backend.c) on tiny
 * models this program writes (both variants, float32 checkpoints and one
 * f16), and on random device weights.
 *
 * One source, two executors, as engine-test: built with nvcc it is
 * build/backend-test and runs on a GPU (it exits 77 with "skipped: no CUDA
 * device (...)" where there is none); built against the emulator
 * (tests/gpu/emu/) it is build/backend-test-emu and runs in `make test`.
 *
 *   backend-test [SUBSTRING]     only the cases whose name contains it
 *
 * (Over STYLE's 800 lines: every case shares the model writer, the
 * comparisons and the schedule; a split into two objects needs cuda.mk's
 * and emu.mk's link lines changed.)
 *
 * Cases:
 *  - teacher_forced/<variant>[-peaked]/<path>: the CPU samples a trace
 *    (official sampling defaults); both backends are fed the CPU's tokens
 *    (inputs, and the depformer's forced targets for every sub-step), with
 *    logits asked for, over a schedule that steps batches of 1, 2 and 3
 *    slots (3 in bucket 4: one padding row) at different positions, past
 *    the ring's wrap. Per stream (text, each audio sub-step): the
 *    normalised logit error max |gpu - cpu| / rms(cpu) <= LOGIT_TOL, no
 *    "decisive" row flips (the near-tie rule: rows whose best CPU logit
 *    leads by more than 2 LOGIT_TOL rms), and, except on the random
 *    models' GEMM path (see tf_run), argmax agreement >= 99 % of the rows
 *    (the issue's rule). <path> gemm lowers the matvec/GEMM crossover to 1
 *    row (MOSHID_CU_GEMM_MIN_ROWS), on a device too: every product is a
 *    cuBLAS GEMM. -peaked: the models with realistic logit spreads (see
 *    PK_PRIOR); the plain random ones stay for the near-tie rule, which
 *    their tie-prone logits make the more sensitive. One line per stream
 *    gives the agreement, the distinct winners, the CPU's top-1/top-2
 *    margin and the logit error. Also on moshid-mkmodel's two demo LMs
 *    (teacher_forced/mkmodel-dep8, -dep16: the GEMM path and the near-tie
 *    rule on the emulator, the matvec and the plain rule on a device);
 *  - sampler/<variant>: the device's sampled tokens against the CPU
 *    sampler (samp_topk) run on the logits the device returned, with the
 *    same seeds, temperatures and top-k per row: identical;
 *  - prefill_vs_steps/<context>: one slot primed by prefill, another by
 *    single steps of the same tokens: the K/V (kv_snap_read) and the next
 *    step's logits agree, and the argmax where it is decisive (the
 *    near-tie rule: rows of different batch shapes sum in different orders,
 *    docs/cuda.md "Equality across batch sizes"); a prefill of >=
 *    CU_GEMM_MIN_ROWS positions runs the GEMMs, a short context wraps the
 *    ring inside the prefill;
 *  - prefill_vs_cpu: the CUDA prefill's K/V against the CPU prefill's;
 *  - snapshot_restore: a snapshot of a primed slot restored (in two layer
 *    chunks) into another slot steps exactly like the primed one (same
 *    logits, bit for bit: same K/V bytes, same kernels); snap_info and
 *    stats.snap_bytes count it on the device;
 *  - graph_vs_uncaptured: the same steps (sampling on, batches 1..3 with
 *    padding) on a backend with graphs and one with MOSHID_CU_GRAPHS=0:
 *    identical tokens; and (Kyutai) on the graphs' backend again after a
 *    slot reset, asking for every row's logits (the uncaptured path a
 *    request for logits takes): the same tokens as the replays;
 *  - random_weights: config.json only, weights generated on the device:
 *    tokens in range, the same seed gives the same tokens, another seed
 *    other logits;
 *  - codec: on a model written by moshid-mkmodel (its path in $MKMODEL;
 *    the case is skipped, and says so, without it), the CUDA backend's
 *    Mimi entries (the CPU Mimi on host state per slot) against the CPU
 *    backend's: the same codes and the same PCM, bit for bit, over frames
 *    of two slots and a codec reset;
 *  - checkpoint_f16: the same (f16-exact) values as an f16 file and as an
 *    f32 file: the CUDA backend steps both bit for bit alike (the upload
 *    rounds f16 and f32 to bf16 from the same numbers);
 *  - slot_reset: a new session on a slot reset after a wrapped session
 *    (and after a short one) gives the logits of the same session on a
 *    fresh slot, bit for bit;
 *  - dep_steps: rows asking for 3, 0, 1, 8 sub-steps beside a row asking
 *    for all, same history, one batch (graph, then uncaptured with logits):
 *    the common sub-steps identical, the others -1, their logits untouched;
 *  - invalid_arguments: bad steps (slot out of range or twice, tokens and
 *    targets out of range, target without provided, dep_steps, NaN
 *    temperature, too many rows), prefills, a snapshot, a restore and a
 *    codec call without a codec: each answers its error from the
 *    dispatcher, nothing moves, the next step works;
 *  - batch_max_slots: all 5 slots in one call (the largest bucket, no
 *    padding), two row orders, teacher-forced against the CPU: logit bound
 *    and near-tie rule;
 *  - frame_step/host (and frame_step/device on a GPU): the dispatcher's
 *    frame step (lm_frame_submit/lm_frame_wait) on the CPU backend and the
 *    CUDA backend with the fixture Mimi (tests/fixtures/mimi/tiny), greedy,
 *    on the matvec path: the same codes in, the same tokens and frames out,
 *    the PCM bit for bit (host codec) or within FRAME_PCM_TOL (device);
 *  - snapshot_steady (emulator only: it counts the runtime's allocation
 *    calls, emu_alloc_calls): after one warm-up snapshot, four rounds of
 *    what a persona start does (snapshot a primed slot, restore it into
 *    another, step both, free the snapshot) make no cudaMalloc or cudaFree
 *    (each may synchronise the whole device, stalling every session);
 *  - device1_thread (emulator only, two emulated devices, emu_set_devices):
 *    a backend opened on device 1 by the main thread, with the device
 *    codec when $MKMODEL is there, then driven from another host thread
 *    that never calls cudaSetDevice (as the daemon's engine thread):
 *    prefill, steps, a snapshot and restore, an encode and a decode all
 *    succeed (the backend makes its device current on the calling thread);
 *  - padding_rows (emulator only: emu_set_race_check): 5 rows in the
 *    bucket of 8, on the graph and on the uncaptured path, with the
 *    emulator's write-race check on: no two blocks of a launch store to one
 *    address (three padding rows on the scratch slot write distinct K/V
 *    rows), and the two paths give the same tokens;
 *  - step_kernels/rope_in_qkv (emulator only: its launch table): one
 *    step at B = 1 counted by kernel: on the matvec path with bf16 K/V
 *    (bf16 or int8 weights) RoPE and the ring store run inside the QKV
 *    product's launch, once per layer, with no RoPE launch; with the int8
 *    K/V and on the GEMM path RoPE keeps its own, num_layers launches more;
 *  - open_oom (emulator only: emu_inject_alloc_failure): the backend's
 *    open with its n-th allocation failing, for every n until an open
 *    succeeds: each fails with the thread's last error left clean, and the
 *    backend opened after them steps (a stale cudaErrorMemoryAllocation
 *    would be returned by the first launcher's cudaGetLastError);
 *  - device_error (emulator only: it injects a fault, emu_inject_fault):
 *    a kernel of a graph replay faults (cudaErrorIllegalAddress, sticky);
 *    that step answers MS_ERR_DEVICE naming the call, file:line and the
 *    error, and every later entry answers MS_ERR_DEVICE "unusable after an
 *    earlier device error" with the first message. Runs last (the
 *    emulated device stays faulted until cudaDeviceReset).
 *
 * Tolerances. The CPU runs float32 throughout; the CUDA backend stores the
 * weights and the K/V in bf16 (8 bits of mantissa: relative rounding error
 * up to 2^-9 = 0.2 %), and its GEMMs (CU_GEMM_MIN_ROWS rows and more: the
 * prefill chunks here) round the activations to bf16 too. The tiny models
 * are written with weights that are exactly bf16 values (stored as f32), so
 * the comparison measures the backend's own roundings (K/V, GEMM
 * activations, summation order), not the random model's sensitivity to
 * weight rounding. A logit is a sum over dim terms of O(1) values whose
 * inputs carry ~2^-9 relative error. Observed worst errors (over every
 * entry of every row, normalised by the CPU row's rms): ~1.3e-3 on the
 * matvec path (only the K/V is rounded), ~1.4e-2 on the GEMM path (every
 * product's input rounded too). LOGIT_TOL = 0.03 (3 %) is twice the GEMM
 * path's and far below what one wrong term (a mis-indexed key, a missing
 * position, a wrong window: 13 % and more, tried) costs. Argmax agreement:
 * a flip needs the two best logits within the error. On the random models
 * the logits are like independent draws (see PK_PRIOR), so a few percent
 * of the rows have their two best within the GEMM path's error and flip
 * (per stream down to 0.90, every flip at a margin below 1e-2 rms);
 * on the peaked models the flips are rarer than 1 in 100 on both paths
 * (measured 0.991-1.0 per stream, flips at margins < 1e-3 rms), and a
 * wrong window (two keys missing past the wrap, tried) drops them to
 * 0.96-0.97 besides breaking the logit bound.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "frame.h"
#include "gpu_util.h"
#include "lm.h"
#include "lm_config.h"
#include "lmgen.h"
#include "rng.h"
#include "samp.h"
#include "st.h"
#ifdef MOSHID_CUDA_EMULATOR   /* the emulator's cuda_runtime_api.h: its launch table (step_kernels) */
#include "emu.h"
#endif

extern const lm_backend_ops lm_cuda_backend;   /* cuda/cu_backend.c */
/* Defined by the emulator (tests/gpu/emu/emu.h) only. */
const char *emu_last_kernel(void) __attribute__((weak));
void emu_inject_fault(unsigned n) __attribute__((weak));
void emu_set_quiet(int quiet) __attribute__((weak));
void emu_set_devices(int n) __attribute__((weak));
uint64_t emu_alloc_calls(void) __attribute__((weak));
void emu_inject_alloc_failure(unsigned n) __attribute__((weak));
void emu_set_race_check(int on) __attribute__((weak));

#define LOGIT_TOL 0.03
#define AGREE_MIN 0.99
/* prefill vs steps: the GEMM rows round activations to bf16 (2^-9 each),
 * twice per layer: a few 1e-3 of the values' rms; 5 % is ten times that. */
#define PREFILL_TOL 0.05

/* The tiny model: dimensions chosen so the matvec's vector path (K % 8 ==
 * 0) and its scalar path (the depformer FFN's 44) both run, and the
 * emulator runs a step in well under a second. */
#define T_DIM 32
#define T_HEADS 2
#define T_LAYERS 2
#define T_NQ 16
#define T_CARD 24
#define T_TEXT_CARD 40
#define T_DDIM 16
#define T_DHEADS 2
#define T_DLAYERS 1
#define T_DFF 66

static int n_pass, n_fail;
/* The backend's knobs for a case (cu_backend.c reads them at open):
 * graphs (MOSHID_CU_GRAPHS) and the matvec/GEMM crossover
 * (MOSHID_CU_GEMM_MIN_ROWS). On the emulator most cases run uncaptured with
 * every product a GEMM (the emulated matvec costs a fiber per GPU thread;
 * engine-test covers it kernel by kernel), and the cases that are about the
 * graphs or the matvec path say so; on a device every case runs with the
 * backend's defaults (graphs on, the built-in crossover), except the
 * teacher_forced GEMM cases, which lower the crossover there too. */
static int on_emu;
/* force: the crossover applies on a device too (the teacher_forced GEMM
 * cases: the path under test is cuBLAS's, whatever the batch). */
static void knobs_f(int graphs, int gemm_min, int force) {
    char v[16];
    if (!on_emu && !force) {
        unsetenv("MOSHID_CU_GEMM_MIN_ROWS");
        if (graphs == 0) setenv("MOSHID_CU_GRAPHS", "0", 1);
        else unsetenv("MOSHID_CU_GRAPHS");
        return;
    }
    if (graphs) unsetenv("MOSHID_CU_GRAPHS");
    else setenv("MOSHID_CU_GRAPHS", "0", 1);
    if (gemm_min > 0) {
        snprintf(v, sizeof v, "%d", gemm_min);
        setenv("MOSHID_CU_GEMM_MIN_ROWS", v, 1);
    } else {
        unsetenv("MOSHID_CU_GEMM_MIN_ROWS");
    }
}
static void knobs(int graphs, int gemm_min) { knobs_f(graphs, gemm_min, 0); }

static const char *filter;
static char tmpdir[256];

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double t_begin;
static int begin(const char *name) {
    if (filter && !strstr(name, filter)) return 0;
    printf("--   %s\n", name);
    fflush(stdout);
    t_begin = now_ms();
    return 1;
}

static void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(int ok, const char *name, const char *fmt, ...) {
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%-4s %-36s %s [%.0f ms]\n", ok ? "ok" : "FAIL", name, detail, now_ms() - t_begin);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

static void die(const char *what, const ms_error *e) {
    fprintf(stderr, "backend-test: %s: %s\n", what, e ? e->msg : "");
    exit(1);
}

/* ---- the tiny model ------------------------------------------------------------ */

/* How make_model writes a model (make_model: the defaults, all zero). */
typedef struct mopt {
    int card;     /* audio card (0: T_CARD; the frame case needs the fixture Mimi's 64 bins) */
    int peaked;   /* 1: realistic logit spreads (below) */
    int f16;      /* 0: f32 file of bf16-exact values; 1: f32 file of f16-exact values; 2: the same
                     values as an f16 file */
    int dff;      /* depformer_dim_feedforward (0: T_DFF, whose gated width 44 keeps the bf16
                     depformer off the one-launch chain: 44 % 8 != 0) */
} mopt;

typedef struct mk {
    st_writer *w;
    void **bufs;
    int n;
    uint64_t seed;
    uint32_t tensor;
    const mopt *o;
} mk;

static int gated(int dim, int ff) { return ff == 4 * dim ? 21 * dim / 8 : 2 * ff / 3; }

/* The f16 file's tensors: the float32 values (f16-exact) converted at save. */
static int to_f16(void *ctx, void *dst, size_t nbytes) {
    const float *src = ctx;
    uint16_t *d = dst;
    for (size_t i = 0; i < nbytes / 2; i++) d[i] = st_f32_to_f16(src[i]);
    return MS_OK;
}

/* A tensor of uniform(-a, a) ('u') or constant a ('c') values, each rounded
 * to bf16 (so that the upload does not round them again; mopt.f16: to f16
 * instead). Returns the float32 values (kept until save: make_model edits
 * the peaked models' columns in place before the f16 copy is made). */
static float *add(mk *m, const char *name, char mode, double a, int rows, int cols, int norm) {
    size_t n = (size_t)rows * cols;
    float *b = malloc(n * sizeof *b);
    if (!b) die("out of memory", NULL);
    uint32_t t = m->tensor++;
    for (size_t i = 0; i < n; i++) {
        float v = mode == 'c' ? (float)a : (float)(a * (2.0 * rng_uniform(m->seed, t, 0, (uint32_t)i) - 1.0));
        b[i] = m->o->f16 ? st_f16_to_f32(st_f32_to_f16(v)) : st_bf16_to_f32(st_f32_to_bf16(v));
    }
    m->bufs = realloc(m->bufs, sizeof *m->bufs * (size_t)(m->n + 1));
    m->bufs[m->n++] = b;
    int64_t shape3[3] = {1, 1, cols}, shape2[2] = {rows, cols};
    int rc = m->o->f16 == 2 ? st_writer_add_fn(m->w, name, ST_F16, norm ? 3 : 2, norm ? shape3 : shape2, to_f16, b)
                            : st_writer_add(m->w, name, ST_F32, norm ? 3 : 2, norm ? shape3 : shape2, b);
    if (rc != MS_OK) die(name, NULL);
    return b;
}

static double lin_scale(int fan_in) { return sqrt(3.0 / fan_in); }

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) die(path, NULL);
}

static void config_json(char *cfg, size_t len, int dep_q, int context, int card, int dff) {
    snprintf(cfg, len,
             "{\"dim\": %d, \"text_card\": %d, \"existing_text_padding_id\": 3, \"n_q\": %d, \"dep_q\": %d,"
             " \"card\": %d, \"num_heads\": %d, \"num_layers\": %d, \"hidden_scale\": 4.125, \"causal\": true,"
             " \"context\": %d, \"max_period\": 10000, \"gating\": \"silu\", \"norm\": \"rms_norm_f32\","
             " \"positional_embedding\": \"rope\", \"depformer_dim\": %d, \"depformer_dim_feedforward\": %d,"
             " \"depformer_num_heads\": %d, \"depformer_num_layers\": %d, \"depformer_multi_linear\": true,"
             " \"depformer_context\": %d, \"depformer_max_period\": 10000, \"depformer_gating\": \"silu\","
             " \"depformer_pos_emb\": \"none\", \"depformer_weights_per_step\": true,"
             " \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]}\n",
             T_DIM, T_TEXT_CARD, T_NQ, dep_q, card, T_HEADS, T_LAYERS, context, T_DDIM, dff, T_DHEADS, T_DLAYERS,
             dep_q);
}

/* Realistic logit spreads (mopt.peaked). A random model's head sees a
 * hidden state unrelated to its rows, so its logits are like independent
 * draws of one distribution: the best leads the second by a small fraction
 * of the row's spread (for 40 draws the gap is about 0.35 sigma on average,
 * with most of its density near zero), and a bf16 rounding of a few 1e-3 of
 * the rms flips a few percent of the rows. A trained LM's logits have a few
 * clearly leading tokens: a strong prior (the token frequencies: Moshi's
 * text stream is mostly padding) plus the context. The peaked models build
 * that the way trained transformers carry it: one channel of the residual
 * stream (channel 0) holds a large constant (every input embedding row
 * adds PK_EMB there; the depformer's embeddings PK_DEP), and each head row
 * reads it with weight -PK_PRIOR * ln(1 + rank) (a Zipf prior over a random
 * permutation of the tokens: logit gaps of PK_PRIOR * ln 2, ln 1.5, ...
 * times the channel's value between the first few); the other 31 (15)
 * channels are the random model's, so the context still moves the logits
 * by O(1) and decides among the leading tokens. Every kernel runs on the
 * same data as before; the argmax is simply no longer balanced on a knife's
 * edge for most rows. The values are bf16-exact like the rest. How the
 * constants were set (not to pass, to get the shape described): with
 * PK_PRIOR 1.5 the prior alone decided every row (one winner per stream:
 * an argmax that tests nothing), at 0.5 the context picks among 1-5
 * leading tokens per stream; PK_DEP 2 let the depformer layers flip the
 * channel's sign in some rows, which turns the prior upside down (its
 * dense tail on top: near-ties again), 4 keeps it positive. */
#define PK_EMB 0.5
#define PK_DEP 4.0
#define PK_PRIOR 0.5

static void peak_rows(float *b, int rows, int cols, double v) {
    for (int r = 0; r < rows; r++) b[(size_t)r * cols] = st_bf16_to_f32(st_f32_to_bf16((float)v));
}

static void peak_head(mk *m, float *b, int rows, int cols) {
    int *perm = malloc(sizeof(int) * rows);
    if (!perm) die("out of memory", NULL);
    gu_rng r = {m->seed ^ (0x9E37ULL * (m->tensor + 1))};
    for (int i = 0; i < rows; i++) perm[i] = i;
    for (int i = rows - 1; i > 0; i--) {
        int j = gu_int(&r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < rows; i++)
        b[(size_t)perm[i] * cols] = st_bf16_to_f32(st_f32_to_bf16((float)(-PK_PRIOR * log(1.0 + i))));
    free(perm);
}

/* make_model_o: DIR/config.json + DIR/model.safetensors; returns DIR. */
static const char *make_model_o(const char *tag, int dep_q, int context, int weights, const mopt *o) {
    static char dirs[8][512];
    static int nd;
    char *dir = dirs[nd++ % 8];
    int card = o->card ? o->card : T_CARD;
    snprintf(dir, 512, "%s/%s", tmpdir, tag);
    mkdir(dir, 0700);
    char path[640], cfg[2048];
    const int dff = o->dff ? o->dff : T_DFF;
    config_json(cfg, sizeof cfg, dep_q, context, card, dff);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, cfg);
    if (!weights) return dir;
    mk m = {.w = st_writer_create(), .seed = 0x5eedULL + (uint64_t)dep_q, .o = o};
    char name[160];
    int H = gated(T_DIM, (int)(4.125 * T_DIM)), DH = gated(T_DDIM, dff);
    float *b;
    for (int k = 0; k < T_NQ; k++) {
        snprintf(name, sizeof name, "emb.%d.weight", k);
        b = add(&m, name, 'u', 1.0, card + 1, T_DIM, 0);
        if (o->peaked) peak_rows(b, card + 1, T_DIM, PK_EMB);
    }
    b = add(&m, "text_emb.weight", 'u', 1.0, T_TEXT_CARD + 1, T_DIM, 0);
    if (o->peaked) peak_rows(b, T_TEXT_CARD + 1, T_DIM, PK_EMB);
    b = add(&m, "text_linear.weight", 'u', lin_scale(T_DIM), T_TEXT_CARD, T_DIM, 0);
    if (o->peaked) peak_head(&m, b, T_TEXT_CARD, T_DIM);
    b = add(&m, "out_norm.alpha", 'u', 1.0, 1, T_DIM, 1);
    if (o->peaked) b[0] = 1.0f;
    for (int l = 0; l < T_LAYERS; l++) {
#define LAYER(fmt) (snprintf(name, sizeof name, "transformer.layers.%d." fmt, l), name)
        add(&m, LAYER("norm1.alpha"), 'u', 1.0, 1, T_DIM, 1);
        add(&m, LAYER("norm2.alpha"), 'u', 1.0, 1, T_DIM, 1);
        add(&m, LAYER("self_attn.in_proj_weight"), 'u', lin_scale(T_DIM), 3 * T_DIM, T_DIM, 0);
        add(&m, LAYER("self_attn.out_proj.weight"), 'u', lin_scale(T_DIM), T_DIM, T_DIM, 0);
        add(&m, LAYER("gating.linear_in.weight"), 'u', lin_scale(T_DIM), 2 * H, T_DIM, 0);
        add(&m, LAYER("gating.linear_out.weight"), 'u', lin_scale(H), T_DIM, H, 0);
#undef LAYER
    }
    for (int k = 0; k < dep_q; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        add(&m, name, 'u', lin_scale(T_DIM), T_DDIM, T_DIM, 0);
        snprintf(name, sizeof name, "linears.%d.weight", k);
        b = add(&m, name, 'u', lin_scale(T_DDIM), card, T_DDIM, 0);
        if (o->peaked) peak_head(&m, b, card, T_DDIM);
        if (k < dep_q - 1) {
            snprintf(name, sizeof name, "depformer_emb.%d.weight", k);
            b = add(&m, name, 'u', 1.0, card + 1, T_DDIM, 0);
            if (o->peaked) peak_rows(b, card + 1, T_DDIM, PK_DEP);
        }
    }
    b = add(&m, "depformer_text_emb.weight", 'u', 1.0, T_TEXT_CARD + 1, T_DDIM, 0);
    if (o->peaked) peak_rows(b, T_TEXT_CARD + 1, T_DDIM, PK_DEP);
    for (int l = 0; l < T_DLAYERS; l++) {
#define DLAYER(fmt, ...) (snprintf(name, sizeof name, "depformer.layers.%d." fmt, l, ##__VA_ARGS__), name)
        add(&m, DLAYER("norm1.alpha"), 'u', 1.0, 1, T_DDIM, 1);
        add(&m, DLAYER("norm2.alpha"), 'u', 1.0, 1, T_DDIM, 1);
        add(&m, DLAYER("self_attn.in_proj_weight"), 'u', lin_scale(T_DDIM), dep_q * 3 * T_DDIM, T_DDIM, 0);
        add(&m, DLAYER("self_attn.out_proj.weight"), 'u', lin_scale(T_DDIM), dep_q * T_DDIM, T_DDIM, 0);
        for (int k = 0; k < dep_q; k++) {
            add(&m, DLAYER("gating.%d.linear_in.weight", k), 'u', lin_scale(T_DDIM), 2 * DH, T_DDIM, 0);
            add(&m, DLAYER("gating.%d.linear_out.weight", k), 'u', lin_scale(DH), T_DDIM, DH, 0);
        }
#undef DLAYER
    }
    ms_error e = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_writer_save(m.w, path, &e) != MS_OK) die("st_writer_save", &e);
    st_writer_free(m.w);
    for (int i = 0; i < m.n; i++) free(m.bufs[i]);
    free(m.bufs);
    return dir;
}

static const char *make_model(const char *tag, int dep_q, int context, int weights) {
    static const mopt dflt = {0};
    return make_model_o(tag, dep_q, context, weights, &dflt);
}

/* The 8-bit schemes every backend open_b opens runs (the int8 cases set
 * them around the shared cases, then clear them). */
static int q8_weights, q8_kv;

static lm_backend *open_b(const lm_backend_ops *ops, const char *dir, int slots, uint64_t rnd) {
    lm_backend_opts o = {.max_slots = slots, .threads = 1, .variant = LM_VARIANT_AUTO, .random_weights = rnd,
                         .weights = q8_weights ? LM_WEIGHTS_INT8 : LM_WEIGHTS_STORED,
                         .kv = q8_kv ? LM_KV_INT8 : LM_KV_NATIVE};
    ms_error e = {0};
    lm_backend *b = lm_backend_open(ops, dir, &o, &e);
    if (!b) die(ops->name, &e);
    return b;
}

static void step_or_die(lm_backend *b, lm_step_slot *s, int n) {
    ms_error e = {0};
    if (lm_backend_step(b, s, n, &e) != MS_OK) die("step", &e);
}

/* ---- comparisons ----------------------------------------------------------------- */

/* Rows kept per stream for the margin diagnostics (the medians). */
#define CMP_KEEP 512

typedef struct cmp {
    long n, agree;
    long decisive, decisive_agree;   /* rows whose two best CPU logits lie more than 2 tol rms apart */
    double worst;   /* max |a - b| / rms(b) */
    double flip_margin;              /* largest CPU margin (/ rms) of a row whose argmax differs */
    double margin[CMP_KEEP], err[CMP_KEEP];   /* per row: best - second CPU logit, max |a - b|; / rms */
    uint8_t won[4096];                        /* tokens (ids < 4096) that were a row's CPU argmax */
    int winners;                              /* how many distinct */
} cmp;

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* tol: the case's logit bound; rows whose best CPU logit leads the second
 * by more than 2 tol rms are "decisive" (no error within the bound can
 * flip them). rms is the CPU row's root mean square. */
static void compare(cmp *c, const float *gpu, const float *cpu, int n, double tol) {
    double ss = 0, mx = 0;
    for (int i = 0; i < n; i++) ss += (double)cpu[i] * cpu[i];
    double rms = sqrt(ss / n) + 1e-30;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]);
        if (!(d <= mx)) mx = d;   /* NaN counts as infinite */
        if (d != d) mx = INFINITY;
    }
    int a = argmax(cpu, n);
    double second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != a && cpu[i] > second) second = cpu[i];
    int same = argmax(gpu, n) == a;
    double margin = (cpu[a] - second) / rms;
    if (a < (int)sizeof c->won && !c->won[a]) {
        c->won[a] = 1;
        c->winners++;
    }
    if (c->n < CMP_KEEP) {
        c->margin[c->n] = margin;
        c->err[c->n] = mx / rms;
    }
    c->n++;
    c->agree += same;
    if (!same && margin > c->flip_margin) c->flip_margin = margin;
    if (cpu[a] - second > 2.0 * tol * rms) {
        c->decisive++;
        c->decisive_agree += same;
    }
    if (mx / rms > c->worst) c->worst = mx / rms;
}

static int cmp_dbl(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(const double *v, long n) {
    double t[CMP_KEEP];
    if (n > CMP_KEEP) n = CMP_KEEP;
    if (n <= 0) return 0;
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_dbl);
    return t[n / 2];
}

/* One diagnostic line per stream: agreement, the CPU's top-1/top-2 margin
 * (median, smallest, rows within 2 tol) beside the logit error (median and
 * worst row), and the largest margin a flip had. */
static void cmp_print(const char *stream, const cmp *c, double tol) {
    long kept = c->n < CMP_KEEP ? c->n : CMP_KEEP, close = 0;
    double mn = INFINITY;
    for (long i = 0; i < kept; i++) {
        if (c->margin[i] < mn) mn = c->margin[i];
        close += c->margin[i] <= 2 * tol;
    }
    printf("       %-8s agree %ld/%ld (%.3f), %d distinct winners; margin/rms median %.3f min %.4f, %ld rows <= 2 "
           "tol; err/rms median %.1e worst %.1e; flips' largest margin %.4f\n",
           stream, c->agree, c->n, (double)c->agree / (c->n ? c->n : 1), c->winners, median(c->margin, c->n), mn,
           close, median(c->err, c->n), c->worst, c->flip_margin);
}

/* ---- teacher forcing ------------------------------------------------------------------ */

#define TF_SLOTS 3

/* Slots stepped at step t: slot 0 always, slot 1 from t = 3, slot 2 from
 * t = 7 (so the positions differ), in the order 2, 0, 1 (rows are not
 * slot-ordered). */
static int tf_batch(int t, int *slots) {
    int n = 0;
    if (t >= 7) slots[n++] = 2;
    slots[n++] = 0;
    if (t >= 3) slots[n++] = 1;
    return n;
}

/* gemm_min: the emulator's crossover (1: every product a GEMM; 0: the
 * default, so batches of 1-3 take the matvec), dev_gemm: on a device too;
 * steps from schedule step t0 on; dep_steps sub-steps compared (-1: all).
 * Acceptance, every stream: the logit bound and the near-tie rule (every
 * row whose best logit leads by more than 2 tol rms agrees); plain: also
 * argmax agreement >= 99 % of the rows. The matvec path keeps the
 * activations in f32 and meets the plain rule even on the random models;
 * the GEMM path rounds them to bf16 (about 10x the error), which the random
 * models' tie-prone logits do not survive (their lowest stream: 0.90-0.97),
 * so there plain is asked of the peaked models only. */
static void tf_run(const char *name, const char *dir, int context, int gemm_min, int dev_gemm, int t0, int steps,
                   int dep_steps, double tol, int plain);

static void test_teacher_forced(const char *variant, const char *path, int peaked, int dep_q, int context,
                                int gemm_min, int t0, int steps, int dep_steps) {
    char name[96];
    snprintf(name, sizeof name, "teacher_forced/%s%s/%s", variant, peaked ? "-peaked" : "", path);
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "tf-%s%s", variant, peaked ? "-pk" : "");
    mopt o = {.peaked = peaked};
    /* the plain rule (>= 99 % per stream) on the peaked models on both paths
     * and on the random ones on the matvec; the near-tie rule alone on the
     * random models' GEMM path */
    int plain = peaked || gemm_min != 1;
    tf_run(name, make_model_o(tag, dep_q, context, 1, &o), context, gemm_min, gemm_min == 1, t0, steps, dep_steps,
           LOGIT_TOL, plain);
}

/* The same on moshid-mkmodel's demo LM, whose f32 weights are not
 * bf16-exact: the upload's rounding (up to 2^-9 relative per weight) comes
 * on top of the activations' on the GEMM path, about doubling the error
 * (observed: worst 2.6-3.2 % of the rms over 2048-entry rows, the maximum
 * of thousands of values), so the bound is MK_LOGIT_TOL = 6 %, still a
 * fifth of what one wrong term costs. */
#define MK_LOGIT_TOL 0.06
static void test_teacher_forced_mkmodel(int dep_q) {
    char name[96];
    snprintf(name, sizeof name, "teacher_forced/mkmodel-dep%d/gemm", dep_q);
    if (!begin(name)) return;
    const char *mk = getenv("MKMODEL");
    if (!mk || access(mk, X_OK) != 0) {
        printf("skip %-36s MKMODEL not set or not executable\n", name);
        return;
    }
    char dir[600], cmd[1400], lm[640];
    snprintf(dir, sizeof dir, "%s/mk-dep%d", tmpdir, dep_q);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --text-card 48 --dep-q %d --context 8 --lm-only >/dev/null 2>&1", mk,
             dir, dep_q);
    if (system(cmd) != 0) {
        result(0, name, "%s failed", cmd);
        return;
    }
    snprintf(lm, sizeof lm, "%s/lm", dir);
    /* on a device the default crossover (the matvec for these batches) and
     * the plain rule, as before; on the emulator the GEMMs (its matvec is
     * too slow for 2048-token heads) and the near-tie rule */
    tf_run(name, lm, 8, 1, 0, 4, 8, -1, MK_LOGIT_TOL, !on_emu);   /* slot 0 reaches 8: the ring's end */
}

static void tf_run(const char *name, const char *dir, int context, int gemm_min, int dev_gemm, int t0, int steps,
                   int dep_steps, double tol, int plain) {
    knobs_f(0, gemm_min, dev_gemm);
    lm_backend *cpu = open_b(&lm_cpu_backend, dir, 4, 0), *gpu = open_b(&lm_cuda_backend, dir, 4, 0);
    const lm_config *g = &cpu->cfg;
    int ns = g->n_streams, nt = 1 + g->dep_q;
    cmp text = {0}, audio[LM_MAX_DEP_Q] = {{0}};
    int tokens[TF_SLOTS][LM_MAX_STREAMS];
    for (int s = 0; s < TF_SLOTS; s++)
        for (int i = 0; i < ns; i++) tokens[s][i] = i == 0 ? g->text_card : g->card;   /* the initial tokens */
    float *tl_c = malloc(sizeof(float) * TF_SLOTS * g->text_card), *tl_g = malloc(sizeof(float) * TF_SLOTS * g->text_card);
    float *al_c = malloc(sizeof(float) * TF_SLOTS * g->dep_q * g->card),
          *al_g = malloc(sizeof(float) * TF_SLOTS * g->dep_q * g->card);
    gu_rng rr = {42};
    for (int t = t0; t < t0 + steps; t++) {
        int sl[TF_SLOTS], n = tf_batch(t, sl);
        lm_step_slot sc[TF_SLOTS], sg[TF_SLOTS];
        int target[TF_SLOTS][LM_MAX_DEP_Q + 1];
        uint8_t prov[TF_SLOTS][LM_MAX_DEP_Q + 1];
        memset(sc, 0, sizeof sc);
        for (int i = 0; i < n; i++) {
            int s = sl[i];
            lm_step_slot *x = &sc[i];
            x->slot = s;
            memcpy(x->tokens, tokens[s], sizeof(int) * ns);
            lm_samp_defaults(&x->samp, 1000 + s);
            x->step = (uint64_t)t;
            x->dep_steps = dep_steps;
            x->text_logits = tl_c + (size_t)i * g->text_card;
            x->audio_logits = al_c + (size_t)i * g->dep_q * g->card;
        }
        /* the CPU's free-running pass gives the trace */
        step_or_die(cpu, sc, n);
        /* both backends then step teacher-forced on it: the CPU again from
         * a second copy would be the same as the pass above, since forcing
         * its own samples changes nothing; the GPU gets the CPU's tokens as
         * forced targets */
        for (int i = 0; i < n; i++) {
            target[i][0] = sc[i].out_text;
            for (int k = 0; k < g->dep_q; k++) target[i][1 + k] = sc[i].out_audio[k];
            for (int k = 0; k <= g->dep_q; k++) prov[i][k] = k == 0 || sc[i].out_audio[k - 1] >= 0;
            sg[i] = sc[i];
            sg[i].target = target[i];
            sg[i].provided = prov[i];
            sg[i].text_logits = tl_g + (size_t)i * g->text_card;
            sg[i].audio_logits = al_g + (size_t)i * g->dep_q * g->card;
        }
        step_or_die(gpu, sg, n);
        for (int i = 0; i < n; i++) {
            compare(&text, tl_g + (size_t)i * g->text_card, tl_c + (size_t)i * g->text_card, g->text_card, tol);
            for (int k = 0; k < (dep_steps < 0 ? g->dep_q : dep_steps); k++)
                compare(&audio[k], al_g + ((size_t)i * g->dep_q + k) * g->card,
                        al_c + ((size_t)i * g->dep_q + k) * g->card, g->card, tol);
            /* next inputs: the CPU's text and generated audio, random user streams */
            int s = sl[i];
            tokens[s][0] = sc[i].out_text;
            for (int q = 0; q < g->n_q; q++)
                tokens[s][1 + q] = q < g->dep_q && sc[i].out_audio[q] >= 0 ? sc[i].out_audio[q] : gu_int(&rr, 0, g->card - 1);
        }
        (void)nt;
    }
    int nd = dep_steps < 0 ? g->dep_q : dep_steps;
    cmp *all[1 + LM_MAX_DEP_Q];
    all[0] = &text;
    for (int k = 0; k < nd; k++) all[1 + k] = &audio[k];
    int ok = 1;
    double worst = 0, min_agree = 1;
    long dec = 0, dec_agree = 0;
    for (int i = 0; i <= nd; i++) {
        const cmp *c = all[i];
        /* every rule: the logit bound, and no decisive row flips (the
         * near-tie rule); the plain rule on top: >= 99 % of all rows */
        ok = ok && c->n > 0 && c->worst <= tol && c->decisive_agree == c->decisive &&
             (!plain || c->agree >= AGREE_MIN * c->n);
        if (c->worst > worst) worst = c->worst;
        double a = (double)c->agree / c->n;
        if (a < min_agree) min_agree = a;
        dec += c->decisive;
        dec_agree += c->decisive_agree;
        char sn[16];
        if (i == 0) snprintf(sn, sizeof sn, "text");
        else snprintf(sn, sizeof sn, "audio%d", i - 1);
        cmp_print(sn, c, tol);
    }
    result(ok, name,
           "%d streams x %ld rows: argmax agree >= %.3f per stream (%s), decisive rows %ld/%ld; worst logit err "
           "%.2e (tol %.2g); text err %.2e; slot 0 at %lld (context %d)",
           1 + nd, text.n, min_agree, plain ? "need 0.99" : "near-tie rule only: bf16 activations on random logits",
           dec_agree, dec, worst, tol, text.worst, (long long)lm_backend_pos(gpu, 0), context);
    free(tl_c); free(tl_g); free(al_c); free(al_g);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

/* ---- the sampler on the device's own logits ------------------------------------------ */

static void test_sampler(const char *variant, int dep_q) {
    char name[96];
    snprintf(name, sizeof name, "sampler/%s", variant);
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "tf-%s", variant);
    const char *dir = make_model(tag, dep_q, 12, 1);
    knobs(0, 1);
    lm_backend *gpu = open_b(&lm_cuda_backend, dir, 4, 0);
    const lm_config *g = &gpu->cfg;
    int V = g->text_card > g->card ? g->text_card : g->card;
    int *scratch = malloc(sizeof(int) * V);
    float *tl = malloc(sizeof(float) * 3 * g->text_card), *al = malloc(sizeof(float) * 3 * g->dep_q * g->card);
    /* per-row parameters: official, greedy text, top-k off, top-1 */
    const float temps[3][2] = {{0.7f, 0.8f}, {0.0f, 1.3f}, {1.0f, 0.5f}};
    const int topks[3][2] = {{25, 250}, {0, 0}, {1, 3}};
    long rows = 0, same = 0, non_argmax = 0;
    int bad = 0;
    int tok[3][LM_MAX_STREAMS];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < g->n_streams; i++) tok[s][i] = i == 0 ? g->text_card : g->card;
    for (int t = 0; t < 4 && !bad; t++) {
        lm_step_slot ss[3];
        memset(ss, 0, sizeof ss);
        for (int i = 0; i < 3; i++) {
            ss[i].slot = i;
            memcpy(ss[i].tokens, tok[i], sizeof tok[i]);
            ss[i].samp = (lm_samp){.text_temp = temps[i][0], .text_topk = topks[i][0], .audio_temp = temps[i][1],
                                   .audio_topk = topks[i][1], .seed = 77 + (uint64_t)i * 0x9E3779B97F4A7C15ULL,
                                   .audio_seed = 5 + (uint64_t)i};
            ss[i].step = (uint64_t)t * 1000003u + (1ULL << 33);
            ss[i].dep_steps = -1;
            ss[i].text_logits = tl + (size_t)i * g->text_card;
            ss[i].audio_logits = al + (size_t)i * g->dep_q * g->card;
        }
        step_or_die(gpu, ss, 3);
        for (int i = 0; i < 3 && !bad; i++) {
            const lm_step_slot *s = &ss[i];
            int want = samp_topk(s->text_logits, g->text_card, s->samp.text_temp, s->samp.text_topk, s->samp.seed, s->step,
                                 SAMP_STREAM_TEXT, scratch);
            rows++;
            same += want == s->out_text;
            non_argmax += want != argmax(s->text_logits, g->text_card);
            if (want != s->out_text) bad = 1;
            for (int k = 0; k < g->dep_q && !bad; k++) {
                const float *lg = s->audio_logits + (size_t)k * g->card;
                int w = samp_topk(lg, g->card, s->samp.audio_temp, s->samp.audio_topk, s->samp.audio_seed, s->step,
                                  SAMP_STREAM_AUDIO(k), scratch);
                rows++;
                same += w == s->out_audio[k];
                non_argmax += w != argmax(lg, g->card);
                if (w != s->out_audio[k]) bad = 1;
            }
            tok[i][0] = s->out_text;
            for (int q = 0; q < g->n_q; q++) tok[i][1 + q] = q < g->dep_q ? s->out_audio[q] : (q * 7 + t) % g->card;
        }
    }
    /* teeth: sampling must really have drawn tokens other than the argmax */
    int ok = !bad && same == rows && non_argmax > rows / 10;
    result(ok, name, "%ld/%ld tokens identical to samp_topk on the returned logits (%ld not the argmax)", same, rows,
           non_argmax);
    free(scratch); free(tl); free(al);
    lm_backend_close(gpu);
}

/* ---- prefill ----------------------------------------------------------------------------- */

static void rand_tokens(int *tok, int P, const lm_config *g, uint64_t seed) {
    gu_rng r = {seed};
    for (int p = 0; p < P; p++)
        for (int s = 0; s < g->n_streams; s++)
            tok[(size_t)p * g->n_streams + s] = s == 0 ? gu_int(&r, 0, g->text_card - 1) : gu_int(&r, 0, g->card - 1);
}

static double kv_err(lm_backend *a, int sa, lm_backend *b, int sb, int P) {
    const lm_config *g = &a->cfg;
    ms_error e = {0};
    lm_kv_snap *x = NULL, *y = NULL;
    if (lm_backend_kv_snapshot(a, sa, P, &x, &e) || lm_backend_kv_snapshot(b, sb, P, &y, &e)) die("snapshot", &e);
    float *fa = malloc(sizeof(float) * P * g->dim), *fb = malloc(sizeof(float) * P * g->dim);
    double worst = 0;
    for (int l = 0; l < g->num_layers; l++)
        for (int w = 0; w < 2; w++) {
            if (lm_backend_kv_snap_read(a, x, l, w, fa, &e) || lm_backend_kv_snap_read(b, y, l, w, fb, &e))
                die("snap_read", &e);
            for (int p = 0; p < P; p++) {
                double ss = 0, mx = 0;
                for (int d = 0; d < g->dim; d++) {
                    double v = fb[(size_t)p * g->dim + d], dd = fabs(fa[(size_t)p * g->dim + d] - v);
                    ss += v * v;
                    if (!(dd <= mx)) mx = dd != dd ? INFINITY : dd;
                }
                double r = mx / (sqrt(ss / g->dim) + 1e-30);
                if (r > worst) worst = r;
            }
        }
    lm_backend_kv_snap_free(a, x);
    lm_backend_kv_snap_free(b, y);
    free(fa);
    free(fb);
    return worst;
}

/* One step of slot s with tokens tok and dep_steps 0, its text logits to out. */
static void probe_step(lm_backend *b, int slot, const int *tok, float *out, int n_streams) {
    lm_step_slot s;
    memset(&s, 0, sizeof s);
    s.slot = slot;
    memcpy(s.tokens, tok, sizeof(int) * n_streams);
    lm_samp_greedy(&s.samp);
    s.dep_steps = 0;
    s.text_logits = out;
    step_or_die(b, &s, 1);
}

/* Slot 0 primed by prefill of P positions, slot 1 by P single steps; then
 * (when P <= context) their K/V, and one more step of each. */
static void test_prefill_steps(int context, int P, int gemm_min) {
    char name[96];
    snprintf(name, sizeof name, "%sprefill_vs_steps/ctx%d_P%d", q8_kv ? "int8/" : "", context, P);
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "pf-%d", context);
    const char *dir = make_model(tag, 8, context, 1);
    knobs(0, gemm_min);
    lm_backend *gpu = open_b(&lm_cuda_backend, dir, 2, 0);
    const lm_config *g = &gpu->cfg;
    int *tok = malloc(sizeof(int) * (P + 1) * g->n_streams);
    rand_tokens(tok, P + 1, g, 99);
    ms_error e = {0};
    if (lm_backend_prefill(gpu, 0, 0, P, tok, NULL, &e) != MS_OK) die("prefill", &e);
    float *la = malloc(sizeof(float) * g->text_card), *lb = malloc(sizeof(float) * g->text_card);
    for (int p = 0; p < P; p++) probe_step(gpu, 1, tok + (size_t)p * g->n_streams, lb, g->n_streams);
    double kerr = P <= context ? kv_err(gpu, 0, gpu, 1, P) : 0;
    int pos_ok = lm_backend_pos(gpu, 0) == P && lm_backend_pos(gpu, 1) == P;
    probe_step(gpu, 0, tok + (size_t)P * g->n_streams, la, g->n_streams);
    probe_step(gpu, 1, tok + (size_t)P * g->n_streams, lb, g->n_streams);
    cmp c = {0};
    compare(&c, la, lb, g->text_card, PREFILL_TOL);
    int ok = pos_ok && kerr <= PREFILL_TOL && c.worst <= PREFILL_TOL && c.decisive_agree == c.decisive;
    result(ok, name, "K/V err %.2e, next-step logit err %.2e (tol %.2g), argmax %s (%s)%s", kerr, c.worst, PREFILL_TOL,
           c.agree ? "same" : "differs", c.decisive ? "decisive: must agree" : "a near tie: may differ",
           pos_ok ? "" : ", positions wrong");
    free(tok); free(la); free(lb);
    lm_backend_close(gpu);
}

static void test_prefill_cpu(void) {
    const char *name = "prefill_vs_cpu";
    if (!begin(name)) return;
    const char *dir = make_model("pf-cpu", 16, 40, 1);
    knobs(0, 1);
    lm_backend *cpu = open_b(&lm_cpu_backend, dir, 1, 0), *gpu = open_b(&lm_cuda_backend, dir, 1, 0);
    const lm_config *g = &gpu->cfg;
    int P = 30;
    int *tok = malloc(sizeof(int) * P * g->n_streams);
    rand_tokens(tok, P, g, 7);
    ms_error e = {0};
    /* two calls: the second continues after the first (pos0 > 0: attention
     * against the slot's earlier rows) */
    if (lm_backend_prefill(cpu, 0, 0, 20, tok, NULL, &e) || lm_backend_prefill(gpu, 0, 0, 20, tok, NULL, &e) ||
        lm_backend_prefill(cpu, 0, 20, P - 20, tok + 20 * g->n_streams, NULL, &e) ||
        lm_backend_prefill(gpu, 0, 20, P - 20, tok + 20 * g->n_streams, NULL, &e))
        die("prefill", &e);
    double kerr = kv_err(gpu, 0, cpu, 0, P);
    result(kerr <= PREFILL_TOL, name, "K/V of 30 positions (20 + 10), PersonaPlex: err %.2e (tol %.2g)", kerr,
           PREFILL_TOL);
    free(tok);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

/* ---- snapshots ------------------------------------------------------------------------------ */

static void test_snapshot(void) {
    const char *name = q8_kv ? "int8/snapshot_restore" : "snapshot_restore";
    if (!begin(name)) return;
    const char *dir = make_model("snap", 8, 24, 1);
    knobs(0, 1);
    lm_backend *gpu = open_b(&lm_cuda_backend, dir, 3, 0);
    const lm_config *g = &gpu->cfg;
    int P = 10;
    int *tok = malloc(sizeof(int) * (P + 3) * g->n_streams);
    rand_tokens(tok, P + 3, g, 3);
    ms_error e = {0};
    lm_kv_snap *snap = NULL;
    /* slot 2 holds unrelated K/V first: the restore must overwrite it */
    if (lm_backend_prefill(gpu, 2, 0, 12, tok, NULL, &e) || lm_backend_prefill(gpu, 0, 0, P, tok, NULL, &e) ||
        lm_backend_kv_snapshot(gpu, 0, P, &snap, &e))
        die("prime", &e);
    lm_backend_stats st;
    lm_snap_info info;
    lm_backend_stats_get(gpu, &st);
    lm_backend_kv_snap_info(gpu, snap, &info);
    int acct = info.where == LM_MEM_DEVICE && info.positions == P && st.snap_bytes == info.bytes &&
               info.bytes == 2 * (size_t)g->num_layers * P *
                                 (q8_kv ? (size_t)g->dim + (size_t)g->num_heads * sizeof(float) : (size_t)g->dim * 2);
    if (lm_backend_kv_restore_layers(gpu, 2, snap, 0, 1, &e) ||
        lm_backend_kv_restore_layers(gpu, 2, snap, 1, g->num_layers, &e))
        die("restore", &e);
    int pos_ok = lm_backend_pos(gpu, 2) == P;
    /* three more steps of both, in one batch each (rows 0 and 2) */
    int same = 1;
    float *lg = malloc(sizeof(float) * 2 * g->text_card);
    for (int t = 0; t < 3; t++) {
        lm_step_slot s[2];
        memset(s, 0, sizeof s);
        for (int i = 0; i < 2; i++) {
            s[i].slot = i ? 2 : 0;
            memcpy(s[i].tokens, tok + (size_t)(P + t) * g->n_streams, sizeof(int) * g->n_streams);
            lm_samp_defaults(&s[i].samp, 11);
            s[i].step = (uint64_t)t;
            s[i].dep_steps = -1;
            s[i].text_logits = lg + (size_t)i * g->text_card;
        }
        step_or_die(gpu, s, 2);
        same = same && !memcmp(lg, lg + g->text_card, sizeof(float) * g->text_card) && s[0].out_text == s[1].out_text &&
               !memcmp(s[0].out_audio, s[1].out_audio, sizeof(int) * g->dep_q);
    }
    lm_backend_kv_snap_free(gpu, snap);
    lm_backend_stats_get(gpu, &st);
    int freed = st.snap_bytes == 0;
    result(same && acct && pos_ok && freed, name,
           "restored slot steps bit-identically: %s; snapshot %zu bytes on the device, counted %s; freed %s",
           same ? "yes" : "NO", info.bytes, acct ? "yes" : "NO", freed ? "yes" : "NO");
    free(tok);
    free(lg);
    lm_backend_close(gpu);
}

/* ---- steady state: no allocation calls ------------------------------------------------------------ */

/* One persona start on slot 1 from slot 0's first P positions: snapshot,
 * restore, a step of both, free; slot 0 primed again with its Pfull
 * positions. */
static void persona_round(lm_backend *b, int P, int Pfull, const int *tok, int t) {
    const lm_config *g = &b->cfg;
    ms_error e = {0};
    lm_kv_snap *snap = NULL;
    if (lm_backend_kv_snapshot(b, 0, P, &snap, &e) || lm_backend_kv_restore_layers(b, 1, snap, 0, g->num_layers, &e))
        die("persona round", &e);
    lm_step_slot s[2];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 2; i++) {
        s[i].slot = i;
        memcpy(s[i].tokens, tok, sizeof(int) * g->n_streams);
        lm_samp_defaults(&s[i].samp, 7);
        s[i].step = (uint64_t)t;
        s[i].dep_steps = -1;
    }
    step_or_die(b, s, 2);
    lm_backend_reset_slot(b, 0, &e);
    if (lm_backend_prefill(b, 0, 0, Pfull, tok, NULL, &e)) die("prefill", &e);
    lm_backend_kv_snap_free(b, snap);
}

static void test_snapshot_steady(void) {
    const char *name = "snapshot_steady";
    if (!begin(name)) return;
    if (!emu_alloc_calls) {
        printf("skip %-36s the emulator counts allocation calls; a device has no such counter\n", name);
        return;
    }
    const char *dir = make_model("steady", 8, 24, 1);
    knobs(1, 1);   /* graphs on: the warm-up round captures them */
    lm_backend *gpu = open_b(&lm_cuda_backend, dir, 2, 0);
    const lm_config *g = &gpu->cfg;
    int P = 10;
    int *tok = malloc(sizeof(int) * P * g->n_streams);
    rand_tokens(tok, P, g, 5);
    ms_error e = {0};
    if (lm_backend_prefill(gpu, 0, 0, P, tok, NULL, &e)) die("prime", &e);
    persona_round(gpu, P, P, tok, 0);   /* warm-up: the first snapshot buffer, the graphs */
    unsigned long long a0 = (unsigned long long)emu_alloc_calls();
    for (int t = 1; t <= 4; t++) persona_round(gpu, t == 3 ? P - 1 : P, P, tok, t);   /* one shorter snapshot */
    unsigned long long calls = (unsigned long long)emu_alloc_calls() - a0;
    result(calls == 0, name, "4 persona rounds (snapshot, restore, step, free) after a warm-up: %llu allocation calls "
           "(cudaMalloc/cudaFree/host allocations; 0 expected)", calls);
    free(tok);
    lm_backend_close(gpu);
}

/* ---- a device other than 0, used from another host thread --------------------------------------- */

typedef struct dev1_job {
    lm_backend *b;
    int has_codec;
    int rc;
    char msg[512];
} dev1_job;

static void *dev1_thread(void *arg) {
    dev1_job *j = arg;
    lm_backend *b = j->b;
    const lm_config *g = &b->cfg;
    ms_error e = {0};
    int P = 6;
    int *tok = malloc(sizeof(int) * P * g->n_streams);
    rand_tokens(tok, P, g, 9);
    lm_kv_snap *snap = NULL;
    j->rc = lm_backend_prefill(b, 0, 0, P, tok, NULL, &e);
    if (!j->rc) j->rc = lm_backend_kv_snapshot(b, 0, P, &snap, &e);
    if (!j->rc) j->rc = lm_backend_kv_restore_layers(b, 1, snap, 0, g->num_layers, &e);
    for (int t = 0; t < 3 && !j->rc; t++) {
        lm_step_slot s[2];
        memset(s, 0, sizeof s);
        for (int i = 0; i < 2; i++) {
            s[i].slot = i;
            memcpy(s[i].tokens, tok, sizeof(int) * g->n_streams);
            lm_samp_defaults(&s[i].samp, 3);
            s[i].step = (uint64_t)t;
            s[i].dep_steps = -1;
        }
        j->rc = lm_backend_step(b, s, 2, &e);
    }
    if (snap) lm_backend_kv_snap_free(b, snap);
    if (!j->rc && j->has_codec) {
        float *pcm = calloc(2 * MS_FRAME_SAMPLES, sizeof(float)), *out = malloc(sizeof(float) * 2 * MS_FRAME_SAMPLES);
        int codes[2 * 32], slots[2] = {0, 1};
        for (int i = 0; i < 2 * MS_FRAME_SAMPLES; i++) pcm[i] = 0.2f * sinf(0.02f * (float)i);
        j->rc = lm_backend_mimi_encode(b, slots, 2, pcm, codes, &e);
        if (!j->rc) j->rc = lm_backend_mimi_decode(b, slots, 2, codes, out, &e);
        free(pcm);
        free(out);
    }
    snprintf(j->msg, sizeof j->msg, "%s", j->rc ? e.msg : "");
    free(tok);
    return NULL;
}

static void test_device1_thread(void) {
    const char *name = "device1_thread";
    if (!begin(name)) return;
    if (!emu_set_devices) {
        printf("skip %-36s needs two devices: the emulator's two-device mode\n", name);
        return;
    }
    char dir[600], cmd[1400], lm[640], mimi[640], mcfg[640];
    const char *mk = getenv("MKMODEL");
    int has_codec = mk && access(mk, X_OK) == 0;
    lm_backend_opts o = {.max_slots = 2, .threads = 1, .variant = LM_VARIANT_AUTO, .device = 1};
    if (has_codec) {
        snprintf(dir, sizeof dir, "%s/mk1", tmpdir);
        snprintf(cmd, sizeof cmd, "'%s' --out '%s' --text-card 48 --dep-q 8 --context 16 >/dev/null", mk, dir);
        if (system(cmd) != 0) {
            result(0, name, "%s failed", cmd);
            return;
        }
        snprintf(lm, sizeof lm, "%s/lm", dir);
        snprintf(mimi, sizeof mimi, "%s/mimi.safetensors", dir);
        snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
        o.mimi = mimi;
        o.mimi_config = mcfg;
    } else {
        snprintf(lm, sizeof lm, "%s", make_model("dev1", 8, 24, 1));
    }
    knobs(0, 1);
    emu_set_devices(2);
    ms_error e = {0};
    lm_backend *b = lm_backend_open(&lm_cuda_backend, lm, &o, &e);
    if (!b) die("open on device 1", &e);
    dev1_job j = {.b = b, .has_codec = has_codec};
    pthread_t t;
    if (pthread_create(&t, NULL, dev1_thread, &j) != 0 || pthread_join(t, NULL) != 0) die("pthread_create", NULL);
    lm_backend_close(b);
    cudaSetDevice(0);
    emu_set_devices(1);
    result(j.rc == MS_OK, name, "opened on device 1, driven from a thread that never set it: prefill, 3 steps, "
           "snapshot, restore%s: %s", has_codec ? ", device codec encode + decode" : " (no $MKMODEL: no codec)",
           j.rc ? j.msg : "ok");
}

/* ---- graphs ------------------------------------------------------------------------------------ */

/* The same schedule on b: returns a hash of every sampled token (logits
 * 1: every row's logits asked for, the uncaptured path; 2: and hashed). */
static uint64_t graph_run(lm_backend *b, int steps, int dep_steps, int logits) {
    const lm_config *g = &b->cfg;
    uint64_t h = 1469598103934665603ULL;
    float *tl = logits ? malloc(sizeof(float) * TF_SLOTS * g->text_card) : NULL;
    float *al = logits ? malloc(sizeof(float) * TF_SLOTS * g->dep_q * g->card) : NULL;
    int tok[TF_SLOTS][LM_MAX_STREAMS];
    for (int s = 0; s < TF_SLOTS; s++)
        for (int i = 0; i < g->n_streams; i++) tok[s][i] = i == 0 ? g->text_card : g->card;
    for (int t = 0; t < steps; t++) {
        int sl[TF_SLOTS], n = tf_batch(t + 4, sl);   /* batches 2, 2, 2, 3, ... */
        lm_step_slot s[TF_SLOTS];
        memset(s, 0, sizeof s);
        for (int i = 0; i < n; i++) {
            s[i].slot = sl[i];
            memcpy(s[i].tokens, tok[sl[i]], sizeof tok[0]);
            lm_samp_defaults(&s[i].samp, 500 + (uint64_t)sl[i]);
            s[i].step = (uint64_t)t;
            s[i].dep_steps = dep_steps;
            if (logits) {
                s[i].text_logits = tl + (size_t)i * g->text_card;
                s[i].audio_logits = al + (size_t)i * g->dep_q * g->card;
            }
        }
        step_or_die(b, s, n);
        if (logits == 2) {
            const unsigned char *p[2] = {(const unsigned char *)tl, (const unsigned char *)al};
            const size_t nb[2] = {sizeof(float) * n * g->text_card, sizeof(float) * n * g->dep_q * g->card};
            for (int v = 0; v < 2; v++)
                for (size_t i = 0; i < nb[v]; i++) h = (h ^ p[v][i]) * 1099511628211ULL;
        }
        for (int i = 0; i < n; i++) {
            h = (h ^ (uint64_t)(s[i].out_text + 1)) * 1099511628211ULL;
            for (int k = 0; k < g->dep_q; k++) h = (h ^ (uint64_t)(s[i].out_audio[k] + 2)) * 1099511628211ULL;
            tok[sl[i]][0] = s[i].out_text;
            for (int q = 0; q < g->n_q; q++) tok[sl[i]][1 + q] = q < g->dep_q && s[i].out_audio[q] >= 0 ? s[i].out_audio[q] : q;
        }
    }
    free(tl);
    free(al);
    return h;
}

static void test_graphs(const char *variant, int dep_q, int dep_steps) {
    char name[96];
    snprintf(name, sizeof name, "graph_vs_uncaptured/%s", variant);
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "gr-%s", variant);
    const char *dir = make_model(tag, dep_q, 6, 1);
    knobs(1, 1);
    lm_backend *a = open_b(&lm_cuda_backend, dir, 4, 0);
    knobs(0, 1);
    lm_backend *b = open_b(&lm_cuda_backend, dir, 4, 0);
    int steps = 8;   /* slot 0 reaches 8: its ring of 6 wraps */
    uint64_t ha = graph_run(a, steps, dep_steps, 0), hb = graph_run(b, steps, dep_steps, 0);
    /* requested logits take the uncaptured path on the graphs' backend: the
     * same schedule again on a's slots, reset, asking for every row's logits */
    ms_error e = {0};
    uint64_t hc = ha;
    if (dep_steps < 0) {   /* once (Kyutai): the uncaptured path itself is b's */
        for (int s = 0; s < TF_SLOTS; s++)
            if (lm_backend_reset_slot(a, s, &e) != MS_OK) die("reset_slot", &e);
        hc = graph_run(a, steps, dep_steps, 1);
    }
    result(ha == hb && ha == hc, name,
           "%d steps (batches of 2 and 3 in buckets 2 and 4, dep_steps %d): replayed vs uncaptured tokens %s; with "
           "logits requested (uncaptured, after a slot reset) %s",
           steps, dep_steps, ha == hb ? "identical" : "DIFFER",
           dep_steps >= 0 ? "not run" : ha == hc ? "identical" : "DIFFER");
    lm_backend_close(a);
    lm_backend_close(b);
}

#ifdef MOSHID_CUDA_EMULATOR
/* Kernels the emulator has run (graph replays' included). */
static uint64_t emu_kernels_run(void) {
    emu_stats st;
    emu_stats_get(&st);
    return st.launches;
}
#endif

/* The depformer sub-step as one launch (cu_dep_chain) inside the backend:
 * a backend with it (the default) against one with MOSHID_CU_DEP_CHAIN=0,
 * graphs on, the matvec path (the backend's own crossover): the same
 * tokens from graph replays (batches of 2 and 3), the same logits bit for
 * bit on the uncaptured path; and on the emulator the kernels of a batch-1
 * step replay: per sub-step the chain and its sampler, where without the
 * chain 4 per depformer layer and the head's run instead of the chain
 * (dep_q x 4 x layers fewer). w8, kv8: the int8 schemes; dff: the depformer's
 * feed-forward (the bf16 chain needs its gated width % 8 == 0). */
static void test_dep_chain(const char *scheme, int w8, int kv8, int dff) {
    char name[96];
    snprintf(name, sizeof name, "dep_chain/%s", scheme);
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "chain-%s", scheme);
    const mopt mo = {.dff = dff};
    const int dep_q = 8;
    const char *dir = make_model_o(tag, dep_q, 6, 1, &mo);
    q8_weights = w8;
    q8_kv = kv8;
    knobs(1, 0);
    const char *was = getenv("MOSHID_CU_DEP_CHAIN");
    char saved[16] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    unsetenv("MOSHID_CU_DEP_CHAIN");
    lm_backend *a = open_b(&lm_cuda_backend, dir, 4, 0);
    setenv("MOSHID_CU_DEP_CHAIN", "0", 1);
    lm_backend *b = open_b(&lm_cuda_backend, dir, 4, 0);
    if (was) setenv("MOSHID_CU_DEP_CHAIN", saved, 1);
    else unsetenv("MOSHID_CU_DEP_CHAIN");
    const int steps = 3, dep_steps = 2;
    uint64_t ha = graph_run(a, steps, dep_steps, 0), hb = graph_run(b, steps, dep_steps, 0);
    /* one batch-1 step on slot 3 (all sub-steps), counting the kernels it runs */
    int node_ok = 1;
    char nodes[160] = "not counted (device)";
#ifdef MOSHID_CUDA_EMULATOR
    {
        const lm_config *g = &a->cfg;
        uint64_t nk[2] = {0, 0};
        lm_backend *bk[2] = {a, b};
        for (int v = 0; v < 2; v++) {
            lm_step_slot s1;
            memset(&s1, 0, sizeof s1);
            s1.slot = 3;
            for (int i = 0; i < g->n_streams; i++) s1.tokens[i] = i == 0 ? g->text_card : g->card;
            lm_samp_defaults(&s1.samp, 77);
            s1.dep_steps = -1;
            const uint64_t k0 = emu_kernels_run();
            step_or_die(bk[v], &s1, 1);
            nk[v] = emu_kernels_run() - k0;
        }
        /* per sub-step the chain replaces 4 launches per layer and the head's: 4 layers fewer each */
        node_ok = nk[1] > nk[0] && nk[1] - nk[0] == (uint64_t)dep_q * 4 * (uint64_t)g->depformer_num_layers;
        snprintf(nodes, sizeof nodes, "%llu kernels (chain) vs %llu (launches) in a batch-1 step replay%s",
                 (unsigned long long)nk[0], (unsigned long long)nk[1], node_ok ? "" : " (UNEXPECTED counts)");
    }
#endif
    ms_error e = {0};
    for (int sl = 0; sl < 4; sl++)
        if (lm_backend_reset_slot(a, sl, &e) != MS_OK || lm_backend_reset_slot(b, sl, &e) != MS_OK)
            die("reset_slot", &e);
    uint64_t la = graph_run(a, steps, dep_steps, 2), lb = graph_run(b, steps, dep_steps, 2);
    q8_weights = q8_kv = 0;
    result(ha == hb && la == lb && node_ok, name,
           "%d steps, %d sub-steps: replayed tokens %s, uncaptured logits and tokens %s; %s", steps, dep_steps,
           ha == hb ? "identical" : "DIFFER", la == lb ? "bit for bit" : "DIFFER", nodes);
    lm_backend_close(a);
    lm_backend_close(b);
}

/* ---- random weights -------------------------------------------------------------------------- */

static void test_random(void) {
    const char *name = "random_weights";
    if (!begin(name)) return;
    const char *dir = make_model("rnd", 8, 16, 0);   /* config.json only */
    knobs(0, 1);
    lm_backend *a = open_b(&lm_cuda_backend, dir, 2, 1234), *b = open_b(&lm_cuda_backend, dir, 2, 1234),
               *c = open_b(&lm_cuda_backend, dir, 2, 999);
    const lm_config *g = &a->cfg;
    float *la = malloc(sizeof(float) * g->text_card), *lb = malloc(sizeof(float) * g->text_card),
          *lc = malloc(sizeof(float) * g->text_card);
    int tok[LM_MAX_STREAMS];
    for (int i = 0; i < g->n_streams; i++) tok[i] = i == 0 ? g->text_card : g->card;
    int same = 1, differ = 0, range = 1, finite = 1;
    for (int t = 0; t < 4; t++) {
        lm_step_slot s[3];
        lm_backend *bs[3] = {a, b, c};
        float *ls[3] = {la, lb, lc};
        for (int i = 0; i < 3; i++) {
            memset(&s[i], 0, sizeof s[i]);
            memcpy(s[i].tokens, tok, sizeof tok);
            lm_samp_defaults(&s[i].samp, 3);
            s[i].step = (uint64_t)t;
            s[i].dep_steps = -1;
            s[i].text_logits = ls[i];
            step_or_die(bs[i], &s[i], 1);
            range = range && s[i].out_text >= 0 && s[i].out_text < g->text_card;
            for (int k = 0; k < g->dep_q; k++) range = range && s[i].out_audio[k] >= 0 && s[i].out_audio[k] < g->card;
        }
        for (int v = 0; v < g->text_card; v++) finite = finite && isfinite(la[v]);
        same = same && !memcmp(la, lb, sizeof(float) * g->text_card) && s[0].out_text == s[1].out_text;
        differ = differ || memcmp(la, lc, sizeof(float) * g->text_card);
        tok[0] = s[0].out_text;
        for (int q = 0; q < g->dep_q; q++) tok[1 + q] = s[0].out_audio[q];
    }
    lm_backend_stats st;
    lm_backend_stats_get(a, &st);
    result(same && differ && range && finite && st.weight_bytes > 0, name,
           "same seed same logits: %s; other seed other logits: %s; tokens in range: %s; %zu weight bytes on the device",
           same ? "yes" : "NO", differ ? "yes" : "NO", range ? "yes" : "NO", st.weight_bytes);
    free(la); free(lb); free(lc);
    lm_backend_close(a);
    lm_backend_close(b);
    lm_backend_close(c);
}

/* ---- the codec (host Mimi) -------------------------------------------------------------- */

static void test_codec(void) {
    const char *name = "codec";
    if (!begin(name)) return;
    const char *mk = getenv("MKMODEL");
    if (!mk || access(mk, X_OK) != 0) {
        printf("skip %-36s MKMODEL not set or not executable: moshid-mkmodel is needed for a Mimi model\n", name);
        return;
    }
    char dir[600], cmd[1400], lm[640], mimi[640], mcfg[640];
    snprintf(dir, sizeof dir, "%s/mk", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --text-card 48 --dep-q 8 --context 16 >/dev/null", mk, dir);
    if (system(cmd) != 0) {
        result(0, name, "%s failed", cmd);
        return;
    }
    snprintf(lm, sizeof lm, "%s/lm", dir);
    snprintf(mimi, sizeof mimi, "%s/mimi.safetensors", dir);
    snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
    knobs(0, 1);   /* no step runs here: no graphs to warm up */
    lm_backend_opts o = {.max_slots = 2, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi, .mimi_config = mcfg};
    ms_error e = {0};
    lm_backend *cpu = lm_backend_open(&lm_cpu_backend, lm, &o, &e);
    if (!cpu) die("cpu open with Mimi", &e);
    /* the host codec inside the CUDA backend: bit for bit the CPU's (the
     * device codec's own parity is tests/gpu/mimi_test.c's) */
    const char *was = getenv("MOSHID_CU_MIMI");
    char saved[32] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    setenv("MOSHID_CU_MIMI", "cpu", 1);
    lm_backend *gpu = lm_backend_open(&lm_cuda_backend, lm, &o, &e);
    if (was) setenv("MOSHID_CU_MIMI", saved, 1);
    else unsetenv("MOSHID_CU_MIMI");
    if (!gpu) die("cuda open with Mimi", &e);
    int ncb = gpu->ncb, same = ncb > 0 && ncb == cpu->ncb, frames = 0;
    float *pcm = malloc(sizeof(float) * 2 * MS_FRAME_SAMPLES), *oc = malloc(sizeof(float) * 2 * MS_FRAME_SAMPLES),
          *og = malloc(sizeof(float) * 2 * MS_FRAME_SAMPLES);
    int cc[2 * 32], cg[2 * 32], slots[2] = {1, 0};
    for (int f = 0; f < 4 && same; f++) {
        for (int i = 0; i < 2 * MS_FRAME_SAMPLES; i++)
            pcm[i] = 0.3f * sinf(0.01f * (float)(i + f * MS_FRAME_SAMPLES) * (1.0f + (float)(i / MS_FRAME_SAMPLES)));
        if (f == 2 && (lm_backend_codec_reset(cpu, 0, LM_CODEC_BOTH, &e) || lm_backend_codec_reset(gpu, 0, LM_CODEC_BOTH, &e)))
            die("codec_reset", &e);
        if (lm_backend_mimi_encode(cpu, slots, 2, pcm, cc, &e) || lm_backend_mimi_encode(gpu, slots, 2, pcm, cg, &e))
            die("mimi_encode", &e);
        if (lm_backend_mimi_decode(cpu, slots, 2, cc, oc, &e) || lm_backend_mimi_decode(gpu, slots, 2, cc, og, &e))
            die("mimi_decode", &e);
        same = !memcmp(cc, cg, sizeof(int) * 2 * ncb) && !memcmp(oc, og, sizeof(float) * 2 * MS_FRAME_SAMPLES);
        frames++;
    }
    result(same, name, "%d codebooks; %d frames of 2 slots (a codec reset between): codes and PCM %s", ncb, frames,
           same ? "identical" : "DIFFER");
    free(pcm); free(oc); free(og);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

/* ---- checkpoints in f16 ------------------------------------------------------------------- */

/* The same values (f16-exact uniforms) as a float32 file and as an f16
 * file: the upload rounds both to bf16 from the same numbers (f16 -> f32 is
 * exact), so the two backends must step bit for bit alike; the f32 path is
 * the one teacher_forced checks against the CPU. */
static void test_f16(void) {
    const char *name = "checkpoint_f16";
    if (!begin(name)) return;
    mopt o32 = {.f16 = 1}, o16 = {.f16 = 2};
    const char *d32 = make_model_o("f16-as-f32", 8, 12, 1, &o32), *d16 = make_model_o("f16", 8, 12, 1, &o16);
    /* the file really holds f16 tensors */
    char path[640];
    snprintf(path, sizeof path, "%s/model.safetensors", d16);
    ms_error e = {0};
    st_file *f = st_open(path, &e);
    if (!f) die("st_open", &e);
    const st_tensor *t = st_find(f, "text_linear.weight");
    int is_f16 = t && t->dtype == ST_F16;
    st_close(f);
    knobs(0, 1);
    lm_backend *a = open_b(&lm_cuda_backend, d32, 2, 0), *b = open_b(&lm_cuda_backend, d16, 2, 0);
    const lm_config *g = &a->cfg;
    size_t nt = (size_t)g->text_card, na = (size_t)g->dep_q * g->card;
    float *la = malloc(sizeof(float) * 2 * (nt + na)), *lb = malloc(sizeof(float) * 2 * (nt + na));
    int *tok = malloc(sizeof(int) * 6 * 2 * g->n_streams);
    rand_tokens(tok, 12, g, 16);
    int same = 1, steps = 6;
    for (int st = 0; st < steps; st++) {
        lm_step_slot sa[2], sb[2];
        memset(sa, 0, sizeof sa);
        for (int i = 0; i < 2; i++) {
            sa[i].slot = i;
            memcpy(sa[i].tokens, tok + (size_t)(st * 2 + i) * g->n_streams, sizeof(int) * g->n_streams);
            lm_samp_defaults(&sa[i].samp, 40 + (uint64_t)i);
            sa[i].step = (uint64_t)st;
            sa[i].dep_steps = -1;
            sb[i] = sa[i];
            sa[i].text_logits = la + (size_t)i * (nt + na);
            sa[i].audio_logits = sa[i].text_logits + nt;
            sb[i].text_logits = lb + (size_t)i * (nt + na);
            sb[i].audio_logits = sb[i].text_logits + nt;
        }
        step_or_die(a, sa, 2);
        step_or_die(b, sb, 2);
        same = same && !memcmp(la, lb, sizeof(float) * 2 * (nt + na));
        for (int i = 0; i < 2; i++)
            same = same && sa[i].out_text == sb[i].out_text &&
                   !memcmp(sa[i].out_audio, sb[i].out_audio, sizeof(int) * g->dep_q);
    }
    lm_backend_stats sta, stb;
    lm_backend_stats_get(a, &sta);
    lm_backend_stats_get(b, &stb);
    int ok = is_f16 && same && sta.weight_bytes == stb.weight_bytes;
    result(ok, name, "f16 file (%s) vs the same values as f32: %d steps of 2 slots, logits and tokens %s; %zu vs %zu "
           "weight bytes (bf16 both)", is_f16 ? "F16 tensors" : "NOT F16", steps, same ? "identical" : "DIFFER",
           stb.weight_bytes, sta.weight_bytes);
    free(la); free(lb); free(tok);
    lm_backend_close(a);
    lm_backend_close(b);
}

/* ---- slot reset ------------------------------------------------------------------------------ */

/* Session A on slot 0 (past the ring's wrap), reset, session B on slot 0;
 * session B alone on slot 1, never used: the same logits bit for bit (same
 * kernels, same single-row calls; only the K/V slot differs, and nothing of
 * A may be read). Then slot 0 is reset again after only 3 steps of a third
 * session, which leaves A's and B's rows in its ring past position 3. */
static void reset_session(lm_backend *b, int slot, uint64_t seed, int steps, float *lg, int *out) {
    const lm_config *g = &b->cfg;
    int *tok = malloc(sizeof(int) * steps * g->n_streams);
    rand_tokens(tok, steps, g, seed);
    for (int t = 0; t < steps; t++) {
        lm_step_slot s;
        memset(&s, 0, sizeof s);
        s.slot = slot;
        memcpy(s.tokens, tok + (size_t)t * g->n_streams, sizeof(int) * g->n_streams);
        lm_samp_defaults(&s.samp, seed);
        s.step = (uint64_t)t;
        s.dep_steps = -1;
        s.text_logits = lg ? lg + (size_t)t * g->text_card : NULL;
        step_or_die(b, &s, 1);
        if (out) out[t] = s.out_text;
    }
    free(tok);
}

static void test_reset(void) {
    const char *name = "slot_reset";
    if (!begin(name)) return;
    const char *dir = make_model("reset", 8, 12, 1);
    knobs(0, 1);
    lm_backend *b = open_b(&lm_cuda_backend, dir, 2, 0);
    const lm_config *g = &b->cfg;
    int nb = 8;
    float *l0 = malloc(sizeof(float) * nb * g->text_card), *l1 = malloc(sizeof(float) * nb * g->text_card);
    int t0[8], t1[8];
    ms_error e = {0};
    reset_session(b, 0, 1, 15, NULL, NULL);   /* A: 15 steps, the ring of 12 wraps */
    if (lm_backend_reset_slot(b, 0, &e) != MS_OK) die("reset_slot", &e);
    int pos_ok = lm_backend_pos(b, 0) == 0;
    reset_session(b, 0, 2, nb, l0, t0);       /* B on the reset slot */
    reset_session(b, 1, 2, nb, l1, t1);       /* B on a fresh slot */
    int same = !memcmp(l0, l1, sizeof(float) * nb * g->text_card) && !memcmp(t0, t1, sizeof t0);
    /* a short session, then B again */
    if (lm_backend_reset_slot(b, 0, &e) != MS_OK) die("reset_slot", &e);
    reset_session(b, 0, 3, 3, NULL, NULL);
    if (lm_backend_reset_slot(b, 0, &e) != MS_OK) die("reset_slot", &e);
    reset_session(b, 0, 2, nb, l0, t0);
    int same2 = !memcmp(l0, l1, sizeof(float) * nb * g->text_card) && !memcmp(t0, t1, sizeof t0);
    result(pos_ok && same && same2, name,
           "after 15 steps (wrapped) and a reset, %d steps of a new session equal a fresh slot's: %s; after a 3-step "
           "session: %s%s", nb, same ? "bit for bit" : "DIFFER", same2 ? "bit for bit" : "DIFFER",
           pos_ok ? "" : "; position not 0 after reset");
    free(l0); free(l1);
    lm_backend_close(b);
}

/* ---- dep_steps < dep_q ---------------------------------------------------------------------- */

/* Two slots with the same history and inputs in one batch, one asking for
 * every sub-step, one for fewer: the same text token, the same first
 * sub-steps, -1 for the others (and their audio logits left as they were);
 * on the replayed graph (no logits) and on the uncaptured path (logits). */
static void test_dep_steps(void) {
    const char *name = "dep_steps";
    if (!begin(name)) return;
    const char *dir = make_model("dep", 8, 12, 1);
    knobs(1, 1);
    lm_backend *b = open_b(&lm_cuda_backend, dir, 2, 0);
    const lm_config *g = &b->cfg;
    int tok[LM_MAX_STREAMS];
    int ok = 1, checked = 0;
    const int want[4] = {3, 0, 1, 8};
    float *al = malloc(sizeof(float) * 2 * g->dep_q * g->card), *tl = malloc(sizeof(float) * 2 * g->text_card);
    for (int t = 0; t < 4; t++) {
        rand_tokens(tok, 1, g, 70 + (uint64_t)t);
        int logits = t % 2;
        lm_step_slot s[2];
        memset(s, 0, sizeof s);
        for (int i = 0; i < 2; i++) {
            s[i].slot = i;
            memcpy(s[i].tokens, tok, sizeof tok);
            lm_samp_defaults(&s[i].samp, 9);
            s[i].step = (uint64_t)t;
            s[i].dep_steps = i ? want[t] : -1;
            if (logits) {
                s[i].text_logits = tl + (size_t)i * g->text_card;
                s[i].audio_logits = al + (size_t)i * g->dep_q * g->card;
            }
        }
        for (size_t i = 0; i < 2 * (size_t)g->dep_q * g->card; i++) al[i] = 1234.5f;
        step_or_die(b, s, 2);
        int nd = want[t];
        ok = ok && s[0].out_text == s[1].out_text;
        for (int k = 0; k < g->dep_q; k++) {
            ok = ok && s[0].out_audio[k] >= 0 &&
                 (k < nd ? s[1].out_audio[k] == s[0].out_audio[k] : s[1].out_audio[k] == -1);
            if (logits) {
                const float *a1 = al + ((size_t)g->dep_q + k) * g->card;
                ok = ok && (k < nd ? !memcmp(a1, al + (size_t)k * g->card, sizeof(float) * g->card) : a1[0] == 1234.5f);
            }
        }
        checked++;
    }
    result(ok, name, "%d steps, dep_steps 3/0/1/8 beside -1 in one batch (graph, then uncaptured with logits): "
           "common sub-steps identical, the others -1%s", checked, ok ? "" : ": WRONG");
    free(al); free(tl);
    lm_backend_close(b);
}

/* ---- invalid arguments --------------------------------------------------------------------- */

/* Each bad call answers its error from the dispatcher, changes nothing (no
 * position moves, the backend is not marked dead) and the next good step
 * works. */
static void test_invalid(void) {
    const char *name = "invalid_arguments";
    if (!begin(name)) return;
    const char *dir = make_model("inval", 8, 12, 1);
    knobs(0, 1);
    lm_backend *b = open_b(&lm_cuda_backend, dir, 3, 0);
    const lm_config *g = &b->cfg;
    lm_step_slot good;
    memset(&good, 0, sizeof good);
    for (int i = 0; i < g->n_streams; i++) good.tokens[i] = i == 0 ? g->text_card : g->card;
    lm_samp_defaults(&good.samp, 1);
    good.dep_steps = -1;
    step_or_die(b, &good, 1);
    int target[LM_MAX_DEP_Q + 1] = {0};
    uint8_t prov[LM_MAX_DEP_Q + 1] = {1};
    struct { const char *what; int want; lm_step_slot s[2]; int n; } bad[12];
    int nb = 0;
#define BAD(w, code, n_, ...) do { bad[nb].what = w; bad[nb].want = code; bad[nb].n = n_; bad[nb].s[0] = good; \
        bad[nb].s[1] = good; bad[nb].s[1].slot = 1; __VA_ARGS__; nb++; } while (0)
    BAD("slot -1", MS_ERR_RANGE, 1, bad[nb].s[0].slot = -1);
    BAD("slot max_slots", MS_ERR_RANGE, 1, bad[nb].s[0].slot = 3);
    BAD("slot twice", MS_ERR_ARG, 2, bad[nb].s[1].slot = 0);
    BAD("text token text_card + 1", MS_ERR_RANGE, 1, bad[nb].s[0].tokens[0] = g->text_card + 1);
    BAD("audio token -2", MS_ERR_RANGE, 2, bad[nb].s[1].tokens[3] = -2);
    BAD("target without provided", MS_ERR_ARG, 1, bad[nb].s[0].target = target);
    BAD("target out of range", MS_ERR_RANGE, 1, bad[nb].s[0].target = target; bad[nb].s[0].provided = prov;
        target[0] = g->text_card + 1);
    BAD("dep_steps dep_q + 1", MS_ERR_RANGE, 1, bad[nb].s[0].dep_steps = g->dep_q + 1);
    BAD("dep_steps -2", MS_ERR_RANGE, 1, bad[nb].s[0].dep_steps = -2);
    BAD("temperature NaN", MS_ERR_RANGE, 2, bad[nb].s[1].samp.audio_temp = NAN);
    BAD("n > max_slots", MS_ERR_ARG, 4);
#undef BAD
    int ok = 1;
    char fails[512] = "";
    for (int i = 0; i < nb; i++) {
        ms_error e = {0};
        int rc = lm_backend_step(b, bad[i].s, bad[i].n, &e);
        if (rc != bad[i].want || !e.msg[0]) {
            ok = 0;
            snprintf(fails + strlen(fails), sizeof fails - strlen(fails), " [%s: rc %d]", bad[i].what, rc);
        }
    }
    /* prefill and snapshots */
    int tok[LM_MAX_STREAMS] = {0};
    ms_error e = {0};
    lm_kv_snap *snap = NULL;
    int rc_pf = lm_backend_prefill(b, 1, 3, 1, tok, NULL, &e);       /* pos0 not the slot's position */
    int rc_pf0 = lm_backend_prefill(b, 1, 0, 0, tok, NULL, &e);      /* no positions */
    int rc_pf2 = lm_backend_prefill(b, 1, 0, 1, NULL, NULL, &e);     /* neither tokens nor embeddings */
    int rc_sn = lm_backend_kv_snapshot(b, 0, 2, &snap, &e);          /* slot 0 holds 1 position */
    int rc_rs = lm_backend_kv_restore_layers(b, 1, NULL, 0, 1, &e);
    int one = 0, codes[32] = {0};
    float *silence = calloc(MS_FRAME_SAMPLES, sizeof(float));
    int rc_ms = lm_backend_mimi_encode(b, &one, 1, silence, codes, &e);   /* no codec */
    free(silence);
    int others = rc_pf == MS_ERR_STATE && rc_pf0 == MS_ERR_ARG && rc_pf2 == MS_ERR_ARG && rc_sn == MS_ERR_RANGE &&
                 !snap && rc_rs == MS_ERR_ARG && rc_ms == MS_ERR_STATE;
    /* nothing moved, and the backend still steps */
    int pos_ok = lm_backend_pos(b, 0) == 1 && lm_backend_pos(b, 1) == 0 && lm_backend_pos(b, 2) == 0;
    ms_error eg = {0};
    int rc_good = lm_backend_step(b, &good, 1, &eg);
    int after = rc_good == MS_OK && lm_backend_pos(b, 0) == 2 && good.out_text >= 0 && good.out_text < g->text_card;
    result(ok && others && pos_ok && after, name,
           "%d bad steps, 3 bad prefills, a bad snapshot, restore and codec call answered by the dispatcher%s%s; "
           "positions unchanged: %s; next step: %s", nb, ok ? "" : ": WRONG", fails, pos_ok ? "yes" : "NO",
           after ? "ok" : eg.msg);
    lm_backend_close(b);
}

/* ---- a batch of max_slots ------------------------------------------------------------------ */

/* Every slot in one call (the largest bucket, no padding row), against the
 * CPU on the same inputs, in two orders: the logit bound and the near-tie
 * rule (the rows are few: the plain 99 % rule would allow no flip). */
static void test_max_slots(void) {
    const char *name = "batch_max_slots";
    if (!begin(name)) return;
    enum { MS = 5 };
    mopt o = {.peaked = 1};
    const char *dir = make_model_o("maxs", 8, 12, 1, &o);
    knobs(0, 1);
    lm_backend *cpu = open_b(&lm_cpu_backend, dir, MS, 0), *gpu = open_b(&lm_cuda_backend, dir, MS, 0);
    const lm_config *g = &cpu->cfg;
    size_t nt = (size_t)g->text_card, na = (size_t)g->dep_q * g->card;
    float *lc = malloc(sizeof(float) * MS * (nt + na)), *lg = malloc(sizeof(float) * MS * (nt + na));
    int *tok = malloc(sizeof(int) * MS * g->n_streams);
    cmp text = {0}, audio = {0};
    int steps = 4, tokens_ok = 1;
    for (int t = 0; t < steps; t++) {
        rand_tokens(tok, MS, g, 300 + (uint64_t)t);
        lm_step_slot sc[MS], sg[MS];
        memset(sc, 0, sizeof sc);
        for (int i = 0; i < MS; i++) {
            sc[i].slot = t % 2 ? MS - 1 - i : i;
            memcpy(sc[i].tokens, tok + (size_t)i * g->n_streams, sizeof(int) * g->n_streams);
            lm_samp_greedy(&sc[i].samp);
            sc[i].step = (uint64_t)t;
            sc[i].dep_steps = -1;
            sc[i].text_logits = lc + (size_t)i * (nt + na);
            sc[i].audio_logits = sc[i].text_logits + nt;
        }
        step_or_die(cpu, sc, MS);
        for (int i = 0; i < MS; i++) {
            sg[i] = sc[i];
            /* teacher-forced on the CPU's samples */
            static int target[MS][LM_MAX_DEP_Q + 1];
            static uint8_t prov[MS][LM_MAX_DEP_Q + 1];
            target[i][0] = sc[i].out_text;
            prov[i][0] = 1;
            for (int k = 0; k < g->dep_q; k++) {
                target[i][1 + k] = sc[i].out_audio[k];
                prov[i][1 + k] = 1;
            }
            sg[i].target = target[i];
            sg[i].provided = prov[i];
            sg[i].text_logits = lg + (size_t)i * (nt + na);
            sg[i].audio_logits = sg[i].text_logits + nt;
        }
        step_or_die(gpu, sg, MS);
        for (int i = 0; i < MS; i++) {
            compare(&text, sg[i].text_logits, sc[i].text_logits, g->text_card, LOGIT_TOL);
            for (int k = 0; k < g->dep_q; k++)
                compare(&audio, sg[i].audio_logits + (size_t)k * g->card, sc[i].audio_logits + (size_t)k * g->card,
                        g->card, LOGIT_TOL);
            tokens_ok = tokens_ok && sg[i].out_text >= 0 && sg[i].out_text < g->text_card;
        }
    }
    int pos_ok = 1;
    for (int s = 0; s < MS; s++) pos_ok = pos_ok && lm_backend_pos(gpu, s) == steps;
    cmp_print("text", &text, LOGIT_TOL);
    cmp_print("audio", &audio, LOGIT_TOL);
    int ok = tokens_ok && pos_ok && text.worst <= LOGIT_TOL && audio.worst <= LOGIT_TOL &&
             text.decisive_agree == text.decisive && audio.decisive_agree == audio.decisive;
    result(ok, name, "%d steps of all %d slots (two orders) vs the CPU: worst logit err %.2e / %.2e (tol %.2g), "
           "argmax %ld/%ld and %ld/%ld, decisive rows all agree: %s%s", steps, MS, text.worst, audio.worst, LOGIT_TOL,
           text.agree, text.n, audio.agree, audio.n,
           text.decisive_agree == text.decisive && audio.decisive_agree == audio.decisive ? "yes" : "NO",
           pos_ok ? "" : "; positions wrong");
    free(lc); free(lg); free(tok);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

/* ---- the dispatcher's frame step with a codec ------------------------------------------------ */

/* The fixture Mimi (tests/fixtures/mimi/tiny: 8 codebooks of 64 bins; its
 * path from $MIMI_FIXTURES or the repository root) with a peaked LM of card
 * 64, on the CPU backend and on the CUDA backend, through lm_frame_submit /
 * lm_frame_wait (the dispatcher's frame step: the CUDA table has no
 * frame_submit yet), greedy, on the matvec path: the same codes in, the same
 * tokens and frames out. codec "host": the CUDA backend's Mimi on the host
 * (MOSHID_CU_MIMI=cpu), so the codes and the PCM must be bit for bit the
 * CPU backend's; "device": its device codec (cuda/cu_mimi.c), whose codes
 * must still be the CPU's on this input (a code that differs is reported:
 * the codec's own bounds are mimi-test's) and whose PCM must lie within
 * FRAME_PCM_TOL of the rms (float rounding is ~1e-5 of it; a wrong slot's
 * state or wrong codes cost O(1)). The device variant runs on a GPU only:
 * emulating the codec's convolutions would double the case's time. */
#define FRAME_PCM_TOL 1e-3
static void frame_case(const char *codec) {
    char name[96];
    snprintf(name, sizeof name, "frame_step/%s", codec);
    if (!begin(name)) return;
    const char *fx = getenv("MIMI_FIXTURES");
    char mimi[600], mcfg[600];
    snprintf(mimi, sizeof mimi, "%s/tiny.safetensors", fx && fx[0] ? fx : "tests/fixtures/mimi");
    snprintf(mcfg, sizeof mcfg, "%s/tiny.json", fx && fx[0] ? fx : "tests/fixtures/mimi");
    if (access(mimi, R_OK) != 0 || access(mcfg, R_OK) != 0) {
        printf("skip %-36s %s not found (run from the repository root or set MIMI_FIXTURES)\n", name, mimi);
        return;
    }
    mopt o = {.peaked = 1, .card = 64};
    const char *dir = make_model_o("frame", 8, 12, 1, &o);
    knobs(0, 0);   /* the matvec path on the emulator too */
    char saved[32] = "";
    const char *cm = getenv("MOSHID_CU_MIMI");
    int had = cm != NULL;
    if (had) snprintf(saved, sizeof saved, "%s", cm);
    int host = !strcmp(codec, "host");
    if (host) setenv("MOSHID_CU_MIMI", "cpu", 1);
    else unsetenv("MOSHID_CU_MIMI");
    lm_backend_opts bo = {.max_slots = 3, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi, .mimi_config = mcfg};
    ms_error e = {0};
    lm_backend *be[2];
    be[0] = lm_backend_open(&lm_cpu_backend, dir, &bo, &e);
    if (!be[0]) die("cpu open with the fixture Mimi", &e);
    be[1] = lm_backend_open(&lm_cuda_backend, dir, &bo, &e);
    if (!be[1]) die("cuda open with the fixture Mimi", &e);
    if (had) setenv("MOSHID_CU_MIMI", saved, 1);
    else unsetenv("MOSHID_CU_MIMI");
    enum { FR = 3, N = 2 };   /* Kyutai's delay of 1: frames 2 and 3 come out */
    const int slots[N] = {2, 0};
    lmgen_slot gen[2][N];
    lmgen_slot *gp[2][N];
    lm_frame f[2];
    lm_samp sp;
    lm_samp_defaults(&sp, 5);
    lm_samp_greedy(&sp);
    for (int k = 0; k < 2; k++) {
        if (lm_frame_alloc(be[k], &f[k], N, &e) != MS_OK) die("lm_frame_alloc", &e);
        for (int i = 0; i < N; i++) {
            lmgen_init(&gen[k][i], &be[k]->cfg, slots[i], &sp);
            gp[k][i] = &gen[k][i];
        }
    }
    float *pcm = malloc(sizeof(float) * N * MS_FRAME_SAMPLES);
    /* bad frames first, answered by the dispatcher: rows whose bookkeeping
     * is another slot's, a repeated slot, a wait with nothing in flight */
    int bad_ok = 1;
    {
        lmgen_slot *swapped[N] = {gp[1][1], gp[1][0]};
        const int twice[N] = {0, 0};
        lm_frame fb = f[1];
        fb.n = N;
        fb.pcm_in = pcm;
        fb.slots = slots;
        fb.gens = swapped;
        ms_error eb = {0};
        bad_ok = bad_ok && lm_frame_submit(be[1], &fb, &eb) == MS_ERR_ARG;
        fb.slots = twice;
        fb.gens = gp[1];
        bad_ok = bad_ok && lm_frame_submit(be[1], &fb, &eb) == MS_ERR_ARG;
        bad_ok = bad_ok && lm_frame_wait(be[1], &fb, &eb) == MS_ERR_STATE && be[1]->inflight == 0;
    }
    int nout = 1 + be[0]->cfg.dep_q, nu = be[0]->n_user;
    int same_codes = 1, same_out = 1, frames_out = 0, tokens = 0, code_frame = -1;
    double pcm_err = 0;
    for (int fr = 0; fr < FR; fr++) {
        for (int i = 0; i < N * MS_FRAME_SAMPLES; i++)
            pcm[i] = 0.25f * sinf(0.013f * (float)(i + fr * MS_FRAME_SAMPLES) *
                                  (1.0f + 0.5f * (float)(i / MS_FRAME_SAMPLES)));
        for (int k = 0; k < 2; k++) {
            f[k].n = N;
            f[k].slots = slots;
            f[k].gens = gp[k];
            f[k].pcm_in = pcm;
            if (lm_frame_submit(be[k], &f[k], &e) != MS_OK || lm_frame_wait(be[k], &f[k], &e) != MS_OK)
                die(k ? "cuda frame" : "cpu frame", &e);
        }
        if (memcmp(f[0].codes, f[1].codes, sizeof(int) * N * nu) && code_frame < 0) code_frame = fr;
        same_codes = same_codes && code_frame < 0;
        for (int i = 0; i < N; i++) {
            same_out = same_out && f[0].has_out[i] == f[1].has_out[i];
            if (!f[0].has_out[i] || !f[1].has_out[i]) continue;
            frames_out++;
            for (int j = 0; j < nout; j++) {
                tokens++;
                same_out = same_out && f[0].out[i * nout + j] == f[1].out[i * nout + j];
            }
            /* the decoded audio of this row, normalised by the CPU's rms */
            const float *a = f[0].pcm_out + (size_t)i * MS_FRAME_SAMPLES;
            const float *b = f[1].pcm_out + (size_t)i * MS_FRAME_SAMPLES;
            double ss = 0, mx = 0;
            for (int j = 0; j < MS_FRAME_SAMPLES; j++) {
                double d = fabs((double)a[j] - b[j]);
                ss += (double)a[j] * a[j];
                if (!(d <= mx)) mx = d != d ? INFINITY : d;
            }
            double r = mx / (sqrt(ss / MS_FRAME_SAMPLES) + 1e-30);
            if (r > pcm_err) pcm_err = r;
        }
    }
    int pcm_ok = host ? pcm_err == 0 : pcm_err <= FRAME_PCM_TOL;
    int ok = same_codes && same_out && pcm_ok && frames_out == N * (FR - 1) && bad_ok;
    char codes_msg[64];
    if (same_codes) snprintf(codes_msg, sizeof codes_msg, "identical");
    else snprintf(codes_msg, sizeof codes_msg, "DIFFER from frame %d", code_frame);
    result(ok, name, "%d frames of %d slots (fixture Mimi, %d codebooks), greedy, matvec: codes %s; %d frames out, %d "
           "tokens %s; PCM err %.1e of the rms (%s); bad frames refused: %s", FR, N, be[1]->ncb, codes_msg,
           frames_out, tokens, same_out ? "identical" : "DIFFER", pcm_err, host ? "must be 0" : "tol 1e-3",
           bad_ok ? "yes" : "NO");
    free(pcm);
    for (int k = 0; k < 2; k++) {
        lm_frame_free(&f[k]);
        lm_backend_close(be[k]);
    }
}

static void test_frame(void) {
    frame_case("host");
    if (!on_emu) frame_case("device");
}

/* ---- device errors ------------------------------------------------------------------------- */

static void test_device_error(void) {
    const char *name = "device_error";
    if (!begin(name)) return;
    if (!emu_inject_fault) {
        printf("skip %-36s needs the emulator's fault injection\n", name);
        return;
    }
    const char *dir = make_model("err", 8, 12, 1);
    knobs(1, 1);
    lm_backend *gpu = open_b(&lm_cuda_backend, dir, 2, 0);
    const lm_config *g = &gpu->cfg;
    lm_step_slot s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < g->n_streams; i++) s.tokens[i] = i == 0 ? g->text_card : g->card;
    lm_samp_defaults(&s.samp, 1);
    s.dep_steps = -1;
    step_or_die(gpu, &s, 1);   /* a good step first (the graph) */
    emu_set_quiet(1);
    emu_inject_fault(7);       /* a kernel inside the next replay */
    ms_error e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};
    int rc1 = lm_backend_step(gpu, &s, 1, &e1);
    int rc2 = lm_backend_step(gpu, &s, 1, &e2);
    int tok[LM_MAX_STREAMS] = {0};
    int rc3 = lm_backend_prefill(gpu, 1, 0, 1, tok, NULL, &e3);
    lm_kv_snap *snap = NULL;
    int rc4 = lm_backend_kv_snapshot(gpu, 0, 1, &snap, &e4);
    emu_set_quiet(0);
    int first_ok = rc1 == MS_ERR_DEVICE && strstr(e1.msg, "failed at") && strstr(e1.msg, "cu_backend.c:") &&
                   strstr(e1.msg, "cudaErrorIllegalAddress");
    int later_ok = rc2 == MS_ERR_DEVICE && rc3 == MS_ERR_DEVICE && rc4 == MS_ERR_DEVICE && !snap &&
                   strstr(e2.msg, "unusable after an earlier device error") && strstr(e2.msg, e1.msg) &&
                   strstr(e3.msg, "unusable") && strstr(e4.msg, "unusable");
    lm_backend_close(gpu);
    cudaDeviceReset();   /* the emulated device is clean again */
    cudaGetLastError();
    result(first_ok && later_ok, name, "faulted step: \"%s\"; then step/prefill/snapshot: %s", e1.msg,
           later_ok ? "MS_ERR_DEVICE, unusable" : e2.msg);
}

static void cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (tmpdir[0] && system(cmd) != 0) fprintf(stderr, "backend-test: could not remove %s\n", tmpdir);
}

/* ---- the 8-bit schemes --------------------------------------------------------------
 *
 * Both backends open with the same scheme (int8 weights, int8 K/V, or
 * both): the same int8 matrices (the CPU loader quantizes them for both),
 * so the comparison measures the device's own arithmetic again: summation
 * order, the GEMM path's bf16 activations, and K/V quantized from keys
 * that differ from the CPU's in the last bits (a key or value then lands
 * one int8 step away, 1/254 of its head's largest entry, where x / s falls
 * within that difference of a .5). The bound is the bf16 backend's
 * (LOGIT_TOL) and every case keeps the near-tie rule (no decisive row
 * flips); the plain rule (>= 99 % per stream) on the matvec path. On the
 * GEMM path the bf16 activations and the K/V steps together flip up to 2
 * rows in 110 of the peaked PersonaPlex model, every one at a CPU margin
 * below 1e-3 rms (measured), so the plain rule is not asked there. */
static void test_q8_tf(const char *scheme, int w8, int kv8, const char *variant, int dep_q, int peaked, int gemm_min,
                       int t0, int steps, int dep_steps) {
    char name[96], tag[64];
    snprintf(name, sizeof name, "int8/%s/%s%s/%s", scheme, variant, peaked ? "-peaked" : "",
             gemm_min == 1 ? "gemm" : "matvec");
    if (!begin(name)) return;
    snprintf(tag, sizeof tag, "tf-%s%s", variant, peaked ? "-pk" : "");
    mopt o = {.peaked = peaked};
    q8_weights = w8;
    q8_kv = kv8;
    tf_run(name, make_model_o(tag, dep_q, 12, 1, &o), 12, gemm_min, gemm_min == 1, t0, steps, dep_steps, LOGIT_TOL,
           gemm_min != 1);
    q8_weights = q8_kv = 0;
}

/* Greedy frames, free-running: the CPU and the CUDA backend, both with
 * int8 weights and K/V, on the peaked model (its logits are decisive, as a
 * trained model's): every token of every step the same. */
static void test_q8_greedy(const char *variant, int dep_q, int gemm_min, int steps) {
    char name[96];
    snprintf(name, sizeof name, "int8/greedy/%s/%s", variant, gemm_min == 1 ? "gemm" : "matvec");
    if (!begin(name)) return;
    char tag[64];
    snprintf(tag, sizeof tag, "tf-%s-pk", variant);
    mopt o = {.peaked = 1};
    const char *dir = make_model_o(tag, dep_q, 12, 1, &o);
    knobs_f(1, gemm_min, gemm_min == 1);
    q8_weights = q8_kv = 1;
    lm_backend *cpu = open_b(&lm_cpu_backend, dir, 2, 0), *gpu = open_b(&lm_cuda_backend, dir, 2, 0);
    q8_weights = q8_kv = 0;
    lm_backend_stats sc, sg;
    lm_backend_stats_get(cpu, &sc);
    lm_backend_stats_get(gpu, &sg);
    const lm_config *g = &cpu->cfg;
    int tok[2][LM_MAX_STREAMS];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < g->n_streams; i++) tok[s][i] = i == 0 ? g->text_card : g->card;
    long same = 0, total = 0;
    int first_bad = -1;
    for (int t = 0; t < steps; t++) {
        lm_step_slot a[2], b[2];
        memset(a, 0, sizeof a);
        for (int i = 0; i < 2; i++) {
            a[i].slot = i;
            memcpy(a[i].tokens, tok[i], sizeof(int) * g->n_streams);
            lm_samp_greedy(&a[i].samp);
            a[i].step = (uint64_t)t;
            a[i].dep_steps = -1;
        }
        memcpy(b, a, sizeof a);
        int n = t < 3 ? 1 : 2;   /* slot 1 joins later: other positions */
        step_or_die(cpu, a, n);
        step_or_die(gpu, b, n);
        for (int i = 0; i < n; i++) {
            int eq = a[i].out_text == b[i].out_text;
            for (int k = 0; k < g->dep_q; k++) eq = eq && a[i].out_audio[k] == b[i].out_audio[k];
            same += eq;
            total++;
            if (!eq && first_bad < 0) first_bad = t;
            tok[i][0] = a[i].out_text;
            for (int q = 0; q < g->n_q; q++) tok[i][1 + q] = q < g->dep_q ? a[i].out_audio[q] : (q * 5 + t) % g->card;
        }
    }
    int named = !strcmp(sc.weights_scheme, "int8") && !strcmp(sc.kv_scheme, "int8") &&
                !strcmp(sg.weights_scheme, "int8") && !strcmp(sg.kv_scheme, "int8");
    result(same == total && named, name, "%ld/%ld frames identical (first difference at step %d); schemes %s/%s, %s/%s",
           same, total, first_bad, sg.weights_scheme, sg.kv_scheme, sc.weights_scheme, sc.kv_scheme);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

/* The official fixtures of the 8-bit schemes (tests/fixtures/lm_q8, made
 * by moshi 0.2.13 on fake-quantized weights and K/V; $LM_Q8_FIXTURES, else
 * the checkout's): LMGen greedy over the 24 recorded user frames on the
 * CPU backend and on the CUDA backend, each with the fixture's scheme.
 * Every frame of the CUDA backend equals the CPU backend's, and both equal
 * the official trace. (kv8_f32 and w8kv8_f32 are left out: their
 * embeddings, and kv8_f32's matrices, are float32, which the CUDA backend
 * stores as bf16: another model, whose frames differ from the trace's.) */
static int q8_trace_frame(FILE *f, int *frame, int n) {
    char line[512];
    if (!fgets(line, sizeof line, f)) return -1;
    const char *o = strstr(line, "\"out\": ");
    if (!o) return -1;
    o += 7;
    if (!strncmp(o, "null", 4)) return 0;
    if (*o++ != '[') return -1;
    for (int i = 0; i < n; i++) {
        char *end;
        frame[i] = (int)strtol(o, &end, 10);
        if (end == o) return -1;
        o = end;
        while (*o == ',' || *o == ' ') o++;
    }
    return 1;
}

static void test_q8_fixture(const char *fx_case, int w8, int kv8, int gemm_min) {
    char name[96];
    snprintf(name, sizeof name, "int8/fixture/%s/%s", fx_case, gemm_min == 1 ? "gemm" : "matvec");
    if (!begin(name)) return;
    const char *fx = getenv("LM_Q8_FIXTURES");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", fx && fx[0] ? fx : "tests/fixtures/lm_q8", fx_case);
    knobs(1, gemm_min);
    q8_weights = w8;
    q8_kv = kv8;
    lm_backend *cpu = open_b(&lm_cpu_backend, dir, 1, 0), *gpu = open_b(&lm_cuda_backend, dir, 1, 0);
    q8_weights = q8_kv = 0;
    const lm_config *g = &cpu->cfg;
    snprintf(path, sizeof path, "%s/codes.txt", dir);
    FILE *codes = fopen(path, "r");
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    FILE *trace = fopen(path, "r");
    if (!codes || !trace) die(path, NULL);
    lm_samp samp;
    lm_samp_greedy(&samp);
    lmgen_slot gc, gg;
    lmgen_init(&gc, g, 0, &samp);
    lmgen_init(&gg, g, 0, &samp);
    lmgen_slot *pc = &gc, *pg = &gg;
    int user[LM_MAX_NQ], fc[1 + LM_MAX_DEP_Q], fg[1 + LM_MAX_DEP_Q], fo[1 + LM_MAX_DEP_Q], hc, hg;
    int steps = 0, frames = 0, same_cpu = 0, same_official = 0, ok = 1;
    ms_error e = {0};
    for (;;) {
        int nread = 0;
        for (int i = 0; i < g->n_user; i++) nread += fscanf(codes, "%d", &user[i]) == 1;
        if (nread < g->n_user) break;
        if (lmgen_step_batch(cpu, &pc, 1, user, fc, &hc, NULL, NULL, &e) ||
            lmgen_step_batch(gpu, &pg, 1, user, fg, &hg, NULL, NULL, &e))
            die("lmgen_step_batch", &e);
        int ho = q8_trace_frame(trace, fo, 1 + g->dep_q);
        steps++;
        ok = ok && hc == hg && ho == hc;
        if (hc && hg) {
            frames++;
            same_cpu += !memcmp(fc, fg, sizeof(int) * (1 + g->dep_q));
            same_official += ho == 1 && !memcmp(fo, fg, sizeof(int) * (1 + g->dep_q));
        }
    }
    fclose(codes);
    fclose(trace);
    ok = ok && steps == 24 && frames > 0 && same_cpu == frames && same_official == frames;
    result(ok, name, "%d steps, %d frames: %d equal to the CPU backend's, %d to the official trace", steps, frames,
           same_cpu, same_official);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
}

static void test_q8(void) {
    test_q8_tf("both", 1, 1, "kyutai", 8, 0, 0, 5, 5, 2);        /* the int8 matvec */
    test_q8_tf("weights", 1, 0, "kyutai", 8, 0, 0, 5, 5, 2);     /* with bf16 K/V: RoPE in the QKV product */
    /* the widened GEMM path, past the wrap; 110 rows per stream as the bf16
     * peaked cases (one flip in 100 allowed: the bf16 activations' error
     * flips rows whose two best logits lie within 1e-3 rms) */
    test_q8_tf("both", 1, 1, "kyutai", 8, 1, 1, 0, 40, -1);
    test_q8_tf("both", 1, 1, "personaplex", 16, 1, 1, 0, 40, -1);
    test_q8_tf("weights", 1, 0, "kyutai", 8, 1, 1, 0, 40, -1);
    test_q8_tf("kv", 0, 1, "kyutai", 8, 1, 1, 0, 40, -1);
    test_q8_greedy("kyutai", 8, 1, 16);
    test_q8_greedy("kyutai", 8, 0, 6);
    test_q8_fixture("w8_bf16", 1, 0, 1);
    /* Kyutai's q8 format (int8 as stored) with int8 K/V: on the GEMM path
     * the bf16 activations flip a near-tie greedy token by step 10 and the
     * free-running frames part (measured), so the frames are compared on the
     * matvec path: always on a device, on the emulator (47 s there) when
     * asked for by name; make test checks the q8 checkpoint's logits
     * teacher-forced on the matvec path instead, 5 steps of 2 sub-steps (the
     * GEMM path's bf16 activations cost this model's logits up to 9 % of
     * their rms: its weights are not bf16-exact, as moshid-mkmodel's) */
    if (!on_emu || (filter && strstr("int8/fixture/q8_kv8/matvec", filter))) test_q8_fixture("q8_kv8", 0, 1, 0);
    {
        const char *fx = getenv("LM_Q8_FIXTURES");
        char dir[512];
        snprintf(dir, sizeof dir, "%s/q8_kv8", fx && fx[0] ? fx : "tests/fixtures/lm_q8");
        if (begin("int8/q8_checkpoint/matvec")) {
            q8_kv = 1;
            tf_run("int8/q8_checkpoint/matvec", dir, 8, 0, 0, 5, 5, 2, LOGIT_TOL, 1);
            q8_kv = 0;
        }
    }
    q8_kv = 1;
    test_prefill_steps(12, 20, 1);   /* the chunk's own keys read back quantized: prefill == steps */
    test_snapshot();
    q8_kv = 0;
}

/* ---- a failed open leaves the thread clean -------------------------------------------------- */

static void test_open_oom(void) {
    const char *name = "open_oom";
    if (!begin(name)) return;
    if (!emu_inject_alloc_failure) {
        printf("skip %-36s needs the emulator's emu_inject_alloc_failure\n", name);
        return;
    }
    const char *dir = make_model("oom", 8, 12, 1);
    knobs(1, 1);
    lm_backend_opts o = {.max_slots = 2, .threads = 1, .variant = LM_VARIANT_AUTO};
    lm_backend *b = NULL;
    int failed = 0, stale = 0, wrong = 0, n = 1;
    for (; n < 400 && !b; n++) {
        ms_error e = {0};
        emu_inject_alloc_failure((unsigned)n);
        b = lm_backend_open(&lm_cuda_backend, dir, &o, &e);
        emu_inject_alloc_failure(0);
        if (b) break;
        failed++;
        wrong += !strstr(e.msg, "out of memory");
        stale += cudaPeekAtLastError() != cudaSuccess;
        cudaGetLastError();
    }
    int step_ok = 0;
    char msg[512] = "no backend";
    if (b) {
        const lm_config *g = &b->cfg;
        lm_step_slot s;
        memset(&s, 0, sizeof s);
        for (int i = 0; i < g->n_streams; i++) s.tokens[i] = i == 0 ? g->text_card : g->card;
        lm_samp_defaults(&s.samp, 1);
        s.dep_steps = -1;
        ms_error e = {0};
        step_ok = lm_backend_step(b, &s, 1, &e) == MS_OK;
        snprintf(msg, sizeof msg, "%s", step_ok ? "ok" : e.msg);
        lm_backend_close(b);
    }
    result(b && failed > 0 && !stale && !wrong && step_ok, name,
           "%d opens failed on their n-th allocation (%d not out of memory, %d leaving a stale last error); the "
           "backend opened after them steps: %s", failed, wrong, stale, msg);
}

/* ---- padding rows do not race on the scratch slot --------------------------------------------- */

static int padding_steps(lm_backend *b, int n, int steps, int *out, ms_error *e) {
    const lm_config *g = &b->cfg;
    lm_step_slot s[8];
    memset(s, 0, sizeof s);
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < n; r++) {
            s[r].slot = r;
            for (int i = 0; i < g->n_streams; i++)
                s[r].tokens[i] = (t * 7 + r * 3 + i) % (i == 0 ? g->text_card : g->card);
            lm_samp_defaults(&s[r].samp, 0);
            s[r].dep_steps = -1;
        }
        if (lm_backend_step(b, s, n, e) != MS_OK) return -1;
        for (int r = 0; r < n; r++) out[t * n + r] = s[r].out_text;
    }
    return 0;
}

static void test_padding_rows(void) {
    const char *name = "padding_rows";
    if (!begin(name)) return;
    if (!emu_set_race_check) {
        printf("skip %-36s needs the emulator's write-race check\n", name);
        return;
    }
    const char *dir = make_model("pad", 8, 12, 1);
    int got[2][15], ok = 1;
    char why[600] = "";
    for (int graphs = 0; graphs < 2 && ok; graphs++) {
        knobs(graphs, 1);
        ms_error e = {0};
        lm_backend *b = open_b(&lm_cuda_backend, dir, 8, 0);
        emu_set_quiet(1);
        emu_set_race_check(1);
        int rc = padding_steps(b, 5, 3, got[graphs], &e);
        emu_set_race_check(0);
        emu_set_quiet(0);
        lm_backend_close(b);
        if (rc) {
            snprintf(why, sizeof why, " (%s: %s)", graphs ? "replayed" : "uncaptured", e.msg);
            cudaDeviceReset();   /* the fault is sticky: the later cases get a clean device */
        }
        ok &= !rc;
    }
    ok &= !memcmp(got[0], got[1], sizeof got[0]);
    result(ok, name, "5 rows in the bucket of 8 (3 padding rows), 3 steps, uncaptured and replayed, write-race check "
           "on: %s%s", ok ? "no race, the same tokens on both paths" : "FAILED", why);
}

/* The launches of one step at B = 1 (uncaptured: each launch is a node of
 * the replayed graph) by kernel name, from the emulator's launch table
 * (emu_traffic): in a step on the matvec path with bf16 K/V, bf16 or int8
 * weights, RoPE and the ring store run in the QKV product's launch
 * (matvec_*_norm_rope, once per temporal layer) and no RoPE kernel runs;
 * with the int8 K/V, and on the GEMM path, RoPE keeps its launch
 * (qkv_rope_kernel, once per layer) and the step has exactly num_layers
 * launches more than the fused one. Emulator only. */
#ifdef MOSHID_CUDA_EMULATOR
typedef struct step_count {
    long total, fused, rope;
    int layers;
} step_count;

static step_count step_kernels(const char *dir, int w8, int kv8, int gemm_min) {
    knobs(0, gemm_min);
    q8_weights = w8;
    q8_kv = kv8;
    lm_backend *b = open_b(&lm_cuda_backend, dir, 2, 0);
    q8_weights = q8_kv = 0;
    const lm_config *g = &b->cfg;
    lm_step_slot s;
    memset(&s, 0, sizeof s);
    s.slot = 1;
    rand_tokens(s.tokens, 1, g, 77);
    lm_samp_greedy(&s.samp);
    s.dep_steps = -1;
    step_or_die(b, &s, 1);   /* position 0 */
    emu_traffic_start(1);
    step_or_die(b, &s, 1);   /* position 1: the step counted */
    static emu_traffic t[512];
    int n = emu_traffic_get(t, 512);
    emu_traffic_stop();
    step_count c = {.layers = g->num_layers};
    for (int i = 0; i < n; i++) {
        c.total += (long)t[i].launches;
        if (strstr(t[i].kernel, "_norm_rope<")) c.fused += (long)t[i].launches;
        if (!strncmp(t[i].kernel, "qkv_rope_kernel<", 16)) c.rope += (long)t[i].launches;
    }
    lm_backend_close(b);
    return c;
}
#endif

static void test_rope_in_qkv(void) {
    const char *name = "step_kernels/rope_in_qkv";
    if (!begin(name)) return;
#ifndef MOSHID_CUDA_EMULATOR
    printf("skip %-36s the emulator's launch table counts the step's kernels\n", name);
#else
    const char *dir = make_model("rope-nodes", 8, 12, 1);
    step_count bf = step_kernels(dir, 0, 0, 0), w8 = step_kernels(dir, 1, 0, 0), kv8 = step_kernels(dir, 1, 1, 0),
               gemm = step_kernels(dir, 0, 0, 1);
    const int L = bf.layers;
    int ok = L > 0 && bf.fused == L && bf.rope == 0 && w8.fused == L && w8.rope == 0 && kv8.fused == 0 &&
             kv8.rope == L && gemm.fused == 0 && gemm.rope == L && kv8.total - w8.total == L;
    result(ok, name, "B=1, %d layers: matvec bf16 K/V %ld launches (%ld fused RoPE, %ld RoPE), int8 weights %ld (%ld, "
           "%ld), int8 K/V %ld (%ld, %ld: %ld more), GEMM path %ld (%ld, %ld)", L, bf.total, bf.fused, bf.rope,
           w8.total, w8.fused, w8.rope, kv8.total, kv8.fused, kv8.rope, kv8.total - w8.total, gemm.total, gemm.fused,
           gemm.rope);
#endif
}

int main(int argc, char **argv) {
    if (argc > 1) filter = argv[1];
    on_emu = emu_last_kernel != NULL;
    char why[512];
    if (gu_devices(why, sizeof why) <= 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/backend-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) die("mkdtemp", NULL);
    atexit(cleanup);
    double t0 = now_ms();
    /* batches of 2 and 3 on the matvec (2 sub-steps: the emulated matvec is slow) */
    test_teacher_forced("kyutai", "matvec", 0, 8, 12, 0, 5, 5, 2);
    /* every product a GEMM on the emulator; 16 steps: slot 0 past the wrap */
    test_teacher_forced("kyutai", "gemm", 0, 8, 12, 1, 0, 16, -1);
    test_teacher_forced("personaplex", "gemm", 0, 16, 12, 1, 0, 16, -1);
    /* the peaked models: the issue's plain rule on the GEMM path (110 rows
     * per stream: one flip in 100 is allowed). The matvec path meets it on
     * the random model already (above); the peaked model there (same
     * schedule, measured: 13/13 per stream, err <= 1.7e-4) costs another
     * 6 s of emulated matvec and is run by `backend-test peaked/matvec`. */
    if (filter && strstr("teacher_forced/kyutai-peaked/matvec", filter))
        test_teacher_forced("kyutai", "matvec", 1, 8, 12, 0, 5, 5, 2);
    test_teacher_forced("kyutai", "gemm", 1, 8, 12, 1, 0, 40, -1);
    test_teacher_forced("personaplex", "gemm", 1, 16, 12, 1, 0, 40, -1);
    test_sampler("kyutai", 8);
    test_prefill_steps(40, 18, 0);   /* one chunk of 18 rows on the GEMM, single steps on the matvec */
    test_prefill_steps(12, 20, 1);   /* chunks of 12, the ring wraps inside */
    test_prefill_cpu();
    test_snapshot();
    test_graphs("kyutai", 8, -1);
    test_graphs("personaplex", 16, 8);
    test_dep_chain("bf16", 0, 0, 48);
    test_dep_chain("int8", 1, 1, 0);
    test_random();
    test_codec();
    test_teacher_forced_mkmodel(8);    /* Kyutai-shaped */
    test_teacher_forced_mkmodel(16);   /* PersonaPlex-shaped */
    test_f16();
    test_reset();
    test_dep_steps();
    test_invalid();
    test_max_slots();
    test_frame();
    test_snapshot_steady();
    test_device1_thread();
    test_open_oom();
    test_padding_rows();
    test_rope_in_qkv();
    test_q8();
    test_device_error();               /* last: leaves the emulated device faulted until its reset */
    printf("%d passed, %d failed in %.1f s\n", n_pass, n_fail, (now_ms() - t0) / 1e3);
    return n_fail ? 1 : 0;
}
