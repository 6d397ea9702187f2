/* sess.h - one client session on the loop thread: the protocol state
 * machine between the WebSocket (srv.h), the audio codecs (audio_opus.h)
 * and the engine thread (scheduler.h). The application it belongs to is
 * app_int.h. Internal to the daemon.
 */
#ifndef MOSHID_SESS_H
#define MOSHID_SESS_H

#include <stdint.h>
#include <uv.h>

#include "app.h"
#include "audio_opus.h"
#include "msg.h"
#include "persona.h"
#include "query.h"
#include "scheduler.h"
#include "srv.h"

/* Input audio that has waited this fraction of limits.input_buffer_s for
 * the engine means the engine is behind, not the client (sess.c: who is at
 * fault when the input buffer is full; the overload shedding). */
#define SESS_BEHIND_FRAC 0.5
/* A new session that finds every slot taken while a slot of a session
 * that just left is still being freed (the engine frees it within a step
 * or two) waits for it this long at most, instead of being refused as
 * busy: a client that reconnects at once gets the slot it gave back. */
#define SESS_SLOT_WAIT_MS 2000.0

/* Bytes a dialect's session may have queued and unsent (sess_send; audio
 * is judged by time, limits.output_queue_s, before this is reached): more
 * closes it as a slow reader. */
#define SESS_QUEUE_MAX_BYTES (8u << 20)

/* One queued outgoing message (srv_pre headroom, then the message). */
typedef struct sess_msg {
    struct sess_msg *next;
    size_t len;
    int audio_frames;          /* frames of audio it carries (0: not audio) */
    int text;                  /* a text message (a dialect's JSON), else binary */
    double enq_ms;             /* ms_mono_ms when queued (the slow-reader verdict) */
    uint8_t buf[];             /* srv_pre + len */
} sess_msg;

typedef struct app app;        /* app_int.h */
typedef struct sess sess;

/* A session protocol other than /api/chat's (the OpenAI Realtime view,
 * rt.h): what it does instead of the binary messages. The core (slot,
 * persona, limits, close) stays sess.c's. Every hook runs on the loop
 * thread; set by app.c (sess.c knows none by name). */
typedef struct sess_dialect {
    const char *name;          /* the endpoint's metrics label */
    /* open: the connection is up (the query parsed into s->q): set up
     * s->dx and greet; the session starts (sess_start) when the dialect
     * says. MS_OK, or an error after sess_fail. */
    int (*open)(sess *s, const char *const *args, int nargs);
    void (*message)(sess *s, const uint8_t *data, size_t len);
    /* ready: the engine took the session (instead of the handshake). */
    void (*ready)(sess *s);
    /* frame: one output frame (instead of Opus and text pieces). */
    void (*frame)(sess *s, const sched_out *o);
    /* fail: queue the error that sess_fail is closing with (text). */
    void (*fail)(sess *s, int status, const char *text);
    /* closed: free s->dx. */
    void (*closed)(sess *s);
} sess_dialect;

struct sess {
    app *a;
    const sess_dialect *d;     /* NULL: /api/chat */
    void *dx;                  /* the dialect's state */
    int begun;                 /* sess_start ran */
    int endpoint;              /* srv_endpoint (metrics) */
    srv_conn *c;
    struct sess *prev, *next;  /* app's list */
    uint64_t id;
    int slot;
    uint32_t gen;
    int attached, ready;       /* attached: holds an engine slot (until a close is decided) */
    int waiting;               /* waits for its persona's prime, or a slot being freed (no slot yet) */
    double slot_wait_ms;       /* != 0: waits since then for the slot of a session that just left */
    pers_ticket pt;            /* its persona (persona.h) */
    uint64_t token;            /* the access token it holds (access.h; 0: none), until token_held drops */
    int token_held;
    double last_ping_ms;       /* before the handshake: the last ping sent (ms_mono_ms) */
    int close_status;          /* != 0: close once the queue is flushed */
    char close_reason[PROTO_CLOSE_REASON_MAX + 1];  /* the error text, cut (proto_msg_close_reason) */
    proto_query q;
    lm_samp samp;              /* the session's sampling, resolved once (query over config) */
    int64_t max_steps;         /* frames; 0 = no limit */
    audio_dec *dec;
    audio_enc *enc;
    float acc[MS_FRAME_SAMPLES];  /* decoded input not yet a full frame */
    int acc_n;
    float *early;              /* (early_cap, 1920) frames received before READY */
    int early_n, early_cap;
    uint64_t early_dropped;    /* frames dropped while waiting for a prime (buffer full) */
    double early_t0_ms;        /* ms_mono_ms when the oldest early frame arrived */
    sess_msg *qhead, *qtail;   /* not yet handed to the socket, oldest first */
    size_t qbytes;             /* bytes queued there */
    int failing;               /* sess_fail is queueing the dialect's error */
    uint64_t steps;
    double last_rx_ms;
    double first_audio_ms;     /* when the first input frame completed (0: none yet) */
    uint64_t frames_in;        /* input frames completed */
    double open_ms;            /* ms_mono_ms when the connection opened */
    uint64_t frames_late;      /* output frames later than one frame period (as moshid_late_frames_total) */
};

/* Handlers for srv (sess.c). */
void *sess_open(void *ud, srv_conn *c, const char *const *args, int nargs);
/* sess_query_read: a session's query arguments ("name=value", nargs of
 * them; -1: over the query limits) into q, checked against the model and
 * limits.max_steps as sess_open checks them (sess_query_set_args, then
 * sess_query_finish). MS_OK, or an error whose message names the
 * parameter. Loop thread. */
int sess_query_read(app *a, const char *const *args, int nargs, proto_query *q, ms_error *e);

/* The pieces of a session's opening that depend on nothing but their
 * arguments (tests/check_sess.c):
 * sess_query_set_args: the query arguments (libwebsockets hands them
 * URL-decoded; nargs -1: over the query limits) into q, from its initial
 * state; each checked alone (proto_query_set).
 * sess_query_finish: q checked against the model's cards (lc) and the
 * session length: max_steps is limits.max_steps (0: none; past the
 * model's context the backend's K/V ring wraps, as in the official
 * server), which a query's max_steps may lower, never raise.
 * sess_max_steps: the session's length in frames (0: no limit) after
 * sess_query_finish. */
int sess_query_set_args(proto_query *q, const char *const *args, int nargs, ms_error *e);
int sess_query_finish(proto_query *q, const lm_config *lc, int64_t max_steps, ms_error *e);
int64_t sess_max_steps(const proto_query *q, int64_t max_steps);

/* sess_samp_resolve: the session's sampling: each parameter from the
 * query when given, else its persona's override (ov, < 0: none), else
 * the configuration's default (o); seeds as proto_query_*_seed resolve
 * them, random when neither is given. */
void sess_samp_resolve(const proto_query *q, const pers_samp *ov, const app_opts *o, lm_samp *out);

/* Longest metadata message text, bytes. */
#define SESS_METADATA_MAX 2048
/* sess_metadata_json: the JSON of s's metadata message (kind 6,
 * docs/protocol.md): the server, the model, the session's sampling and
 * length, the limits, its persona, and the flat fields the Kyutai web
 * client requires; variant and backend name the model's. Its length, or
 * -1 when it does not fit in len (no message is then sent). */
int sess_metadata_json(const app_opts *o, const char *variant, const char *backend, const lm_config *c,
                       const sess *s, char *json, size_t len);
void sess_message(void *ud, void *sp, const uint8_t *data, size_t len);
void sess_oversize(void *ud, void *sp, size_t len);
void sess_writable(void *ud, void *sp);
void sess_closed(void *ud, void *sp);
/* For dialects (sess_dialect). sess_start: the persona, the sampling and
 * an engine slot, from s->q (/api/chat does it at once; a dialect when it
 * has the session's settings). Once; nothing after a close is decided. */
void sess_start(sess *s);
/* sess_feed_pcm: n samples of 24 kHz input (counts as activity), cut into
 * frames for the engine under the same limits as /api/chat's audio
 * (sess_fail on a breach). MS_OK, or an error once the session fails or
 * when it holds no slot (not started, refused). */
int sess_feed_pcm(sess *s, const float *pcm, size_t n);
/* sess_send: queue one message of len bytes (copied): text (1) or binary;
 * audio_frames: the output frames it carries (the slow-reader verdict). */
int sess_send(sess *s, const void *data, size_t len, int text, int audio_frames);

/* sess_drain: take the engine's outputs for s (after the async signal). */
void sess_drain(sess *s);
/* sess_fail: decide to close: queue an error message, then close with
 * status once the queue is flushed. The engine slot is released at once
 * (the engine's later outputs for it are dropped) and the whole close gets
 * the hard deadline limits.close_timeout_s, after which the connection is
 * dropped. kind: a MET_ERR_* counter, or -1 for none. Once per session:
 * later calls do nothing. */
void sess_fail(sess *s, int kind, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* sess_slot_retry: sessions waiting for a slot being freed (oldest first)
 * try again, after the engine freed one (on_output) and once a second (its
 * deadline). */
void sess_slot_retry(app *a);
/* sess_tick: the once-a-second checks (slow reader; idle timeout once the
 * handshake is sent; before it, a ping every PERS_WAIT_PING_S to a session
 * that waits for its persona); now_ms from ms_mono_ms. */
void sess_tick(sess *s, double now_ms);
/* sess_shed_tick: the once-a-second overload check over all of a's
 * sessions (docs/operations.md, "Capacity and overload"): publishes the
 * largest input backlog (moshid_input_backlog_frames) and, while the
 * engine is behind real time (sched_overloaded) and some session's oldest
 * unstepped frame has waited SESS_BEHIND_FRAC of limits.input_buffer_s, closes
 * the newest session that waits for the engine ("server overloaded", 1013):
 * at most one a call, so the others can catch up. */
void sess_shed_tick(app *a, double now_ms);

#endif
