/* prime_io.c - a PersonaPlex prompt read from files (see prime_io.h). */
#include "prime_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pt.h"
#include "st.h"

int pp_read_ints(const char *path, long lo, long hi, int max, int **out, int *n, ms_error *err) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ms_err_set(err, MS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(PP_IO_MAX_TEXT_BYTES + 1);
    if (!buf) {
        fclose(f);
        return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    }
    size_t len = fread(buf, 1, PP_IO_MAX_TEXT_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc = MS_OK, cap = 0, cnt = 0;
    int *v = NULL;
    if (bad) {
        rc = ms_err_set(err, MS_ERR_IO, "%s: read error", path);
        goto out;
    }
    if (len > PP_IO_MAX_TEXT_BYTES) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: larger than %d bytes", path, PP_IO_MAX_TEXT_BYTES);
        goto out;
    }
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: NUL byte", path);
        goto out;
    }
    long line = 1;
    for (char *p = buf;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') line += *p++ == '\n';
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s:%ld: not an integer", path, line);
            goto out;
        }
        if (x < lo || x > hi) {
            rc = ms_err_set(err, MS_ERR_RANGE, "%s:%ld: %ld out of range (%ld..%ld)", path, line, x, lo, hi);
            goto out;
        }
        if (cnt == max) {
            rc = ms_err_set(err, MS_ERR_LIMIT, "%s: more than %d values", path, max);
            goto out;
        }
        if (cnt == cap) {
            int nc = cap ? 2 * cap : 64;
            int *nv = realloc(v, sizeof(int) * (size_t)nc);
            if (!nv) {
                rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
                goto out;
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = (int)x;
        p = end;
    }
out:
    free(buf);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return MS_OK;
}

/* exactly 8 codes in [0, card) */
static int read_frame(const char *path, int card, int *dst, ms_error *err) {
    int *v, n;
    int rc = pp_read_ints(path, 0, card - 1, PP_SIDE_CODEBOOKS, &v, &n, err);
    if (rc) return rc;
    if (n != PP_SIDE_CODEBOOKS) rc = ms_err_set(err, MS_ERR_FORMAT, "%s: %d codes, expected %d", path, n, PP_SIDE_CODEBOOKS);
    else memcpy(dst, v, sizeof(int) * PP_SIDE_CODEBOOKS);
    free(v);
    return rc;
}

/* t without its leading axes of size 1 until keep axes remain (a
 * PersonaPlex .pt keeps the batch: embeddings (T, 1, 1, dim), cache
 * (1, 17, R)); 0, or -1 when other than keep axes remain. */
static int squeeze_leading(const st_tensor *t, int keep, st_tensor *out) {
    *out = *t;
    while (out->ndim > keep && out->shape[0] == 1) {
        memmove(out->shape, out->shape + 1, sizeof(int64_t) * (size_t)(out->ndim - 1));
        out->ndim--;
    }
    /* (T, 1, 1, dim): the batch and the step axes after T */
    while (out->ndim > keep && out->shape[1] == 1) {
        memmove(out->shape + 1, out->shape + 2, sizeof(int64_t) * (size_t)(out->ndim - 2));
        out->ndim--;
    }
    return out->ndim == keep ? 0 : -1;
}

/* Is path a zip archive (torch.save's format)? */
static int is_pt(const char *path) {
    unsigned char head[4];
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    size_t n = fread(head, 1, sizeof head, fp);
    fclose(fp);
    return pt_is_zip(head, n);
}

static int load_saved(pp_prompt_buf *pb, const char *path, const lm_config *c, ms_error *err) {
    st_file *f = NULL;
    pt_file *pf = NULL;
    st_tensor es, ks;
    const st_tensor *e = NULL, *k = NULL;
    int rc = MS_OK, R = c->max_delay + 3;
    if (is_pt(path)) {
        /* a PersonaPlex voice as NVIDIA publishes it (torch.save) */
        if (!(pf = pt_open(path, err))) return err ? err->code : MS_ERR_FORMAT;
        const st_tensor *pe = pt_find(pf, "embeddings"), *pk = pt_find(pf, "cache");
        if (!pe || !pk) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: not a PersonaPlex voice (a dict of \"embeddings\" and "
                            "\"cache\" expected)", path);
            goto out;
        }
        if (squeeze_leading(pe, 2, &es) || es.shape[1] != c->dim ||
            (es.dtype != ST_F32 && es.dtype != ST_F16 && es.dtype != ST_BF16)) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensor embeddings: expected float (T, [1, 1,] %d)", path, c->dim);
            goto out;
        }
        if (squeeze_leading(pk, 2, &ks)) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensor cache: expected ([1,] %d, %d)", path, PP_STREAMS, R);
            goto out;
        }
        e = &es;
        k = &ks;
    } else {
        if (!(f = st_open(path, err))) return err ? err->code : MS_ERR_FORMAT;
        int64_t eshape[2] = {-1, c->dim};
        e = st_get(f, "embeddings", 2, eshape, 1, ST_F32, err);
        k = e ? st_find(f, "cache") : NULL;
    }
    if (!e) {
        rc = err ? err->code : MS_ERR_FORMAT;
        goto out;
    }
    if (!k || k->ndim != 2 || k->shape[0] != PP_STREAMS || k->shape[1] != R ||
        (k->dtype != ST_I32 && k->dtype != ST_I64)) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensor cache: expected I32/I64 [%d, %d]", path, PP_STREAMS, R);
        goto out;
    }
    if (e->shape[0] > PP_PRIME_MAX_CALLS) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %lld embedding rows (most %d)", path, (long long)e->shape[0],
                        PP_PRIME_MAX_CALLS);
        goto out;
    }
    int T = (int)e->shape[0];
    size_t nel = (size_t)T * c->dim;
    pb->embs = malloc(sizeof(float) * (nel ? nel : 1));
    pb->cache = malloc(sizeof(int) * PP_STREAMS * R);
    if (!pb->embs || !pb->cache) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (nel) st_to_f32(e, 0, nel, pb->embs);
    for (size_t i = 0; i < nel; i++)
        if (!isfinite(pb->embs[i])) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: tensor embeddings: row %zu holds a non-finite value", path,
                            i / c->dim);
            goto out;
        }
    for (int i = 0; i < PP_STREAMS * R; i++) {
        int64_t x;
        if (k->dtype == ST_I32) {
            int32_t y;
            memcpy(&y, (const char *)k->data + 4 * (size_t)i, 4);
            x = y;
        } else {
            memcpy(&x, (const char *)k->data + 8 * (size_t)i, 8);
        }
        int hi = i < R ? c->text_card : c->card;
        if (x < -2 || x > hi) {
            rc = ms_err_set(err, MS_ERR_RANGE, "%s: tensor cache: [%d][%d] = %lld out of range (-2..%d)", path, i / R,
                            i % R, (long long)x, hi);
            goto out;
        }
        pb->cache[i] = (int)x;
    }
    pb->p.voice_embs = pb->embs;
    pb->p.n_voice_embs = T;
    pb->p.voice_cache = pb->cache;
out:
    st_close(f);
    pt_close(pf);
    return rc;
}

int pp_prompt_load(pp_prompt_buf *pb, const pp_prompt_paths *paths, const lm_config *c, ms_error *err) {
    memset(pb, 0, sizeof *pb);
    pp_prompt_init(&pb->p);
    int rc = pp_check_config(c, err);
    if (rc) return rc;
    if (paths->voice_codes && paths->voice_saved)
        return ms_err_set(err, MS_ERR_ARG, "prompt: voice codes and a saved voice exclude each other");
    if (paths->silence_frames >= 0) pb->p.silence_frames = paths->silence_frames;
    if (paths->silence) {
        if ((rc = read_frame(paths->silence, c->card, pb->silence, err))) return rc;
        pb->p.silence = pb->silence;
    }
    if (paths->sine) {
        if ((rc = read_frame(paths->sine, c->card, pb->sine, err))) return rc;
        pb->p.sine = pb->sine;
    }
    if (paths->voice_codes) {
        int n;
        rc = pp_read_ints(paths->voice_codes, 0, c->card - 1, PP_PRIME_MAX_CALLS * PP_SIDE_CODEBOOKS, &pb->voice,
                          &n, err);
        if (rc) return rc;
        if (n % PP_SIDE_CODEBOOKS)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %d codes, not whole frames of %d", paths->voice_codes, n,
                              PP_SIDE_CODEBOOKS);
        pb->p.voice = pb->voice;
        pb->p.n_voice = n / PP_SIDE_CODEBOOKS;
    }
    if (paths->voice_saved && (rc = load_saved(pb, paths->voice_saved, c, err))) return rc;
    if (paths->text_ids) {
        rc = pp_read_ints(paths->text_ids, 0, c->text_card - 1, PP_PRIME_MAX_CALLS, &pb->text, &pb->p.n_text, err);
        if (rc) return rc;
        pb->p.text = pb->text;
    }
    return MS_OK;
}

void pp_prompt_buf_free(pp_prompt_buf *pb) {
    free(pb->voice);
    free(pb->text);
    free(pb->cache);
    free(pb->embs);
    pb->voice = pb->text = pb->cache = NULL;
    pb->embs = NULL;
}
