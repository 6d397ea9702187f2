/* samp.c - greedy and Gumbel-max top-k sampling on the CPU (see samp.h).
 * The per-element arithmetic is samp.h's, shared with the CUDA sampler;
 * this file only chooses the top k (a heap of the k best rank keys) and
 * keeps the best score. */
#include "samp.h"

#include <math.h>
#include <stddef.h>

/* the rank key of logits[i] */
static inline uint64_t key(const float *l, int i) { return samp_key(l[i], (uint32_t)i); }

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
    int *h = scratch;   /* (k) the kept indices */
    for (int i = 0; i < k; i++) h[i] = i;
    if (k < n) {
        for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i, logits);
        for (int i = k; i < n; i++)
            if (key(logits, i) > key(logits, h[0])) {
                h[0] = i;
                sift_down(h, k, 0, logits);
            }
    }
    int32_t best = -1;
    double bs = -INFINITY;
    for (int j = 0; j < k; j++) {
        int i = h[j];
        double s = samp_score(logits[i], temp, samp_gumbel(rng_uniform(seed, step, stream, (uint32_t)i)));
        if (samp_better(s, i, bs, best)) {
            bs = s;
            best = i;
        }
    }
    return best;
}

void samp_topk_rows(int32_t *out, const float *logits, const samp_row *rows, int B, int N, uint32_t stream,
                    int *scratch) {
    for (int b = 0; b < B; b++) {
        const samp_row *p = &rows[b];
        out[b] = samp_topk(logits + (size_t)b * N, N, p->temp, p->topk, p->seed, p->step, stream, scratch);
    }
}
