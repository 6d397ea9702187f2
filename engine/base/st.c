/* st.c - safetensors reader (validating, mmap) and writer. See st.h. */
#include "st.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"

struct st_file {
    char *path;
    void *map;            /* mmap'd file, or NULL for st_open_mem */
    size_t map_len;
    const uint8_t *base;  /* file image */
    size_t len;
    size_t n;
    st_tensor *t;         /* header order */
    size_t *by_name;      /* indices sorted by name */
};

static const char *const dtype_names[ST__NDTYPES] = {"F32", "F16", "BF16", "I64", "I32", "U8", "BOOL", "I8"};
static const size_t dtype_sizes[ST__NDTYPES] = {4, 2, 2, 8, 4, 1, 1, 1};

size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST__NDTYPES ? dtype_sizes[d] : 0; }
const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST__NDTYPES ? dtype_names[d] : "?"; }

int st_dtype_parse(const char *s) {
    for (int i = 0; i < ST__NDTYPES; i++)
        if (strcmp(s, dtype_names[i]) == 0) return i;
    return -1;
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: renormalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;            /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;           /* overflow -> inf */
    if (a < 0x38800000u) {                                 /* subnormal or zero */
        if (a < 0x33000000u) return sign;
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);                  /* 14..24 */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);            /* round to nearest even */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

typedef struct { uint64_t begin, end; size_t idx; } st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Parse one header member into t; data_len is the size of the data area. */
static int parse_tensor(st_file *f, const js_value *m, st_tensor *t, uint64_t data_len,
                        uint64_t *begin, uint64_t *end, ms_error *err) {
    const char *nm = m->key;
    if (strlen(nm) > ST_MAX_NAME)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: a tensor name is longer than %d bytes", f->path, ST_MAX_NAME);
    if (m->type != JS_OBJECT)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: header entry is not an object", f->path, nm);
    for (const js_value *c = m->child; c; c = c->next)
        if (strcmp(c->key, "dtype") && strcmp(c->key, "shape") && strcmp(c->key, "data_offsets"))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: unknown field \"%s\"", f->path, nm, c->key);
    const char *dup;
    if (js_has_duplicate_keys(m, &dup))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: field \"%s\" given twice", f->path, nm, dup);
    const js_value *dt = js_get(m, "dtype"), *sh = js_get(m, "shape"), *off = js_get(m, "data_offsets");
    if (!dt || dt->type != JS_STRING)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: missing or non-string dtype", f->path, nm);
    int d = st_dtype_parse(dt->str);
    if (d < 0)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: tensor %s: unsupported dtype \"%s\"", f->path, nm, dt->str);
    t->dtype = (st_dtype)d;
    if (!sh || sh->type != JS_ARRAY)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: missing or non-array shape", f->path, nm);
    if (sh->len > ST_MAX_DIMS)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: tensor %s: %zu dimensions (at most %d)", f->path, nm, sh->len, ST_MAX_DIMS);
    t->ndim = (int)sh->len;
    uint64_t nel = 1;
    int i = 0;
    for (const js_value *c = sh->child; c; c = c->next, i++) {
        if (c->type != JS_NUMBER || !c->is_int || c->i < 0)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer", f->path, nm, i);
        t->shape[i] = c->i;
        if (c->i != 0 && nel > UINT64_MAX / (uint64_t)c->i)
            return ms_err_set(err, MS_ERR_RANGE, "%s: tensor %s: element count overflows", f->path, nm);
        nel *= (uint64_t)c->i;
    }
    t->nel = nel;
    if (!off || off->type != JS_ARRAY || off->len != 2)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: data_offsets is not [begin, end]", f->path, nm);
    const js_value *b = js_at(off, 0), *e = js_at(off, 1);
    if (b->type != JS_NUMBER || !b->is_int || b->i < 0 || e->type != JS_NUMBER || !e->is_int || e->i < 0)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: data_offsets are not non-negative integers", f->path, nm);
    *begin = (uint64_t)b->i;
    *end = (uint64_t)e->i;
    if (*end < *begin)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: data_offsets end %llu before begin %llu", f->path, nm,
                          (unsigned long long)*end, (unsigned long long)*begin);
    if (*end > data_len)
        return ms_err_set(err, MS_ERR_RANGE, "%s: tensor %s: data_offsets end %llu past the data (%llu bytes)", f->path,
                          nm, (unsigned long long)*end, (unsigned long long)data_len);
    uint64_t es = dtype_sizes[d];
    if (nel > UINT64_MAX / es || nel * es != *end - *begin)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: shape needs %llu bytes of %s, data_offsets give %llu",
                          f->path, nm, (unsigned long long)(nel > UINT64_MAX / es ? UINT64_MAX : nel * es),
                          dtype_names[d], (unsigned long long)(*end - *begin));
    t->nbytes = (size_t)(*end - *begin);
    return MS_OK;
}

static int st_parse(st_file *f, ms_error *err) {
    if (f->len < 8) return ms_err_set(err, MS_ERR_FORMAT, "%s: file too short for a safetensors header (%zu bytes)", f->path, f->len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->base[i];
    if (hlen > ST_MAX_HEADER)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: header of %llu bytes exceeds the limit of %llu", f->path,
                          (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > f->len - 8)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: header of %llu bytes runs past the end of the file (%zu bytes)",
                          f->path, (unsigned long long)hlen, f->len);
    ms_error jerr = {0};
    js_value *root = js_parse((const char *)f->base + 8, (size_t)hlen, &jerr);
    if (!root) return ms_err_set(err, jerr.code, "%s: header: %s", f->path, jerr.msg);
    int rc = MS_OK;
    st_span *spans = NULL;
    if (root->type != JS_OBJECT) { rc = ms_err_set(err, MS_ERR_FORMAT, "%s: header is not a JSON object", f->path); goto out; }
    size_t n = 0;
    for (const js_value *c = root->child; c; c = c->next)
        if (strcmp(c->key, "__metadata__") != 0) n++;
    if (n > ST_MAX_TENSORS) { rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %zu tensors (at most %d)", f->path, n, ST_MAX_TENSORS); goto out; }
    f->t = calloc(n ? n : 1, sizeof *f->t);
    f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
    spans = calloc(n ? n : 1, sizeof *spans);
    if (!f->t || !f->by_name || !spans) { rc = ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", f->path); goto out; }
    uint64_t data_len = f->len - 8 - hlen;
    const uint8_t *data = f->base + 8 + hlen;
    size_t k = 0;
    int nmeta = 0;
    for (const js_value *c = root->child; c; c = c->next) {
        if (strcmp(c->key, "__metadata__") == 0) {
            if (++nmeta > 1 || c->type != JS_OBJECT) { rc = ms_err_set(err, MS_ERR_FORMAT, "%s: bad __metadata__", f->path); goto out; }
            for (const js_value *m = c->child; m; m = m->next)
                if (m->type != JS_STRING) { rc = ms_err_set(err, MS_ERR_FORMAT, "%s: __metadata__ value \"%s\" is not a string", f->path, m->key); goto out; }
            continue;
        }
        st_tensor *t = &f->t[k];
        t->name = strdup(c->key);
        if (!t->name) { rc = ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", f->path); goto out; }
        f->n = k + 1; /* so st_close frees the names so far */
        if ((rc = parse_tensor(f, c, t, data_len, &spans[k].begin, &spans[k].end, err))) goto out;
        t->data = data + spans[k].begin;
        spans[k].idx = k;
        f->by_name[k] = k;
        k++;
    }
    f->n = k;
    qsort_r(f->by_name, k, sizeof *f->by_name, cmp_name_idx, f->t);
    for (size_t i = 1; i < k; i++)
        if (strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name) == 0) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s appears twice in the header", f->path, f->t[f->by_name[i]].name);
            goto out;
        }
    qsort(spans, k, sizeof *spans, cmp_span);
    for (size_t i = 1; i < k; i++) {
        /* Empty tensors occupy no bytes and overlap nothing. */
        if (spans[i].begin == spans[i].end || spans[i - 1].begin == spans[i - 1].end) continue;
        if (spans[i].begin < spans[i - 1].end) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensors %s and %s overlap", f->path,
                            f->t[spans[i - 1].idx].name, f->t[spans[i].idx].name);
            goto out;
        }
    }
out:
    free(spans);
    js_free(root);
    return rc;
}

static st_file *st_alloc(const char *name, ms_error *err) {
    st_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(name ? name : "(memory)");
    if (!f || !f->path) {
        free(f);
        ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    return f;
}

st_file *st_open_mem(const void *buf, size_t len, const char *name, ms_error *err) {
    st_file *f = st_alloc(name, err);
    if (!f) return NULL;
    f->base = buf;
    f->len = len;
    if (st_parse(f, err)) { st_close(f); return NULL; }
    return f;
}

st_file *st_open(const char *path, ms_error *err) {
    st_file *f = st_alloc(path, err);
    if (!f) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ms_err_set(err, MS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        st_close(f);
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ms_err_set(err, MS_ERR_IO, "%s: not a regular file", path);
        close(fd);
        st_close(f);
        return NULL;
    }
    f->len = (size_t)sb.st_size;
    if (f->len > 0) {
        f->map = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            ms_err_set(err, MS_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
            close(fd);
            st_close(f);
            return NULL;
        }
        f->map_len = f->len;
        f->base = f->map;
    }
    close(fd);
    if (st_parse(f, err)) { st_close(f); return NULL; }
    return f;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    free(f->by_name);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

const char *st_path(const st_file *f) { return f->path; }
size_t st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, size_t i) { return i < f->n ? &f->t[i] : NULL; }

const st_tensor *st_find(const st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->t[f->by_name[mid]].name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

const st_tensor *st_get(const st_file *f, const char *name, int ndim, const int64_t *shape,
                        int float_ok, st_dtype want, ms_error *err) {
    const st_tensor *t = st_find(f, name);
    if (!t) { ms_err_set(err, MS_ERR_NOTFOUND, "%s: tensor %s is missing", f->path, name); return NULL; }
    int is_float = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16;
    if (float_ok ? !is_float : t->dtype != want) {
        ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s has dtype %s, expected %s", f->path, name,
                   st_dtype_name(t->dtype), float_ok ? "F32, F16 or BF16" : st_dtype_name(want));
        return NULL;
    }
    int ok = shape == NULL || t->ndim == ndim;
    for (int i = 0; ok && shape && i < ndim; i++)
        if (shape[i] >= 0 && shape[i] != t->shape[i]) ok = 0;
    if (!ok) {
        char have[160], need[160];
        shape_str(have, sizeof have, t->ndim, t->shape);
        shape_str(need, sizeof need, ndim, shape);
        ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s", f->path, name, have, need);
        return NULL;
    }
    return t;
}

int st_to_f32(const st_tensor *t, uint64_t first, size_t n, float *dst) {
    if (first > t->nel || n > t->nel - first) return MS_ERR_ARG;
    const uint8_t *p = (const uint8_t *)t->data;
    switch (t->dtype) {
    case ST_F32:
        memcpy(dst, p + first * 4, n * 4);
        return MS_OK;
    case ST_BF16:
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + (first + i) * 2, 2);
            dst[i] = t->dtype == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
        }
        return MS_OK;
    default:
        return MS_ERR_ARG;
    }
}

/* --- writer ----------------------------------------------------------- */

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
    st_fill_fn fill;
    void *ctx;
} st_wtensor;

struct st_writer {
    st_wtensor *t;
    size_t n, cap;
};

st_writer *st_writer_create(void) { return calloc(1, sizeof(st_writer)); }

void st_writer_free(st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static int writer_push(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                       const void *data, st_fill_fn fill, void *ctx) {
    if ((unsigned)dtype >= ST__NDTYPES || ndim < 0 || ndim > ST_MAX_DIMS || !name || strlen(name) > ST_MAX_NAME)
        return MS_ERR_ARG;
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 64;
        st_wtensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return MS_ERR_NOMEM;
        w->t = nt;
        w->cap = nc;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    size_t nb = dtype_sizes[dtype];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return MS_ERR_ARG;
        t->shape[i] = shape[i];
        nb *= (size_t)shape[i];
    }
    if (!(t->name = strdup(name))) return MS_ERR_NOMEM;
    t->dtype = dtype;
    t->ndim = ndim;
    t->nbytes = nb;
    t->data = data;
    t->fill = fill;
    t->ctx = ctx;
    w->n++;
    return MS_OK;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    return writer_push(w, name, dtype, ndim, shape, data, NULL, NULL);
}

int st_writer_add_fn(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                     st_fill_fn fill, void *ctx) {
    return writer_push(w, name, dtype, ndim, shape, NULL, fill, ctx);
}

/* Append s to the growing buffer, JSON-escaped. */
static int buf_put(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 4096);
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*b, nc);
        if (!nb) return MS_ERR_NOMEM;
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = '\0';
    return MS_OK;
}

static int buf_printf(char **b, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int buf_printf(char **b, size_t *len, size_t *cap, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return MS_ERR_ARG;
    return buf_put(b, len, cap, tmp, (size_t)n);
}

static int buf_json_string(char **b, size_t *len, size_t *cap, const char *s) {
    int rc = buf_put(b, len, cap, "\"", 1);
    for (; !rc && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; rc = buf_put(b, len, cap, e, 2); }
        else if (c < 0x20) rc = buf_printf(b, len, cap, "\\u%04x", c);
        else rc = buf_put(b, len, cap, (const char *)&c, 1);
    }
    return rc ? rc : buf_put(b, len, cap, "\"", 1);
}

int st_writer_save(st_writer *w, const char *path, ms_error *err) {
    char *h = NULL;
    size_t hl = 0, hc = 0;
    int rc = buf_put(&h, &hl, &hc, "{", 1);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n && !rc; i++) {
        st_wtensor *t = &w->t[i];
        if (i) rc = buf_put(&h, &hl, &hc, ",", 1);
        if (!rc) rc = buf_json_string(&h, &hl, &hc, t->name);
        if (!rc) rc = buf_printf(&h, &hl, &hc, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[t->dtype]);
        for (int d = 0; d < t->ndim && !rc; d++)
            rc = buf_printf(&h, &hl, &hc, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        if (!rc) rc = buf_printf(&h, &hl, &hc, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                 (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    if (!rc) rc = buf_put(&h, &hl, &hc, "}", 1);
    while (!rc && hl % 8) rc = buf_put(&h, &hl, &hc, " ", 1);
    if (rc) { free(h); return ms_err_set(err, rc, "%s: cannot build the header", path); }

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) { free(h); return ms_err_set(err, MS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno)); }
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(h, 1, hl, fp) == hl;
    free(h);
    for (size_t i = 0; i < w->n && ok; i++) {
        st_wtensor *t = &w->t[i];
        if (t->fill) {
            void *buf = malloc(t->nbytes ? t->nbytes : 1);
            ok = buf && t->fill(t->ctx, buf, t->nbytes) == MS_OK && fwrite(buf, 1, t->nbytes, fp) == t->nbytes;
            free(buf);
        } else if (t->nbytes) {
            ok = t->data && fwrite(t->data, 1, t->nbytes, fp) == t->nbytes;
        }
    }
    if (fclose(fp) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return ms_err_set(err, MS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return MS_OK;
}
