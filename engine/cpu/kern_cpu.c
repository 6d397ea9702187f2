/* kern_cpu.c - CPU kernels of the LM step (see kern_cpu.h). */
#include "kern_cpu.h"

#include <math.h>
#include <string.h>

#include "err.h"

/* Floats of the split input kept on the stack (64 KiB). */
#define KERN_XS_STACK 16384

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KERN_AVX2 1
#endif

kern_mat kern_mat_rows(const kern_mat *m, int r0, int n) {
    MS_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= m->rows);
    kern_mat v = *m;
    v.w = (const char *)m->w + (size_t)r0 * (size_t)m->cols * st_dtype_size(m->dtype);
    v.rows = n;
    if (m->scale) v.scale = m->scale + r0;
    return v;
}

/* one weight element widened to float32 */
static inline float wget(const void *w, st_dtype dt, size_t i) {
    switch (dt) {
    case ST_BF16: return st_bf16_to_f32(((const uint16_t *)w)[i]);
    case ST_F16: return st_f16_to_f32(((const uint16_t *)w)[i]);
    case ST_I8: return (float)((const int8_t *)w)[i];   /* unscaled: embeddings are never int8 */
    default: return ((const float *)w)[i];
    }
}

#ifdef KERN_AVX2
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#ifdef __F16C__
static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
#endif

/* LOADW(p): 8 weights at element pointer p widened to float32 */
#define DEF_ROWS(NAME, WT, LOADW)                                                                  \
    static void NAME(float *y, const float *x, const WT *w, int n, int rows, int cols, int r0,   \
                     int r1, st_dtype dt) {                                                       \
        int c8 = cols & ~7, c32 = cols & ~31;                                                     \
        for (int r = r0; r < r1; r++) {                                                           \
            const WT *wr = w + (size_t)r * cols;                                                  \
            if (n == 1) {                                                                         \
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                       \
                int c = 0;                                                                        \
                for (; c < c32; c += 32) {                                                        \
                    a0 = _mm256_fmadd_ps(LOADW(wr + c), _mm256_loadu_ps(x + c), a0);              \
                    a1 = _mm256_fmadd_ps(LOADW(wr + c + 8), _mm256_loadu_ps(x + c + 8), a1);      \
                    a2 = _mm256_fmadd_ps(LOADW(wr + c + 16), _mm256_loadu_ps(x + c + 16), a2);    \
                    a3 = _mm256_fmadd_ps(LOADW(wr + c + 24), _mm256_loadu_ps(x + c + 24), a3);    \
                }                                                                                 \
                for (; c < c8; c += 8) a0 = _mm256_fmadd_ps(LOADW(wr + c), _mm256_loadu_ps(x + c), a0); \
                float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));     \
                for (; c < cols; c++) s += wget(wr, dt, (size_t)c) * x[c];                        \
                y[r] = s;                                                                         \
                continue;                                                                         \
            }                                                                                     \
            for (int j0 = 0; j0 < n; j0 += 4) {                                                   \
                int nj = n - j0 < 4 ? n - j0 : 4;                                                 \
                const float *xj = x + (size_t)j0 * cols;                                          \
                __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),     \
                               _mm256_setzero_ps()};                                              \
                int c = 0;                                                                        \
                for (; c < c8; c += 8) {                                                          \
                    __m256 wv = LOADW(wr + c);                                                    \
                    for (int j = 0; j < nj; j++)                                                  \
                        a[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xj + (size_t)j * cols + c), a[j]); \
                }                                                                                 \
                for (int j = 0; j < nj; j++) {                                                    \
                    float s = hsum(a[j]);                                                         \
                    for (int cc = c; cc < cols; cc++) s += wget(wr, dt, (size_t)cc) * xj[(size_t)j * cols + cc]; \
                    y[(size_t)(j0 + j) * rows + r] = s;                                           \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }
DEF_ROWS(rows_f32, float, _mm256_loadu_ps)

/* bf16 rows: a 256-bit load holds 16 weights; as 32-bit lanes, (lane << 16)
 * is the even weight and (lane & 0xffff0000) the odd one, both exact
 * float32. x is split once into its even and odd elements so each load
 * feeds two FMAs with two ALU operations (no widening shuffles). */
static void rows_bf16(float *y, const float *x, const uint16_t *w, int n, int rows, int cols, int r0, int r1,
                      st_dtype dt) {
    int c16 = cols & ~15, h = c16 / 2;
    if (c16 == 0) {
        for (int r = r0; r < r1; r++)
            for (int j = 0; j < n; j++) {
                float s = 0;
                for (int c = 0; c < cols; c++) s += wget(w, dt, (size_t)r * cols + c) * x[(size_t)j * cols + c];
                y[(size_t)j * rows + r] = s;
            }
        return;
    }
    /* x split (n, [even h | odd h]); on the stack for batch-1 sizes (no
     * allocation on the hot path), else on the heap (prefill chunks) */
    float stackbuf[KERN_XS_STACK] __attribute__((aligned(32)));
    size_t need = (size_t)n * c16;
    float *xs = need <= KERN_XS_STACK ? stackbuf : aligned_alloc(32, sizeof(float) * need);
    MS_ASSERT(xs != NULL);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < h; i++) {
            xs[(size_t)j * c16 + i] = x[(size_t)j * cols + 2 * i];
            xs[(size_t)j * c16 + h + i] = x[(size_t)j * cols + 2 * i + 1];
        }
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int r = r0; r < r1; r++) {
        const uint16_t *wr = w + (size_t)r * cols;
        if (n == 1) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int c = 0;
            for (; c + 32 <= c16; c += 32) {
                __m256i v0 = _mm256_loadu_si256((const __m256i *)(wr + c));
                __m256i v1 = _mm256_loadu_si256((const __m256i *)(wr + c + 16));
                a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_load_ps(xs + c / 2), a0);
                a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi)), _mm256_load_ps(xs + h + c / 2), a1);
                a2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), _mm256_loadu_ps(xs + c / 2 + 8), a2);
                a3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, hi)), _mm256_loadu_ps(xs + h + c / 2 + 8), a3);
            }
            for (; c < c16; c += 16) {
                __m256i v0 = _mm256_loadu_si256((const __m256i *)(wr + c));
                a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_loadu_ps(xs + c / 2), a0);
                a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi)), _mm256_loadu_ps(xs + h + c / 2), a1);
            }
            float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (c = c16; c < cols; c++) s += st_bf16_to_f32(wr[c]) * x[c];
            y[r] = s;
            continue;
        }
        for (int j0 = 0; j0 < n; j0 += 4) {
            int nj = n - j0 < 4 ? n - j0 : 4;
            __m256 ae[4], ao[4];
            for (int j = 0; j < 4; j++) ae[j] = ao[j] = _mm256_setzero_ps();
            for (int c = 0; c < c16; c += 16) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(wr + c));
                __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
                for (int j = 0; j < nj; j++) {
                    const float *xj = xs + (size_t)(j0 + j) * c16;
                    ae[j] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xj + c / 2), ae[j]);
                    ao[j] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(xj + h + c / 2), ao[j]);
                }
            }
            for (int j = 0; j < nj; j++) {
                float s = hsum(_mm256_add_ps(ae[j], ao[j]));
                const float *xj = x + (size_t)(j0 + j) * cols;
                for (int c = c16; c < cols; c++) s += st_bf16_to_f32(wr[c]) * xj[c];
                y[(size_t)(j0 + j) * rows + r] = s;
            }
        }
    }
    if (xs != stackbuf) free(xs);
}
#ifdef __F16C__
DEF_ROWS(rows_f16, uint16_t, load_f16)
#endif
#endif /* KERN_AVX2 */

static void rows_scalar(float *y, const float *x, const kern_mat *w, int n, int r0, int r1) {
    for (int r = r0; r < r1; r++)
        for (int j = 0; j < n; j++) {
            const float *xj = x + (size_t)j * w->cols;
            float s = 0;
            for (int c = 0; c < w->cols; c++) s += wget(w->w, w->dtype, (size_t)r * w->cols + c) * xj[c];
            y[(size_t)j * w->rows + r] = s;
        }
}

void kern_matmul_rows(float *y, const float *x, const kern_mat *w, int n, int r0, int r1) {
    if (w->dtype == ST_I8) {
        kern_matmul_rows_i8(y, x, w, n, r0, r1);
        return;
    }
#ifdef KERN_AVX2
    switch (w->dtype) {
    case ST_F32: rows_f32(y, x, w->w, n, w->rows, w->cols, r0, r1, ST_F32); return;
    case ST_BF16: rows_bf16(y, x, w->w, n, w->rows, w->cols, r0, r1, ST_BF16); return;
#ifdef __F16C__
    case ST_F16: rows_f16(y, x, w->w, n, w->rows, w->cols, r0, r1, ST_F16); return;
#endif
    default: break;
    }
#endif
    rows_scalar(y, x, w, n, r0, r1);
}

typedef struct {
    float *y;
    const float *x;
    const kern_mat *w;
    int n;
} matmul_job;

/* rows split in 16-row blocks so each thread starts on a fresh cache line */
static void matmul_part(void *ctx, int i, int nt) {
    matmul_job *j = ctx;
    int blocks = (j->w->rows + 15) / 16;
    int b0 = (int)((long)blocks * i / nt), b1 = (int)((long)blocks * (i + 1) / nt);
    int r0 = b0 * 16, r1 = b1 * 16 < j->w->rows ? b1 * 16 : j->w->rows;
    if (r0 < r1) kern_matmul_rows(j->y, j->x, j->w, j->n, r0, r1);
}

void kern_matmul(float *y, const float *x, const kern_mat *w, int n, kern_pool *pool) {
    matmul_job j = {y, x, w, n};
    /* small matrices are not worth a wake-up of the workers */
    if ((size_t)w->rows * w->cols < 32768 || w->rows < 32)
        matmul_part(&j, 0, 1);
    else
        kern_pool_run(pool, matmul_part, &j);
}

void kern_embed_add(float *x, const kern_mat *table, int token) {
    if (token < 0) return;
    MS_ASSERT(token < table->rows);
    size_t base = (size_t)token * table->cols;
    for (int c = 0; c < table->cols; c++) x[c] += wget(table->w, table->dtype, base + c);
}

void kern_rmsnorm(float *y, const float *x, const float *alpha, int B, int C, float eps) {
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * C;
        float *yb = y + (size_t)b * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)xb[i] * xb[i];
        float var = eps + (float)(ss / C);
        float r = 1.0f / sqrtf(var);
        for (int i = 0; i < C; i++) yb[i] = xb[i] * (alpha[i] * r);
    }
}

void kern_matvec_bf16(float *y, const float *x, const uint16_t *w, int B, int N, int K, kern_pool *pool) {
    kern_mat m = {w, ST_BF16, N, K, NULL};
    kern_matmul(y, x, &m, B, pool);
}

void kern_rope(float *v, int heads, int head_dim, int64_t pos, float max_period) {
    int half = head_dim / 2;
    float k = (float)(-log((double)max_period) * 2.0 / head_dim);
    float t = (float)pos;
    for (int i = 0; i < half; i++) {
        float f = expf((float)i * k);
        float a = f * t;
        float cr = cosf(a), ci = sinf(a);
        for (int h = 0; h < heads; h++) {
            float *p = v + (size_t)h * head_dim + 2 * i;
            float re = p[0], im = p[1];
            p[0] = re * cr - im * ci;
            p[1] = re * ci + im * cr;
        }
    }
}

static inline float dot(const float *a, const float *b, int n) {
    int d = 0;
    float s = 0;
#ifdef KERN_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    s = hsum(acc);
#endif
    for (; d < n; d++) s += a[d] * b[d];
    return s;
}

static inline void axpy(float *y, float a, const float *x, int n) {
    int d = 0;
#ifdef KERN_AVX2
    __m256 av = _mm256_set1_ps(a);
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(y + d, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d)));
#endif
    for (; d < n; d++) y[d] += a * x[d];
}

void kern_attend_ring(float *out, const float *q, const float *k, const float *v, float *scratch, int ring,
                      int first, int nk, int heads, int head_dim, int stride) {
    float scale = 1.0f / sqrtf((float)head_dim);
    int n0 = first + nk > ring ? first + nk - ring : 0;   /* keys j < n0 are rows 0 .. n0 - 1 */
#define ROW(j) ((size_t)((j) < n0 ? (j) : first + (j) - n0) * stride)
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * head_dim;
        float mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            float s = dot(qh, k + ROW(j) + (size_t)h * head_dim, head_dim) * scale;
            scratch[j] = s;
            if (s > mx) mx = s;
        }
        float sum = 0;
        for (int j = 0; j < nk; j++) {
            scratch[j] = expf(scratch[j] - mx);
            sum += scratch[j];
        }
        float inv = 1.0f / sum;
        float *oh = out + (size_t)h * head_dim;
        memset(oh, 0, sizeof(float) * (size_t)head_dim);
        for (int j = 0; j < nk; j++) axpy(oh, scratch[j] * inv, v + ROW(j) + (size_t)h * head_dim, head_dim);
    }
#undef ROW
}

void kern_attend(float *out, const float *q, const float *k, const float *v, float *scratch, int nk,
                 int heads, int head_dim, int stride) {
    kern_attend_ring(out, q, k, v, scratch, nk, 0, nk, heads, head_dim, stride);
}

typedef struct {
    float *out;
    const float *q, *k, *v;
    float *scratch;
    int ring, first, nk, heads, head_dim, stride;
} attend_job;

static void attend_part(void *ctx, int i, int nt) {
    attend_job *j = ctx;
    int h0 = j->heads * i / nt, h1 = j->heads * (i + 1) / nt;
    size_t off = (size_t)h0 * j->head_dim;
    if (h1 > h0)
        kern_attend_ring(j->out + off, j->q + off, j->k + off, j->v + off, j->scratch + (size_t)i * j->nk, j->ring,
                         j->first, j->nk, h1 - h0, j->head_dim, j->stride);
}

void kern_attend_ring_pool(float *out, const float *q, const float *k, const float *v, float *scratch, int ring,
                           int first, int nk, int heads, int head_dim, int stride, kern_pool *pool) {
    attend_job j = {out, q, k, v, scratch, ring, first, nk, heads, head_dim, stride};
    if ((long)nk * heads * head_dim < 65536)
        attend_part(&j, 0, 1);
    else
        kern_pool_run(pool, attend_part, &j);
}

void kern_silu_gate(float *h, const float *u, int H) {
    for (int i = 0; i < H; i++) {
        float g = u[i];
        h[i] = g / (1.0f + expf(-g)) * u[H + i];
    }
}

void kern_add(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

typedef struct {
    const float *x;
    size_t n;
    double part[256];
} sum_job;

static void sum_part(void *ctx, int i, int nt) {
    sum_job *j = ctx;
    size_t a = j->n * (size_t)i / (size_t)nt, b = j->n * (size_t)(i + 1) / (size_t)nt;
    const float *x = j->x;
#ifdef KERN_AVX2
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t c = a;
    for (; c + 32 <= b; c += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + c));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + c + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + c + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + c + 24));
    }
    double s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; c < b; c++) s += x[c];
#else
    double s = 0;
    for (size_t c = a; c < b; c++) s += x[c];
#endif
    j->part[i] = s;
}

double kern_read_bw(const float *x, size_t n, kern_pool *pool) {
    sum_job j = {.x = x, .n = n};
    kern_pool_run(pool, sum_part, &j);
    double s = 0;
    for (int i = 0; i < kern_pool_threads(pool); i++) s += j.part[i];
    return s;
}
