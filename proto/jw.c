/* jw.c - the JSON writer (jw.h). */
#include "jw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

void jw_init(jw *w, size_t max) { *w = (jw){.max = max}; }

void jw_free(jw *w) {
    free(w->buf);
    *w = (jw){.max = w->max};
}

char *jw_take(jw *w, size_t *len) {
    char *b = w->failed ? NULL : w->buf;
    if (w->failed) free(w->buf);
    *len = b ? w->len : 0;
    *w = (jw){.max = w->max};
    return b;
}

/* Room for n more bytes and the NUL; 0, or -1 (failed) over max or
 * without memory. */
static int room(jw *w, size_t n) {
    if (w->failed) return -1;
    if (w->len + n + 1 <= w->cap) return 0;
    if (w->len + n + 1 > w->max) {
        w->failed = 1;
        return -1;
    }
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n + 1) cap *= 2;
    if (cap > w->max) cap = w->max;
    char *b = realloc(w->buf, cap);
    if (!b) {
        w->failed = 1;
        return -1;
    }
    w->buf = b;
    w->cap = cap;
    return 0;
}

void jw_raw(jw *w, const char *s, size_t n) {
    if (room(w, n)) return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

void jw_fmt(jw *w, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        w->failed = 1;
        return;
    }
    jw_raw(w, tmp, (size_t)n);
}

void jw_str(jw *w, const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    jw_raw(w, "\"", 1);
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < n;) {
        uint8_t ch = p[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t step = 1;
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch < 0x20) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", ch);
            esc = ubuf;
        } else if (ch >= 0x80) {
            step = text_utf8_len(p + i, n - i);
            if (!step) {
                esc = "\xef\xbf\xbd"; /* U+FFFD */
                step = 1;
            }
        }
        if (esc) {
            jw_raw(w, s + i - run, run);
            run = 0;
            jw_raw(w, esc, strlen(esc));
        } else {
            run += step;
        }
        i += step;
    }
    jw_raw(w, s + n - run, run);
    jw_raw(w, "\"", 1);
}

void jw_cstr(jw *w, const char *s) {
    if (!s) jw_raw(w, "null", 4);
    else jw_str(w, s, strlen(s));
}
