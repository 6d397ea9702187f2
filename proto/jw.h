/* jw.h - a small JSON writer into a growable buffer with a hard cap (the
 * server events of /v1/realtime). Strings are escaped as RFC 8259 asks
 * (quote, backslash, control characters); bytes that are not UTF-8 are
 * written as U+FFFD, so whatever a model or a client produced, the output
 * is valid JSON in valid UTF-8. Pure. */
#ifndef MOSHID_PROTO_JW_H
#define MOSHID_PROTO_JW_H

#include <stdarg.h>
#include <stddef.h>

typedef struct jw {
    char *buf;          /* malloc'd, NUL-terminated while ok */
    size_t len, cap;
    size_t max;         /* the most bytes it may grow to */
    int failed;         /* out of memory or over max: everything after is dropped */
} jw;

/* jw_init: an empty writer that grows up to max bytes (no allocation yet). */
void jw_init(jw *w, size_t max);
/* jw_free: release the buffer. */
void jw_free(jw *w);
/* jw_take: the buffer (the caller's, free) and its length, or NULL when the
 * writer failed; the writer is empty afterwards. */
char *jw_take(jw *w, size_t *len);
/* jw_raw: append n bytes as they are (JSON the caller built). */
void jw_raw(jw *w, const char *s, size_t n);
/* JW_LIT: append a string literal (its length from sizeof). */
#define JW_LIT(w, lit) jw_raw((w), "" lit, sizeof(lit) - 1)
/* jw_fmt: append printf output (numbers, punctuation; never strings from
 * outside: those go through jw_str). */
void jw_fmt(jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* jw_str: append n bytes of s as a quoted, escaped JSON string. */
void jw_str(jw *w, const char *s, size_t n);
/* jw_cstr: jw_str of a NUL-terminated string; NULL writes null. */
void jw_cstr(jw *w, const char *s);

#endif
