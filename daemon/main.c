/* main.c - moshid's command line: load and check the configuration, report
 * the build and the backends it can load. The server itself comes with the
 * daemon issue; until then running with a configuration says so and exits
 * with MAIN_EXIT_NOT_IMPLEMENTED.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buildinfo.h" /* generated: MOSHID_VERSION, MOSHID_GIT, MOSHID_CFLAGS */
#include "cfg.h"
#include "err.h"
#include "log.h"
#include "plugin.h"

enum {
    MAIN_EXIT_OK = 0,
    MAIN_EXIT_CONFIG = 1,          /* configuration refused */
    MAIN_EXIT_USAGE = 2,           /* bad command line */
    MAIN_EXIT_NOT_IMPLEMENTED = 3, /* serving is not written yet */
};

/* Most --set options on one command line. */
#define MAIN_MAX_SETS 64

static void usage(FILE *f) {
    fputs("usage: moshid [--config FILE] [--set section.name=VALUE]... [--check-config | --dump-config]\n"
          "       moshid --help | --version | --help-config\n"
          "\n"
          "  -c, --config FILE   configuration (JSON; see docs/configuration.md)\n"
          "  -s, --set P=VALUE   override one option after the file, e.g. --set server.port=9000\n"
          "                      (repeatable; VALUE is text for strings, JSON otherwise)\n"
          "      --check-config  load and validate the configuration, check that the\n"
          "                      files it names exist, then exit\n"
          "      --dump-config   print the effective configuration (defaults included)\n"
          "      --help-config   print the option reference (Markdown)\n"
          "  -V, --version       version, build and the backends this binary can load\n"
          "  -h, --help          this text\n"
          "\n"
          "exit status: 0 ok, 1 configuration refused, 2 bad command line,\n"
          "3 serving not implemented yet (this build has no server)\n",
          f);
}

/* Print the version, the build and one line per backend. The CUDA plugin
 * is only loaded here, never linked: this works with no CUDA library. */
static void version(void) {
    printf("moshid %s\n", MOSHID_VERSION);
    printf("build: git %s, cc %s, flags %s\n", MOSHID_GIT, __VERSION__, MOSHID_CFLAGS);
    printf("backends:\n");
    printf("  cpu   built in\n");
    ms_error err = {0};
    const moshid_plugin *p = plugin_load("cuda", &err);
    if (!p) {
        /* plugin_load's message starts "backend cuda unavailable: " */
        const char *why = strstr(err.msg, "unavailable: ");
        printf("  cuda  unavailable: %s\n", why ? why + strlen("unavailable: ") : err.msg);
        return;
    }
    char what[256] = "";
    int n = p->probe ? p->probe(what, sizeof what) : -1;
    if (n > 0) printf("  cuda  available (%s): %s\n", p->build ? p->build : "?", what);
    else if (n == 0) printf("  cuda  plugin loaded (%s), no usable device: %s\n", p->build ? p->build : "?", what);
    else printf("  cuda  plugin loaded (%s), probe failed: %s\n", p->build ? p->build : "?",
                p->probe ? what : "no probe function");
}

int main(int argc, char **argv) {
    enum { OPT_CHECK = 256, OPT_DUMP, OPT_HELP_CONFIG };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 's'},
        {"check-config", no_argument, NULL, OPT_CHECK},
        {"dump-config", no_argument, NULL, OPT_DUMP},
        {"help-config", no_argument, NULL, OPT_HELP_CONFIG},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    const char *sets[MAIN_MAX_SETS];
    int nsets = 0, check = 0, dump = 0, opt;
    while ((opt = getopt_long(argc, argv, "c:s:Vh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': path = optarg; break;
        case 's':
            if (nsets == MAIN_MAX_SETS) {
                fprintf(stderr, "moshid: more than %d --set options\n", MAIN_MAX_SETS);
                return MAIN_EXIT_USAGE;
            }
            sets[nsets++] = optarg;
            break;
        case OPT_CHECK: check = 1; break;
        case OPT_DUMP: dump = 1; break;
        case OPT_HELP_CONFIG: cfg_write_doc(stdout); return MAIN_EXIT_OK;
        case 'V': version(); return MAIN_EXIT_OK;
        case 'h': usage(stdout); return MAIN_EXIT_OK;
        default: usage(stderr); return MAIN_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "moshid: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return MAIN_EXIT_USAGE;
    }

    cfg c;
    ms_error err = {0};
    if (path) {
        if (cfg_load_file(&c, path, &err) != MS_OK) {
            fprintf(stderr, "moshid: %s\n", err.msg);
            return MAIN_EXIT_CONFIG;
        }
    } else {
        cfg_init(&c);
    }
    for (int i = 0; i < nsets; i++) {
        if (cfg_set(&c, sets[i], &err) != MS_OK) {
            fprintf(stderr, "moshid: %s\n", err.msg);
            cfg_close(&c);
            return MAIN_EXIT_CONFIG;
        }
    }
    if (nsets > 0 && cfg_validate(&c, &err) != MS_OK) {
        fprintf(stderr, "moshid: --set: %s\n", err.msg);
        cfg_close(&c);
        return MAIN_EXIT_CONFIG;
    }
    ms_log_level = c.log.level;
    int rc = MAIN_EXIT_OK;
    if (dump) {
        char *txt = cfg_dump(&c);
        if (!txt) {
            fprintf(stderr, "moshid: out of memory\n");
            cfg_close(&c);
            return MAIN_EXIT_CONFIG;
        }
        printf("%s\n", txt);
        free(txt);
    }
    if (check) {
        if (cfg_check_files(&c, &err) != MS_OK) {
            fprintf(stderr, "moshid: %s: %s\n", path ? path : "(defaults)", err.msg);
            rc = MAIN_EXIT_CONFIG;
        } else {
            fprintf(stderr, "moshid: %s: configuration OK\n", path ? path : "(defaults)");
        }
    }
    if (!dump && !check) {
        if (!path) {
            fprintf(stderr, "moshid: no configuration given (--config FILE); see moshid --help\n");
            rc = MAIN_EXIT_USAGE;
        } else if (cfg_check_files(&c, &err) != MS_OK) {
            fprintf(stderr, "moshid: %s: %s\n", path, err.msg);
            rc = MAIN_EXIT_CONFIG;
        } else {
            fprintf(stderr, "moshid: %s: configuration OK, but serving is not implemented yet "
                            "(this build has no WebSocket server); exiting\n", path);
            rc = MAIN_EXIT_NOT_IMPLEMENTED;
        }
    }
    cfg_close(&c);
    return rc;
}
