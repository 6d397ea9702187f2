/* rt.c - the /v1/realtime dialect of a session (rt.h): client events in,
 * the session's settings, input audio, and the events of the model's
 * responses out. Loop thread.
 */
#include "rt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_int.h"
#include "b64.h"
#include "jw.h"
#include "log.h"
#include "metrics.h"
#include "rt_audio.h"
#include "rt_event.h"

/* WebSocket close statuses (as sess.c's). */
#define RT_WS_POLICY 1008
#define RT_WS_INTERNAL 1011
/* Ids the server makes: "resp_<session>_<n>", bytes. */
#define RT_MADE_ID_MAX 48
/* Energy VAD (turn_detection): the window, and the RMS threshold as a
 * function of the client's threshold t in [0, 1]: -60 dBFS + 45 dB * t
 * (0.5 -> -37.5 dBFS). */
#define RT_VAD_WINDOW_SAMPLES MS_FRAME_SAMPLES
#define RT_VAD_DEFAULT_THRESHOLD 0.5
#define RT_VAD_DEFAULT_PREFIX_MS 300
#define RT_VAD_DEFAULT_SILENCE_MS 500
/* The OpenAI voices: accepted, reported, no effect (the model's own voice,
 * or the persona's, speaks). */
static const char *const stock_voices[] = {"alloy", "ash", "ballad", "coral", "echo", "sage",
                                           "shimmer", "verse", "marin", "cedar", NULL};

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

static rt *R(sess *s) { return s->dx; }

/* ---- sending ---------------------------------------------------------- */

/* Open an event: {"type":type,"event_id":"..." and the caller continues
 * with ",..." members; rt_send closes and queues it. */
static void ev_begin(sess *s, jw *w, const char *type) {
    rt *r = R(s);
    jw_init(w, RT_EVENT_OUT_MAX);
    jw_fmt(w, "{\"type\":\"%s\",\"event_id\":\"event_%llx_%llu\"", type, (unsigned long long)s->id,
           (unsigned long long)++r->seq);
}

static void ev_send(sess *s, jw *w, int audio_frames) {
    JW_LIT(w, "}");
    size_t n = 0;
    char *b = jw_take(w, &n);
    if (!b) {
        LOGW("realtime_event_dropped", "id=%llu msg=\"an event over %u bytes or out of memory\"",
             (unsigned long long)s->id, RT_EVENT_OUT_MAX);
        return;
    }
    sess_send(s, b, n, 1, audio_frames);
    free(b);
}

static void make_id(sess *s, char out[RT_MADE_ID_MAX], const char *prefix) {
    snprintf(out, RT_MADE_ID_MAX, "%s_%llx_%llu", prefix, (unsigned long long)s->id, (unsigned long long)++R(s)->ids);
}

/* An error event (the documented shape). client_event_id: the event it
 * answers ("" or NULL: none). */
static void send_error(sess *s, const char *type, const char *code, const char *param, const char *msg,
                       const char *client_event_id) {
    jw w;
    met_error(MET_ERR_bad_event);
    LOGI("realtime_error", "id=%llu code=%s param=%s msg=\"%s\"", (unsigned long long)s->id, code,
         param && param[0] ? param : "-", msg);
    ev_begin(s, &w, "error");
    JW_LIT(&w, ",\"error\":{\"type\":");
    jw_cstr(&w, type);
    JW_LIT(&w, ",\"code\":");
    jw_cstr(&w, code);
    JW_LIT(&w, ",\"message\":");
    jw_cstr(&w, msg);
    JW_LIT(&w, ",\"param\":");
    jw_cstr(&w, param && param[0] ? param : NULL);
    JW_LIT(&w, ",\"event_id\":");
    jw_cstr(&w, client_event_id && client_event_id[0] ? client_event_id : NULL);
    JW_LIT(&w, "}");
    ev_send(s, &w, 0);
}

static void refuse(sess *s, const rt_event *ev, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void refuse(sess *s, const rt_event *ev, const char *code, const char *param, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    send_error(s, "invalid_request_error", code, param, msg, ev ? ev->event_id : NULL);
}

static void format_json(jw *w, rt_format f, int beta) {
    if (beta) {
        jw_cstr(w, rt_format_name(f));
        return;
    }
    if (f == RT_FMT_PCM16) jw_fmt(w, "{\"type\":\"audio/pcm\",\"rate\":%d}", rt_format_rate_hz(f));
    else jw_fmt(w, "{\"type\":\"%s\"}", rt_format_mime(f));
}

/* turn_detection as in force: the VAD's parameters; create_response and
 * interrupt_response false (the model, not the VAD, decides when to
 * speak). */
static void td_json(jw *w, const rt_turn_detection *td) {
    if (td->type == RT_TD_NONE) {
        JW_LIT(w, "null");
        return;
    }
    jw_fmt(w, "{\"type\":\"%s\"", rt_td_name(td->type));
    if (td->type == RT_TD_SERVER_VAD)
        jw_fmt(w, ",\"threshold\":%g,\"prefix_padding_ms\":%d,\"silence_duration_ms\":%d",
               td->threshold >= 0 ? td->threshold : RT_VAD_DEFAULT_THRESHOLD,
               td->prefix_padding_ms >= 0 ? td->prefix_padding_ms : RT_VAD_DEFAULT_PREFIX_MS,
               td->silence_duration_ms >= 0 ? td->silence_duration_ms : RT_VAD_DEFAULT_SILENCE_MS);
    else
        jw_fmt(w, ",\"eagerness\":\"%s\"", td->eagerness[0] ? td->eagerness : "auto");
    JW_LIT(w, ",\"create_response\":false,\"interrupt_response\":false}");
}

static void session_json(sess *s, jw *w) {
    rt *r = R(s);
    jw_fmt(w, "{\"object\":\"realtime.session\",\"id\":\"sess_%llx\",\"model\":", (unsigned long long)s->id);
    jw_cstr(w, r->model);
    JW_LIT(w, ",\"instructions\":");
    if (r->instructions && !r->instructions_ignored) jw_str(w, r->instructions, r->instructions_len);
    else JW_LIT(w, "\"\"");
    if (r->beta) {
        (r->text_only ? JW_LIT(w, ",\"modalities\":[\"text\"]") : JW_LIT(w, ",\"modalities\":[\"audio\",\"text\"]"));
        JW_LIT(w, ",\"voice\":");
        jw_cstr(w, r->voice);
        JW_LIT(w, ",\"input_audio_format\":");
        format_json(w, r->in_fmt, 1);
        JW_LIT(w, ",\"output_audio_format\":");
        format_json(w, r->out_fmt, 1);
        JW_LIT(w, ",\"input_audio_transcription\":null,\"turn_detection\":");
        td_json(w, &r->td);
        jw_fmt(w, ",\"tools\":[],\"tool_choice\":\"auto\",\"temperature\":%g,\"max_response_output_tokens\":\"inf\"}",
               r->temperature >= 0 ? r->temperature : (double)s->samp.audio_temp);
        return;
    }
    JW_LIT(w, ",\"type\":\"realtime\"");
    (r->text_only ? JW_LIT(w, ",\"output_modalities\":[\"text\"]") : JW_LIT(w, ",\"output_modalities\":[\"audio\"]"));
    JW_LIT(w, ",\"audio\":{\"input\":{\"format\":");
    format_json(w, r->in_fmt, 0);
    JW_LIT(w, ",\"transcription\":null,\"noise_reduction\":null,\"turn_detection\":");
    td_json(w, &r->td);
    JW_LIT(w, "},\"output\":{\"format\":");
    format_json(w, r->out_fmt, 0);
    JW_LIT(w, ",\"voice\":");
    jw_cstr(w, r->voice);
    JW_LIT(w, ",\"speed\":1.0}},\"tools\":[],\"tool_choice\":\"auto\",\"max_output_tokens\":\"inf\"}");
}

static void send_session(sess *s, const char *type) {
    jw w;
    ev_begin(s, &w, type);
    JW_LIT(&w, ",\"session\":");
    session_json(s, &w);
    ev_send(s, &w, 0);
}

/* ---- responses ---------------------------------------------------------- */

/* The assistant message item of the open response. final: with its
 * transcript, status completed or incomplete. */
static void item_json(sess *s, jw *w, const char *status, int final) {
    rt *r = R(s);
    JW_LIT(w, "{\"id\":");
    jw_cstr(w, r->item_id);
    jw_fmt(w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"%s\",\"content\":[",
           status);
    if (final) {
        const char *t = r->transcript.buf ? r->transcript.buf : "";
        if (r->text_only) JW_LIT(w, "{\"type\":\"text\",\"text\":");
        else if (r->beta) JW_LIT(w, "{\"type\":\"audio\",\"transcript\":");
        else JW_LIT(w, "{\"type\":\"output_audio\",\"transcript\":");
        jw_str(w, t, r->transcript.len);
        JW_LIT(w, "}");
    }
    JW_LIT(w, "]}");
}

/* The ids every content event carries. */
static void part_ids(sess *s, jw *w) {
    rt *r = R(s);
    JW_LIT(w, ",\"response_id\":");
    jw_cstr(w, r->resp_id);
    JW_LIT(w, ",\"item_id\":");
    jw_cstr(w, r->item_id);
    JW_LIT(w, ",\"output_index\":0,\"content_index\":0");
}

static void response_json(sess *s, jw *w, const char *status, const char *details_type, const char *reason,
                          int with_output) {
    rt *r = R(s);
    JW_LIT(w, "{\"id\":");
    jw_cstr(w, r->resp_id);
    jw_fmt(w, ",\"object\":\"realtime.response\",\"status\":\"%s\",\"status_details\":", status);
    if (details_type) jw_fmt(w, "{\"type\":\"%s\",\"reason\":\"%s\"}", details_type, reason);
    else JW_LIT(w, "null");
    JW_LIT(w, ",\"output\":[");
    if (with_output) item_json(s, w, strcmp(status, "completed") == 0 ? "completed" : "incomplete", 1);
    jw_fmt(w, "],\"conversation_id\":\"conv_%llx\",\"%s\":[\"%s\"]", (unsigned long long)s->id,
           r->beta ? "modalities" : "output_modalities", r->text_only ? "text" : "audio");
    JW_LIT(w, ",\"usage\":null,\"metadata\":null}");
}

static void open_response(sess *s) {
    rt *r = R(s);
    jw w;
    make_id(s, r->resp_id, "resp");
    make_id(s, r->item_id, "item");
    r->resp = 1;
    r->resp_frames = 0;
    r->nutf8 = 0;
    jw_free(&r->transcript);
    jw_init(&r->transcript, RT_TRANSCRIPT_MAX);
    ev_begin(s, &w, "response.created");
    JW_LIT(&w, ",\"response\":");
    response_json(s, &w, "in_progress", NULL, NULL, 0);
    ev_send(s, &w, 0);
    ev_begin(s, &w, "response.output_item.added");
    JW_LIT(&w, ",\"response_id\":");
    jw_cstr(&w, r->resp_id);
    JW_LIT(&w, ",\"output_index\":0,\"item\":");
    item_json(s, &w, "in_progress", 0);
    ev_send(s, &w, 0);
    ev_begin(s, &w, r->beta ? "conversation.item.created" : "conversation.item.added");
    JW_LIT(&w, ",\"previous_item_id\":null,\"item\":");
    item_json(s, &w, "in_progress", 0);
    ev_send(s, &w, 0);
    ev_begin(s, &w, "response.content_part.added");
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"part\":{\"type\":\"text\",\"text\":\"\"}") : JW_LIT(&w, ",\"part\":{\"type\":\"audio\",\"transcript\":\"\"}"));
    ev_send(s, &w, 0);
}

/* Close the open response: status completed, cancelled or incomplete
 * (details: the status_details' type and reason, or NULL). */
static void close_response(sess *s, const char *status, const char *reason) {
    rt *r = R(s);
    if (!r->resp) return;
    jw w;
    const char *t = r->transcript.buf ? r->transcript.buf : "";
    size_t tl = r->transcript.len;
    if (!r->text_only) {
        ev_begin(s, &w, r->beta ? "response.audio.done" : "response.output_audio.done");
        part_ids(s, &w);
        ev_send(s, &w, 0);
    }
    ev_begin(s, &w, r->text_only ? (r->beta ? "response.text.done" : "response.output_text.done")
                                 : (r->beta ? "response.audio_transcript.done" : "response.output_audio_transcript.done"));
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"text\":") : JW_LIT(&w, ",\"transcript\":"));
    jw_str(&w, t, tl);
    ev_send(s, &w, 0);
    ev_begin(s, &w, "response.content_part.done");
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"part\":{\"type\":\"text\",\"text\":") : JW_LIT(&w, ",\"part\":{\"type\":\"audio\",\"transcript\":"));
    jw_str(&w, t, tl);
    JW_LIT(&w, "}");
    ev_send(s, &w, 0);
    const char *item_status = strcmp(status, "completed") == 0 ? "completed" : "incomplete";
    ev_begin(s, &w, "response.output_item.done");
    JW_LIT(&w, ",\"response_id\":");
    jw_cstr(&w, r->resp_id);
    JW_LIT(&w, ",\"output_index\":0,\"item\":");
    item_json(s, &w, item_status, 1);
    ev_send(s, &w, 0);
    if (!r->beta) {
        ev_begin(s, &w, "conversation.item.done");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":");
        item_json(s, &w, item_status, 1);
        ev_send(s, &w, 0);
    }
    ev_begin(s, &w, "response.done");
    JW_LIT(&w, ",\"response\":");
    response_json(s, &w, status, reason ? status : NULL, reason, 1);
    ev_send(s, &w, 0);
    r->resp = 0;
    jw_free(&r->transcript);
}

/* A text piece for the transcript: byte-fallback pieces ("<0xE2>") are
 * joined into whole UTF-8 characters first. Writes what is complete into
 * out (cap bytes), returns its length. */
static size_t piece_text(rt *r, const char *piece, char *out, size_t cap) {
    unsigned b;
    if (strlen(piece) == 6 && sscanf(piece, "<0x%2X>", &b) == 1) {
        if (r->nutf8 == (int)sizeof r->utf8) r->nutf8 = 0; /* never whole: dropped */
        r->utf8[r->nutf8++] = (uint8_t)b;
        size_t need = r->utf8[0] < 0x80 ? 1 : r->utf8[0] >= 0xf0 ? 4 : r->utf8[0] >= 0xe0 ? 3 : 2;
        if ((size_t)r->nutf8 < need) return 0;
        size_t n = (size_t)r->nutf8 < cap ? (size_t)r->nutf8 : cap;
        memcpy(out, r->utf8, n);
        r->nutf8 = 0;
        return n;
    }
    r->nutf8 = 0;
    size_t n = strlen(piece);
    if (n > cap) n = cap;
    memcpy(out, piece, n);
    return n;
}

/* One output frame: open, feed or close the response (rt.h). */
static void rt_frame(sess *s, const sched_out *o) {
    rt *r = R(s);
    const app_opts *ao = &s->a->o;
    const char *piece = o->text >= 0 ? model_piece(s->a->m, o->text) : NULL;
    int active = (piece && piece[0]) || (o->has_pcm && rt_rms(o->pcm, MS_FRAME_SAMPLES) >= RT_SPEAK_RMS);
    int silence_frames = (int)ceil((double)ao->realtime.response_silence_ms / MS_FRAME_MS);
    r->quiet = active ? 0 : r->quiet + 1;
    if (r->muted) { /* cancelled: silent until the model is */
        if (r->quiet >= silence_frames) r->muted = 0;
        return;
    }
    if (!r->resp) {
        if (!active) return; /* silence between responses is not sent */
        open_response(s);
    }
    jw w;
    if (o->has_pcm && !r->text_only) {
        uint8_t pcm[2 * MS_FRAME_SAMPLES];
        size_t n = rt_out_frame(&r->out, o->pcm, MS_FRAME_SAMPLES, pcm, sizeof pcm);
        char b64[((2 * MS_FRAME_SAMPLES + 2) / 3) * 4 + 1];
        if (n) {
            proto_b64_encode(pcm, n, b64);
            ev_begin(s, &w, r->beta ? "response.audio.delta" : "response.output_audio.delta");
            part_ids(s, &w);
            JW_LIT(&w, ",\"delta\":\"");
            jw_raw(&w, b64, proto_b64_encoded_len(n));
            JW_LIT(&w, "\"");
            ev_send(s, &w, 1);
        }
    }
    char text[64];
    size_t tn = piece && piece[0] ? piece_text(r, piece, text, sizeof text) : 0;
    if (tn) {
        jw_raw(&r->transcript, text, tn); /* raw text (escaped when sent); cut at RT_TRANSCRIPT_MAX */
        ev_begin(s, &w, r->text_only ? (r->beta ? "response.text.delta" : "response.output_text.delta")
                                     : (r->beta ? "response.audio_transcript.delta" : "response.output_audio_transcript.delta"));
        part_ids(s, &w);
        JW_LIT(&w, ",\"delta\":");
        jw_str(&w, text, tn);
        ev_send(s, &w, 0);
    }
    r->resp_frames++;
    if (r->quiet >= silence_frames) close_response(s, "completed", NULL);
    else if ((double)r->resp_frames * MS_FRAME_MS >= (double)ao->realtime.max_response_s * 1000.0)
        close_response(s, "incomplete", "max_output_tokens");
}

/* ---- input ---------------------------------------------------------------- */

static void user_item_events(sess *s, const char *item_id) {
    rt *r = R(s);
    jw w;
    ev_begin(s, &w, "input_audio_buffer.committed");
    JW_LIT(&w, ",\"previous_item_id\":null,\"item_id\":");
    jw_cstr(&w, item_id);
    ev_send(s, &w, 0);
    for (int done = 0; done <= !r->beta; done++) {
        ev_begin(s, &w, done ? "conversation.item.done" : r->beta ? "conversation.item.created" : "conversation.item.added");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":{\"id\":");
        jw_cstr(&w, item_id);
        JW_LIT(&w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"user\",\"status\":\"completed\","
                   "\"content\":[{\"type\":\"input_audio\",\"transcript\":null}]}");
        ev_send(s, &w, 0);
    }
}

/* The energy VAD of turn_detection over 24 kHz input: speech_started at
 * the first loud window (back-dated by prefix_padding_ms), speech_stopped
 * and a committed user item after silence_duration_ms of quiet. */
static void vad(sess *s, const float *pcm, size_t n) {
    rt *r = R(s);
    if (r->td.type == RT_TD_NONE) return;
    double t = r->td.threshold >= 0 ? r->td.threshold : RT_VAD_DEFAULT_THRESHOLD;
    double thr = pow(10.0, (-60.0 + 45.0 * t) / 20.0);
    int silence_ms = r->td.silence_duration_ms >= 0 ? r->td.silence_duration_ms : RT_VAD_DEFAULT_SILENCE_MS;
    int prefix_ms = r->td.prefix_padding_ms >= 0 ? r->td.prefix_padding_ms : RT_VAD_DEFAULT_PREFIX_MS;
    for (size_t i = 0; i < n; i++) {
        r->vad_acc += (double)pcm[i] * pcm[i];
        if (++r->vad_n < RT_VAD_WINDOW_SAMPLES) continue;
        int loud = sqrt(r->vad_acc / (double)r->vad_n) >= thr;
        r->vad_acc = 0;
        r->vad_n = 0;
        /* the window's end on the input clock, ms */
        double end_ms = (double)(r->fed + i + 1) * 1000.0 / MS_SAMPLE_RATE_HZ;
        jw w;
        if (loud && !r->speaking) {
            r->speaking = 1;
            make_id(s, r->speech_item, "item");
            double start = end_ms - MS_FRAME_MS - prefix_ms;
            ev_begin(s, &w, "input_audio_buffer.speech_started");
            jw_fmt(&w, ",\"audio_start_ms\":%lld,\"item_id\":", (long long)(start > 0 ? start : 0));
            jw_cstr(&w, r->speech_item);
            ev_send(s, &w, 0);
        }
        if (loud) {
            r->vad_quiet_ms = 0;
        } else if (r->speaking && (r->vad_quiet_ms += (int)MS_FRAME_MS) >= silence_ms) {
            r->speaking = 0;
            ev_begin(s, &w, "input_audio_buffer.speech_stopped");
            jw_fmt(&w, ",\"audio_end_ms\":%lld,\"item_id\":", (long long)end_ms);
            jw_cstr(&w, r->speech_item);
            ev_send(s, &w, 0);
            user_item_events(s, r->speech_item);
            r->uncommitted = 0;
        }
    }
}

static int pcm_sink(void *user, const float *pcm, size_t n) {
    sess *s = user;
    vad(s, pcm, n);
    R(s)->fed += n;
    return sess_feed_pcm(s, pcm, n);
}

/* Base64 audio of an append (or an input_audio item) into the model.
 * MS_OK, or an error after an error event (or sess_fail). */
static int feed_b64(sess *s, const rt_event *ev, const char *b64, size_t len, const char *param) {
    rt *r = R(s);
    const app_opts *ao = &s->a->o;
    size_t max = (size_t)ao->realtime.max_append_bytes;
    if (len / 4 * 3 > max + 2) {
        refuse(s, ev, "audio_too_large", param,
               "%s: %zu bytes of audio in one event, more than realtime.max_append_bytes = %zu; send smaller chunks",
               param, len / 4 * 3, max);
        return MS_ERR_LIMIT;
    }
    uint8_t *buf = malloc(proto_b64_decoded_max(len));
    if (!buf) {
        send_error(s, "server_error", "server_error", param, "out of memory", ev->event_id);
        return MS_ERR_NOMEM;
    }
    size_t bad = 0;
    long n = proto_b64_decode(b64, len, buf, proto_b64_decoded_max(len), &bad);
    if (n < 0) {
        free(buf);
        refuse(s, ev, "invalid_base64", param, "%s is not base64 (RFC 4648, padded): bad character or length at offset %zu",
               param, bad);
        return MS_ERR_FORMAT;
    }
    if (!s->begun) sess_start(s);
    if (!s->close_status) {
        r->uncommitted += (uint64_t)n;
        rt_in_feed(&r->in, buf, (size_t)n, pcm_sink, s);   /* a breach of the input limits fails s */
    }
    free(buf);
    return s->close_status ? MS_ERR_STATE : MS_OK;
}

/* A voice: a configured persona (by name), a voice file of the voice
 * directory (a name with an extension), or an OpenAI voice name (no
 * effect). Sets the query fields the persona manager reads. */
static int apply_voice(sess *s, const rt_event *ev, const char *voice, const char *param) {
    for (int i = 0; stock_voices[i]; i++)
        if (strcmp(voice, stock_voices[i]) == 0) return MS_OK;
    ms_error e = {0};
    const char *key = strchr(voice, '.') ? "voice_prompt" : "persona";
    if (proto_query_set(&s->q, key, strlen(key), voice, strlen(voice), &e) != MS_OK) {
        refuse(s, ev, "invalid_value", param, "%s: %s", param, e.msg);
        return MS_ERR_ARG;
    }
    return MS_OK;
}

/* session.update (and the instructions of a system item): before the
 * session starts everything applies; after, formats, turn detection and
 * modalities do, and a change of voice or instructions is refused (the
 * persona is primed into the model's context at the start). */
static void session_update(sess *s, const rt_event *ev) {
    rt *r = R(s);
    const rt_session_cfg *c = &ev->cfg;
    ms_error e = {0};
    if (s->begun) {
        if ((c->set & RT_SET_VOICE) && strcmp(c->voice, r->voice) != 0) {
            refuse(s, ev, "session_update_unsupported", "session.voice",
                   "the voice is fixed once the session has started (its first audio or update); set it in the first "
                   "session.update");
            return;
        }
        if ((c->set & RT_SET_INSTRUCTIONS) &&
            (c->instructions_len != r->instructions_len ||
             (c->instructions_len && memcmp(c->instructions, r->instructions, c->instructions_len)))) {
            refuse(s, ev, "session_update_unsupported", "session.instructions",
                   "the instructions are primed into the model at the start; set them in the first session.update");
            return;
        }
    }
    if (c->set & RT_SET_MODEL) {
        /* any model name is accepted: the served model answers */
        snprintf(r->model, sizeof r->model, "%s", c->model);
    }
    if (!s->begun && (c->set & RT_SET_VOICE)) {
        if (apply_voice(s, ev, c->voice, "session.voice") != MS_OK) return;
        snprintf(r->voice, sizeof r->voice, "%s", c->voice);
    }
    if (!s->begun && (c->set & RT_SET_INSTRUCTIONS) && c->instructions_len) {
        r->instructions_ignored = model_prime_slots(s->a->m) == 0;
        if (r->instructions_ignored) {
            refuse(s, ev, "instructions_unsupported", "session.instructions",
                   "this model (%s) takes no text prompt: the instructions are ignored", model_variant_name(s->a->m));
        } else if ((s->q.present &= ~(1u << PROTO_Q_TEXT_PROMPT)),
                   proto_query_set(&s->q, "text_prompt", 11, c->instructions, c->instructions_len, &e) != MS_OK) {
            refuse(s, ev, "invalid_value", "session.instructions", "session.instructions: %s", e.msg);
            return;
        }
        /* kept (also when ignored) so that a later update with the same
         * text is no change */
        char *t = malloc(c->instructions_len + 1);
        if (t) {
            memcpy(t, c->instructions, c->instructions_len);
            t[c->instructions_len] = '\0';
            free(r->instructions);
            r->instructions = t;
            r->instructions_len = c->instructions_len;
        }
    }
    if ((c->set & RT_SET_IN_FMT) && c->in_fmt != r->in_fmt) {
        if (rt_in_init(&r->in, c->in_fmt, &e) != MS_OK) {
            sess_fail(s, MET_ERR_internal, RT_WS_INTERNAL, "internal error: %s", e.msg);
            return;
        }
        r->in_fmt = c->in_fmt;
    }
    if ((c->set & RT_SET_OUT_FMT) && c->out_fmt != r->out_fmt) {
        if (rt_out_init(&r->out, c->out_fmt, &e) != MS_OK) {
            sess_fail(s, MET_ERR_internal, RT_WS_INTERNAL, "internal error: %s", e.msg);
            return;
        }
        r->out_fmt = c->out_fmt;
    }
    if (c->set & RT_SET_TURN_DETECTION) {
        r->td = c->td;
        r->speaking = 0;
        r->vad_quiet_ms = 0;
    }
    if (c->set & RT_SET_MODALITIES) r->text_only = c->text_only;
    if (c->set & RT_SET_TEMPERATURE) {
        /* beta temperature: the audio temperature, before the start */
        if (!s->begun) {
            r->temperature = c->temperature;
            char v[32];
            snprintf(v, sizeof v, "%g", c->temperature);
            if (proto_query_set(&s->q, "audio_temperature", 17, v, strlen(v), &e) != MS_OK)
                refuse(s, ev, "invalid_value", "session.temperature", "session.temperature: %s", e.msg);
        }
    }
    sess_start(s);
    if (!s->close_status) send_session(s, "session.updated");
}

static void item_create(sess *s, const rt_event *ev) {
    rt *r = R(s);
    switch (ev->item_kind) {
    case RT_ITEM_SYSTEM_TEXT: {
        if (s->begun) {
            refuse(s, ev, "session_update_unsupported", "item",
                   "a system message becomes the instructions, which are primed at the start: send it before the "
                   "first audio");
            return;
        }
        /* appended to the instructions, as a session.update would set them */
        size_t n = r->instructions_len + (r->instructions_len ? 1 : 0) + ev->text_len;
        if (n > RT_INSTRUCTIONS_MAX) {
            refuse(s, ev, "string_above_max_length", "item", "the instructions would exceed %d bytes", RT_INSTRUCTIONS_MAX);
            return;
        }
        char *t = malloc(n + 1);
        if (!t) return;
        size_t o = 0;
        if (r->instructions_len) {
            memcpy(t, r->instructions, r->instructions_len);
            t[r->instructions_len] = '\n';
            o = r->instructions_len + 1;
        }
        memcpy(t + o, ev->text, ev->text_len);
        t[n] = '\0';
        if (model_prime_slots(s->a->m) == 0) {
            refuse(s, ev, "instructions_unsupported", "item",
                   "this model (%s) takes no text prompt: the system message is ignored", model_variant_name(s->a->m));
            free(t);
            return;
        }
        ms_error e = {0};
        s->q.present &= ~(1u << PROTO_Q_TEXT_PROMPT); /* replaced by the joined text */
        if (proto_query_set(&s->q, "text_prompt", 11, t, n, &e) != MS_OK) {
            refuse(s, ev, "invalid_value", "item", "%s", e.msg);
            free(t);
            return;
        }
        free(r->instructions);
        r->instructions = t;
        r->instructions_len = n;
        break;
    }
    case RT_ITEM_USER_AUDIO:
        if (feed_b64(s, ev, ev->audio, ev->audio_len, "item.content.audio") != MS_OK) return;
        break;
    case RT_ITEM_USER_TEXT:
        refuse(s, ev, "text_input_unsupported", "item.content",
               "the model hears audio only: text items cannot be fed (speak it, or send it as input_audio)");
        return;
    default:
        refuse(s, ev, "item_type_unsupported", "item.type",
               "conversation items of type \"%s\" are not supported (messages: system text before the start, user "
               "audio)", ev->item_type[0] ? ev->item_type : "?");
        return;
    }
    char id[RT_MADE_ID_MAX];
    if (ev->id[0]) snprintf(id, sizeof id, "%s", ev->id);
    else make_id(s, id, "item");
    jw w;
    for (int done = 0; done <= !r->beta; done++) {
        ev_begin(s, &w, done ? "conversation.item.done" : r->beta ? "conversation.item.created" : "conversation.item.added");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":{\"id\":");
        jw_cstr(&w, id);
        jw_fmt(&w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"%s\",\"status\":\"completed\","
                   "\"content\":[]}", ev->item_kind == RT_ITEM_SYSTEM_TEXT ? "system" : "user");
        ev_send(s, &w, 0);
    }
}

/* ---- events in ------------------------------------------------------------ */

/* realtime.max_events_per_s: 1 when the event may pass, else the session
 * fails (1008). */
static int rate_ok(sess *s) {
    rt *r = R(s);
    double rate = (double)s->a->o.realtime.max_events_per_s, now = app_now_ms();
    if (rate <= 0) return 1;
    r->tokens += (now - r->tok_ms) / 1000.0 * rate;
    if (r->tokens > 2 * rate) r->tokens = 2 * rate;
    r->tok_ms = now;
    if (r->tokens >= 1) {
        r->tokens -= 1;
        return 1;
    }
    sess_fail(s, MET_ERR_input_overrun, RT_WS_POLICY, "event flood: more than %g client events per second "
              "(realtime.max_events_per_s)", rate);
    return 0;
}

static void rt_message(sess *s, const uint8_t *data, size_t len) {
    rt *r = R(s);
    if (!rate_ok(s)) return;
    rt_event ev;
    rt_err err;
    if (rt_event_parse((const char *)data, len, &ev, &err) != MS_OK) {
        send_error(s, err.type, err.code, err.param, err.message, ev.event_id);
        rt_event_free(&ev);
        return;
    }
    jw w;
    switch (ev.type) {
    case RT_EV_SESSION_UPDATE: session_update(s, &ev); break;
    case RT_EV_APPEND: feed_b64(s, &ev, ev.audio, ev.audio_len, "audio"); break;
    case RT_EV_COMMIT:
        if (!r->uncommitted) {
            refuse(s, &ev, "input_audio_buffer_commit_empty", NULL,
                   "no audio appended since the last commit (the model hears the audio as it arrives)");
            break;
        }
        {
            char id[RT_MADE_ID_MAX];
            make_id(s, id, "item");
            user_item_events(s, id);
        }
        r->uncommitted = 0;
        break;
    case RT_EV_CLEAR:
        /* the model has heard it already: nothing to take back */
        r->uncommitted = 0;
        ev_begin(s, &w, "input_audio_buffer.cleared");
        ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_CREATE: item_create(s, &ev); break;
    case RT_EV_ITEM_TRUNCATE:
        /* the client cut its playback; the model heard the overlap itself */
        ev_begin(s, &w, "conversation.item.truncated");
        JW_LIT(&w, ",\"item_id\":");
        jw_cstr(&w, ev.id);
        jw_fmt(&w, ",\"content_index\":%d,\"audio_end_ms\":%lld", ev.content_index, (long long)ev.audio_end_ms);
        ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_DELETE:
        ev_begin(s, &w, "conversation.item.deleted");
        JW_LIT(&w, ",\"item_id\":");
        jw_cstr(&w, ev.id);
        ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_RETRIEVE:
        refuse(s, &ev, "item_retrieve_unsupported", "item_id",
               "items are not kept: the conversation lives in the model's context");
        break;
    case RT_EV_RESPONSE_CREATE:
        if (r->resp) {
            refuse(s, &ev, "conversation_already_has_active_response", NULL,
                   "a response is in progress (%s); the model speaks when it wants", r->resp_id);
            break;
        }
        if (ev.cfg.set & RT_SET_MODALITIES) r->text_only = ev.cfg.text_only;
        if (!s->begun) sess_start(s);
        if (!s->close_status) {
            r->muted = 0;
            r->quiet = 0;
            open_response(s);   /* closed by the same rule: the model's silence */
        }
        break;
    case RT_EV_RESPONSE_CANCEL:
        if (!r->resp || (ev.id[0] && strcmp(ev.id, r->resp_id) != 0)) {
            refuse(s, &ev, "response_cancel_not_active", "response_id", "no active response%s%s to cancel",
                   ev.id[0] ? " " : "", ev.id);
            break;
        }
        close_response(s, "cancelled", "client_cancelled");
        r->muted = 1;
        break;
    case RT_EV_OUTPUT_CLEAR:
        ev_begin(s, &w, "output_audio_buffer.cleared");
        JW_LIT(&w, ",\"response_id\":");
        jw_cstr(&w, r->resp ? r->resp_id : NULL);
        ev_send(s, &w, 0);
        if (r->resp) close_response(s, "cancelled", "client_cancelled");
        r->muted = 1;
        break;
    case RT_EV_TRANSCRIPTION_UPDATE:
        refuse(s, &ev, "unsupported_event", "type", "transcription sessions are not offered");
        break;
    default: break;
    }
    rt_event_free(&ev);
}

/* ---- the dialect ---------------------------------------------------------- */

static int rt_open(sess *s, const char *const *args, int nargs) {
    rt *r = calloc(1, sizeof *r);
    if (!r) {
        sess_fail(s, MET_ERR_internal, RT_WS_INTERNAL, "internal error: out of memory");
        return MS_ERR_NOMEM;
    }
    s->dx = r;
    char beta[64];
    r->beta = srv_conn_header(s->c, "openai-beta:", beta, sizeof beta) == 0 && strstr(beta, "realtime=v1") != NULL;
    snprintf(r->model, sizeof r->model, "%s", model_variant_name(s->a->m));
    for (int i = 0; i < nargs; i++)
        if (strncmp(args[i], "model=", 6) == 0 && args[i][6]) snprintf(r->model, sizeof r->model, "%s", args[i] + 6);
    snprintf(r->voice, sizeof r->voice, "%s",
             s->q.persona[0] ? s->q.persona : s->q.voice_prompt[0] ? s->q.voice_prompt : "default");
    r->temperature = -1;
    r->td.type = RT_TD_NONE;
    r->tok_ms = app_now_ms();
    r->tokens = 2.0 * (double)s->a->o.realtime.max_events_per_s;
    ms_error e = {0};
    if (rt_in_init(&r->in, RT_FMT_PCM16, &e) != MS_OK || rt_out_init(&r->out, RT_FMT_PCM16, &e) != MS_OK) {
        sess_fail(s, MET_ERR_internal, RT_WS_INTERNAL, "internal error: %s", e.msg);
        return MS_ERR_NOMEM;
    }
    LOGI("realtime_open", "id=%llu dialect=%s model=\"%s\"", (unsigned long long)s->id, r->beta ? "beta" : "ga",
         r->model);
    send_session(s, "session.created");
    return MS_OK;
}

static void rt_ready(sess *s) { (void)s; /* session.created / updated went out already */ }

static void rt_fail(sess *s, int status, const char *text) {
    const char *code = status == 1009 ? "message_too_large" : status == 1013 ? "server_busy"
                     : status == 1001 ? "server_shutting_down" : status == 1011 ? "internal_error"
                     : status == 1000 ? "session_ended" : "policy_violation";
    int server = status == 1011 || status == 1013 || status == 1001;
    if (s->dx) send_error(s, server ? "server_error" : "invalid_request_error", code, NULL, text, NULL);
}

static void rt_closed(sess *s) {
    rt *r = R(s);
    if (!r) return;
    rt_in_close(&r->in);
    rt_out_close(&r->out);
    jw_free(&r->transcript);
    free(r->instructions);
    free(r);
    s->dx = NULL;
}

const sess_dialect rt_dialect = {
    .name = "realtime",
    .open = rt_open,
    .message = rt_message,
    .ready = rt_ready,
    .frame = rt_frame,
    .fail = rt_fail,
    .closed = rt_closed,
};
