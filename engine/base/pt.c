/* pt.c - torch.save files read as data (pt.h): a bounded zip reader and a
 * pickle interpreter that builds values, never objects. */
#include "pt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- zip --------------------------------------------------------------- */

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_END_SIG 0x06054b50u
#define ZIP_LOCAL_BYTES 30
#define ZIP_CENTRAL_BYTES 46
#define ZIP_END_BYTES 22
#define ZIP_MAX_COMMENT 65535

typedef struct {
    char name[PT_MAX_NAME + 1];
    const uint8_t *data;
    size_t size;
} zip_entry;

typedef struct {
    const uint8_t *p;              /* the pickle */
    size_t n, at;
} pk_in;

/* Pickle values: an arena of them, a stack and a memo of indexes. */
enum { V_NONE, V_BOOL, V_INT, V_STR, V_TUPLE, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR };
enum { G_REBUILD, G_ODICT, G_FLOAT, G_HALF, G_BF16, G_LONG, G_INT, G__N };

#define PK_MAX_VALUES 4096
#define PK_MAX_ITEMS 8192          /* tuple members and dict pairs, all together */
#define PK_MAX_STACK 256
#define PK_MAX_MARKS 32
#define PK_MAX_MEMO 1024
#define PK_MAX_DIMS ST_MAX_DIMS
#define PK_MAX_DICT 64             /* pairs in one dict */

typedef struct {
    int kind;
    int64_t i;                     /* INT, BOOL; GLOBAL: G_*; STORAGE: dtype */
    uint32_t off, len;             /* STR: bytes in the pickle; TUPLE: items[off..off+len); DICT: pairs */
    int dict_cap;                  /* DICT: pairs reserved at items[off] */
    /* STORAGE: key (off/len into the pickle, as STR), numel in i2 */
    int64_t i2;
    /* TENSOR */
    int storage;                   /* value index of its STORAGE */
    int64_t offset;
    int ndim;
    int64_t shape[PK_MAX_DIMS], stride[PK_MAX_DIMS];
} pk_val;

typedef struct {
    pk_in in;
    pk_val *v;
    int nv;
    int *items;
    int nitems;
    int stack[PK_MAX_STACK];
    int sp;
    int marks[PK_MAX_MARKS];
    int nmarks;
    int memo[PK_MAX_MEMO];
    const char *name;
    ms_error *err;
} pk;

struct pt_file {
    char *path;
    void *map;
    size_t map_len;
    const uint8_t *base;
    size_t len;
    st_tensor t[PT_MAX_TENSORS];
    char keys[PT_MAX_TENSORS][PT_MAX_KEY + 1];
    size_t nt;
};

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) { /* benign race: every thread writes the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* The central directory into e (n entries). */
static int zip_read(const pt_file *f, zip_entry *e, int *n, ms_error *err) {
    const uint8_t *b = f->base;
    size_t len = f->len;
    if (len < ZIP_END_BYTES) return ms_err_set(err, MS_ERR_FORMAT, "%s: not a zip archive (too short)", f->path);
    /* the end record: its signature within the last 22 + 65535 bytes */
    size_t lo = len > ZIP_END_BYTES + ZIP_MAX_COMMENT ? len - ZIP_END_BYTES - ZIP_MAX_COMMENT : 0, end = SIZE_MAX;
    for (size_t i = len - ZIP_END_BYTES + 1; i-- > lo;)
        if (rd32(b + i) == ZIP_END_SIG && i + ZIP_END_BYTES + rd16(b + i + 20) == len) {
            end = i;
            break;
        }
    if (end == SIZE_MAX) return ms_err_set(err, MS_ERR_FORMAT, "%s: not a zip archive (no end record)", f->path);
    uint32_t disk = rd16(b + end + 4), cd_disk = rd16(b + end + 6), here = rd16(b + end + 8), total = rd16(b + end + 10);
    uint32_t cd_size = rd32(b + end + 12), cd_off = rd32(b + end + 16);
    if (cd_off == 0xffffffffu || cd_size == 0xffffffffu || total == 0xffffu)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: zip64 archive (files over 4 GiB are not voices)", f->path);
    if (disk || cd_disk || here != total)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: a multi-part zip archive", f->path);
    if (total > PT_MAX_ENTRIES)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: %u zip entries (most %d)", f->path, total, PT_MAX_ENTRIES);
    if ((uint64_t)cd_off + cd_size > end)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: the zip directory lies outside the file", f->path);
    size_t at = cd_off;
    for (uint32_t k = 0; k < total; k++) {
        if (at + ZIP_CENTRAL_BYTES > (size_t)cd_off + cd_size || rd32(b + at) != ZIP_CENTRAL_SIG)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: zip directory entry %u is malformed", f->path, k);
        uint32_t flags = rd16(b + at + 8), method = rd16(b + at + 10), crc = rd32(b + at + 16);
        uint32_t csize = rd32(b + at + 20), usize = rd32(b + at + 24);
        uint32_t nlen = rd16(b + at + 28), xlen = rd16(b + at + 30), clen = rd16(b + at + 32);
        uint32_t loff = rd32(b + at + 42);
        size_t next = at + ZIP_CENTRAL_BYTES + nlen + xlen + clen;
        if (next > (size_t)cd_off + cd_size)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: zip directory entry %u runs past the directory", f->path, k);
        if (nlen == 0 || nlen > PT_MAX_NAME)
            return ms_err_set(err, MS_ERR_LIMIT, "%s: zip entry %u: a name of %u bytes", f->path, k, nlen);
        zip_entry *z = &e[k];
        memcpy(z->name, b + at + ZIP_CENTRAL_BYTES, nlen);
        z->name[nlen] = '\0';
        if (memchr(z->name, '\0', nlen))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: zip entry %u: a NUL in its name", f->path, k);
        if (flags & 1) return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: %s: encrypted", f->path, z->name);
        if (method != 0)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: %s: compressed (method %u; torch.save stores)", f->path,
                              z->name, method);
        if (csize == 0xffffffffu || usize == 0xffffffffu || loff == 0xffffffffu)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: %s: zip64 sizes", f->path, z->name);
        if (csize != usize) return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: stored sizes differ", f->path, z->name);
        /* the local header: same name, then the data */
        if ((uint64_t)loff + ZIP_LOCAL_BYTES > cd_off || rd32(b + loff) != ZIP_LOCAL_SIG)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: no local header where the directory says", f->path,
                              z->name);
        uint32_t lnlen = rd16(b + loff + 26), lxlen = rd16(b + loff + 28);
        uint64_t data = (uint64_t)loff + ZIP_LOCAL_BYTES + lnlen + lxlen;
        if (lnlen != nlen || data > cd_off || memcmp(b + loff + ZIP_LOCAL_BYTES, z->name, nlen) != 0)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: the local header does not match the directory", f->path,
                              z->name);
        if (data + usize > cd_off)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: its data runs past the archive's data", f->path, z->name);
        z->data = b + data;
        z->size = usize;
        if (crc32_of(z->data, z->size) != crc)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: CRC-32 mismatch (a damaged file)", f->path, z->name);
        for (uint32_t j = 0; j < k; j++) {
            if (strcmp(e[j].name, z->name) == 0)
                return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: two entries of that name", f->path, z->name);
            if (z->size && e[j].size && z->data < e[j].data + e[j].size && e[j].data < z->data + z->size)
                return ms_err_set(err, MS_ERR_FORMAT, "%s: %s and %s overlap", f->path, z->name, e[j].name);
        }
        at = next;
    }
    *n = (int)total;
    return MS_OK;
}

/* ---- pickle ------------------------------------------------------------- */

static int pk_fail(pk *k, const char *what) {
    return ms_err_set(k->err, MS_ERR_FORMAT, "%s: data.pkl at byte %zu: %s", k->name, k->in.at, what);
}

static int pk_need(pk *k, size_t n) { return k->in.n - k->in.at >= n ? 0 : pk_fail(k, "the pickle ends early"); }

static int pk_new(pk *k, int kind) {
    if (k->nv >= PK_MAX_VALUES) return -1;
    memset(&k->v[k->nv], 0, sizeof k->v[0]);
    k->v[k->nv].kind = kind;
    return k->nv++;
}

static int pk_push(pk *k, int vi) {
    if (vi < 0) return pk_fail(k, "more values than a voice file holds");
    if (k->sp >= PK_MAX_STACK) return pk_fail(k, "the stack is deeper than a voice file's");
    k->stack[k->sp++] = vi;
    return MS_OK;
}

static int pk_push_int(pk *k, int64_t x) {
    int vi = pk_new(k, V_INT);
    if (vi >= 0) k->v[vi].i = x;
    return pk_push(k, vi);
}

/* the values since the last mark; -1 without one */
static int pk_since_mark(pk *k) {
    if (!k->nmarks) return -1;
    return k->marks[--k->nmarks];
}

static int pk_tuple_of(pk *k, int from) {
    int n = k->sp - from;
    if (k->nitems + n > PK_MAX_ITEMS) return pk_fail(k, "more tuple members than a voice file holds");
    int vi = pk_new(k, V_TUPLE);
    if (vi < 0) return pk_fail(k, "more values than a voice file holds");
    k->v[vi].off = (uint32_t)k->nitems;
    k->v[vi].len = (uint32_t)n;
    memcpy(k->items + k->nitems, k->stack + from, sizeof(int) * (size_t)n);
    k->nitems += n;
    k->sp = from;
    return pk_push(k, vi);
}

static const char *const global_names[G__N] = {
    [G_REBUILD] = "torch._utils\n_rebuild_tensor_v2", [G_ODICT] = "collections\nOrderedDict",
    [G_FLOAT] = "torch\nFloatStorage",     [G_HALF] = "torch\nHalfStorage",
    [G_BF16] = "torch\nBFloat16Storage",   [G_LONG] = "torch\nLongStorage",
    [G_INT] = "torch\nIntStorage",
};

static st_dtype storage_dtype(int g) {
    switch (g) {
    case G_FLOAT: return ST_F32;
    case G_HALF: return ST_F16;
    case G_BF16: return ST_BF16;
    case G_LONG: return ST_I64;
    default: return ST_I32;
    }
}

static int is_str(const pk *k, int vi, const char *s) {
    const pk_val *v = &k->v[vi];
    return v->kind == V_STR && v->len == strlen(s) && memcmp(k->in.p + v->off, s, v->len) == 0;
}

/* An int tuple (size or stride) into out. */
static int int_tuple(pk *k, int vi, int64_t *out, int *n) {
    const pk_val *t = &k->v[vi];
    if (t->kind != V_TUPLE || t->len > PK_MAX_DIMS) return -1;
    for (uint32_t i = 0; i < t->len; i++) {
        const pk_val *x = &k->v[k->items[t->off + i]];
        if (x->kind != V_INT || x->i < 0) return -1;
        out[i] = x->i;
    }
    *n = (int)t->len;
    return 0;
}

/* REDUCE: callable(args). Only the two whitelisted calls. */
static int pk_reduce(pk *k) {
    if (k->sp < 2) return pk_fail(k, "REDUCE on an empty stack");
    int args = k->stack[--k->sp], fn = k->stack[--k->sp];
    const pk_val *f = &k->v[fn], *a = &k->v[args];
    if (f->kind != V_GLOBAL || a->kind != V_TUPLE) return pk_fail(k, "REDUCE of something that is not a known call");
    if (f->i == G_ODICT) {
        if (a->len != 0) return pk_fail(k, "OrderedDict with arguments (only the empty one of a tensor's hooks)");
        int vi = pk_new(k, V_DICT);
        return pk_push(k, vi);
    }
    if (f->i != G_REBUILD) return pk_fail(k, "REDUCE of a storage type");
    /* (storage, storage_offset, size, stride, requires_grad, backward_hooks) */
    if (a->len != 6) return pk_fail(k, "_rebuild_tensor_v2 with other than 6 arguments");
    const int *m = k->items + a->off;
    const pk_val *st = &k->v[m[0]], *off = &k->v[m[1]], *rg = &k->v[m[4]], *hooks = &k->v[m[5]];
    if (st->kind != V_STORAGE) return pk_fail(k, "a tensor without a storage");
    if (off->kind != V_INT || off->i < 0) return pk_fail(k, "a tensor's storage offset is not a count");
    if (rg->kind != V_BOOL) return pk_fail(k, "a tensor's requires_grad is not a bool");
    if (hooks->kind != V_DICT || hooks->len != 0) return pk_fail(k, "a tensor with backward hooks");
    int vi = pk_new(k, V_TENSOR);
    if (vi < 0) return pk_fail(k, "more values than a voice file holds");
    pk_val *t = &k->v[vi];
    int nstride;
    if (int_tuple(k, m[2], t->shape, &t->ndim) || int_tuple(k, m[3], t->stride, &nstride) || nstride != t->ndim)
        return pk_fail(k, "a tensor's size or stride is not a tuple of counts of the same length (at most 8)");
    t->storage = m[0];
    t->offset = off->i;
    return pk_push(k, vi);
}

/* BINPERSID: ("storage", type, key, location, numel) -> a storage. */
static int pk_persid(pk *k) {
    if (k->sp < 1) return pk_fail(k, "BINPERSID on an empty stack");
    int ti = k->stack[--k->sp];
    const pk_val *t = &k->v[ti];
    if (t->kind != V_TUPLE || t->len != 5) return pk_fail(k, "a persistent id that is not a storage's 5-tuple");
    const int *m = k->items + t->off;
    const pk_val *ty = &k->v[m[1]], *key = &k->v[m[2]], *n = &k->v[m[4]];
    if (!is_str(k, m[0], "storage")) return pk_fail(k, "a persistent id that is not a storage");
    if (ty->kind != V_GLOBAL || ty->i < G_FLOAT) return pk_fail(k, "a storage of an unknown type");
    if (key->kind != V_STR || key->len == 0 || key->len > 32) return pk_fail(k, "a storage key that is not a name");
    for (uint32_t i = 0; i < key->len; i++) {
        char c = (char)k->in.p[key->off + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            return pk_fail(k, "a storage key with a character other than letters, digits, '_'");
    }
    const pk_val *loc = &k->v[m[3]];
    int loc_ok = is_str(k, m[3], "cpu") || is_str(k, m[3], "cuda");
    if (!loc_ok && loc->kind == V_STR && loc->len > 5 && loc->len < 12 && memcmp(k->in.p + loc->off, "cuda:", 5) == 0) {
        loc_ok = 1;
        for (uint32_t i = 5; i < loc->len; i++)
            if (k->in.p[loc->off + i] < '0' || k->in.p[loc->off + i] > '9') loc_ok = 0;
    }
    if (!loc_ok) return pk_fail(k, "a storage location other than cpu or cuda[:N]");
    if (n->kind != V_INT || n->i < 0) return pk_fail(k, "a storage size that is not a count");
    int vi = pk_new(k, V_STORAGE);
    if (vi < 0) return pk_fail(k, "more values than a voice file holds");
    k->v[vi].i = storage_dtype((int)ty->i);
    k->v[vi].off = key->off;
    k->v[vi].len = key->len;
    k->v[vi].i2 = n->i;
    return pk_push(k, vi);
}

static int pk_setitems(pk *k, int from) {
    if (from < 1) return pk_fail(k, "SETITEMS without a dict under its mark");
    int n = k->sp - from;
    if (n % 2) return pk_fail(k, "SETITEMS with a key without a value");
    pk_val *d = &k->v[k->stack[from - 1]];
    if (d->kind != V_DICT) return pk_fail(k, "SETITEMS on something that is not a dict");
    if (d->len == 0 && d->dict_cap == 0) { /* first items: reserve the dict's pairs */
        if (k->nitems + 2 * PK_MAX_DICT > PK_MAX_ITEMS) return pk_fail(k, "more dicts than a voice file holds");
        d->off = (uint32_t)k->nitems;
        d->dict_cap = PK_MAX_DICT;
        k->nitems += 2 * PK_MAX_DICT;
    }
    if (d->len + (uint32_t)n / 2 > (uint32_t)d->dict_cap) return pk_fail(k, "a dict of more than 64 entries");
    for (int i = from; i < k->sp; i += 2) {
        if (k->v[k->stack[i]].kind != V_STR) return pk_fail(k, "a dict key that is not a string");
        k->items[d->off + 2 * d->len] = k->stack[i];
        k->items[d->off + 2 * d->len + 1] = k->stack[i + 1];
        d->len++;
    }
    k->sp = from;
    return MS_OK;
}

static int pk_global(pk *k) {
    /* "module\nname\n" */
    size_t start = k->in.at, nl = 0;
    for (size_t i = start; i < k->in.n && i - start < 128; i++)
        if (k->in.p[i] == '\n' && ++nl == 2) {
            size_t len = i - start; /* without the last newline */
            for (int g = 0; g < G__N; g++)
                if (strlen(global_names[g]) == len && memcmp(global_names[g], k->in.p + start, len) == 0) {
                    k->in.at = i + 1;
                    int vi = pk_new(k, V_GLOBAL);
                    if (vi >= 0) k->v[vi].i = g;
                    return pk_push(k, vi);
                }
            char shown[130];
            size_t s = len < sizeof shown - 1 ? len : sizeof shown - 1;
            for (size_t j = 0; j < s; j++) {
                uint8_t c = k->in.p[start + j];
                shown[j] = c == '\n' ? '.' : (c < 0x20 || c > 0x7e) ? '?' : (char)c;
            }
            shown[s] = '\0';
            return ms_err_set(k->err, MS_ERR_FORMAT,
                              "%s: data.pkl names %s: only tensors in a dict are accepted (nothing a pickle names "
                              "is imported or run)", k->name, shown);
        }
    return pk_fail(k, "a GLOBAL without its two lines");
}

static int pk_memo_get(pk *k, uint32_t i) {
    if (i >= PK_MAX_MEMO || k->memo[i] < 0) return pk_fail(k, "a memo entry that was never stored");
    return pk_push(k, k->memo[i]);
}

static int pk_memo_put(pk *k, uint32_t i) {
    if (i >= PK_MAX_MEMO) return pk_fail(k, "a memo index past 1024");
    if (k->sp < 1) return pk_fail(k, "a memo store on an empty stack");
    k->memo[i] = k->stack[k->sp - 1];
    return MS_OK;
}

/* Run the pickle; *result: the value STOP leaves. */
static int pk_run(pk *k, int *result) {
    int rc = MS_OK;
    uint32_t next_memo = 0;        /* MEMOIZE (protocol 4) */
    while (rc == MS_OK) {
        if (pk_need(k, 1)) return k->err ? k->err->code : MS_ERR_FORMAT;
        uint8_t op = k->in.p[k->in.at++];
        const uint8_t *a = k->in.p + k->in.at;
        switch (op) {
        case 0x80: /* PROTO */
            if ((rc = pk_need(k, 1))) break;
            if (a[0] < 2 || a[0] > 5) rc = pk_fail(k, "a pickle protocol other than 2-5");
            k->in.at += 1;
            break;
        case 0x95: /* FRAME: 8-byte length, advisory */
            if ((rc = pk_need(k, 8))) break;
            k->in.at += 8;
            break;
        case '}': rc = pk_push(k, pk_new(k, V_DICT)); break;
        case ')': rc = pk_tuple_of(k, k->sp); break;
        case 'N': rc = pk_push(k, pk_new(k, V_NONE)); break;
        case 0x88: case 0x89: { /* NEWTRUE, NEWFALSE */
            int vi = pk_new(k, V_BOOL);
            if (vi >= 0) k->v[vi].i = op == 0x88;
            rc = pk_push(k, vi);
            break;
        }
        case 'K': if (!(rc = pk_need(k, 1))) { k->in.at += 1; rc = pk_push_int(k, a[0]); } break;
        case 'M': if (!(rc = pk_need(k, 2))) { k->in.at += 2; rc = pk_push_int(k, rd16(a)); } break;
        case 'J': if (!(rc = pk_need(k, 4))) { k->in.at += 4; rc = pk_push_int(k, (int32_t)rd32(a)); } break;
        case 0x8a: { /* LONG1: n bytes, little-endian two's complement */
            if ((rc = pk_need(k, 1))) break;
            uint32_t n = a[0];
            if (n > 8) { rc = pk_fail(k, "an integer wider than 64 bits"); break; }
            if ((rc = pk_need(k, 1 + n))) break;
            uint64_t x = 0;
            for (uint32_t i = 0; i < n; i++) x |= (uint64_t)a[1 + i] << (8 * i);
            if (n && n < 8 && (a[n] & 0x80)) x |= ~(uint64_t)0 << (8 * n);
            k->in.at += 1 + n;
            rc = pk_push_int(k, (int64_t)x);
            break;
        }
        case 'X': case 0x8c: { /* BINUNICODE (4-byte length), SHORT_BINUNICODE (1-byte) */
            size_t hl = op == 'X' ? 4 : 1;
            if ((rc = pk_need(k, hl))) break;
            uint32_t n = op == 'X' ? rd32(a) : a[0];
            if (n > PT_MAX_KEY) { rc = pk_fail(k, "a string longer than 128 bytes"); break; }
            if ((rc = pk_need(k, hl + n))) break;
            int vi = pk_new(k, V_STR);
            if (vi >= 0) {
                k->v[vi].off = (uint32_t)(k->in.at + hl);
                k->v[vi].len = n;
            }
            k->in.at += hl + n;
            rc = pk_push(k, vi);
            break;
        }
        case 'c': rc = pk_global(k); break;
        case '(':
            if (k->nmarks >= PK_MAX_MARKS) rc = pk_fail(k, "marks nested deeper than 32");
            else k->marks[k->nmarks++] = k->sp;
            break;
        case 't': {
            int from = pk_since_mark(k);
            rc = from < 0 ? pk_fail(k, "TUPLE without a mark") : pk_tuple_of(k, from);
            break;
        }
        case 0x85: case 0x86: case 0x87: { /* TUPLE1-3 */
            int n = op - 0x84;
            rc = k->sp < n ? pk_fail(k, "TUPLEn on a short stack") : pk_tuple_of(k, k->sp - n);
            break;
        }
        case 'q': if (!(rc = pk_need(k, 1))) { k->in.at += 1; rc = pk_memo_put(k, a[0]); } break;
        case 'r': if (!(rc = pk_need(k, 4))) { k->in.at += 4; rc = pk_memo_put(k, rd32(a)); } break;
        case 0x94: rc = pk_memo_put(k, next_memo++); break; /* MEMOIZE */
        case 'h': if (!(rc = pk_need(k, 1))) { k->in.at += 1; rc = pk_memo_get(k, a[0]); } break;
        case 'j': if (!(rc = pk_need(k, 4))) { k->in.at += 4; rc = pk_memo_get(k, rd32(a)); } break;
        case 'Q': rc = pk_persid(k); break;
        case 'R': rc = pk_reduce(k); break;
        case 's':
            rc = k->sp < 3 ? pk_fail(k, "SETITEM on a short stack") : pk_setitems(k, k->sp - 2);
            break;
        case 'u': {
            int from = pk_since_mark(k);
            rc = from < 0 ? pk_fail(k, "SETITEMS without a mark") : pk_setitems(k, from);
            break;
        }
        case '.':
            if (k->sp != 1 || k->nmarks) return pk_fail(k, "STOP with other than one value left");
            *result = k->stack[0];
            return MS_OK;
        default: {
            char what[80];
            snprintf(what, sizeof what, "opcode 0x%02x is not one torch.save writes for a dict of tensors", op);
            rc = pk_fail(k, what);
        }
        }
    }
    return rc;
}

/* ---- the file ----------------------------------------------------------- */

static pt_file *pt_alloc(const char *name, ms_error *err) {
    pt_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(name ? name : "(memory)");
    if (!f || !f->path) {
        free(f);
        ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return f;
}

void pt_close(pt_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

/* The dict's tensors, resolved against the archive's storages. */
static int resolve(pt_file *f, pk *k, int root, const zip_entry *z, int nz, const char *dir, ms_error *err) {
    const pk_val *d = &k->v[root];
    if (d->kind != V_DICT) return ms_err_set(err, MS_ERR_FORMAT, "%s: the pickle holds no dict of tensors", f->path);
    if (d->len == 0 || d->len > PT_MAX_TENSORS)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: a dict of %u tensors (1 to %d)", f->path, d->len, PT_MAX_TENSORS);
    for (uint32_t i = 0; i < d->len; i++) {
        const pk_val *key = &k->v[k->items[d->off + 2 * i]], *tv = &k->v[k->items[d->off + 2 * i + 1]];
        char *kn = f->keys[i];
        memcpy(kn, k->in.p + key->off, key->len);
        kn[key->len] = '\0';
        for (uint32_t j = 0; j < key->len; j++)
            if ((uint8_t)kn[j] < 0x20 || (uint8_t)kn[j] == 0x7f)
                return ms_err_set(err, MS_ERR_FORMAT, "%s: a dict key with a control character", f->path);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(f->keys[j], kn) == 0) return ms_err_set(err, MS_ERR_FORMAT, "%s: key %s twice", f->path, kn);
        if (tv->kind != V_TENSOR) return ms_err_set(err, MS_ERR_FORMAT, "%s: %s is not a tensor", f->path, kn);
        const pk_val *sv = &k->v[tv->storage];
        char entry[PT_MAX_NAME + 1];
        int el = snprintf(entry, sizeof entry, "%s/data/%.*s", dir, (int)sv->len, (const char *)k->in.p + sv->off);
        const zip_entry *ze = NULL;
        for (int j = 0; j < nz && el > 0 && (size_t)el < sizeof entry; j++)
            if (strcmp(z[j].name, entry) == 0) ze = &z[j];
        if (!ze) return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: its storage %s is not in the archive", f->path, kn, entry);
        st_dtype dt = (st_dtype)sv->i;
        size_t es = st_dtype_size(dt);
        if ((uint64_t)sv->i2 > ze->size / es || (uint64_t)sv->i2 * es != ze->size)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: storage %s holds %zu bytes, not %lld elements of %zu",
                              f->path, kn, entry, ze->size, (long long)sv->i2, es);
        /* contiguous: stride[i] = product of the sizes after i */
        uint64_t nel = 1;
        for (int j = tv->ndim - 1; j >= 0; j--) {
            if (tv->shape[j] > 1 && (uint64_t)tv->stride[j] != nel)
                return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: %s: not a contiguous tensor", f->path, kn);
            if (tv->shape[j] && nel > UINT64_MAX / (uint64_t)tv->shape[j])
                return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: a size that overflows", f->path, kn);
            nel *= (uint64_t)tv->shape[j];
        }
        if ((uint64_t)tv->offset > (uint64_t)sv->i2 || nel > (uint64_t)sv->i2 - (uint64_t)tv->offset)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: %s: %llu elements from %lld run past its storage of %lld",
                              f->path, kn, (unsigned long long)nel, (long long)tv->offset, (long long)sv->i2);
        st_tensor *t = &f->t[i];
        t->name = kn;
        t->dtype = dt;
        t->ndim = tv->ndim;
        memcpy(t->shape, tv->shape, sizeof(int64_t) * (size_t)tv->ndim);
        t->nel = nel;
        t->data = ze->data + (size_t)tv->offset * es;
        t->nbytes = (size_t)nel * es;
    }
    f->nt = d->len;
    return MS_OK;
}

static int pt_read(pt_file *f, ms_error *err) {
    zip_entry *z = calloc(PT_MAX_ENTRIES, sizeof *z);
    pk k;
    memset(&k, 0, sizeof k);
    k.v = calloc(PK_MAX_VALUES, sizeof *k.v);
    k.items = calloc(PK_MAX_ITEMS, sizeof *k.items);
    int rc = MS_OK, nz = 0;
    if (!z || !k.v || !k.items) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = zip_read(f, z, &nz, err))) goto out;
    /* one top directory: the prefix of data.pkl, shared by every entry */
    const zip_entry *pkl = NULL;
    for (int i = 0; i < nz; i++) {
        const char *sl = strchr(z[i].name, '/');
        if (sl && strcmp(sl, "/data.pkl") == 0) {
            if (pkl) { rc = ms_err_set(err, MS_ERR_FORMAT, "%s: two data.pkl entries", f->path); goto out; }
            pkl = &z[i];
        }
    }
    if (!pkl) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: no <dir>/data.pkl: not a torch.save file", f->path);
        goto out;
    }
    char dir[PT_MAX_NAME + 1];
    size_t dl = (size_t)(strchr(pkl->name, '/') - pkl->name);
    memcpy(dir, pkl->name, dl);
    dir[dl] = '\0';
    for (int i = 0; i < nz; i++)
        if (strncmp(z[i].name, dir, dl) != 0 || z[i].name[dl] != '/' || strstr(z[i].name, "..")) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: entry %s outside the archive's directory %s", f->path, z[i].name, dir);
            goto out;
        }
        else if (strcmp(z[i].name + dl, "/byteorder") == 0 && !(z[i].size == 6 && memcmp(z[i].data, "little", 6) == 0)) {
            rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: byte order is not little-endian", f->path);
            goto out;
        }
    if (pkl->size > PT_MAX_PICKLE_BYTES) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: data.pkl of %zu bytes (most %d)", f->path, pkl->size, PT_MAX_PICKLE_BYTES);
        goto out;
    }
    k.in.p = pkl->data;
    k.in.n = pkl->size;
    k.name = f->path;
    k.err = err;
    for (int i = 0; i < PK_MAX_MEMO; i++) k.memo[i] = -1;
    int root = -1;
    if ((rc = pk_run(&k, &root))) goto out;
    rc = resolve(f, &k, root, z, nz, dir, err);
out:
    free(z);
    free(k.v);
    free(k.items);
    return rc;
}

pt_file *pt_open_mem(const void *buf, size_t len, const char *name, ms_error *err) {
    pt_file *f = pt_alloc(name, err);
    if (!f) return NULL;
    f->base = buf;
    f->len = len;
    if (pt_read(f, err)) {
        pt_close(f);
        return NULL;
    }
    return f;
}

pt_file *pt_open(const char *path, ms_error *err) {
    pt_file *f = pt_alloc(path, err);
    if (!f) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
        pt_close(f);
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 || (uint64_t)sb.st_size >= PT_MAX_FILE_BYTES) {
        ms_err_set(err, MS_ERR_FORMAT, "%s: not a regular file of 1 byte to 4 GiB", path);
        close(fd);
        pt_close(f);
        return NULL;
    }
    f->map_len = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        ms_err_set(err, MS_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        pt_close(f);
        return NULL;
    }
    f->base = f->map;
    f->len = f->map_len;
    if (pt_read(f, err)) {
        pt_close(f);
        return NULL;
    }
    return f;
}

size_t pt_count(const pt_file *f) { return f->nt; }

const st_tensor *pt_at(const pt_file *f, size_t i) { return i < f->nt ? &f->t[i] : NULL; }

const st_tensor *pt_find(const pt_file *f, const char *name) {
    for (size_t i = 0; i < f->nt; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

int pt_is_zip(const void *head, size_t n) { return n >= 4 && rd32(head) == ZIP_LOCAL_SIG; }
