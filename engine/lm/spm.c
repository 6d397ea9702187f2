/* spm.c - SentencePiece ModelProto reader (pieces only), bounded protobuf
 * decoding written from the protobuf wire-format specification. */
#include "spm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "text.h"

struct spm_model {
    int n;
    uint32_t *off; /* (n,) offset of each piece in text */
    char *text;    /* NUL-terminated pieces, back to back */
};

/* ---- protobuf wire format -------------------------------------------- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

typedef struct pb {
    const uint8_t *p, *end, *base; /* base: start of the file (for offsets in messages) */
    const char *path;
} pb;

static int pb_fail(const pb *b, ms_error *err, const char *what) {
    return ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model: %s at byte %zu", b->path,
                      what, (size_t)(b->p - b->base));
}

static int pb_varint(pb *b, uint64_t *v, ms_error *err) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (b->p >= b->end) return pb_fail(b, err, "truncated varint");
        uint8_t c = *b->p++;
        if (i == 9 && c > 1) return pb_fail(b, err, "varint longer than 64 bits");
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return MS_OK;
        }
    }
    return pb_fail(b, err, "varint longer than 10 bytes");
}

/* Read a field key; *field > 0. */
static int pb_key(pb *b, uint32_t *field, int *wt, ms_error *err) {
    uint64_t k;
    int rc = pb_varint(b, &k, err);
    if (rc) return rc;
    if ((k >> 3) == 0 || (k >> 3) > 0x1FFFFFFFu) return pb_fail(b, err, "bad field number");
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    return MS_OK;
}

/* Length-delimited payload: a view of the next len bytes. */
static int pb_bytes(pb *b, const uint8_t **s, size_t *n, ms_error *err) {
    uint64_t len = 0;
    int rc = pb_varint(b, &len, err);
    if (rc) return rc;
    if (len > (uint64_t)(b->end - b->p)) return pb_fail(b, err, "length past the end");
    *s = b->p;
    *n = (size_t)len;
    b->p += len;
    return MS_OK;
}

static int pb_skip(pb *b, int wt, ms_error *err) {
    uint64_t v;
    const uint8_t *s;
    size_t n;
    switch (wt) {
    case WT_VARINT: return pb_varint(b, &v, err);
    case WT_LEN: return pb_bytes(b, &s, &n, err);
    case WT_I64:
    case WT_I32:
        n = wt == WT_I64 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n) return pb_fail(b, err, "truncated fixed-size field");
        b->p += n;
        return MS_OK;
    default: return pb_fail(b, err, "unsupported wire type (group or invalid)");
    }
}

/* ---- pieces ---------------------------------------------------------- */

/* Pieces are returned as C strings: valid UTF-8 without NUL bytes. */
static bool piece_ok(const uint8_t *s, size_t n) {
    return memchr(s, 0, n) == NULL && text_utf8_valid(s, n);
}

/* Parse one SentencePiece message (n bytes at s); *piece is its text. */
static int parse_piece(pb *outer, const uint8_t *s, size_t n, const uint8_t **piece, size_t *plen,
                       ms_error *err) {
    pb b = {s, s + n, outer->base, outer->path};
    *piece = NULL;
    *plen = 0;
    while (b.p < b.end) {
        uint32_t f = 0;
        int wt = 0, rc = pb_key(&b, &f, &wt, err);
        if (rc) return rc;
        if (f == 1) {
            if (wt != WT_LEN) return pb_fail(&b, err, "piece text with a wrong wire type");
            rc = pb_bytes(&b, piece, plen, err); /* repeated: the last one wins */
        } else if (f == 2 && wt != WT_I32) {
            return pb_fail(&b, err, "piece score with a wrong wire type");
        } else if (f == 3 && wt != WT_VARINT) {
            return pb_fail(&b, err, "piece type with a wrong wire type");
        } else {
            rc = pb_skip(&b, wt, err);
        }
        if (rc) return rc;
    }
    if (!*piece || *plen == 0) return pb_fail(outer, err, "empty piece");
    if (*plen > SPM_MAX_PIECE_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: piece of %zu bytes (max %u)", outer->path, *plen,
                          SPM_MAX_PIECE_BYTES);
    if (!piece_ok(*piece, *plen)) return pb_fail(outer, err, "piece is not UTF-8 text");
    return MS_OK;
}

/* Walk the ModelProto; with m == NULL count pieces and text bytes, else
 * fill m (sized by the counting pass). */
static int walk(pb b, spm_model *m, size_t *npieces, size_t *nbytes, ms_error *err) {
    size_t np = 0, nb = 0;
    while (b.p < b.end) {
        uint32_t f = 0;
        int wt = 0, rc = pb_key(&b, &f, &wt, err);
        if (rc) return rc;
        if (f != 1) {
            rc = pb_skip(&b, wt, err);
            if (rc) return rc;
            continue;
        }
        if (wt != WT_LEN) return pb_fail(&b, err, "pieces field with a wrong wire type");
        const uint8_t *s = NULL, *piece = NULL;
        size_t n = 0, plen = 0;
        rc = pb_bytes(&b, &s, &n, err);
        if (rc) return rc;
        rc = parse_piece(&b, s, n, &piece, &plen, err);
        if (rc) return rc;
        if (np >= SPM_MAX_PIECES)
            return ms_err_set(err, MS_ERR_LIMIT, "%s: more than %u pieces", b.path, SPM_MAX_PIECES);
        if (m) { /* copy, U+2581 (E2 96 81) -> ' ' */
            m->off[np] = (uint32_t)nb;
            for (size_t i = 0; i < plen; i++) {
                if (plen - i >= 3 && piece[i] == 0xE2 && piece[i + 1] == 0x96 && piece[i + 2] == 0x81) {
                    m->text[nb++] = ' ';
                    i += 2;
                } else {
                    m->text[nb++] = (char)piece[i];
                }
            }
            m->text[nb++] = 0;
        } else {
            nb += plen + 1;
        }
        np++;
    }
    *npieces = np;
    *nbytes = nb;
    return MS_OK;
}

static uint8_t *read_all(const char *path, size_t *len, ms_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ms_err_set(err, MS_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)st.st_size > SPM_MAX_FILE_BYTES) {
        ms_err_set(err, MS_ERR_LIMIT, "%s: %lld bytes (max %u)", path, (long long)st.st_size, SPM_MAX_FILE_BYTES);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    buf = malloc(n ? n : 1);
    if (!buf) {
        ms_err_set(err, MS_ERR_NOMEM, "%s: %zu bytes", path, n);
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            ms_err_set(err, MS_ERR_IO, "%s: read failed: %s", path, r ? strerror(errno) : "file shrank");
            free(buf);
            buf = NULL;
            goto out;
        }
        got += (size_t)r;
    }
    *len = n;
out:
    close(fd);
    return buf;
}

spm_model *spm_load(const char *path, ms_error *err) {
    MS_ASSERT(path != NULL);
    size_t len = 0;
    uint8_t *data = read_all(path, &len, err);
    if (!data) return NULL;
    pb b = {data, data + len, data, path};
    size_t np = 0, nb = 0;
    spm_model *m = NULL;
    if (walk(b, NULL, &np, &nb, err)) goto out;
    if (np == 0) {
        ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model: no pieces", path);
        goto out;
    }
    m = calloc(1, sizeof *m);
    if (m) m->off = malloc(np * sizeof *m->off);
    if (m && m->off) m->text = malloc(nb);
    if (!m || !m->off || !m->text) {
        ms_err_set(err, MS_ERR_NOMEM, "%s: %zu pieces", path, np);
        spm_free(m);
        m = NULL;
        goto out;
    }
    m->n = (int)np;
    int rc = walk(b, m, &np, &nb, err);
    MS_ASSERT(rc == MS_OK && (int)np == m->n); /* the same bytes parsed twice */
out:
    free(data);
    return m;
}

const char *spm_piece(const spm_model *m, int id) {
    if (!m || id < 0 || id >= m->n) return NULL;
    return m->text + m->off[id];
}

int spm_size(const spm_model *m) { return m ? m->n : 0; }

void spm_free(spm_model *m) {
    if (!m) return;
    free(m->off);
    free(m->text);
    free(m);
}
