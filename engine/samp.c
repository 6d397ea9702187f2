/* samp.c - greedy and Gumbel-max top-k sampling (see samp.h). */
#include "samp.h"

#include <math.h>

#include "rng.h"

int samp_greedy(const float *logits, int n) {
    int best = 0;
    float bv = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > bv || (isnan(bv) && !isnan(logits[i]))) {
            bv = logits[i];
            best = i;
        }
    return best;
}

float samp_gumbel(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index) {
    float u = rng_uniform(seed, step, stream, index);
    return -logf(-logf(u));
}

/* heap order: a is "worse" than b (lower logit, or equal and higher index) */
static int worse(const float *l, int a, int b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

static void sift_down(int *h, int k, int i, const float *l) {
    for (;;) {
        int c = 2 * i + 1, m = i;
        if (c < k && worse(l, h[c], h[m])) m = c;
        if (c + 1 < k && worse(l, h[c + 1], h[m])) m = c + 1;
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
    /* min-heap of the k best (worst at the root) */
    for (int i = 0; i < k; i++) h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i, logits);
    for (int i = k; i < n; i++)
        if (worse(logits, h[0], i)) {
            h[0] = i;
            sift_down(h, k, 0, logits);
        }
    float inv = 1.0f / temp;
    int best = -1;
    float bv = -INFINITY;
    for (int j = 0; j < k; j++) {
        int i = h[j];
        float v = logits[i] * inv + samp_gumbel(seed, step, stream, (uint32_t)i);
        if (best < 0 || v > bv || (v == bv && i < best)) {
            bv = v;
            best = i;
        }
    }
    return best;
}
