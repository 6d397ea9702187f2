/* err.c - error table, error reports, assertion failure. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const err_msgs[] = {
#define MS_ERR_MSG(code, msg) msg,
    MS_ERR_TABLE(MS_ERR_MSG)
#undef MS_ERR_MSG
};

static const char *const err_names[] = {
#define MS_ERR_NAME(code, msg) #code,
    MS_ERR_TABLE(MS_ERR_NAME)
#undef MS_ERR_NAME
};

const char *ms_strerror(int code) {
    if (code < 0 || code >= MS_ERR__COUNT) return "unknown error";
    return err_msgs[code];
}

const char *ms_err_name(int code) {
    if (code < 0 || code >= MS_ERR__COUNT) return "MS_ERR_UNKNOWN";
    return err_names[code];
}

int ms_err_set(ms_error *err, int code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

void ms_err_prefix(ms_error *err, const char *fmt, ...) {
    if (!err) return;
    char pre[MS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    char old[MS_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(pre);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    n += 2;
    size_t m = strnlen(old, sizeof old);
    if (m > sizeof err->msg - 1 - n) m = sizeof err->msg - 1 - n;
    memcpy(err->msg + n, old, m);
    err->msg[n + m] = '\0';
}

void ms_err_clear(ms_error *err) {
    if (!err) return;
    err->code = MS_OK;
    err->msg[0] = '\0';
}

void ms_assert_fail(const char *expr, const char *file, int line,
                    const char *func) {
    fprintf(stderr, "level=fatal event=assert expr=\"%s\" file=%s line=%d func=%s\n",
            expr, file, line, func);
    fflush(stderr);
    abort();
}
