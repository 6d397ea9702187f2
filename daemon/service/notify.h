/* notify.h - moshid to its service manager: the sd_notify readiness
 * protocol (systemd Type=notify), over libsystemd's sd_notify.
 *
 * Every call sends one datagram to $NOTIFY_SOCKET and is a no-op (returns
 * 0) when that variable is unset: outside systemd, or under a unit that is
 * not Type=notify. The datagrams, field by field:
 *   notify_ready             "READY=1" (+ "\nSTATUS=..." when status given)
 *   notify_reloading         "RELOADING=1\nMONOTONIC_USEC=N"
 *   notify_stopping          "STOPPING=1"
 *   notify_status            "STATUS=..."
 *   notify_watchdog          "WATCHDOG=1"
 *   notify_extend_timeout    "EXTEND_TIMEOUT_USEC=N"
 * (MONOTONIC_USEC is what systemd 253's Type=notify-reload asks for; 252
 * ignores it.) STATUS text is one line: control characters, newlines
 * included, become spaces (a newline would start a field of its own), and
 * it is cut to NOTIFY_STATUS_MAX bytes.
 *
 * Returns: 1 sent, 0 not under a notify-aware manager, < 0 a negative errno
 * (the caller logs it; nothing here logs). Any thread: sd_notify opens a
 * socket of its own per call and the functions keep no state.
 */
#ifndef MOSHID_NOTIFY_H
#define MOSHID_NOTIFY_H

#include <stdint.h>

/* Longest STATUS= text sent, bytes (longer text is cut). */
#define NOTIFY_STATUS_MAX 256

/* The model and the personas are loaded, the port is open: systemd's
 * "started". status: a STATUS= line sent in the same datagram, or NULL. */
int notify_ready(const char *status);

/* SIGHUP received, the configuration is being re-read; send notify_ready
 * when done (refused or applied). */
int notify_reloading(void);

/* Shutdown has begun (SIGTERM/SIGINT). */
int notify_stopping(void);

/* A free-form STATUS= line, printf-style (shown by systemctl status). */
int notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Keep-alive: send while the service is healthy (the engine makes progress
 * or is idle), at least every notify_watchdog_usec() microseconds. */
int notify_watchdog(void);

/* Ask for usec more start-up (or stop) time from now; send again before
 * it runs out (a large model loading). */
int notify_extend_timeout(uint64_t usec);

/* The watchdog ping period the manager asks for, microseconds: half of
 * WatchdogSec= when $WATCHDOG_USEC is set for this process, else 0 (no
 * watchdog: notify_watchdog need not be called). */
uint64_t notify_watchdog_usec(void);

#endif
