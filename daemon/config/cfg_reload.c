/* cfg_reload.c - reload (SIGHUP): apply the reloadable options of a newly
 * loaded configuration and report what changed and what needs a restart.
 * Uses the loader, compare and copy of cfg.c and the value text of
 * cfg_dump.c; neither of them uses this file.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cfg_int.h"

/* Longest value shown in a report line, bytes. */
#define CFG_REPORT_VALUE_MAX 256

/* Append one line to a report buffer; a full buffer ends in "...". */
static void append_line(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append_line(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 5 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - used) memcpy(buf + size - 5, "...\n", 5);
}

int cfg_apply_reload(cfg *cur, const cfg *next, cfg_reload_report *rep) {
    memset(rep, 0, sizeof *rep);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (cfg__value_equal(cur, next, o)) continue;
        char a[CFG_REPORT_VALUE_MAX], b[CFG_REPORT_VALUE_MAX];
        cfg__format_value(cur, o, a, sizeof a);
        cfg__format_value(next, o, b, sizeof b);
        if (o->flags & CFG_F_RELOAD) {
            append_line(rep->changed, sizeof rep->changed, "%s: %s -> %s\n", o->path, a, b);
            cfg__copy_value(cur, next, o);
            rep->n_changed++;
        } else {
            append_line(rep->refused, sizeof rep->refused, "%s: %s -> %s (needs a restart; keeping %s)\n", o->path,
                        a, b, a);
            rep->n_refused++;
        }
    }
    return rep->n_refused;
}

int cfg_reload_file(cfg *cur, const char *path, cfg_reload_report *rep, ms_error *err) {
    memset(rep, 0, sizeof *rep);
    cfg next;
    int rc = cfg_load_file(&next, path, err);
    if (rc != MS_OK) return rc;
    cfg_apply_reload(cur, &next, rep);
    cfg_close(&next);
    return MS_OK;
}
