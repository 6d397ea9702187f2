/* check_plugin.c - the plugin loader (engine/base/plugin.c) with the CUDA
 * plugin and with broken plugins, and the C twins of the CUDA kernels (the
 * CPU backend's kern_matvec_bf16, kern_rmsnorm, samp_topk_rows; the sampler
 * kernel's radix select in cuda/samp_core.h) against simple, obviously
 * right references. Runs on any machine: the
 * kernels themselves are tested by engine-test where a device exists.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "backend.h"
#include "plugin.h"
#include "kern_cpu.h"
#include "samp.h"
#include "samp_core.h"
#include "st.h"

#ifndef CU_PLUGIN_BUILT
#define CU_PLUGIN_BUILT 0
#endif

/* A small deterministic generator for inputs (splitmix64). */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) {
    return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0);
}
static double gauss(uint64_t *s) {
    return sqrt(-2.0 * log(1.0 - unif(s))) * cos(6.283185307179586 * unif(s));
}

/* ---- the loader ---------------------------------------------------------- */

START_TEST(test_cuda_plugin) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", check_build_dir());
    setenv("MOSHID_PLUGIN_DIR", dir, 1);
    ms_error err = {0};
    const moshid_plugin *p = plugin_load("cuda", &err);
    if (!CU_PLUGIN_BUILT) {
        /* built without nvcc: the loader must say so, not crash */
        ck_assert_ptr_null(p);
        ck_assert_int_eq(err.code, MS_ERR_NOTFOUND);
        ck_assert_msg(strstr(err.msg, "libmoshid-cuda.so"), "%s", err.msg);
        fprintf(stderr, "CUDA plugin not built (no nvcc, CUDA=0 or sanitizers): loader refusal checked, probe skipped\n");
        return;
    }
    ck_assert_msg(p != NULL, "plugin_load: %s", err.msg);
    ck_assert_int_eq(p->abi, MOSHID_PLUGIN_ABI);
    ck_assert_str_eq(p->name, "cuda");
    ck_assert_msg(strstr(p->build, "sm_80 sm_89 sm_90") && strstr(p->build, "PTX"), "build: %s", p->build);
    /* the CUDA backend table (cuda/cu_backend.c): interface v2, every entry
     * the dispatcher cannot do without */
    ck_assert_ptr_nonnull(p->backend);
    const lm_backend_ops *ops = p->backend;
    ck_assert_str_eq(ops->name, "cuda");
    ck_assert(ops->open && ops->close && ops->config && ops->step && ops->prefill && ops->reset_slot && ops->pos);
    ck_assert(ops->kv_snapshot && ops->kv_restore && ops->kv_snap_free && ops->kv_snap_info && ops->stats);
    char what[512];
    int n = p->probe(what, sizeof what);
    ck_assert_msg(n >= 0, "probe failed: %s", what);
    if (n == 0)
        ck_assert_msg(strncmp(what, "no CUDA device", 14) == 0, "what: %s", what);
    else
        ck_assert_msg(strstr(what, " sm_"), "what: %s", what);
    fprintf(stderr, "probe: %d usable device(s): %s\n", n, what);
    /* a short buffer is truncated, never overrun; no buffer at all is fine */
    char small[16];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(p->probe(small, 8), n);
    ck_assert_int_eq(small[7], '\0');
    ck_assert_int_eq(small[8], 'x');
    ck_assert_int_eq(p->probe(NULL, 0), n);
    /* loaded once: the same descriptor again */
    ck_assert_ptr_eq(plugin_load("cuda", &err), p);
}
END_TEST

START_TEST(test_broken_plugins) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/plugins", check_build_dir());
    setenv("MOSHID_PLUGIN_DIR", dir, 1);
    ms_error err = {0};
    ck_assert_ptr_null(plugin_load("badabi", &err));
    ck_assert_msg(strstr(err.msg, "plugin ABI 999") && strstr(err.msg, "libmoshid-badabi.so"), "%s", err.msg);
    ck_assert_ptr_null(plugin_load("nosym", &err));
    ck_assert_msg(strstr(err.msg, "no moshid_plugin_entry"), "%s", err.msg);
    ck_assert_ptr_null(plugin_load("nonexistent", &err));
    ck_assert_int_eq(err.code, MS_ERR_NOTFOUND);
    ck_assert_msg(strstr(err.msg, "libmoshid-nonexistent.so not found"), "%s", err.msg);
}
END_TEST

/* ---- matvec twin --------------------------------------------------------- */

START_TEST(test_matvec_twin) {
    static const int shapes[][3] = {{1, 1, 1}, {1, 5, 7}, {3, 17, 64}, {2, 9, 1000}, {4, 33, 4096}};
    uint64_t s = 7;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int B = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        for (int integers = 0; integers < 2; integers++) {
            float *x = malloc(sizeof(float) * B * K), *y = malloc(sizeof(float) * B * N);
            uint16_t *w = malloc(sizeof(uint16_t) * N * K);
            for (int i = 0; i < B * K; i++) x[i] = integers ? (float)(int)(mix(&s) % 7) - 3 : (float)gauss(&s);
            for (int i = 0; i < N * K; i++)
                w[i] = st_f32_to_bf16(integers ? (float)(int)(mix(&s) % 9) - 4 : (float)(0.1 * gauss(&s)));
            kern_matvec_bf16(y, x, w, B, N, K, NULL);
            /* gamma_K = K u / (1 - K u): the classic bound on a float dot
             * product of K terms in any order; integers are exact. */
            double u = ldexp(1.0, -24), gamma = K * u / (1.0 - K * u);
            for (int b = 0; b < B; b++)
                for (int n = 0; n < N; n++) {
                    double exact = 0.0, mag = 0.0;
                    for (int k = 0; k < K; k++) {
                        double t = (double)x[b * K + k] * st_bf16_to_f32(w[n * K + k]);
                        exact += t;
                        mag += fabs(t);
                    }
                    double d = fabs(y[b * N + n] - exact);
                    ck_assert_msg(integers ? d == 0.0 : d <= gamma * mag, "B=%d N=%d K=%d at (%d,%d): %.9g vs %.9g", B,
                                  N, K, b, n, y[b * N + n], exact);
                }
            free(x); free(y); free(w);
        }
    }
    /* bf16 conversions: round to nearest even, exact on bf16 values, NaN kept */
    ck_assert_uint_eq(st_f32_to_bf16(1.0f), 0x3F80);
    ck_assert(st_bf16_to_f32(st_f32_to_bf16(-2.5f)) == -2.5f);
    ck_assert_uint_eq(st_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80);              /* tie to even */
    ck_assert_uint_eq(st_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3F82);          /* tie to even */
    ck_assert(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
}
END_TEST

/* ---- rmsnorm twin -------------------------------------------------------- */

START_TEST(test_rmsnorm_twin) {
    static const int shapes[][2] = {{1, 1}, {2, 7}, {3, 1024}, {1, 4096}};
    static const double scales[] = {1.0, 1e-4, 30.0};
    uint64_t s = 11;
    const float eps = 1e-8f;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (size_t sc = 0; sc < 3; sc++) {
            int B = shapes[c][0], C = shapes[c][1];
            float *x = malloc(sizeof(float) * B * C), *y = malloc(sizeof(float) * B * C), *a = malloc(sizeof(float) * C);
            for (int i = 0; i < B * C; i++) x[i] = (float)(scales[sc] * gauss(&s));
            for (int i = 0; i < C; i++) a[i] = (float)(1.0 + 0.3 * gauss(&s));
            kern_rmsnorm(y, x, a, B, C, eps);
            for (int b = 0; b < B; b++) {
                double ms = 0.0;
                for (int i = 0; i < C; i++) ms += (double)x[b * C + i] * x[b * C + i];
                ms /= C;
                for (int i = 0; i < C; i++) {
                    double want = x[b * C + i] * (double)a[i] / sqrt(ms + (double)eps);
                    ck_assert_msg(fabs(y[b * C + i] - want) <= 8 * ldexp(1.0, -24) * fabs(want),
                                  "B=%d C=%d scale=%g at (%d,%d): %.9g vs %.9g", B, C, scales[sc], b, i,
                                  y[b * C + i], want);
                }
            }
            /* in place */
            kern_rmsnorm(x, x, a, B, C, eps);
            ck_assert_mem_eq(x, y, sizeof(float) * B * C);
            free(x); free(y); free(a);
        }
    /* eps is inside the root: all-zero input gives zeros, not NaN */
    float z[4] = {0}, one[4] = {1, 1, 1, 1}, out[4];
    kern_rmsnorm(out, z, one, 1, 4, eps);
    for (int i = 0; i < 4; i++) ck_assert(out[i] == 0.0f);
}
END_TEST

/* ---- sampler twin -------------------------------------------------------- */

static int32_t sample1(const float *l, int N, float temp, int topk, uint64_t seed, uint64_t step, uint32_t stream) {
    samp_row r = {.seed = seed, .step = step, .temp = temp, .topk = topk};
    int32_t out = -1;
    int *scratch = malloc(sizeof(int) * (size_t)N);
    samp_topk_rows(&out, l, &r, 1, N, stream, scratch);
    free(scratch);
    ck_assert(out >= 0 && out < N);
    return out;
}

START_TEST(test_sample_greedy) {
    const float ties[] = {1, 5, 5, 2};
    ck_assert_int_eq(sample1(ties, 4, 0.0f, 0, 1, 0, 0), 1);     /* lowest index wins */
    ck_assert_int_eq(sample1(ties, 4, -1.0f, 2, 1, 0, 0), 1);    /* T < 0: greedy too */
    ck_assert_int_eq(sample1(ties, 4, NAN, 0, 1, 0, 0), 1);      /* T NaN: greedy */
    const float nan3[] = {NAN, 0.0f, NAN};
    ck_assert_int_eq(sample1(nan3, 3, 0.0f, 0, 1, 0, 0), 1);     /* NaN ranks as -inf */
    const float allnan[] = {NAN, NAN};
    ck_assert_int_eq(sample1(allnan, 2, 0.0f, 0, 1, 0, 0), 0);
    const float zeros[] = {-0.0f, 0.0f};
    ck_assert_int_eq(sample1(zeros, 2, 0.0f, 0, 1, 0, 0), 0);    /* -0 == +0: lowest index */
    const float infs[] = {-INFINITY, INFINITY, 3.0f, INFINITY};
    ck_assert_int_eq(sample1(infs, 4, 0.0f, 0, 1, 0, 0), 1);
    /* every row of a batch on its own */
    float l[3 * 5];
    uint64_t s = 3;
    for (int i = 0; i < 15; i++) l[i] = (float)gauss(&s);
    samp_row rows[3] = {{1, 2, 0.0f, 0}, {1, 2, 0.9f, 3}, {5, 9, 1.5f, 0}};
    int32_t out[3];
    int scratch[5];
    samp_topk_rows(out, l, rows, 3, 5, 4, scratch);
    for (int b = 0; b < 3; b++)
        ck_assert_int_eq(out[b], sample1(l + 5 * b, 5, rows[b].temp, rows[b].topk, rows[b].seed, rows[b].step, 4));
}
END_TEST

START_TEST(test_sample_topk_set) {
    /* ties at the boundary: the lower indices are in (k=2 of three 3s: 0, 2) */
    const float b[] = {3, 1, 3, 3, 0};
    for (uint64_t step = 0; step < 500; step++) {
        int32_t t = sample1(b, 5, 1.0f, 2, 9, step, 0);
        ck_assert_msg(t == 0 || t == 2, "picked %d", t);
    }
    /* random rows: always inside the top k of a sort; k=1 is the argmax */
    uint64_t s = 5;
    enum { N = 50 };
    float l[N];
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) l[i] = (float)(2.0 * gauss(&s));
        int rank_of[N];
        for (int i = 0; i < N; i++) {
            rank_of[i] = 0;
            for (int j = 0; j < N; j++) rank_of[i] += l[j] > l[i] || (l[j] == l[i] && j < i);
        }
        for (uint64_t step = 0; step < 100; step++) {
            int32_t t = sample1(l, N, 1.5f, 5, (uint64_t)rep, step, 1);
            ck_assert_msg(rank_of[t] < 5, "picked rank %d", rank_of[t]);
            ck_assert_int_eq(rank_of[sample1(l, N, 5.0f, 1, (uint64_t)rep, step, 1)], 0);
        }
    }
    /* deterministic, and the stream number changes the draw */
    for (int i = 0; i < N; i++) l[i] = 0.0f;
    int same = 0;
    for (uint64_t step = 0; step < 200; step++) {
        int32_t a = sample1(l, N, 1.0f, 0, 77, step, 1);
        ck_assert_int_eq(a, sample1(l, N, 1.0f, 0, 77, step, 1));
        same += a == sample1(l, N, 1.0f, 0, 77, step, 2);
    }
    ck_assert_msg(same < 20, "streams 1 and 2 agree %d times in 200 (expected ~4)", same);
    /* the uniform's extremes give a finite gumbel */
    ck_assert(isfinite(samp_gumbel(0.5 / 16777216.0)) && isfinite(samp_gumbel((16777215.0 + 0.5) / 16777216.0)));
}
END_TEST

/* Pearson chi-square of M draws against softmax(l / T) over the top k. */
static double chi_square(const float *l, int N, float temp, int topk, int M, int *df) {
    double p[16] = {0}, z = 0.0;
    int cnt[16] = {0};
    for (int i = 0; i < N; i++) {
        int rank = 0;
        for (int j = 0; j < N; j++) rank += l[j] > l[i] || (l[j] == l[i] && j < i);
        if (topk <= 0 || rank < topk) z += p[i] = exp((double)l[i] / temp);
    }
    for (int m = 0; m < M; m++) cnt[sample1(l, N, temp, topk, 2024, (uint64_t)m, 5)]++;
    double chi = 0.0;
    *df = -1;
    for (int i = 0; i < N; i++) {
        if (p[i] == 0.0) {
            ck_assert_msg(cnt[i] == 0, "index %d outside the top k drawn %d times", i, cnt[i]);
            continue;
        }
        double e = M * p[i] / z;
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        (*df)++;
    }
    return chi;
}

START_TEST(test_sample_distribution) {
    /* Thresholds: the chi-square quantile at p = 1e-4 for the degrees of
     * freedom (3: 21.11, 5: 25.74). The draws are deterministic (fixed
     * seed), so this either always passes or always fails; a wrong
     * temperature, a missing gumbel sign or a biased uniform fails it by
     * hundreds. */
    const float l[6] = {0.5f, 2.0f, -1.0f, 1.0f, 1.5f, 0.0f};
    int df;
    double chi = chi_square(l, 6, 0.8f, 4, 20000, &df);
    ck_assert_int_eq(df, 3);
    ck_assert_msg(chi < 21.11, "top-4 at T=0.8: chi2 %.2f (3 df)", chi);
    chi = chi_square(l, 6, 1.3f, 0, 20000, &df);
    ck_assert_int_eq(df, 5);
    ck_assert_msg(chi < 25.74, "all 6 at T=1.3: chi2 %.2f (5 df)", chi);
    /* the test has teeth: the same draws judged at another temperature fail */
    double p[6], z = 0.0;
    int cnt[6] = {0};
    for (int i = 0; i < 6; i++) z += p[i] = exp(l[i] / 1.0);
    for (int m = 0; m < 20000; m++) cnt[sample1(l, 6, 1.3f, 0, 2024, (uint64_t)m, 5)]++;
    chi = 0.0;
    for (int i = 0; i < 6; i++) chi += (cnt[i] - 20000 * p[i] / z) * (cnt[i] - 20000 * p[i] / z) / (20000 * p[i] / z);
    ck_assert_msg(chi > 25.74, "T=1.3 draws look like T=1.0 (chi2 %.2f)", chi);
}
END_TEST

/* ---- the kernel's radix select, run on the host ------------------------ */

/* The kernel's sp_kth_key with a sequential histogram: the same passes and
 * the same samp_radix_pick. */
static uint64_t radix_kth(const float *l, int N, int k, int *passes) {
    uint64_t prefix = 0, mask = 0;
    int krem = k, done = 0;
    *passes = 0;
    for (int shift = 56; shift >= 0 && !done; shift -= 8) {
        unsigned int hist[256] = {0};
        for (int i = 0; i < N; i++) {
            uint64_t key = samp_key(l[i], (uint32_t)i);
            if ((key & mask) == prefix) hist[(key >> shift) & 0xFF]++;
        }
        int d = samp_radix_pick(hist, &krem, &done);
        prefix |= (uint64_t)d << shift;
        mask |= 0xFFull << shift;
        (*passes)++;
    }
    ck_assert(done);
    return prefix;
}

START_TEST(test_radix_select) {
    uint64_t s = 99;
    float l[400];
    int max_passes = 0;
    for (int rep = 0; rep < 300; rep++) {
        int N = 1 + (int)(mix(&s) % 400), kind = rep % 4;
        for (int i = 0; i < N; i++) {
            double v = 3.0 * gauss(&s);
            if (kind == 1) v = round(v);                    /* many ties */
            if (kind == 2) v = 0.25;                        /* all equal */
            if (kind == 3 && mix(&s) % 5 == 0) v = (mix(&s) & 1) ? -INFINITY : NAN;
            l[i] = (float)v;
        }
        for (int k = 1; k < N; k += 1 + N / 7) {
            int passes;
            uint64_t thr = radix_kth(l, N, k, &passes);
            if (passes > max_passes) max_passes = passes;
            int in = 0;
            for (int i = 0; i < N; i++) {
                int rank = 0;   /* rank by (value, lower index), NaN as -inf */
                float vi = isnan(l[i]) ? -INFINITY : l[i];
                for (int j = 0; j < N; j++) {
                    float vj = isnan(l[j]) ? -INFINITY : l[j];
                    rank += vj > vi || (vj == vi && j < i);
                }
                int member = samp_key(l[i], (uint32_t)i) >= thr;
                ck_assert_msg(member == (rank < k), "N=%d k=%d i=%d rank=%d member=%d", N, k, i, rank, member);
                in += member;
            }
            ck_assert_int_eq(in, k);
        }
    }
    ck_assert_int_le(max_passes, 8);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("plugin");
    TCase *tc = tcase_new("loader");
    tcase_add_test(tc, test_cuda_plugin);
    tcase_add_test(tc, test_broken_plugins);
    suite_add_tcase(s, tc);
    tc = tcase_new("twins");
    tcase_add_test(tc, test_matvec_twin);
    tcase_add_test(tc, test_rmsnorm_twin);
    tcase_add_test(tc, test_sample_greedy);
    tcase_add_test(tc, test_sample_topk_set);
    tcase_add_test(tc, test_sample_distribution);
    tcase_add_test(tc, test_radix_select);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
