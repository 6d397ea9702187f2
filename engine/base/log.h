/* log.h - one line per event, key=value fields, on stderr (journald reads it).
 *
 * The level is checked before any formatting happens, so a disabled debug
 * line costs one comparison. Lines are written with a single write(2) so
 * lines from different threads never interleave.
 *
 *   LOGI("listen", "addr=%s port=%d", addr, port);
 *   -> ts=2026-11-29T14:50:01.123Z level=info event=listen addr=0.0.0.0 port=8998
 */
#ifndef MOSHID_LOG_H
#define MOSHID_LOG_H

enum { MS_LOG_DEBUG = 0, MS_LOG_INFO, MS_LOG_WARN, MS_LOG_ERROR, MS_LOG_OFF };

/* Current threshold; lines below it are skipped. Written at start-up and on
 * reload (loop thread); read by every thread (a plain int: a racy read only
 * decides whether one line is printed). */
extern volatile int ms_log_level;

/* ms_log_parse_level: "debug", "info", "warn", "error", "off" -> level, or
 * -1 when the name is unknown. */
int ms_log_parse_level(const char *name);
const char *ms_log_level_name(int level);

/* ms_log_emit: format and write one line; use the macros instead. fmt holds
 * the extra key=value fields (may be ""). */
void ms_log_emit(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define MS_LOG(level, event, ...)                              \
    do {                                                       \
        if ((level) >= ms_log_level)                           \
            ms_log_emit((level), (event), __VA_ARGS__);        \
    } while (0)

#define LOGD(event, ...) MS_LOG(MS_LOG_DEBUG, event, __VA_ARGS__)
#define LOGI(event, ...) MS_LOG(MS_LOG_INFO, event, __VA_ARGS__)
#define LOGW(event, ...) MS_LOG(MS_LOG_WARN, event, __VA_ARGS__)
#define LOGE(event, ...) MS_LOG(MS_LOG_ERROR, event, __VA_ARGS__)

#endif
