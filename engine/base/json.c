/* json.c - bounded recursive-descent JSON reader (see json.h). */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, pos;
    ms_error *err;
} js_parser;

static int js_fail(js_parser *p, const char *what) {
    return ms_err_set(p->err, MS_ERR_FORMAT, "json: %s at byte %zu", what, p->pos);
}

static void skip_ws(js_parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static js_value *js_new(js_parser *p, js_type t) {
    js_value *v = calloc(1, sizeof *v);
    if (!v) ms_err_set(p->err, MS_ERR_NOMEM, "json: out of memory");
    else v->type = t;
    return v;
}

static int hex4(js_parser *p, unsigned *out) {
    if (p->n - p->pos < 4) return js_fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return js_fail(p, "bad hex digit in \\u escape");
    }
    *out = v;
    return MS_OK;
}

static size_t put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xC0 | (cp >> 6)); d[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12)); d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18)); d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* parse_string: p->pos at the opening quote; returns a malloc'd decoded
 * string (its length in *len) or NULL with the error set. The decoded text is
 * never longer than the source, so one allocation of the source span
 * suffices. */
static char *parse_string(js_parser *p, size_t *len) {
    p->pos++; /* opening quote */
    size_t start = p->pos, end = start;
    while (end < p->n && p->s[end] != '"') end += (p->s[end] == '\\') ? 2 : 1;
    if (end >= p->n) { js_fail(p, "unterminated string"); return NULL; }
    char *out = malloc(end - start + 1);
    if (!out) { ms_err_set(p->err, MS_ERR_NOMEM, "json: out of memory"); return NULL; }
    size_t o = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) { js_fail(p, "control character in string"); goto bad; }
        if (c != '\\') { out[o++] = (char)c; p->pos++; continue; }
        p->pos++;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) goto bad;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->pos + 2 > end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    js_fail(p, "unpaired surrogate"); goto bad;
                }
                p->pos += 2;
                if (hex4(p, &lo)) goto bad;
                if (lo < 0xDC00 || lo > 0xDFFF) { js_fail(p, "unpaired surrogate"); goto bad; }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                js_fail(p, "unpaired surrogate"); goto bad;
            }
            if (cp == 0) { js_fail(p, "NUL character in string"); goto bad; }
            o += put_utf8(out + o, cp);
            break;
        }
        default: js_fail(p, "bad escape"); goto bad;
        }
        if (p->pos > end) { js_fail(p, "bad escape"); goto bad; }
    }
    p->pos = end + 1;
    out[o] = '\0';
    *len = o;
    return out;
bad:
    free(out);
    return NULL;
}

static int parse_number(js_parser *p, js_value *v) {
    size_t st = p->pos;
    bool integral = true;
    if (p->pos < p->n && p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return js_fail(p, "bad number");
    if (p->s[p->pos] == '0') p->pos++;
    else while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = false;
        p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return js_fail(p, "bad number");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = false;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return js_fail(p, "bad number");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    size_t len = p->pos - st;
    char buf[64];
    if (len >= sizeof buf) return js_fail(p, "number too long");
    memcpy(buf, p->s + st, len);
    buf[len] = '\0';
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) return js_fail(p, "number out of range");
    if (integral) {
        errno = 0;
        long long ll = strtoll(buf, NULL, 10);
        if (errno == 0) { v->is_int = true; v->i = ll; }
    }
    return MS_OK;
}

static js_value *parse_value(js_parser *p, int depth);

static int parse_container(js_parser *p, js_value *v, int depth) {
    bool obj = v->type == JS_OBJECT;
    char close = obj ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return MS_OK; }
    js_value **tail = &v->child;
    for (;;) {
        char *key = NULL;
        if (obj) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') return js_fail(p, "expected member name");
            size_t kl;
            key = parse_string(p, &kl);
            if (!key) return p->err ? p->err->code : MS_ERR_FORMAT;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') { free(key); return js_fail(p, "expected ':'"); }
            p->pos++;
        }
        js_value *c = parse_value(p, depth + 1);
        if (!c) { free(key); return p->err ? p->err->code : MS_ERR_FORMAT; }
        c->key = key;
        *tail = c;
        tail = &c->next;
        v->len++;
        skip_ws(p);
        if (p->pos >= p->n) return js_fail(p, "unterminated container");
        char d = p->s[p->pos++];
        if (d == close) return MS_OK;
        if (d != ',') { p->pos--; return js_fail(p, "expected ',' or end of container"); }
    }
}

static bool match_word(js_parser *p, const char *w) {
    size_t l = strlen(w);
    if (p->n - p->pos < l || memcmp(p->s + p->pos, w, l) != 0) return false;
    p->pos += l;
    return true;
}

static js_value *parse_value(js_parser *p, int depth) {
    if (depth >= JS_MAX_DEPTH) {
        ms_err_set(p->err, MS_ERR_LIMIT, "json: nesting deeper than %d at byte %zu", JS_MAX_DEPTH, p->pos);
        return NULL;
    }
    skip_ws(p);
    if (p->pos >= p->n) { js_fail(p, "unexpected end of input"); return NULL; }
    char c = p->s[p->pos];
    js_value *v = NULL;
    int rc = MS_OK;
    if (c == '{' || c == '[') {
        v = js_new(p, c == '{' ? JS_OBJECT : JS_ARRAY);
        if (v) rc = parse_container(p, v, depth);
    } else if (c == '"') {
        v = js_new(p, JS_STRING);
        if (v && !(v->str = parse_string(p, &v->len))) rc = MS_ERR_FORMAT;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        v = js_new(p, JS_NUMBER);
        if (v) rc = parse_number(p, v);
    } else if (match_word(p, "true") || match_word(p, "false")) {
        v = js_new(p, JS_BOOL);
        if (v) v->boolean = (c == 't');
    } else if (match_word(p, "null")) {
        v = js_new(p, JS_NULL);
    } else {
        js_fail(p, "unexpected character");
        return NULL;
    }
    if (!v) return NULL;
    if (rc) { js_free(v); return NULL; }
    return v;
}

js_value *js_parse(const char *text, size_t len, ms_error *err) {
    js_parser p = {text, len, 0, err};
    js_value *v = parse_value(&p, 0);
    if (!v) return NULL;
    skip_ws(&p);
    if (p.pos != p.n) {
        js_fail(&p, "trailing characters after the value");
        js_free(v);
        return NULL;
    }
    return v;
}

void js_free(js_value *v) {
    while (v) {
        js_value *next = v->next;
        js_free(v->child);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

const js_value *js_get(const js_value *v, const char *key) {
    if (!v || v->type != JS_OBJECT) return NULL;
    for (const js_value *c = v->child; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    return NULL;
}

const js_value *js_at(const js_value *v, size_t i) {
    if (!v || v->type != JS_ARRAY) return NULL;
    const js_value *c = v->child;
    while (c && i--) c = c->next;
    return c;
}

bool js_has_duplicate_keys(const js_value *v, const char **key) {
    if (!v) return false;
    if (v->type == JS_OBJECT) {
        /* Quadratic, but objects here are small except the safetensors header
         * (one member per tensor), which st.c checks by sorting instead. */
        for (const js_value *a = v->child; a; a = a->next)
            for (const js_value *b = a->next; b; b = b->next)
                if (strcmp(a->key, b->key) == 0) {
                    if (key) *key = a->key;
                    return true;
                }
    }
    for (const js_value *c = v->child; c; c = c->next)
        if (js_has_duplicate_keys(c, key)) return true;
    return false;
}

const char *js_type_name(js_type t) {
    static const char *const names[] = {"null", "boolean", "number", "string", "array", "object"};
    return (unsigned)t < 6 ? names[t] : "?";
}
