/* bench_prime.c - a PersonaPlex prime of 300 positions on the CPU, by one
 * prefill against 301 single steps, and the persona snapshot of it: saved,
 * and restored by pp_persona_load and by the chunked job (make bench).
 *
 * Model: demo-sized and PersonaPlex-shaped (the demo model is
 * "LM dim <= 128, 16-step depformer, audio card 2048"): dim 128, 4 layers,
 * 8 heads, context 3000, card 2048, text_card 4000, depformer 64 wide with
 * 2 layers, random float32 weights from a fixed seed, written to a
 * temporary directory. Prompt: 250 voice frames, 6 silence, 39 text ids,
 * 6 silence = 301 calls = 300 model positions (the first call makes none).
 *
 * Each of BENCH_REPS rounds, interleaved: the prime by steps (slot 0), by
 * prefill (slot 1), then SNAP_HOT saves of slot 1 (pp_persona_save; each
 * snapshot freed untimed), and restores into slot 2 by pp_persona_load and
 * by pp_job_restore (one layer a chunk, PP_JOB_RESTORE_LAYERS a chunk as
 * well): SNAP_COLD of each after evicting the caches (a read of twice the
 * last-level cache: snapshot and slot come from memory, as when a session
 * starts long after its persona was saved) and SNAP_HOT back to back
 * (cache-hot). Printed: medians, the snapshot's bytes (kv_snap_info) and
 * ms per MiB, the ratios steps / prefill and prime / restore (cold: the
 * conservative one; the target is prime by steps >= 100x restore), the
 * threads, the load average and the share of CPU time stolen by the
 * hypervisor during the run (other builds on the machine, or other guests
 * on a VM's host, make absolute times noisy; the ratios less so). The next-step tokens of the three
 * slots (steps, prefill, restored) are compared as a sanity check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "lmgen.h"
#include "job.h"
#include "lmgen_pp.h"
#include "prime.h"
#include "st.h"

#define B_DIM 128
#define B_LAYERS 4
#define B_HEADS 8
#define B_CONTEXT 3000
#define B_CARD 2048
#define B_TEXT_CARD 4000
#define B_DDIM 64
#define B_DLAYERS 2
#define B_DHEADS 4
#define B_VOICE 250
#define B_TEXT 39
#define BENCH_REPS 5
/* snapshot operations per round: after a cache eviction, back to back */
#define SNAP_COLD 3
#define SNAP_HOT 9
/* eviction read: twice the last-level cache, within these bounds (bytes) */
#define EVICT_MIN ((size_t)64 << 20)
#define EVICT_MAX ((size_t)1 << 30)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t xs(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

typedef struct {
    st_writer *w;
    float *bufs[512];
    int nb;
} model_w;

/* a random tensor; norms (ndim 3) around 1 */
static void add(model_w *m, const char *name, int ndim, int64_t a, int64_t b) {
    int64_t shape[3] = {a, b, 0};
    if (ndim == 3) {
        shape[0] = 1;
        shape[1] = 1;
        shape[2] = a;
    }
    size_t n = (size_t)(ndim == 3 ? a : a * b);
    float *p = malloc(sizeof(float) * n);
    if (!p || m->nb == 512) {
        fprintf(stderr, "bench_prime: out of memory\n");
        exit(1);
    }
    float scale = ndim == 3 ? 0.2f : 1.0f / (float)(ndim == 3 ? 1 : b > 64 ? 16 : 8);
    for (size_t i = 0; i < n; i++) {
        float u = (float)(xs() >> 40) / 16777216.0f - 0.5f;
        p[i] = ndim == 3 ? 1.0f + scale * u : scale * u;
    }
    m->bufs[m->nb++] = p;
    st_writer_add(m->w, name, ST_F32, ndim == 3 ? 3 : 2, shape, p);
}

static int write_model(const char *dir) {
    model_w m = {.w = st_writer_create()};
    char name[128];
    int H = 2 * (int)(4.125 * B_DIM) / 3, Hd = 2 * (int)(4.125 * B_DDIM) / 3;
    for (int q = 0; q < 16; q++) {
        snprintf(name, sizeof name, "emb.%d.weight", q);
        add(&m, name, 2, B_CARD + 1, B_DIM);
    }
    add(&m, "text_emb.weight", 2, B_TEXT_CARD + 1, B_DIM);
    add(&m, "text_linear.weight", 2, B_TEXT_CARD, B_DIM);
    add(&m, "out_norm.alpha", 3, B_DIM, 0);
    for (int l = 0; l < B_LAYERS; l++) {
#define T(fmt, nd, a, b) do { snprintf(name, sizeof name, "transformer.layers.%d." fmt, l); add(&m, name, nd, a, b); } while (0)
        T("norm1.alpha", 3, B_DIM, 0);
        T("norm2.alpha", 3, B_DIM, 0);
        T("self_attn.in_proj_weight", 2, 3 * B_DIM, B_DIM);
        T("self_attn.out_proj.weight", 2, B_DIM, B_DIM);
        T("gating.linear_in.weight", 2, 2 * H, B_DIM);
        T("gating.linear_out.weight", 2, B_DIM, H);
#undef T
    }
    add(&m, "depformer_text_emb.weight", 2, B_TEXT_CARD + 1, B_DDIM);
    for (int k = 0; k < 16; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        add(&m, name, 2, B_DDIM, B_DIM);
        snprintf(name, sizeof name, "linears.%d.weight", k);
        add(&m, name, 2, B_CARD, B_DDIM);
        if (k < 15) {
            snprintf(name, sizeof name, "depformer_emb.%d.weight", k);
            add(&m, name, 2, B_CARD + 1, B_DDIM);
        }
    }
    for (int l = 0; l < B_DLAYERS; l++) {
        snprintf(name, sizeof name, "depformer.layers.%d.norm1.alpha", l);
        add(&m, name, 3, B_DDIM, 0);
        snprintf(name, sizeof name, "depformer.layers.%d.norm2.alpha", l);
        add(&m, name, 3, B_DDIM, 0);
        snprintf(name, sizeof name, "depformer.layers.%d.self_attn.in_proj_weight", l);
        add(&m, name, 2, 16 * 3 * B_DDIM, B_DDIM);
        snprintf(name, sizeof name, "depformer.layers.%d.self_attn.out_proj.weight", l);
        add(&m, name, 2, 16 * B_DDIM, B_DDIM);
        for (int k = 0; k < 16; k++) {
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_in.weight", l, k);
            add(&m, name, 2, 2 * Hd, B_DDIM);
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_out.weight", l, k);
            add(&m, name, 2, B_DDIM, Hd);
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ms_error e = {0};
    int rc = st_writer_save(m.w, path, &e);
    if (rc) fprintf(stderr, "bench_prime: %s\n", e.msg);
    st_writer_free(m.w);
    for (int i = 0; i < m.nb; i++) free(m.bufs[i]);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f,
            "{\"dim\": %d, \"num_heads\": %d, \"num_layers\": %d, \"hidden_scale\": 4.125, \"context\": %d,\n"
            " \"n_q\": 16, \"dep_q\": 16, \"card\": %d, \"text_card\": %d,\n"
            " \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],\n"
            " \"depformer_dim\": %d, \"depformer_num_heads\": %d, \"depformer_num_layers\": %d,\n"
            " \"depformer_dim_feedforward\": %d, \"gating\": \"silu\", \"norm\": \"rms_norm_f32\",\n"
            " \"positional_embedding\": \"rope\", \"depformer_gating\": \"silu\", \"depformer_pos_emb\": \"none\",\n"
            " \"depformer_multi_linear\": true, \"depformer_weights_per_step\": true, \"depformer_context\": 16,\n"
            " \"max_period\": 10000, \"existing_text_padding_id\": 3}\n",
            B_DIM, B_HEADS, B_LAYERS, B_CONTEXT, B_CARD, B_TEXT_CARD, B_DDIM, B_DHEADS, B_DLAYERS,
            (int)(4.125 * B_DDIM));
    return fclose(f) != 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of n samples (sorts them) */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* evict the caches: read one byte per line of buf (n bytes) */
static volatile unsigned char evict_sink;
static void evict(const unsigned char *buf, size_t n) {
    unsigned char acc = 0;
    for (size_t i = 0; i < n; i += 64) acc ^= buf[i];
    evict_sink = acc;
}

/* one restore of per into g by the job, chunk layers a chunk; returns the
 * seconds of the longest chunk in *worst */
static int job_restore(lm_backend *b, const pp_persona *per, lmgen_slot *g, int chunk, double *worst, ms_error *e) {
    pp_job *j = pp_job_restore(b, per, g, chunk, e);
    if (!j) return e->code ? e->code : 1;
    int done = 0, rc = MS_OK;
    *worst = 0;
    while (!done && rc == MS_OK) {
        double t0 = now();
        rc = pp_job_run(j, &done, e);
        double dt = now() - t0;
        if (dt > *worst) *worst = dt;
    }
    pp_job_free(j);
    return rc;
}

/* CPU time of the machine from /proc/stat: all ticks and stolen ones (a
 * VM's vCPUs waiting for the host); 0 when unreadable */
static void cpu_ticks(unsigned long long *total, unsigned long long *steal) {
    unsigned long long v[8] = {0};
    *total = *steal = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) == 8) {
        for (int i = 0; i < 8; i++) *total += v[i];
        *steal = v[7];
    }
    fclose(f);
}

/* restore kinds timed */
enum { R_LOAD, R_JOB1, R_JOBN, R_KINDS };
#define STR_(x) #x
#define STR(x) STR_(x)
static const char *const r_names[R_KINDS] = {"pp_persona_load", "job, 1 layer a chunk",
                                             "job, " STR(PP_JOB_RESTORE_LAYERS) " layers a chunk"};

int main(void) {
    char dir[] = "/tmp/bench_prime_XXXXXX";
    if (!mkdtemp(dir) || write_model(dir)) {
        fprintf(stderr, "bench_prime: cannot write the model\n");
        return 1;
    }
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = 3, .threads = 0, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &bo, &e);
    if (!b) {
        fprintf(stderr, "bench_prime: %s\n", e.msg);
        return 1;
    }
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t nev = l3 > 0 ? 2 * (size_t)l3 : EVICT_MIN;
    nev = nev < EVICT_MIN ? EVICT_MIN : nev > EVICT_MAX ? EVICT_MAX : nev;
    unsigned char *ev = malloc(nev);
    if (!ev) {
        fprintf(stderr, "bench_prime: out of memory\n");
        return 1;
    }
    memset(ev, 1, nev);
    int voice[B_VOICE * PP_SIDE_CODEBOOKS], text[B_TEXT];
    for (int i = 0; i < B_VOICE * PP_SIDE_CODEBOOKS; i++) voice[i] = (int)(xs() % B_CARD);
    for (int i = 0; i < B_TEXT; i++) text[i] = (int)(xs() % B_TEXT_CARD);
    pp_prompt p;
    pp_prompt_init(&p);   /* the released Mimi's SILENCE/SINE (card 2048) */
    p.voice = voice;
    p.n_voice = B_VOICE;
    p.text = text;
    p.n_text = B_TEXT;
    int calls = B_VOICE + 2 * p.silence_frames + B_TEXT;
    lm_samp s;
    lm_samp_defaults(&s, 1);
    double t[2][BENCH_REPS], ts[BENCH_REPS * SNAP_HOT];
    double tc[R_KINDS][BENCH_REPS * SNAP_COLD], th[R_KINDS][BENCH_REPS * SNAP_HOT];
    double wc[2][BENCH_REPS * SNAP_COLD];   /* longest chunk of the jobs, cold */
    int nc = 0, nh = 0;
    lmgen_slot g[3];
    pp_persona per = {0};
    lm_snap_info info = {0};
    int rc = 0;
    unsigned long long tot0, st0, tot1, st1;
    cpu_ticks(&tot0, &st0);
    for (int r = 0; r < BENCH_REPS && !rc; r++) {
        for (int mode = 0; mode < 2 && !rc; mode++) {
            lmgen_init(&g[mode], &b->cfg, mode, &s);
            lm_backend_reset_slot(b, mode, &e);
            double t0 = now();
            rc = pp_prime(b, &g[mode], &p, (pp_prime_mode)mode, &e);
            t[mode][r] = now() - t0;
        }
        for (int i = 0; i < SNAP_HOT && !rc; i++) {
            pp_persona x;
            double t0 = now();
            rc = pp_persona_save(b, &g[1], &x, &e);
            ts[r * SNAP_HOT + i] = now() - t0;
            if (!rc) pp_persona_close(b, &x);
        }
        pp_persona_close(b, &per);
        if (!rc) rc = pp_persona_save(b, &g[1], &per, &e);
        if (!rc) rc = lm_backend_kv_snap_info(b, per.kv, &info);
        if (!rc && r == 0) {   /* untimed: slot 2's pages made resident */
            lmgen_init(&g[2], &b->cfg, 2, &s);
            rc = pp_persona_load(b, &per, &g[2], &e);
        }
        for (int i = 0; i < SNAP_COLD + SNAP_HOT && !rc; i++)
            for (int k = 0; k < R_KINDS && !rc; k++) {
                int cold = i < SNAP_COLD;
                lmgen_init(&g[2], &b->cfg, 2, &s);
                lm_backend_reset_slot(b, 2, &e);
                if (cold) evict(ev, nev);
                double worst = 0, t0 = now();
                rc = k == R_LOAD ? pp_persona_load(b, &per, &g[2], &e)
                                 : job_restore(b, &per, &g[2], k == R_JOB1 ? 1 : PP_JOB_RESTORE_LAYERS, &worst, &e);
                double dt = now() - t0;
                if (cold) {
                    tc[k][nc + i] = dt;
                    if (k != R_LOAD) wc[k - 1][nc + i] = worst;
                } else {
                    th[k][nh + i - SNAP_COLD] = dt;
                }
            }
        nc += SNAP_COLD;
        nh += SNAP_HOT;
    }
    int user[PP_SIDE_CODEBOOKS] = {1, 2, 3, 4, 5, 6, 7, 8}, out[3][PP_OUT_TOKENS], has[3];
    lmgen_slot *gg[3] = {&g[0], &g[1], &g[2]};
    int u3[3 * PP_SIDE_CODEBOOKS];
    for (int i = 0; i < 3; i++) memcpy(u3 + i * PP_SIDE_CODEBOOKS, user, sizeof user);
    if (!rc) rc = pp_step_users(b, gg, 3, u3, out[0], has, NULL, NULL, &e);
    if (rc) {
        fprintf(stderr, "bench_prime: %s\n", e.msg);
        return 1;
    }
    int same = has[0] == has[1] && has[1] == has[2] && memcmp(out[0], out[1], sizeof out[0]) == 0 &&
               memcmp(out[1], out[2], sizeof out[0]) == 0;
    cpu_ticks(&tot1, &st1);
    double steal = tot1 > tot0 ? 100.0 * (double)(st1 - st0) / (double)(tot1 - tot0) : 0;
    double ms_steps = 1e3 * median(t[0], BENCH_REPS), ms_prefill = 1e3 * median(t[1], BENCH_REPS);
    double ms_save = 1e3 * median(ts, nh), mc[R_KINDS], mh[R_KINDS];
    for (int k = 0; k < R_KINDS; k++) {
        mc[k] = 1e3 * median(tc[k], nc);
        mh[k] = 1e3 * median(th[k], nh);
    }
    double wk[2] = {1e3 * median(wc[0], nc), 1e3 * median(wc[1], nc)};
    double mib = (double)info.bytes / 1048576.0;
    double la[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = -1;
        fclose(f);
    }
    lm_backend_stats st;
    lm_backend_stats_get(b, &st);
    printf("prime %d calls = %lld positions, model dim %d x %d layers, card %d, %d threads, load %.2f, steal %.0f%%\n",
           calls, (long long)calls - 1, B_DIM, B_LAYERS, B_CARD, st.threads, la[0], steal);
    printf("  by single steps: %8.2f ms (median of %d)\n", ms_steps, BENCH_REPS);
    printf("  by one prefill:  %8.2f ms (median of %d)\n", ms_prefill, BENCH_REPS);
    printf("  ratio steps / prefill: %.2fx   next-step tokens %s\n", ms_steps / ms_prefill,
           same ? "identical (steps, prefill, restored)" : "DIFFER");
    printf("persona snapshot: %d positions, %zu bytes (%.3f MiB, %s), evictions read %zu MiB\n", info.positions,
           info.bytes, mib, info.where == LM_MEM_HOST ? "host" : "device", nev >> 20);
    printf("  save (pp_persona_save):   %8.4f ms (median of %d)  %7.4f ms/MiB\n", ms_save, nh, ms_save / mib);
    for (int k = 0; k < R_KINDS; k++) {
        printf("  restore, %-22s cold %8.4f ms (median of %d) %7.4f ms/MiB; hot %8.4f ms (median of %d)", r_names[k],
               mc[k], nc, mc[k] / mib, mh[k], nh);
        if (k != R_LOAD) printf("; longest chunk cold %.4f ms", wk[k - 1]);
        printf("\n");
    }
    printf("  ratio prime by steps / restore (load, cold): %.0fx (target >= 100x: %s); hot %.0fx\n",
           ms_steps / mc[R_LOAD], ms_steps >= 100 * mc[R_LOAD] ? "met" : "NOT met", ms_steps / mh[R_LOAD]);
    printf("  ratio prime by prefill / restore (load, cold): %.0fx; hot %.0fx\n", ms_prefill / mc[R_LOAD],
           ms_prefill / mh[R_LOAD]);
    printf("  ratio prime by steps / restore (job, 1 layer a chunk, cold): %.0fx\n", ms_steps / mc[R_JOB1]);
    pp_persona_close(b, &per);
    lm_backend_close(b);
    free(ev);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_prime: cleanup of %s failed\n", dir);
    return same ? 0 : 1;
}
