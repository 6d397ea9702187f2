/* err.h - error codes and error reports shared by every moshid module.
 *
 * Errors that input (a file, a client, a configuration) can cause are returned
 * as an int code from MS_ERR_TABLE, with a human-readable message in an
 * ms_error that the caller owns.  Programming errors use MS_ASSERT, which is
 * always on (also in release builds).
 */
#ifndef MOSHID_ERR_H
#define MOSHID_ERR_H

#include <stddef.h>

/* X(code, message): one row per error kind; the enum and the names below
 * are generated from this table. */
#define MS_ERR_TABLE(X)                                        \
    X(MS_OK, "ok")                                             \
    X(MS_ERR_NOMEM, "out of memory")                           \
    X(MS_ERR_IO, "input/output error")                         \
    X(MS_ERR_FORMAT, "malformed data")                         \
    X(MS_ERR_RANGE, "value out of range")                      \
    X(MS_ERR_UNSUPPORTED, "unsupported")                       \
    X(MS_ERR_NOTFOUND, "not found")                            \
    X(MS_ERR_ARG, "invalid argument")                          \
    X(MS_ERR_LIMIT, "limit exceeded")                          \
    X(MS_ERR_BUSY, "busy")                                     \
    X(MS_ERR_STATE, "invalid state")                           \
    X(MS_ERR_DEVICE, "device error")

enum {
#define MS_ERR_ENUM(code, msg) code,
    MS_ERR_TABLE(MS_ERR_ENUM)
#undef MS_ERR_ENUM
    MS_ERR__COUNT
};

/* Size of the message buffer of an ms_error, bytes (NUL included). */
#define MS_ERR_MSG_MAX 512

/* An error report: a code from MS_ERR_TABLE and a message that names what
 * failed and where (file, tensor, key path, ...). Owned by the caller. */
typedef struct ms_error {
    int code;
    char msg[MS_ERR_MSG_MAX];
} ms_error;

/* ms_strerror: the table's fixed text for code (never NULL). */
const char *ms_strerror(int code);

/* ms_err_name: the enum name for code, e.g. "MS_ERR_FORMAT" (never NULL). */
const char *ms_err_name(int code);

/* ms_err_set: record code and a printf-style message in err (err may be
 * NULL: then nothing is recorded). Returns code, so callers can write
 * `return ms_err_set(err, MS_ERR_FORMAT, "...", ...);`. */
int ms_err_set(ms_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ms_err_prefix: prepend "prefix: " to err's message (err may be NULL). */
void ms_err_prefix(ms_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ms_err_clear: reset err to MS_OK with an empty message. */
void ms_err_clear(ms_error *err);

/* MS_ASSERT: always-on assertion for programming errors. Prints the
 * expression, file and line to stderr and aborts. Never use it for
 * conditions that input can cause. */
#define MS_ASSERT(cond)                                                  \
    do {                                                                 \
        if (__builtin_expect(!(cond), 0))                                \
            ms_assert_fail(#cond, __FILE__, __LINE__, __func__);         \
    } while (0)

void ms_assert_fail(const char *expr, const char *file, int line,
                    const char *func) __attribute__((noreturn));

#endif
