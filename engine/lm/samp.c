/* samp.c - greedy and Gumbel-max top-k sampling (see samp.h). */
#include "samp.h"

#include <math.h>
#include <string.h>

#include "rng.h"

/* a float as a uint32 of the same order; NaN as -inf, -0 as +0 */
static inline uint32_t ord(float v) {
    if (v != v) v = -INFINITY;
    if (v == 0.0f) v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* rank key: value first, then the lower index; all keys of a row distinct */
static inline uint64_t key(const float *l, int i) {
    return ((uint64_t)ord(l[i]) << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)i);
}

int samp_greedy(const float *logits, int n) {
    int best = 0;
    uint64_t bk = key(logits, 0);
    for (int i = 1; i < n; i++) {
        uint64_t k = key(logits, i);
        if (k > bk) {
            bk = k;
            best = i;
        }
    }
    return best;
}

double samp_gumbel(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index) {
    return -log(-log(rng_uniform(seed, step, stream, index)));
}

/* min-heap of indices by rank key (the worst kept candidate at the root) */
static void sift_down(int *h, int k, int i, const float *l) {
    for (;;) {
        int c = 2 * i + 1, m = i;
        if (c < k && key(l, h[c]) < key(l, h[m])) m = c;
        if (c + 1 < k && key(l, h[c + 1]) < key(l, h[m])) m = c + 1;
        if (m == i) return;
        int t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

int samp_topk(const float *logits, int n, float temp, int topk, uint64_t seed, uint64_t step, uint32_t stream,
              int *scratch) {
    if (!(temp > 0)) return samp_greedy(logits, n);
    int k = topk <= 0 || topk > n ? n : topk;
    int *h = scratch;
    for (int i = 0; i < k; i++) h[i] = i;
    if (k < n) {
        for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i, logits);
        for (int i = k; i < n; i++)
            if (key(logits, i) > key(logits, h[0])) {
                h[0] = i;
                sift_down(h, k, 0, logits);
            }
    }
    int best = -1;
    double bs = -INFINITY;
    for (int j = 0; j < k; j++) {
        int i = h[j];
        float q = logits[i] / temp;   /* IEEE float division, as on the GPU */
        if (q != q) q = -INFINITY;
        double s = (double)q + samp_gumbel(seed, step, stream, (uint32_t)i);
        if (best < 0 || s > bs || (s == bs && i < best)) {
            bs = s;
            best = i;
        }
    }
    return best;
}
