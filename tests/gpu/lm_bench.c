/* lm_bench.c - lm-bench: the CUDA backend's LM step at a given shape with
 * random weights generated on the device (no checkpoint), as ratios
 * measured side by side in one run (issue 12, items 7-8).
 *
 *   lm-bench --shape 7b|tiny [--variant kyutai|personaplex] [--out FILE]
 *            [--batches 1,8,32,64] [--positions 16,3000] [--warmup N]
 *            [--steps N] [--prefill P] [--budget-ms 80] [--max-slots N]
 *            [--deadline-s S] [--seed S] [--weights int8] [--kv int8]
 *   lm-bench --shape 7b --write-config FILE   (the config.json it uses, for
 *                                              tests/gpu/bench_official.py)
 *   lm-bench --shape tiny --backend cpu --model-dir DIR   (a self-test of
 *            this program: the CPU reference backend on a checkpoint, e.g.
 *            from moshid-mkmodel; no device, no copy ceiling, no plan)
 *   lm-bench ... --e2e [--mimi FILE [--mimi-config FILE]] [--mimi-dims real|tiny] [--codec-fill N]
 *            the end-to-end frame step instead (below)
 *
 * What it measures, in this order, each result row printed as a markdown
 * table row and appended (fflush'ed) to --out the moment it is measured,
 * so a run cut short by its stage's timeout still leaves what it had:
 *  - the ceiling: cudaMemcpy device-to-device bandwidth ((read + write
 *    bytes) / time, CUDA events, a buffer far larger than L2);
 *  - the memory plan: the most slots that fit on the card
 *    (cu_plan_max_slots against cudaMemGetInfo's total), then the backend
 *    opened with that many (capped by --max-slots); if the backend refuses
 *    (not enough memory by its own plan, or a cudaMalloc failed), its
 *    message is recorded and it is opened with 7/8 as many, at most
 *    LMB_OPEN_TRIES times;
 *  - prefill time for --prefill positions (300: a persona prompt);
 *  - step time for each batch at each position: one slot filled to the
 *    position by prefill, kv_snapshot'ed and kv_restore'd into the other
 *    slots of the batch (never by stepping), then --warmup steps and the
 *    median of --steps timed steps (each step moves every slot on by one
 *    position, so a measurement covers positions p .. p + warmup + steps;
 *    the snapshot is restored again before each batch size). Achieved
 *    weight-read bandwidth = bytes of the step's matrices (below) / step
 *    time, and that time against the time to read those bytes once at the
 *    copy bandwidth (the target: batch 1 at position 16 within
 *    1.3x);
 *  - last, the largest batch under --budget-ms per step at the largest position
 *    (full context for 7b), by bisection over 1 .. the slots opened,
 *    assuming the step time grows with the batch.
 * --weights int8 and --kv int8 open the backend with the 8-bit schemes
 * (random int8 rows on the device; the plan counts them): the device
 * check's 8-bit stages. The bandwidth ratios still count bf16 bytes.
 * Step times are host wall time around lm_backend_step, which returns once
 * the sampled tokens are on the host: what the engine waits for per frame.
 *
 * --e2e (issue 15, item 5; its own stage of the device check) measures the
 * frame step instead: the backend opened with the random LM weights AND a
 * codec, with max(--batches) slots (fewer if the plan, codec counted, says
 * they do not fit) and opts.pipeline, as moshid opens it. The codec is
 * --mimi, or a random-weight Mimi written to the temporary model_dir
 * (tests/gpu/mimi_rand.c: the official tensor names, so the backend loads
 * it as a real checkpoint): --mimi-dims real (the default with --shape 7b:
 * the official configuration, 334 MB of float32) or tiny (the default with
 * --shape tiny: the tiny fixture's sizes), its codebook size and codes per
 * frame taken from the LM (card, n_user: 2048 and 8 for the 7B). Then per
 * position (filled as above) and batch: the slots restored from the
 * snapshot, each slot's LMGen bookkeeping
 * (lmgen.h) set as a session that has run `position` frames (offset =
 * position, a ring of random in-range tokens), frames of random PCM, and
 * three medians over the same slots and positions:
 *  - "e2e lm step": lm_backend_step alone (what the rows above measure);
 *  - "e2e sync": lm_frame_submit then lm_frame_wait of each frame (encode,
 *    LMGen + LM step, decode, in series);
 *  - "e2e pipelined": frame t + 1 submitted before frame t is waited for,
 *    as the daemon's engine runs it (daemon/session/scheduler.c, model.c): the
 *    wall time of one submit + one wait in the steady state, the decode of
 *    t running during the encode and LM step of t + 1.
 * The codec state is the steady state a user gets: before the rows, each
 * batch's pipelined median just after a codec reset is taken (the fresh
 * figure, printed in its pipelined row), then every slot runs the codec
 * alone for context x hop / 1920 frames (125 for the official Mimi;
 * --codec-fill N instead), so every transformer ring row is valid, and the
 * rows keep that state (only K/V and the bookkeeping are placed).
 * Issue 15's target, end-to-end at batch 64 and full context under 60 ms,
 * is reported by the device check, not asserted here. Kyutai's
 * bookkeeping only (--variant personaplex is refused with --e2e).
 *
 * The backend comes from the plugin (plugin_load("cuda"), its `backend`
 * table), as moshid gets it. The emulator build (tests/gpu/bench.mk,
 * LMB_LINKED_PLUGIN) links the plugin's objects instead and calls its entry
 * point directly: the emulator has no loadable plugin. No backend table
 * (p->backend NULL) or no device: a "skipped" row and exit 77.
 *
 * Exit: 0 measured, 77 skipped (no device, no plugin, no backend table),
 * 1 failure (the backend did not open, a prefill, step or restore failed:
 * the row says which), 2 bad arguments.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "lm.h"
#include "cu_check.h"
#include "gpu_util.h"
#include "lm_config.h"
#include "lmgen.h"
#include "mimi.h"
#include "mimi_rand.h"
#include "plugin.h"
#if LMB_HAVE_PLAN
#include "cu_plan.h"
#endif

#define LMB_MAX_LIST 16          /* most entries of --batches / --positions */
#define LMB_MAX_STEPS 1000       /* most timed steps of one measurement */
#define LMB_OPEN_TRIES 4         /* backend opens tried when it refuses the slot count */
#define LMB_PREFILL_REPS 8       /* most timed prefills (lmb_shape.prefill_reps) */
#define LMB_SEARCH_WARMUP 2      /* per bisection probe, at most (and --warmup) */
#define LMB_SEARCH_STEPS 5       /* ... (and --steps) */
#define LMB_COPY_ITERS 20
/* Frames in flight in the pipelined frame loop (--e2e): frame t + 1 is
 * submitted before frame t is waited for, as the daemon's engine does when
 * the next batch is ready: the decode of t (what the CUDA backend leaves
 * running after submit returns) overlaps the encode and LM step of t + 1.
 * A third frame would overlap nothing more: decodes run in order on one
 * stream, and submit itself waits for the encode and the LM step. */
#define LMB_E2E_DEPTH 2
/* Frames of random PCM beyond the batch: frame i reads rows i % POOL
 * onwards, so consecutive frames and slots get different audio. */
#define LMB_PCM_POOL 8

/* One shape: its config.json and the run's defaults. */
typedef struct lmb_shape {
    const char *name;
    const char *json_fmt;        /* printf format: dep_q, then context */
    int dep_q[2];                /* Kyutai, PersonaPlex */
    int context;
    int batches[4];
    int positions[2];            /* the second is the full context */
    int warmup, steps, prefill;
    int prefill_reps;            /* timed prefills (median), after one warm-up when > 1 */
    int max_slots;               /* 0: what the plan says fits */
    size_t copy_bytes;           /* the D2D buffer, read + write halves */
} lmb_shape;

/* The keys every shape shares, under the official LMModel's names
 * (lm_config.c reads the same keys). */
#define LMB_JSON_COMMON                                                                                    \
    "\"hidden_scale\": 4.125, \"max_period\": 10000, \"gating\": \"silu\", \"norm\": \"rms_norm_f32\", "  \
    "\"positional_embedding\": \"rope\", \"causal\": true, \"existing_text_padding_id\": 3, "              \
    "\"depformer_multi_linear\": true, \"depformer_weights_per_step\": true, \"depformer_pos_emb\": \"none\", " \
    "\"dep_q\": %d, \"context\": %d, "
static const lmb_shape lmb_shapes[] = {
    {
        /* The released 7B (moshiko / moshika; PersonaPlex with dep_q 16):
         * ../shared/spec/moshi-lm.md section 2. */
        .name = "7b",
        .json_fmt = "{" LMB_JSON_COMMON
                    "\"n_q\": 16, \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1], "
                    "\"dim\": 4096, \"num_heads\": 32, \"num_layers\": 32, \"card\": 2048, \"text_card\": 32000, "
                    "\"depformer_dim\": 1024, \"depformer_num_heads\": 16, \"depformer_num_layers\": 6, "
                    "\"depformer_dim_feedforward\": 4224}\n",
        .dep_q = {8, 16},
        .context = 3000,
        .batches = {1, 8, 32, 64},
        .positions = {16, 3000},
        .warmup = 3,
        .steps = 15,
        .prefill = 300,
        .prefill_reps = 3,
        .max_slots = 0,
        .copy_bytes = (size_t)1 << 30,
    },
    {
        /* For the dry run on the emulator (one fiber per GPU thread, about
         * half a second per step at this size on the 2-core VM): every
         * width a multiple of 8 (the matvec's vector path), one layer on
         * each side, 4 audio inputs of which 2 generated, a context of 32
         * so the full-context case is cheap, one timed step per
         * measurement: every kind of row, no meaningful number. */
        .name = "tiny",
        .json_fmt = "{" LMB_JSON_COMMON
                    "\"n_q\": 4, \"delays\": [0, 0, 1, 0, 1], "
                    "\"dim\": 64, \"num_heads\": 4, \"num_layers\": 1, \"card\": 32, \"text_card\": 48, "
                    "\"depformer_dim\": 32, \"depformer_num_heads\": 2, \"depformer_num_layers\": 1, "
                    "\"depformer_dim_feedforward\": 132}\n",
        .dep_q = {2, 4},
        .context = 32,
        .batches = {1, 2, 0, 0},
        .positions = {4, 32},
        .warmup = 0,
        .steps = 1,
        .prefill = 8,
        .prefill_reps = 1,
        .max_slots = 2,
        .copy_bytes = (size_t)1 << 20,
    },
};

typedef struct lmb_opts {
    const lmb_shape *shape;
    lm_variant variant;
    const char *out;
    const char *write_config;
    int cpu;                     /* --backend cpu: the CPU reference backend */
    const char *model_dir;       /* its checkpoint (--model-dir) */
    int batches[LMB_MAX_LIST], n_batches;
    int positions[LMB_MAX_LIST], n_positions;
    int warmup, steps, prefill, max_slots;
    double budget_ms;
    double deadline_s;           /* <= 0: none */
    uint64_t seed;
    int e2e;                     /* --e2e: the frame step instead of the LM rows */
    int codec_fill;              /* --codec-fill: frames that fill the codec context (-1: the config's) */
    const char *mimi, *mimi_config;   /* --mimi, --mimi-config (NULL: a random one) */
    int mimi_real;               /* --mimi-dims: 1 real, 0 tiny */
    int w8, kv8;                 /* --weights int8, --kv int8 */
} lmb_opts;

static FILE *lmb_out;            /* --out, appended, or NULL */
static double lmb_t0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* emit: one result line to stdout and to --out, flushed at once. */
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (lmb_out) {
        fputs(line, lmb_out);
        fputc('\n', lmb_out);
        fflush(lmb_out);
    }
}

/* row: a result row "| moshid | measure | batch | position | ms | result |". */
static void row(const char *measure, const char *batch, const char *pos, double ms, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void row(const char *measure, const char *batch, const char *pos, double ms, const char *fmt, ...) {
    char res[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res, sizeof res, fmt, ap);
    va_end(ap);
    char msb[32] = "-";
    if (ms >= 0) snprintf(msb, sizeof msb, "%.3f", ms);
    /* a result must not break the table: no '|' or newline in it */
    for (char *c = res; *c; c++)
        if (*c == '|' || *c == '\n') *c = '/';
    emit("| moshid | %s | %s | %s | %s | %s |", measure, batch, pos, msb, res);
}

static int deadline_passed(const lmb_opts *o) {
    return o->deadline_s > 0 && now_s() - lmb_t0 > o->deadline_s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* parse_list: "1,8,32" into v (at most LMB_MAX_LIST positive ints). */
static int parse_list(const char *s, int *v, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 1 || x > LM_MAX_CONTEXT || *n >= LMB_MAX_LIST) return -1;
        v[(*n)++] = (int)x;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return *n > 0 ? 0 : -1;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: lm-bench --shape 7b|tiny [--variant kyutai|personaplex] [--out FILE] [--write-config FILE]\n"
            "       [--batches B,...] [--positions P,...] [--warmup N] [--steps N] [--prefill P]\n"
            "       [--budget-ms MS] [--max-slots N] [--deadline-s S] [--seed S] [--weights int8] [--kv int8]\n"
            "       [--backend cuda|cpu --model-dir DIR]\n"
            "       [--e2e [--mimi FILE [--mimi-config FILE]] [--mimi-dims real|tiny] [--codec-fill N]]\n");
}

static int parse_args(int argc, char **argv, lmb_opts *o) {
    *o = (lmb_opts){.variant = LM_VARIANT_KYUTAI, .budget_ms = 80.0, .seed = 20261201, .codec_fill = -1};
    const char *shape = NULL, *batches = NULL, *positions = NULL, *dims = NULL;
    int warmup = -1, steps = -1, prefill = -1, max_slots = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--e2e")) {   /* the one flag without a value */
            o->e2e = 1;
            continue;
        }
        if (!v) bad = 1;
        else if (!strcmp(a, "--shape")) shape = v;
        else if (!strcmp(a, "--variant")) {
            if (!strcmp(v, "kyutai")) o->variant = LM_VARIANT_KYUTAI;
            else if (!strcmp(v, "personaplex")) o->variant = LM_VARIANT_PERSONAPLEX;
            else bad = 1;
        } else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--write-config")) o->write_config = v;
        else if (!strcmp(a, "--model-dir")) o->model_dir = v;
        else if (!strcmp(a, "--mimi")) o->mimi = v;
        else if (!strcmp(a, "--mimi-config")) o->mimi_config = v;
        else if (!strcmp(a, "--mimi-dims")) {
            dims = v;
            bad = strcmp(v, "real") && strcmp(v, "tiny");
        }
        else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu")) o->cpu = 1;
            else bad = strcmp(v, "cuda") != 0;
        }
        else if (!strcmp(a, "--batches")) batches = v;
        else if (!strcmp(a, "--positions")) positions = v;
        else if (!strcmp(a, "--warmup")) bad = parse_int(v, 0, LMB_MAX_STEPS, &warmup);
        else if (!strcmp(a, "--steps")) bad = parse_int(v, 1, LMB_MAX_STEPS, &steps);
        else if (!strcmp(a, "--prefill")) bad = parse_int(v, 1, LM_MAX_CONTEXT, &prefill);
        else if (!strcmp(a, "--max-slots")) bad = parse_int(v, 1, LM_MAX_SLOTS, &max_slots);
        else if (!strcmp(a, "--codec-fill")) bad = parse_int(v, 0, 100000, &o->codec_fill);
        else if (!strcmp(a, "--budget-ms")) {
            char *end;
            o->budget_ms = strtod(v, &end);
            bad = *end || !(o->budget_ms > 0 && o->budget_ms < 1e6);
        } else if (!strcmp(a, "--deadline-s")) {
            char *end;
            o->deadline_s = strtod(v, &end);
            bad = *end || !(o->deadline_s >= 0 && o->deadline_s < 1e6);
        } else if (!strcmp(a, "--weights") || !strcmp(a, "--kv")) {
            int *f = a[2] == 'w' ? &o->w8 : &o->kv8;
            *f = !strcmp(v, "int8");
            bad = !*f && strcmp(v, "bf16");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 0);
            bad = *end != '\0';
        } else bad = 1;
        if (bad) {
            fprintf(stderr, "lm-bench: bad argument %s%s%s\n", a, v ? " " : "", v ? v : "");
            usage();
            return -1;
        }
        i++;
    }
    for (size_t s = 0; shape && s < sizeof lmb_shapes / sizeof lmb_shapes[0]; s++)
        if (!strcmp(shape, lmb_shapes[s].name)) o->shape = &lmb_shapes[s];
    if (!o->shape) {
        fprintf(stderr, "lm-bench: --shape 7b or --shape tiny is required\n");
        usage();
        return -1;
    }
    if (o->cpu != (o->model_dir != NULL)) {
        fprintf(stderr, "lm-bench: --backend cpu needs --model-dir (and only it)\n");
        return -1;
    }
    if (!o->e2e && (o->mimi || o->mimi_config || dims)) {
        fprintf(stderr, "lm-bench: --mimi, --mimi-config and --mimi-dims go with --e2e\n");
        return -1;
    }
    if ((o->mimi_config && !o->mimi) || (o->mimi && dims)) {
        fprintf(stderr, "lm-bench: --mimi-config goes with --mimi; --mimi-dims with the random codec (no --mimi)\n");
        return -1;
    }
    if (o->e2e && o->variant != LM_VARIANT_KYUTAI) {
        /* a PersonaPlex slot restored at a position needs its provided
         * flags and its own ring (lmgen_pp.h), which e2e_place does not build */
        fprintf(stderr, "lm-bench: --e2e runs Kyutai's bookkeeping only\n");
        return -1;
    }
    o->mimi_real = dims ? !strcmp(dims, "real") : !strcmp(o->shape->name, "7b");
    const lmb_shape *sh = o->shape;
    if (batches) {
        if (parse_list(batches, o->batches, &o->n_batches)) {
            fprintf(stderr, "lm-bench: bad --batches %s\n", batches);
            return -1;
        }
    } else {
        for (int i = 0; i < 4 && sh->batches[i]; i++) o->batches[o->n_batches++] = sh->batches[i];
    }
    if (positions) {
        if (parse_list(positions, o->positions, &o->n_positions)) {
            fprintf(stderr, "lm-bench: bad --positions %s\n", positions);
            return -1;
        }
    } else {
        o->positions[0] = sh->positions[0];
        o->positions[1] = sh->positions[1];
        o->n_positions = 2;
    }
    for (int i = 0; i < o->n_positions; i++)
        if (o->positions[i] > sh->context) {
            /* a snapshot holds positions 0..P-1 of an unwrapped ring */
            fprintf(stderr, "lm-bench: position %d is past the context (%d)\n", o->positions[i], sh->context);
            return -1;
        }
    o->warmup = warmup >= 0 ? warmup : sh->warmup;
    o->steps = steps >= 0 ? steps : sh->steps;
    o->prefill = prefill >= 0 ? prefill : sh->prefill;
    if (o->prefill > sh->context) {
        fprintf(stderr, "lm-bench: --prefill %d is past the context (%d)\n", o->prefill, sh->context);
        return -1;
    }
    o->max_slots = max_slots >= 0 ? max_slots : sh->max_slots;
    return 0;
}

/* shape_json: the config.json text of the shape into buf. */
static int shape_json(const lmb_opts *o, char *buf, size_t len) {
    int dep_q = o->shape->dep_q[o->variant == LM_VARIANT_PERSONAPLEX];
    int n = snprintf(buf, len, o->shape->json_fmt, dep_q, o->shape->context);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/* step_matrix_bytes: bf16 bytes of the matrices one step reads once per
 * batch (the temporal stack, the text head, dep_steps depformer steps),
 * embedding rows left out (a gather of 17 rows, not a read of the table).
 * 7B, 8 steps: 14.75 GB (spec section 6: "about 14.8 GB"). */
static double step_matrix_bytes(const lm_config *c, int dep_steps) {
    double d = c->dim, h = c->hidden, dd = c->depformer_dim, dh = c->dep_hidden;
    double layer = d * (3 * d) + d * d + d * (2 * h) + h * d;
    double dlayer = dd * (3 * dd) + dd * dd + dd * (2 * dh) + dh * dd;
    double dstep = d * dd + c->depformer_num_layers * dlayer + dd * c->card;
    return 2.0 * (c->num_layers * layer + d * c->text_card + dep_steps * dstep);
}

/* copy_gbps: device-to-device cudaMemcpy bandwidth, GB/s counting read +
 * write, and the milliseconds of one copy. 0 on failure (row says why). */
static double copy_gbps(size_t bytes, double *ms_out) {
    size_t half = bytes / 2;
    char *buf = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double gbps = 0;
    cudaError_t e = cudaMalloc((void **)&buf, bytes);
    if (e != cudaSuccess) {
        row("copy D2D", "-", "-", -1, "FAILED: cudaMalloc %zu bytes: %s", bytes, cudaGetErrorString(e));
        return 0;
    }
    if ((e = cudaMemset(buf, 1, bytes)) != cudaSuccess || (e = cudaEventCreate(&e0)) != cudaSuccess ||
        (e = cudaEventCreate(&e1)) != cudaSuccess ||
        (e = cudaMemcpy(buf + half, buf, half, cudaMemcpyDeviceToDevice)) != cudaSuccess ||   /* warm-up */
        (e = cudaEventRecord(e0, 0)) != cudaSuccess)
        goto fail;
    for (int i = 0; i < LMB_COPY_ITERS; i++)
        if ((e = cudaMemcpyAsync(buf + half, buf, half, cudaMemcpyDeviceToDevice, 0)) != cudaSuccess) goto fail;
    float ms = 0;
    if ((e = cudaEventRecord(e1, 0)) != cudaSuccess || (e = cudaEventSynchronize(e1)) != cudaSuccess ||
        (e = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess)
        goto fail;
    *ms_out = ms / LMB_COPY_ITERS;
    gbps = 2.0 * (double)half / (*ms_out * 1e6);
    goto done;
fail:
    row("copy D2D", "-", "-", -1, "FAILED: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(buf);
    return gbps;
}

/* The benchmark's state. */
typedef struct lmb {
    const lmb_opts *o;
    lm_backend *b;
    const lm_config *cfg;
    int slots;                   /* opened */
    lm_step_slot *ss;            /* (slots) */
    int *tokens;                 /* (context, n_streams) prefill input */
    gu_rng rng;
    uint64_t step_no;
    double copy_gbps;
    double wbytes;               /* step_matrix_bytes of a full depformer */
    /* --e2e */
    lmgen_slot *gens;            /* (slots) each slot's LMGen bookkeeping */
    lmgen_slot **gptr;           /* (slots) &gens[i] */
    int *ids;                    /* (slots) 0, 1, ... */
    float *pcm;                  /* (slots + LMB_PCM_POOL, MS_FRAME_SAMPLES) random PCM */
    lm_frame fr[LMB_E2E_DEPTH];
    int nfr;                     /* frames allocated */
} lmb;

static void random_tokens(lmb *m, int *t, int n) {
    const lm_config *c = m->cfg;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < c->n_streams; s++)
            t[i * c->n_streams + s] = s == 0 ? gu_int(&m->rng, 0, c->text_card - 1) : gu_int(&m->rng, 0, c->card - 1);
}

/* fill: slot 0 to position p by one prefill (in chunks of 256 if the
 * backend refuses the whole), and its K/V snapshotted, for restore() into
 * the slots of a batch. Returns the snapshot (caller frees) or NULL (row
 * written). */
static lm_kv_snap *fill(lmb *m, int p, ms_error *err) {
    char pb[32];
    snprintf(pb, sizeof pb, "%d", p);
    if (lm_backend_reset_slot(m->b, 0, err)) goto fail;
    random_tokens(m, m->tokens, p);
    double t0 = now_s();
    if (lm_backend_prefill(m->b, 0, 0, p, m->tokens, NULL, err)) {
        row("fill", "1", pb, -1, "one prefill of %d positions refused (%s), in chunks of 256", p, err->msg);
        if (lm_backend_reset_slot(m->b, 0, err)) goto fail;
        for (int q = 0; q < p; q += 256) {
            int k = p - q < 256 ? p - q : 256;
            if (lm_backend_prefill(m->b, 0, q, k, m->tokens + (size_t)q * m->cfg->n_streams, NULL, err)) goto fail;
        }
    }
    double t1 = now_s();
    lm_kv_snap *snap = NULL;
    if (lm_backend_kv_snapshot(m->b, 0, p, &snap, err)) goto fail;
    double t2 = now_s();
    row("fill", "1", pb, (t1 - t0) * 1e3, "prefill of %d positions into slot 0 (snapshot %.2f ms)", p, (t2 - t1) * 1e3);
    return snap;
fail:
    row("fill", "1", pb, -1, "FAILED: %s", err->msg);
    return NULL;
}

/* restore: the snapshot into slots 0..n-1; ms of the whole, or -1. */
static double restore(lmb *m, const lm_kv_snap *snap, int n, ms_error *err) {
    double t0 = now_s();
    for (int s = 0; s < n; s++)
        if (lm_backend_kv_restore(m->b, s, snap, err)) return -1;
    return (now_s() - t0) * 1e3;
}

/* time_steps: warmup + steps steps of slots 0..n-1, each step's wall time
 * into ms[]; 0, or -1 with err set. */
static int time_steps(lmb *m, int n, int warmup, int steps, double *ms, ms_error *err) {
    for (int i = 0; i < warmup + steps; i++) {
        for (int s = 0; s < n; s++) {
            lm_step_slot *x = &m->ss[s];
            *x = (lm_step_slot){.slot = s, .step = m->step_no, .dep_steps = -1};
            lm_samp_defaults(&x->samp, m->o->seed + (uint64_t)s);
            random_tokens(m, x->tokens, 1);
        }
        double t0 = now_s();
        if (lm_backend_step(m->b, m->ss, n, err)) return -1;
        double t = (now_s() - t0) * 1e3;
        if (i >= warmup) ms[i - warmup] = t;
        m->step_no++;
    }
    return 0;
}

/* measure: step time of batch n at position p (snapshot restored first);
 * the median in *med (and min), 0, or -1 with err set. */
static int measure(lmb *m, const lm_kv_snap *snap, int n, int warmup, int steps, double *med, double *mn,
                   double *restore_ms, ms_error *err) {
    double ms[LMB_MAX_STEPS];
    *restore_ms = restore(m, snap, n, err);
    if (*restore_ms < 0) return -1;
    if (time_steps(m, n, warmup, steps, ms, err)) return -1;
    *med = median(ms, steps);
    *mn = ms[0];
    return 0;
}

static void step_row(lmb *m, int n, int p, double med, double mn, double restore_ms) {
    char nb[16], pb[32];
    snprintf(nb, sizeof nb, "%d", n);
    snprintf(pb, sizeof pb, "%d", p);
    double gbps = m->wbytes / (med * 1e6);
    if (m->copy_gbps > 0) {
        double read_ms = m->wbytes / (m->copy_gbps * 1e6);
        row("step", nb, pb, med,
            "weights %.4g GB/s = %.3g of copy; %.3gx the weight-read time (%.3g ms); %.3f ms per slot; min %.3f; "
            "restore %.1f ms",
            gbps, gbps / m->copy_gbps, med / read_ms, read_ms, med / n, mn, restore_ms);
    } else {
        row("step", nb, pb, med, "weights %.4g GB/s (no copy ceiling); %.3f ms per slot; min %.3f", gbps, med / n, mn);
    }
}

/* search: the largest batch in 1..m->slots under the budget at the
 * snapshot's position, by bisection (step time assumed to grow with the
 * batch); a row per probe and the result row. */
static int search(lmb *m, const lm_kv_snap *snap, int p, ms_error *err) {
    const lmb_opts *o = m->o;
    char pb[32], nb[16];
    snprintf(pb, sizeof pb, "%d", p);
    int lo = 0, hi = m->slots + 1;   /* lo: known under the budget (0: none); hi: known over (slots+1: none) */
    double lo_ms = -1;
    while (hi - lo > 1) {
        if (deadline_passed(o)) {
            row("max batch under budget", "-", pb, -1, "search cut short by --deadline-s: between %d and %d", lo,
                hi - 1);
            return 0;
        }
        int mid = lo + (hi - lo) / 2;
        double med, mn, rms;
        int w = o->warmup < LMB_SEARCH_WARMUP ? o->warmup : LMB_SEARCH_WARMUP;
        int n = o->steps < LMB_SEARCH_STEPS ? o->steps : LMB_SEARCH_STEPS;
        if (measure(m, snap, mid, w, n, &med, &mn, &rms, err)) return -1;
        snprintf(nb, sizeof nb, "%d", mid);
        row("search", nb, pb, med, "%s %.0f ms", med < o->budget_ms ? "under" : "over", o->budget_ms);
        if (med < o->budget_ms) {
            lo = mid;
            lo_ms = med;
        } else {
            hi = mid;
        }
    }
    snprintf(nb, sizeof nb, "%d", lo);
    if (lo == 0) row("max batch under budget", "0", pb, -1, "even batch 1 takes %.0f ms or more", o->budget_ms);
    else
        row("max batch under budget", nb, pb, lo_ms, "largest batch under %.0f ms per step%s (of %d slots opened)",
            o->budget_ms, lo == m->slots ? ", every slot opened" : "", m->slots);
    return 0;
}

/* ---- the end-to-end frame step (--e2e) ------------------------------------------------ */

/* e2e_alloc: the bookkeeping, the frames and the PCM pool for m->slots. */
static int e2e_alloc(lmb *m, ms_error *err) {
    size_t n = (size_t)m->slots;
    m->gens = calloc(n, sizeof *m->gens);
    m->gptr = calloc(n, sizeof *m->gptr);
    m->ids = calloc(n, sizeof *m->ids);
    m->pcm = malloc((n + LMB_PCM_POOL) * MS_FRAME_SAMPLES * sizeof *m->pcm);
    if (!m->gens || !m->gptr || !m->ids || !m->pcm) return ms_err_set(err, MS_ERR_NOMEM, "lm-bench: out of memory");
    for (int i = 0; i < m->slots; i++) m->ids[i] = i;
    /* noise at -6 dBFS: every codec layer sees non-trivial input */
    for (size_t i = 0; i < (n + LMB_PCM_POOL) * MS_FRAME_SAMPLES; i++)
        m->pcm[i] = (float)(gu_uniform(&m->rng) - 0.5);
    for (; m->nfr < LMB_E2E_DEPTH; m->nfr++)
        if (lm_frame_alloc(m->b, &m->fr[m->nfr], m->slots, err)) return -1;
    return 0;
}

static void e2e_free(lmb *m) {
    for (int i = 0; i < m->nfr; i++) lm_frame_free(&m->fr[i]);
    m->nfr = 0;
    free(m->gens);
    free(m->gptr);
    free(m->ids);
    free(m->pcm);
}

/* e2e_place: slots 0..n-1 as sessions that have run p frames: K/V restored
 * from the snapshot of positions [0, p), both codec states fresh (with
 * codec_reset; else as they are: full after e2e_fill), and the
 * LMGen bookkeeping at offset p (with Kyutai's LMGen a slot's temporal
 * position is its offset, lmgen.h) with a ring of random in-range tokens:
 * at offset p > max_delay the step reads the ring slot of the offset for
 * every stream, so no slot may hold LMGEN_UNGENERATED; the rng step
 * follows the offset. 0, or -1 with err set. */
static int e2e_place(lmb *m, const lm_kv_snap *snap, int n, int p, int codec_reset, ms_error *err) {
    const lm_config *c = m->cfg;
    lm_samp samp;
    lm_samp_defaults(&samp, m->o->seed);
    lmgen_slot saved;
    lmgen_init(&saved, c, 0, &samp);
    saved.offset = p;
    for (int st = 0; st < c->n_streams; st++)
        for (int i = 0; i < saved.ring; i++)
            saved.tokens[st][i] = gu_int(&m->rng, 0, (st == 0 ? c->text_card : c->card) - 1);
    for (int s = 0; s < n; s++) {
        if (lm_backend_kv_restore(m->b, s, snap, err) ||
            (codec_reset && lm_backend_codec_reset(m->b, s, LM_CODEC_BOTH, err)))
            return -1;
        lm_samp_defaults(&samp, m->o->seed + (uint64_t)s);
        lmgen_init(&m->gens[s], c, s, &samp);
        lmgen_restore(&m->gens[s], &saved);
        m->gptr[s] = &m->gens[s];
    }
    return 0;
}

/* e2e_frame: frame i of a batch of slots 0..n-1 into f. */
static void e2e_frame(lmb *m, lm_frame *f, int n, int i) {
    f->n = n;
    f->slots = m->ids;
    f->gens = m->gptr;
    f->pcm_in = m->pcm + (size_t)(i % LMB_PCM_POOL) * MS_FRAME_SAMPLES;
}

static int count_out(const lm_frame *f) {
    int k = 0;
    for (int j = 0; j < f->n; j++) k += f->has_out[j] != 0;
    return k;
}

/* e2e_run: warmup + steps frames of slots 0..n-1, depth frames in flight
 * (1: submit then wait, the synchronous frame step; LMB_E2E_DEPTH: frame
 * i + 1 submitted before frame i is waited for). ms[k]: the wall time of
 * iteration warmup + k (one submit and, once depth frames are in flight,
 * one wait: the steady state when warmup >= depth - 1); *outs: rows with
 * output in the timed frames. 0, or -1 with err set (what is in flight is
 * waited for first, its errors dropped). */
static int e2e_run(lmb *m, int n, int depth, int warmup, int steps, double *ms, int *outs, ms_error *err) {
    int sub = 0, done = 0, total = warmup + steps, rc = 0;
    *outs = 0;
    for (int i = 0; i < total && !rc; i++) {
        lm_frame *f = &m->fr[i % depth];
        e2e_frame(m, f, n, i);
        double t0 = now_s();
        if (lm_frame_submit(m->b, f, err)) {
            rc = -1;
            break;
        }
        sub++;
        if (sub - done == depth) {
            lm_frame *w = &m->fr[done % depth];
            if (lm_frame_wait(m->b, w, err)) rc = -1;
            /* frame `done` was submitted at iteration `done` */
            else if (done >= warmup) *outs += count_out(w);
            done++;
        }
        if (!rc && i >= warmup) ms[i - warmup] = (now_s() - t0) * 1e3;
    }
    ms_error drop = {0};
    for (; done < sub; done++) {
        lm_frame *w = &m->fr[done % depth];
        if (lm_frame_wait(m->b, w, rc ? &drop : err)) rc = -1;
        else if (done >= warmup) *outs += count_out(w);
    }
    /* Kyutai's invariant: a slot's K/V position and its LMGen offset move
     * together (a slot placed wrongly would still produce frames) */
    for (int s = 0; s < n && !rc; s++) {
        int64_t pos = lm_backend_pos(m->b, s);
        if (pos != m->gens[s].offset) {
            ms_err_set(err, MS_ERR_STATE, "slot %d: K/V position %lld but LMGen offset %lld", s, (long long)pos,
                       (long long)m->gens[s].offset);
            rc = -1;
        }
    }
    return rc;
}

/* e2e_measure: the three rows of batch n at the snapshot's position p,
 * on codec states left full by e2e_fill (the steady state); fresh: the
 * pipelined median of the same batch just after a codec reset (e2e_fresh),
 * printed beside it (< 0: not measured). */
static int e2e_measure(lmb *m, const lm_kv_snap *snap, int n, int p, double fresh, ms_error *err) {
    const lmb_opts *o = m->o;
    char nb[16], pb[32], fr[64] = "";
    snprintf(nb, sizeof nb, "%d", n);
    snprintf(pb, sizeof pb, "%d", p);
    if (fresh >= 0) snprintf(fr, sizeof fr, "; fresh codec state %.3f ms", fresh);
    /* the pipelined loop's first wait comes with frame depth - 1: the
     * frames before it are warm-up whatever --warmup says */
    int w = o->warmup > LMB_E2E_DEPTH - 1 ? o->warmup : LMB_E2E_DEPTH - 1, S = o->steps;
    double ms[LMB_MAX_STEPS], lm_med, lm_min, rms, sy_med, pi_med;
    int outs;
    if (measure(m, snap, n, w, S, &lm_med, &lm_min, &rms, err)) return -1;
    row("e2e lm step", nb, pb, lm_med, "lm_backend_step alone, same slots and positions: median of %d after %d; min %.3f",
        S, w, lm_min);

    if (e2e_place(m, snap, n, p, 0, err) || e2e_run(m, n, 1, w, S, ms, &outs, err)) return -1;
    sy_med = median(ms, S);
    row("e2e sync", nb, pb, sy_med,
        "submit then wait per frame (encode, LMGen + LM step, decode in series), codec context full: %+.3f ms over "
        "the LM step, %.3f ms per slot; min %.3f; %d of %d rows with output",
        sy_med - lm_med, sy_med / n, ms[0], outs, n * S);

    if (e2e_place(m, snap, n, p, 0, err) || e2e_run(m, n, LMB_E2E_DEPTH, w, S, ms, &outs, err)) return -1;
    pi_med = median(ms, S);
    row("e2e pipelined", nb, pb, pi_med,
        "frame t+1 submitted before frame t is waited for (the daemon's engine), codec context full%s: %+.3f ms over "
        "the LM step, sync / pipelined %.2fx, %.3f ms per slot; min %.3f; %d of %d rows with output",
        fr, pi_med - lm_med, pi_med > 0 ? sy_med / pi_med : 0, pi_med / n, ms[0], outs, n * S);
    return 0;
}

/* e2e_fill_frames: frames until the codec's transformer rings are full
 * (context steps of hop samples each). */
static int e2e_fill_frames(const lmb *m) {
    const lmb_opts *o = m->o;
    if (o->codec_fill >= 0) return o->codec_fill;
    mimi_config mc;
    ms_error err = {0};
    if (o->mimi && o->mimi_config) {
        if (mimi_config_load(&mc, o->mimi_config, &err)) mimi_config_default(&mc);
    } else if (o->mimi || o->mimi_real) {
        mimi_config_default(&mc);
    } else {
        mimi_rand_tiny(&mc, m->cfg->card, m->cfg->n_user);
    }
    return (int)(((long)mc.context * mc.hop + MS_FRAME_SAMPLES - 1) / MS_FRAME_SAMPLES);
}

/* e2e_fill: slots 0..n-1 through `frames` frames of the codec alone
 * (encode, then decode of the codes), so every transformer ring row is
 * valid. 0, or -1 with err set. */
static int e2e_fill(lmb *m, int n, int frames, ms_error *err) {
    int *codes = malloc(sizeof(int) * (size_t)n * (m->b->ncb > 0 ? m->b->ncb : 1));
    float *out = malloc(sizeof(float) * (size_t)n * MS_FRAME_SAMPLES);
    int rc = codes && out ? 0 : -1;
    if (rc) ms_err_set(err, MS_ERR_NOMEM, "e2e_fill: out of memory");
    for (int f = 0; f < frames && !rc; f++)
        if (lm_backend_mimi_encode(m->b, m->ids, n, m->pcm + (size_t)(f % LMB_PCM_POOL) * MS_FRAME_SAMPLES, codes,
                                   err) ||
            lm_backend_mimi_decode(m->b, m->ids, n, codes, out, err))
            rc = -1;
    free(codes);
    free(out);
    return rc;
}

/* e2e_fresh: the pipelined median of batch n just after a codec reset. */
static int e2e_fresh(lmb *m, const lm_kv_snap *snap, int n, int p, double *med, ms_error *err) {
    const lmb_opts *o = m->o;
    int w = o->warmup > LMB_E2E_DEPTH - 1 ? o->warmup : LMB_E2E_DEPTH - 1, S = o->steps, outs;
    double ms[LMB_MAX_STEPS];
    if (e2e_place(m, snap, n, p, 1, err) || e2e_run(m, n, LMB_E2E_DEPTH, w, S, ms, &outs, err)) return -1;
    *med = median(ms, S);
    return 0;
}

/* e2e: every position and batch; 0, or -1 (row written). */
static int e2e(lmb *m, ms_error *err) {
    const lmb_opts *o = m->o;
    if (e2e_alloc(m, err)) {
        row("e2e", "-", "-", -1, "FAILED: %s", err->msg);
        return -1;
    }
    /* Fresh figures first (at the first position, each batch from a codec
     * reset), then every slot's codec filled once, then the rows over full
     * codec contexts: the codec state no longer depends on the position. */
    double fresh[LMB_MAX_LIST];
    int nslots = 0;
    for (int bi = 0; bi < o->n_batches; bi++) {
        fresh[bi] = -1;
        if (o->batches[bi] <= m->slots && o->batches[bi] > nslots) nslots = o->batches[bi];
    }
    const int nfill = e2e_fill_frames(m);
    for (int pi = 0; pi < o->n_positions; pi++) {
        int p = o->positions[pi];
        if (deadline_passed(o)) {
            row("e2e", "-", "-", -1, "cut short by --deadline-s before position %d", p);
            return 0;
        }
        lm_kv_snap *snap = fill(m, p, err);
        if (!snap) return -1;
        if (pi == 0) {
            for (int bi = 0; bi < o->n_batches && !deadline_passed(o); bi++)
                if (o->batches[bi] <= m->slots && e2e_fresh(m, snap, o->batches[bi], p, &fresh[bi], err)) {
                    row("e2e", "-", "-", -1, "FAILED (fresh codec state): %s", err->msg);
                    lm_backend_kv_snap_free(m->b, snap);
                    return -1;
                }
            double t0 = now_s();
            int frc = 0;
            for (int s = 0; s < nslots && !frc; s++) frc = lm_backend_codec_reset(m->b, s, LM_CODEC_BOTH, err);
            if (frc || e2e_fill(m, nslots, nfill, err)) {
                row("e2e", "-", "-", -1, "FAILED (filling the codec context): %s", err->msg);
                lm_backend_kv_snap_free(m->b, snap);
                return -1;
            }
            row("e2e fill", "-", "-", (now_s() - t0) * 1e3,
                "codec context filled: %d frames of %d slots (encode + decode, the codec alone)", nfill, nslots);
        }
        for (int bi = 0; bi < o->n_batches; bi++) {
            int n = o->batches[bi];
            char nb[16], pb[32];
            snprintf(nb, sizeof nb, "%d", n);
            snprintf(pb, sizeof pb, "%d", p);
            if (n > m->slots) {
                row("e2e", nb, pb, -1, "not run: only %d slots opened", m->slots);
                continue;
            }
            if (deadline_passed(o)) {
                row("e2e", nb, pb, -1, "cut short by --deadline-s");
                continue;
            }
            if (e2e_measure(m, snap, n, p, fresh[bi], err)) {
                row("e2e", nb, pb, -1, "FAILED: %s", err->msg);
                lm_backend_kv_snap_free(m->b, snap);
                return -1;
            }
        }
        lm_backend_kv_snap_free(m->b, snap);
    }
    return 0;
}

/* e2e_codec: the random Mimi for the LM c into dir (mimi.safetensors,
 * mimi.json): real or tiny dimensions, with the LM's codebook size and its
 * user streams as codes per frame. 0, or -1 (row written). */
static int e2e_codec(const lmb_opts *o, const lm_config *c, const char *dir) {
    mimi_config mc;
    if (o->mimi_real) {
        mimi_config_default(&mc);
        mc.q_bins = c->card;
        mc.num_codebooks = c->n_user;
    } else {
        mimi_rand_tiny(&mc, c->card, c->n_user);
    }
    ms_error err = {0};
    double t0 = now_s();
    if (mimi_rand_write(dir, &mc, o->seed, &err)) {
        row("codec", "-", "-", -1, "FAILED: writing the random Mimi: %s", err.msg);
        return -1;
    }
    row("codec", "-", "-", (now_s() - t0) * 1e3,
        "random Mimi written: %s dimensions (SEANet %d filters, d_model %d, %d + %d transformer layers), "
        "%d codebooks of %d%s",
        o->mimi_real ? "real" : "tiny", mc.n_filters, mc.d_model, mc.num_layers, mc.num_layers, mc.num_codebooks,
        mc.q_bins, o->mimi_real && (mc.q_bins != 2048 || mc.num_codebooks != 8) ? " (the LM's, not the official 8 x 2048)" : "");
    return 0;
}

/* The paths of a written codec, removed after the backend read them. */
typedef struct lmb_paths {
    char dir[64];
    char config[96], mimi[96], mimi_json[96];
} lmb_paths;

static void rm_paths(lmb_paths *p) {
    if (!p->dir[0]) return;
    unlink(p->config);
    unlink(p->mimi);
    unlink(p->mimi_json);
    rmdir(p->dir);
    p->dir[0] = '\0';
}

static int mk_paths(lmb_paths *p) {
    snprintf(p->dir, sizeof p->dir, "/tmp/lm-bench.XXXXXX");
    if (!mkdtemp(p->dir)) {
        fprintf(stderr, "lm-bench: mkdtemp: %s\n", strerror(errno));
        p->dir[0] = '\0';
        return -1;
    }
    snprintf(p->config, sizeof p->config, "%s/config.json", p->dir);
    snprintf(p->mimi, sizeof p->mimi, "%s/mimi.safetensors", p->dir);
    snprintf(p->mimi_json, sizeof p->mimi_json, "%s/mimi.json", p->dir);
    return 0;
}

/* open_backend: the largest slot count the backend accepts, from want
 * down by 7/8 steps; NULL when none (row written). mimi (and mimi_cfg):
 * the codec, opened pipelined as moshid opens it (--e2e); NULL: the LM
 * alone, the LM rows. */
static lm_backend *open_backend(const lm_backend_ops *ops, const char *dir, const lmb_opts *o, const char *mimi,
                                const char *mimi_cfg, int want, int *got) {
    ms_error err = {0};
    for (int t = 0; t < LMB_OPEN_TRIES && want >= 1; t++) {
        lm_backend_opts bo = {
            .max_slots = want,
            .threads = 1,
            .variant = o->variant,
            .device = 0,
            .mimi = mimi,
            .mimi_config = mimi_cfg,
            .pipeline = mimi != NULL,
            .random_weights = o->cpu ? 0 : o->seed,
            .weights = o->w8 ? LM_WEIGHTS_INT8 : LM_WEIGHTS_STORED,
            .kv = o->kv8 ? LM_KV_INT8 : LM_KV_NATIVE,
        };
        char nb[16];
        snprintf(nb, sizeof nb, "%d", want);
        double t0 = now_s();
        lm_backend *b = lm_backend_open(ops, dir, &bo, &err);
        double ms = (now_s() - t0) * 1e3;
        if (b) {
            char codec[256] = "";
            lm_backend_stats st = {0};
            if (mimi && lm_backend_stats_get(b, &st) == MS_OK)
                snprintf(codec, sizeof codec, "; codec: %d codebooks, %.1f MiB, frame steps %s", b->ncb,
                         st.codec_bytes / 1048576.0, st.pipeline ? "pipelined" : "NOT pipelined (backend said so)");
            if (o->cpu)
                row("open", nb, "-", ms, "backend \"%s\" opened with %d slots, checkpoint %s%s", ops->name, want, dir,
                    codec);
            else
                row("open", nb, "-", ms, "backend \"%s\" opened with %d slots, random %s weights (seed %llu), %s K/V%s",
                    ops->name, want, o->w8 ? "int8" : "bf16", (unsigned long long)o->seed, o->kv8 ? "int8" : "bf16",
                    codec);
            *got = want;
            return b;
        }
        row("open", nb, "-", ms, "refused: %s: %s", ms_err_name(err.code), err.msg);
        /* not enough memory by the backend's own plan, or a cudaMalloc that
         * failed where the plan was optimistic (not a sticky error) */
        int nomem = err.code == MS_ERR_NOMEM || err.code == MS_ERR_LIMIT ||
                    (err.code == MS_ERR_DEVICE && strstr(err.msg, "cudaErrorMemoryAllocation"));
        if (!nomem) return NULL;
        want = want * 7 / 8;
    }
    return NULL;
}

#ifdef LMB_LINKED_PLUGIN
/* the emulator build: the plugin's objects are linked in (cu_plugin.c) */
const moshid_plugin *moshid_plugin_entry(void);
#endif

static const moshid_plugin *get_plugin(ms_error *err) {
#ifdef LMB_LINKED_PLUGIN
    (void)err;
    return moshid_plugin_entry();
#else
    return plugin_load("cuda", err);
#endif
}

int main(int argc, char **argv) {
    lmb_opts o;
    if (parse_args(argc, argv, &o)) return 2;
    lmb_t0 = now_s();
    char json[4096];
    if (shape_json(&o, json, sizeof json)) {
        fprintf(stderr, "lm-bench: config too long\n");
        return 1;
    }
    if (o.write_config) {
        if (write_file(o.write_config, json)) {
            fprintf(stderr, "lm-bench: cannot write %s: %s\n", o.write_config, strerror(errno));
            return 1;
        }
        return 0;
    }
    if (o.out && !(lmb_out = fopen(o.out, "a"))) {
        fprintf(stderr, "lm-bench: cannot open %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    ms_error err = {0};
    lm_config cfg;
    if (lm_config_parse(&cfg, json, strlen(json), "lm-bench config", &err)) {
        fprintf(stderr, "lm-bench: the built-in %s config is refused: %s\n", o.shape->name, err.msg);
        return 1;
    }
    cfg.variant = o.variant;
    if (lm_config_finish(&cfg, &err)) {
        fprintf(stderr, "lm-bench: %s\n", err.msg);
        return 1;
    }

    lmb m = {.o = &o, .rng = {o.seed}};
    int want = o.max_slots, rc = 1;
    /* --e2e: as many slots as the largest batch */
    int max_batch = 1;
    for (int i = 0; i < o.n_batches; i++)
        if (o.batches[i] > max_batch) max_batch = o.batches[i];
    lmb_paths tmp = {0};
    const char *mimi = o.e2e ? o.mimi : NULL, *mimi_cfg = o.e2e ? o.mimi_config : NULL;
    if (o.cpu) {
        emit("lm-bench %s%s on the CPU reference backend (self-test), checkpoint %s", o.shape->name,
             o.e2e ? " --e2e" : "", o.model_dir);
        emit("| source | measure | batch | position | ms | result |");
        emit("|---|---|---|---|---|---|");
        if (!o.e2e) row("copy D2D", "-", "-", -1, "not measured: CPU backend");
        if (want <= 0) want = o.e2e ? max_batch : 4;
        if (o.e2e && !mimi) {
            /* the codec follows the checkpoint's LM, not the built-in shape */
            char cp[4096];
            lm_config ck;
            snprintf(cp, sizeof cp, "%s/config.json", o.model_dir);
            if (lm_config_load(&ck, cp, &err) || lm_config_finish(&ck, &err)) {
                fprintf(stderr, "lm-bench: %s\n", err.msg);
                return 1;
            }
            if (mk_paths(&tmp) || e2e_codec(&o, &ck, tmp.dir)) {
                rm_paths(&tmp);
                return 1;
            }
            mimi = tmp.mimi;
            mimi_cfg = tmp.mimi_json;
        }
        m.b = open_backend(&lm_cpu_backend, o.model_dir, &o, mimi, mimi_cfg, want, &m.slots);
        rm_paths(&tmp);
        if (!m.b) return 1;
    } else {
        char why[512];
        if (gu_devices(why, sizeof why) == 0) {
            row("lm-bench", "-", "-", -1, "skipped: %s", why);
            return 77;
        }
        const moshid_plugin *p = get_plugin(&err);
        if (!p) {
            row("lm-bench", "-", "-", -1, "skipped: plugin not loadable: %s", err.msg);
            return 77;
        }
        if (!p->backend) {
            row("lm-bench", "-", "-", -1, "skipped: plugin carries no backend table (%s)", p->build);
            return 77;
        }
        const lm_backend_ops *ops = p->backend;

        struct cudaDeviceProp prop;
        size_t mem_free = 0, mem_total = 0;
        CU_CHECK_FATAL(cudaGetDeviceProperties(&prop, 0));
        CU_CHECK_FATAL(cudaMemGetInfo(&mem_free, &mem_total));
        emit("lm-bench %s%s (%s), device %s sm_%d%d, %.1f GiB; plugin %s", o.shape->name, o.e2e ? " --e2e" : "",
             o.variant == LM_VARIANT_PERSONAPLEX ? "personaplex" : "kyutai", prop.name, prop.major, prop.minor,
             (double)mem_total / (1 << 30), p->build);
        emit("| source | measure | batch | position | ms | result |");
        emit("|---|---|---|---|---|---|");

        if (!o.e2e) {   /* the LM rows' ceiling; the frame step has none */
            double copy_ms = 0;
            m.copy_gbps = copy_gbps(o.shape->copy_bytes, &copy_ms);
            if (m.copy_gbps > 0)
                row("copy D2D", "-", "-", copy_ms, "%.1f GB/s (read + write), %zu MiB buffer", m.copy_gbps,
                    o.shape->copy_bytes >> 20);
        }

#if LMB_HAVE_PLAN
        cu_plan_req req = {
            .slots = 1,
            .context = cfg.context,
            .snapshots = 1,                 /* the fill snapshot */
            .snap_positions = cfg.context,
            .max_bucket = 0,
            .weight_bytes_per_el = 2,
            .codec = o.e2e,                 /* the device codec's weights and state */
            .w8 = o.w8,
            .kv8 = o.kv8,
        };
        int fit = cu_plan_max_slots(&cfg, &req, mem_total);
        char desc[512] = "";
        cu_plan plan;
        req.slots = fit > 0 ? fit : 1;
        if (cu_plan_compute(&cfg, &req, &plan) == 0) cu_plan_describe(&plan, req.slots, desc, sizeof desc);
        char fb[16];
        snprintf(fb, sizeof fb, "%d", fit);
        row("fits in memory (plan)", fb, "-", -1, "%d slots at context %d in %.1f GiB: %s", fit, cfg.context,
            (double)mem_total / (1 << 30), desc);
        if (fit <= 0) return 1;
        if (o.e2e && (want <= 0 || want > max_batch)) want = max_batch;
        if (want <= 0 || want > fit) want = fit;
#else
        if (want <= 0) want = o.e2e ? max_batch : 64;
        row("fits in memory (plan)", "-", "-", -1, "cuda/cu_plan.c was not built: no plan; asking for %d slots", want);
#endif
        if (want > LM_MAX_SLOTS) want = LM_MAX_SLOTS;

        /* model_dir for random_weights: config.json alone (and, for
         * --e2e, the random codec beside it) */
        if (mk_paths(&tmp)) return 1;
        if (write_file(tmp.config, json)) {
            fprintf(stderr, "lm-bench: cannot write %s\n", tmp.config);
            rm_paths(&tmp);
            return 1;
        }
        if (o.e2e && !mimi) {
            if (e2e_codec(&o, &cfg, tmp.dir)) {
                rm_paths(&tmp);
                return 1;
            }
            mimi = tmp.mimi;
            mimi_cfg = tmp.mimi_json;
        }
        m.b = open_backend(ops, tmp.dir, &o, mimi, mimi_cfg, want, &m.slots);
        rm_paths(&tmp);
        if (!m.b) return 1;
    }
    m.cfg = &m.b->cfg;
    m.wbytes = step_matrix_bytes(m.cfg, m.cfg->dep_q);
    m.ss = calloc((size_t)m.slots, sizeof *m.ss);
    m.tokens = malloc((size_t)m.cfg->context * (size_t)m.cfg->n_streams * sizeof *m.tokens);
    if (!m.ss || !m.tokens) {
        fprintf(stderr, "lm-bench: out of memory\n");
        goto out;
    }
    emit("(step matrices: %.3f GB in bf16 with %d depformer steps)", m.wbytes / 1e9, m.cfg->dep_q);

    if (o.e2e) {
        rc = e2e(&m, &err) ? 1 : 0;
        goto out;
    }

    /* prefill: one warm-up (when more than one is timed), then the median */
    {
        int reps = o.shape->prefill_reps;
        double ms[LMB_PREFILL_REPS];
        char pb[32];
        snprintf(pb, sizeof pb, "0-%d", o.prefill - 1);
        for (int r = reps > 1 ? -1 : 0; r < reps; r++) {
            random_tokens(&m, m.tokens, o.prefill);
            if (lm_backend_reset_slot(m.b, 0, &err)) goto fail;
            double t0 = now_s();
            if (lm_backend_prefill(m.b, 0, 0, o.prefill, m.tokens, NULL, &err)) goto fail;
            if (r >= 0) ms[r] = (now_s() - t0) * 1e3;
        }
        double med = median(ms, reps);
        row("prefill", "1", pb, med, "%d positions, %.0f positions/s (median of %d)", o.prefill,
            o.prefill / (med * 1e-3), reps);
    }

    /* the search runs last, at the largest position (its snapshot kept) */
    int sp = 0;
    for (int pi = 1; pi < o.n_positions; pi++)
        if (o.positions[pi] > o.positions[sp]) sp = pi;
    lm_kv_snap *ssnap = NULL;
    for (int pi = 0; pi < o.n_positions; pi++) {
        int p = o.positions[pi];
        if (deadline_passed(&o)) {
            row("step", "-", "-", -1, "cut short by --deadline-s before position %d", p);
            break;
        }
        lm_kv_snap *snap = fill(&m, p, &err);
        if (!snap) goto out;
        for (int bi = 0; bi < o.n_batches; bi++) {
            int n = o.batches[bi];
            char nb[16], pb[32];
            snprintf(nb, sizeof nb, "%d", n);
            snprintf(pb, sizeof pb, "%d", p);
            if (n > m.slots) {
                row("step", nb, pb, -1, "not run: only %d slots fit", m.slots);
                continue;
            }
            if (deadline_passed(&o)) {
                row("step", nb, pb, -1, "cut short by --deadline-s");
                continue;
            }
            double med, mn, rms;
            if (measure(&m, snap, n, o.warmup, o.steps, &med, &mn, &rms, &err)) {
                row("step", nb, pb, -1, "FAILED: %s", err.msg);
                lm_backend_kv_snap_free(m.b, snap);
                if (ssnap) lm_backend_kv_snap_free(m.b, ssnap);
                goto out;
            }
            step_row(&m, n, p, med, mn, rms);
        }
        if (pi == sp) ssnap = snap;
        else lm_backend_kv_snap_free(m.b, snap);
    }
    if (ssnap) {
        int src = search(&m, ssnap, o.positions[sp], &err);
        if (src) row("search", "-", "-", -1, "FAILED: %s", err.msg);
        lm_backend_kv_snap_free(m.b, ssnap);
        if (src) goto out;
    }
    rc = 0;
    goto out;
fail:
    row("prefill", "1", "-", -1, "FAILED: %s", err.msg);
out:
    e2e_free(&m);   /* before the close: the frames belong to the backend's sizes */
    free(m.ss);
    free(m.tokens);
    lm_backend_close(m.b);
    emit("(lm-bench: %.1f s)", now_s() - lmb_t0);
    if (lmb_out) fclose(lmb_out);
    return rc;
}
