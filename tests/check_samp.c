/* check_samp.c - greedy ties, top-k + temperature distribution (chi-square
 * against softmax(top-k logits / T)), determinism of the keyed noise. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "rng.h"
#include "samp.h"

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
    for (uint32_t i = 0; i < 100000; i++) m += samp_gumbel(9, 1, 2, i);
    m /= 100000;
    ck_assert_msg(fabs(m - 0.5772) < 0.02, "gumbel mean %.4f", m);
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
    return s;
}

CHECK_MAIN
