/* rt_int.h - what the two files of the /v1/realtime dialect share: a
 * session's realtime state, and the events rt_out.c writes for rt.c.
 * Internal to daemon/session. Loop thread. */
#ifndef MOSHID_RT_INT_H
#define MOSHID_RT_INT_H

#include <stdint.h>

#include "jw.h"
#include "rt.h"
#include "rt_audio.h"
#include "frame.h"
#include "rt_event.h"
#include "sess.h"

/* Ids the server makes: "resp_<session>_<n>", bytes. */
#define RT_MADE_ID_MAX 48
/* Energy VAD (turn_detection): the window, and the RMS threshold as a
 * function of the client's threshold t in [0, 1]: -60 dBFS + 45 dB * t
 * (0.5 -> -37.5 dBFS). */
#define RT_VAD_WINDOW_SAMPLES MS_FRAME_SAMPLES
#define RT_VAD_DEFAULT_THRESHOLD 0.5
#define RT_VAD_DEFAULT_PREFIX_MS 300
#define RT_VAD_DEFAULT_SILENCE_MS 500

typedef struct rt {
    int beta;                  /* OpenAI-Beta: realtime=v1: the beta names and session shape */
    char model[RT_NAME_MAX + 1];
    char voice[RT_NAME_MAX + 1];
    char *instructions;        /* malloc'd, "" when none */
    size_t instructions_len;
    rt_format in_fmt, out_fmt;
    rt_turn_detection td;
    int text_only;
    double temperature;        /* beta; < 0: none given */
    rt_in in;
    rt_out out;
    uint64_t seq, ids;         /* server event ids, made ids */
    /* the response being spoken */
    int resp;
    char resp_id[RT_MADE_ID_MAX], item_id[RT_MADE_ID_MAX];
    uint64_t resp_frames;
    int quiet;                 /* frames of silence in a row */
    int muted;                 /* response.cancel: output dropped until the model's silence */
    jw transcript;             /* this response's, up to RT_TRANSCRIPT_MAX */
    uint8_t utf8[4];           /* bytes of byte-fallback pieces not yet a whole character */
    int nutf8;
    /* input */
    uint64_t uncommitted;      /* bytes appended since the last commit or clear */
    uint64_t fed;              /* 24 kHz samples handed to the model (the input clock) */
    int instructions_ignored;  /* the model takes no text prompt: reported as "" */
    int speaking;              /* VAD */
    double vad_acc;
    size_t vad_n;
    int vad_quiet_ms;
    char speech_item[RT_MADE_ID_MAX];
    double tokens, tok_ms;     /* realtime.max_events_per_s */
} rt;

static inline rt *R(sess *s) { return s->dx; }

/* ---- rt_out.c: server events ---- */

/* rt_ev_begin: start event `type` in w ({"type":..,"event_id":..); the
 * caller adds ",member" pieces, rt_ev_send closes and queues it (as a
 * text message; audio_frames for the slow-reader verdict). */
void rt_ev_begin(sess *s, jw *w, const char *type);
void rt_ev_send(sess *s, jw *w, int audio_frames);
/* rt_make_id: a new id "<prefix>_<session>_<n>" into out. */
void rt_make_id(sess *s, char out[RT_MADE_ID_MAX], const char *prefix);
/* rt_send_error: an error event (the documented shape); client_event_id
 * names the client event it answers (NULL or "": none). Not counted: the
 * callers count (a refused client event: moshid_errors_total{kind=
 * "bad_event"}, by rt_refuse; a close: sess_fail's kind). */
void rt_send_error(sess *s, const char *type, const char *code, const char *param, const char *msg,
                   const char *client_event_id);
/* rt_refuse: an invalid_request_error answering ev (NULL: none), counted
 * in moshid_errors_total{kind="bad_event"}. */
void rt_refuse(sess *s, const rt_event *ev, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* rt_send_session: session.created / session.updated with the session as
 * in force. */
void rt_send_session(sess *s, const char *type);
/* rt_open_response / rt_close_response: the response lifecycle (rt.h);
 * status completed, cancelled or incomplete, reason the status_details'
 * reason (NULL: none). */
void rt_open_response(sess *s);
void rt_close_response(sess *s, const char *status, const char *reason);
/* rt_frame: one output frame of the model (sess_dialect.frame). */
void rt_frame(sess *s, const sched_out *o);

#endif
