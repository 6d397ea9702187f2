/* lm_quality.c - build/lm-quality: the 8-bit schemes' error against the
 * unquantized model, teacher-forced, on the CPU backend (docs/lm.md,
 * "8-bit quality").
 *
 *   lm-quality --lm DIR [--steps N] [--weights stored|bf16|int8] [--kv native|int8]
 *              [--threads N] [--seed S]
 *
 * Two CPU backends on DIR: the reference (weights as stored, float32 K/V)
 * and the variant (--weights, --kv). Each step the reference samples with
 * the official defaults (text 0.7 / top 25, audio 0.8 / top 250; seed S)
 * and its tokens are the next inputs of both (the user's streams: random
 * codes); the variant gets the reference's tokens as the depformer's forced
 * targets, so both compute their logits on the same history. Per stream
 * (text; every audio sub-step pooled) and row: rms(delta) / rms(ref),
 * max |delta| / rms(ref), and whether the argmax is the same. Prints one
 * Markdown row:
 *   | weights / kv | text rms | text max | text argmax | audio rms | audio max | audio argmax |
 * rms is the mean over rows, max the largest over rows. Exit 0, 1 on an
 * error, 2 on a bad command line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "lm.h"
#include "rng.h"
#include "samp.h"

typedef struct qstat {
    long rows, agree;
    double rms_sum, max;
} qstat;

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void account(qstat *q, const float *ref, const float *got, int n) {
    double ss = 0, dd = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        ss += (double)ref[i] * ref[i];
        dd += d * d;
        if (fabs(d) > mx) mx = fabs(d);
    }
    double rms = sqrt(ss / n) + 1e-30;
    q->rows++;
    q->rms_sum += sqrt(dd / n) / rms;
    if (mx / rms > q->max) q->max = mx / rms;
    q->agree += argmax(ref, n) == argmax(got, n);
}

static lm_backend *open_cpu(const char *dir, int threads, lm_weights w, lm_kv kv) {
    lm_backend_opts o = {.max_slots = 1, .threads = threads, .variant = LM_VARIANT_AUTO, .weights = w, .kv = kv};
    ms_error e = {0};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &o, &e);
    if (!b) fprintf(stderr, "lm-quality: %s\n", e.msg);
    return b;
}

static int step1(lm_backend *b, lm_step_slot *s) {
    ms_error e = {0};
    if (lm_backend_step(b, s, 1, &e) == MS_OK) return 0;
    fprintf(stderr, "lm-quality: step: %s\n", e.msg);
    return -1;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    long steps = 100, threads = 0;
    unsigned long long seed = 1;
    lm_weights w = LM_WEIGHTS_INT8;
    lm_kv kv = LM_KV_INT8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto bad;
        i++;
        if (!strcmp(a, "--lm")) dir = v;
        else if (!strcmp(a, "--steps")) steps = strtol(v, NULL, 10);
        else if (!strcmp(a, "--threads")) threads = strtol(v, NULL, 10);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--weights")) { if (lm_weights_parse(v, &w)) goto bad; }
        else if (!strcmp(a, "--kv")) { if (lm_kv_parse(v, &kv)) goto bad; }
        else goto bad;
    }
    if (!dir || steps < 1 || steps > 100000 || threads < 0) goto bad;
    lm_backend *ref = open_cpu(dir, (int)threads, LM_WEIGHTS_STORED, LM_KV_NATIVE);
    lm_backend *var = ref ? open_cpu(dir, (int)threads, w, kv) : NULL;
    if (!var) return 1;
    const lm_config *g = &ref->cfg;
    float *tr = malloc(sizeof(float) * g->text_card), *tv = malloc(sizeof(float) * g->text_card);
    float *ar = malloc(sizeof(float) * g->dep_q * g->card), *av = malloc(sizeof(float) * g->dep_q * g->card);
    if (!tr || !tv || !ar || !av) return 1;
    int tok[LM_MAX_STREAMS], target[1 + LM_MAX_DEP_Q];
    uint8_t prov[1 + LM_MAX_DEP_Q];
    for (int i = 0; i < g->n_streams; i++) tok[i] = i == 0 ? g->text_card : g->card;   /* the initial tokens */
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    qstat text = {0}, audio = {0};
    for (long t = 0; t < steps; t++) {
        lm_step_slot a, b;
        memset(&a, 0, sizeof a);
        a.slot = 0;
        memcpy(a.tokens, tok, sizeof(int) * g->n_streams);
        lm_samp_defaults(&a.samp, seed);
        a.step = (uint64_t)t;
        a.dep_steps = -1;
        a.text_logits = tr;
        a.audio_logits = ar;
        if (step1(ref, &a)) return 1;
        b = a;
        target[0] = a.out_text;
        for (int k = 0; k < g->dep_q; k++) target[1 + k] = a.out_audio[k];
        for (int k = 0; k <= g->dep_q; k++) prov[k] = 1;
        b.target = target;
        b.provided = prov;
        b.text_logits = tv;
        b.audio_logits = av;
        if (step1(var, &b)) return 1;
        account(&text, tr, tv, g->text_card);
        for (int k = 0; k < g->dep_q; k++) account(&audio, ar + (size_t)k * g->card, av + (size_t)k * g->card, g->card);
        tok[0] = a.out_text;
        for (int q = 0; q < g->n_q; q++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            tok[1 + q] = q < g->dep_q ? a.out_audio[q] : (int)((r >> 33) % (uint64_t)g->card);
        }
    }
    lm_backend_stats st;
    lm_backend_stats_get(var, &st);
    printf("| %s / %s | %.2e | %.2e | %.4f | %.2e | %.2e | %.4f |\n", st.weights_scheme, st.kv_scheme,
           text.rms_sum / text.rows, text.max, (double)text.agree / text.rows, audio.rms_sum / audio.rows, audio.max,
           (double)audio.agree / audio.rows);
    fprintf(stderr, "lm-quality: %s: dim %d, %d layers, dep_q %d; %ld steps, %ld text and %ld audio rows\n", dir, g->dim,
            g->num_layers, g->dep_q, steps, text.rows, audio.rows);
    lm_backend_close(var);
    lm_backend_close(ref);
    free(tr); free(tv); free(ar); free(av);
    return 0;
bad:
    fprintf(stderr, "usage: lm-quality --lm DIR [--steps N] [--weights stored|bf16|int8] [--kv native|int8] "
                    "[--threads N] [--seed S]\n");
    return 2;
}
