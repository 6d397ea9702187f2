/* app.c - the moshid application: wiring, /healthz, /metrics, signals,
 * shutdown and reload. See app.h. Everything here runs on the loop
 * thread, except what the engine thread does inside the scheduler.
 */
#include "app.h"

#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "app_int.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"
#include "notify.h"
#include "rt.h"
#include "sess.h"

/* Frames per second of audio (80 ms frames). */
/* Output frames a slot's ring holds beyond its input ring: about 1 s
 * the loop thread may fall behind the engine. */
#define OUT_RING_STALL_FRAMES 12
/* Largest /metrics body, bytes. */
#define METRICS_MAX 65536
/* Longest wait for sessions to close at shutdown, ms. */
#define SHUTDOWN_GRACE_MS 2000
/* Start-up time asked of the service manager at a time (EXTEND_TIMEOUT_USEC)
 * while the model loads or the personas prime, us, and how often it is
 * asked again, s (well inside it). */
#define NOTIFY_EXTEND_USEC (60ull * 1000000ull)
#define NOTIFY_EXTEND_EVERY_S 10
/* Longest the model load is kept alive that way, s: past it the manager's
 * own TimeoutStartSec= decides (a load that hangs is not kept for ever). */
#define NOTIFY_LOAD_CAP_S (30 * 60)
/* STATUS= refresh while serving, ticks (s). */
#define NOTIFY_STATUS_EVERY_S 10

/* The model load keeps start-up alive: a thread that asks the service
 * manager for NOTIFY_EXTEND_USEC more every NOTIFY_EXTEND_EVERY_S while
 * model_open blocks the loop thread, for NOTIFY_LOAD_CAP_S at most.
 * notify_* keep no state, so calling them from this thread is safe. */
typedef struct load_keepalive {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;                  /* under mu */
    int running;               /* the thread was started (loop thread) */
} load_keepalive;

static void *load_keepalive_main(void *arg) {
    load_keepalive *k = arg;
    double end_ms = ms_mono_ms() + NOTIFY_LOAD_CAP_S * 1e3;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        struct timespec t = ms_mono_deadline(NOTIFY_EXTEND_EVERY_S);   /* k->cv waits on CLOCK_MONOTONIC */
        while (!k->done && pthread_cond_timedwait(&k->cv, &k->mu, &t) == 0) {
        }
        if (k->done || ms_mono_ms() >= end_ms) break;
        notify_extend_timeout(NOTIFY_EXTEND_USEC);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Start the keep-alive (after a first EXTEND_TIMEOUT_USEC sent by the
 * caller); nothing when not under a notify-aware manager. Loop thread. */
static void load_keepalive_start(load_keepalive *k) {
    memset(k, 0, sizeof *k);
    if (!getenv("NOTIFY_SOCKET")) return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    k->running = pthread_create(&k->thread, NULL, load_keepalive_main, k) == 0;
    if (!k->running) {
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
    }
}

/* Stop and join the keep-alive (the model is open, or failed). */
static void load_keepalive_stop(load_keepalive *k) {
    if (!k->running) return;
    pthread_mutex_lock(&k->mu);
    k->done = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    k->running = 0;
}

/* The STATUS= text while serving: where, sessions, capacity, backend,
 * overload. Loop thread. */
static void serving_status(const app *a, char *buf, size_t n) {
    snprintf(buf, n, "serving on %s: sessions %d of %d, backend %s%s", a->url, a->nsessions,
             a->sch ? sched_capacity(a->sch) : 0, model_backend_name(a->m),
             a->sch && sched_overloaded(a->sch) ? ", overloaded" : "");
}

/* The watchdog check, every half ping period: ping only while the engine
 * is healthy, i.e. its progress counter moved since the last ping or it
 * waits for work. A step that never returns stops the pings, and the
 * service manager restarts the daemon. Loop thread (a stuck loop stops
 * them too). */
static void on_wd_tick(uv_timer_t *t) {
    app *a = t->data;
    if (!a->sch) return;
    uint64_t p = sched_progress(a->sch);
    if (p != a->wd_progress || sched_idle(a->sch)) {
        a->wd_progress = p;
        notify_watchdog();
    }
}

/* Header text for a log field: at most 64 bytes, '?' for '"', '\\' and
 * bytes outside printable ASCII (the client chose them). */
static const char *log_safe(const char *s, char *buf, size_t len) {
    size_t i = 0;
    for (; s && s[i] && i < len - 1 && i < 64; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\' ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* A message of moshid's own for a quoted log field: '"' as '\'', '\\' and
 * control bytes as '?', cut to len - 1 bytes. */
static const char *log_msg(const char *s, char *buf, size_t len) {
    size_t i = 0;
    for (; s[i] && i < len - 1; i++)
        buf[i] = s[i] == '"' ? '\'' : (unsigned char)s[i] < 0x20 || s[i] == '\\' || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

_Static_assert(MET__NAUTH == ACCESS_R__COUNT - 1, "moshid_auth_refused_total labels follow ACCESS_REFUSALS");

/* ws_admit (srv.h): the origin and token policy (access.h) before the 101,
 * each refusal counted and logged with the token's name (never the token,
 * never the query). *principal carries the token's id to sess_open. Loop
 * thread. */
/* Before the upgrade, for a program (no Origin header: browsers always
 * send one): the refusals that need no slot and no prime (a bad query, an
 * unknown persona or voice, a Kyutai checkpoint asked for a persona) are
 * answered with an HTTP status and the reason as the body, which every
 * WebSocket library reports to its caller (the LiveKit PersonaPlex plugin
 * stops on a 4xx and tells its user, where an error message after the
 * upgrade is only logged and the close makes it reconnect for ever). A
 * browser's WebSocket never sees an HTTP status, so pages get the error
 * message and the close reason after the upgrade, as before. 0 admits,
 * else the status with why filled (counted and logged). */
static int program_refused(app *a, const srv_admit_req *r, char *why, size_t whylen) {
    if (r->origin[0] || strcmp(r->path, "/api/chat") != 0) return 0; /* /v1/realtime answers with error events */
    proto_query q;
    ms_error e = {0};
    pers_fail pf;
    int status = 0, kind = 0;
    if (sess_query_read(a, r->args, r->nargs, &q, &e) != MS_OK) {
        snprintf(why, whylen, "bad query: %s", e.msg);
        status = 400;
        kind = MET_ERR_bad_query;
    } else if (pers_check(a->pers, &q, &pf)) {
        snprintf(why, whylen, "%s", pf.msg);
        status = pf.status == PROTO_CLOSE_TRY_LATER ? 503
                 : pf.status == PROTO_CLOSE_INTERNAL ? 500
                 : strncmp(pf.msg, "unknown ", 8) == 0 ? 404
                                                       : 400;
        kind = pf.kind;
    }
    if (!status) return 0;
    met_error(kind);
    char mb[320];
    LOGI("ws_refused", "peer=%s status=%d reason=before_upgrade msg=\"%s\"", r->peer, status, log_msg(why, mb, sizeof mb));
    return status;
}

static int ws_admit(void *ud, const srv_admit_req *r, void **principal, char *why, size_t whylen) {
    app *a = ud;
    access_request q = {.host = r->host, .origin = r->origin, .authorization = r->authorization,
                        .api_key = r->api_key, .args = r->args, .nargs = r->nargs, .tls = r->tls};
    access_verdict v;
    access_admit(a->acc, &q, &v);
    if (v.status) {
        char ob[72];
        met_auth_refused(v.reason - 1);
        LOGI("ws_refused", "peer=%s status=%d reason=%s token=%s origin=\"%s\"", r->peer, v.status,
             access_reason_name(v.reason), v.name[0] ? v.name : "-", log_safe(r->origin, ob, sizeof ob));
        snprintf(why, whylen, "%s", v.why);
        return v.status;
    }
    *principal = (void *)(uintptr_t)v.token;
    return program_refused(a, r, why, whylen);
}

/* Load auth.tokens_file into a->acc (start-up and SIGHUP) and say what is
 * in force. On error nothing changes. */
static int load_tokens(app *a, const char *path, ms_error *err) {
    int loose = 0;
    if (access_load_tokens(a->acc, path, &loose, err) != MS_OK) return err->code ? err->code : MS_ERR_FORMAT;
    if (loose) LOGW("auth", "file=%s msg=\"the tokens file is readable by group or others: chmod 600 it\"", path);
    if (access_required(a->acc)) {
        LOGI("auth", "tokens=%d protect_http=%s", access_ntokens(a->acc), a->o.protect_http ? "true" : "false");
        return MS_OK;
    }
    if (a->o.protect_http)
        LOGW("auth", "msg=\"auth.protect_http has no effect without auth.tokens_file: /metrics and /api/personas "
             "are open\"");
    return MS_OK;
}

/* Who can connect, from what the sockets are bound to (not from the
 * configuration's words): bound beyond loopback without tokens, say so
 * loudly, and in /healthz and /metrics. Start-up (once listening) and
 * after a reload of the tokens. Loop thread. */
static void judge_exposure(app *a) {
    if (!a->server) return;
    int exposed = !srv_loopback_only(a->server) && !access_required(a->acc);
    met_set(MET_exposed_without_auth, exposed);
    if (exposed)
        LOGW("exposed", "listen=%s msg=\"listening beyond loopback without auth.tokens_file: whoever reaches these "
             "addresses can open sessions, list personas and read /metrics; set auth.tokens_file "
             "(docs/security.md)\"", srv_bound(a->server));
}

/* auth.protect_http: a request for /metrics or /api/personas without a
 * valid token gets 401 with the one-line reason (srv adds the
 * WWW-Authenticate challenge); counted and logged as upgrade refusals are
 * (the token's name at most, never the token). 1 when refused (r
 * filled; r->body NULL when out of memory for it), 0 to serve. Loop
 * thread. */
static int http_refused(app *a, const char *path, srv_http_reply *r) {
    const srv_http_req *q = r->req;
    access_request ar = {.host = "", .origin = "", .authorization = q ? q->authorization : "",
                         .api_key = q ? q->api_key : "", .args = q ? q->args : NULL, .nargs = q ? q->nargs : 0,
                         .tls = q ? q->tls : 0};
    access_verdict v;
    access_authenticate(a->acc, &ar, &v);
    if (!v.status) return 0;
    met_auth_refused(v.reason - 1);
    LOGI("http_auth_refused", "peer=%s path=%s status=%d reason=%s", q ? q->peer : "-", path, v.status,
         access_reason_name(v.reason));
    size_t n = strlen(v.why);
    if (!(r->body = malloc(n + 2))) return 1;
    memcpy(r->body, v.why, n);
    r->body[n++] = '\n';
    r->body[n] = '\0';
    r->body_len = n;
    r->status = v.status;
    r->content_type = "text/plain; charset=utf-8";
    return 1;
}

static int http_get(void *ud, const char *path, srv_http_reply *r) {
    app *a = ud;
    /* refused: 401, or 404 when out of memory for the answer (never served) */
    if (a->o.protect_http && strcmp(path, "/healthz") != 0 && http_refused(a, path, r)) return r->body != NULL;
    if (strcmp(path, "/api/personas") == 0) {
        r->body = pers_list_json(a->pers);
        if (!r->body) return 0;
        r->body_len = strlen(r->body);
        r->status = 200;
        r->content_type = "application/json";
        return 1;
    }
    if (strcmp(path, "/metrics") == 0 && a->o.metrics) {
        met_set(MET_capacity, a->sch ? sched_capacity(a->sch) : 0);
        r->body = malloc(METRICS_MAX);
        if (!r->body) return 0;
        size_t n = met_render(r->body, METRICS_MAX);
        r->body_len = n < METRICS_MAX ? n : METRICS_MAX - 1;
        r->status = 200;
        r->content_type = "text/plain; version=0.0.4";
        return 1;
    }
    if (strcmp(path, "/healthz") == 0) {
        int free_slots = sched_free_slots(a->sch), overloaded = sched_overloaded(a->sch);
        int ready = !a->stopping && !sched_failed(a->sch, NULL);
        int ok = ready && free_slots > 0 && !overloaded;
        const lm_backend_stats *st = model_open_stats(a->m);
        char buf[2048];
        int n = snprintf(buf, sizeof buf,
                         "{\"ready\":%s,\"accepting\":%s,\"auth_required\":%s,\"listen\":\"%s\",\"loopback_only\":%s,"
                         "\"exposed_without_auth\":%s,\"variant\":\"%s\",\"backend\":\"%s\",\"sessions\":%d,"
                         "\"capacity\":%d,\"free\":%d,\"overloaded\":%s,\"pipeline\":%s,"
                         "\"memory\":{\"where\":\"%s\",\"used_bytes\":%zu,\"free_bytes_at_start\":%zu},"
                         "\"personas\":{\"ready\":%lld,\"primes_running\":%lld,\"snapshots\":%lld,"
                         "\"snapshot_bytes\":%lld}}\n",
                         ready ? "true" : "false", ok ? "true" : "false", access_required(a->acc) ? "true" : "false",
                         a->server ? srv_bound(a->server) : "", a->server && srv_loopback_only(a->server) ? "true" : "false",
                         met_gauge(MET_exposed_without_auth) ? "true" : "false", model_variant_name(a->m),
                         model_backend_name(a->m), a->nsessions, sched_capacity(a->sch), free_slots,
                         overloaded ? "true" : "false", st->pipeline ? "true" : "false",
                         st->where == LM_MEM_DEVICE ? "device" : "host", st->mem_used, st->mem_free,
                         (long long)met_gauge(MET_personas), (long long)met_gauge(MET_persona_primes_running),
                         (long long)met_gauge(MET_persona_cache_entries), (long long)met_gauge(MET_persona_cache_bytes));
        r->body = strdup(buf);
        r->body_len = r->body ? (size_t)n : 0;
        r->status = ok ? 200 : 503;
        r->content_type = "application/json";
        return r->body != NULL;
    }
    return 0;
}

static void on_output(void *ud) {
    app *a = ud;
    ms_error e = {0};
    if (sched_failed(a->sch, &e) && !a->exit_status) {
        /* A fatal engine error (e.g. a sticky GPU error): end the process so
         * the service manager restarts it. */
        LOGE("fatal", "code=%s exit_status=4 msg=\"engine failed: %s\"", ms_err_name(e.code), e.msg);
        notify_status("engine failed: %s", e.msg);
        a->exit_status = 4;
        for (sess *s = a->sessions; s; s = s->next)
            sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: the engine failed; the server restarts");
        raise(SIGTERM);
    }
    pers_drain(a->pers);   /* primes done: waiting sessions attach */
    sess_slot_retry(a);    /* a slot freed: a session waiting for it attaches */
    for (sess *s = a->sessions, *n; s; s = n) {
        n = s->next;
        sess_drain(s);
    }
}

static void handles_closed(uv_handle_t *h) { (void)h; }

/* Stop the engine and close the app's handles (the loop then ends once
 * the last worker request, a voice being read, is done). Once. */
static void teardown(app *a) {
    if (a->torn_down) return;
    a->torn_down = 1;
    pers_stop(a->pers);
    sched_free(a->sch); /* closes its async handle */
    a->sch = NULL;
    uv_close((uv_handle_t *)&a->tick, handles_closed);
    if (a->wd_usec) uv_close((uv_handle_t *)&a->wd_tick, handles_closed);
    uv_close((uv_handle_t *)&a->sig_term, handles_closed);
    uv_close((uv_handle_t *)&a->sig_int, handles_closed);
    uv_close((uv_handle_t *)&a->sig_hup, handles_closed);
}

static void srv_gone(void *ud) {
    app *a = ud;
    a->server = NULL;
    teardown(a);
}

static void on_tick(uv_timer_t *t) {
    app *a = t->data;
    double now = ms_mono_ms();
    for (sess *s = a->sessions, *n; s; s = n) {
        n = s->next;
        sess_tick(s, now);
    }
    sess_slot_retry(a);    /* the wait for a slot has a deadline */
    if (!a->stopping && a->listening) sess_shed_tick(a, now);
    if (!a->stopping && ++a->status_ticks >= (a->server ? NOTIFY_STATUS_EVERY_S : NOTIFY_EXTEND_EVERY_S)) {
        a->status_ticks = 0;
        if (a->server) { /* serving: refresh STATUS= */
            char st[NOTIFY_STATUS_MAX];
            serving_status(a, st, sizeof st);
            notify_status("%s", st);
        } else if (!a->listening) { /* the configured personas are being primed */
            notify_extend_timeout(NOTIFY_EXTEND_USEC);
        }
    }
    if (a->stopping && a->server && (a->nsessions == 0 || now - a->stop_started_ms > SHUTDOWN_GRACE_MS)) {
        LOGI("shutdown", "sessions_left=%d", a->nsessions);
        srv_shutdown(a->server, srv_gone);
    }
    if (a->stopping && !a->listening) { /* stopped while the personas were primed */
        LOGI("shutdown", "msg=\"stopped during start-up\"");
        teardown(a);
    }
}

static void on_stop(uv_signal_t *h, int sig) {
    app *a = h->data;
    if (a->stopping) return;
    a->stopping = 1;
    a->stop_started_ms = ms_mono_ms();
    notify_stopping();
    LOGI("stopping", "signal=%d sessions=%d", sig, a->nsessions);
    for (sess *s = a->sessions; s; s = s->next) sess_fail(s, -1, PROTO_CLOSE_GOING_AWAY, "server is shutting down");
    uv_timer_set_repeat(&a->tick, 50);
    uv_timer_again(&a->tick);
}

static void on_hup(uv_signal_t *h, int sig) {
    (void)sig;
    app *a = h->data;
    /* RELOADING=1 ... READY=1 around the reload once serving (before, a
     * READY=1 would announce a start-up that is not over; while stopping,
     * it would undo STOPPING=1). */
    int tell = a->server && !a->stopping;
    char st[NOTIFY_STATUS_MAX];
    if (tell) notify_reloading();
    if (!a->reload) {
        LOGW("reload", "msg=\"no configuration file to reload\"");
        if (tell) {
            serving_status(a, st, sizeof st);
            notify_ready(st);
        }
        return;
    }
    app_opts n = a->o;
    ms_error e = {0};
    if (a->reload(a->reload_ud, &n, &e) != MS_OK) {
        LOGW("reload_refused", "msg=\"%s\"", e.msg);
        if (tell) {
            char why[NOTIFY_STATUS_MAX];
            snprintf(why, sizeof why, "reload refused: %s", e.msg);
            notify_ready(why);
        }
        return;
    }
    /* n holds the reloadable options' new values (the table's reload
     * flag; strings and lists borrowed from the configuration reload just
     * updated) and the others as they were: sampling defaults, session
     * limits applied to new sessions and to the checks of open ones, idle
     * and close timeouts, TLS paths, personas, origins, tokens.
     * TLS: the pair is read again for new connections (srv_reload_tls:
     * open ones keep theirs; a pair that does not load keeps the old one). */
    if (a->server && (srv_tls(a->server) || (n.srv.tls_cert && n.srv.tls_cert[0]))) {
        ms_error te = {0};
        if (srv_reload_tls(a->server, n.srv.tls_cert, n.srv.tls_key, &te) != MS_OK)
            LOGE("reload_tls_refused", "msg=\"%s\"", te.msg);
    }
    a->o = n;
    pers_reload(a->pers, &n.personas);
    /* Access: origins and tokens for new upgrades; open sessions keep
     * running, also those of a withdrawn token (access.h). A bad tokens
     * file keeps the tokens in force. */
    ms_error ae = {0};
    if (access_set_origins(a->acc, n.origins, n.norigins, &ae) != MS_OK)
        LOGE("reload_origins_refused", "msg=\"%s\"", ae.msg);
    if (load_tokens(a, n.tokens_file, &ae) != MS_OK)
        LOGE("reload_tokens_refused", "msg=\"%s\" tokens_kept=%d", ae.msg, access_ntokens(a->acc));
    judge_exposure(a);
    LOGI("reloaded", "log_level=%s", ms_log_level_name(ms_log_level));
    if (tell) {
        serving_status(a, st, sizeof st);
        notify_ready(st);
    }
}

/* The configured personas are primed (or one failed): listen, and say so
 * on stdout; or end with exit status 1. Loop thread. */
static void personas_ready(void *ud, int ok, const char *msg) {
    app *a = ud;
    if (a->stopping || a->torn_down) return;
    a->listening = 1;
    if (!ok) {
        ms_err_set(&a->start_err, MS_ERR_ARG, "%s", msg);
        LOGE("start_failed", "msg=\"%s\"", msg);
        notify_status("start-up failed: %s", msg);
        a->exit_status = 1;
        teardown(a);
        return;
    }
    static const srv_handlers h = {
        .http_get = http_get,
        .ws_open = sess_open,
        .ws_message = sess_message,
        .ws_oversize = sess_oversize,
        .ws_writable = sess_writable,
        .ws_closed = sess_closed,
        .ws_admit = ws_admit,
    };
    if (!(a->server = srv_create(&a->loop, &a->o.srv, &h, a, &a->start_err))) {
        notify_status("start-up failed: %s", a->start_err.msg);
        a->exit_status = 1;
        teardown(a);
        return;
    }
    met_set(MET_ready, 1);
    judge_exposure(a);
    /* One line that tools (and `make run`) can read: the host and port
     * the first socket is bound to. */
    const app_opts *o = &a->o;
    char host[INET6_ADDRSTRLEN + 2];
    srv_url_host(a->server, host, sizeof host);
    snprintf(a->url, sizeof a->url, "%s://%s:%d/", o->srv.tls_cert && o->srv.tls_cert[0] ? "https" : "http", host,
             srv_port(a->server));
    fprintf(stdout, "moshid: serving on %s (variant %s, backend %s, %d sessions)\n", a->url,
            model_variant_name(a->m), model_backend_name(a->m), o->model.slots);
    fflush(stdout);
    char st[NOTIFY_STATUS_MAX];
    serving_status(a, st, sizeof st);
    notify_ready(st);
    a->status_ticks = 0;
}

int app_run(const app_opts *o, app_reload_fn reload, void *reload_ud, ms_error *err) {
    app *a = calloc(1, sizeof *a);
    if (!a) { ms_err_set(err, MS_ERR_NOMEM, "out of memory"); return 1; }
    a->o = *o;
    a->dialect[SRV_EP_REALTIME] = &rt_dialect;
    a->reload = reload;
    a->reload_ud = reload_ud;
    /* Access first: a bad tokens file is a configuration error, told
     * before the model loads. */
    if (!(a->acc = access_create())) { free(a); ms_err_set(err, MS_ERR_NOMEM, "out of memory"); return 1; }
    if (access_set_origins(a->acc, o->origins, o->norigins, err) != MS_OK ||
        load_tokens(a, o->tokens_file, err) != MS_OK) {
        access_free(a->acc);
        free(a);
        return 1;
    }
    a->in_frames = (int)ceil(o->input_buffer_s * MS_FRAMES_PER_S);
    if (a->in_frames < 1) a->in_frames = 1;
    /* Output ring: the engine makes one output per input frame, so a client
     * ahead of real time (up to the input ring) can get that many at once,
     * plus what a real-time engine makes while the loop is held up. (Not
     * limits.output_queue_s: that judges what the socket has not taken, and
     * reload may change it.) */
    a->out_frames = a->in_frames + OUT_RING_STALL_FRAMES;
    if (uv_loop_init(&a->loop) != 0) {
        access_free(a->acc);
        free(a);
        ms_err_set(err, MS_ERR_IO, "cannot create the event loop");
        return 1;
    }
    met_reset();
    a->wd_usec = notify_watchdog_usec();
    notify_status("loading model %s", o->model.lm_dir ? o->model.lm_dir : "");
    notify_extend_timeout(NOTIFY_EXTEND_USEC);
    load_keepalive ka;
    load_keepalive_start(&ka);
    a->m = model_open(&o->model, err);
    load_keepalive_stop(&ka);
    if (!a->m) goto fail_loop;
    const lm_backend_stats *bst = model_open_stats(a->m);
    met_set_engine_info(model_backend_name(a->m), bst->weights_scheme, bst->kv_scheme);
    sched_model sm = model_sched(a->m);
    sched_config sc = {o->model.slots, a->in_frames, a->out_frames};
    if (!(a->sch = sched_create(&a->loop, &sc, &sm, on_output, a, err))) goto fail_model;
    met_set(MET_capacity, sched_capacity(a->sch));
    if (!(a->pers = pers_create(&a->loop, a->m, a->sch, &o->personas, err))) {
        sched_free(a->sch);
        uv_run(&a->loop, UV_RUN_DEFAULT);
        goto fail_model;
    }
    notify_status("priming personas");
    uv_timer_init(&a->loop, &a->tick);
    a->tick.data = a;
    uv_timer_start(&a->tick, on_tick, 1000, 1000);
    if (a->wd_usec) {
        /* every half ping period, so that a ping goes out at least once
         * per period while the engine is healthy */
        uint64_t every_ms = a->wd_usec / 2000;
        uv_timer_init(&a->loop, &a->wd_tick);
        a->wd_tick.data = a;
        uv_timer_start(&a->wd_tick, on_wd_tick, 0, every_ms ? every_ms : 1);
    }
    uv_signal_init(&a->loop, &a->sig_term);
    uv_signal_init(&a->loop, &a->sig_int);
    uv_signal_init(&a->loop, &a->sig_hup);
    a->sig_term.data = a->sig_int.data = a->sig_hup.data = a;
    uv_signal_start(&a->sig_term, on_stop, SIGTERM);
    uv_signal_start(&a->sig_int, on_stop, SIGINT);
    uv_signal_start(&a->sig_hup, on_hup, SIGHUP);
    signal(SIGPIPE, SIG_IGN);

    /* The configured personas first: the daemon listens (and /healthz,
     * the "serving on" line say ready) once they are primed. */
    pers_start(a->pers, &o->personas, personas_ready, a);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    met_set(MET_ready, 0);
    int lc = uv_loop_close(&a->loop);
    if (lc != 0) LOGW("loop_close", "rc=%d msg=\"handles left open\"", lc);
    pers_free(a->pers);
    model_close(a->m);
    int status = a->exit_status ? a->exit_status : (lc == 0 ? 0 : 3);
    if (status == 1 && err) *err = a->start_err;
    access_free(a->acc);
    free(a);
    LOGI("exit", "status=%d", status);
    return status;
fail_model:
    model_close(a->m);
fail_loop:
    notify_status("start-up failed: %s", err ? err->msg : "");
    uv_loop_close(&a->loop);
    access_free(a->acc);
    free(a);
    return 1;
}
