/* notify.c - the sd_notify readiness protocol. See notify.h. */
#include "notify.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "clock.h"

/* Longest datagram built here, bytes: a field name and NOTIFY_STATUS_MAX. */
#define NOTIFY_MSG_MAX (NOTIFY_STATUS_MAX + 64)

/* Copy text into out (cap bytes) as one STATUS= value: control characters
 * become spaces, cut at NOTIFY_STATUS_MAX bytes without splitting a UTF-8
 * sequence. Borrows text. */
static void status_clean(char *out, size_t cap, const char *text) {
    size_t n = strlen(text), max = cap - 1 < NOTIFY_STATUS_MAX ? cap - 1 : NOTIFY_STATUS_MAX;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--; /* text[n] continues a sequence: cut before it */
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    out[n] = '\0';
}

/* Send one datagram; 1 sent, 0 no NOTIFY_SOCKET, < 0 -errno. */
static int send_msg(const char *msg) {
    return sd_notify(0, msg);
}

int notify_ready(const char *status) {
    if (!status) return send_msg("READY=1");
    char clean[NOTIFY_STATUS_MAX + 1], msg[NOTIFY_MSG_MAX];
    status_clean(clean, sizeof clean, status);
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s", clean);
    return send_msg(msg);
}

int notify_reloading(void) {
    char msg[64];
    snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64, ms_mono_ns() / 1000u);
    return send_msg(msg);
}

int notify_stopping(void) {
    return send_msg("STOPPING=1");
}

int notify_status(const char *fmt, ...) {
    char text[2 * NOTIFY_STATUS_MAX + 1], clean[NOTIFY_STATUS_MAX + 1], msg[NOTIFY_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    status_clean(clean, sizeof clean, text);
    snprintf(msg, sizeof msg, "STATUS=%s", clean);
    return send_msg(msg);
}

int notify_watchdog(void) {
    return send_msg("WATCHDOG=1");
}

int notify_extend_timeout(uint64_t usec) {
    char msg[64];
    snprintf(msg, sizeof msg, "EXTEND_TIMEOUT_USEC=%" PRIu64, usec);
    return send_msg(msg);
}

uint64_t notify_watchdog_usec(void) {
    uint64_t usec = 0;
    /* > 0: $WATCHDOG_USEC is set and $WATCHDOG_PID, if set, is this process */
    if (sd_watchdog_enabled(0, &usec) <= 0) return 0;
    return usec / 2;
}
