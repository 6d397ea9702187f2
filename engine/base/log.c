/* log.c - key=value line logger on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

volatile int ms_log_level = MS_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int ms_log_parse_level(const char *name) {
    for (int i = 0; i <= MS_LOG_OFF; i++)
        if (name && strcmp(name, level_names[i]) == 0) return i;
    return -1;
}

const char *ms_log_level_name(int level) {
    if (level < 0 || level > MS_LOG_OFF) return "unknown";
    return level_names[level];
}

/* Longest line written, bytes; longer lines are cut and end in "...". */
#define LOG_LINE_MAX 2048

/* sd-daemon(3) priority prefixes by level: journald reads "<N>" at the
 * start of a line as its priority (err, warning, info, debug). */
static const char level_prio[] = {'7', '6', '4', '3'};

/* 1 when stderr is a journald stream: $JOURNAL_STREAM ("dev:ino", set by
 * systemd for StandardError=journal) names fd 2 (systemd.exec(5): a
 * process whose stderr was redirected since must not prefix). Decided at
 * the first line and kept (-1: not yet; a race only decides it twice). */
static int journal_stderr(void) {
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0) return v;
    v = 0;
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0)
        v = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}

void ms_log_emit(int level, const char *event, const char *fmt, ...) {
    char line[LOG_LINE_MAX];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char prio[4] = "";
    if (journal_stderr() && level >= MS_LOG_DEBUG && level <= MS_LOG_ERROR)
        prio[0] = '<', prio[1] = level_prio[level], prio[2] = '>', prio[3] = '\0';
    int n = snprintf(line, sizeof line,
                     "%sts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s event=%s",
                     prio, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     ms_log_level_name(level), event);
    if (n < 0) return;
    if ((size_t)n < sizeof line - 2 && fmt && fmt[0]) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0) n += m;
    }
    if ((size_t)n >= sizeof line - 1) {
        n = (int)sizeof line - 5;
        memcpy(line + n, "...", 3);
        n += 3;
    }
    line[n++] = '\n';
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}
