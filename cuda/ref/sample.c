/* sample.c - C twin of cu_sample_topk (cuda/cu_sample.cu). The arithmetic is
 * in samp_core.h, shared with the kernel; this file only decides which
 * indices take part (the top k) and keeps the best score. */
#include "ref/ref.h"

#include <stdlib.h>

#include "err.h"

static int cmp_key_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The k-th largest key of the row (k in [1, n)): every index whose key is >=
 * it is in the top k, and exactly k are. keys is scratch of n. */
static uint64_t kth_key(const float *l, int n, int k, uint64_t *keys) {
    for (int i = 0; i < n; i++) keys[i] = samp_key(l[i], (uint32_t)i);
    qsort(keys, (size_t)n, sizeof *keys, cmp_key_desc);
    return keys[k - 1];
}

int ref_sample_topk(int32_t *out, const float *logits, const samp_row *rows, int B, int N, uint32_t stream) {
    if (B < 0 || N <= 0) return ms_err_set(NULL, MS_ERR_ARG, "bad dims");
    uint64_t *keys = NULL;
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * N;   /* (N) */
        samp_row p = rows[b];
        int32_t best = -1;
        if (!(p.temp > 0.0f)) {
            uint64_t bk = 0;
            for (int i = 0; i < N; i++) {
                uint64_t key = samp_key(l[i], (uint32_t)i);
                if (best < 0 || key > bk) { bk = key; best = i; }
            }
        } else {
            uint64_t thr = 0;   /* every key is >= 0: all N take part */
            if (p.topk > 0 && p.topk < N) {
                if (!keys && !(keys = malloc((size_t)N * sizeof *keys))) return MS_ERR_NOMEM;
                thr = kth_key(l, N, p.topk, keys);
            }
            double bs = 0.0;
            for (int i = 0; i < N; i++) {
                if (samp_key(l[i], (uint32_t)i) < thr) continue;
                double g = samp_gumbel(rng_uniform(p.seed, p.step, stream, (uint32_t)i));
                double s = samp_score(l[i], p.temp, g);
                if (samp_better(s, i, bs, best)) { bs = s; best = i; }
            }
        }
        out[b] = best;
    }
    free(keys);
    return MS_OK;
}
