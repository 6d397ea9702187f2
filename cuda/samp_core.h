/* samp_core.h - the CUDA sampler's own logic (cuda/cu_sample.cu) in a form
 * that compiles on the host too, so that it can be tested without a GPU.
 *
 * The arithmetic of a draw (rank keys, the Gumbel noise, the score, the
 * tie-break) is not here: it is engine/lm/samp.h's, shared word for word by
 * the CPU sampler (samp_topk) and the kernel. What the kernel does
 * differently is how it finds the top k: a CPU keeps a heap of the k best
 * keys, a thread block finds the k-th largest key by an MSD radix select
 * (8 bits a pass) and then takes every key >= it. Both give the same set
 * because all keys of a row are distinct (samp_key). This header holds
 *  - samp_radix_pick: the one decision of a radix pass, run by one thread
 *    of the kernel (C and CUDA, host and device);
 *  - samp_radix_rows (host only): the kernel's whole algorithm replayed
 *    sequentially on the host, row by row: the same passes, the same
 *    threshold, the same candidates and scores. tests/check_samp.c runs it
 *    against samp_topk on many rows and asserts the same tokens. The CPU
 *    backend has no use for it (the heap is faster on one thread), which is
 *    why it lives here and not in engine/lm/samp.c.
 */
#ifndef MOSHID_SAMP_CORE_H
#define MOSHID_SAMP_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "samp.h"

/* Radix select: SAMP_RADIX_BITS a pass, SAMP_RADIX_BINS bins, at most
 * 64 / SAMP_RADIX_BITS passes over a row. */
#define SAMP_RADIX_BITS 8
#define SAMP_RADIX_BINS (1 << SAMP_RADIX_BITS)

/* samp_radix_pick: one pass of the MSD radix select of the k-th largest
 * rank key. hist[SAMP_RADIX_BINS] counts the next digit of the keys that
 * share the prefix chosen so far; *krem is the rank (1-based, from the top)
 * still wanted among them. Returns the digit that holds it and updates
 * *krem to the rank within that digit; *done is set when every key of that
 * digit is wanted (then the threshold is the prefix with all lower bits
 * zero). */
SAMP_FN int samp_radix_pick(const unsigned int *hist, int *krem, int *done) {
    int k = *krem, d = SAMP_RADIX_BINS - 1;
    for (; d > 0; d--) {
        if ((int)hist[d] >= k) break;
        k -= (int)hist[d];
    }
    *krem = k;
    *done = (int)hist[d] == k;
    return d;
}

#ifndef __CUDACC__

/* samp_radix_kth: the kernel's sp_kth_key on one thread: the k-th largest
 * rank key of l (N) for 1 <= k < N, so that exactly k keys are >= it.
 * *passes (may be NULL) gets the number of passes over the row. */
static inline uint64_t samp_radix_kth(const float *l, int N, int k, int *passes) {
    uint64_t prefix = 0, mask = 0;
    int krem = k, done = 0, n = 0;
    for (int shift = 64 - SAMP_RADIX_BITS; shift >= 0 && !done; shift -= SAMP_RADIX_BITS) {
        unsigned int hist[SAMP_RADIX_BINS] = {0};
        for (int i = 0; i < N; i++) {
            uint64_t key = samp_key(l[i], (uint32_t)i);
            if ((key & mask) == prefix) hist[(key >> shift) & (SAMP_RADIX_BINS - 1)]++;
        }
        int d = samp_radix_pick(hist, &krem, &done);
        prefix |= (uint64_t)d << shift;
        mask |= (uint64_t)(SAMP_RADIX_BINS - 1) << shift;
        n++;
    }
    if (passes) *passes = n;
    return prefix;
}

/* samp_radix_rows: cu_samp_topk_rows replayed on the host (same arguments
 * but the CUDA stream; pure, no allocation). Per row, as one block of
 * sample_topk_kernel: greedy rows take the largest rank key; other rows
 * take every index whose key is >= the radix threshold (all of them when
 * topk <= 0 or >= N) and keep the best samp_score by samp_better. The
 * kernel visits candidates thread by thread and reduces across the block;
 * samp_better is a total order, so an index-order scan keeps the same one. */
static inline void samp_radix_rows(int32_t *out,          /* (B) token index in [0, N) */
                                   const float *logits,   /* (B, N) */
                                   const samp_row *rows,  /* (B) */
                                   int B, int N, uint32_t stream) {
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * N;   /* (N) */
        const samp_row p = rows[b];
        if (!(p.temp > 0.0f)) {
            uint64_t best = 0;   /* every real key is > 0 */
            for (int i = 0; i < N; i++) {
                uint64_t key = samp_key(l[i], (uint32_t)i);
                best = key > best ? key : best;
            }
            out[b] = (int32_t)(0xFFFFFFFFu - (uint32_t)best);
            continue;
        }
        uint64_t thr = 0;   /* every key is >= 0: all N take part */
        if (p.topk > 0 && p.topk < N) thr = samp_radix_kth(l, N, p.topk, NULL);
        double bs = -INFINITY;
        int32_t bi = -1;
        for (int i = 0; i < N; i++) {
            if (samp_key(l[i], (uint32_t)i) < thr) continue;
            double s = samp_score(l[i], p.temp, samp_gumbel(rng_uniform(p.seed, p.step, stream, (uint32_t)i)));
            if (samp_better(s, i, bs, bi)) { bs = s; bi = i; }
        }
        out[b] = bi;
    }
}

#endif /* !__CUDACC__ */

#endif
