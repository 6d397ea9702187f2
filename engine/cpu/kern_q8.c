/* kern_q8.c - the 8-bit schemes on the CPU (see kern_cpu.h): the
 * quantizers (weights per output row, K/V per position and head), the int8
 * weight rows of kern_matmul (W8A16: int8 bytes widened in registers, the
 * row's scale applied to the row's sum), the attention over an int8 ring.
 *
 * Both quantizers are the exact rule: s = max|x| / 127 as a float32
 * division (s = 1 for an all-zero vector), q = x / s as a float32 division,
 * rounded half to even (rintf in the default rounding mode), clamped to
 * [-127, 127]. The fixture generator (tests/fixtures/gen_lm_q8.py) does the
 * same in torch, so the dequantized values q * s are the ones the official
 * model was run on.
 */
#include <math.h>
#include <string.h>

#include "err.h"
#include "kern_cpu.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KQ_AVX2 1
#endif

/* one stored weight element widened to float32 */
static inline float wval(const void *w, st_dtype dt, size_t i) {
    switch (dt) {
    case ST_BF16: return st_bf16_to_f32(((const uint16_t *)w)[i]);
    case ST_F16: return st_f16_to_f32(((const uint16_t *)w)[i]);
    case ST_I8: return (float)((const int8_t *)w)[i];
    default: return ((const float *)w)[i];
    }
}

static inline int8_t q8_round(float v, float s) {
    float r = rintf(v / s);   /* a division, as the scheme says (not v * (1 / s)) */
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    return (int8_t)r;
}

float kern_q8_scale(float absmax) { return absmax > 0.0f ? absmax / 127.0f : 1.0f; }

void kern_q8_quantize_rows(int8_t *q, float *s, const void *w, st_dtype dt, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        size_t base = (size_t)r * cols;
        float m = 0.0f;
        for (int c = 0; c < cols; c++) {
            float a = fabsf(wval(w, dt, base + c));
            if (a > m) m = a;
        }
        float sr = kern_q8_scale(m);
        s[r] = sr;
        for (int c = 0; c < cols; c++) q[base + c] = q8_round(wval(w, dt, base + c), sr);
    }
}

void kern_q8_quantize_heads(int8_t *q, float *s, const float *x, int heads, int head_dim) {
    for (int h = 0; h < heads; h++) {
        const float *xh = x + (size_t)h * head_dim;
        float m = 0.0f;
        for (int d = 0; d < head_dim; d++)
            if (fabsf(xh[d]) > m) m = fabsf(xh[d]);
        float sh = kern_q8_scale(m);
        s[h] = sh;
        for (int d = 0; d < head_dim; d++) q[(size_t)h * head_dim + d] = q8_round(xh[d], sh);
    }
}

#ifdef KQ_AVX2
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* 8 int8 weights at p widened to float32 (vpmovsxbd from memory, vcvtdq2ps) */
static inline __m256 load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#endif

/* dot of float32 a with int8 b over n */
static inline float dot_f_i8(const float *a, const int8_t *b, int n) {
    int d = 0;
    float s = 0.0f;
#ifdef KQ_AVX2
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (; d + 16 <= n; d += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), load_i8(b + d), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), load_i8(b + d + 8), acc1);
    }
    for (; d + 8 <= n; d += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), load_i8(b + d), acc0);
    s = hsum8(_mm256_add_ps(acc0, acc1));
#endif
    for (; d < n; d++) s += a[d] * (float)b[d];
    return s;
}

void kern_matmul_rows_i8(float *y, const float *x, const kern_mat *w, int n, int r0, int r1) {
    MS_ASSERT(w->dtype == ST_I8 && w->scale != NULL);
    const int8_t *W = w->w;
    int rows = w->rows, cols = w->cols;
    for (int r = r0; r < r1; r++) {
        const int8_t *wr = W + (size_t)r * cols;
        float sr = w->scale[r];
        if (n == 1) {
            int c = 0;
            float s = 0.0f;
#ifdef KQ_AVX2
            /* 32 weights (32 bytes) per iteration, four accumulators */
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (; c + 32 <= cols; c += 32) {
                a0 = _mm256_fmadd_ps(load_i8(wr + c), _mm256_loadu_ps(x + c), a0);
                a1 = _mm256_fmadd_ps(load_i8(wr + c + 8), _mm256_loadu_ps(x + c + 8), a1);
                a2 = _mm256_fmadd_ps(load_i8(wr + c + 16), _mm256_loadu_ps(x + c + 16), a2);
                a3 = _mm256_fmadd_ps(load_i8(wr + c + 24), _mm256_loadu_ps(x + c + 24), a3);
            }
            for (; c + 8 <= cols; c += 8) a0 = _mm256_fmadd_ps(load_i8(wr + c), _mm256_loadu_ps(x + c), a0);
            s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
            for (; c < cols; c++) s += (float)wr[c] * x[c];
            y[r] = s * sr;
            continue;
        }
        /* several input rows: each weight load feeds up to 4 of them */
        for (int j0 = 0; j0 < n; j0 += 4) {
            int nj = n - j0 < 4 ? n - j0 : 4;
            const float *xj = x + (size_t)j0 * cols;
            float acc[4] = {0, 0, 0, 0};
            int c = 0;
#ifdef KQ_AVX2
            __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (; c + 8 <= cols; c += 8) {
                __m256 wv = load_i8(wr + c);
                for (int j = 0; j < nj; j++)
                    a[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xj + (size_t)j * cols + c), a[j]);
            }
            for (int j = 0; j < nj; j++) acc[j] = hsum8(a[j]);
#endif
            for (int j = 0; j < nj; j++) {
                float s = acc[j];
                for (int cc = c; cc < cols; cc++) s += (float)wr[cc] * xj[(size_t)j * cols + cc];
                y[(size_t)(j0 + j) * rows + r] = s * sr;
            }
        }
    }
}

/* out += a * (float)v over n */
static inline void axpy_i8(float *out, float a, const int8_t *v, int n) {
    int d = 0;
#ifdef KQ_AVX2
    __m256 av = _mm256_set1_ps(a);
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(out + d, _mm256_fmadd_ps(av, load_i8(v + d), _mm256_loadu_ps(out + d)));
#endif
    for (; d < n; d++) out[d] += a * (float)v[d];
}

void kern_attend_ring_q8(float *out, const float *q, const int8_t *k, const float *ks, const int8_t *v,
                         const float *vs, float *scratch, int ring, int first, int nk, int heads, int head_dim,
                         int stride, int sstride) {
    float scale = 1.0f / sqrtf((float)head_dim);
    int n0 = first + nk > ring ? first + nk - ring : 0;   /* keys j < n0 are rows 0 .. n0 - 1 */
#define ROWQ(j) ((size_t)((j) < n0 ? (j) : first + (j) - n0))
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * head_dim;
        float mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            size_t row = ROWQ(j);
            /* q . (k8 * s) = s * (q . k8): the key's scale after its dot */
            float sc = dot_f_i8(qh, k + row * stride + (size_t)h * head_dim, head_dim) * ks[row * sstride + h] * scale;
            scratch[j] = sc;
            if (sc > mx) mx = sc;
        }
        float sum = 0;
        for (int j = 0; j < nk; j++) {
            scratch[j] = expf(scratch[j] - mx);
            sum += scratch[j];
        }
        float inv = 1.0f / sum;
        float *oh = out + (size_t)h * head_dim;
        memset(oh, 0, sizeof(float) * (size_t)head_dim);
        for (int j = 0; j < nk; j++) {
            size_t row = ROWQ(j);
            /* the value's scale folded into its softmax weight */
            axpy_i8(oh, scratch[j] * inv * vs[row * sstride + h], v + row * stride + (size_t)h * head_dim, head_dim);
        }
    }
#undef ROWQ
}

typedef struct {
    float *out;
    const float *q;
    const int8_t *k, *v;
    const float *ks, *vs;
    float *scratch;
    int ring, first, nk, heads, head_dim, stride, sstride;
} attend_q8_job;

static void attend_q8_part(void *ctx, int i, int nt) {
    attend_q8_job *j = ctx;
    int h0 = j->heads * i / nt, h1 = j->heads * (i + 1) / nt;
    size_t off = (size_t)h0 * j->head_dim;
    if (h1 > h0)
        kern_attend_ring_q8(j->out + off, j->q + off, j->k + off, j->ks + h0, j->v + off, j->vs + h0,
                            j->scratch + (size_t)i * j->nk, j->ring, j->first, j->nk, h1 - h0, j->head_dim, j->stride,
                            j->sstride);
}

void kern_attend_ring_q8_pool(float *out, const float *q, const int8_t *k, const float *ks, const int8_t *v,
                              const float *vs, float *scratch, int ring, int first, int nk, int heads, int head_dim,
                              int stride, int sstride, kern_pool *pool) {
    attend_q8_job j = {out, q, k, v, ks, vs, scratch, ring, first, nk, heads, head_dim, stride, sstride};
    if ((long)nk * heads * head_dim < 65536)
        attend_q8_part(&j, 0, 1);
    else
        kern_pool_run(pool, attend_q8_part, &j);
}
