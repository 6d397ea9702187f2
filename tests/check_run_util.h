/* check_run_util.h - for suites that drive build/moshi-run: a temporary
 * directory per test (run_setup/run_teardown as a checked fixture) and run(),
 * which captures the program's stdout and stderr. Include after check_main.h
 * and check_lm_util.h (slurp). */
#ifndef MOSHID_CHECK_RUN_UTIL_H
#define MOSHID_CHECK_RUN_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char tmpd[64];
static char out_txt[1 << 16], err_txt[1 << 14];

static void run_setup(void) {
    strcpy(tmpd, "/tmp/check_run_XXXXXX");
    ck_assert(mkdtemp(tmpd) != NULL);
}

static void run_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpd);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", tmpd);
}

/* run: moshi-run with args (a shell word list); stdout and stderr into
 * out_txt and err_txt; returns the exit status (128 when killed). */
static int run(const char *args) {
    char cmd[4096], po[128], pe[128];
    snprintf(po, sizeof po, "%s/stdout", tmpd);
    snprintf(pe, sizeof pe, "%s/stderr", tmpd);
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
