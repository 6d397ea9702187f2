/* mimi_test.c - mimi-test: the Mimi codec on the device (cuda/cu_mimi.c)
 * against the CPU codec (engine/mimi/) on the committed tiny fixture
 * (tests/fixtures/mimi/tiny*, the one check_mimi's parity suite uses, whose
 * reference codes come from the official implementation).
 *
 * One source, two executors, as engine-test: built with nvcc it is
 * build/mimi-test and runs on a GPU (exit 77 with "skipped: no CUDA device
 * (...)" where there is none); built against the emulator (tests/gpu/emu/)
 * it is build/mimi-test-emu and runs in `make test`.
 *
 *   mimi-test [SUBSTRING]     only the cases whose name contains it
 *   mimi-test --bench [--shape real|tiny] [--out FILE] [--deadline-s S]
 *                             encode + decode time per step (median of 5
 *                             after a warm-up) for batches of 1, 8, 32, 64
 *                             slots with every transformer ring full (after
 *                             context / 2 frames: the steady state), the
 *                             fresh state's time (just after a reset)
 *                             beside it, at the real dimensions (the official
 *                             configuration, random weights from a seed:
 *                             mimi_model_random) or on the tiny fixture
 *                             (batches 1 and 2, one step: the emulator's
 *                             check that the benchmark runs); each row
 *                             printed and appended to FILE, flushed, as it
 *                             is measured; past the deadline it stops
 *   MIMI_FIXTURES=DIR         the fixture directory (default tests/fixtures/mimi)
 *   MIMI_TEST_FRAMES=N        frames of the parity case (default: all the
 *                             fixture's, 24; about 5 s on the emulator)
 *
 * Cases:
 *  - warmup (emulator only; first, before any other launch of the codec's
 *    kernels): cu_mimi_open captures its graphs after a warm-up run, so no
 *    kernel's first launch is recorded into a capture
 *    (emu_capture_cold_kernels: 0);
 *  - parity: one slot encodes the fixture's frames (the K/V ring of
 *    context 8 wraps after 4): every code equal
 *    to the CPU codec's and to the official reference's; the CPU's codes
 *    decoded on both: max |gpu - cpu| <= TOL_REL * rms(cpu) over the frames;
 *  - batch: four slots in one call per frame, in a shuffled order, at
 *    different frames of their streams (slot 3 joins at frame 2, slot 1
 *    at frame 1, slot 0 has its encoder and decoder reset at frame 3 and
 *    goes on, slot 2 idles one frame): each slot's codes equal, and its PCM
 *    within the tolerance of, the CPU codec run on that slot alone;
 *  - real (only with MIMI_TEST_REAL=1: minutes on the emulator): the
 *    official configuration with random weights (mimi_model_random), two
 *    slots for MIMI_TEST_REAL_FRAMES frames (default 2) against the CPU
 *    codec: codes equal, PCM within the tolerance; on the emulator its
 *    point is the real shapes under the fault detectors;
 *  - graphs: the same frames of three slots (bucket 4: one padding row on
 *    the scratch slot) through the captured graphs and through launches
 *    enqueued per call (MOSHID_CU_MIMI_GRAPHS=0): codes and PCM bit for bit
 *    equal; then two slots (bucket 2, no padding) on the graph side;
 *  - refuse: a non-finite sample and a code out of range are refused with
 *    MS_ERR_RANGE and advance nothing (the next frame still matches);
 *  - ticket (emulator only): a decode_finish that fails before its event
 *    has completed (the device made unreachable: EMU_NO_DEVICE=1 for the
 *    call) keeps the ticket in flight: the next submit takes the other
 *    pinned block (reusing this one while its PCM copy is pending is a
 *    race the emulator reports), and finishing the first again returns
 *    its PCM, equal to the CPU's;
 *  - oom (emulator only): cu_mimi_open with its n-th allocation failing
 *    (emu_inject_alloc_failure), n = 1..8 then every 13th until an open
 *    succeeds: each
 *    fails with the thread's last error left clean, and an open after
 *    them works (a stale cudaErrorMemoryAllocation would be returned by
 *    the next launcher's cudaGetLastError);
 *  - backend: the CUDA backend table's codec entries (cuda/cu_backend.c on
 *    the device codec, its default) against the CPU backend's on a model
 *    moshid-mkmodel writes ($MKMODEL; skipped, and says so, without it):
 *    four frames of two slots, a codec reset of one between: codes equal,
 *    PCM within the tolerance. (backend-test's codec case runs the same
 *    frames with MOSHID_CU_MIMI=cpu, where the output is bit-identical.)
 *  - pipeline: the whole frame step (encode, LMGen + LM step with
 *    sampling, decode) through lm_frame_submit / lm_frame_wait on two CUDA
 *    backends, one with opts.pipeline (two frames in flight: frame t + 1
 *    submitted before frame t is waited, so its encode and LM step are
 *    enqueued while t's decode may still run) and one without: the user
 *    codes, LMGen's output tokens, the has_out flags and the PCM identical,
 *    bit for bit (the same kernels in the same order on each stream).
 *
 * Tolerance. Both sides are float32 with the same weights (the device's are
 * the CPU model's, read back exactly); they differ only in the order of the
 * sums (the CPU's blocked GEMM against one sequential sum per output), a
 * relative error of a few float ulps per layer (~1e-6). TOL_REL = 1e-4 of
 * the signal's rms is the parity bound the CPU codec meets against the
 * official implementation (tests/check_mimi.c) and a hundred times what the
 * rounding gives (observed: 2e-6 to 4e-6); a wrong tap, state or ring row
 * costs far more (tried: dropping the transposed convolutions' kept state
 * gives 6.4). Codes must be equal: a flip needs two codebook distances
 * within ~1e-6 relative, which the fixture does not have (none seen over
 * its 24 frames; a flip is reported with its frame and codebook).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "lmgen.h"
#include "cu_mimi.h"
#include "gpu_util.h"
#include "mimi.h"
#include "st.h"

#define TOL_REL 1e-4

extern const lm_backend_ops lm_cuda_backend;   /* cuda/cu_backend.c */
/* Defined by the emulator (tests/gpu/emu/emu.h) only. */
const char *emu_last_kernel(void) __attribute__((weak));
void emu_inject_alloc_failure(unsigned n) __attribute__((weak));
unsigned emu_capture_cold_kernels(void) __attribute__((weak));

static const char *filter;
static int n_pass, n_fail;

static int begin(const char *name) {
    if (filter && !strstr(name, filter)) return 0;
    printf("run  %s\n", name);
    fflush(stdout);
    return 1;
}

static void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void result(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s %-10s ", ok ? "ok  " : "FAIL", name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) n_pass++;
    else n_fail++;
}

static void die(const char *what, const ms_error *e) {
    fprintf(stderr, "mimi-test: %s: %s\n", what, e ? e->msg : "");
    exit(1);
}

static const char *fixdir(void) {
    const char *d = getenv("MIMI_FIXTURES");
    return d && d[0] ? d : "tests/fixtures/mimi";
}

typedef struct fixture {
    mimi_model *m;
    int frames, K, F;
    float *pcm;      /* (frames * F) */
    int *codes;      /* (frames, K): the official streaming encode */
} fixture;

static void load_fixture(fixture *fx) {
    char w[600], c[600], r[600];
    snprintf(w, sizeof w, "%s/tiny.safetensors", fixdir());
    snprintf(c, sizeof c, "%s/tiny.json", fixdir());
    snprintf(r, sizeof r, "%s/tiny_ref.safetensors", fixdir());
    ms_error e = {0};
    if (mimi_model_load(&fx->m, w, c, &e) != MS_OK) die("mimi_model_load", &e);
    st_file *f = st_open(r, &e);
    if (!f) die("st_open", &e);
    const st_tensor *tp = st_find(f, "pcm"), *tc = st_find(f, "codes");
    if (!tp || !tc || tc->dtype != ST_I32 || tc->ndim != 2) die("reference tensors pcm/codes missing", NULL);
    fx->F = mimi_frame_samples(fx->m);
    fx->K = mimi_num_codebooks(fx->m);
    fx->frames = (int)tc->shape[0];
    if ((int)tc->shape[1] != fx->K || tp->nel != (uint64_t)fx->frames * fx->F) die("reference shapes", NULL);
    fx->pcm = malloc(tp->nel * sizeof(float));
    fx->codes = malloc(tc->nbytes);
    if (!fx->pcm || !fx->codes || st_to_f32(tp, 0, tp->nel, fx->pcm) != MS_OK) die("reading pcm", NULL);
    memcpy(fx->codes, tc->data, tc->nbytes);
    st_close(f);
}

/* max |a - b| / rms(b) over n. */
static double rel_err(const float *a, const float *b, size_t n) {
    double ss = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        ss += (double)b[i] * b[i];
        double d = fabs((double)a[i] - b[i]);
        if (d > mx || d != d) mx = d != d ? INFINITY : d;
    }
    double rms = sqrt(ss / (double)n);
    return rms > 0 ? mx / rms : mx;
}

static int first_mismatch(const int *a, const int *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

static void test_warmup(const fixture *fx) {
    const char *name = "warmup";
    if (!begin(name)) return;
    if (!emu_capture_cold_kernels) {
        printf("skip %-10s the emulator counts kernels first launched into a capture\n", name);
        return;
    }
    ms_error e = {0};
    cu_mimi *g = NULL;
    unsigned c0 = emu_capture_cold_kernels();
    if (cu_mimi_open(&g, fx->m, 3, &e)) die("open", &e);
    unsigned cold = emu_capture_cold_kernels() - c0;
    result(cold == 0 && cu_mimi_graphs(g), name, "graphs captured: %s; kernels first launched into a capture: %u",
           cu_mimi_graphs(g) ? "yes" : "no", cold);
    cu_mimi_close(g);
}

static void test_parity(const fixture *fx, int frames) {
    const char *name = "parity";
    if (!begin(name)) return;
    ms_error e = {0};
    const int K = fx->K, F = fx->F;
    mimi_stream *s = mimi_stream_create(fx->m, &e);
    cu_mimi *g = NULL;
    if (!s || cu_mimi_open(&g, fx->m, 3, &e)) die("open", &e);
    int *cc = malloc(sizeof(int) * frames * K), *cg = malloc(sizeof(int) * frames * K);
    float *pc = malloc(sizeof(float) * frames * F), *pg = malloc(sizeof(float) * frames * F);
    int slot = 1;
    for (int f = 0; f < frames; f++) {
        const float *in = fx->pcm + (size_t)f * F;
        if (mimi_encode_batch(fx->m, &s, 1, in, cc + f * K, &e)) die("cpu encode", &e);
        if (cu_mimi_encode(g, &slot, 1, in, cg + f * K, &e)) die("gpu encode", &e);
    }
    for (int f = 0; f < frames; f++) {
        if (mimi_decode_batch(fx->m, &s, 1, cc + f * K, pc + (size_t)f * F, &e)) die("cpu decode", &e);
        if (cu_mimi_decode(g, &slot, 1, cc + f * K, pg + (size_t)f * F, &e)) die("gpu decode", &e);
    }
    int bad_cpu = first_mismatch(cg, cc, frames * K), bad_ref = first_mismatch(cg, fx->codes, frames * K);
    double rel = rel_err(pg, pc, (size_t)frames * F);
    int ok = bad_cpu < 0 && bad_ref < 0 && rel <= TOL_REL;
    if (bad_cpu >= 0)
        printf("     first code differing from the CPU: frame %d codebook %d: gpu %d cpu %d\n", bad_cpu / K,
               bad_cpu % K, cg[bad_cpu], cc[bad_cpu]);
    if (bad_ref >= 0)
        printf("     first code differing from the reference: frame %d codebook %d: gpu %d ref %d\n", bad_ref / K,
               bad_ref % K, cg[bad_ref], fx->codes[bad_ref]);
    result(ok, name, "%d frames x %d codes: %s the CPU's, %s the reference's; decoded max|d|/rms %.3g (limit %g)",
           frames, K, bad_cpu < 0 ? "equal to" : "DIFFER from", bad_ref < 0 ? "equal to" : "DIFFER from", rel, TOL_REL);
    free(cc); free(cg); free(pc); free(pg);
    mimi_stream_free(s);
    cu_mimi_close(g);
}

/* The batch schedule: per frame, which slots run (in call order) and
 * which are reset before it. Slot s's input at its own frame k is the
 * fixture's frame (k + s) % frames (different audio per slot). */
#define NSLOT 4
#define BFRAMES 5

static void test_batch(const fixture *fx) {
    const char *name = "batch";
    if (!begin(name)) return;
    static const int order[BFRAMES][NSLOT] = {
        {0, 2, -1, -1}, {1, 0, 2, -1}, {3, 1, 0, -1}, {2, 3, 0, 1}, {0, 3, 1, 2}};
    ms_error e = {0};
    const int K = fx->K, F = fx->F;
    mimi_stream *cs[NSLOT];
    for (int s = 0; s < NSLOT; s++)
        if (!(cs[s] = mimi_stream_create(fx->m, &e))) die("stream", &e);
    cu_mimi *g = NULL;
    if (cu_mimi_open(&g, fx->m, NSLOT, &e)) die("open", &e);
    int kf[NSLOT] = {0};   /* each slot's own frame count */
    float *in = malloc(sizeof(float) * NSLOT * F), *pc = malloc(sizeof(float) * F),
          *pg = malloc(sizeof(float) * NSLOT * F);
    int cc[64], cg[NSLOT * 64], slots[NSLOT];
    int code_bad = 0, calls = 0;
    double worst = 0;
    for (int f = 0; f < BFRAMES; f++) {
        if (f == 3) {   /* slot 0 leaves and a new session takes it: both sides reset */
            mimi_stream_reset_encoder(cs[0]);
            mimi_stream_reset_decoder(cs[0]);
            if (cu_mimi_reset(g, 0, 3, &e)) die("reset", &e);
            kf[0] = 0;
        }
        int n = 0;
        for (int i = 0; i < NSLOT && order[f][i] >= 0; i++) {
            int s = order[f][i];
            slots[n] = s;
            memcpy(in + (size_t)n * F, fx->pcm + (size_t)((kf[s] + 3 * s) % fx->frames) * F, sizeof(float) * F);
            n++;
        }
        if (cu_mimi_encode(g, slots, n, in, cg, &e)) die("gpu encode", &e);
        /* the decoder gets the CPU's codes, so a decode difference is the decoder's own */
        int dec_codes[NSLOT * 64];
        for (int i = 0; i < n; i++) {
            int s = slots[i];
            if (mimi_encode_batch(fx->m, &cs[s], 1, in + (size_t)i * F, cc, &e)) die("cpu encode", &e);
            int b = first_mismatch(cg + i * K, cc, K);
            if (b >= 0) {
                if (!code_bad)
                    printf("     frame %d slot %d codebook %d: gpu %d cpu %d\n", f, s, b, cg[i * K + b], cc[b]);
                code_bad++;
            }
            memcpy(dec_codes + i * K, cc, sizeof(int) * K);
        }
        if (cu_mimi_decode(g, slots, n, dec_codes, pg, &e)) die("gpu decode", &e);
        for (int i = 0; i < n; i++) {
            int s = slots[i];
            if (mimi_decode_batch(fx->m, &cs[s], 1, dec_codes + i * K, pc, &e)) die("cpu decode", &e);
            double r = rel_err(pg + (size_t)i * F, pc, (size_t)F);
            if (r > worst || r != r) worst = r != r ? INFINITY : r;
            kf[s]++;
        }
        calls++;
    }
    result(code_bad == 0 && worst <= TOL_REL, name,
           "%d calls of up to %d slots (joins, a reset, an idle slot): %d slot-frames with codes differing; "
           "worst max|d|/rms %.3g (limit %g)",
           calls, NSLOT, code_bad, worst, TOL_REL);
    free(in); free(pc); free(pg);
    for (int s = 0; s < NSLOT; s++) mimi_stream_free(cs[s]);
    cu_mimi_close(g);
}

static void test_real(void) {
    const char *name = "real";
    if (!begin(name)) return;
    const char *on = getenv("MIMI_TEST_REAL");
    if (!on || strcmp(on, "1")) {
        printf("skip %-10s MIMI_TEST_REAL=1 runs it (the official shapes: slow on the emulator)\n", name);
        return;
    }
    int frames = 2;
    const char *fe = getenv("MIMI_TEST_REAL_FRAMES");
    if (fe && atoi(fe) > 0 && atoi(fe) <= 64) frames = atoi(fe);
    ms_error e = {0};
    mimi_config cfg;
    mimi_config_default(&cfg);
    mimi_model *m = NULL;
    if (mimi_model_random(&m, &cfg, 11, &e)) die("mimi_model_random", &e);
    const int F = mimi_frame_samples(m), K = mimi_num_codebooks(m);
    mimi_stream *cs[2];
    for (int i = 0; i < 2; i++)
        if (!(cs[i] = mimi_stream_create(m, &e))) die("stream", &e);
    cu_mimi *g = NULL;
    if (cu_mimi_open(&g, m, 2, &e)) die("open", &e);
    float *in = malloc(sizeof(float) * 2 * F), *pg = malloc(sizeof(float) * 2 * F), *pc = malloc(sizeof(float) * F);
    int cg[2 * 64], cc[64], slots[2] = {1, 0}, bad = 0;
    double worst = 0;
    for (int f = 0; f < frames; f++) {
        for (int i = 0; i < 2 * F; i++)
            in[i] = 0.4f * sinf(0.002f * (float)(i % F + f * F) * (float)(2 + i / F)) + 0.05f * sinf(0.37f * (float)i);
        if (cu_mimi_encode(g, slots, 2, in, cg, &e)) die("gpu encode", &e);
        int dec[2 * 64];
        for (int i = 0; i < 2; i++) {
            if (mimi_encode_batch(m, &cs[slots[i]], 1, in + (size_t)i * F, cc, &e)) die("cpu encode", &e);
            if (first_mismatch(cg + i * K, cc, K) >= 0) bad++;
            memcpy(dec + i * K, cc, sizeof(int) * K);
        }
        if (cu_mimi_decode(g, slots, 2, dec, pg, &e)) die("gpu decode", &e);
        for (int i = 0; i < 2; i++) {
            if (mimi_decode_batch(m, &cs[slots[i]], 1, dec + i * K, pc, &e)) die("cpu decode", &e);
            double r = rel_err(pg + (size_t)i * F, pc, (size_t)F);
            if (r > worst || r != r) worst = r != r ? INFINITY : r;
        }
    }
    result(bad == 0 && worst <= TOL_REL, name,
           "official shapes, random weights: %d frames of 2 slots: %d slot-frames with codes differing; worst "
           "max|d|/rms %.3g (limit %g)", frames, bad, worst, TOL_REL);
    free(in); free(pg); free(pc);
    for (int i = 0; i < 2; i++) mimi_stream_free(cs[i]);
    cu_mimi_close(g);
    mimi_model_free(m);
}

static void test_graphs(const fixture *fx) {
    const char *name = "graphs";
    if (!begin(name)) return;
    ms_error e = {0};
    const int K = fx->K, F = fx->F;
    cu_mimi *g[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        if (k) setenv("MOSHID_CU_MIMI_GRAPHS", "0", 1);
        if (cu_mimi_open(&g[k], fx->m, 4, &e)) die("open", &e);
        unsetenv("MOSHID_CU_MIMI_GRAPHS");
    }
    int graphs_ok = cu_mimi_graphs(g[0]) == 1 && cu_mimi_graphs(g[1]) == 0;
    float *in = malloc(sizeof(float) * 3 * F), *p0 = malloc(sizeof(float) * 3 * F), *p1 = malloc(sizeof(float) * 3 * F);
    int c0[3 * 64], c1[3 * 64], slots3[3] = {3, 0, 2}, slots2[2] = {1, 3}, same = 1, calls = 0;
    for (int f = 0; f < 4; f++) {
        const int *sl = f < 3 ? slots3 : slots2, n = f < 3 ? 3 : 2;
        for (int i = 0; i < n; i++)
            memcpy(in + (size_t)i * F, fx->pcm + (size_t)((f + 5 * i) % fx->frames) * F, sizeof(float) * F);
        for (int k = 0; k < 2; k++)
            if (cu_mimi_encode(g[k], sl, n, in, k ? c1 : c0, &e)) die("encode", &e);
        for (int k = 0; k < 2; k++)
            if (cu_mimi_decode(g[k], sl, n, c0, k ? p1 : p0, &e)) die("decode", &e);
        same &= !memcmp(c0, c1, sizeof(int) * n * K) && !memcmp(p0, p1, sizeof(float) * n * F);
        calls++;
    }
    result(same && graphs_ok, name, "%d calls (3 slots in bucket 4, then 2): graph replays %s the enqueued launches%s",
           calls, same ? "bit-identical to" : "DIFFER from", graphs_ok ? "" : " (graphs not on/off as asked)");
    free(in); free(p0); free(p1);
    cu_mimi_close(g[0]);
    cu_mimi_close(g[1]);
}

static void test_refuse(const fixture *fx) {
    const char *name = "refuse";
    if (!begin(name)) return;
    ms_error e = {0};
    const int K = fx->K, F = fx->F;
    mimi_stream *s = mimi_stream_create(fx->m, &e);
    cu_mimi *g = NULL;
    if (!s || cu_mimi_open(&g, fx->m, 2, &e)) die("open", &e);
    float *bad = malloc(sizeof(float) * F), *pc = malloc(sizeof(float) * F), *pg = malloc(sizeof(float) * F);
    memcpy(bad, fx->pcm, sizeof(float) * F);
    bad[F / 2] = NAN;
    int slot = 0, cc[64], cg[64], badc[64];
    ms_error e1 = {0}, e2 = {0}, e3 = {0};
    int rc1 = cu_mimi_encode(g, &slot, 1, bad, cg, &e1);
    for (int k = 0; k < K; k++) badc[k] = k == K - 1 ? mimi_cardinality(fx->m) : 0;
    int rc2 = cu_mimi_decode(g, &slot, 1, badc, pg, &e2);
    int two[2] = {1, 1};
    int rc3 = cu_mimi_encode(g, two, 2, fx->pcm, cg, &e3);   /* a repeated slot */
    /* nothing advanced: the next good frame matches a fresh CPU stream */
    if (mimi_encode_batch(fx->m, &s, 1, fx->pcm, cc, &e) || cu_mimi_encode(g, &slot, 1, fx->pcm, cg, &e))
        die("encode", &e);
    if (mimi_decode_batch(fx->m, &s, 1, cc, pc, &e) || cu_mimi_decode(g, &slot, 1, cc, pg, &e)) die("decode", &e);
    double r = rel_err(pg, pc, (size_t)F);
    int ok = rc1 == MS_ERR_RANGE && rc2 == MS_ERR_RANGE && rc3 == MS_ERR_ARG && first_mismatch(cg, cc, K) < 0 &&
             r <= TOL_REL;
    result(ok, name, "NaN sample: \"%s\"; code %d: \"%s\"; repeated slot: \"%s\"; then codes %s, max|d|/rms %.3g",
           e1.msg, mimi_cardinality(fx->m), e2.msg, e3.msg, first_mismatch(cg, cc, K) < 0 ? "equal" : "DIFFER", r);
    free(bad); free(pc); free(pg);
    mimi_stream_free(s);
    cu_mimi_close(g);
}

static void test_ticket(const fixture *fx) {
    const char *name = "ticket";
    if (!begin(name)) return;
    if (!emu_last_kernel) {
        printf("skip %-10s the emulator's EMU_NO_DEVICE makes the failing call\n", name);
        return;
    }
    ms_error e = {0};
    const int K = fx->K, F = fx->F;
    mimi_stream *s = mimi_stream_create(fx->m, &e);
    cu_mimi *g = NULL;
    if (!s || cu_mimi_open(&g, fx->m, 2, &e)) die("open", &e);
    int slot0 = 0, slot1 = 1, cc[64], t0 = -1, t1 = -1;
    float *pc = malloc(sizeof(float) * F), *pg = malloc(sizeof(float) * F), *pg1 = malloc(sizeof(float) * F);
    if (mimi_encode_batch(fx->m, &s, 1, fx->pcm, cc, &e)) die("encode", &e);
    if (cu_mimi_decode_submit(g, &slot0, 1, cc, &t0, &e)) die("submit", &e);
    ms_error ef = {0};
    setenv("EMU_NO_DEVICE", "1", 1);
    int rcf = cu_mimi_decode_finish(g, t0, pg, &ef);   /* fails at cudaSetDevice */
    unsetenv("EMU_NO_DEVICE");
    cudaGetLastError();
    ms_error e1 = {0}, e2 = {0}, e3 = {0};
    int rc1 = cu_mimi_decode_submit(g, &slot1, 1, cc, &t1, &e1);
    int rc2 = rc1 ? rc1 : cu_mimi_decode_finish(g, t1, pg1, &e2);
    int rc3 = cu_mimi_decode_finish(g, t0, pg, &e3);   /* again, now reachable */
    if (mimi_decode_batch(fx->m, &s, 1, cc, pc, &e)) die("decode", &e);
    double r = rel_err(pg, pc, (size_t)F);
    int ok = rcf != MS_OK && rc1 == MS_OK && t1 != t0 && rc2 == MS_OK && rc3 == MS_OK && r <= TOL_REL;
    result(ok, name,
           "failed finish: \"%s\"; next submit: ticket %d after %d (%s); finish: %s; first ticket again: %s, "
           "max|d|/rms %.3g",
           ef.msg, t1, t0, rc1 ? e1.msg : "ok", rc2 ? e2.msg : "ok", rc3 ? e3.msg : "ok", r);
    (void)K;
    free(pc); free(pg); free(pg1);
    mimi_stream_free(s);
    cu_mimi_close(g);
}

static void test_oom(const fixture *fx) {
    const char *name = "oom";
    if (!begin(name)) return;
    if (!emu_inject_alloc_failure) {
        printf("skip %-10s the emulator's emu_inject_alloc_failure makes the allocation fail\n", name);
        return;
    }
    int n = 1, failed = 0, stale = 0, wrong_code = 0;
    cu_mimi *g = NULL;
    for (;; n += n < 8 ? 1 : 13) {   /* the first allocations, then one in 13 (each open makes two streams) */
        ms_error e = {0};
        emu_inject_alloc_failure((unsigned)n);
        int rc = cu_mimi_open(&g, fx->m, 2, &e);
        emu_inject_alloc_failure(0);
        if (rc == MS_OK) break;
        failed++;
        wrong_code += rc != MS_ERR_DEVICE || !strstr(e.msg, "out of memory");
        stale += cudaPeekAtLastError() != cudaSuccess;
        cudaGetLastError();
        if (n > 5000) break;
    }
    /* the open that succeeded ran after every failed one on this thread: it works */
    ms_error e = {0};
    int slot = 0, cg[64], cc[64];
    mimi_stream *s = mimi_stream_create(fx->m, &e);
    int rc = g ? cu_mimi_encode(g, &slot, 1, fx->pcm, cg, &e) : MS_ERR_STATE;
    if (!s || mimi_encode_batch(fx->m, &s, 1, fx->pcm, cc, &e)) die("cpu encode", &e);
    int ok = g && failed > 0 && !stale && !wrong_code && rc == MS_OK && first_mismatch(cg, cc, fx->K) < 0;
    result(ok, name, "%d opens failed on their n-th allocation (%d with a wrong code, %d leaving a stale last error); "
           "the open after them: encode %s", failed, wrong_code, stale, rc ? e.msg : "ok, codes equal");
    mimi_stream_free(s);
    cu_mimi_close(g);
}

static void test_backend(void) {
    const char *name = "backend";
    if (!begin(name)) return;
    const char *mk = getenv("MKMODEL");
    if (!mk || access(mk, X_OK) != 0) {
        printf("skip %-10s MKMODEL not set or not executable: moshid-mkmodel is needed for a model\n", name);
        return;
    }
    char dir[300], cmd[1000], lm[340], mimi[340], mcfg[340];
    snprintf(dir, sizeof dir, "%s/mimi-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --text-card 48 --dep-q 8 --context 16 >/dev/null", mk, dir);
    if (system(cmd) != 0) {
        result(0, name, "%s failed", cmd);
        return;
    }
    snprintf(lm, sizeof lm, "%s/lm", dir);
    snprintf(mimi, sizeof mimi, "%s/mimi.safetensors", dir);
    snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
    setenv("MOSHID_CU_GRAPHS", "0", 1);   /* no LM step runs here */
    unsetenv("MOSHID_CU_MIMI");
    lm_backend_opts o = {.max_slots = 2, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi, .mimi_config = mcfg};
    ms_error e = {0};
    lm_backend *cpu = lm_backend_open(&lm_cpu_backend, lm, &o, &e);
    if (!cpu) die("cpu open with Mimi", &e);
    lm_backend *gpu = lm_backend_open(&lm_cuda_backend, lm, &o, &e);
    if (!gpu) die("cuda open with Mimi", &e);
    const int F = MS_FRAME_SAMPLES, ncb = gpu->ncb;
    float *pcm = malloc(sizeof(float) * 2 * F), *oc = malloc(sizeof(float) * 2 * F), *og = malloc(sizeof(float) * 2 * F);
    int cc[2 * 64], cg[2 * 64], slots[2] = {1, 0}, codes_same = ncb > 0 && ncb == cpu->ncb && ncb <= 64, frames = 0;
    double worst = 0;
    for (int f = 0; f < 4 && codes_same; f++) {
        for (int i = 0; i < 2 * F; i++)
            pcm[i] = 0.3f * sinf(0.01f * (float)(i + f * F) * (1.0f + (float)(i / F)));
        if (f == 2 && (lm_backend_codec_reset(cpu, 0, LM_CODEC_BOTH, &e) || lm_backend_codec_reset(gpu, 0, LM_CODEC_BOTH, &e)))
            die("codec_reset", &e);
        if (lm_backend_mimi_encode(cpu, slots, 2, pcm, cc, &e) || lm_backend_mimi_encode(gpu, slots, 2, pcm, cg, &e))
            die("mimi_encode", &e);
        if (lm_backend_mimi_decode(cpu, slots, 2, cc, oc, &e) || lm_backend_mimi_decode(gpu, slots, 2, cc, og, &e))
            die("mimi_decode", &e);
        codes_same = !memcmp(cc, cg, sizeof(int) * 2 * ncb);
        for (int i = 0; i < 2; i++) {
            double r = rel_err(og + (size_t)i * F, oc + (size_t)i * F, (size_t)F);
            if (r > worst || r != r) worst = r != r ? INFINITY : r;
        }
        frames++;
    }
    result(codes_same && worst <= TOL_REL, name,
           "%d codebooks; %d frames of 2 slots (a codec reset between): codes %s; PCM max|d|/rms %.3g (limit %g)", ncb,
           frames, codes_same ? "equal" : "DIFFER", worst, TOL_REL);
    free(pcm); free(oc); free(og);
    lm_backend_close(cpu);
    lm_backend_close(gpu);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "mimi-test: could not remove %s\n", dir);
}

/* moshid-mkmodel's model in a fresh directory; 0 and a skip line without it. */
static int make_model(const char *name, char *dir, size_t len) {
    const char *mk = getenv("MKMODEL");
    if (!mk || access(mk, X_OK) != 0) {
        printf("skip %-10s MKMODEL not set or not executable: moshid-mkmodel is needed for a model\n", name);
        return 0;
    }
    snprintf(dir, len, "%s/mimi-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --text-card 48 --dep-q 8 --context 16 >/dev/null", mk, dir);
    if (system(cmd) != 0) die("moshid-mkmodel failed", NULL);
    return 1;
}

static void remove_dir(const char *dir) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "mimi-test: could not remove %s\n", dir);
}

#define PFRAMES 5
#define PSLOTS 2

static void test_pipeline(void) {
    const char *name = "pipeline";
    if (!begin(name)) return;
    char dir[300], lm[340], mimi[340], mcfg[340];
    if (!make_model(name, dir, sizeof dir)) return;
    snprintf(lm, sizeof lm, "%s/lm", dir);
    snprintf(mimi, sizeof mimi, "%s/mimi.safetensors", dir);
    snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
    setenv("MOSHID_CU_GRAPHS", "0", 1);
    unsetenv("MOSHID_CU_MIMI");
    /* on the emulator every LM product as a GEMM: the cuBLAS stand-in costs
     * far less to emulate than the matvec kernel (backend-test does the same) */
    if (emu_last_kernel) setenv("MOSHID_CU_GEMM_MIN_ROWS", "1", 1);
    ms_error e = {0};
    lm_backend *bk[2];
    lmgen_slot gen[2][PSLOTS];
    lm_frame fr[2][2];
    static float pcm[PFRAMES][PSLOTS * MS_FRAME_SAMPLES];
    /* results per backend and frame */
    static float pout[2][PFRAMES][PSLOTS * MS_FRAME_SAMPLES];
    static int codes[2][PFRAMES][PSLOTS * 64], outs[2][PFRAMES][PSLOTS * (1 + LM_MAX_DEP_Q)], has[2][PFRAMES][PSLOTS];
    int slots[PSLOTS] = {1, 0};
    for (int f = 0; f < PFRAMES; f++)
        for (int i = 0; i < PSLOTS * MS_FRAME_SAMPLES; i++)
            pcm[f][i] = 0.3f * sinf(0.013f * (float)(i + f * MS_FRAME_SAMPLES) * (1.0f + 0.5f * (float)(i / MS_FRAME_SAMPLES)));
    int nu = 0, nout = 0, inflight_max = 0;
    for (int p = 0; p < 2; p++) {
        lm_backend_opts o = {.max_slots = PSLOTS, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                             .mimi_config = mcfg, .pipeline = p};
        if (!(bk[p] = lm_backend_open(&lm_cuda_backend, lm, &o, &e))) die("cuda open", &e);
        lm_backend_stats st;
        lm_backend_stats_get(bk[p], &st);
        if (st.pipeline != p) die(p ? "opts.pipeline not taken" : "pipeline without opts.pipeline", NULL);
        nu = bk[p]->n_user;
        nout = 1 + bk[p]->cfg.dep_q;
        for (int i = 0; i < PSLOTS; i++) {
            lm_samp samp;
            lm_samp_defaults(&samp, 1234 + (uint64_t)i);
            lmgen_init(&gen[p][i], &bk[p]->cfg, slots[i], &samp);
        }
        for (int k = 0; k < 2; k++)
            if (lm_frame_alloc(bk[p], &fr[p][k], PSLOTS, &e)) die("lm_frame_alloc", &e);
        /* pipelined: frame t + 1 is submitted before frame t is waited */
        int depth = p ? 2 : 1, waited = 0;
        for (int f = 0; f <= PFRAMES; f++) {
            if (f < PFRAMES) {
                lm_frame *F = &fr[p][f % 2];
                lmgen_slot *gp[PSLOTS] = {&gen[p][0], &gen[p][1]};
                F->n = PSLOTS;
                F->slots = slots;
                F->gens = gp;
                F->pcm_in = pcm[f];
                if (lm_frame_submit(bk[p], F, &e)) die("lm_frame_submit", &e);
                if (bk[p]->inflight > inflight_max) inflight_max = bk[p]->inflight;
            }
            while (waited < PFRAMES && (f - waited + 1 >= depth || f == PFRAMES)) {
                lm_frame *F = &fr[p][waited % 2];
                if (lm_frame_wait(bk[p], F, &e)) die("lm_frame_wait", &e);
                memcpy(codes[p][waited], F->codes, sizeof(int) * PSLOTS * nu);
                memcpy(outs[p][waited], F->out, sizeof(int) * PSLOTS * nout);
                memcpy(has[p][waited], F->has_out, sizeof(int) * PSLOTS);
                for (int i = 0; i < PSLOTS; i++)
                    if (F->has_out[i])
                        memcpy(pout[p][waited] + (size_t)i * MS_FRAME_SAMPLES, F->pcm_out + (size_t)i * MS_FRAME_SAMPLES,
                               sizeof(float) * MS_FRAME_SAMPLES);
                waited++;
                if (f < PFRAMES) break;
            }
        }
        for (int k = 0; k < 2; k++) lm_frame_free(&fr[p][k]);
        lm_backend_close(bk[p]);
    }
    int same = 1, outs_n = 0;
    for (int f = 0; f < PFRAMES; f++) {
        same &= !memcmp(codes[0][f], codes[1][f], sizeof(int) * PSLOTS * nu);
        same &= !memcmp(has[0][f], has[1][f], sizeof(int) * PSLOTS);
        for (int i = 0; i < PSLOTS; i++) {
            if (!has[0][f][i]) continue;
            outs_n++;
            same &= !memcmp(outs[0][f] + i * nout, outs[1][f] + i * nout, sizeof(int) * nout);
            same &= !memcmp(pout[0][f] + (size_t)i * MS_FRAME_SAMPLES, pout[1][f] + (size_t)i * MS_FRAME_SAMPLES,
                            sizeof(float) * MS_FRAME_SAMPLES);
        }
    }
    result(same && outs_n > 0 && inflight_max == 2, name,
           "%d frames of %d slots, %d with output, up to %d in flight: codes, tokens and PCM %s the synchronous run's",
           PFRAMES, PSLOTS, outs_n, inflight_max, same ? "identical to" : "DIFFER from");
    remove_dir(dir);
}

/* ---- the benchmark ---------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(int argc, char **argv) {
    const char *shape = "real", *outp = NULL;
    double deadline = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outp = argv[++i];
        else if (!strcmp(argv[i], "--deadline-s") && i + 1 < argc) deadline = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: mimi-test --bench [--shape real|tiny] [--out FILE] [--deadline-s S]\n");
            return 2;
        }
    }
    const int tiny = !strcmp(shape, "tiny");
    if (!tiny && strcmp(shape, "real")) {
        fprintf(stderr, "mimi-test: --shape real or tiny\n");
        return 2;
    }
    double t0 = now_s();
    ms_error e = {0};
    mimi_model *m = NULL;
    if (tiny) {
        fixture fx = {0};
        load_fixture(&fx);
        m = fx.m;
        free(fx.pcm);
        free(fx.codes);
    } else {
        mimi_config cfg;
        mimi_config_default(&cfg);
        if (mimi_model_random(&m, &cfg, 7, &e)) die("mimi_model_random", &e);
    }
    static const int real_b[] = {1, 8, 32, 64}, tiny_b[] = {1, 2};
    const int *bs = tiny ? tiny_b : real_b, nb = tiny ? 2 : 4, maxb = bs[nb - 1], reps = tiny ? 1 : 5;
    cu_mimi *g = NULL;
    if (cu_mimi_open(&g, m, maxb, &e)) die("cu_mimi_open", &e);
    FILE *out = outp ? fopen(outp, "a") : NULL;
    if (outp && !out) {
        fprintf(stderr, "mimi-test: cannot open %s\n", outp);
        return 1;
    }
    const int F = mimi_frame_samples(m), K = mimi_num_codebooks(m);
    /* frames until every transformer ring row is valid (the steady state) */
    const mimi_config *mc = mimi_model_config(m);
    const int fill = (int)(((long)mc->context * mc->hop + F - 1) / F);
    char head[256];
    snprintf(head, sizeof head,
             "| codec | measure | batch | ms per step | encode ms | decode ms | fresh ms per step | notes |\n"
             "|---|---|---|---|---|---|---|---|\n");
    fputs(head, stdout);
    if (out) fputs(head, out), fflush(out);
    float *pcm = malloc(sizeof(float) * maxb * F), *pout = malloc(sizeof(float) * maxb * F);
    int *codes = malloc(sizeof(int) * maxb * K), *slots = malloc(sizeof(int) * maxb);
    for (int i = 0; i < maxb * F; i++) pcm[i] = 0.3f * sinf(0.01f * (float)i) + 0.01f * (float)((i * 7919) % 101 - 50) / 50.f;
    for (int i = 0; i < maxb; i++) slots[i] = i;
    double open_s = now_s() - t0;
    int rc = 0;
    /* Fresh: every slot reset, then each batch's median from there (a few
     * frames into the stream: attention over an almost empty ring). Then all
     * maxb slots run `fill` frames together and each batch is measured again
     * over full rings: the row's figure; the fresh one beside it. */
    double fresh[8] = {0};
    for (int i = 0; i < maxb; i++)
        if (cu_mimi_reset(g, i, 3, &e)) die("reset", &e);
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {
            double a = now_s();
            for (int f = 0; f < fill; f++) {
                if (deadline > 0 && now_s() - t0 > deadline) {
                    printf("deadline: stopped while filling the context (frame %d of %d)\n", f, fill);
                    goto done;
                }
                if (cu_mimi_encode(g, slots, maxb, pcm, codes, &e)) die("encode", &e);
                if (cu_mimi_decode(g, slots, maxb, codes, pout, &e)) die("decode", &e);
            }
            printf("filled: %d frames of %d slots in %.1f s\n", fill, maxb, now_s() - a);
        }
        for (int bi = 0; bi < nb; bi++) {
            int B = bs[bi];
            if (deadline > 0 && now_s() - t0 > deadline) {
                printf("deadline: stopped before batch %d (%s)\n", B, phase ? "full context" : "fresh");
                goto done;
            }
            double te[8], td[8], tt[8];
            for (int r = -1; r < reps; r++) {   /* r = -1: the warm-up */
                double a = now_s();
                if (cu_mimi_encode(g, slots, B, pcm, codes, &e)) die("encode", &e);
                double b = now_s();
                if (cu_mimi_decode(g, slots, B, codes, pout, &e)) die("decode", &e);
                double c = now_s();
                if (r >= 0) {
                    te[r] = (b - a) * 1e3;
                    td[r] = (c - b) * 1e3;
                    tt[r] = (c - a) * 1e3;
                }
            }
            qsort(te, (size_t)reps, sizeof(double), cmp_d);
            qsort(td, (size_t)reps, sizeof(double), cmp_d);
            qsort(tt, (size_t)reps, sizeof(double), cmp_d);
            if (phase == 0) {
                fresh[bi] = tt[reps / 2];
                continue;
            }
            char line[400];
            snprintf(line, sizeof line,
                     "| mimi | encode+decode | %d | %.3f | %.3f | %.3f | %.3f | %s, f32, median of %d, full context "
                     "(after %d frames; fresh: the first frames after a reset), open %.1f s |\n",
                     B, tt[reps / 2], te[reps / 2], td[reps / 2], fresh[bi],
                     tiny ? "tiny fixture" : "real dimensions, random weights", reps, fill, open_s);
            fputs(line, stdout);
            fflush(stdout);
            if (out) fputs(line, out), fflush(out);
        }
    }
done:
    if (out) fclose(out);
    free(pcm); free(pout); free(codes); free(slots);
    cu_mimi_close(g);
    mimi_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        char why0[512];
        if (gu_devices(why0, sizeof why0) <= 0) {
            printf("skipped: %s\n", why0);
            return 77;
        }
        return bench(argc, argv);
    }
    if (argc > 1) filter = argv[1];
    char why[512];
    if (gu_devices(why, sizeof why) <= 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    fixture fx = {0};
    load_fixture(&fx);
    int frames = fx.frames;
    const char *fe = getenv("MIMI_TEST_FRAMES");
    if (fe && atoi(fe) > 0) frames = atoi(fe);
    if (frames > fx.frames) frames = fx.frames;
    test_warmup(&fx);
    test_parity(&fx, frames);
    test_batch(&fx);
    test_graphs(&fx);
    test_real();
    test_refuse(&fx);
    test_ticket(&fx);
    test_oom(&fx);
    test_backend();
    test_pipeline();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    free(fx.pcm);
    free(fx.codes);
    mimi_model_free(fx.m);
    return n_fail ? 1 : 0;
}
