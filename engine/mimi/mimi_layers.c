/* mimi_layers.c - Mimi's layers over a batch of streams: causal streaming
 * convolutions and transposed convolutions (im2col + mimi_gemm), the SEANet
 * stacks, the streaming transformer with its K/V ring, ELU and GELU.
 * Layouts: see mimi_int.h. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "mimi_elu.h"
#include "mimi_int.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MIMI_HAVE_AVX2 1
#else
#define MIMI_HAVE_AVX2 0
#endif

/* ---- activations ---------------------------------------------------- */

/* ELU: mimi_elu1 (mimi_elu.h, shared with the device codec), eight at a
 * time with AVX2 in the same steps. */
void mimi_elu(float *dst, const float *src, size_t n) {
    size_t i = 0;
#if MIMI_HAVE_AVX2
    const __m256 lo = _mm256_set1_ps(-87.f), l2e = _mm256_set1_ps(1.44269504f);
    const __m256 c1 = _mm256_set1_ps(0.693359375f), c2 = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(src + i);
        __m256 x = _mm256_max_ps(_mm256_min_ps(x0, zero), lo);
        __m256 nf = _mm256_round_ps(_mm256_mul_ps(x, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(nf, c1, x);
        r = _mm256_fnmadd_ps(nf, c2, r);
        __m256 p = _mm256_set1_ps(1.f / 5040.f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
        p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r);
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
        __m256 two_n = _mm256_castsi256_ps(e);
        __m256 y = _mm256_fmadd_ps(p, two_n, _mm256_sub_ps(two_n, one));
        _mm256_storeu_ps(dst + i, _mm256_blendv_ps(y, x0, _mm256_cmp_ps(x0, zero, _CMP_GT_OQ)));
    }
#endif
    for (; i < n; i++) dst[i] = mimi_elu1(src[i]);
}

/* y[0..n) += w * x[0..n) */
static void axpy(float *y, float w, const float *x, size_t n) {
    size_t i = 0;
#if MIMI_HAVE_AVX2
    __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < n; i++) y[i] += w * x[i];
}

/* sum of a[i] * b[i] over n */
static float dot(const float *a, const float *b, int n) {
    int i = 0;
    float s = 0.f;
#if MIMI_HAVE_AVX2
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    __m256 v = _mm256_add_ps(acc0, acc1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    s = _mm_cvtss_f32(h);
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void elu_or_copy(float *dst, const float *src, size_t n, int elu) {
    if (elu) mimi_elu(dst, src, n);
    else memcpy(dst, src, n * sizeof(float));
}

/* ---- convolutions --------------------------------------------------- */

int mimi_conv_out_len(const mimi_conv *c, int T) {
    return c->transposed ? T * c->stride : T / c->stride;
}

static void set_bias_rows(float *y, int rows, int width, const float *b, int accumulate) {
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * width;
        float v = b ? b[r] : 0.f;
        if (!accumulate) for (int t = 0; t < width; t++) yr[t] = v;
        else if (b) for (int t = 0; t < width; t++) yr[t] += v;
    }
}

static void conv_plain(const mimi_conv *c, int n, int T, const float *x, int elu_in,
                       float *const *states, unsigned char *const *first, float *y,
                       int accumulate, mimi_ws *ws) {
    const int S = c->stride, P = c->pad, K = c->k, Tout = T / S, L = P + T;
    const size_t NT = (size_t)n * T, NO = (size_t)n * Tout;
    const float *B;
    if (c->w && S == 1) {
        /* one output channel (the decoder's last conv): y[t] = b + sum over
         * channels and taps of w * input, straight from the input rows */
        MS_ASSERT(c->cout == 1);
        set_bias_rows(y, 1, (int)NO, c->b, accumulate);
        float *row = ws->xb;                                   /* (L) */
        for (int s = 0; s < n; s++) {
            float *st = states[s] + c->state_off;              /* (cin, P) */
            float *ys = y + (size_t)s * Tout;
            for (int ci = 0; ci < c->cin; ci++) {
                elu_or_copy(row + P, x + ci * NT + (size_t)s * T, (size_t)T, elu_in);
                memcpy(row, st + (size_t)ci * P, (size_t)P * sizeof(float));
                memcpy(st + (size_t)ci * P, row + T, (size_t)P * sizeof(float));
                for (int kk = 0; kk < K; kk++) {
                    axpy(ys, c->w[(size_t)ci * K + kk], row + (size_t)kk * c->dil, (size_t)Tout);
                }
            }
        }
        return;
    }
    if (K == 1 && S == 1 && P == 0) {
        B = x;
        if (elu_in) {
            mimi_elu(ws->col, x, (size_t)c->cin * NT);
            B = ws->col;
        }
        if (c->wp && NT % 16 == 0) {   /* B read in place as one stream of NT steps */
            mimi_conv_src src = {.xb = B, .n = 1, .cin = c->cin, .K = 1, .S = 1, .dil = 1, .L = (int)NT, .Tout = (int)NT};
            set_bias_rows(y, c->cout, (int)NO, c->b, accumulate);
            mimi_gemm_conv_direct(c->cout, c->wp, &src, y, (int)NO);
            return;
        }
    } else if (c->wp && S == 1 && Tout % 16 == 0) {
        /* stride 1, weights pre-packed: the GEMM reads its input in place */
        for (int s = 0; s < n; s++) {
            float *st = states[s] + c->state_off;          /* (cin, P) */
            float *xb = ws->xb + (size_t)s * c->cin * L;   /* (cin, L) */
            for (int ci = 0; ci < c->cin; ci++) {
                float *row = xb + (size_t)ci * L;
                elu_or_copy(row + P, x + ci * NT + (size_t)s * T, (size_t)T, elu_in);
                memcpy(row, st + (size_t)ci * P, (size_t)P * sizeof(float));
                memcpy(st + (size_t)ci * P, row + T, (size_t)P * sizeof(float));
            }
        }
        mimi_conv_src src = {.xb = ws->xb, .n = n, .cin = c->cin, .K = K, .S = 1, .dil = c->dil, .L = L, .Tout = Tout};
        set_bias_rows(y, c->cout, (int)NO, c->b, accumulate);
        mimi_gemm_conv_direct(c->cout, c->wp, &src, y, (int)NO);
        return;
    } else {
        for (int s = 0; s < n; s++) {
            float *st = states[s] + c->state_off;   /* (cin, P) */
            float *xb = ws->xb;                     /* (cin, L) */
            int rep = c->replicate && first && first[s][0];
            for (int ci = 0; ci < c->cin; ci++) {
                const float *src = x + ci * NT + (size_t)s * T;
                float *row = xb + (size_t)ci * L;
                elu_or_copy(row + P, src, (size_t)T, elu_in);
                if (rep) for (int p = 0; p < P; p++) row[p] = row[P];
                else memcpy(row, st + (size_t)ci * P, (size_t)P * sizeof(float));
                memcpy(st + (size_t)ci * P, row + T, (size_t)P * sizeof(float));
                for (int kk = 0; kk < K; kk++) {
                    float *dst = ws->col + ((size_t)ci * K + kk) * NO + (size_t)s * Tout;
                    const float *sp = row + (size_t)kk * c->dil;
                    if (S == 1) memcpy(dst, sp, (size_t)Tout * sizeof(float));
                    else for (int t = 0; t < Tout; t++) dst[t] = sp[(size_t)t * S];
                }
            }
            if (rep) first[s][0] = 0;
        }
        B = ws->col;
    }
    set_bias_rows(y, c->cout, (int)NO, c->b, accumulate);
    if (c->w) {                 /* one output channel (the decoder's last conv) */
        MS_ASSERT(c->cout == 1);
        for (int r = 0; r < c->cin * K; r++) axpy(y, c->w[r], B + (size_t)r * NO, NO);
    } else if (c->wp) mimi_gemm_prepacked(c->cout, (int)NO, c->cin * K, c->wp, B, (int)NO, y, (int)NO, 1, ws->pack);
    else mimi_gemm_panel(c->cout, (int)NO, c->cin * K, c->wpanel, B, (int)NO, y, (int)NO, 1, ws->pack);
}

static void conv_transposed(const mimi_conv *c, int n, int T, const float *x, int elu_in,
                            float *const *states, float *y, int accumulate, mimi_ws *ws) {
    const int S = c->stride, K = c->k, PT = c->pad, Tout = T * S;
    const size_t NT = (size_t)n * T, NO = (size_t)n * Tout;
    const float *X = x;
    if (!c->depthwise) {
        if (elu_in) {
            mimi_elu(ws->xb, x, (size_t)c->cin * NT);
            X = ws->xb;
        }
        /* Z (cout*K, n*T) */
        if (c->wp) mimi_gemm_prepacked(c->cout * K, (int)NT, c->cin, c->wp, X, (int)NT, ws->col, (int)NT, 0, ws->pack);
        else mimi_gemm_panel(c->cout * K, (int)NT, c->cin, c->wpanel, X, (int)NT, ws->col, (int)NT, 0, ws->pack);
    } else {
        MS_ASSERT(!elu_in);
    }
    float *full = ws->xb + (c->depthwise ? 0 : (size_t)c->cin * NT);  /* (Tout + PT) */
    for (int s = 0; s < n; s++) {
        float *part = states[s] + c->state_off;   /* (cout, PT) */
        for (int co = 0; co < c->cout; co++) {
            memset(full, 0, (size_t)(Tout + PT) * sizeof(float));
            for (int kk = 0; kk < K; kk++) {
                if (c->depthwise) {
                    float w = c->w[(size_t)co * K + kk];
                    const float *xr = x + (size_t)co * NT + (size_t)s * T;
                    for (int t = 0; t < T; t++) full[t * S + kk] += w * xr[t];
                } else {
                    const float *z = ws->col + ((size_t)co * K + kk) * NT + (size_t)s * T;
                    for (int t = 0; t < T; t++) full[t * S + kk] += z[t];
                }
            }
            float *pr = part + (size_t)co * PT;
            for (int p = 0; p < PT; p++) full[p] += pr[p];
            memcpy(pr, full + Tout, (size_t)PT * sizeof(float));
            float b = c->b ? c->b[co] : 0.f;
            float *yr = y + (size_t)co * NO + (size_t)s * Tout;
            if (accumulate) for (int t = 0; t < Tout; t++) yr[t] += full[t] + b;
            else for (int t = 0; t < Tout; t++) yr[t] = full[t] + b;
        }
    }
}

void mimi_conv_forward(const mimi_conv *c, int n, int T, const float *x, int elu_in,
                       float *const *states, unsigned char *const *first, float *y,
                       int accumulate, mimi_ws *ws) {
    MS_ASSERT(c->transposed || T % c->stride == 0);
    if (c->transposed) conv_transposed(c, n, T, x, elu_in, states, y, accumulate, ws);
    else conv_plain(c, n, T, x, elu_in, states, first, y, accumulate, ws);
}

int mimi_seanet_forward(const mimi_seanet *net, int n, int T, float *const *states, mimi_ws *ws) {
    for (int i = 0; i < net->nops; i++) {
        const mimi_seanet_op *op = &net->ops[i];
        if (op->resblock) {
            mimi_conv_forward(&op->a, n, T, ws->act0, 1, states, NULL, ws->act1, 0, ws);
            mimi_conv_forward(&op->b, n, T, ws->act1, 1, states, NULL, ws->act0, 1, ws);
        } else {
            mimi_conv_forward(&op->a, n, T, ws->act0, op->elu_in, states, NULL, ws->act1, 0, ws);
            T = mimi_conv_out_len(&op->a, T);
            float *t = ws->act0;
            ws->act0 = ws->act1;
            ws->act1 = t;
        }
    }
    return T;
}

/* ---- transformer ---------------------------------------------------- */

/* y[:, j] = LayerNorm(x[:, j]) * w + b over D rows, for N columns. */
static void layer_norm(float *y, const float *x, const float *w, const float *b, int D, int N) {
    for (int j = 0; j < N; j++) {
        double mean = 0, var = 0;
        for (int d = 0; d < D; d++) mean += x[(size_t)d * N + j];
        mean /= D;
        for (int d = 0; d < D; d++) {
            double e = x[(size_t)d * N + j] - mean;
            var += e * e;
        }
        var /= D;
        float inv = (float)(1.0 / sqrt(var + 1e-5));
        float mu = (float)mean;
        for (int d = 0; d < D; d++)
            y[(size_t)d * N + j] = (x[(size_t)d * N + j] - mu) * inv * w[d] + b[d];
    }
}

/* Interleaved RoPE on one head's rows [r0, r0+hd) of column j at position pos. */
static void rope(float *q, int N, int j, int r0, int hd, long pos, const float *freq) {
    for (int i = 0; i < hd / 2; i++) {
        float ang = freq[i] * (float)pos;
        float cs = cosf(ang), sn = sinf(ang);
        float *a = q + (size_t)(r0 + 2 * i) * N + j, *b = q + (size_t)(r0 + 2 * i + 1) * N + j;
        float re = *a, im = *b;
        *a = re * cs - im * sn;
        *b = re * sn + im * cs;
    }
}

static void attention_layer(const mimi_model *m, int li, int n, int T, float *qkv, float *att,
                            mimi_tstate *const *ts) {
    const mimi_config *cfg = &m->cfg;
    const int D = cfg->d_model, H = cfg->num_heads, hd = D / H, ctx = cfg->context;
    const int N = n * T;
    const float scale = 1.f / sqrtf((float)hd);
    float qv[MIMI_MAX_CHANNELS];
    float sc[MIMI_MAX_CONTEXT];
    float acc[MIMI_MAX_CHANNELS];
    for (int s = 0; s < n; s++) {
        mimi_tstate *st = ts[s];
        float *kr = st->kv + (size_t)li * 2 * ctx * D, *vr = kr + (size_t)ctx * D;
        for (int t = 0; t < T; t++) {
            int j = s * T + t;
            long pos = st->offset + t;
            for (int h = 0; h < H; h++) {
                rope(qkv, N, j, h * hd, hd, pos, m->rope_freq);
                rope(qkv, N, j, D + h * hd, hd, pos, m->rope_freq);
            }
            int slot = (int)(pos % ctx);
            for (int d = 0; d < D; d++) {
                kr[(size_t)slot * D + d] = qkv[(size_t)(D + d) * N + j];
                vr[(size_t)slot * D + d] = qkv[(size_t)(2 * D + d) * N + j];
            }
        }
        for (int t = 0; t < T; t++) {
            int j = s * T + t;
            long pos = st->offset + t;
            for (int d = 0; d < D; d++) qv[d] = qkv[(size_t)d * N + j];
            for (int h = 0; h < H; h++) {
                const float *q = qv + h * hd;
                float mx = -FLT_MAX;
                for (int k = 0; k < ctx; k++) {
                    long pk = st->pos[k];
                    if (pk < 0 || pk > pos || pos - pk >= ctx) { sc[k] = -INFINITY; continue; }
                    sc[k] = dot(q, kr + (size_t)k * D + h * hd, hd) * scale;
                    if (sc[k] > mx) mx = sc[k];
                }
                float sum = 0.f;
                for (int k = 0; k < ctx; k++) {
                    sc[k] = sc[k] == -INFINITY ? 0.f : expf(sc[k] - mx);
                    sum += sc[k];
                }
                float inv = 1.f / sum;
                for (int d = 0; d < hd; d++) acc[d] = 0.f;
                for (int k = 0; k < ctx; k++) {
                    if (sc[k] == 0.f) continue;
                    axpy(acc, sc[k] * inv, vr + (size_t)k * D + h * hd, (size_t)hd);
                }
                for (int d = 0; d < hd; d++) att[(size_t)(h * hd + d) * N + j] = acc[d];
            }
        }
    }
}

void mimi_transformer_forward(const mimi_model *m, const mimi_transformer *tr, int n, int T,
                              float *x, mimi_tstate *const *ts, mimi_ws *ws) {
    const mimi_config *cfg = &m->cfg;
    const int D = cfg->d_model, F = cfg->dim_feedforward, ctx = cfg->context, N = n * T;
    float *h = ws->act1, *att = ws->act2, *big = ws->col;
    for (int s = 0; s < n; s++)
        for (int t = 0; t < T; t++) ts[s]->pos[(ts[s]->offset + t) % ctx] = ts[s]->offset + t;
    for (int li = 0; li < tr->nlayers; li++) {
        const mimi_tlayer *L = &tr->layers[li];
        layer_norm(h, x, L->norm1_w, L->norm1_b, D, N);
        mimi_gemm_panel(3 * D, N, D, L->in_proj, h, N, big, N, 0, ws->pack);
        attention_layer(m, li, n, T, big, att, ts);
        mimi_gemm_panel(D, N, D, L->out_proj, att, N, h, N, 0, ws->pack);
        for (int d = 0; d < D; d++) {
            float g = L->ls1 ? L->ls1[d] : 1.f;
            for (int j = 0; j < N; j++) x[(size_t)d * N + j] += g * h[(size_t)d * N + j];
        }
        layer_norm(h, x, L->norm2_w, L->norm2_b, D, N);
        mimi_gemm_panel(F, N, D, L->linear1, h, N, big, N, 0, ws->pack);
        for (size_t i = 0; i < (size_t)F * N; i++)
            big[i] = 0.5f * big[i] * (1.f + erff(big[i] * (float)M_SQRT1_2));
        mimi_gemm_panel(D, N, F, L->linear2, big, N, att, N, 0, ws->pack);
        for (int d = 0; d < D; d++) {
            float g = L->ls2 ? L->ls2[d] : 1.f;
            for (int j = 0; j < N; j++) x[(size_t)d * N + j] += g * att[(size_t)d * N + j];
        }
    }
    for (int s = 0; s < n; s++) ts[s]->offset += T;
}
