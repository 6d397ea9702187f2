/* log.c - key=value line logger on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
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

void ms_log_emit(int level, const char *event, const char *fmt, ...) {
    char line[LOG_LINE_MAX];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
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
