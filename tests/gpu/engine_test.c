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
 *  - sampler: the same index, exactly (engine/lm/samp.h, docs/cuda.md);
 *  - the fused products (cu_fuse: a norm prologue, a residual add) and the
 *    GEMM path's fused pieces: bit for bit the launches they replace (the
 *    same floats in the same order is what the fusion promises; any
 *    tolerance would hide a changed summation order);
 *  - the LM step's kernels (cuda/cu_lm.cu): embeddings, residual adds and
 *    the bf16 rounding exactly (the same float additions in the same
 *    order, the same rounding rule); RoPE and SiLU |gpu - ref| <= 64 units
 *    of 2^-24 of the operands' magnitude (the device's expf, cosf and sinf
 *    are within 2 ulp of glibc's, and the result is a product or a sum of
 *    two products of them), the bf16 keys within one bf16 ulp (a last-bit
 *    difference of the float may cross a rounding boundary); attention
 *    |gpu - ref| <= 1e-5 of the values' largest magnitude (softmax
 *    weights and sums of at most a few hundred f32 terms, each rounding at
 *    6e-8 relative: a random walk stays near 1e-6, one wrong key moves the
 *    output by its weight, ~1/nk >= 1e-3 here);
 *  - Mimi's kernels (cuda/cu_mimi_kern.cu) against the CPU codec's layer
 *    (mimi_conv_forward, mimi_elu, mimi_gemm): |gpu - ref| <= (2 sqrt(n) +
 *    16) units of 2^-24 of the sum of the n terms' magnitudes (computed by
 *    the twin itself on |w|, |x|, |state|, which bounds it: ELU(|x|) >=
 *    |ELU(x)|): float sums in another order, as the matvec's bound, plus a
 *    few ulps of ELU (the same polynomial, fused or not); the kept conv
 *    state exactly where it is a copy. The RVQ search: the code the
 *    distances in double pick, or one within 1e-5 of the best distance's
 *    scale (a near tie the float order may flip), and on exact duplicate
 *    entries always the lowest index (the C's strict <); the residual
 *    within the same bound as a sum.
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
#include "lm_config.h"
#include "kern_cpu.h"
#include "mimi_int.h"
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
    static const float one[4] __attribute__((aligned(16))) = {1, 1, 1, 1};
    const cu_fuse both = {.norm = one, .eps = 1e-8f, .acc = 1}, norm = {.norm = one, .eps = 1e-8f},
                  nan_eps = {.norm = one, .eps = NAN};
    int ok = cu_matvec_bf16(NULL, NULL, NULL, -1, 4, 4, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16(NULL, NULL, NULL, 1, 4, -8, 0) == cudaErrorInvalidValue &&
             cu_rmsnorm(NULL, NULL, NULL, 1, 0, 1e-8f, 0) == cudaErrorInvalidValue &&
             cu_rmsnorm(NULL, NULL, NULL, 1, 8, NAN, 0) == cudaErrorInvalidValue &&
             cu_samp_topk_rows(NULL, NULL, NULL, 1, 0, 0, 0) == cudaErrorInvalidValue &&
             cu_samp_topk_rows(NULL, NULL, NULL, -1, 8, 0, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16(NULL, NULL, NULL, 0, 4, 4, 0) == cudaSuccess &&
             /* a product fuses the norm of its input or the add of its output, not both; no gated norm */
             cu_matvec_bf16_fused(NULL, NULL, NULL, 1, 4, 8, &both, 0) == cudaErrorInvalidValue &&
             cu_matvec_q8_fused(NULL, NULL, NULL, (const float *)16, 1, 4, 8, &both, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16_gated_fused(NULL, NULL, NULL, 1, 4, 8, &norm, 0) == cudaErrorInvalidValue &&
             cu_matvec_q8_gated_fused(NULL, NULL, NULL, (const float *)16, 1, 4, 8, &norm, 0) == cudaErrorInvalidValue &&
             cu_matvec_bf16_fused(NULL, NULL, NULL, 1, 4, 8, &nan_eps, 0) == cudaErrorInvalidValue &&
             cu_rmsnorm_bf16(NULL, NULL, NULL, 1, 0, 1e-8f, 0) == cudaErrorInvalidValue;
    result(ok, "launcher_argument_checks", "bad dims refused before any launch");
}

/* ---- matvec -------------------------------------------------------------- */

/* The kernel cu_matvec_bf16 launches for these arguments (its rule). */
static void matvec_path(char *out, size_t len, int B, int K, const void *x, const void *w) {
    int aligned = K % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;
    int bt = B == 1 ? 1 : B == 2 ? 2 : B <= 4 ? 4 : CU_MATVEC_BATCH_TILE;
    if (aligned) snprintf(out, len, "matvec_bf16_vec<%d>", bt);
    else snprintf(out, len, "matvec_scalar<false>");
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

/* cu_samp_topk_feed on the mixed case's rows (sampled and greedy): the
 * twin's tokens, then the feed-back rule in C (prev = the forced target
 * where >= 0, else the token; the token -1 where k >= dep_steps), with a
 * target on every third row and dep_steps below k on every fourth. */
static void sample_feed_case(void) {
    const char *name = "samp_topk_feed B=16 N=2048 (+ feed-back, dep_steps)";
    if (!begin(name, 1, 16.0 * 2048 * 4)) return;
    sample_spec c = {16, 2048, 0, 0.0f, SK_MIXED, 77};
    float *l;
    samp_row *rows;
    sample_inputs(&c, &l, &rows);
    const int B = c.B, N = c.N, ts = 3, k = 2;
    int32_t tok[16], want_out[16], want_prev[16], got_out[16], got_prev[16], tgt[16 * 3], steps[16];
    int *scratch = malloc((size_t)N * sizeof *scratch);
    samp_topk_rows(tok, l, rows, B, N, SAMPLE_STREAM, scratch);
    for (int b = 0; b < B; b++) {
        tgt[b * ts] = b % 3 == 0 ? 100 + b : -1;
        tgt[b * ts + 1] = tgt[b * ts + 2] = 7;   /* other columns: never read */
        steps[b] = b % 4 == 0 ? k : k + 1;       /* k >= steps: masked */
        want_prev[b] = tgt[b * ts] >= 0 ? tgt[b * ts] : tok[b];
        want_out[b] = k >= steps[b] ? -1 : tok[b];
    }
    float *dl = gu_dalloc((size_t)B * N * sizeof *l);
    samp_row *drows = gu_dalloc((size_t)B * sizeof *rows);
    int32_t *dout = gu_dalloc(sizeof got_out), *dprev = gu_dalloc(sizeof got_prev), *dtgt = gu_dalloc(sizeof tgt);
    int32_t *dsteps = gu_dalloc(sizeof steps);
    gu_h2d(dl, l, (size_t)B * N * sizeof *l);
    gu_h2d(drows, rows, (size_t)B * sizeof *rows);
    gu_h2d(dtgt, tgt, sizeof tgt);
    gu_h2d(dsteps, steps, sizeof steps);
    CU_CHECK_FATAL(cudaMemset(dout, 0xFF, sizeof got_out));
    CU_CHECK_FATAL(cudaMemset(dprev, 0xFF, sizeof got_prev));
    CU_CHECK_FATAL(cu_samp_topk_feed(dout, dl, drows, B, N, SAMPLE_STREAM, dprev, dtgt, ts, dsteps, k, 0));
    gu_sync();
    gu_d2h(got_out, dout, sizeof got_out);
    gu_d2h(got_prev, dprev, sizeof got_prev);
    int bad = -1;
    for (int b = 0; b < B && bad < 0; b++)
        if (got_out[b] != want_out[b] || got_prev[b] != want_prev[b]) bad = b;
    if (bad >= 0)
        result(0, name, "row %d: token %d prev %d, want token %d prev %d", bad, got_out[bad], got_prev[bad],
               want_out[bad], want_prev[bad]);
    else
        result(1, name, "%d rows: tokens, forced and sampled feed-back, masks as the twin", B);
    gu_dfree(dl); gu_dfree(drows); gu_dfree(dout); gu_dfree(dprev); gu_dfree(dtgt); gu_dfree(dsteps);
    free(l); free(rows); free(scratch);
}

static void test_sample(void) {
    for (int c = 0; c < n_sample_cases; c++) sample_case(&sample_cases[c]);
    sample_feed_case();
}

/* ---- the LM step's kernels (cuda/cu_lm.cu) ----------------------------- */

/* Worst |got - want| / scale_i over n values (NaN counts as infinite);
 * *at gets the first index past tol. */
static double worst_err(const float *got, const float *want, const float *scale, double unit, size_t n, double tol,
                        long *at) {
    double worst = 0;
    *at = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double e = got[i] == want[i] || (got[i] != got[i] && want[i] != want[i])   /* equal, or both NaN */
                       ? 0
                       : d / ((scale ? fabs(scale[i]) : 1.0) * unit + 1e-300);
        if (e != e) e = INFINITY;   /* one NaN, or inf - inf */
        if (e > worst) worst = e;
        if (e > tol && *at < 0) *at = (long)i;
    }
    return worst;
}

static uint16_t *bf16_table(gu_rng *r, size_t n) {
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = st_f32_to_bf16((float)gu_normal(r));
    return t;
}

static void embed_case(int B, int D, int n_q, int card, int text_card) {
    char name[96];
    snprintf(name, sizeof name, "embed_sum B=%d D=%d n_q=%d", B, D, n_q);
    if (!begin(name, 1, (double)B * D * n_q)) return;
    gu_rng r = {77};
    int ts = 1 + n_q;
    size_t na = (size_t)n_q * (card + 1) * D, nt = (size_t)(text_card + 1) * D;
    uint16_t *audio = bf16_table(&r, na), *text = bf16_table(&r, nt);
    int32_t *tok = malloc(sizeof(int32_t) * B * ts);
    for (int i = 0; i < B * ts; i++) tok[i] = gu_int(&r, -1, i % ts == 0 ? text_card : card);   /* -1 and the initial token too */
    float *want = calloc((size_t)B * D, sizeof *want), *got = malloc(sizeof(float) * B * D);
    for (int b = 0; b < B; b++) {   /* the twin: kern_embed_add, audio tables first, then text */
        for (int q = 0; q < n_q; q++) {
            kern_mat m = {audio + (size_t)q * (card + 1) * D, ST_BF16, card + 1, D, NULL};
            kern_embed_add(want + (size_t)b * D, &m, tok[b * ts + 1 + q]);
        }
        kern_mat m = {text, ST_BF16, text_card + 1, D, NULL};
        kern_embed_add(want + (size_t)b * D, &m, tok[b * ts]);
    }
    uint16_t *da = gu_dalloc(na * 2), *dt = gu_dalloc(nt * 2);
    int32_t *dtok = gu_dalloc(sizeof(int32_t) * B * ts);
    float *dx = gu_dalloc(sizeof(float) * B * D);
    gu_h2d(da, audio, na * 2);
    gu_h2d(dt, text, nt * 2);
    gu_h2d(dtok, tok, sizeof(int32_t) * B * ts);
    CU_CHECK_FATAL(cu_embed_sum(dx, dtok, ts, da, dt, B, D, n_q, card, text_card, 0));
    gu_sync();
    gu_d2h(got, dx, sizeof(float) * B * D);
    long at;
    double w = worst_err(got, want, NULL, 1.0, (size_t)B * D, 0.0, &at);
    if (at >= 0) result(0, name, "first mismatch at %ld: gpu %.9g twin %.9g", at, got[at], want[at]);
    else result(1, name, "exact (worst %.3g)", w);
    /* one token per row into a depformer-sized table */
    int rows = card + 1;
    for (int b = 0; b < B; b++) tok[b] = gu_int(&r, -1, rows - 1);
    memcpy(want, got, sizeof(float) * B * D);
    for (int b = 0; b < B; b++) {
        kern_mat m = {audio, ST_BF16, rows, D, NULL};
        kern_embed_add(want + (size_t)b * D, &m, tok[b]);
    }
    gu_h2d(dtok, tok, sizeof(int32_t) * B);
    snprintf(name, sizeof name, "embed_add_rows B=%d D=%d", B, D);
    if (begin(name, 1, (double)B * D)) {
        CU_CHECK_FATAL(cu_embed_add_rows(dx, dtok, da, B, D, rows, 0));
        gu_sync();
        gu_d2h(got, dx, sizeof(float) * B * D);
        w = worst_err(got, want, NULL, 1.0, (size_t)B * D, 0.0, &at);
        if (at >= 0) result(0, name, "first mismatch at %ld: gpu %.9g twin %.9g", at, got[at], want[at]);
        else result(1, name, "exact (worst %.3g)", w);
    }
    gu_dfree(da); gu_dfree(dt); gu_dfree(dtok); gu_dfree(dx);
    free(audio); free(text); free(tok); free(want); free(got);
}

static void rope_case(int B, int heads, int hd, const int64_t *pos) {
    char name[96];
    snprintf(name, sizeof name, "qkv_rope B=%d heads=%d head_dim=%d", B, heads, hd);
    if (!begin(name, 1, (double)B * heads * hd)) return;
    gu_rng r = {5};
    int D = heads * hd;
    size_t n = (size_t)B * 3 * D;
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *x), *got = malloc(n * sizeof *x);
    float *mag = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)gu_normal(&r);
    memcpy(want, x, n * sizeof *x);
    const float max_period = 10000.0f;
    for (int b = 0; b < B; b++) {   /* the twin: kern_rope on q, then on k */
        kern_rope(want + (size_t)b * 3 * D, heads, hd, pos[b], max_period);
        kern_rope(want + (size_t)b * 3 * D + D, heads, hd, pos[b], max_period);
    }
    for (size_t i = 0; i < n; i++) {   /* magnitude of a rotated pair: |re| + |im| */
        size_t pair = i & ~(size_t)1;
        mag[i] = fabsf(x[pair]) + fabsf(x[pair + 1]);
    }
    float rope_k = (float)(-log((double)max_period) * 2.0 / hd);   /* as kern_rope computes it */
    float *dx = gu_dalloc(n * sizeof *x);
    uint16_t *dkv = gu_dalloc(sizeof(uint16_t) * B * 2 * D), *kv = malloc(sizeof(uint16_t) * B * 2 * D);
    int64_t *dpos = gu_dalloc(sizeof(int64_t) * B);
    gu_h2d(dx, x, n * sizeof *x);
    gu_h2d(dpos, pos, sizeof(int64_t) * B);
    CU_CHECK_FATAL(cu_qkv_rope(dx, dkv, dpos, B, heads, hd, rope_k, 0));
    gu_sync();
    gu_d2h(got, dx, n * sizeof *x);
    gu_d2h(kv, dkv, sizeof(uint16_t) * B * 2 * D);
    /* the step's variant: the same rows straight to ring row pos % ctx of slot b (ctx 5: rows wrap) */
    const int ctx = 5;
    const size_t stride = (size_t)2 * ctx * D;
    int32_t slot[64];
    for (int b = 0; b < B; b++) slot[b] = b;
    uint16_t *dring = gu_dalloc(sizeof(uint16_t) * B * stride), *ring = malloc(sizeof(uint16_t) * B * stride);
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * B);
    float *got2 = malloc(n * sizeof *x);
    gu_h2d(dx, x, n * sizeof *x);
    gu_h2d(dslot, slot, sizeof(int32_t) * B);
    CU_CHECK_FATAL(cudaMemset(dring, 0, sizeof(uint16_t) * B * stride));
    CU_CHECK_FATAL(cu_qkv_rope_ring(dx, dring, stride, dslot, dpos, B, heads, hd, ctx, rope_k, 0));
    gu_sync();
    gu_d2h(got2, dx, n * sizeof *x);
    gu_d2h(ring, dring, sizeof(uint16_t) * B * stride);
    int ring_bad = memcmp(got, got2, n * sizeof *x) ? 0 : -1;
    for (int b = 0; b < B && ring_bad < 0; b++) {
        const uint16_t *k = ring + b * stride + (size_t)(pos[b] % ctx) * D;
        if (memcmp(k, kv + (size_t)b * 2 * D, sizeof(uint16_t) * D) ||
            memcmp(k + (size_t)ctx * D, kv + (size_t)b * 2 * D + D, sizeof(uint16_t) * D))
            ring_bad = b;
    }
    gu_dfree(dring); gu_dfree(dslot);
    free(ring); free(got2);
    long at;
    double w = worst_err(got, want, mag, ldexp(1.0, -24), n, 64.0, &at);
    int kv_bad = -1;
    for (int b = 0; b < B && kv_bad < 0; b++)
        for (int i = 0; i < 2 * D && kv_bad < 0; i++) {
            float ref = want[(size_t)b * 3 * D + D + i], g = st_bf16_to_f32(kv[(size_t)b * 2 * D + i]);
            if (!(fabsf(g - ref) <= ldexp(fabsf(ref), -8) + 1e-30f)) kv_bad = b * 2 * D + i;
        }
    if (at >= 0) result(0, name, "first mismatch at %ld: gpu %.9g twin %.9g (normalised %.3g)", at, got[at], want[at], w);
    else if (kv_bad >= 0) result(0, name, "packed K/V element %d is not bf16 of the rotated key/value", kv_bad);
    else if (ring_bad >= 0) result(0, name, "cu_qkv_rope_ring: row %d differs from cu_qkv_rope's", ring_bad);
    else result(1, name, "positions up to %lld: max normalised error %.3g (tolerance 64); K/V packed; the ring "
                "variant bit-identical, in place", (long long)pos[B - 1], w);
    gu_dfree(dx); gu_dfree(dkv); gu_dfree(dpos);
    free(x); free(want); free(got); free(mag); free(kv);
}

/* Attention of B rows over a ring of ctx rows per slot: rows are slots 0..B-1
 * at positions pos[b] (prefill 0), or one slot's consecutive positions
 * (prefill 1: slot 0, positions pos[0] + b). The ring holds positions
 * before each row's chunk start; kvl the chunk's own keys. */
static void attend_case(int B, int heads, int hd, int ctx, int window, int prefill, const int64_t *pos_in) {
    char name[128];
    snprintf(name, sizeof name, "attend_ring B=%d heads=%d hd=%d ctx=%d window=%d%s", B, heads, hd, ctx, window,
             prefill ? " prefill" : "");
    if (!begin(name, 1, (double)B * heads * hd * window)) return;
    gu_rng r = {11};
    int D = heads * hd, nslots = prefill ? 1 : B;
    size_t slot_stride = (size_t)2 * ctx * D;
    int64_t pos[64];
    int32_t slot[64];
    for (int b = 0; b < B; b++) {
        pos[b] = prefill ? pos_in[0] + b : pos_in[b];
        slot[b] = prefill ? 0 : b;
    }
    uint16_t *ring = bf16_table(&r, nslots * slot_stride), *kvl = bf16_table(&r, (size_t)B * 2 * D);
    float *q = malloc(sizeof(float) * B * 3 * D);
    for (int i = 0; i < B * 3 * D; i++) q[i] = (float)(0.5 * gu_normal(&r));
    /* the twin: kern_attend over the row's keys in position order, widened */
    float *want = malloc(sizeof(float) * B * D), *got = malloc(sizeof(float) * B * D);
    float *kf = malloc(sizeof(float) * window * D), *vf = malloc(sizeof(float) * window * D);
    float *scratch = malloc(sizeof(float) * window);
    float vmax = 0;
    for (int b = 0; b < B; b++) {
        int64_t p = pos[b], c0 = prefill ? pos[0] : p, lo = p + 1 > window ? p + 1 - window : 0;
        int nk = (int)(p - lo + 1);
        for (int j = 0; j < nk; j++) {
            int64_t x = lo + j;
            const uint16_t *kr = x < c0 ? ring + slot[b] * slot_stride + (size_t)(x % ctx) * D
                                        : kvl + (size_t)(b - (p - x)) * 2 * D;
            const uint16_t *vr = x < c0 ? kr + (size_t)ctx * D : kr + D;
            for (int d = 0; d < D; d++) {
                kf[(size_t)j * D + d] = st_bf16_to_f32(kr[d]);
                vf[(size_t)j * D + d] = st_bf16_to_f32(vr[d]);
                if (fabsf(vf[(size_t)j * D + d]) > vmax) vmax = fabsf(vf[(size_t)j * D + d]);
            }
        }
        kern_attend(want + (size_t)b * D, q + (size_t)b * 3 * D, kf, vf, scratch, nk, heads, hd, D);
    }
    int splits = cu_attend_splits(window);
    uint16_t *dring = gu_dalloc(nslots * slot_stride * 2), *dkvl = gu_dalloc(sizeof(uint16_t) * B * 2 * D);
    float *dq = gu_dalloc(sizeof(float) * B * 3 * D), *dout = gu_dalloc(sizeof(float) * B * D);
    float *dpart = gu_dalloc(sizeof(float) * B * heads * splits * CU_ATT_PART_FLOATS);
    unsigned *dcnt = gu_dalloc(sizeof(unsigned) * B * heads);
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * B);
    int64_t *dpos = gu_dalloc(sizeof(int64_t) * B);
    CU_CHECK_FATAL(cudaMemset(dcnt, 0, sizeof(unsigned) * B * heads));
    gu_h2d(dring, ring, nslots * slot_stride * 2);
    gu_h2d(dkvl, kvl, sizeof(uint16_t) * B * 2 * D);
    gu_h2d(dq, q, sizeof(float) * B * 3 * D);
    gu_h2d(dslot, slot, sizeof(int32_t) * B);
    gu_h2d(dpos, pos, sizeof(int64_t) * B);
    CU_CHECK_FATAL(cu_attend_ring(dout, dpart, dcnt, dq, 3 * D, dkvl, dring, slot_stride, dslot, dpos, B, heads, hd, ctx,
                                  window, prefill, 0));
    gu_sync();
    gu_d2h(got, dout, sizeof(float) * B * D);
    /* a step (prefill 0): the new rows in the ring (as cu_qkv_rope_ring leaves them), kvl NULL, twice in a row
     * (the output poisoned before each: a counter left non-zero leaves rows unwritten): the same bits */
    int step_bad = -1;
    if (!prefill) {
        for (int b = 0; b < B; b++) {
            uint16_t *k = ring + slot[b] * slot_stride + (size_t)(pos[b] % ctx) * D;
            memcpy(k, kvl + (size_t)b * 2 * D, sizeof(uint16_t) * D);
            memcpy(k + (size_t)ctx * D, kvl + (size_t)b * 2 * D + D, sizeof(uint16_t) * D);
        }
        gu_h2d(dring, ring, nslots * slot_stride * 2);
        float *got2 = malloc(sizeof(float) * B * D);
        for (int run = 0; run < 2 && step_bad < 0; run++) {
            CU_CHECK_FATAL(cudaMemset(dout, 0xff, sizeof(float) * B * D));
            CU_CHECK_FATAL(cu_attend_ring(dout, dpart, dcnt, dq, 3 * D, NULL, dring, slot_stride, dslot, dpos, B, heads,
                                          hd, ctx, window, 0, 0));
            gu_sync();
            gu_d2h(got2, dout, sizeof(float) * B * D);
            for (int i = 0; i < B * D && step_bad < 0; i++)
                if (memcmp(&got2[i], &got[i], sizeof got[i])) step_bad = run * B * D + i;
        }
        free(got2);
    }
    long at;
    double w = worst_err(got, want, NULL, vmax, (size_t)B * D, 1e-5, &at);
    if (at >= 0) result(0, name, "first mismatch at (b=%ld, d=%ld): gpu %.9g twin %.9g", at / D, at % D, got[at], want[at]);
    else if (step_bad >= 0)
        result(0, name, "keys from the ring (kvl NULL), launch %d: element %d differs from the kvl launch's",
               step_bad / (B * D) + 1, step_bad % (B * D));
    else result(1, name, "%d split(s), max error %.3g of max|v| (tolerance 1e-5)%s", splits, w,
                prefill ? "" : "; keys from the ring (kvl NULL): bit-identical, 2 launches in a row");
    gu_dfree(dring); gu_dfree(dkvl); gu_dfree(dq); gu_dfree(dout); gu_dfree(dpart); gu_dfree(dcnt); gu_dfree(dslot);
    gu_dfree(dpos);
    free(ring); free(kvl); free(q); free(want); free(got); free(kf); free(vf); free(scratch);
}

/* The depformer's attention over sub-steps 0..K-1 of B rows, one call per
 * sub-step as the step does: each output against kern_attend on the
 * sub-steps max(0, k - window + 1)..k. */
static void dep_attend_case(int B, int heads, int hd, int K, int window) {
    char name[96];
    snprintf(name, sizeof name, "dep_attend B=%d heads=%d hd=%d steps=%d window=%d", B, heads, hd, K, window);
    if (!begin(name, 1, (double)B * heads * hd * K * K)) return;
    gu_rng r = {13};
    int D = heads * hd;
    size_t stride = (size_t)LM_MAX_DEP_Q * D;
    float *qkv = malloc(sizeof(float) * K * B * 3 * D), *got = malloc(sizeof(float) * B * D),
          *want = malloc(sizeof(float) * B * D);
    for (size_t i = 0; i < (size_t)K * B * 3 * D; i++) qkv[i] = (float)gu_normal(&r);
    float *kc = malloc(sizeof(float) * B * stride), *vc = malloc(sizeof(float) * B * stride), scratch[LM_MAX_DEP_Q];
    float *dqkv = gu_dalloc(sizeof(float) * B * 3 * D), *dout = gu_dalloc(sizeof(float) * B * D);
    float *dk = gu_dalloc(sizeof(float) * B * stride), *dv = gu_dalloc(sizeof(float) * B * stride);
    double worst = 0;
    long at = -1;
    int bad_k = -1;
    for (int k = 0; k < K && bad_k < 0; k++) {
        const float *x = qkv + (size_t)k * B * 3 * D;
        for (int b = 0; b < B; b++) {
            memcpy(kc + b * stride + (size_t)k * D, x + (size_t)b * 3 * D + D, sizeof(float) * D);
            memcpy(vc + b * stride + (size_t)k * D, x + (size_t)b * 3 * D + 2 * D, sizeof(float) * D);
            int lo = k + 1 > window ? k + 1 - window : 0;
            kern_attend(want + (size_t)b * D, x + (size_t)b * 3 * D, kc + b * stride + (size_t)lo * D,
                        vc + b * stride + (size_t)lo * D, scratch, k + 1 - lo, heads, hd, D);
        }
        gu_h2d(dqkv, x, sizeof(float) * B * 3 * D);
        CU_CHECK_FATAL(cu_dep_attend(dout, dqkv, dk, dv, stride, k, window, B, heads, hd, 0));
        gu_sync();
        gu_d2h(got, dout, sizeof(float) * B * D);
        double w = worst_err(got, want, NULL, 4.0, (size_t)B * D, 1e-5, &at);   /* |v| <= ~4 */
        if (w > worst) worst = w;
        if (at >= 0) bad_k = k;
    }
    if (bad_k >= 0) result(0, name, "sub-step %d, element %ld: gpu %.9g twin %.9g", bad_k, at, got[at], want[at]);
    else result(1, name, "max error %.3g of 4 (tolerance 1e-5)", worst);
    gu_dfree(dqkv); gu_dfree(dout); gu_dfree(dk); gu_dfree(dv);
    free(qkv); free(got); free(want); free(kc); free(vc);
}

static void elementwise_case(int B, int H) {
    char name[96];
    snprintf(name, sizeof name, "silu_gate+add+bf16 B=%d H=%d", B, H);
    if (!begin(name, 1, (double)B * H)) return;
    gu_rng r = {17};
    size_t n = (size_t)B * H;
    float *u = malloc(sizeof(float) * 2 * n), *h = malloc(sizeof(float) * n), *hr = malloc(sizeof(float) * n),
          *mag = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *yr = malloc(sizeof(float) * n);
    for (size_t i = 0; i < 2 * n; i++) u[i] = (float)(3.0 * gu_normal(&r));
    u[0] = NAN;
    u[1] = INFINITY;
    u[2] = 1.00390625f;   /* bf16 tie: 1 + 2^-8, rounds to even (1.0) */
    u[3] = -3.3895314e38f; /* rounds to -inf in bf16 */
    for (int b = 0; b < B; b++) {
        kern_silu_gate(hr + (size_t)b * H, u + (size_t)b * 2 * H, H);
        for (int i = 0; i < H; i++) {
            const float *ub = u + (size_t)b * 2 * H;
            mag[(size_t)b * H + i] = fabsf(ub[i] * ub[H + i]) + 1e-30f;
        }
    }
    for (size_t i = 0; i < n; i++) {
        y[i] = u[i];
        yr[i] = u[i] + u[n + i];   /* kern_add's */
    }
    float *du = gu_dalloc(sizeof(float) * 2 * n), *dh = gu_dalloc(sizeof(float) * n);
    uint16_t *db = gu_dalloc(sizeof(uint16_t) * 2 * n), *bb = malloc(sizeof(uint16_t) * 2 * n);
    gu_h2d(du, u, sizeof(float) * 2 * n);
    CU_CHECK_FATAL(cu_silu_gate(dh, du, B, H, 0));
    CU_CHECK_FATAL(cu_f32_to_bf16(db, du, 2 * n, 0));
    gu_sync();
    gu_d2h(h, dh, sizeof(float) * n);
    gu_d2h(bb, db, sizeof(uint16_t) * 2 * n);
    CU_CHECK_FATAL(cu_add(du, du + n, n, 0));
    gu_sync();
    gu_d2h(y, du, sizeof(float) * n);
    long at, at2;
    double w = worst_err(h, hr, mag, ldexp(1.0, -24), n, 64.0, &at);
    worst_err(y, yr, NULL, 1.0, n, 0.0, &at2);
    long bad_b = -1;
    for (size_t i = 0; i < 2 * n && bad_b < 0; i++)
        if (bb[i] != st_f32_to_bf16(u[i])) bad_b = (long)i;
    if (at >= 0) result(0, name, "silu_gate at %ld: gpu %.9g twin %.9g", at, h[at], hr[at]);
    else if (at2 >= 0) result(0, name, "add at %ld: gpu %.9g twin %.9g", at2, y[at2], yr[at2]);
    else if (bad_b >= 0) result(0, name, "bf16 of %.9g: gpu 0x%04x, st_f32_to_bf16 0x%04x", u[bad_b], bb[bad_b], st_f32_to_bf16(u[bad_b]));
    else result(1, name, "silu max normalised error %.3g (tolerance 64); add and bf16 rounding exact", w);
    gu_dfree(du); gu_dfree(dh); gu_dfree(db);
    free(u); free(h); free(hr); free(mag); free(y); free(yr); free(bb);
}

/* The gated FFN's fusions against the two launches they replace, bit for
 * bit: cu_matvec_bf16_gated = cu_silu_gate then cu_matvec_bf16 (batch tiles
 * 1, 4 and 8, an odd N), cu_silu_gate_bf16 = cu_silu_gate then
 * cu_f32_to_bf16. */
static void gated_case(int B, int N, int K) {
    char name[96];
    snprintf(name, sizeof name, "matvec_bf16_gated B=%d N=%d K=%d (+ silu_gate_bf16)", B, N, K);
    if (!begin(name, 1, (double)B * N * K)) return;
    gu_rng r = {40 + (uint64_t)B};
    size_t nu = (size_t)B * 2 * K;
    float *u = malloc(nu * sizeof *u), *y1 = malloc((size_t)B * N * sizeof *y1), *y2 = malloc((size_t)B * N * sizeof *y2);
    uint16_t *hb1 = malloc((size_t)B * K * 2), *hb2 = malloc((size_t)B * K * 2);
    for (size_t i = 0; i < nu; i++) u[i] = (float)(2.0 * gu_normal(&r));
    uint16_t *w = bf16_table(&r, (size_t)N * K);
    float *du = gu_dalloc(nu * 4), *dh = gu_dalloc((size_t)B * K * 4), *dy1 = gu_dalloc((size_t)B * N * 4),
          *dy2 = gu_dalloc((size_t)B * N * 4);
    uint16_t *dw = gu_dalloc((size_t)N * K * 2), *dhb1 = gu_dalloc((size_t)B * K * 2), *dhb2 = gu_dalloc((size_t)B * K * 2);
    gu_h2d(du, u, nu * 4);
    gu_h2d(dw, w, (size_t)N * K * 2);
    CU_CHECK_FATAL(cu_silu_gate(dh, du, B, K, 0));
    CU_CHECK_FATAL(cu_matvec_bf16(dy1, dh, dw, B, N, K, 0));
    CU_CHECK_FATAL(cu_f32_to_bf16(dhb1, dh, (size_t)B * K, 0));
    CU_CHECK_FATAL(cu_matvec_bf16_gated(dy2, du, dw, B, N, K, 0));
    CU_CHECK_FATAL(cu_silu_gate_bf16(dhb2, du, B, K, 0));
    gu_sync();
    gu_d2h(y1, dy1, (size_t)B * N * 4);
    gu_d2h(y2, dy2, (size_t)B * N * 4);
    gu_d2h(hb1, dhb1, (size_t)B * K * 2);
    gu_d2h(hb2, dhb2, (size_t)B * K * 2);
    long bad = -1, badh = -1;
    for (long i = 0; i < (long)B * N && bad < 0; i++)
        if (memcmp(&y1[i], &y2[i], 4)) bad = i;
    for (long i = 0; i < (long)B * K && badh < 0; i++)
        if (hb1[i] != hb2[i]) badh = i;
    if (bad >= 0) result(0, name, "y differs at (b=%ld, n=%ld): gated %.9g, two launches %.9g", bad / N, bad % N, y2[bad], y1[bad]);
    else if (badh >= 0) result(0, name, "bf16 gate differs at %ld: 0x%04x vs 0x%04x", badh, hb2[badh], hb1[badh]);
    else result(1, name, "bit for bit the two launches (y and the bf16 gate)");
    gu_dfree(du); gu_dfree(dh); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dw); gu_dfree(dhb1); gu_dfree(dhb2);
    free(u); free(y1); free(y2); free(hb1); free(hb2); free(w);
}

static void test_lm_kernels(void) {
    embed_case(3, 40, 4, 10, 12);
    embed_case(2, 4096, 3, 300, 500);      /* the 7B's width, strided over 128 threads */
    const int64_t p3[3] = {0, 7, 2999}, p4[4] = {1, 100, 100000, 1 << 30};
    rope_case(3, 4, 16, p3);
    rope_case(4, 32, 128, p4);
    const int64_t a1[3] = {0, 5, 39}, a2[3] = {44, 87, 40}, a3[2] = {550, 3100};
    attend_case(3, 2, 32, 40, 40, 0, a1);      /* ring not yet full, full */
    attend_case(3, 2, 32, 40, 39, 0, a2);      /* past the wrap, PersonaPlex's window */
    attend_case(2, 4, 128, 3000, 3000, 0, a3); /* the 7B's ring: 12 splits, one past its wrap */
    /* the load shapes of attend_split_kernel (a segment of lanes per key row) */
    const int64_t a4[3] = {299, 10, 400};
    attend_case(3, 2, 8, 300, 300, 0, a4);     /* one 16-byte chunk a row: 32 rows a warp load, 2 splits */
    attend_case(3, 3, 24, 40, 39, 0, a2);      /* 3 chunks a row in segments of 4 lanes */
    attend_case(3, 2, 12, 40, 40, 0, a1);      /* head_dim % 8 != 0: 2-byte loads */
    attend_case(2, 1, 256, 40, 40, 0, a1);     /* the largest head_dim: a warp a row */
    const int64_t s1[1] = {30}, s2[1] = {0};
    attend_case(5, 2, 16, 32, 32, 1, s1);      /* a prefill chunk across the wrap: ring + chunk keys */
    attend_case(6, 2, 16, 8, 7, 1, s2);        /* a first chunk, window < chunk */
    dep_attend_case(3, 2, 8, 8, 8);
    dep_attend_case(2, 4, 16, 16, 15);         /* PersonaPlex's dep_window */
    elementwise_case(3, 300);
    gated_case(1, 65, 1024);
    gated_case(3, 64, 512);
    gated_case(8, 33, 256);
}

static void dep_att_cases(void);   /* the depformer attention in the out-projection, below */

/* ---- the 8-bit schemes (cu_matvec.cu's int8 rows, cu_lm.cu's int8 K/V) ---- */

static int8_t *i8_table(gu_rng *r, size_t n) {
    int8_t *t = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) t[i] = (int8_t)gu_int(r, -127, 127);
    return t;
}
static float *scale_table(gu_rng *r, size_t n) {
    float *t = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) t[i] = (float)(0.001 + 0.01 * fabs(gu_normal(r)));
    return t;
}

/* cu_matvec_q8 (or, gated, cu_matvec_q8_gated) against kern_matmul_rows_i8
 * (after kern_silu_gate): the error of each output normalised by its sum
 * of |q x| s and 2^-24, as matvec_case. woff: W starts this many bytes in
 * (not a multiple of 4: the scalar path). */
static void matvec_q8_case(int B, int N, int K, int xoff, int woff, int gated) {
    char name[96];
    snprintf(name, sizeof name, "matvec_q8%s B=%d N=%d K=%d%s", gated ? "_gated" : "", B, N, K,
             xoff || woff ? " misaligned" : "");
    if (!begin(name, 1, (double)B * N * K)) return;
    gu_rng r = {300 + (uint64_t)N};
    size_t kx = gated ? 2 * (size_t)K : (size_t)K, nx = (size_t)B * kx + xoff, ny = (size_t)B * N;
    float *x = malloc(nx * 4), *h = malloc((size_t)B * K * 4), *y = malloc(ny * 4), *yr = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = (float)gu_normal(&r);
    int8_t *w = i8_table(&r, (size_t)N * K + woff);
    float *ws = scale_table(&r, N);
    const float *xin = x + xoff;
    if (gated)
        for (int b = 0; b < B; b++) kern_silu_gate(h + (size_t)b * K, xin + (size_t)b * 2 * K, K);
    kern_mat m = {.w = w + woff, .dtype = ST_I8, .rows = N, .cols = K, .scale = ws};
    kern_matmul_rows_i8(yr, gated ? h : xin, &m, B, 0, N);   /* the twin */
    float *dx = gu_dalloc(nx * 4), *dy = gu_dalloc(ny * 4), *dws = gu_dalloc((size_t)N * 4);
    int8_t *dw = gu_dalloc((size_t)N * K + woff);
    gu_h2d(dx, x, nx * 4);
    gu_h2d(dw, w, (size_t)N * K + woff);
    gu_h2d(dws, ws, (size_t)N * 4);
    CU_CHECK_FATAL(cudaMemset(dy, 0xFF, ny * 4));
    if (gated) CU_CHECK_FATAL(cu_matvec_q8_gated(dy, dx + xoff, dw + woff, dws, B, N, K, 0));
    else CU_CHECK_FATAL(cu_matvec_q8(dy, dx + xoff, dw + woff, dws, B, N, K, 0));
    gu_sync();
    gu_d2h(y, dy, ny * 4);
    const char *ran = emu_last_kernel ? emu_last_kernel() : "";
    int vec = cu_matvec_q8_ok(dx + xoff, dw + woff, K);
    int path_ok = !emu_last_kernel || !strncmp(ran, vec ? (gated ? "matvec_q8_gated" : "matvec_q8_vec") : "matvec_scalar<true>",
                                               vec ? 13 : 19);
    double worst = 0, tol = 2.0 * sqrt((double)K) + 8.0;
    long bad = -1;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)b * N + n;
            double sa = 0;
            const float *xr = gated ? h + (size_t)b * K : xin + (size_t)b * K;
            for (int k = 0; k < K; k++) sa += fabs((double)xr[k] * w[woff + (size_t)n * K + k]);
            double e = fabs((double)y[i] - yr[i]) / (sa * ws[n] * ldexp(1.0, -24) + 1e-300);
            if (!(e <= tol)) e = INFINITY;
            if (e > worst) worst = e;
            if (e > tol && bad < 0) bad = (long)i;
        }
    if (bad >= 0) result(0, name, "first mismatch at (b=%ld, n=%ld): gpu %.9g twin %.9g", bad / N, bad % N, y[bad], yr[bad]);
    else if (!path_ok) result(0, name, "ran %s, expected the %s path", ran, vec ? "vector" : "scalar");
    else result(1, name, "%s, max normalised error %.3g (tolerance %.3g)", emu_last_kernel ? ran : "", worst, tol);
    gu_dfree(dx); gu_dfree(dy); gu_dfree(dws); gu_dfree(dw);
    free(x); free(h); free(y); free(yr); free(w); free(ws);
}

/* The large-batch path's pieces: cu_q8_to_bf16 exact, cu_scale_cols exact
 * (one multiplication per element). */
static void q8_widen_case(void) {
    const char *name = "q8_to_bf16 + scale_cols";
    if (!begin(name, 1, 1e4)) return;
    gu_rng r = {77};
    const int N = 96, K = 52, B = 3;
    int8_t *w = i8_table(&r, (size_t)N * K);
    w[0] = 127; w[1] = -127; w[2] = 0; w[3] = -1;
    float *ws = scale_table(&r, N), *y = malloc(sizeof(float) * B * N), *yr = malloc(sizeof(float) * B * N);
    for (int i = 0; i < B * N; i++) y[i] = (float)gu_normal(&r);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) yr[b * N + n] = y[b * N + n] * ws[n];
    int8_t *dw = gu_dalloc((size_t)N * K);
    uint16_t *db = gu_dalloc((size_t)N * K * 2), *wb = malloc((size_t)N * K * 2);
    float *dy = gu_dalloc(sizeof(float) * B * N), *dws = gu_dalloc(sizeof(float) * N);
    gu_h2d(dw, w, (size_t)N * K);
    gu_h2d(dy, y, sizeof(float) * B * N);
    gu_h2d(dws, ws, sizeof(float) * N);
    CU_CHECK_FATAL(cu_q8_to_bf16(db, dw, (size_t)N * K, 0));
    CU_CHECK_FATAL(cu_scale_cols(dy, dws, B, N, N, 0));
    gu_sync();
    gu_d2h(wb, db, (size_t)N * K * 2);
    gu_d2h(y, dy, sizeof(float) * B * N);
    long bw = -1, by = -1;
    for (long i = 0; i < (long)N * K && bw < 0; i++)
        if (st_bf16_to_f32(wb[i]) != (float)w[i]) bw = i;
    for (long i = 0; i < (long)B * N && by < 0; i++)
        if (memcmp(&y[i], &yr[i], 4)) by = i;
    if (bw >= 0) result(0, name, "bf16 of %d at %ld is %g", w[bw], bw, st_bf16_to_f32(wb[bw]));
    else if (by >= 0) result(0, name, "scaled column at %ld: %.9g, want %.9g", by, y[by], yr[by]);
    else result(1, name, "%d int8 exact in bf16, %d products exact", N * K, B * N);
    gu_dfree(dw); gu_dfree(db); gu_dfree(dy); gu_dfree(dws);
    free(w); free(ws); free(y); free(yr); free(wb);
}

/* cu_qkv_rope_q8 against kern_rope then kern_q8_quantize_heads: values
 * (not rotated) bit for bit; keys: their rotation may differ from the
 * twin's by float rounding (cosf, sinf), so a quantized key may sit one
 * step away where x / s falls within that rounding of a .5 (counted, at
 * most 1 % of them) and a scale within 1e-6 relative. */
static void rope_q8_case(int B, int heads, int hd, const int64_t *pos) {
    char name[96];
    snprintf(name, sizeof name, "qkv_rope_q8 B=%d heads=%d head_dim=%d", B, heads, hd);
    if (!begin(name, 1, (double)B * heads * hd)) return;
    gu_rng r = {7};
    int D = heads * hd;
    size_t n = (size_t)B * 3 * D;
    float *x = malloc(n * 4), *want = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = (float)gu_normal(&r);
    for (int i = 0; i < hd; i++) x[2 * D + i] = 0.0f;   /* row 0's first value head all zero: scale 1 */
    memcpy(want, x, n * 4);
    int8_t *q8 = malloc((size_t)B * 2 * D), *g8 = malloc((size_t)B * 2 * D);
    float *qs = malloc(sizeof(float) * B * 2 * heads), *gs = malloc(sizeof(float) * B * 2 * heads);
    const float max_period = 10000.0f;
    for (int b = 0; b < B; b++) {
        float *row = want + (size_t)b * 3 * D;
        kern_rope(row, heads, hd, pos[b], max_period);
        kern_rope(row + D, heads, hd, pos[b], max_period);
        kern_q8_quantize_heads(q8 + (size_t)b * 2 * D, qs + (size_t)b * 2 * heads, row + D, heads, hd);
        kern_q8_quantize_heads(q8 + (size_t)b * 2 * D + D, qs + (size_t)b * 2 * heads + heads, row + 2 * D, heads, hd);
    }
    float rope_k = (float)(-log((double)max_period) * 2.0 / hd);
    float *dx = gu_dalloc(n * 4), *ds = gu_dalloc(sizeof(float) * B * 2 * heads);
    int8_t *d8 = gu_dalloc((size_t)B * 2 * D);
    int64_t *dpos = gu_dalloc(sizeof(int64_t) * B);
    gu_h2d(dx, x, n * 4);
    gu_h2d(dpos, pos, sizeof(int64_t) * B);
    CU_CHECK_FATAL(cu_qkv_rope_q8(dx, d8, ds, dpos, B, heads, hd, rope_k, 0));
    gu_sync();
    gu_d2h(g8, d8, (size_t)B * 2 * D);
    gu_d2h(gs, ds, sizeof(float) * B * 2 * heads);
    /* the step's variant: straight to the ring (ctx 5: rows wrap), where cu_kv_store_q8 would put them */
    const int ctx = 5;
    const size_t lb = cu_kv_q8_layer_bytes(ctx, D, heads);
    int32_t slot[64];
    for (int b = 0; b < B; b++) slot[b] = b;
    unsigned char *ring = malloc(B * lb), *dring = gu_dalloc(B * lb);
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * B);
    gu_h2d(dx, x, n * 4);
    gu_h2d(dslot, slot, sizeof(int32_t) * B);
    CU_CHECK_FATAL(cudaMemset(dring, 0, B * lb));
    CU_CHECK_FATAL(cu_qkv_rope_ring_q8(dx, (int8_t *)dring, lb, dslot, dpos, B, heads, hd, ctx, rope_k, 0));
    gu_sync();
    gu_d2h(ring, dring, B * lb);
    int ring_bad = -1;
    for (int b = 0; b < B && ring_bad < 0; b++) {
        const unsigned char *rb = ring + b * lb;
        const size_t row = (size_t)(pos[b] % ctx);
        const float *rs = (const float *)(rb + (size_t)2 * ctx * D);
        if (memcmp(rb + row * D, g8 + (size_t)b * 2 * D, D) || memcmp(rb + (ctx + row) * D, g8 + (size_t)b * 2 * D + D, D))
            ring_bad = b;
        for (int i = 0; i < 2 * heads; i++)
            if (memcmp(&rs[(size_t)i * ctx + row], &gs[(size_t)b * 2 * heads + i], sizeof(float))) ring_bad = b;
    }
    gu_dfree(dring); gu_dfree(dslot);
    free(ring);
    long kstep = 0, bad = -1;
    double sworst = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2 * D; i++) {
            size_t j = (size_t)b * 2 * D + i;
            int d = abs(g8[j] - q8[j]);
            if (i >= D ? d != 0 : d > 1) bad = bad < 0 ? (long)j : bad;
            kstep += d != 0;
        }
    for (int i = 0; i < B * 2 * heads; i++) {
        double e = fabs((double)gs[i] - qs[i]) / qs[i];
        if ((i / heads) % 2 ? gs[i] != qs[i] : e > 1e-6) bad = bad < 0 ? 0 : bad;
        if (e > sworst) sworst = e;
    }
    int zero_ok = gs[heads] == 1.0f && qs[heads] == 1.0f;
    if (bad >= 0 || kstep > B * D / 100 || !zero_ok)
        result(0, name, "int8 K/V differs: first at %ld, %ld keys a step off, scale err %.3g%s", bad, kstep, sworst,
               zero_ok ? "" : ", zero head's scale not 1");
    else if (ring_bad >= 0) result(0, name, "cu_qkv_rope_ring_q8: row %d differs from cu_qkv_rope_q8's", ring_bad);
    else result(1, name, "values exact, %ld of %d keys a step off, scale err %.3g; the ring variant bit-identical",
                kstep, B * D, sworst);
    gu_dfree(dx); gu_dfree(ds); gu_dfree(d8); gu_dfree(dpos);
    free(x); free(want); free(q8); free(g8); free(qs); free(gs);
}

/* cu_attend_ring_q8 against kern_attend_ring_q8 (the row's keys gathered in
 * position order), the ring in cu_kv_q8_layer_bytes' layout; then
 * cu_kv_store_q8 writes the chunk's rows where the ring reads them. */
static void attend_q8_case(int B, int heads, int hd, int ctx, int window, int prefill, const int64_t *pos_in) {
    char name[128];
    snprintf(name, sizeof name, "attend_ring_q8 B=%d heads=%d hd=%d ctx=%d window=%d%s", B, heads, hd, ctx, window,
             prefill ? " prefill" : "");
    if (!begin(name, 1, (double)B * heads * hd * window)) return;
    gu_rng r = {23};
    int D = heads * hd, nslots = prefill ? 1 : B;
    size_t lb = cu_kv_q8_layer_bytes(ctx, D, heads);
    int64_t pos[64];
    int32_t slot[64];
    for (int b = 0; b < B; b++) {
        pos[b] = prefill ? pos_in[0] + b : pos_in[b];
        slot[b] = prefill ? 0 : b;
    }
    unsigned char *ring = malloc(nslots * lb);
    for (int s = 0; s < nslots; s++) {
        int8_t *kv = i8_table(&r, (size_t)2 * ctx * D);
        float *sc = scale_table(&r, (size_t)2 * heads * ctx);
        memset(ring + s * lb, 0, lb);
        memcpy(ring + s * lb, kv, (size_t)2 * ctx * D);
        memcpy(ring + s * lb + (size_t)2 * ctx * D, sc, sizeof(float) * 2 * heads * ctx);
        free(kv);
        free(sc);
    }
    int8_t *kvl = i8_table(&r, (size_t)B * 2 * D);
    float *kvs = scale_table(&r, (size_t)B * 2 * heads);
    float *q = malloc(sizeof(float) * B * 3 * D);
    for (int i = 0; i < B * 3 * D; i++) q[i] = (float)(0.5 * gu_normal(&r));
    float *want = malloc(sizeof(float) * B * D), *got = malloc(sizeof(float) * B * D);
    int8_t *kk = malloc((size_t)window * D), *vv = malloc((size_t)window * D);
    float *ks = malloc(sizeof(float) * window * heads), *vs = malloc(sizeof(float) * window * heads);
    float *scratch = malloc(sizeof(float) * window);
    for (int b = 0; b < B; b++) {
        int64_t p = pos[b], c0 = prefill ? pos[0] : p, lo = p + 1 > window ? p + 1 - window : 0;
        int nk = (int)(p - lo + 1);
        const unsigned char *rb = ring + slot[b] * lb;
        const float *rs = (const float *)(rb + (size_t)2 * ctx * D);
        for (int j = 0; j < nk; j++) {
            int64_t x = lo + j;
            for (int h = 0; h < heads; h++) {
                if (x < c0) {
                    ks[j * heads + h] = rs[(size_t)h * ctx + x % ctx];
                    vs[j * heads + h] = rs[(size_t)(heads + h) * ctx + x % ctx];
                } else {
                    ks[j * heads + h] = kvs[(size_t)(b - (p - x)) * 2 * heads + h];
                    vs[j * heads + h] = kvs[(size_t)(b - (p - x)) * 2 * heads + heads + h];
                }
            }
            const int8_t *kr = x < c0 ? (const int8_t *)rb + (size_t)(x % ctx) * D : kvl + (size_t)(b - (p - x)) * 2 * D;
            const int8_t *vr = x < c0 ? kr + (size_t)ctx * D : kr + D;
            memcpy(kk + (size_t)j * D, kr, D);
            memcpy(vv + (size_t)j * D, vr, D);
        }
        kern_attend_ring_q8(want + (size_t)b * D, q + (size_t)b * 3 * D, kk, ks, vv, vs, scratch, nk, 0, nk, heads, hd,
                            D, heads);
    }
    int splits = cu_attend_splits(window);
    unsigned char *dring = gu_dalloc(nslots * lb);
    int8_t *dkvl = gu_dalloc((size_t)B * 2 * D);
    float *dkvs = gu_dalloc(sizeof(float) * B * 2 * heads);
    float *dq = gu_dalloc(sizeof(float) * B * 3 * D), *dout = gu_dalloc(sizeof(float) * B * D);
    float *dpart = gu_dalloc(sizeof(float) * B * heads * splits * CU_ATT_PART_FLOATS);
    unsigned *dcnt = gu_dalloc(sizeof(unsigned) * B * heads);
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * B);
    int64_t *dpos = gu_dalloc(sizeof(int64_t) * B);
    CU_CHECK_FATAL(cudaMemset(dcnt, 0, sizeof(unsigned) * B * heads));
    gu_h2d(dring, ring, nslots * lb);
    gu_h2d(dkvl, kvl, (size_t)B * 2 * D);
    gu_h2d(dkvs, kvs, sizeof(float) * B * 2 * heads);
    gu_h2d(dq, q, sizeof(float) * B * 3 * D);
    gu_h2d(dslot, slot, sizeof(int32_t) * B);
    gu_h2d(dpos, pos, sizeof(int64_t) * B);
    CU_CHECK_FATAL(cu_attend_ring_q8(dout, dpart, dcnt, dq, 3 * D, dkvl, dkvs, (int8_t *)dring, lb, dslot, dpos, B,
                                     heads, hd, ctx, window, prefill, 0));
    CU_CHECK_FATAL(cu_kv_store_q8((int8_t *)dring, lb, dkvl, dkvs, dslot, dpos, B, D, heads, ctx, 0));
    gu_sync();
    gu_d2h(got, dout, sizeof(float) * B * D);
    unsigned char *after = malloc(nslots * lb);
    gu_d2h(after, dring, nslots * lb);
    /* a step (prefill 0): the ring now holds the new rows (the store above), kvl NULL, twice in a row (the
     * output poisoned before each): the same bits as the kvl launch */
    int step_bad = -1;
    if (!prefill) {
        float *got2 = malloc(sizeof(float) * B * D);
        for (int run = 0; run < 2 && step_bad < 0; run++) {
            CU_CHECK_FATAL(cudaMemset(dout, 0xff, sizeof(float) * B * D));
            CU_CHECK_FATAL(cu_attend_ring_q8(dout, dpart, dcnt, dq, 3 * D, NULL, NULL, (int8_t *)dring, lb, dslot, dpos,
                                             B, heads, hd, ctx, window, 0, 0));
            gu_sync();
            gu_d2h(got2, dout, sizeof(float) * B * D);
            for (int i = 0; i < B * D && step_bad < 0; i++)
                if (memcmp(&got2[i], &got[i], sizeof got[i])) step_bad = run * B * D + i;
        }
        free(got2);
    }
    long store_bad = -1;
    for (int b = 0; b < B && store_bad < 0; b++) {
        const unsigned char *rb = after + slot[b] * lb;
        size_t row = (size_t)(pos[b] % ctx);
        if (memcmp(rb + row * D, kvl + (size_t)b * 2 * D, D) || memcmp(rb + (ctx + row) * D, kvl + (size_t)b * 2 * D + D, D))
            store_bad = b;
        const float *rs = (const float *)(rb + (size_t)2 * ctx * D);
        for (int i = 0; i < 2 * heads; i++)
            if (rs[(size_t)i * ctx + row] != kvs[(size_t)b * 2 * heads + i]) store_bad = b;
    }
    float vmax = 127.0f * 0.05f;
    long at;
    double w = worst_err(got, want, NULL, vmax, (size_t)B * D, 1e-5, &at);
    if (at >= 0) result(0, name, "first mismatch at (b=%ld, d=%ld): gpu %.9g twin %.9g", at / D, at % D, got[at], want[at]);
    else if (store_bad >= 0) result(0, name, "kv_store_q8: row %ld not where the ring reads it", store_bad);
    else if (step_bad >= 0)
        result(0, name, "keys from the ring (kvl NULL), launch %d: element %d differs from the kvl launch's",
               step_bad / (B * D) + 1, step_bad % (B * D));
    else result(1, name, "%d split(s), max error %.3g of %.2f (tolerance 1e-5); store placed%s", splits, w, vmax,
                prefill ? "" : "; keys from the ring (kvl NULL): bit-identical, 2 launches in a row");
    gu_dfree(dcnt);
    gu_dfree(dring); gu_dfree(dkvl); gu_dfree(dkvs); gu_dfree(dq); gu_dfree(dout); gu_dfree(dpart); gu_dfree(dslot);
    gu_dfree(dpos);
    free(ring); free(after); free(kvl); free(kvs); free(q); free(want); free(got); free(kk); free(vv); free(ks); free(vs);
    free(scratch);
}

/* cu_dep_attend_q8 against kern_q8_quantize_heads then kern_attend_ring_q8
 * over the sub-steps lo..k, one call per sub-step. */
static void dep_attend_q8_case(int B, int heads, int hd, int K, int window) {
    char name[96];
    snprintf(name, sizeof name, "dep_attend_q8 B=%d heads=%d hd=%d steps=%d window=%d", B, heads, hd, K, window);
    if (!begin(name, 1, (double)B * heads * hd * K * K)) return;
    gu_rng r = {29};
    int D = heads * hd;
    size_t stride = (size_t)LM_MAX_DEP_Q * D;   /* floats per row, as the backend's cache */
    float *qkv = malloc(sizeof(float) * K * B * 3 * D), *got = malloc(sizeof(float) * B * D),
          *want = malloc(sizeof(float) * B * D), scratch[LM_MAX_DEP_Q];
    for (size_t i = 0; i < (size_t)K * B * 3 * D; i++) qkv[i] = (float)gu_normal(&r);
    int8_t *k8 = malloc((size_t)B * stride), *v8 = malloc((size_t)B * stride);
    float *ks = malloc(sizeof(float) * B * LM_MAX_DEP_Q * heads), *vs = malloc(sizeof(float) * B * LM_MAX_DEP_Q * heads);
    float *dqkv = gu_dalloc(sizeof(float) * B * 3 * D), *dout = gu_dalloc(sizeof(float) * B * D);
    float *dk = gu_dalloc(sizeof(float) * B * stride), *dv = gu_dalloc(sizeof(float) * B * stride);
    double worst = 0;
    long at = -1;
    int bad_k = -1;
    for (int k = 0; k < K && bad_k < 0; k++) {
        const float *x = qkv + (size_t)k * B * 3 * D;
        for (int b = 0; b < B; b++) {
            int8_t *kb = k8 + b * stride, *vb = v8 + b * stride;
            float *ksb = ks + (size_t)b * LM_MAX_DEP_Q * heads, *vsb = vs + (size_t)b * LM_MAX_DEP_Q * heads;
            kern_q8_quantize_heads(kb + (size_t)k * D, ksb + (size_t)k * heads, x + (size_t)b * 3 * D + D, heads, hd);
            kern_q8_quantize_heads(vb + (size_t)k * D, vsb + (size_t)k * heads, x + (size_t)b * 3 * D + 2 * D, heads, hd);
            int lo = k + 1 > window ? k + 1 - window : 0, nk = k + 1 - lo;
            kern_attend_ring_q8(want + (size_t)b * D, x + (size_t)b * 3 * D, kb + (size_t)lo * D, ksb + (size_t)lo * heads,
                                vb + (size_t)lo * D, vsb + (size_t)lo * heads, scratch, nk, 0, nk, heads, hd, D, heads);
        }
        gu_h2d(dqkv, x, sizeof(float) * B * 3 * D);
        CU_CHECK_FATAL(cu_dep_attend_q8(dout, dqkv, dk, dv, stride, k, window, B, heads, hd, 0));
        gu_sync();
        gu_d2h(got, dout, sizeof(float) * B * D);
        double w = worst_err(got, want, NULL, 4.0, (size_t)B * D, 1e-5, &at);
        if (w > worst) worst = w;
        if (at >= 0) bad_k = k;
    }
    if (bad_k >= 0) result(0, name, "sub-step %d, element %ld: gpu %.9g twin %.9g", bad_k, at, got[at], want[at]);
    else result(1, name, "max error %.3g of 4 (tolerance 1e-5)", worst);
    gu_dfree(dqkv); gu_dfree(dout); gu_dfree(dk); gu_dfree(dv);
    free(qkv); free(got); free(want); free(k8); free(v8); free(ks); free(vs);
}

/* ---- the fused products (cu_fuse) ------------------------------------------------ */

/* A fused product against the launches it replaces, bit for bit (the
 * fusions promise the same floats: the norm's squares summed in
 * cu_rmsnorm's order, the same products, the add after the same rounding):
 *   norm (mode 1): cu_rmsnorm into a buffer, then the plain product;
 *   acc (mode 2): the plain product into a temporary, then cu_add onto y.
 * bf16 or int8 rows (q8), plain or gated (acc only); xoff: x (and the
 * normed buffer of the reference) this many floats off 16 bytes, so both
 * sides take the scalar path. On the emulator the kernel's name is checked
 * too, so a fusion that silently fell back would fail here. */
static void fused_case(int q8, int gated, int mode, int B, int N, int K, int xoff) {
    char name[112];
    snprintf(name, sizeof name, "fused_%s%s_%s B=%d N=%d K=%d%s", q8 ? "q8" : "bf16", gated ? "_gated" : "",
             mode == 1 ? "norm" : "acc", B, N, K, xoff ? " misaligned" : "");
    if (!begin(name, 1, 2.0 * B * N * K)) return;
    gu_rng r = {700 + (uint64_t)(B * 31 + N + K + mode + 2 * q8 + 4 * gated)};
    const float eps = 1e-8f;
    size_t kx = gated ? 2 * (size_t)K : (size_t)K, nx = (size_t)B * kx + xoff, ny = (size_t)B * N;
    float *x = malloc(nx * 4), *a = malloc((size_t)K * 4), *y0 = malloc(ny * 4), *y1 = malloc(ny * 4),
          *y2 = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = (float)(2.0 * gu_normal(&r));
    for (int k = 0; k < K; k++) a[k] = (float)(1.0 + 0.5 * gu_normal(&r));
    for (size_t i = 0; i < ny; i++) y0[i] = (float)gu_normal(&r);
    void *w = q8 ? (void *)i8_table(&r, (size_t)N * K) : (void *)bf16_table(&r, (size_t)N * K);
    float *ws = scale_table(&r, N);
    float *dx = gu_dalloc(nx * 4), *dxn = gu_dalloc(((size_t)B * K + xoff) * 4), *da = gu_dalloc((size_t)K * 4);
    float *dt = gu_dalloc(ny * 4), *dy1 = gu_dalloc(ny * 4), *dy2 = gu_dalloc(ny * 4), *dws = gu_dalloc((size_t)N * 4);
    void *dw = gu_dalloc((size_t)N * K * (q8 ? 1 : 2));
    gu_h2d(dx, x, nx * 4);
    gu_h2d(da, a, (size_t)K * 4);
    gu_h2d(dy1, y0, ny * 4);
    gu_h2d(dy2, y0, ny * 4);
    gu_h2d(dws, ws, (size_t)N * 4);
    gu_h2d(dw, w, (size_t)N * K * (q8 ? 1 : 2));
    const float *xin = dx + xoff;
    const cu_fuse f = {.norm = mode == 1 ? da : NULL, .eps = eps, .acc = mode == 2};
    /* the launches replaced */
    float *py = mode == 1 ? dy1 : dt;
    const float *px = xin;
    if (mode == 1) {
        CU_CHECK_FATAL(cu_rmsnorm(dxn + xoff, xin, da, B, K, eps, 0));
        px = dxn + xoff;
    }
    if (q8 && gated) CU_CHECK_FATAL(cu_matvec_q8_gated(py, px, dw, dws, B, N, K, 0));
    else if (q8) CU_CHECK_FATAL(cu_matvec_q8(py, px, dw, dws, B, N, K, 0));
    else if (gated) CU_CHECK_FATAL(cu_matvec_bf16_gated(py, px, dw, B, N, K, 0));
    else CU_CHECK_FATAL(cu_matvec_bf16(py, px, dw, B, N, K, 0));
    if (mode == 2) CU_CHECK_FATAL(cu_add(dy1, dt, ny, 0));
    /* the fused launch */
    if (q8 && gated) CU_CHECK_FATAL(cu_matvec_q8_gated_fused(dy2, xin, dw, dws, B, N, K, &f, 0));
    else if (q8) CU_CHECK_FATAL(cu_matvec_q8_fused(dy2, xin, dw, dws, B, N, K, &f, 0));
    else if (gated) CU_CHECK_FATAL(cu_matvec_bf16_gated_fused(dy2, xin, dw, B, N, K, &f, 0));
    else CU_CHECK_FATAL(cu_matvec_bf16_fused(dy2, xin, dw, B, N, K, &f, 0));
    char ran[128] = "", want[128];
    if (emu_last_kernel) snprintf(ran, sizeof ran, "%s", emu_last_kernel());
    gu_sync();
    gu_d2h(y1, dy1, ny * 4);
    gu_d2h(y2, dy2, ny * 4);
    int vec = q8 ? cu_matvec_q8_ok(xin, dw, K) : K % 8 == 0 && xoff == 0;
    int bt = B == 1 ? 1 : B == 2 ? 2 : B <= 4 ? 4 : CU_MATVEC_BATCH_TILE;
    const char *m = mode == 1 ? "norm" : "acc";
    if (vec)
        snprintf(want, sizeof want, "matvec_%s_%s%s<%d>", q8 ? "q8" : "bf16", gated ? "gated_" : "", m, bt);
    else
        snprintf(want, sizeof want, "matvec_scalar_%s<%s>", m, q8 ? "true" : "false");
    long bad = -1;
    for (size_t i = 0; i < ny && bad < 0; i++)
        if (memcmp(&y1[i], &y2[i], 4)) bad = (long)i;
    if (bad >= 0)
        result(0, name, "y differs at (b=%ld, n=%ld): fused %.9g, the launches it replaces %.9g", bad / N, bad % N,
               y2[bad], y1[bad]);
    else if (emu_last_kernel && strcmp(ran, want))
        result(0, name, "ran %s, expected %s", ran, want);
    else
        result(1, name, "%s%sbit for bit the launches it replaces", ran, ran[0] ? ": " : "");
    gu_dfree(dx); gu_dfree(dxn); gu_dfree(da); gu_dfree(dt); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dws); gu_dfree(dw);
    free(x); free(a); free(y0); free(y1); free(y2); free(w); free(ws);
}

/* The GEMM path's fused pieces, bit for bit: cu_rmsnorm_bf16 = cu_rmsnorm
 * then cu_f32_to_bf16 (the GEMM's input), cu_scale_cols_add = cu_scale_cols
 * then cu_add (the int8 GEMM's scales and the residual add). */
static void fused_gemm_pieces_case(int B, int K, int N) {
    char name[96];
    snprintf(name, sizeof name, "fused_gemm_pieces B=%d K=%d N=%d", B, K, N);
    if (!begin(name, 1, (double)B * (K + N))) return;
    gu_rng r = {900 + (uint64_t)B};
    const float eps = 1e-8f;
    size_t nx = (size_t)B * K, ny = (size_t)B * N;
    float *x = malloc(nx * 4), *a = malloc((size_t)K * 4), *p = malloc(ny * 4), *y0 = malloc(ny * 4),
          *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    uint16_t *hb1 = malloc(nx * 2), *hb2 = malloc(nx * 2);
    for (size_t i = 0; i < nx; i++) x[i] = (float)(3.0 * gu_normal(&r));
    for (int k = 0; k < K; k++) a[k] = (float)(1.0 + 0.5 * gu_normal(&r));
    for (size_t i = 0; i < ny; i++) {
        p[i] = (float)(100.0 * gu_normal(&r));
        y0[i] = (float)gu_normal(&r);
    }
    float *ws = scale_table(&r, N);
    float *dx = gu_dalloc(nx * 4), *dxn = gu_dalloc(nx * 4), *da = gu_dalloc((size_t)K * 4), *dp = gu_dalloc(ny * 4),
          *dy1 = gu_dalloc(ny * 4), *dy2 = gu_dalloc(ny * 4), *dws = gu_dalloc((size_t)N * 4);
    uint16_t *dhb1 = gu_dalloc(nx * 2), *dhb2 = gu_dalloc(nx * 2);
    gu_h2d(dx, x, nx * 4);
    gu_h2d(da, a, (size_t)K * 4);
    gu_h2d(dp, p, ny * 4);
    gu_h2d(dy1, y0, ny * 4);
    gu_h2d(dy2, y0, ny * 4);
    gu_h2d(dws, ws, (size_t)N * 4);
    CU_CHECK_FATAL(cu_rmsnorm(dxn, dx, da, B, K, eps, 0));
    CU_CHECK_FATAL(cu_f32_to_bf16(dhb1, dxn, nx, 0));
    CU_CHECK_FATAL(cu_rmsnorm_bf16(dhb2, dx, da, B, K, eps, 0));
    CU_CHECK_FATAL(cu_scale_cols_add(dy2, dp, dws, B, N, N, 0));
    CU_CHECK_FATAL(cu_scale_cols(dp, dws, B, N, N, 0));
    CU_CHECK_FATAL(cu_add(dy1, dp, ny, 0));
    gu_sync();
    gu_d2h(hb1, dhb1, nx * 2);
    gu_d2h(hb2, dhb2, nx * 2);
    gu_d2h(y1, dy1, ny * 4);
    gu_d2h(y2, dy2, ny * 4);
    long badh = -1, bady = -1;
    for (size_t i = 0; i < nx && badh < 0; i++)
        if (hb1[i] != hb2[i]) badh = (long)i;
    for (size_t i = 0; i < ny && bady < 0; i++)
        if (memcmp(&y1[i], &y2[i], 4)) bady = (long)i;
    if (badh >= 0) result(0, name, "rmsnorm_bf16 differs at %ld: 0x%04x vs 0x%04x", badh, hb2[badh], hb1[badh]);
    else if (bady >= 0) result(0, name, "scale_cols_add differs at %ld: %.9g vs %.9g", bady, y2[bady], y1[bady]);
    else result(1, name, "bit for bit the launches they replace");
    gu_dfree(dx); gu_dfree(dxn); gu_dfree(da); gu_dfree(dp); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dws);
    gu_dfree(dhb1); gu_dfree(dhb2);
    free(x); free(a); free(p); free(y0); free(y1); free(y2); free(hb1); free(hb2); free(ws);
}

/* cu_matvec_{bf16,q8}_norm_rope (RoPE and the ring store in the QKV
 * product's epilogue) against the two launches it replaces,
 * cu_matvec_*_fused with the norm then cu_qkv_rope_ring: qkv and the whole
 * ring bit for bit. Slots in a scrambled order (some never used), layer 1
 * of two in each slot's view, positions 0, one mid-ring, ones that wrap the
 * ring (ctx 5) and 2999+; both rings start from the same random bytes, so
 * a store outside the rows' own K/V pairs shows, and a guard row after the
 * B x 3D outputs must stay untouched (vectors past B, rows past N). On the
 * emulator the kernel's name too (a silent fallback fails). */
static void rope_fused_case(int q8, int B, int heads, int hd, int K) {
    char name[112];
    snprintf(name, sizeof name, "fused_%s_norm_rope B=%d heads=%d head_dim=%d K=%d", q8 ? "q8" : "bf16", B, heads,
             hd, K);
    if (!begin(name, 1, 6.0 * B * heads * hd * K)) return;
    gu_rng r = {1300 + (uint64_t)(B * 7 + heads + hd + K + q8)};
    const int D = heads * hd, N = 3 * D, ctx = 5, layers = 2, nslots = B + 3;
    const float eps = 1e-8f, rope_k = (float)(-log(10000.0) * 2.0 / hd);
    const size_t nx = (size_t)B * K, ny = (size_t)(B + 1) * N;   /* y: B rows and a guard row */
    const size_t view = (size_t)2 * ctx * D, stride = layers * view, nring = nslots * stride;
    float *x = malloc(nx * 4), *a = malloc((size_t)K * 4), *y0 = malloc(ny * 4), *y1 = malloc(ny * 4),
          *y2 = malloc(ny * 4);
    uint16_t *ring0 = malloc(nring * 2), *ring1 = malloc(nring * 2), *ring2 = malloc(nring * 2);
    int32_t slot[64];
    int64_t pos[64];
    for (size_t i = 0; i < nx; i++) x[i] = (float)(2.0 * gu_normal(&r));
    for (int k = 0; k < K; k++) a[k] = (float)(1.0 + 0.5 * gu_normal(&r));
    for (size_t i = 0; i < ny; i++) y0[i] = (float)gu_normal(&r);
    for (size_t i = 0; i < nring; i++) ring0[i] = (uint16_t)gu_next(&r);
    for (int b = 0; b < B; b++) {
        slot[b] = (b * 7 + 3) % nslots;   /* distinct: no nslots here is a multiple of 7 */
        pos[b] = b % 4 == 0 ? 0 : b % 4 == 1 ? ctx / 2 : b % 4 == 2 ? ctx + 1 + b : 2999 + b;
    }
    void *w = q8 ? (void *)i8_table(&r, (size_t)N * K) : (void *)bf16_table(&r, (size_t)N * K);
    float *ws = scale_table(&r, N);
    float *dx = gu_dalloc(nx * 4), *da = gu_dalloc((size_t)K * 4), *dy1 = gu_dalloc(ny * 4), *dy2 = gu_dalloc(ny * 4),
          *dws = gu_dalloc((size_t)N * 4);
    uint16_t *dring1 = gu_dalloc(nring * 2), *dring2 = gu_dalloc(nring * 2);
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * B);
    int64_t *dpos = gu_dalloc(sizeof(int64_t) * B);
    void *dw = gu_dalloc((size_t)N * K * (q8 ? 1 : 2));
    gu_h2d(dx, x, nx * 4);
    gu_h2d(da, a, (size_t)K * 4);
    gu_h2d(dy1, y0, ny * 4);
    gu_h2d(dy2, y0, ny * 4);
    gu_h2d(dws, ws, (size_t)N * 4);
    gu_h2d(dw, w, (size_t)N * K * (q8 ? 1 : 2));
    gu_h2d(dring1, ring0, nring * 2);
    gu_h2d(dring2, ring0, nring * 2);
    gu_h2d(dslot, slot, sizeof(int32_t) * B);
    gu_h2d(dpos, pos, sizeof(int64_t) * B);
    const cu_fuse f = {.norm = da, .eps = eps};
    /* the launches replaced: the product with the norm, then RoPE into the ring */
    if (q8) CU_CHECK_FATAL(cu_matvec_q8_fused(dy1, dx, dw, dws, B, N, K, &f, 0));
    else CU_CHECK_FATAL(cu_matvec_bf16_fused(dy1, dx, dw, B, N, K, &f, 0));
    CU_CHECK_FATAL(cu_qkv_rope_ring(dy1, dring1 + view, stride, dslot, dpos, B, heads, hd, ctx, rope_k, 0));
    /* the fused launch */
    const cu_rope_ring rr = {dring2 + view, stride, dslot, dpos, heads, hd, ctx, rope_k};
    int ok_rule = cu_matvec_rope_ok(dx, dw, q8, K, &f, &rr);
    if (q8) CU_CHECK_FATAL(cu_matvec_q8_norm_rope(dy2, dx, dw, dws, B, K, &f, &rr, 0));
    else CU_CHECK_FATAL(cu_matvec_bf16_norm_rope(dy2, dx, dw, B, K, &f, &rr, 0));
    char ran[128] = "", want[128];
    if (emu_last_kernel) snprintf(ran, sizeof ran, "%s", emu_last_kernel());
    int bt = B == 1 ? 1 : B == 2 ? 2 : B <= 4 ? 4 : CU_MATVEC_BATCH_TILE;
    snprintf(want, sizeof want, "matvec_%s_norm_rope<%d>", q8 ? "q8" : "bf16", bt);
    gu_sync();
    gu_d2h(y1, dy1, ny * 4);
    gu_d2h(y2, dy2, ny * 4);
    gu_d2h(ring1, dring1, nring * 2);
    gu_d2h(ring2, dring2, nring * 2);
    long bad = -1, rbad = -1, touched = 0;
    for (size_t i = 0; i < ny && bad < 0; i++)
        if (memcmp(&y1[i], &y2[i], 4)) bad = (long)i;
    for (size_t i = 0; i < nring && rbad < 0; i++)
        if (ring1[i] != ring2[i]) rbad = (long)i;
    for (size_t i = 0; i < nring; i++) touched += ring1[i] != ring0[i];
    if (!ok_rule) result(0, name, "cu_matvec_rope_ok refused the case");
    else if (bad >= 0 && bad >= (long)B * N)
        result(0, name, "the guard row after the outputs was written at %ld", bad - (long)B * N);
    else if (bad >= 0)
        result(0, name, "qkv differs at (b=%ld, n=%ld): fused %.9g, the launches it replaces %.9g", bad / N, bad % N,
               y2[bad], y1[bad]);
    else if (rbad >= 0)
        result(0, name, "ring differs at slot %ld layer %ld %s row %ld element %ld: fused 0x%04x, two launches 0x%04x",
               rbad / (long)stride, rbad % (long)stride / (long)view, rbad % (long)view < (long)ctx * D ? "K" : "V",
               rbad % ((long)ctx * D) / D, rbad % D, ring2[rbad], ring1[rbad]);
    else if (emu_last_kernel && strcmp(ran, want))
        result(0, name, "ran %s, expected %s", ran, want);
    else
        result(1, name, "%s%sqkv and the ring bit for bit the two launches (%ld ring elements written)", ran,
               ran[0] ? ": " : "", touched);
    gu_dfree(dx); gu_dfree(da); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dws); gu_dfree(dring1); gu_dfree(dring2);
    gu_dfree(dslot); gu_dfree(dpos); gu_dfree(dw);
    free(x); free(a); free(y0); free(y1); free(y2); free(ring0); free(ring1); free(ring2); free(w); free(ws);
}

/* What cu_matvec_rope_ok refuses (the launchers answer cudaErrorInvalidValue
 * before any launch): the pairs need an even head_dim, the ring's packed
 * stores 4-byte alignment and an even slot_stride, the product its norm and
 * the vector path. */
static void rope_fused_refusals(void) {
    if (!begin("fused_norm_rope_argument_checks", 0, 0)) return;
    static const float one[4] __attribute__((aligned(16))) = {1, 1, 1, 1};
    static const int32_t sl[1];
    static const int64_t ps[1];
    static float xv[64] __attribute__((aligned(16)));
    static uint16_t wv[16 * 3 * 16] __attribute__((aligned(16))), kv[64] __attribute__((aligned(16)));
    const cu_fuse norm = {.norm = one, .eps = 1e-8f}, add = {.acc = 1};
    const cu_rope_ring good = {kv, 16, sl, ps, 2, 8, 4, -0.1f};
    cu_rope_ring odd = good, skew = good, oddstride = good;
    odd.head_dim = 7;
    skew.kv_layer = kv + 1;
    oddstride.slot_stride = 15;
    int ok = cu_matvec_rope_ok(xv, wv, 0, 16, &norm, &good) &&
             !cu_matvec_rope_ok(xv, wv, 0, 16, &norm, &odd) && !cu_matvec_rope_ok(xv, wv, 0, 16, &norm, &skew) &&
             !cu_matvec_rope_ok(xv, wv, 0, 16, &norm, &oddstride) &&
             !cu_matvec_rope_ok(xv, wv, 0, 16, &add, &good) && !cu_matvec_rope_ok(xv, wv, 0, 16, NULL, &good) &&
             !cu_matvec_rope_ok(xv, wv, 0, 12, &norm, &good) &&   /* bf16 K % 8: the scalar path */
             !cu_matvec_rope_ok(xv + 1, wv, 0, 16, &norm, &good) &&
             cu_matvec_bf16_norm_rope(NULL, xv, wv, 1, 16, &norm, &odd, 0) == cudaErrorInvalidValue &&
             cu_matvec_q8_norm_rope(NULL, xv, (const int8_t *)wv, NULL, 1, 16, &norm, &good, 0) ==
                 cudaErrorInvalidValue;
    result(ok, "fused_norm_rope_argument_checks", "odd head_dim, misaligned or odd-strided ring, no norm, an add, "
           "the scalar path: refused");
}

static void test_rope_fused(void) {
    for (int q8 = 0; q8 < 2; q8++) {
        rope_fused_case(q8, 1, 4, 16, 64);     /* batch tile 1, 4 heads */
        rope_fused_case(q8, 8, 4, 16, 64);     /* one full tile of 8 */
        rope_fused_case(q8, 12, 4, 16, 64);    /* two tiles, the second 4 short */
        rope_fused_case(q8, 3, 2, 128, 256);   /* the 7B's head_dim */
    }
    rope_fused_case(0, 2, 3, 8, 40);           /* 3 heads of 8; K % 256 != 0 */
    rope_fused_refusals();
}

static void test_fused(void) {
    for (int q8 = 0; q8 < 2; q8++) {
        fused_case(q8, 0, 1, 1, 37, 1024, 0);   /* the norm prologue, batch tile 1, N odd */
        fused_case(q8, 0, 1, 2, 16, 4096, 0);   /* the 7B's width: 16 slices per thread */
        fused_case(q8, 0, 1, 3, 20, 1000, 0);   /* tile 4, one row short; K % 256 != 0 */
        fused_case(q8, 0, 1, 11, 9, 264, 0);    /* two tiles of 8, the second short */
        fused_case(q8, 0, 1, 3, 10, 96, 1);     /* x misaligned: the scalar path */
        fused_case(q8, 0, 2, 1, 37, 1024, 0);   /* the add */
        fused_case(q8, 0, 2, 5, 20, 512, 0);
        fused_case(q8, 0, 2, 2, 9, 100, 1);     /* scalar */
        fused_case(q8, 1, 2, 1, 33, 512, 0);    /* the gated FFN's output with the add */
        fused_case(q8, 1, 2, 9, 12, 256, 0);
    }
    fused_case(0, 0, 1, 4, 8, 36, 0);           /* bf16 K % 8 != 0: scalar */
    fused_gemm_pieces_case(3, 4096, 1024);
    fused_gemm_pieces_case(17, 1000, 33);
}

static void test_q8_kernels(void) {
    matvec_q8_case(1, 37, 64, 0, 0, 0);
    matvec_q8_case(3, 129, 264, 0, 0, 0);
    matvec_q8_case(8, 65, 1024, 0, 0, 0);
    matvec_q8_case(11, 40, 512, 0, 0, 0);   /* two batch tiles */
    matvec_q8_case(2, 33, 13, 0, 0, 0);     /* K % 4 != 0: scalar */
    matvec_q8_case(3, 21, 96, 0, 1, 0);     /* W one byte off: scalar */
    matvec_q8_case(2, 30, 96, 1, 0, 0);     /* x 4 bytes off: scalar */
    matvec_q8_case(1, 65, 1024, 0, 0, 1);
    matvec_q8_case(4, 33, 256, 0, 0, 1);
    matvec_q8_case(9, 20, 128, 0, 0, 1);
    q8_widen_case();
    const int64_t p3[3] = {0, 7, 2999};
    rope_q8_case(3, 4, 16, p3);
    rope_q8_case(3, 8, 128, p3);
    const int64_t a1[3] = {0, 5, 39}, a2[3] = {44, 87, 40}, a3[2] = {550, 3100};
    attend_q8_case(3, 2, 32, 40, 40, 0, a1);
    attend_q8_case(3, 2, 32, 40, 39, 0, a2);      /* past the wrap */
    attend_q8_case(2, 2, 128, 3000, 3000, 0, a3); /* the 7B's head_dim and ring: 12 splits */
    attend_q8_case(3, 2, 12, 40, 40, 0, a1);      /* head_dim % 8 != 0: byte loads */
    const int64_t s1[1] = {30};
    attend_q8_case(5, 2, 16, 32, 32, 1, s1);      /* a prefill chunk across the wrap */
    dep_attend_q8_case(3, 2, 8, 8, 8);
    dep_attend_q8_case(2, 4, 16, 16, 15);
    dep_att_cases();
}

/* cu_matvec_{bf16,q8}_dep_att (the depformer attention inside the
 * out-projection's launch) against its two launches, cu_dep_attend (or
 * _q8) then the matvec with the add, over sub-steps 0..K-1 as the step
 * runs them: the products and both caches bit for bit. w8: int8 rows;
 * kv8: the int8 cache. B > 4: tiles of CU_MATVEC_BATCH_TILE rows, each
 * tile's block 0 the one that stores. */
static void dep_att_fused_case(int B, int heads, int hd, int K, int window, int w8, int kv8) {
    char name[96];
    snprintf(name, sizeof name, "dep_att_fused B=%d heads=%d hd=%d steps=%d window=%d%s%s", B, heads, hd, K, window,
             w8 ? " w8" : "", kv8 ? " kv8" : "");
    if (!begin(name, 1, (double)B * heads * hd * (K * K + heads * hd))) return;
    gu_rng r = {29};
    const int D = heads * hd, N = 10;   /* 5 blocks: block 0 stores, 4 read (a few rows: the emulator's time) */
    const size_t stride = (size_t)LM_MAX_DEP_Q * D, nq = (size_t)B * 3 * D, ny = (size_t)B * N;
    float *qkv = malloc(sizeof(float) * nq), *y = malloc(sizeof(float) * ny);
    float *got = malloc(sizeof(float) * ny), *want = malloc(sizeof(float) * ny);
    float *kg = malloc(sizeof(float) * B * stride), *kw = malloc(sizeof(float) * B * stride);
    float *vg = malloc(sizeof(float) * B * stride), *vw = malloc(sizeof(float) * B * stride);
    uint16_t *w = malloc((size_t)N * D * 2);
    for (size_t i = 0; i < (size_t)N * D; i++) w[i] = st_f32_to_bf16((float)(0.1 * gu_normal(&r)));
    int8_t *w8t = i8_table(&r, (size_t)N * D);
    float *ws = scale_table(&r, (size_t)N);
    float *dqkv = gu_dalloc(sizeof(float) * nq), *datt = gu_dalloc(sizeof(float) * B * D);
    float *dy1 = gu_dalloc(sizeof(float) * ny), *dy2 = gu_dalloc(sizeof(float) * ny), *dws = gu_dalloc(sizeof(float) * N);
    float *dk1 = gu_dalloc(sizeof(float) * B * stride), *dv1 = gu_dalloc(sizeof(float) * B * stride);
    float *dk2 = gu_dalloc(sizeof(float) * B * stride), *dv2 = gu_dalloc(sizeof(float) * B * stride);
    void *dw = gu_dalloc((size_t)N * D * 2);
    gu_h2d(dw, w8 ? (const void *)w8t : (const void *)w, (size_t)N * D * (w8 ? 1 : 2));
    gu_h2d(dws, ws, sizeof(float) * N);
    CU_CHECK_FATAL(cudaMemset(dk1, 0, sizeof(float) * B * stride));
    CU_CHECK_FATAL(cudaMemset(dv1, 0, sizeof(float) * B * stride));
    CU_CHECK_FATAL(cudaMemset(dk2, 0, sizeof(float) * B * stride));
    CU_CHECK_FATAL(cudaMemset(dv2, 0, sizeof(float) * B * stride));
    const cu_fuse add = {.acc = 1};
    const char *bad = NULL;
    int bad_k = -1;
    long at = -1;
    for (int k = 0; k < K && !bad; k++) {
        for (size_t i = 0; i < nq; i++) qkv[i] = (float)gu_normal(&r);
        for (size_t i = 0; i < ny; i++) y[i] = (float)gu_normal(&r);
        gu_h2d(dqkv, qkv, sizeof(float) * nq);
        gu_h2d(dy1, y, sizeof(float) * ny);
        gu_h2d(dy2, y, sizeof(float) * ny);
        CU_CHECK_FATAL((kv8 ? cu_dep_attend_q8 : cu_dep_attend)(datt, dqkv, dk1, dv1, stride, k, window, B, heads, hd,
                                                                0));
        if (w8) {
            CU_CHECK_FATAL(cu_matvec_q8_fused(dy1, datt, dw, dws, B, N, D, &add, 0));
            CU_CHECK_FATAL(cu_matvec_q8_dep_att(dy2, dqkv, dk2, dv2, stride, kv8, k, window, dw, dws, B, N, D, heads,
                                                hd, 0));
        } else {
            CU_CHECK_FATAL(cu_matvec_bf16_fused(dy1, datt, dw, B, N, D, &add, 0));
            CU_CHECK_FATAL(cu_matvec_bf16_dep_att(dy2, dqkv, dk2, dv2, stride, kv8, k, window, dw, B, N, D, heads,
                                                  hd, 0));
        }
        gu_sync();
        gu_d2h(want, dy1, sizeof(float) * ny);
        gu_d2h(got, dy2, sizeof(float) * ny);
        gu_d2h(kw, dk1, sizeof(float) * B * stride);
        gu_d2h(kg, dk2, sizeof(float) * B * stride);
        gu_d2h(vw, dv1, sizeof(float) * B * stride);
        gu_d2h(vg, dv2, sizeof(float) * B * stride);
        for (size_t i = 0; i < ny && !bad; i++)
            if (memcmp(&got[i], &want[i], sizeof(float))) {
                bad = "output";
                at = (long)i;
            }
        if (!bad && memcmp(kg, kw, sizeof(float) * B * stride)) bad = "key cache";
        if (!bad && memcmp(vg, vw, sizeof(float) * B * stride)) bad = "value cache";
        if (bad) bad_k = k;
    }
    if (bad && at >= 0)
        result(0, name, "sub-step %d, %s element %ld: fused %.9g, two launches %.9g", bad_k, bad, at, got[at],
               want[at]);
    else if (bad) result(0, name, "sub-step %d: the %s differs from the two launches'", bad_k, bad);
    else result(1, name, "the products and the caches bit for bit the two launches'");
    gu_dfree(dqkv); gu_dfree(datt); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dws); gu_dfree(dw);
    gu_dfree(dk1); gu_dfree(dv1); gu_dfree(dk2); gu_dfree(dv2);
    free(qkv); free(y); free(got); free(want); free(kg); free(kw); free(vg); free(vw); free(w); free(w8t); free(ws);
}

/* The depformer's inputs without cu_embed_add_rows (issue 25): the G
 * input projections in one launch (cu_matvec_group_fused, the norm folded)
 * against a cu_matvec_*_fused launch each, and cu_samp_topk_feed_emb
 * against cu_samp_topk_feed then cu_embed_add_rows on the product: the
 * products, dy, the tokens and the feed-back bit for bit. One row's forced
 * token is past the table (dy = the product alone). w8: int8 rows, each
 * matrix's scales at the next 256 bytes after its rows (the backend's
 * layout: one launch), or (w8 == 2) all scales in a buffer of their own
 * (a launch each). */
static void dep_inputs_case(int B, int G, int N, int K, int w8) {
    char name[96];
    snprintf(name, sizeof name, "dep_inputs B=%d G=%d N=%d K=%d%s (group, feed + embedding)", B, G, N, K,
             w8 == 2 ? " w8, scales apart" : w8 ? " w8" : "");
    if (!begin(name, 1, (double)B * G * N * K)) return;
    gu_rng r = {31};
    const int card = 64, ts = 2, k = 1;
    const size_t nx = (size_t)B * K, ny = (size_t)G * B * N;
    float *x = malloc(sizeof(float) * nx), *alpha = malloc(sizeof(float) * K);
    for (size_t i = 0; i < nx; i++) x[i] = (float)gu_normal(&r);
    for (int i = 0; i < K; i++) alpha[i] = (float)(1.0 + 0.1 * gu_normal(&r));
    uint16_t *wb = bf16_table(&r, (size_t)G * N * K), *emb = bf16_table(&r, (size_t)(card + 1) * N);
    int8_t *wq = i8_table(&r, (size_t)G * N * K);
    float *ws = scale_table(&r, (size_t)G * N);
    float *dx = gu_dalloc(sizeof(float) * nx), *da = gu_dalloc(sizeof(float) * K), *dws = gu_dalloc(sizeof(float) * G * N);
    float *dy1 = gu_dalloc(sizeof(float) * ny), *dy2 = gu_dalloc(sizeof(float) * ny);
    const size_t rows8 = ((size_t)N * K + 255) & ~(size_t)255, slot = w8 == 1 ? rows8 + 4 * (size_t)N : (size_t)N * K;
    void *dw = gu_dalloc((size_t)G * (w8 ? slot : (size_t)N * K * 2));
    uint16_t *demb = gu_dalloc((size_t)(card + 1) * N * 2);
    gu_h2d(dx, x, sizeof(float) * nx);
    gu_h2d(da, alpha, sizeof(float) * K);
    gu_h2d(dws, ws, sizeof(float) * G * N);
    if (!w8) gu_h2d(dw, wb, (size_t)G * N * K * 2);
    gu_h2d(demb, emb, (size_t)(card + 1) * N * 2);
    const cu_fuse on = {.norm = da, .eps = 1e-5f};
    const void *wp[LM_MAX_DEP_Q];
    const float *wsp[LM_MAX_DEP_Q];
    for (int g = 0; g < G; g++) {
        wp[g] = (const char *)dw + (size_t)g * (w8 ? slot : (size_t)N * K * 2);
        wsp[g] = w8 == 1 ? (const float *)((const char *)wp[g] + rows8) : dws + (size_t)g * N;
        if (w8) gu_h2d((void *)wp[g], wq + (size_t)g * N * K, (size_t)N * K);
        if (w8 == 1) gu_h2d((void *)wsp[g], ws + (size_t)g * N, 4 * (size_t)N);
        if (w8)
            CU_CHECK_FATAL(cu_matvec_q8_fused(dy1 + (size_t)g * B * N, dx, wp[g], wsp[g], B, N, K, &on, 0));
        else
            CU_CHECK_FATAL(cu_matvec_bf16_fused(dy1 + (size_t)g * B * N, dx, wp[g], B, N, K, &on, 0));
    }
    CU_CHECK_FATAL(cu_matvec_group_fused(dy2, dx, wp, w8 ? wsp : NULL, G, B, N, K, &on, 0));
    /* on the emulator: the one launch where it applies (the vector path, the scales at one offset) */
    const int one = K % (w8 ? 4 : 8) == 0 && w8 != 2;
    char ran[128] = "";
    if (emu_last_kernel) snprintf(ran, sizeof ran, "%s", emu_last_kernel());
    const char *want_k = one ? (w8 ? "matvec_q8_group<" : "matvec_bf16_group<")
                             : (w8 ? "matvec_q8_norm<" : "matvec_scalar_norm<");
    const int path_ok = !emu_last_kernel || !strncmp(ran, want_k, strlen(want_k));
    /* the sampler of sub-step k - 1 writing sub-step k's input */
    sample_spec sc = {B, card, 0, 0.0f, SK_MIXED, 79};
    float *l;
    samp_row *rows;
    sample_inputs(&sc, &l, &rows);
    int32_t *tgt = malloc(sizeof(int32_t) * B * ts);
    for (int b = 0; b < B; b++) tgt[b * ts] = tgt[b * ts + 1] = b == 1 ? card + 7 : b % 3 == 0 ? 5 + b : -1;
    float *dl = gu_dalloc(sizeof(float) * B * card), *dd1 = gu_dalloc(sizeof(float) * B * N),
          *dd2 = gu_dalloc(sizeof(float) * B * N);
    samp_row *drows = gu_dalloc(sizeof *rows * B);
    int32_t *dtgt = gu_dalloc(sizeof(int32_t) * B * ts), *do1 = gu_dalloc(4 * B), *do2 = gu_dalloc(4 * B),
            *dp1 = gu_dalloc(4 * B), *dp2 = gu_dalloc(4 * B);
    gu_h2d(dl, l, sizeof(float) * B * card);
    gu_h2d(drows, rows, sizeof *rows * B);
    gu_h2d(dtgt, tgt, sizeof(int32_t) * B * ts);
    const float *base = dy1 + (size_t)k * B * N;
    CU_CHECK_FATAL(cudaMemcpy(dd1, base, sizeof(float) * B * N, cudaMemcpyDeviceToDevice));
    CU_CHECK_FATAL(cu_samp_topk_feed(do1, dl, drows, B, card, SAMPLE_STREAM, dp1, dtgt, ts, NULL, 0, 0));
    CU_CHECK_FATAL(cu_embed_add_rows(dd1, dp1, demb, B, N, card + 1, 0));
    CU_CHECK_FATAL(cu_samp_topk_feed_emb(do2, dl, drows, B, card, SAMPLE_STREAM, dp2, dtgt, ts, NULL, 0, dd2, base,
                                         demb, N, card + 1, 0));
    /* no next input (dy NULL: the last sub-step): cu_samp_topk_feed's tokens and feed-back, the
     * embedding's arguments ignored */
    int32_t *do3 = gu_dalloc(4 * B), *dp3 = gu_dalloc(4 * B);
    CU_CHECK_FATAL(cu_samp_topk_feed_emb(do3, dl, drows, B, card, SAMPLE_STREAM, dp3, dtgt, ts, NULL, 0, NULL, NULL,
                                         NULL, 0, 0, 0));
    gu_sync();
    float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
    float *e1 = malloc(sizeof(float) * B * N), *e2 = malloc(sizeof(float) * B * N);
    int32_t *t1 = malloc(16 * B);
    gu_d2h(y1, dy1, sizeof(float) * ny);
    gu_d2h(y2, dy2, sizeof(float) * ny);
    gu_d2h(e1, dd1, sizeof(float) * B * N);
    gu_d2h(e2, dd2, sizeof(float) * B * N);
    gu_d2h(t1, do1, 4 * B);
    gu_d2h(t1 + B, do2, 4 * B);
    gu_d2h(t1 + 2 * B, dp1, 4 * B);
    gu_d2h(t1 + 3 * B, dp2, 4 * B);
    int32_t *t3 = malloc(8 * B);
    gu_d2h(t3, do3, 4 * B);
    gu_d2h(t3 + B, dp3, 4 * B);
    const char *bad = NULL;
    if (!path_ok) bad = "the grouped launch ran another kernel";
    else if (memcmp(y1, y2, sizeof(float) * ny)) bad = "the grouped products differ from a launch each";
    else if (memcmp(t1, t1 + B, 4 * B) || memcmp(t1 + 2 * B, t1 + 3 * B, 4 * B))
        bad = "the tokens or the feed-back differ";
    else if (memcmp(t1, t3, 4 * B) || memcmp(t1 + 2 * B, t3 + B, 4 * B))
        bad = "without a next input, the tokens or the feed-back differ from cu_samp_topk_feed's";
    else if (memcmp(e1, e2, sizeof(float) * B * N)) bad = "dy differs from cu_embed_add_rows on the product";
    if (bad) result(0, name, "%s (%s)", bad, ran);
    else result(1, name, "%d products (%s), the next input from the sampler: bit for bit", G, ran);
    gu_dfree(dx); gu_dfree(da); gu_dfree(dws); gu_dfree(dy1); gu_dfree(dy2); gu_dfree(dw); gu_dfree(demb);
    gu_dfree(dl); gu_dfree(dd1); gu_dfree(dd2); gu_dfree(drows); gu_dfree(dtgt); gu_dfree(do1); gu_dfree(do2);
    gu_dfree(dp1); gu_dfree(dp2); gu_dfree(do3); gu_dfree(dp3);
    free(x); free(alpha); free(wb); free(emb); free(wq); free(ws); free(l); free(rows); free(tgt);
    free(y1); free(y2); free(e1); free(e2); free(t1); free(t3);
}

static void dep_att_cases(void) {
    for (int w8 = 0; w8 < 2; w8++)
        for (int kv8 = 0; kv8 < 2; kv8++) {
            dep_att_fused_case(1, 2, 8, 8, 8, w8, kv8);
            dep_att_fused_case(3, 4, 16, 16, 15, w8, kv8);   /* PersonaPlex's dep_window; a tile of 4 */
            dep_att_fused_case(9, 2, 32, 5, 8, w8, kv8);     /* two tiles: each tile's block 0 stores */
        }
    for (int w8 = 0; w8 < 2; w8++) {
        dep_inputs_case(1, 8, 64, 96, w8);
        dep_inputs_case(5, 3, 33, 256, w8);   /* odd rows, a tile of 8 */
        dep_inputs_case(2, 2, 16, 12, w8);    /* K % 8 != 0: a launch each (bf16's scalar path) */
    }
    dep_inputs_case(3, 4, 16, 64, 2);         /* the scales not at one offset: a launch each */
}

/* ---- Mimi's kernels (cuda/cu_mimi_kern.cu) ----------------------------- */

/* A CPU workspace for the twin alone (mimi_int.h's struct, no model). */
static mimi_ws *twin_ws(size_t floats) {
    mimi_ws *w = calloc(1, sizeof *w);
    w->xb = malloc(floats * sizeof(float));
    w->col = malloc(floats * sizeof(float));
    w->pack = aligned_alloc(64, MIMI_GEMM_SCRATCH * sizeof(float));
    return w;
}
static void twin_ws_free(mimi_ws *w) {
    free(w->xb);
    free(w->col);
    free(w->pack);
    free(w);
}

static void fill_normal(gu_rng *r, float *p, size_t n, double sd) {
    for (size_t i = 0; i < n; i++) p[i] = (float)(sd * gu_normal(r));
}
static void fabs_all(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = fabsf(p[i]);
}

/* One conv (transposed: tr) on n = 3 items in slots {2, 0, 1} of a slab of
 * 4, against mimi_conv_forward on the same states. layout: 0 raw w (one
 * output channel, or depthwise), 1 panel, 2 pre-packed (blocked). */
static void mimi_conv_case(const char *what, int tr, int depthwise, int cin, int cout, int K, int S, int dil, int T,
                           int elu, int rep, int accumulate, int layout) {
    char name[120];
    snprintf(name, sizeof name, "mimi_%s cin=%d cout=%d K=%d S=%d dil=%d T=%d", what, cin, cout, K, S, dil, T);
    const int n = 3, NS = 4, slots[3] = {2, 0, 1};
    int Tout = tr ? T * S : T / S, P = tr ? K - S : (K - 1) * dil + 1 - S;
    if (!begin(name, 1, (double)n * cout * Tout * (depthwise ? K : cin * K))) return;
    gu_rng r = {4242 + (uint64_t)cin * 31 + K};
    int M = tr ? (depthwise ? cout : cout * K) : cout, KK = tr ? (depthwise ? K : cin) : cin * K;
    size_t nw = (size_t)M * KK, nx = (size_t)cin * n * T, ny = (size_t)cout * n * Tout;
    size_t stride = (size_t)(tr ? cout : cin) * P, nst = stride * NS;
    float *w = malloc(sizeof(float) * nw), *b = malloc(sizeof(float) * cout), *x = malloc(sizeof(float) * nx);
    float *y0 = malloc(sizeof(float) * ny), *st0 = malloc(sizeof(float) * (nst + 1));
    fill_normal(&r, w, nw, 1.0 / sqrt((double)KK));
    fill_normal(&r, b, (size_t)cout, 0.5);
    fill_normal(&r, x, nx, 1.0);
    fill_normal(&r, y0, ny, 1.0);
    fill_normal(&r, st0, nst + 1, 1.0);
    unsigned char fl[3] = {1, 0, 1};
    /* the twin, twice: the values, then the magnitudes (|w|, |x|, ...) */
    float *yr = malloc(sizeof(float) * ny), *str = malloc(sizeof(float) * (nst + 1));
    float *ym = malloc(sizeof(float) * ny), *stm = malloc(sizeof(float) * (nst + 1));
    for (int pass = 0; pass < 2; pass++) {
        float *wc = malloc(sizeof(float) * nw), *xc = malloc(sizeof(float) * nx), *bc = malloc(sizeof(float) * cout);
        float *yy = pass ? ym : yr, *ss = pass ? stm : str;
        memcpy(wc, w, sizeof(float) * nw);
        memcpy(xc, x, sizeof(float) * nx);
        memcpy(bc, b, sizeof(float) * cout);
        memcpy(yy, y0, sizeof(float) * ny);
        memcpy(ss, st0, sizeof(float) * (nst + 1));
        if (pass) {
            fabs_all(wc, nw); fabs_all(xc, nx); fabs_all(bc, (size_t)cout); fabs_all(yy, ny); fabs_all(ss, nst + 1);
        }
        mimi_conv c = {.cin = cin, .cout = cout, .k = K, .stride = S, .dil = dil, .transposed = tr,
                       .depthwise = depthwise, .replicate = rep, .pad = P, .b = bc};
        float *packed = NULL;
        if (layout == 0) c.w = wc;
        else if (layout == 1) {
            packed = aligned_alloc(64, ((mimi_panel_size(M, KK) * sizeof(float) + 63) / 64) * 64);
            mimi_panel_pack(M, KK, wc, KK, packed);
            c.wpanel = packed;
        } else {
            packed = aligned_alloc(64, ((mimi_gemm_packed_size(M, KK) * sizeof(float) + 63) / 64) * 64);
            mimi_gemm_pack_a(M, KK, wc, KK, packed);
            c.wp = packed;
        }
        float *states[3];
        unsigned char fc[3] = {fl[0], fl[1], fl[2]}, *first[3] = {&fc[0], &fc[1], &fc[2]};
        for (int i = 0; i < n; i++) states[i] = ss + (size_t)slots[i] * stride;
        size_t wsn = (size_t)64 * (cin + cout) * K * (T + P + Tout + 16) * n + 4096;
        mimi_ws *ws = twin_ws(wsn);
        mimi_conv_forward(&c, n, T, xc, elu, states, rep ? first : NULL, yy, accumulate, ws);
        twin_ws_free(ws);
        free(packed); free(wc); free(xc); free(bc);
    }
    /* the kernels */
    float *dw = gu_dalloc(sizeof(float) * nw), *db = gu_dalloc(sizeof(float) * cout), *dx = gu_dalloc(sizeof(float) * nx);
    float *dy = gu_dalloc(sizeof(float) * ny), *dst = gu_dalloc(sizeof(float) * (nst + 1));
    size_t nxb = (size_t)n * cin * (P + T) + nx, nfull = (size_t)n * cout * (Tout + P);
    float *dxb = gu_dalloc(sizeof(float) * nxb), *dfull = gu_dalloc(sizeof(float) * (nfull + 1));
    int32_t *dslot = gu_dalloc(sizeof(int32_t) * n), *dfirst = gu_dalloc(sizeof(int32_t) * n);
    int32_t fi[3] = {fl[0], fl[1], fl[2]};
    gu_h2d(dw, w, sizeof(float) * nw);
    gu_h2d(db, b, sizeof(float) * cout);
    gu_h2d(dx, x, sizeof(float) * nx);
    gu_h2d(dy, y0, sizeof(float) * ny);
    gu_h2d(dst, st0, sizeof(float) * (nst + 1));
    gu_h2d(dslot, slots, sizeof(int32_t) * n);
    gu_h2d(dfirst, fi, sizeof(int32_t) * n);
    if (tr) {
        const float *X = dx;
        if (elu) {
            CU_CHECK_FATAL(cu_mimi_elu(dxb, dx, nx, 0));
            X = dxb;
        }
        CU_CHECK_FATAL(cu_mimi_convtr(dy, dfull, dst, stride, 0, X, dw, db, dslot, n, cin, cout, K, S, T, depthwise,
                                      accumulate, 0));
    } else {
        CU_CHECK_FATAL(cu_mimi_conv_stage(dxb, dst, stride, 0, dx, dslot, rep ? dfirst : NULL, n, cin, T, P, elu, 0));
        const cu_mimi_keep keep = {dst, stride, 0, dslot, P};
        CU_CHECK_FATAL(cu_mimi_conv(dy, dxb, dw, db, n, cin, cout, K, S, dil, P + T, Tout, accumulate, &keep, 0));
    }
    gu_sync();
    float *y = malloc(sizeof(float) * ny), *st = malloc(sizeof(float) * (nst + 1));
    gu_d2h(y, dy, sizeof(float) * ny);
    gu_d2h(st, dst, sizeof(float) * (nst + 1));
    double terms = (double)(depthwise ? K : (tr ? cin * ((K + S - 1) / S) : cin * K)) + 3;
    double tol = 2 * sqrt(terms) + 16;
    long at, ats;
    double e1 = worst_err(y, yr, ym, ldexp(1.0, -24), ny, tol, &at);
    double e2 = worst_err(st, str, stm, ldexp(1.0, -24), nst + 1, tr ? tol : 16.0, &ats);
    if (at >= 0) result(0, name, "output at %ld: gpu %.9g twin %.9g (error %.3g units, tolerance %.0f)", at, y[at], yr[at], e1, tol);
    else if (ats >= 0) result(0, name, "kept state at %ld: gpu %.9g twin %.9g (error %.3g units)", ats, st[ats], str[ats], e2);
    else result(1, name, "worst %.3g units of 2^-24 (tolerance %.0f); kept state %.3g", e1, tol, e2);
    gu_dfree(dw); gu_dfree(db); gu_dfree(dx); gu_dfree(dy); gu_dfree(dst); gu_dfree(dxb); gu_dfree(dfull);
    gu_dfree(dslot); gu_dfree(dfirst);
    free(w); free(b); free(x); free(y0); free(st0); free(yr); free(str); free(ym); free(stm); free(y); free(st);
}

/* cu_mimi_gemm against mimi_gemm, and cu_mimi_elu against mimi_elu. */
static void mimi_gemm_elu_case(int M, int N, int K) {
    char name[96];
    snprintf(name, sizeof name, "mimi_gemm+elu M=%d N=%d K=%d", M, N, K);
    if (!begin(name, 1, (double)M * N * K)) return;
    gu_rng r = {99};
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *C0 = malloc(sizeof(float) * nc);
    fill_normal(&r, A, na, 1.0);
    fill_normal(&r, B, nb, 3.0);
    fill_normal(&r, C0, nc, 1.0);
    B[0] = -100.f; B[1] = -1e-7f; B[2] = 0.f; B[3] = -0.f;   /* ELU's clamp, tiny, zeros */
    float *Cr = malloc(sizeof(float) * nc), *Cm = malloc(sizeof(float) * nc), *Am = malloc(sizeof(float) * na),
          *Bm = malloc(sizeof(float) * nb);
    memcpy(Cr, C0, sizeof(float) * nc);
    mimi_gemm(M, N, K, A, K, B, N, Cr, N, 1);
    memcpy(Am, A, sizeof(float) * na); fabs_all(Am, na);
    memcpy(Bm, B, sizeof(float) * nb); fabs_all(Bm, nb);
    memcpy(Cm, C0, sizeof(float) * nc); fabs_all(Cm, nc);
    mimi_gemm(M, N, K, Am, K, Bm, N, Cm, N, 1);
    float *er = malloc(sizeof(float) * nb), *eg = malloc(sizeof(float) * nb), *emag = malloc(sizeof(float) * nb);
    mimi_elu(er, B, nb);
    for (size_t i = 0; i < nb; i++) emag[i] = fabsf(er[i]) + 1e-30f;
    float *dA = gu_dalloc(sizeof(float) * na), *dB = gu_dalloc(sizeof(float) * nb), *dC = gu_dalloc(sizeof(float) * nc),
          *dE = gu_dalloc(sizeof(float) * nb);
    gu_h2d(dA, A, sizeof(float) * na);
    gu_h2d(dB, B, sizeof(float) * nb);
    gu_h2d(dC, C0, sizeof(float) * nc);
    CU_CHECK_FATAL(cu_mimi_gemm(dC, dA, dB, M, N, K, 1, 0));
    CU_CHECK_FATAL(cu_mimi_elu(dE, dB, nb, 0));
    gu_sync();
    float *C = malloc(sizeof(float) * nc);
    gu_d2h(C, dC, sizeof(float) * nc);
    gu_d2h(eg, dE, sizeof(float) * nb);
    double tol = 2 * sqrt((double)K + 1) + 16;
    long at, ate;
    double e1 = worst_err(C, Cr, Cm, ldexp(1.0, -24), nc, tol, &at);
    double e2 = worst_err(eg, er, emag, ldexp(1.0, -24), nb, 8.0, &ate);
    if (at >= 0) result(0, name, "gemm at %ld: gpu %.9g twin %.9g", at, C[at], Cr[at]);
    else if (ate >= 0) result(0, name, "elu of %.9g: gpu %.9g twin %.9g", B[ate], eg[ate], er[ate]);
    else result(1, name, "gemm worst %.3g units (tolerance %.0f); elu worst %.3g units of |elu| (tolerance 8)", e1, tol, e2);
    gu_dfree(dA); gu_dfree(dB); gu_dfree(dC); gu_dfree(dE);
    free(A); free(B); free(C0); free(Cr); free(Cm); free(Am); free(Bm); free(er); free(eg); free(emag); free(C);
}

/* One RVQ level on n items: random codebook with exact duplicates (entry
 * dup_of[k] repeated at a higher index) and items sitting on a duplicated
 * entry, so the lowest-index rule decides. */
static void mimi_rvq_case(int n, int Dq, int bins) {
    char name[96];
    snprintf(name, sizeof name, "mimi_rvq_level n=%d Dq=%d bins=%d", n, Dq, bins);
    if (!begin(name, 1, (double)n * Dq * bins)) return;
    gu_rng r = {31337};
    float *cb = malloc(sizeof(float) * bins * Dq), *nn = malloc(sizeof(float) * bins), *res = malloc(sizeof(float) * Dq * n);
    fill_normal(&r, cb, (size_t)bins * Dq, 1.0);
    memcpy(cb + (size_t)(bins - 1) * Dq, cb + (size_t)3 * Dq, sizeof(float) * Dq);   /* 3 == bins-1 */
    memcpy(cb + (size_t)(bins / 2) * Dq, cb + (size_t)3 * Dq, sizeof(float) * Dq);   /* 3 == bins/2 */
    for (int j = 0; j < bins; j++) {
        float s = 0.f;
        for (int d = 0; d < Dq; d++) s += cb[(size_t)j * Dq + d] * cb[(size_t)j * Dq + d];
        nn[j] = s;
    }
    fill_normal(&r, res, (size_t)Dq * n, 1.0);
    for (int d = 0; d < Dq; d++) res[(size_t)d * n + 0] = cb[(size_t)3 * Dq + d];   /* item 0 on the triple */
    float *dcb = gu_dalloc(sizeof(float) * bins * Dq), *dnn = gu_dalloc(sizeof(float) * bins),
          *dr = gu_dalloc(sizeof(float) * Dq * n);
    int32_t *dcodes = gu_dalloc(sizeof(int32_t) * n * 2);
    gu_h2d(dcb, cb, sizeof(float) * bins * Dq);
    gu_h2d(dnn, nn, sizeof(float) * bins);
    gu_h2d(dr, res, sizeof(float) * Dq * n);
    CU_CHECK_FATAL(cu_mimi_rvq_level(dcodes + 1, 2, dr, dcb, dnn, n, Dq, bins, 0));
    gu_sync();
    int32_t *codes = malloc(sizeof(int32_t) * n * 2);
    float *rg = malloc(sizeof(float) * Dq * n);
    gu_d2h(codes, dcodes, sizeof(int32_t) * n * 2);
    gu_d2h(rg, dr, sizeof(float) * Dq * n);
    int bad = -1;
    double worst_r = 0;
    for (int s = 0; s < n && bad < 0; s++) {
        double best = INFINITY, scale = 0;
        int bi = 0;
        for (int j = 0; j < bins; j++) {
            double dot = 0;
            for (int d = 0; d < Dq; d++) dot += (double)cb[(size_t)j * Dq + d] * res[(size_t)d * n + s];
            double dist = nn[j] - 2 * dot;
            if (dist < best) { best = dist; bi = j; }
            if (fabs(dist) > scale) scale = fabs(dist);
        }
        int g = codes[(size_t)s * 2 + 1];
        double dg = INFINITY;
        if (g >= 0 && g < bins) {
            double dot = 0;
            for (int d = 0; d < Dq; d++) dot += (double)cb[(size_t)g * Dq + d] * res[(size_t)d * n + s];
            dg = nn[g] - 2 * dot;
        }
        if (s == 0 ? g != 3 : !(g == bi || dg - best <= 1e-5 * scale)) bad = s;
        for (int d = 0; d < Dq && g >= 0 && g < bins; d++) {
            double want = (double)res[(size_t)d * n + s] - cb[(size_t)g * Dq + d];
            double e = fabs(rg[(size_t)d * n + s] - want) / (ldexp(1.0, -24) * (fabs(res[(size_t)d * n + s]) + fabs(cb[(size_t)g * Dq + d])));
            if (e > worst_r) worst_r = e;
        }
        if (bad < 0 && s == 0) (void)0;
    }
    if (bad >= 0) result(0, name, "item %d: gpu code %d (item 0 sits on entries 3, %d, %d: must be 3)", bad,
                         codes[(size_t)bad * 2 + 1], bins / 2, bins - 1);
    else if (worst_r > 2) result(0, name, "residual error %.3g units", worst_r);
    else result(1, name, "every code the nearest (duplicates: lowest index); residual within %.3g units", worst_r);
    gu_dfree(dcb); gu_dfree(dnn); gu_dfree(dr); gu_dfree(dcodes);
    free(cb); free(nn); free(res); free(codes); free(rg);
}

static void test_mimi_kernels(void) {
    /* as the codec calls them: a stride-1 dilated conv on the blocked path,
     * a strided downsampling conv (panel), the replicate-initialised
     * downsample, the one-channel last conv (raw w), a residual block's
     * 1x1 accumulate, a kept state longer than the input (the decoder's
     * first conv at 25 Hz), a transposed conv and the depthwise upsample */
    mimi_conv_case("conv", 0, 0, 5, 7, 3, 1, 2, 16, 1, 0, 1, 2);
    mimi_conv_case("conv", 0, 0, 4, 6, 8, 4, 1, 32, 1, 0, 0, 1);
    mimi_conv_case("down", 0, 0, 6, 6, 4, 2, 1, 2, 0, 1, 0, 1);
    mimi_conv_case("conv", 0, 0, 4, 1, 3, 1, 1, 20, 1, 0, 0, 0);
    mimi_conv_case("conv", 0, 0, 3, 5, 1, 1, 1, 16, 1, 0, 1, 2);
    mimi_conv_case("conv", 0, 0, 8, 6, 7, 1, 1, 2, 0, 0, 0, 1);
    /* enough input channels that the tiled kernel walks them in several chunks */
    mimi_conv_case("conv", 0, 0, 300, 20, 7, 1, 1, 2, 1, 0, 1, 2);
    mimi_conv_case("down", 0, 0, 150, 40, 8, 4, 1, 64, 0, 0, 0, 1);
    mimi_conv_case("convtr", 1, 0, 6, 3, 8, 4, 1, 3, 1, 0, 0, 1);
    mimi_conv_case("convtr", 1, 0, 200, 24, 16, 8, 1, 2, 0, 0, 1, 1);
    mimi_conv_case("convtr", 1, 0, 400, 6, 8, 4, 1, 40, 1, 0, 0, 1);
    /* grids wide enough that each thread takes several output channels */
    mimi_conv_case("conv", 0, 0, 4, 24, 3, 1, 1, 2048, 1, 0, 1, 2);
    /* items split across column tiles: each item's state kept by the tile with its last column */
    mimi_conv_case("conv", 0, 0, 6, 10, 3, 1, 2, 100, 1, 0, 0, 2);
    mimi_conv_case("convtr", 1, 0, 5, 12, 8, 4, 1, 600, 0, 0, 1, 1);
    mimi_conv_case("up", 1, 1, 5, 5, 4, 2, 1, 1, 0, 0, 0, 0);
    mimi_conv_case("up", 1, 1, 40, 40, 4, 2, 1, 3, 0, 0, 1, 0);
    mimi_gemm_elu_case(9, 5, 37);
    mimi_gemm_elu_case(70, 2, 600);
    mimi_rvq_case(3, 16, 64);
    mimi_rvq_case(2, 24, 300);
}

/* ---- the depformer sub-step in one launch (cu_dep_chain) ----------------- */

/* Set on the emulator only (weak, as emu_last_kernel). */
void emu_set_block_order(int order) __attribute__((weak));   /* emu_order: 0 forward, 1 reverse, 2 random */

/* A depformer's weights at one sub-step, on the device: bf16 rows, or
 * (w8) int8 rows with their scales in buffers of their own. */
typedef struct dc_mat {
    void *w;
    float *s;
} dc_mat;

static dc_mat dc_mat_make(gu_rng *r, int N, int K, int w8) {
    dc_mat m = {gu_dalloc((size_t)N * K * (w8 ? 1 : 2)), NULL};
    if (w8) {
        int8_t *q = i8_table(r, (size_t)N * K);
        float *s = scale_table(r, (size_t)N);
        m.s = gu_dalloc(sizeof(float) * N);
        gu_h2d(m.w, q, (size_t)N * K);
        gu_h2d(m.s, s, sizeof(float) * N);
        free(q);
        free(s);
    } else {
        uint16_t *b = malloc((size_t)N * K * 2);
        for (size_t i = 0; i < (size_t)N * K; i++) b[i] = st_f32_to_bf16((float)(0.2 * gu_normal(r)));
        gu_h2d(m.w, b, (size_t)N * K * 2);
        free(b);
    }
    return m;
}

/* The sub-step as its separate launches (dep_substep's matvec path before
 * the chain): per layer QKV with norm1, the attention in the
 * out-projection with the add, ffn_in with norm2, the gated ffn_out with
 * the add; then the head. */
static void dc_launches(const cu_dep_chain_args *a) {
    const cu_fuse add = {.acc = 1};
    const int B = a->B, D = a->D, H = a->H;
    for (int l = 0; l < a->layers; l++) {
        const cu_dep_chain_layer *L = &a->layer[l];
        const cu_fuse n1 = {.norm = L->norm1, .eps = a->eps}, n2 = {.norm = L->norm2, .eps = a->eps};
        if (a->w8) {
            CU_CHECK_FATAL(cu_matvec_q8_fused(a->dqkv, a->dy, L->attn_in, L->attn_in_s, B, 3 * D, D, &n1, 0));
            CU_CHECK_FATAL(cu_matvec_q8_dep_att(a->dy, a->dqkv, L->k_cache, L->v_cache, a->cache_stride, a->kv8, a->k,
                                                a->window, L->attn_out, L->attn_out_s, B, D, D, a->heads, a->head_dim,
                                                0));
            CU_CHECK_FATAL(cu_matvec_q8_fused(a->du, a->dy, L->ffn_in, L->ffn_in_s, B, 2 * H, D, &n2, 0));
            CU_CHECK_FATAL(cu_matvec_q8_gated_fused(a->dy, a->du, L->ffn_out, L->ffn_out_s, B, D, H, &add, 0));
        } else {
            CU_CHECK_FATAL(cu_matvec_bf16_fused(a->dqkv, a->dy, L->attn_in, B, 3 * D, D, &n1, 0));
            CU_CHECK_FATAL(cu_matvec_bf16_dep_att(a->dy, a->dqkv, L->k_cache, L->v_cache, a->cache_stride, a->kv8,
                                                  a->k, a->window, L->attn_out, B, D, D, a->heads, a->head_dim, 0));
            CU_CHECK_FATAL(cu_matvec_bf16_fused(a->du, a->dy, L->ffn_in, B, 2 * H, D, &n2, 0));
            CU_CHECK_FATAL(cu_matvec_bf16_gated_fused(a->dy, a->du, L->ffn_out, B, D, H, &add, 0));
        }
    }
    if (a->w8) CU_CHECK_FATAL(cu_matvec_q8(a->logits, a->dy, a->head, a->head_s, B, a->card, D, 0));
    else CU_CHECK_FATAL(cu_matvec_bf16(a->logits, a->dy, a->head, B, a->card, D, 0));
}

/* Sub-steps 0 .. K-1 on the operands of a (each its own logits rows of nl,
 * its input dy from din, its output dy to dout; ny floats a sub-step):
 * the separate launches (chain 0, synchronous) or cu_dep_chain on st
 * (asynchronous copies: a capture records them). */
static void dc_substeps(const cu_dep_chain_args *a, int K, const float *din, float *dout, size_t ny, size_t nl,
                        int chain, cudaStream_t st) {
    for (int k = 0; k < K; k++) {
        cu_dep_chain_args s = *a;
        s.k = k;
        s.logits = a->logits + (size_t)k * nl;
        CU_CHECK_FATAL(cudaMemcpyAsync(s.dy, din + k * ny, sizeof(float) * ny, cudaMemcpyDeviceToDevice, st));
        if (chain) CU_CHECK_FATAL(cu_dep_chain(&s, st));
        else dc_launches(&s);
        CU_CHECK_FATAL(cudaMemcpyAsync(dout + k * ny, s.dy, sizeof(float) * ny, cudaMemcpyDeviceToDevice, st));
    }
}

/* cu_dep_chain against the separate launches (dc_launches) over sub-steps
 * 0..K-1 of a 2-layer depformer: dy, the logits and both caches bit for
 * bit, one counter block for every launch (each launch must leave it at 0
 * for the next). On the emulator in every block order (forward, reverse,
 * random: the tickets, not the order, must decide the stages; under
 * engine_test_emu.sh's EMU_RACE=1 the race check follows the chain's
 * publications), and (graph)
 * the K launches captured into a graph replayed twice. w8: int8 rows; kv8:
 * the int8 cache; B > 8: two batch tiles. */
static void dep_chain_case(int B, int w8, int kv8, int graph) {
    char name[96];
    snprintf(name, sizeof name, "dep_chain B=%d%s%s%s", B, w8 ? " w8" : "", kv8 ? " kv8" : "",
             graph ? " graph" : "");
    /* a few blocks per stage (the emulator's time); window < K: the last sub-step drops key 0 */
    const int heads = 2, hd = 8, D = heads * hd, H = 8, card = 12, NL = 2, K = 3, window = 2;
    if (!begin(name, 1, (double)B * NL * K * (3 * D * D + D * D + 3 * H * D))) return;
    gu_rng r = {37};
    const size_t stride = (size_t)LM_MAX_DEP_Q * D, ncache = (size_t)B * stride, ny = (size_t)B * D,
                 nl = (size_t)B * card;
    cu_dep_chain_args a[2];
    memset(a, 0, sizeof a);
    for (int v = 0; v < 2; v++) {   /* v 0: the launches; 1: the chain. The same weights. */
        a[v] = (cu_dep_chain_args){.dy = gu_dalloc(sizeof(float) * ny), .dqkv = gu_dalloc(sizeof(float) * 3 * ny),
                                   .du = gu_dalloc(sizeof(float) * 2 * B * H),
                                   .logits = gu_dalloc(sizeof(float) * K * nl), .cache_stride = stride, .w8 = w8,
                                   .kv8 = kv8, .layers = NL, .B = B, .D = D, .H = H, .card = card, .heads = heads,
                                   .head_dim = hd, .window = window, .eps = 1e-5f};
        for (int l = 0; l < NL; l++) {
            a[v].layer[l].k_cache = gu_dalloc(sizeof(float) * ncache);
            a[v].layer[l].v_cache = gu_dalloc(sizeof(float) * ncache);
        }
    }
    a[1].ctl = gu_dalloc(sizeof(cu_dep_chain_ctl));
    CU_CHECK_FATAL(cudaMemset(a[1].ctl, 0, sizeof(cu_dep_chain_ctl)));
    dc_mat mats[4 * 2 + 1];
    for (int l = 0; l < NL; l++) {
        cu_dep_chain_layer *L = &a[0].layer[l];
        dc_mat m[4] = {dc_mat_make(&r, 3 * D, D, w8), dc_mat_make(&r, D, D, w8), dc_mat_make(&r, 2 * H, D, w8),
                       dc_mat_make(&r, D, H, w8)};
        memcpy(&mats[4 * l], m, sizeof m);
        L->attn_in = m[0].w; L->attn_in_s = m[0].s;
        L->attn_out = m[1].w; L->attn_out_s = m[1].s;
        L->ffn_in = m[2].w; L->ffn_in_s = m[2].s;
        L->ffn_out = m[3].w; L->ffn_out_s = m[3].s;
        float al[2][64];
        for (int i = 0; i < 2 * D; i++) al[i / D][i % D] = (float)(1.0 + 0.1 * gu_normal(&r));
        float *n = gu_dalloc(sizeof(float) * 2 * D);
        gu_h2d(n, al[0], sizeof(float) * D);
        gu_h2d(n + D, al[1], sizeof(float) * D);
        L->norm1 = n;
        L->norm2 = n + D;
        float *kc = a[1].layer[l].k_cache, *vc = a[1].layer[l].v_cache;
        a[1].layer[l] = *L;
        a[1].layer[l].k_cache = kc;
        a[1].layer[l].v_cache = vc;
    }
    mats[8] = dc_mat_make(&r, card, D, w8);
    a[0].head = a[1].head = mats[8].w;
    a[0].head_s = a[1].head_s = mats[8].s;
    /* the inputs of every sub-step, and the launches' results */
    float *in = malloc(sizeof(float) * K * ny), *want = malloc(sizeof(float) * K * (ny + nl));
    float *got = malloc(sizeof(float) * K * (ny + nl));
    float *cw = malloc(sizeof(float) * 4 * NL * ncache), *cg = malloc(sizeof(float) * 4 * NL * ncache);
    for (size_t i = 0; i < K * ny; i++) in[i] = (float)gu_normal(&r);
    float *din = gu_dalloc(sizeof(float) * K * ny), *dout = gu_dalloc(sizeof(float) * K * ny);
    gu_h2d(din, in, sizeof(float) * K * ny);
    for (int v = 0; v < 2; v++)
        for (int l = 0; l < NL; l++) {
            CU_CHECK_FATAL(cudaMemset(a[v].layer[l].k_cache, 0, sizeof(float) * ncache));
            CU_CHECK_FATAL(cudaMemset(a[v].layer[l].v_cache, 0, sizeof(float) * ncache));
        }
    dc_substeps(&a[0], K, din, dout, ny, nl, 0, 0);
    gu_sync();
    gu_d2h(want, dout, sizeof(float) * K * ny);
    gu_d2h(want + K * ny, a[0].logits, sizeof(float) * K * nl);
    for (int l = 0; l < NL; l++) {
        gu_d2h(cw + (2 * l) * ncache, a[0].layer[l].k_cache, sizeof(float) * ncache);
        gu_d2h(cw + (2 * l + 1) * ncache, a[0].layer[l].v_cache, sizeof(float) * ncache);
    }
    /* the chain: each block order on the emulator (one pass on a device), or graph replays */
    const int passes = graph ? 2 : emu_set_block_order ? 3 : 1;
    const char *bad = NULL;
    long at = -1;
    int bad_pass = -1;
    cudaStream_t st = 0;
    cudaGraphExec_t exec = NULL;
    if (graph) {
        CU_CHECK_FATAL(cudaStreamCreate(&st));
        cudaGraph_t g;
        CU_CHECK_FATAL(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        dc_substeps(&a[1], K, din, dout, ny, nl, 1, st);
        CU_CHECK_FATAL(cudaStreamEndCapture(st, &g));
        CU_CHECK_FATAL(cudaGraphInstantiate(&exec, g, 0));
        CU_CHECK_FATAL(cudaGraphDestroy(g));
    }
    for (int p = 0; p < passes && !bad; p++) {
        if (emu_set_block_order) emu_set_block_order(graph ? 2 : p);
        CU_CHECK_FATAL(cudaMemset(dout, 0, sizeof(float) * K * ny));
        CU_CHECK_FATAL(cudaMemset(a[1].logits, 0, sizeof(float) * K * nl));
        for (int l = 0; l < NL; l++) {
            CU_CHECK_FATAL(cudaMemset(a[1].layer[l].k_cache, 0, sizeof(float) * ncache));
            CU_CHECK_FATAL(cudaMemset(a[1].layer[l].v_cache, 0, sizeof(float) * ncache));
        }
        if (graph) {
            CU_CHECK_FATAL(cudaGraphLaunch(exec, st));
            CU_CHECK_FATAL(cudaStreamSynchronize(st));
        } else {
            dc_substeps(&a[1], K, din, dout, ny, nl, 1, 0);
        }
        gu_sync();
        gu_d2h(got, dout, sizeof(float) * K * ny);
        gu_d2h(got + K * ny, a[1].logits, sizeof(float) * K * nl);
        for (int l = 0; l < NL; l++) {
            gu_d2h(cg + (2 * l) * ncache, a[1].layer[l].k_cache, sizeof(float) * ncache);
            gu_d2h(cg + (2 * l + 1) * ncache, a[1].layer[l].v_cache, sizeof(float) * ncache);
        }
        for (size_t i = 0; i < K * (ny + nl) && !bad; i++)
            if (memcmp(&got[i], &want[i], sizeof(float))) {
                bad = i < K * ny ? "dy" : "logits";
                at = (long)i;
            }
        if (!bad && memcmp(cg, cw, sizeof(float) * 2 * NL * ncache)) bad = "caches";
        if (bad) bad_pass = p;
    }
    if (emu_set_block_order) emu_set_block_order(0);
    const char *ran = emu_last_kernel ? emu_last_kernel() : "";
    const char *want_k = w8 ? "dep_chain_q8<" : "dep_chain_bf16<";
    if (!bad && emu_last_kernel && strncmp(ran, want_k, strlen(want_k))) bad = "the chain's kernel did not run";
    if (bad && at >= 0)
        result(0, name, "pass %d: %s differs at %ld (sub-step %ld): chain %.9g, launches %.9g", bad_pass, bad, at,
               (at < (long)(K * ny) ? at / (long)ny : (at - (long)(K * ny)) / (long)nl), got[at], want[at]);
    else if (bad) result(0, name, "pass %d: %s (%s)", bad_pass, bad, ran);
    else
        result(1, name, "%d sub-steps x %d %s: dy, logits and caches bit for bit the launches' (%s)", K, passes,
               graph ? "graph replays" : "block orders", ran);
    if (exec) cudaGraphExecDestroy(exec);
    if (st) cudaStreamDestroy(st);
    for (int v = 0; v < 2; v++) {
        gu_dfree(a[v].dy); gu_dfree(a[v].dqkv); gu_dfree(a[v].du); gu_dfree(a[v].logits);
        for (int l = 0; l < NL; l++) {
            gu_dfree(a[v].layer[l].k_cache);
            gu_dfree(a[v].layer[l].v_cache);
        }
    }
    for (int l = 0; l < NL; l++) gu_dfree((void *)a[0].layer[l].norm1);
    for (int i = 0; i < 4 * NL + 1; i++) {
        gu_dfree(mats[i].w);
        if (mats[i].s) gu_dfree(mats[i].s);
    }
    gu_dfree(a[1].ctl); gu_dfree(din); gu_dfree(dout);
    free(in); free(want); free(got); free(cw); free(cg);
}

/* Every (weights, cache) pair at B=1; B=8 and B=12 (two batch tiles, 8
 * and 4 rows) each with both weight schemes and both caches, not all four
 * pairs (the emulator's time). */
static void test_dep_chain(void) {
    for (int w8 = 0; w8 < 2; w8++)
        for (int kv8 = 0; kv8 < 2; kv8++) dep_chain_case(1, w8, kv8, 0);
    dep_chain_case(8, 0, 0, 0);
    dep_chain_case(8, 1, 1, 0);
    dep_chain_case(12, 0, 1, 0);
    dep_chain_case(12, 1, 0, 0);
    dep_chain_case(1, 0, 0, 1);
    dep_chain_case(12, 1, 1, 1);
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
    test_lm_kernels();
    test_q8_kernels();
    test_fused();
    test_rope_fused();
    test_dep_chain();
    test_mimi_kernels();
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? 1 : 0;
}
