/* check_samp.c - greedy ties, top-k + temperature distribution (chi-square
 * against softmax(top-k logits / T)), determinism of the keyed noise, and
 * the CPU sampler against the CUDA sampler's logic replayed on the host
 * (cuda/samp_core.h): the same tokens on the same logits and seeds. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "rng.h"
#include "samp.h"
#include "samp_core.h"

START_TEST(test_greedy_ties) {
    float a[] = {1, 3, 3, 2};
    ck_assert_int_eq(samp_greedy(a, 4), 1);
    float b[] = {5, 5, 5};
    ck_assert_int_eq(samp_greedy(b, 3), 0);
    float c[] = {NAN, -1, 7, 7};
    ck_assert_int_eq(samp_greedy(c, 4), 2);
    float e[] = {NAN, -INFINITY, NAN};   /* NaN ranks as -inf: tie, lowest index */
    ck_assert_int_eq(samp_greedy(e, 3), 0);
    float z[] = {-0.0f, 0.0f};           /* -0 ranks as +0 */
    ck_assert_int_eq(samp_greedy(z, 2), 0);
    float d[] = {-INFINITY, -INFINITY};
    ck_assert_int_eq(samp_greedy(d, 2), 0);
    int scratch[4];
    /* temperature 0 is greedy whatever the seed */
    for (uint64_t s = 0; s < 50; s++) ck_assert_int_eq(samp_topk(a, 4, 0.0f, 2, s, s, 0, scratch), 1);
}
END_TEST

/* chi-square of n draws against softmax(top-k(logits) / T) */
static double chi2(const float *l, int n, float T, int k, uint32_t stream, int draws, int *outside) {
    int cnt[64] = {0}, scratch[64];
    for (int i = 0; i < draws; i++) cnt[samp_topk(l, n, T, k, 1234, (uint64_t)i, stream, scratch)]++;
    /* expected: the k largest (ties to the lower index) */
    int keep[64] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!keep[i] && (best < 0 || l[i] > l[best])) best = i;
        keep[best] = 1;
    }
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) if (keep[i] && l[i] / T > mx) mx = l[i] / T;
    for (int i = 0; i < n; i++) if (keep[i]) z += exp(l[i] / T - mx);
    double x2 = 0;
    *outside = 0;
    for (int i = 0; i < n; i++) {
        if (!keep[i]) {
            *outside += cnt[i];
            continue;
        }
        double e = draws * exp(l[i] / T - mx) / z;
        x2 += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    return x2;
}

START_TEST(test_topk_distribution) {
    float l[12] = {1.0f, 2.5f, -0.5f, 2.0f, 0.3f, 3.0f, 2.2f, -1.0f, 1.7f, 0.9f, 2.9f, 0.0f};
    static const struct { float T; int k; uint32_t stream; double limit; } cases[] = {
        /* limits: chi-square quantile for p = 1e-6 at df = k-1, rounded up
         * (df 4: 33.4; df 7: 39.3; df 11: 47.2): generous, fixed seed */
        {0.7f, 5, SAMP_STREAM_TEXT, 34},
        {0.8f, 8, SAMP_STREAM_AUDIO(3), 40},
        {1.5f, 0, SAMP_STREAM_AUDIO(0), 48},     /* no cut */
        {1.0f, 100, SAMP_STREAM_AUDIO(7), 48},   /* k > n: no cut */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int k = cases[c].k <= 0 || cases[c].k > 12 ? 12 : cases[c].k, outside;
        double x2 = chi2(l, 12, cases[c].T, k, cases[c].stream, 40000, &outside);
        fprintf(stderr, "topk case %zu: T=%.2f k=%d chi2=%.2f (df %d)\n", c, cases[c].T, k, x2, k - 1);
        ck_assert_msg(x2 < cases[c].limit, "case %zu: chi2 %.2f >= %.1f", c, x2, cases[c].limit);
        ck_assert_int_eq(outside, 0);
    }
}
END_TEST

START_TEST(test_topk_boundary_ties) {
    /* k = 2 among {5, 5, 5}: indices 0 and 1 kept, 2 never drawn */
    float l[3] = {5, 5, 5};
    int scratch[3], seen[3] = {0};
    for (int i = 0; i < 2000; i++) seen[samp_topk(l, 3, 1.0f, 2, 7, (uint64_t)i, 0, scratch)]++;
    ck_assert_int_eq(seen[2], 0);
    ck_assert_int_gt(seen[0], 800);
    ck_assert_int_gt(seen[1], 800);
}
END_TEST

START_TEST(test_keyed_noise) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int scratch[8];
    /* a pure function of (seed, step, stream) */
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(samp_topk(l, 8, 1, 0, 42, (uint64_t)i, 3, scratch),
                         samp_topk(l, 8, 1, 0, 42, (uint64_t)i, 3, scratch));
    /* different streams and seeds draw differently */
    int same_stream = 0, same_seed = 0;
    for (int i = 0; i < 400; i++) {
        same_stream += samp_topk(l, 8, 1, 0, 42, (uint64_t)i, 0, scratch) == samp_topk(l, 8, 1, 0, 42, (uint64_t)i, 1, scratch);
        same_seed += samp_topk(l, 8, 1, 0, 42, (uint64_t)i, 0, scratch) == samp_topk(l, 8, 1, 0, 43, (uint64_t)i, 0, scratch);
    }
    ck_assert_int_lt(same_stream, 100);   /* about 50 expected (1/8) */
    ck_assert_int_lt(same_seed, 100);
    /* u is never 0 or 1, even at the extreme random words, so G is finite
     * (rng_uniform in float rounded the top values to 1.0) */
    ck_assert(rng_unit(0) > 0 && rng_unit(0xFFFFFFFFu) < 1);
    ck_assert(isfinite(-log(-log(rng_unit(0)))) && isfinite(-log(-log(rng_unit(0xFFFFFFFFu)))));
    for (uint32_t i = 0; i < 100000; i++) {
        double u = rng_uniform(3, 4, 5, i);
        ck_assert(u > 0 && u < 1 && u == rng_unit(rng_bits(3, 4, 5, i)));
    }
    /* the Gumbel noise itself: mean ~ Euler-Mascheroni 0.5772 */
    double m = 0;
    for (uint32_t i = 0; i < 100000; i++) m += samp_gumbel(rng_uniform(9, 1, 2, i));
    m /= 100000;
    ck_assert_msg(fabs(m - 0.5772) < 0.02, "gumbel mean %.4f", m);
}
END_TEST

/* ---- the CPU sampler against the GPU sampler's logic -------------------- */

/* Test inputs (splitmix64; not the sampler's RNG). */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }
static double gauss(uint64_t *s) { return sqrt(-2.0 * log(1.0 - unif(s))) * cos(6.283185307179586 * unif(s)); }

/* Kinds of logit rows, chosen for the places where a heap and a radix
 * select could part ways: ties at the k-th place, -inf/NaN/+inf entries,
 * fewer finite logits than k, signed zeros, one value everywhere. */
enum {
    LK_NORMAL,   /* 3 N(0, 1): the usual spread */
    LK_TIES,     /* rounded to 0.5: many ties, also at the k-th place */
    LK_NEGINF,   /* 10% -inf */
    LK_NAN,      /* 5% NaN, 5% -inf (NaN ranks and scores as -inf) */
    LK_FEWFIN,   /* all -inf but 3 */
    LK_ALLNEG,   /* all -inf */
    LK_POSINF,   /* 2% +inf (ties among +inf scores) */
    LK_HUGE,     /* +-1e38 and tiny values (quotients overflow) */
    LK_ZEROS,    /* -0, +0 and +-1 only */
    LK_FLAT,     /* one value everywhere */
    LK_KINDS
};
static const char *lk_names[LK_KINDS] = {"normal", "ties", "-inf", "nan", "few-finite", "all--inf",
                                         "+inf", "huge", "zeros", "flat"};

static float logit(int kind, uint64_t *s) {
    double v = 3.0 * gauss(s);
    uint64_t r = mix(s) % 100;
    switch (kind) {
    case LK_TIES: return (float)(round(v * 2.0) / 2.0);
    case LK_NEGINF: return r < 10 ? -INFINITY : (float)v;
    case LK_NAN: return r < 5 ? NAN : r < 10 ? -INFINITY : (float)v;
    case LK_ALLNEG: return -INFINITY;
    case LK_POSINF: return r < 2 ? INFINITY : (float)v;
    case LK_HUGE: return r < 30 ? (r & 1 ? 1e38f : -1e38f) : (float)(v * 1e-30);
    case LK_ZEROS: return r < 40 ? -0.0f : r < 80 ? 0.0f : r < 90 ? 1.0f : -1.0f;
    case LK_FLAT: return 1.25f;
    default: return (float)v;
    }
}

START_TEST(test_cpu_vs_kernel) {
    /* vocabulary sizes: the audio (2048) and text (32000) cards, and small
     * and odd ones, with rows per size so a size costs about the same;
     * k: all (0, N, and > N, < 0 on the small sizes), 1 (the argmax), 2,
     * the official 25 and 250, N - 1; temperatures: the official 0.7 and
     * 1.0, greedy (0, < 0, NaN), near-greedy (1e-3, and 1e-38, whose
     * quotients overflow to inf), flat (30). Every (size, kind) has its rows
     * of logits; every (k, T) draws on them with fresh seeds and steps and
     * the next of five RNG streams. */
    static const int sizes[] = {1, 2, 5, 77, 300, 2048, 32000};
    static const float temps[] = {0.0f, 0.7f, 1.0f, -1.0f, NAN, 1e-3f, 1e-38f, 30.0f};
    static const uint32_t streams[] = {SAMP_STREAM_TEXT, SAMP_STREAM_AUDIO(0), SAMP_STREAM_AUDIO(7),
                                       SAMP_STREAM_AUDIO(15), 0xFFFFFFFFu};
    enum { N_K = 9, N_T = sizeof temps / sizeof temps[0], MAX_ROWS = 32 };
    uint64_t s = 2025;
    long cases = 0, rows_total = 0, random_rows = 0, off_greedy = 0, seed_moved = 0, seed_rows = 0;
    int max_passes = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int N = sizes[si];
        int R = 25000 / N;
        R = R < 2 ? 2 : R > MAX_ROWS ? MAX_ROWS : R;
        const int ks[N_K] = {0, 1, 2, 25, 250, N - 1, N, N + 3, -5};
        float *l = malloc(sizeof(float) * (size_t)R * N);   /* (R, N) */
        int *scratch = malloc(sizeof(int) * (size_t)N);      /* (N) */
        for (int kind = 0; kind < LK_KINDS; kind++) {
            int greedy[MAX_ROWS];
            for (int b = 0; b < R; b++) {
                for (int i = 0; i < N; i++) l[(size_t)b * N + i] = logit(kind, &s);
                if (kind == LK_FEWFIN)
                    for (int j = 0; j < 3 && j < N; j++) l[(size_t)b * N + mix(&s) % (uint64_t)N] = (float)gauss(&s);
                greedy[b] = samp_greedy(l + (size_t)b * N, N);
            }
            for (int ki = 0; ki < N_K; ki++)
                for (int ti = 0; ti < N_T; ti++) {
                    const int k = ks[ki], keff = k <= 0 || k >= N ? N : k;
                    if (N > 300 && (k < 0 || k > N)) continue;   /* the same as k = N; checked on small N */
                    const float T = temps[ti];
                    const uint32_t stream = streams[(size_t)cases % (sizeof streams / sizeof streams[0])];
                    samp_row rows[MAX_ROWS], moved[MAX_ROWS];
                    int32_t gpu[MAX_ROWS], gpu_moved[MAX_ROWS];
                    for (int b = 0; b < R; b++) {
                        /* seeds of every size; steps past 2^32 (both counter words) too */
                        uint64_t seed = mix(&s), shift = mix(&s) % 64;
                        uint64_t step = mix(&s) % 3 ? mix(&s) % 5000 : mix(&s);
                        seed >>= shift;
                        rows[b] = (samp_row){.seed = seed, .step = step, .temp = T, .topk = k};
                        moved[b] = rows[b];
                        moved[b].seed ^= 1;
                    }
                    samp_radix_rows(gpu, l, rows, R, N, stream);
                    /* the seed test's rows: the official temperatures on normal logits */
                    const int seed_case = kind == LK_NORMAL && T >= 0.5f && T <= 1.0f && keff > 1;
                    if (seed_case) samp_radix_rows(gpu_moved, l, moved, R, N, stream);
                    for (int b = 0; b < R; b++) {
                        const float *lb = l + (size_t)b * N;   /* (N) */
                        const samp_row *p = &rows[b];
                        int cpu = samp_topk(lb, N, p->temp, p->topk, p->seed, p->step, stream, scratch);
                        ck_assert_msg(cpu == gpu[b],
                                      "first mismatch: N=%d k=%d T=%g %s row %d seed=%llu step=%llu stream=%u: "
                                      "samp_topk %d (logit %.9g), kernel replay %d (logit %.9g)",
                                      N, k, (double)T, lk_names[kind], b, (unsigned long long)p->seed,
                                      (unsigned long long)p->step, stream, cpu, (double)lb[cpu], gpu[b],
                                      gpu[b] >= 0 && gpu[b] < N ? (double)lb[gpu[b]] : NAN);
                        rows_total++;
                        if (T > 0.0f && keff > 1) {
                            random_rows++;
                            off_greedy += cpu != greedy[b];
                        }
                        if (seed_case) {
                            seed_rows++;
                            seed_moved += gpu_moved[b] != gpu[b];
                        }
                    }
                    cases++;
                }
            if (kind == LK_NORMAL)
                for (int ki = 0; ki < N_K; ki++)
                    if (ks[ki] > 0 && ks[ki] < N) {
                        int passes;
                        samp_radix_kth(l, N, ks[ki], &passes);
                        if (passes > max_passes) max_passes = passes;
                    }
        }
        free(l);
        free(scratch);
    }
    fprintf(stderr,
            "cpu vs kernel replay: %ld cases (7 sizes x <= %d k x %d T x %d kinds), %ld rows, same tokens; %ld rows "
            "drawn at random, %ld of them off the argmax; seed ^ 1 moved %ld of %ld tokens; radix passes <= %d\n",
            cases, N_K, N_T, LK_KINDS, rows_total, random_rows, off_greedy, seed_moved, seed_rows, max_passes);
    /* the comparison has teeth: the draws are random (not the argmax in
     * disguise) and another seed gives other tokens, so a replay that keyed
     * or scaled the noise differently would fail above */
    ck_assert_int_gt(off_greedy, random_rows / 4);
    ck_assert_int_gt(seed_moved, seed_rows / 4);
    ck_assert_int_le(max_passes, 8);
}
END_TEST

START_TEST(test_topk_rows) {
    /* samp_topk_rows (the CUDA launcher's twin) is samp_topk row by row,
     * each row with its own parameters */
    enum { B = 6, N = 40 };
    uint64_t s = 77;
    float l[B * N];
    for (int i = 0; i < B * N; i++) l[i] = (float)(2.0 * gauss(&s));
    const samp_row rows[B] = {{1, 0, 0.0f, 0}, {1, 0, 0.7f, 25}, {2, 9, 1.0f, 0},
                              {3, 1ull << 40, 0.8f, 250}, {4, 5, 1.3f, 1}, {5, 6, NAN, 3}};
    int32_t out[B], again[B];
    int scratch[N];
    samp_topk_rows(out, l, rows, B, N, SAMP_STREAM_AUDIO(3), scratch);
    samp_radix_rows(again, l, rows, B, N, SAMP_STREAM_AUDIO(3));
    for (int b = 0; b < B; b++) {
        const samp_row *p = &rows[b];
        ck_assert_int_eq(out[b], samp_topk(l + b * N, N, p->temp, p->topk, p->seed, p->step, SAMP_STREAM_AUDIO(3), scratch));
        ck_assert_int_eq(out[b], again[b]);
    }
    samp_topk_rows(out, l, rows, 0, N, 0, scratch);   /* B = 0: nothing */
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("samp");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_greedy_ties);
    tcase_add_test(tc, test_topk_distribution);
    tcase_add_test(tc, test_topk_boundary_ties);
    tcase_add_test(tc, test_keyed_noise);
    suite_add_tcase(s, tc);
    tc = tcase_new("twins");
    tcase_add_test(tc, test_cpu_vs_kernel);
    tcase_add_test(tc, test_topk_rows);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
