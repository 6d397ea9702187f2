/* main.c - moshid's command line: load and check the configuration, report
 * the build and the backends it can load, and serve (app.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "buildinfo.h" /* generated: MOSHID_VERSION, MOSHID_GIT, MOSHID_CFLAGS */
#include "cfg.h"
#include "err.h"
#include "log.h"
#include "metrics.h"
#include "plugin.h"
#include "audio_opus.h"
#include "backend.h"
#include "model.h"
#include "notify.h"
#include "app.h"
#include "selfsign.h"

enum {
    MAIN_EXIT_OK = 0,
    MAIN_EXIT_CONFIG = 1,          /* configuration refused */
    MAIN_EXIT_USAGE = 2,           /* bad command line */
    /* app_run: 3 = the loop did not close cleanly, 4 = fatal engine error
     * (a failed frame step, or a device error, MS_ERR_DEVICE, in a step or
     * a session's start: sticky on CUDA, so the process ends and the
     * service manager starts a fresh one; one status for both, as systemd
     * treats them alike) */
};

/* Most --set options on one command line. */
#define MAIN_MAX_SETS 64

#ifndef MOSHID_WEB_SRC_DIR
#define MOSHID_WEB_SRC_DIR ""
#endif

/* The browser page served when server.static_dir is empty: the installed
 * one (PREFIX/share/moshid/web beside PREFIX/bin/moshid, make install),
 * else the build tree's daemon/web (MOSHID_WEB_SRC_DIR, make run), else
 * none (NULL). The first whose index.html exists. */
static const char *default_web_dir(void) {
    static char dir[PATH_MAX];
    char exe[PATH_MAX], probe[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *bin = dirname(exe);
        size_t bl = strlen(bin);
        if (bl >= 4 && strcmp(bin + bl - 4, "/bin") == 0) {
            snprintf(dir, sizeof dir, "%.*s/share/moshid/web", (int)(bl - 4), bin);
            snprintf(probe, sizeof probe, "%s/index.html", dir);
            if (access(probe, R_OK) == 0) return dir;
        }
    }
    if (MOSHID_WEB_SRC_DIR[0]) {
        snprintf(probe, sizeof probe, "%s/index.html", MOSHID_WEB_SRC_DIR);
        if (access(probe, R_OK) == 0) return MOSHID_WEB_SRC_DIR;
    }
    return NULL;
}

/* srv's refusals (srv.h) in /metrics, one counter each. */
static void count_refusal(int why) {
    static const int counter[SRV_REF__COUNT] = {
        [SRV_REF_rate] = MET_connections_refused_rate_total,
        [SRV_REF_ip_table] = MET_connections_refused_ip_table_total,
        [SRV_REF_handshake_timeout] = MET_handshake_timeouts_total,
        [SRV_REF_pending_evicted] = MET_handshakes_evicted_total,
        [SRV_REF_busy] = MET_connections_refused_busy_total,
        [SRV_REF_per_ip] = MET_connections_refused_per_ip_total,
        [SRV_REF_bad_request] = MET_http_bad_requests_total,
        [SRV_REF_unmasked] = MET_ws_unmasked_closed_total,
        [SRV_REF_proxy_header] = MET_proxy_header_refused_total,
    };
    _Static_assert(SRV_REF__COUNT == 9, "a counter for each srv refusal");
    if (why >= 0 && why < SRV_REF__COUNT) met_add(counter[why], 1);
}

/* The daemon's options from the configuration: every option through the
 * table (cfg_to_app), then what no option holds: the defaults that depend
 * on the installation or on other options, the refusal counter, the build. */
static void to_app_opts(const cfg *c, app_opts *o) {
    memset(o, 0, sizeof *o);
    cfg_to_app(c, o, false);
    if (!o->srv.static_dir) o->srv.static_dir = default_web_dir();
    if (!o->srv.max_connections) o->srv.max_connections = (unsigned)(2 * o->model.slots + 16);
    /* srv admits every origin (NULL); the policy is access.h's (o->origins),
     * judged in app.c's ws_admit, and reloadable */
    o->srv.allowed_origins = NULL;
    o->srv.on_refuse = count_refusal;
    o->build = MOSHID_VERSION " (" MOSHID_GIT ")";
}

typedef struct reload_ctx {
    cfg *c;
    const char *path;
} reload_ctx;

/* Longest report line logged, bytes (cfg_reload.c cuts values at 256). */
#define CFG_REPORT_LINE_MAX 1024

/* One line of a reload report as a log field value: up to the newline,
 * '"' as '\'', other control bytes as '?'. */
static const char *report_line(const char *l, char *buf, size_t len) {
    size_t i = 0;
    for (; l[i] && l[i] != '\n' && i + 1 < len; i++)
        buf[i] = l[i] == '"' ? '\'' : (unsigned char)l[i] < 0x20 ? '?' : l[i];
    buf[i] = '\0';
    return buf;
}

/* SIGHUP (loop thread): re-read the file; reloadable options apply. */
static int reload(void *ud, app_opts *o, ms_error *err) {
    reload_ctx *r = ud;
    cfg_reload_report rep;
    if (cfg_reload_file(r->c, r->path, &rep, err) != MS_OK) return err->code ? err->code : MS_ERR_FORMAT;
    /* One log record per option (the report holds a line each); the
     * values' quotes become ' inside the quoted field. */
    char line[CFG_REPORT_LINE_MAX];
    for (const char *l = rep.refused; rep.n_refused && *l; l += strcspn(l, "\n"), l += *l == '\n')
        LOGW("reload_refused", "change=\"%s\" msg=\"this option needs a restart\"", report_line(l, line, sizeof line));
    for (const char *l = rep.changed; rep.n_changed && *l; l += strcspn(l, "\n"), l += *l == '\n')
        LOGI("reload_changed", "change=\"%s\"", report_line(l, line, sizeof line));
    ms_log_level = r->c->log.level;
    cfg_to_app(r->c, o, true);   /* the reloadable options; o keeps the rest */
    return MS_OK;
}

static int serve(cfg *c, const char *path) {
    app_opts o;
    to_app_opts(c, &o);
    reload_ctx r = {c, path};
    ms_error err = {0};
    int rc = app_run(&o, reload, &r, &err);
    if (rc == 1) fprintf(stderr, "moshid: %s\n", err.msg);
    return rc;
}

/* --check-config (and serving): configured personas need a PersonaPlex
 * checkpoint; tell the variant from the checkpoint's configuration and
 * tensor shapes (mapped, not read). */
static int check_personas(const cfg *c, ms_error *err) {
    int n = c->personas.list.n;
    if (n == 0) return MS_OK;
    lm_variant v = (lm_variant)cfg_variant_lm[c->model.variant];
    ms_error e = {0};
    if (model_probe_variant(c->model.lm_dir, v, &v, &e) != MS_OK)
        return ms_err_set(err, e.code ? e.code : MS_ERR_FORMAT, "personas.list: cannot tell the checkpoint's variant: %s",
                          e.msg);
    if (v != LM_VARIANT_PERSONAPLEX)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "personas.list: %d persona%s configured, but model.lm_dir (%s) is a Kyutai checkpoint: "
                          "personas need a PersonaPlex checkpoint",
                          n, n > 1 ? "s" : "", c->model.lm_dir);
    return MS_OK;
}

/* --check-config: the tokens file's contents, read by the daemon's own
 * loader (access_load_tokens): a bad line fails with the file and line
 * number, never the token; a file others can read gets a warning. */
static int check_tokens(const cfg *c, ms_error *err) {
    if (!c->auth.tokens_file[0]) return MS_OK;
    access_ctl *a = access_create();
    if (!a) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    int loose = 0, rc = access_load_tokens(a, c->auth.tokens_file, &loose, err);
    if (rc == MS_OK && loose)
        fprintf(stderr, "moshid: warning: %s is readable by group or others: chmod 600 it\n", c->auth.tokens_file);
    access_free(a);
    return rc;
}

static void usage(FILE *f) {
    fputs("usage: moshid [--config FILE] [--set section.name=VALUE]... [--check-config | --dump-config]\n"
          "       moshid --help | --version | --help-config\n"
          "       moshid --self-signed DIR\n"
          "\n"
          "  -c, --config FILE   configuration (JSON; see docs/configuration.md)\n"
          "  -s, --set P=VALUE   override one option after the file, e.g. --set server.port=9000\n"
          "                      (repeatable; VALUE is text for strings, JSON otherwise)\n"
          "      --check-config  load and validate the configuration, check that the\n"
          "                      files it names exist and the tokens file parses, then exit\n"
          "      --dump-config   print the effective configuration (defaults included)\n"
          "      --help-config   print the option reference (Markdown)\n"
          "      --self-signed DIR  write DIR/moshid.crt and DIR/moshid.key, a self-signed\n"
          "                      certificate for this host's names and addresses (LAN https),\n"
          "                      print the configuration lines for them, then exit\n"
          "  -V, --version       version, build and the backends this binary can load\n"
          "  -h, --help          this text\n"
          "\n"
          "exit status: 0 ok, 1 configuration refused, 2 bad command line,\n"
          "3 the server stopped without closing cleanly, 4 fatal engine error (restart it)\n",
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
    char what[512] = "";
    int n = p->probe ? p->probe(what, sizeof what) : -1;
    what[sizeof what - 1] = '\0';   /* whatever the plugin wrote */
    if (n > 0) printf("  cuda  available (%s): %s\n", p->build ? p->build : "?", what);
    else if (n == 0) printf("  cuda  plugin loaded (%s), no usable device: %s\n", p->build ? p->build : "?", what);
    else printf("  cuda  plugin loaded (%s), probe failed: %s\n", p->build ? p->build : "?",
                p->probe ? what : "no probe function");
    /* engine.backend = auto takes the plugin only with a table and a device
     * (daemon/session/model.c) */
    const char *table_name = p->backend ? ((const lm_backend_ops *)p->backend)->name : NULL;
    if (p->backend)
        printf("        backend table: yes (%s)%s\n", table_name ? table_name : "unnamed",
               n > 0 ? "" : "; no usable device, so engine.backend = auto uses the CPU");
    else
        printf("        backend table: no (engine.backend = cuda is refused; auto uses the CPU)\n");
}

/* --self-signed DIR: write the pair (selfsign.h), say how to use it. */
static int self_signed(const char *dir) {
    static selfsign_result res; /* static: 8 KiB of names */
    ms_error err = {0};
    if (selfsign_write(dir, &res, &err) != MS_OK) {
        fprintf(stderr, "moshid: --self-signed: %s\n", err.msg);
        return MAIN_EXIT_CONFIG;
    }
    selfsign_print(stdout, &res);
    return MAIN_EXIT_OK;
}

int main(int argc, char **argv) {
    enum { OPT_CHECK = 256, OPT_DUMP, OPT_HELP_CONFIG, OPT_SELF_SIGNED };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 's'},
        {"check-config", no_argument, NULL, OPT_CHECK},
        {"dump-config", no_argument, NULL, OPT_DUMP},
        {"help-config", no_argument, NULL, OPT_HELP_CONFIG},
        {"self-signed", required_argument, NULL, OPT_SELF_SIGNED},
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
        case OPT_SELF_SIGNED: return self_signed(optarg);
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
        if (cfg_check_files(&c, &err) != MS_OK || check_personas(&c, &err) != MS_OK ||
            check_tokens(&c, &err) != MS_OK) {
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
        } else if (cfg_check_files(&c, &err) != MS_OK || check_personas(&c, &err) != MS_OK) {
            fprintf(stderr, "moshid: %s: %s\n", path, err.msg);
            notify_status("start-up failed: %s", err.msg);   /* shown by systemctl status */
            rc = MAIN_EXIT_CONFIG;
        } else {
            rc = serve(&c, path);
        }
    }
    cfg_close(&c);
    return rc;
}
