/* engine_test.c - engine-test: every CUDA kernel against its C twin, the
 * CPU backend's own kernel or sampler (cuda/cu_kern.h lists the pairs:
 * kern_matvec_bf16, kern_rmsnorm, samp_topk_rows), on deterministic random
 * inputs of several shapes, plus host-side checks: the CUDA error
 * reporting, the launchers' argument checks, and the sampler kernel's logic
 * replayed on the host (cuda/samp_core.h) against the CPU sampler on this
 * file's sampler cases. Needs no Check and no pkg-config library (make
 * engine-only).
 *
 * One list of cases, two executors: built with nvcc against the toolkit it
 * is build/engine-test and runs the kernels on a GPU (tests/gpu/
 * device_check.sh); built against the emulator's headers (tests/gpu/emu/) it
 * is build/engine-test-emu and runs the same cases in `make test` without
 * one, where a fault (a barrier not reached by every thread, a warp op with
 * an inactive lane, a misaligned or out-of-bounds access, shared memory read
 * before it is written) stops the kernel with its block and thread. The
 * emulator also names the kernel each launcher chose, so the matvec cases
 * check there that the vector path was (or was not) taken.
 *
 *   engine-test [--small] [SUBSTRING]
 * --small skips the largest cases (for compute-sanitizer, which is slow);
 * SUBSTRING runs only the tests whose name contains it. Each test's name is
 * printed and flushed ("--   name") before it runs, so a crash names it;
 * then one result line with its time, then "N passed, N failed, N skipped".
 * Device tests are skipped with "no CUDA device: skipped" where there is
 * none. Exit status 1 when a test failed, else 0.
 *
 * Tolerances (normalised errors, in units of 2^-24, float's unit roundoff):
 *  - matvec on small integers: exact (every partial sum is an integer below
 *    2^24, so any summation order gives the same float);
 *  - matvec on random floats: |gpu - ref| / (2^-24 * sum_k |x_k w_k|) <=
 *    2 sqrt(K) + 8. Both sides round K times; a random walk of K roundings
 *    stays near sqrt(K) while one missing or doubled term costs about
 *    2^24 / K (>= 1489 for K <= 11264): the bound separates the two;
 *  - rmsnorm: |gpu - ref| / (2^-24 |ref|) <= 64 (a handful of roundings
 *    plus the f32 tree sum against the twin's double sum);
 *  - sampler: the same index, exactly (engine/lm/samp.h, docs/cuda.md).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_check.h"
#include "cu_kern.h"
#include "gpu_util.h"
#include "kern_cpu.h"
#include "samp.h"
#include "samp_core.h"
#include "st.h"

/* Defined by the emulator (tests/gpu/emu/emu.h) only: the last kernel
 * launched. NULL on a device build. */
const char *emu_last_kernel(void) __attribute__((weak));

static int n_pass, n_fail, n_skip;
static int have_dev, small_only;
static const char *filter;
static char no_dev_why[512];
static double t_begin;

/* Cases doing more work than this (multiply-adds, or elements x passes) are
 * left out by --small. */
#define SMALL_WORK (1 << 21)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* begin: 1 when test name should run now: it matches the filter, the device
 * it needs exists (device = 1), and --small does not leave it out (work).
 * Prints and flushes its name first, so that a crash inside names it. */
static int begin(const char *name, int device, double work) {
    if (filter && !strstr(name, filter)) return 0;
    if (device && !have_dev) {
        printf("%-4s %-48s no CUDA device: skipped\n", "skip", name);
        n_skip++;
        return 0;
    }
    if (small_only && work > SMALL_WORK) {
        printf("%-4s %-48s left out by --small\n", "skip", name);
        n_skip++;
        return 0;
    }
    printf("--   %s\n", name);
    fflush(stdout);
    t_begin = now_ms();
    return 1;
}

static void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(int ok, const char *name, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%-4s %-48s %s [%.0f ms]\n", ok ? "ok" : "FAIL", name, detail, now_ms() - t_begin);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- host-side checks (no device needed) ------------------------------ */

static int failing_call(ms_error *err, int *line) {
    *line = __LINE__ + 1;
    CU_CHECK(err, cudaSetDevice(-1));
    return MS_OK;
}

static void test_cu_check(void) {
    if (!begin("cu_check_message", 0, 0)) return;
    ms_error err = {0};
    int line = 0;
    int rc = failing_call(&err, &line);
    /* The failed call is also the runtime's last error: clear it, or the
     * next launcher's cudaGetLastError() reports it (found by the emulator). */
    cudaError_t last = cudaGetLastError();
    char want_at[64];
    snprintf(want_at, sizeof want_at, "engine_test.c:%d", line);
    int ok = rc == MS_ERR_DEVICE && err.code == MS_ERR_DEVICE && strstr(err.msg, "cudaSetDevice(-1) failed at") &&
             strstr(err.msg, want_at) && strstr(err.msg, "cudaError") && last != cudaSuccess &&
             (!have_dev || cudaGetLastError() == cudaSuccess);
    result(ok, "cu_check_message", "\"%s\"", err.msg);
}

static void test_launch_args(void) {
    if (!begin("launcher_argument_checks", 0, 0)) return;
    int ok = cu_matvec_bf16(NULL, NULL, NULL, -1, 4, 4, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16(NULL, NULL, NULL, 1, 4, -8, 0) == cudaErrorInvalidValue &&
             cu_rmsnorm(NULL, NULL, NULL, 1, 0, 1e-8f, 0) == cudaErrorInvalidValue &&
             cu_rmsnorm(NULL, NULL, NULL, 1, 8, NAN, 0) == cudaErrorInvalidValue &&
             cu_samp_topk_rows(NULL, NULL, NULL, 1, 0, 0, 0) == cudaErrorInvalidValue &&
             cu_samp_topk_rows(NULL, NULL, NULL, -1, 8, 0, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16(NULL, NULL, NULL, 0, 4, 4, 0) == cudaSuccess;
    result(ok, "launcher_argument_checks", "bad dims refused before any launch");
}

/* ---- matvec -------------------------------------------------------------- */

/* The kernel cu_matvec_bf16 launches for these arguments (its rule). */
static void matvec_path(char *out, size_t len, int B, int K, const void *x, const void *w) {
    int aligned = K % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;
    int bt = B == 1 ? 1 : B == 2 ? 2 : B <= 4 ? 4 : CU_MATVEC_BATCH_TILE;
    if (aligned) snprintf(out, len, "matvec_bf16_vec<%d>", bt);
    else snprintf(out, len, "matvec_bf16_scalar");
}

/* One matvec case; integers: small-integer inputs (exact comparison);
 * xoff, woff: x and W start this many elements into their buffers
 * (misaligned pointers take the scalar path). */
static void matvec_case(int B, int N, int K, int integers, int xoff, int woff, uint64_t seed) {
    char name[96], offs[32] = "";
    if (xoff || woff) snprintf(offs, sizeof offs, "%s%.0d%s%.0d", xoff ? " x+" : "", xoff, woff ? " w+" : "", woff);
    snprintf(name, sizeof name, "matvec_bf16 B=%d N=%d K=%d%s%s", B, N, K, integers ? " int" : "", offs);
    if (!begin(name, 1, (double)B * N * K)) return;
    gu_rng r = {seed};
    size_t nx = (size_t)B * K + xoff, nw = (size_t)N * K + woff, ny = (size_t)B * N;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *yr = malloc(ny * sizeof *yr);
    uint16_t *w = malloc(nw * sizeof *w);
    for (size_t i = 0; i < nx; i++) x[i] = integers ? (float)gu_int(&r, -3, 3) : (float)gu_normal(&r);
    for (size_t i = 0; i < nw; i++)
        w[i] = st_f32_to_bf16(integers ? (float)gu_int(&r, -4, 4) : (float)(0.05 * gu_normal(&r)));
    kern_matvec_bf16(yr, x + xoff, w + woff, B, N, K, NULL);   /* the twin, on this thread */

    float *dx = gu_dalloc(nx * sizeof *x), *dy = gu_dalloc(ny * sizeof *y);
    uint16_t *dw = gu_dalloc(nw * sizeof *w);
    gu_h2d(dx, x, nx * sizeof *x);
    gu_h2d(dw, w, nw * sizeof *w);
    CU_CHECK_FATAL(cudaMemset(dy, 0xFF, ny * sizeof *y));   /* NaN: unwritten outputs show */
    CU_CHECK_FATAL(cu_matvec_bf16(dy, dx + xoff, dw + woff, B, N, K, 0));
    gu_sync();
    gu_d2h(y, dy, ny * sizeof *y);
    char path[48], ran[64] = "";
    matvec_path(path, sizeof path, B, K, dx + xoff, dw + woff);
    int path_ok = 1;
    if (emu_last_kernel) {   /* the emulator says which kernel ran */
        path_ok = !strcmp(emu_last_kernel(), path);
        snprintf(ran, sizeof ran, "%s", emu_last_kernel());
    }

    double worst = 0.0, tol = integers ? 0.0 : 2.0 * sqrt((double)K) + 8.0;
    long bad = -1;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)b * N + n;
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += fabs((double)x[xoff + (size_t)b * K + k] * st_bf16_to_f32(w[woff + (size_t)n * K + k]));
            double d = fabs((double)y[i] - yr[i]);
            double e = integers ? d : d / (s * ldexp(1.0, -24) + 1e-300);
            if (!(e <= tol)) e = INFINITY;   /* NaN counts as a failure */
            if (e > worst) worst = e;
            if (e > tol && bad < 0) bad = (long)i;
        }
    if (bad >= 0)
        result(0, name, "first mismatch at (b=%ld, n=%ld): gpu %.9g ref %.9g (normalised error %.3g > %.3g)",
               bad / N, bad % N, y[bad], yr[bad], worst, tol);
    else if (!path_ok)
        result(0, name, "the launcher ran %s, its rule says %s", ran, path);
    else
        result(1, name, "%s, max normalised error %.3g (tolerance %.3g)", path, worst, tol);
    gu_dfree(dx); gu_dfree(dy); gu_dfree(dw);
    free(x); free(y); free(yr); free(w);
}

static void test_matvec(void) {
    static const struct { int B, N, K, integers, xoff, woff; } cases[] = {
        {1, 1, 8, 1, 0, 0},        {1, 37, 64, 1, 0, 0},      {3, 129, 264, 1, 0, 0},   {8, 257, 4096, 1, 0, 0},
        {11, 65, 1024, 1, 0, 0},   {2, 33, 13, 1, 0, 0},      {3, 40, 64, 1, 1, 0},     {1, 4096, 4096, 0, 0, 0},
        {2, 1024, 4096, 0, 0, 0},  {4, 333, 2816, 0, 0, 0},   {7, 512, 1024, 0, 0, 0},  {1, 300, 11264, 0, 0, 0},
        {9, 100, 1000, 0, 0, 0},   {5, 17, 77, 0, 3, 0},
        /* B = 64: eight batch tiles in blockIdx.y, exact and random */
        {64, 33, 512, 1, 0, 0},    {64, 20, 256, 0, 0, 0},
        /* W misaligned (2 and 8 bytes off: scalar path), 16 bytes off (still the vector path) */
        {3, 40, 64, 1, 0, 1},      {1, 64, 4096, 0, 0, 4},    {6, 21, 96, 1, 0, 8},
        /* the scalar path past one batch tile: B = 9, 13, 64 */
        {9, 50, 136, 1, 0, 1},     {13, 40, 200, 0, 2, 0},    {64, 9, 72, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        matvec_case(cases[i].B, cases[i].N, cases[i].K, cases[i].integers, cases[i].xoff, cases[i].woff, 1000 + i);
}

/* ---- rmsnorm ------------------------------------------------------------- */

static void rmsnorm_case(int B, int C, double scale, int inplace, uint64_t seed) {
    char name[96];
    snprintf(name, sizeof name, "rmsnorm B=%d C=%d scale=%g%s", B, C, scale, inplace ? " in-place" : "");
    if (!begin(name, 1, (double)B * C)) return;
    const float eps = 1e-8f;
    gu_rng r = {seed};
    size_t n = (size_t)B * C;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *yr = malloc(n * sizeof *yr);
    float *a = malloc((size_t)C * sizeof *a);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * gu_normal(&r));
    for (int c = 0; c < C; c++) a[c] = (float)(1.0 + 0.5 * gu_normal(&r));
    kern_rmsnorm(yr, x, a, B, C, eps);
    float *dx = gu_dalloc(n * sizeof *x), *dy = inplace ? dx : gu_dalloc(n * sizeof *y), *da = gu_dalloc((size_t)C * sizeof *a);
    gu_h2d(dx, x, n * sizeof *x);
    gu_h2d(da, a, (size_t)C * sizeof *a);
    CU_CHECK_FATAL(cu_rmsnorm(dy, dx, da, B, C, eps, 0));
    gu_sync();
    gu_d2h(y, dy, n * sizeof *y);
    double worst = 0.0, tol = 64.0;
    long bad = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)y[i] - yr[i]);
        double e = d == 0.0 ? 0.0 : d / (fabs((double)yr[i]) * ldexp(1.0, -24) + 1e-300);
        if (e != e) e = INFINITY;   /* NaN counts as a failure */
        if (e > worst) worst = e;
        if (e > tol && bad < 0) bad = (long)i;
    }
    if (bad >= 0)
        result(0, name, "first mismatch at (b=%ld, c=%ld): gpu %.9g ref %.9g", bad / C, bad % C, y[bad], yr[bad]);
    else
        result(1, name, "max normalised error %.3g (tolerance %.3g)", worst, tol);
    gu_dfree(dx); gu_dfree(da);
    if (!inplace) gu_dfree(dy);
    free(x); free(y); free(yr); free(a);
}

static void test_rmsnorm(void) {
    rmsnorm_case(1, 4096, 1.0, 0, 1);
    rmsnorm_case(3, 1024, 3.0, 0, 2);
    rmsnorm_case(2, 7, 1.0, 0, 3);
    rmsnorm_case(4, 4096, 1e-4, 0, 4);   /* mean(x^2) ~ eps: eps placement matters */
    rmsnorm_case(5, 1000, 1.0, 1, 5);
}

/* ---- sampler ------------------------------------------------------------- */

/* The sampler cases: B rows of N logits of one kind, every row with its own
 * seed and step and the case's k and T (kind "mixed": each row its own k
 * and T as well). Kinds: normal logits x3; rounded to 0.5 (many ties); with
 * -inf and NaN entries; all equal; with +inf entries (ties at +inf, and
 * inf/inf = NaN at T = +inf); mixed rows. */
typedef struct { int B, N, topk; float temp; int kind; uint64_t seed; } sample_spec;
enum { SK_NORMAL, SK_TIES, SK_NEGINF_NAN, SK_FLAT, SK_POSINF, SK_MIXED };
static const char *sample_kinds[] = {"normal", "ties", "inf+nan", "flat", "+inf", "mixed"};
#define SAMPLE_MAX_CASES 128
static sample_spec sample_cases[SAMPLE_MAX_CASES];
static int n_sample_cases;

/* Per-row parameters of the mixed rows (row b uses entry b % 8). */
static const float mixed_temps[8] = {0.7f, 0.0f, 1.0f, NAN, INFINITY, 1e-3f, -1.0f, 30.0f};
static int mixed_topk(int b, int N) {
    const int k[8] = {25, 0, N - 1, 1, 250, -5, N, 2};
    return k[(b / 8 + b) % 8];   /* shifted each 8 rows: other (T, k) pairs */
}

static void sample_add(int B, int N, int topk, float temp, int kind) {
    if (n_sample_cases == SAMPLE_MAX_CASES) { fprintf(stderr, "SAMPLE_MAX_CASES too small\n"); exit(1); }
    sample_cases[n_sample_cases] = (sample_spec){B, N, topk, temp, kind, (uint64_t)n_sample_cases + 1};
    n_sample_cases++;
}

/* Vocabularies: the LM's text (32000) and audio (2048) logits, a tiny one,
 * and one that is not a multiple of the kernel's 256 threads. */
static void sample_make_cases(void) {
    static const int ns[] = {7, 300, 2048, 32000};
    static const float temps[] = {0.7f, 1.3f};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        int N = ns[a];
        const int ks[] = {0, 1, 25, 250, N - 1, N, -3};
        sample_add(8, N, 0, 0.0f, SK_NORMAL);   /* greedy ignores k */
        for (size_t t = 0; t < 2; t++)
            for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) sample_add(8, N, ks[k], temps[t], SK_NORMAL);
        sample_add(8, N, 25, INFINITY, SK_NORMAL);   /* every quotient 0: the noise alone */
        sample_add(8, N, 250, NAN, SK_NORMAL);       /* NaN temperature: greedy */
        sample_add(8, N, 25, 0.7f, SK_TIES);
        sample_add(8, N, 250, 0.8f, SK_TIES);
        sample_add(8, N, 0, 0.0f, SK_TIES);
        sample_add(8, N, 25, 0.7f, SK_NEGINF_NAN);
        sample_add(8, N, 0, 0.0f, SK_NEGINF_NAN);
        sample_add(4, N, 5, 1.0f, SK_FLAT);
        sample_add(4, N, 0, 0.0f, SK_FLAT);
        sample_add(8, N, 25, 0.7f, SK_POSINF);
        sample_add(8, N, 0, 0.0f, SK_POSINF);
        sample_add(8, N, 25, INFINITY, SK_POSINF);
        sample_add(16, N, 0, 0.0f, SK_MIXED);
    }
}

/* The logits (B, N) and rows (B) of case c; the caller frees both. */
static void sample_inputs(const sample_spec *c, float **logits, samp_row **rows) {
    gu_rng r = {c->seed};
    size_t n = (size_t)c->B * c->N;
    float *l = malloc(n * sizeof *l);
    for (size_t i = 0; i < n; i++) {
        double v = 3.0 * gu_normal(&r);
        if (c->kind == SK_TIES) v = round(v * 2.0) / 2.0;
        if (c->kind == SK_NEGINF_NAN && gu_int(&r, 0, 9) == 0) v = gu_int(&r, 0, 1) ? -INFINITY : NAN;
        if (c->kind == SK_FLAT) v = 1.25;
        if (c->kind == SK_POSINF && gu_int(&r, 0, 99) == 0) v = INFINITY;
        l[i] = (float)v;
    }
    if (c->kind == SK_POSINF)   /* at least two +inf per row */
        for (int b = 0; b < c->B; b++) {
            l[(size_t)b * c->N + (size_t)gu_int(&r, 0, c->N - 1)] = INFINITY;
            l[(size_t)b * c->N + (size_t)gu_int(&r, 0, c->N - 1)] = INFINITY;
        }
    samp_row *p = malloc((size_t)c->B * sizeof *p);
    for (int b = 0; b < c->B; b++) {
        p[b] = (samp_row){.seed = c->seed * 7919 + (uint64_t)b, .step = (uint64_t)(b * 13 + 5), .temp = c->temp,
                          .topk = c->topk};
        if (c->kind == SK_MIXED) {
            p[b].temp = mixed_temps[b % 8];
            p[b].topk = mixed_topk(b, c->N);
        }
    }
    *logits = l;
    *rows = p;
}

#define SAMPLE_STREAM SAMP_STREAM_AUDIO(2)

static void sample_name(char *name, size_t len, const sample_spec *c) {
    if (c->kind == SK_MIXED)
        snprintf(name, len, "samp_topk_rows B=%d N=%d k,T per row %s", c->B, c->N, sample_kinds[c->kind]);
    else
        snprintf(name, len, "samp_topk_rows B=%d N=%d k=%d T=%g %s", c->B, c->N, c->topk, c->temp,
                 sample_kinds[c->kind]);
}

/* Work of a case for --small: rows x N, x 4 when the radix select runs. */
static double sample_work(const sample_spec *c) {
    return (double)c->B * c->N * (c->topk > 0 && c->topk < c->N && c->temp > 0.0f ? 4.0 : 1.0);
}

/* Host check: the kernel's algorithm replayed on the host (samp_radix_rows)
 * picks the twin's token on every row of every case (tests/check_samp.c
 * does the same on far more rows; this keeps it in engine-only builds). */
static void test_sample_replay(void) {
    const char *tname = "samp_radix_rows == samp_topk_rows";
    if (!begin(tname, 0, 0)) return;
    long rows_total = 0;
    for (int ci = 0; ci < n_sample_cases; ci++) {
        const sample_spec *c = &sample_cases[ci];
        float *l;
        samp_row *p;
        sample_inputs(c, &l, &p);
        int32_t *want = malloc((size_t)c->B * sizeof *want), *got = malloc((size_t)c->B * sizeof *got);
        int *scratch = malloc((size_t)c->N * sizeof *scratch);
        samp_topk_rows(want, l, p, c->B, c->N, SAMPLE_STREAM, scratch);
        samp_radix_rows(got, l, p, c->B, c->N, SAMPLE_STREAM);
        int bad = -1;
        for (int b = 0; b < c->B && bad < 0; b++)
            if (got[b] != want[b]) bad = b;
        if (bad >= 0) {
            char name[128];
            sample_name(name, sizeof name, c);
            result(0, tname, "%s row %d: replay %d, twin %d", name, bad, got[bad], want[bad]);
        }
        rows_total += c->B;
        free(l); free(p); free(want); free(got); free(scratch);
        if (bad >= 0) return;   /* the first mismatch only */
    }
    result(1, tname, "%d cases, %ld rows, same tokens", n_sample_cases, rows_total);
}

static void sample_case(const sample_spec *c) {
    char name[128];
    sample_name(name, sizeof name, c);
    if (!begin(name, 1, sample_work(c))) return;
    float *l;
    samp_row *rows;
    sample_inputs(c, &l, &rows);
    const int B = c->B, N = c->N;
    size_t n = (size_t)B * N;
    int32_t *got = malloc((size_t)B * sizeof *got), *want = malloc((size_t)B * sizeof *want);
    int *scratch = malloc((size_t)N * sizeof *scratch);
    samp_topk_rows(want, l, rows, B, N, SAMPLE_STREAM, scratch);   /* the twin */
    float *dl = gu_dalloc(n * sizeof *l);
    samp_row *drows = gu_dalloc((size_t)B * sizeof *rows);
    int32_t *dout = gu_dalloc((size_t)B * sizeof *got);
    gu_h2d(dl, l, n * sizeof *l);
    gu_h2d(drows, rows, (size_t)B * sizeof *rows);
    CU_CHECK_FATAL(cudaMemset(dout, 0xFF, (size_t)B * sizeof *got));   /* -1: unwritten outputs show */
    CU_CHECK_FATAL(cu_samp_topk_rows(dout, dl, drows, B, N, SAMPLE_STREAM, 0));
    gu_sync();
    gu_d2h(got, dout, (size_t)B * sizeof *got);
    int bad = -1;
    for (int b = 0; b < B && bad < 0; b++)
        if (got[b] != want[b]) bad = b;
    if (bad >= 0) {
        const float *lb = l + (size_t)bad * N;
        result(0, name, "row %d (k=%d T=%g): gpu picked %d (logit %.9g), twin %d (logit %.9g)", bad, rows[bad].topk,
               rows[bad].temp, got[bad], got[bad] >= 0 && got[bad] < N ? lb[got[bad]] : NAN, want[bad],
               lb[want[bad]]);
    } else {
        result(1, name, "%d rows, same index (first %d)", B, want[0]);
    }
    gu_dfree(dl); gu_dfree(drows); gu_dfree(dout);
    free(l); free(rows); free(got); free(want); free(scratch);
}

static void test_sample(void) {
    for (int c = 0; c < n_sample_cases; c++) sample_case(&sample_cases[c]);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small_only = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: engine-test [--small] [SUBSTRING]\n");
            return 2;
        } else filter = argv[i];
    }
    have_dev = gu_devices(no_dev_why, sizeof no_dev_why) > 0;
    if (have_dev) {
        struct cudaDeviceProp p;
        CU_CHECK_FATAL(cudaGetDeviceProperties(&p, 0));
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        printf("device 0: %s sm_%d%d (driver CUDA %d.%d, runtime CUDA %d.%d)\n", p.name, p.major, p.minor,
               drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    } else {
        printf("%s: device tests skipped\n", no_dev_why);
    }
    fflush(stdout);
    sample_make_cases();
    test_cu_check();
    test_launch_args();
    test_sample_replay();
    test_matvec();
    test_rmsnorm();
    test_sample();
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? 1 : 0;
}
