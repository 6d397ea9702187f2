/* app_int.h - the moshid application's state: the event loop, the options, the
 * model, the engine thread, the front end, the open sessions, the signals.
 * Created and torn down by app.c; the sessions (sess.c) read the options
 * and the model and keep their list in it. Internal to the daemon.
 *
 * Threading: the loop thread only (the engine thread sees the scheduler,
 * never the app).
 */
#ifndef MOSHID_APP_H
#define MOSHID_APP_H

#include <stdint.h>
#include <uv.h>

#include "app.h"
#include "clock.h"
#include "model.h"
#include "persona.h"
#include "scheduler.h"
#include "srv.h"

struct sess;

typedef struct app {
    uv_loop_t loop;
    app_opts o;             /* the options in force (reload updates the reloadable ones) */
    model *m;
    sched *sch;
    pers *pers;                /* personas: configured, on demand, the snapshot cache */
    struct access_ctl *acc;        /* origins and tokens (access.h) */
    srv *server;               /* NULL until the personas are primed, and once the front end is torn down */
    int listening;             /* srv_create was called (start-up is over) */
    int torn_down;             /* the engine and the handles are closed (or closing) */
    ms_error start_err;        /* why start-up failed (exit status 1) */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;           /* once a second; every 50 ms while stopping */
    const struct sess_dialect *dialect[SRV_EP__COUNT]; /* per endpoint: NULL (/api/chat's own) or rt.h's */
    struct sess *sessions;     /* every session whose connection is open */
    int nsessions;
    int nslot_wait;            /* sessions waiting for a slot being freed (sess.c) */
    uint64_t next_id;
    int stopping;
    double stop_started_ms;    /* ms_mono_ms of SIGTERM/SIGINT */
    int exit_status;
    int in_frames, out_frames; /* ring sizes per slot, frames */
    app_reload_fn reload;
    void *reload_ud;
    /* the service manager (notify.h) */
    char url[128];             /* "http://host:port/" once serving (STATUS= lines) */
    uint64_t wd_usec;          /* watchdog ping period asked for, us (0: none) */
    uv_timer_t wd_tick;        /* the watchdog check, every wd_usec / 2 (when wd_usec > 0) */
    uint64_t wd_progress;      /* sched_progress at the last ping */
    int status_ticks;          /* ticks since the last STATUS= refresh */
} app;

#endif
