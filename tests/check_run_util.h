/* check_run_util.h - for suites that drive build/moshi-run: run(), which
 * captures the program's stdout and stderr into check_tmp (check_main.h:
 * check_tmp_make/check_tmp_remove as a checked fixture). Include after
 * check_main.h and check_lm_util.h (slurp). */
#ifndef MOSHID_CHECK_RUN_UTIL_H
#define MOSHID_CHECK_RUN_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char out_txt[1 << 16], err_txt[1 << 14];

/* run: moshi-run with args (a shell word list); stdout and stderr into
 * out_txt and err_txt; returns the exit status (128 when killed). */
static int run(const char *args) {
    char cmd[4096], po[128], pe[128];
    snprintf(po, sizeof po, "%s/stdout", check_tmp);
    snprintf(pe, sizeof pe, "%s/stderr", check_tmp);
    snprintf(cmd, sizeof cmd, "%s/moshi-run %s >'%s' 2>'%s'", check_build_dir(), args, po, pe);
    int st = system(cmd);
    size_t n;
    char *o = slurp(po, &n), *e = slurp(pe, &n);
    snprintf(out_txt, sizeof out_txt, "%s", o ? o : "");
    snprintf(err_txt, sizeof err_txt, "%s", e ? e : "");
    free(o);
    free(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

#endif
