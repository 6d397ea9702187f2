/* bench_mimi.c - Mimi codec speed at the real dimensions with random weights,
 * one thread: real-time factor (audio seconds per compute second) of encode
 * and of decode, for a batch of 1 stream and of 3 streams, and achieved
 * GFLOP/s of the codec and of mimi_gemm as a ratio to OpenBLAS sgemm
 * measured in the same run. Target: encode + decode together at
 * least 3x real time on one core. Measured at the steady state (after
 * context / 2 frames every transformer ring row is valid), with the
 * fresh state's figure (the first frames of new streams) beside it.
 *
 *   build/bench/bench_mimi [seconds of audio, default 4]   (OpenBLAS set to 1 thread)
 */
#include <cblas.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mimi.h"
#include "mimi_int.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Multiply-adds x 2 of every GEMM-like part of one frame (encode, decode);
 * attention scores and elementwise work are left out (a few percent). */
static void frame_flops(const mimi_model *m, double *enc, double *dec) {
    const mimi_config *c = &m->cfg;
    double f = 0;
    int T = c->frame_samples;
    for (int i = 0; i < m->enc.nops; i++) {
        const mimi_seanet_op *op = &m->enc.ops[i];
        int To = mimi_conv_out_len(&op->a, T);
        f += 2.0 * op->a.cout * op->a.cin * op->a.k * To;
        if (op->resblock) f += 2.0 * op->b.cout * op->b.cin * op->b.k * To;
        else T = To;
    }
    double tr = (double)c->num_layers * 2.0 *
                (4.0 * c->d_model * c->d_model + 2.0 * c->d_model * c->dim_feedforward) * c->resample_stride;
    double down = 2.0 * c->dimension * c->dimension * 2 * c->resample_stride;
    double rvq = 2.0 * (2.0 * c->q_dimension * c->dimension) +
                 2.0 * c->num_codebooks * (double)c->q_bins * c->q_dimension;
    *enc = f + tr + down + rvq;
    f = 0;
    T = c->resample_stride;
    for (int i = 0; i < m->dec.nops; i++) {
        const mimi_seanet_op *op = &m->dec.ops[i];
        int To = mimi_conv_out_len(&op->a, T);
        int Tin = op->a.transposed ? T : To;
        f += 2.0 * op->a.cout * op->a.cin * op->a.k * Tin;
        if (op->resblock) f += 2.0 * op->b.cout * op->b.cin * op->b.k * To;
        else T = To;
    }
    *dec = f + tr + 2.0 * 2.0 * c->q_dimension * c->dimension;
}

/* Bytes of weights one frame reads (every layer's weights once per call,
 * whatever the batch): the memory floor of a batch call. */
static double frame_weight_bytes(const mimi_model *m) {
    const mimi_config *c = &m->cfg;
    double w = 0;
    const mimi_seanet *nets[2] = {&m->enc, &m->dec};
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < nets[q]->nops; i++) {
            const mimi_seanet_op *op = &nets[q]->ops[i];
            w += (double)op->a.cout * op->a.cin * op->a.k;
            if (op->resblock) w += (double)op->b.cout * op->b.cin * op->b.k;
        }
    w += 2.0 * c->num_layers * (4.0 * c->d_model * c->d_model + 2.0 * c->d_model * c->dim_feedforward);
    w += (double)c->dimension * c->dimension * 2 * c->resample_stride;
    w += 4.0 * c->q_dimension * c->dimension + (double)c->num_codebooks * c->q_bins * c->q_dimension;
    return 4.0 * w;
}

/* Single-thread read bandwidth over 256 MB (allocated as the weights are),
 * bytes/s (best of 3). */
static double read_bandwidth(void) {
    size_t n = (size_t)64 << 20;
    float *a = mimi_alloc_floats(n);   /* huge pages, as the weights */
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 7);
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
#ifdef __AVX__
        __m256 v0 = _mm256_setzero_ps(), v1 = v0, v2 = v0, v3 = v0;
        for (size_t i = 0; i < n; i += 32) {
            v0 = _mm256_add_ps(v0, _mm256_loadu_ps(a + i));
            v1 = _mm256_add_ps(v1, _mm256_loadu_ps(a + i + 8));
            v2 = _mm256_add_ps(v2, _mm256_loadu_ps(a + i + 16));
            v3 = _mm256_add_ps(v3, _mm256_loadu_ps(a + i + 24));
        }
        float o[8];
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(v0, v1), _mm256_add_ps(v2, v3)));
        float tot = o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
#else
        float tot = 0;
        for (size_t i = 0; i < n; i++) tot += a[i];
#endif
        double t = now_s() - t0;
        sink += tot;
        if (n * sizeof(float) / t > best) best = n * sizeof(float) / t;
    }
    (void)sink;
    free(a);
    return best;
}

/* GFLOP/s of C = A.B: OpenBLAS (blas), else the codec's kernel for that
 * shape (the panel layout for N < 8, as the codec stores those weights). */
static double gemm_rate(int M, int N, int K, int blas) {
    float *A = malloc((size_t)M * K * sizeof(float)), *B = malloc((size_t)K * N * sizeof(float));
    float *C = calloc((size_t)M * N, sizeof(float));
    float *P = malloc(mimi_panel_size(M, K) * sizeof(float));
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)(i % 5) * 0.1f;
    mimi_panel_pack(M, K, A, K, P);
    int reps = 0;
    double t0 = now_s(), t;
    do {
        if (blas) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, A, K, B, N, 0.f, C, N);
        else if (N < 8) mimi_gemm_panel(M, N, K, P, B, N, C, N, 0, NULL);
        else mimi_gemm(M, N, K, A, K, B, N, C, N, 0);
        reps++;
    } while ((t = now_s() - t0) < 0.5);
    free(A); free(B); free(C); free(P);
    return 2.0 * M * N * K * reps / t * 1e-9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 4.0;
    openblas_set_num_threads(1);   /* the ceiling on one core too */
    mimi_config cfg;
    mimi_config_default(&cfg);
    mimi_model *m;
    ms_error e = {0};
    if (mimi_model_random(&m, &cfg, 1, &e)) {
        fprintf(stderr, "bench_mimi: %s\n", e.msg);
        return 1;
    }
    const int F = cfg.frame_samples, K = cfg.num_codebooks;
    int frames = (int)(secs * cfg.sample_rate / F);
    if (frames < 2) frames = 2;
    double fe, fd;
    frame_flops(m, &fe, &fd);
    printf("mimi bench: real dimensions, random weights, 1 thread, %d frames (%.2f s audio) per run\n",
           frames, frames * (double)F / cfg.sample_rate);
    printf("  flops per frame: encode %.3f GFLOP, decode %.3f GFLOP\n", fe * 1e-9, fd * 1e-9);
    double wb = frame_weight_bytes(m), bw = read_bandwidth();
    printf("  weights read per frame (encode + decode, any batch): %.0f MB; single-thread read bandwidth %.1f GB/s\n"
           "    -> memory floor %.1f ms per frame = at most %.2fx real time for one stream at batch 1\n",
           wb * 1e-6, bw * 1e-9, wb / bw * 1e3, (double)F / cfg.sample_rate / (wb / bw));
    double blas_sq = gemm_rate(1024, 1024, 1024, 1), ours_sq = gemm_rate(1024, 1024, 1024, 0);
    double blas_cv = gemm_rate(128, 480, 512, 1), ours_cv = gemm_rate(128, 480, 512, 0);
    double blas_tv = gemm_rate(2048, 2, 512, 1), ours_tv = gemm_rate(2048, 2, 512, 0);
    double blas_t6 = gemm_rate(8192, 6, 1024, 1), ours_t6 = gemm_rate(8192, 6, 1024, 0);
    printf("  sgemm 1024^3:        OpenBLAS %6.1f GFLOP/s, mimi_gemm %6.1f GFLOP/s (ratio %.2f)\n", blas_sq, ours_sq, ours_sq / blas_sq);
    printf("  sgemm 128x480x512:   OpenBLAS %6.1f GFLOP/s, mimi_gemm %6.1f GFLOP/s (ratio %.2f)\n", blas_cv, ours_cv, ours_cv / blas_cv);
    printf("  sgemm 2048x2x512:    OpenBLAS %6.1f GFLOP/s, mimi_gemm %6.1f GFLOP/s (ratio %.2f)\n", blas_tv, ours_tv, ours_tv / blas_tv);
    printf("  sgemm 8192x6x1024:   OpenBLAS %6.1f GFLOP/s, mimi_gemm %6.1f GFLOP/s (ratio %.2f; 32 MB of weights)\n", blas_t6, ours_t6, ours_t6 / blas_t6);
    for (int n = 1; n <= 3; n++) {
        mimi_stream *st[3];
        for (int i = 0; i < n; i++) st[i] = mimi_stream_create(m, &e);
        float *pcm = malloc((size_t)n * F * sizeof(float)), *out = malloc((size_t)n * F * sizeof(float));
        int *codes = malloc((size_t)n * K * sizeof(int));
        for (int i = 0; i < n * F; i++) pcm[i] = 0.3f * ((float)((i * 7919) % 2001) / 1000.f - 1.f);
        /* the fresh state first (the first frames after the streams'
         * creation), then frames until every transformer ring row is valid,
         * then the same frames again over full rings: the steady state a
         * user gets, the figures below; the fresh one beside them */
        const int fill = (int)(((long)cfg.context * cfg.hop + F - 1) / F);
        double te = 0, td = 0, best = 1e30, best_e = 0, best_d = 0, fresh_rt = 0;
        for (int phase = 0; phase < 2; phase++) {
            if (phase == 1) {
                for (int f = frames + 1; f < fill; f++)
                    if (mimi_encode_batch(m, st, n, pcm, codes, &e) || mimi_decode_batch(m, st, n, codes, out, &e)) {
                        fprintf(stderr, "%s\n", e.msg);
                        return 1;
                    }
                fresh_rt = (double)frames * F / cfg.sample_rate * n / (te + td);
                te = td = 0;
                best = 1e30;
            }
            for (int f = phase ? 0 : -1; f < frames; f++) {   /* frame -1: warm-up */
                double t0 = now_s();
                if (mimi_encode_batch(m, st, n, pcm, codes, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                double t1 = now_s();
                if (mimi_decode_batch(m, st, n, codes, out, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                double t2 = now_s();
                if (f >= 0) {
                    te += t1 - t0;
                    td += t2 - t1;
                    if (t2 - t0 < best) { best = t2 - t0; best_e = t1 - t0; best_d = t2 - t1; }
                }
            }
        }
        double audio = (double)frames * F / cfg.sample_rate * n;
        double rte = audio / te, rtd = audio / td, rt = audio / (te + td);
        double gf = (fe + fd) * frames * n / (te + td) * 1e-9;
        printf("  batch %d, full context (after %d frames): encode %.2fx real time, decode %.2fx, encode+decode %.2fx "
               "(target 3x: %s; fresh state %.2fx); %.1f GFLOP/s = %.2f of OpenBLAS sgemm 1024^3\n",
               n, fill, rte, rtd, rt, rt >= 3.0 ? "met" : "NOT met", fresh_rt, gf, gf / blas_sq);
        printf("           per frame: encode %.2f ms, decode %.2f ms (%d streams); fastest frame %.2f + %.2f ms = %.2fx real time\n",
               te / frames * 1e3, td / frames * 1e3, n, best_e * 1e3, best_d * 1e3,
               (double)F / cfg.sample_rate * n / best);
        for (int i = 0; i < n; i++) mimi_stream_free(st[i]);
        free(pcm); free(out); free(codes);
    }
    mimi_model_free(m);
    return 0;
}
