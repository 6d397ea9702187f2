/* server.c - the moshid application: wiring, /healthz, /metrics, signals,
 * shutdown and reload. See server.h. Everything here runs on the loop
 * thread, except what the engine thread does inside the scheduler.
 */
#include "server.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "log.h"
#include "metrics.h"
#include "sess.h"

/* Frames per second of audio (80 ms frames). */
#define FRAMES_PER_S MS_FRAMES_PER_S
/* Output frames a slot's ring holds beyond its input ring: about 1 s
 * the loop thread may fall behind the engine. */
#define OUT_RING_STALL_FRAMES 12
/* Largest /metrics body, bytes. */
#define METRICS_MAX 65536
/* Longest wait for sessions to close at shutdown, ms. */
#define SHUTDOWN_GRACE_MS 2000

double app_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int http_get(void *ud, const char *path, srv_http_reply *r) {
    app *a = ud;
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
        char buf[1024];
        int n = snprintf(buf, sizeof buf,
                         "{\"ready\":%s,\"accepting\":%s,\"variant\":\"%s\",\"backend\":\"%s\",\"sessions\":%d,"
                         "\"capacity\":%d,\"free\":%d,\"overloaded\":%s,\"pipeline\":%s,"
                         "\"memory\":{\"where\":\"%s\",\"used_bytes\":%zu,\"free_bytes_at_start\":%zu},"
                         "\"personas\":{\"ready\":%lld,\"primes_running\":%lld,\"snapshots\":%lld,"
                         "\"snapshot_bytes\":%lld}}\n",
                         ready ? "true" : "false", ok ? "true" : "false", model_variant_name(a->m),
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
        LOGE("fatal", "msg=\"engine failed: %s\"", e.msg);
        a->exit_status = 4;
        for (sess *s = a->sessions; s; s = s->next)
            sess_fail(s, MET_ERR_internal, 1011, "internal error: the engine failed; the server restarts");
        raise(SIGTERM);
    }
    pers_drain(a->pers);   /* primes done: waiting sessions attach */
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
    double now = app_now_ms();
    for (sess *s = a->sessions, *n; s; s = n) {
        n = s->next;
        sess_tick(s, now);
    }
    if (!a->stopping && a->listening) sess_shed_tick(a, now);
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
    a->stop_started_ms = app_now_ms();
    LOGI("stopping", "signal=%d sessions=%d", sig, a->nsessions);
    for (sess *s = a->sessions; s; s = s->next) sess_fail(s, -1, 1001, "server is shutting down");
    uv_timer_set_repeat(&a->tick, 50);
    uv_timer_again(&a->tick);
}

static void on_hup(uv_signal_t *h, int sig) {
    (void)sig;
    app *a = h->data;
    if (!a->reload) { LOGW("reload", "msg=\"no configuration file to reload\""); return; }
    server_opts n = a->o;
    ms_error e = {0};
    if (a->reload(a->reload_ud, &n, &e) != MS_OK) {
        LOGW("reload_refused", "msg=\"%s\"", e.msg);
        return;
    }
    /* What can change without a restart: sampling defaults, session limits
     * applied to new sessions and to the checks of open ones, idle and
     * close timeouts. */
    a->o.text_temperature = n.text_temperature;
    a->o.text_topk = n.text_topk;
    a->o.audio_temperature = n.audio_temperature;
    a->o.audio_topk = n.audio_topk;
    a->o.output_queue_s = n.output_queue_s;
    a->o.idle_timeout_s = n.idle_timeout_s;
    a->o.close_timeout_s = n.close_timeout_s;
    a->o.max_steps = n.max_steps;
    a->o.input_pre_skip = n.input_pre_skip;
    a->o.metrics = n.metrics;
    a->o.personas = n.personas;   /* borrowed from the configuration reload just updated */
    pers_reload(a->pers, &n.personas);
    LOGI("reloaded", "log_level=%s", ms_log_level_name(ms_log_level));
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
        a->exit_status = 1;
        teardown(a);
        return;
    }
    static const srv_handlers h = {http_get, sess_open, sess_message, sess_oversize, sess_writable, sess_closed};
    if (!(a->server = srv_create(&a->loop, &a->o.srv, &h, a, &a->start_err))) {
        a->exit_status = 1;
        teardown(a);
        return;
    }
    met_set(MET_ready, 1);
    /* One line that tools (and `make run`) can read. */
    const server_opts *o = &a->o;
    const char *host = o->srv.listen && o->srv.listen[0] && strcmp(o->srv.listen, "0.0.0.0") ? o->srv.listen : "127.0.0.1";
    fprintf(stdout, "moshid: serving on %s://%s:%d/ (variant %s, backend %s, %d sessions)\n",
            o->srv.tls_cert && o->srv.tls_cert[0] ? "https" : "http", host, srv_port(a->server),
            model_variant_name(a->m), model_backend_name(a->m), o->model.slots);
    fflush(stdout);
}

int server_run(const server_opts *o, server_reload_fn reload, void *reload_ud, ms_error *err) {
    app *a = calloc(1, sizeof *a);
    if (!a) { ms_err_set(err, MS_ERR_NOMEM, "out of memory"); return 1; }
    a->o = *o;
    a->reload = reload;
    a->reload_ud = reload_ud;
    a->in_frames = (int)ceil(o->input_buffer_s * FRAMES_PER_S);
    if (a->in_frames < 1) a->in_frames = 1;
    /* Output ring: the engine makes one output per input frame, so a client
     * ahead of real time (up to the input ring) can get that many at once,
     * plus what a real-time engine makes while the loop is held up. (Not
     * limits.output_queue_s: that judges what the socket has not taken, and
     * reload may change it.) */
    a->out_frames = a->in_frames + OUT_RING_STALL_FRAMES;
    if (uv_loop_init(&a->loop) != 0) { free(a); ms_err_set(err, MS_ERR_IO, "cannot create the event loop"); return 1; }
    met_reset();
    if (!(a->m = model_open(&o->model, err))) goto fail_loop;
    sched_model sm = model_sched(a->m);
    sched_config sc = {o->model.slots, a->in_frames, a->out_frames};
    if (!(a->sch = sched_create(&a->loop, &sc, &sm, on_output, a, err))) goto fail_model;
    met_set(MET_capacity, sched_capacity(a->sch));
    if (!(a->pers = pers_create(&a->loop, a->m, a->sch, &o->personas, err))) {
        sched_free(a->sch);
        uv_run(&a->loop, UV_RUN_DEFAULT);
        goto fail_model;
    }
    uv_timer_init(&a->loop, &a->tick);
    a->tick.data = a;
    uv_timer_start(&a->tick, on_tick, 1000, 1000);
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
    free(a);
    LOGI("exit", "status=%d", status);
    return status;
fail_model:
    model_close(a->m);
fail_loop:
    uv_loop_close(&a->loop);
    free(a);
    return 1;
}
