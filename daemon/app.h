/* app.h - the moshid application: the libuv loop, the HTTP/WebSocket
 * front end, sessions, the engine thread and the model, wired together.
 * main.c fills a app_opts from the configuration and calls app_run.
 */
#ifndef MOSHID_SERVER_H
#define MOSHID_SERVER_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "persona.h"
#include "srv.h"

typedef struct app_opts {
    srv_config srv;            /* listen address, port, TLS, static files, limits */
    model_opts model;          /* model files, backend, slots */
    double text_temperature, audio_temperature;   /* defaults when the client sends none */
    int text_topk, audio_topk;
    double input_buffer_s;     /* queued input audio per session (>= 3 s accepts opusenc's 1 s pages) */
    double output_queue_s;     /* unsent output audio before a slow client is closed */
    double idle_timeout_s;     /* no audio from the client for this long closes it */
    int64_t close_timeout_s;   /* a close the server decides: connection dropped after this long (0 = never) */
    int64_t max_steps;         /* frames per session; 0 = no limit */
    struct {                   /* /v1/realtime (the realtime.* options) */
        int64_t max_append_bytes, max_events_per_s, response_silence_ms, max_response_s;
    } realtime;
    int input_pre_skip;        /* audio_pre_skip for client audio */
    int metrics;               /* serve /metrics */
    const char *tokens_file;   /* auth.tokens_file, "" = no authentication (access.h) */
    int protect_http;          /* auth.protect_http: /metrics and /api/personas need a token */
    const char *const *origins;    /* server.allowed_origins (borrowed from the configuration) */
    int norigins;
    pers_opts personas;        /* personas (pointers borrowed from the configuration:
                                  read by app_run and by reload only) */
    const char *build;         /* version string for metadata */
    const char *instance;      /* name for metadata (host name) */
} app_opts;

/* app_reload_fn: re-read the configuration (SIGHUP) into *o; return
 * MS_OK or an error (then nothing changes). Loop thread. */
typedef int (*app_reload_fn)(void *ud, app_opts *o, ms_error *err);

/* app_run: open the model, listen, serve until SIGTERM/SIGINT, shut down
 * cleanly. Returns the process exit status: 0 after a clean shutdown, 1 when
 * start-up failed (err set), 3 when the loop did not close cleanly, 4 after a fatal
 * engine error. */
int app_run(const app_opts *o, app_reload_fn reload, void *reload_ud, ms_error *err);

#endif
