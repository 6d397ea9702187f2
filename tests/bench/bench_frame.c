/* bench_frame.c - the frame step of the demo model on the CPU backend,
 * split into its parts (Mimi encode, LMGen + LM step, Mimi decode) for
 * batches of 1, 4, 8, 16 and 32 slots, one engine thread (threads 1, as
 * config/demo/moshid-demo.json), and the whole step synchronous against
 * pipelined (LM_MAX_INFLIGHT frames in flight) in the same run: the time per
 * frame of a batch and the ratio. The codec is at its steady state: after
 * each slot's reset its codec alone runs context x hop / 1920 frames (every
 * transformer ring full, as a session after its first seconds); the
 * pipelined time from the fresh state (no such frames) is printed beside.
 * Model: $BUILD/demo (make demo-model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "lmgen.h"
#include "mimi.h"

#define ROUNDS 40

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static lm_backend *open_demo(const char *dir, int slots, int pipeline) {
    char lm[512], mimi[512], mcfg[512];
    snprintf(lm, sizeof lm, "%s/kyutai/lm", dir);
    snprintf(mimi, sizeof mimi, "%s/mimi.safetensors", dir);
    snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
    lm_backend_opts o = {.max_slots = slots, .threads = 1, .mimi = mimi, .mimi_config = mcfg, .pipeline = pipeline};
    ms_error e = {0};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &o, &e);
    if (!b) fprintf(stderr, "bench_frame: %s (make demo-model)\n", e.msg);
    return b;
}

/* fill frames of the codec alone for slots 0..n-1 (encode, then decode of
 * the codes): their transformer rings full. */
static void fill_codec(lm_backend *b, const int *slots, int n, const float *pcm, int fill) {
    int *codes = calloc((size_t)n * (b->ncb > 0 ? b->ncb : 1), sizeof(int));
    float *out = calloc((size_t)n * MS_FRAME_SAMPLES, sizeof(float));
    ms_error e = {0};
    for (int f = 0; f < fill && !e.code; f++)
        if (!lm_backend_mimi_encode(b, slots, n, pcm, codes, &e)) lm_backend_mimi_decode(b, slots, n, codes, out, &e);
    if (e.code) fprintf(stderr, "bench_frame: filling the codec: %s\n", e.msg);
    free(codes);
    free(out);
}

/* ms per frame step of n slots: parts[3] (encode, LM, decode) when
 * split, else the whole (sync or pipelined, rounds frames); fill: codec
 * frames run first (0: the fresh state). */
static double run(lm_backend *b, int n, int split, double parts[3], int fill) {
    lmgen_slot *g = calloc((size_t)n, sizeof *g), **gp = calloc((size_t)n, sizeof *gp);
    int *slots = calloc((size_t)n, sizeof(int));
    float *pcm = calloc((size_t)n * MS_FRAME_SAMPLES, sizeof(float));
    lm_samp samp;
    lm_samp_defaults(&samp, 1);
    ms_error e = {0};
    for (int i = 0; i < n; i++) {
        slots[i] = i;
        lmgen_init(&g[i], &b->cfg, i, &samp);
        gp[i] = &g[i];
        lm_backend_reset_slot(b, i, &e);
    }
    for (size_t k = 0; k < (size_t)n * MS_FRAME_SAMPLES; k++) pcm[k] = 0.3f * sinf(0.01f * (float)k);
    if (fill) fill_codec(b, slots, n, pcm, fill);
    enum { K = LM_MAX_INFLIGHT };
    lm_frame f[K];
    for (int k = 0; k < K; k++) {
        lm_frame_alloc(b, &f[k], n, &e);
        f[k].n = n; f[k].slots = slots; f[k].gens = gp; f[k].pcm_in = pcm;
    }
    double total = 0;
    if (split) {
        parts[0] = parts[1] = parts[2] = 0;
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now_ms();
            lm_backend_mimi_encode(b, slots, n, pcm, f[0].enc_codes, &e);
            double t1 = now_ms();
            for (int j = 0; j < n; j++) memcpy(f[0].codes + j * b->n_user, f[0].enc_codes + j * b->ncb, sizeof(int) * (size_t)b->n_user);
            lmgen_step_batch(b, gp, n, f[0].codes, f[0].out, f[0].has_out, NULL, NULL, &e);
            double t2 = now_ms();
            int nd = 0;
            for (int j = 0; j < n; j++) {
                if (!f[0].has_out[j]) continue;
                memcpy(f[0].dec_codes + nd * b->ncb, f[0].out + j * (1 + b->cfg.dep_q) + 1, sizeof(int) * (size_t)b->ncb);
                f[0].dec_slots[nd++] = j;
            }
            if (nd) lm_backend_mimi_decode(b, f[0].dec_slots, nd, f[0].dec_codes, f[0].dec_pcm, &e);
            double t3 = now_ms();
            if (r >= 4) { parts[0] += t1 - t0; parts[1] += t2 - t1; parts[2] += t3 - t2; }
        }
        for (int k = 0; k < 3; k++) parts[k] /= ROUNDS - 4;
        total = parts[0] + parts[1] + parts[2];
    } else {
        double t0 = 0;
        /* as the scheduler under load: every buffer in flight, the oldest
         * waited for once all are taken */
        for (int r = 0; r < ROUNDS; r++) {
            if (r == 4) t0 = now_ms();
            lm_frame_submit(b, &f[r % K], &e);
            if (r >= K - 1) lm_frame_wait(b, &f[(r - (K - 1)) % K], &e);
        }
        for (int r = ROUNDS - (K - 1); r < ROUNDS; r++) lm_frame_wait(b, &f[r % K], &e);
        total = (now_ms() - t0) / (ROUNDS - 4);
    }
    if (e.code) fprintf(stderr, "bench_frame: %s\n", e.msg);
    for (int k = 0; k < K; k++) lm_frame_free(&f[k]);
    free(g); free(gp); free(slots); free(pcm);
    return total;
}

int main(int argc, char **argv) {
    const char *bd = getenv("BUILD");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/demo", argc > 1 ? argv[1] : bd && bd[0] ? bd : "build");
    const int ns[] = {1, 4, 8, 16, 32};
    lm_backend *bs = open_demo(dir, 32, 0), *bp = open_demo(dir, 32, 1);
    if (!bs || !bp) return 1;
    char mcfg[600];
    snprintf(mcfg, sizeof mcfg, "%s/mimi.json", dir);
    mimi_config mc;
    ms_error e = {0};
    if (mimi_config_load(&mc, mcfg, &e)) {
        fprintf(stderr, "bench_frame: %s\n", e.msg);
        return 1;
    }
    const int fill = (int)(((long)mc.context * mc.hop + MS_FRAME_SAMPLES - 1) / MS_FRAME_SAMPLES);
    printf("frame step of the demo model, CPU backend, 1 LM thread, ms per batch step (%d rounds), codec context "
           "full (after %d codec frames; \"pipe fresh\": pipelined from a reset)\n", ROUNDS, fill);
    printf("%6s %9s %9s %9s %9s %10s %10s %8s %10s\n", "slots", "encode", "LM", "decode", "sum", "sync", "pipelined",
           "speedup", "pipe fresh");
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        double parts[3];
        run(bs, ns[i], 1, parts, fill);
        double sync = run(bs, ns[i], 0, NULL, fill), pipe = run(bp, ns[i], 0, NULL, fill);
        double fresh = run(bp, ns[i], 0, NULL, 0);
        printf("%6d %9.2f %9.2f %9.2f %9.2f %10.2f %10.2f %7.2fx %10.2f\n", ns[i], parts[0], parts[1], parts[2],
               parts[0] + parts[1] + parts[2], sync, pipe, sync / pipe, fresh);
    }
    lm_backend_close(bs);
    lm_backend_close(bp);
    return 0;
}
