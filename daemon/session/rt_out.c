/* rt_out.c - the server events of /v1/realtime (rt.h): the session
 * object, errors, and the responses made of the model's speech (opened,
 * fed with audio and transcript deltas, closed on its silence). Loop
 * thread.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_int.h"
#include "b64.h"
#include "log.h"
#include "metrics.h"
#include "rt_int.h"

/* ---- sending ---------------------------------------------------------- */

/* Open an event: {"type":type,"event_id":"..." and the caller continues
 * with ",..." members; rt_send closes and queues it. */
void rt_ev_begin(sess *s, jw *w, const char *type) {
    rt *r = R(s); /* NULL: the session failed before rt_open (its one error event) */
    jw_init(w, RT_EVENT_OUT_MAX);
    jw_fmt(w, "{\"type\":\"%s\",\"event_id\":\"event_%llx_%llu\"", type, (unsigned long long)s->id,
           (unsigned long long)(r ? ++r->seq : 0));
}

void rt_ev_send(sess *s, jw *w, int audio_frames) {
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

void rt_make_id(sess *s, char out[RT_MADE_ID_MAX], const char *prefix) {
    snprintf(out, RT_MADE_ID_MAX, "%s_%llx_%llu", prefix, (unsigned long long)s->id, (unsigned long long)++R(s)->ids);
}

/* An error event (the documented shape). client_event_id: the event it
 * answers ("" or NULL: none). */
void rt_send_error(sess *s, const char *type, const char *code, const char *param, const char *msg,
                       const char *client_event_id) {
    jw w;
    /* the message may quote the client (an unknown type): one log line,
     * printable ASCII, no quotes */
    char safe[160];
    size_t i = 0;
    for (; msg[i] && i + 1 < sizeof safe; i++)
        safe[i] = (unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] >= 0x7f || msg[i] == '"' || msg[i] == '\\' ? '?' : msg[i];
    safe[i] = '\0';
    LOGI("realtime_error", "id=%llu code=%s param=%s msg=\"%s\"", (unsigned long long)s->id, code,
         param && param[0] ? param : "-", safe);
    rt_ev_begin(s, &w, "error");
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
    rt_ev_send(s, &w, 0);
}

void rt_refuse(sess *s, const rt_event *ev, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void rt_refuse(sess *s, const rt_event *ev, const char *code, const char *param, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    met_error(MET_ERR_bad_event);
    rt_send_error(s, "invalid_request_error", code, param, msg, ev ? ev->event_id : NULL);
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

void rt_send_session(sess *s, const char *type) {
    jw w;
    rt_ev_begin(s, &w, type);
    JW_LIT(&w, ",\"session\":");
    session_json(s, &w);
    rt_ev_send(s, &w, 0);
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

void rt_open_response(sess *s) {
    rt *r = R(s);
    jw w;
    rt_make_id(s, r->resp_id, "resp");
    rt_make_id(s, r->item_id, "item");
    r->resp = 1;
    r->resp_frames = 0;
    r->nutf8 = 0;
    jw_free(&r->transcript);
    jw_init(&r->transcript, RT_TRANSCRIPT_MAX);
    rt_ev_begin(s, &w, "response.created");
    JW_LIT(&w, ",\"response\":");
    response_json(s, &w, "in_progress", NULL, NULL, 0);
    rt_ev_send(s, &w, 0);
    rt_ev_begin(s, &w, "response.output_item.added");
    JW_LIT(&w, ",\"response_id\":");
    jw_cstr(&w, r->resp_id);
    JW_LIT(&w, ",\"output_index\":0,\"item\":");
    item_json(s, &w, "in_progress", 0);
    rt_ev_send(s, &w, 0);
    rt_ev_begin(s, &w, r->beta ? "conversation.item.created" : "conversation.item.added");
    JW_LIT(&w, ",\"previous_item_id\":null,\"item\":");
    item_json(s, &w, "in_progress", 0);
    rt_ev_send(s, &w, 0);
    rt_ev_begin(s, &w, "response.content_part.added");
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"part\":{\"type\":\"text\",\"text\":\"\"}") : JW_LIT(&w, ",\"part\":{\"type\":\"audio\",\"transcript\":\"\"}"));
    rt_ev_send(s, &w, 0);
}

/* Close the open response: status completed, cancelled or incomplete
 * (details: the status_details' type and reason, or NULL). */
void rt_close_response(sess *s, const char *status, const char *reason) {
    rt *r = R(s);
    if (!r->resp) return;
    jw w;
    const char *t = r->transcript.buf ? r->transcript.buf : "";
    size_t tl = r->transcript.len;
    if (!r->text_only) {
        rt_ev_begin(s, &w, r->beta ? "response.audio.done" : "response.output_audio.done");
        part_ids(s, &w);
        rt_ev_send(s, &w, 0);
    }
    rt_ev_begin(s, &w, r->text_only ? (r->beta ? "response.text.done" : "response.output_text.done")
                                 : (r->beta ? "response.audio_transcript.done" : "response.output_audio_transcript.done"));
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"text\":") : JW_LIT(&w, ",\"transcript\":"));
    jw_str(&w, t, tl);
    rt_ev_send(s, &w, 0);
    rt_ev_begin(s, &w, "response.content_part.done");
    part_ids(s, &w);
    (r->text_only ? JW_LIT(&w, ",\"part\":{\"type\":\"text\",\"text\":") : JW_LIT(&w, ",\"part\":{\"type\":\"audio\",\"transcript\":"));
    jw_str(&w, t, tl);
    JW_LIT(&w, "}");
    rt_ev_send(s, &w, 0);
    const char *item_status = strcmp(status, "completed") == 0 ? "completed" : "incomplete";
    rt_ev_begin(s, &w, "response.output_item.done");
    JW_LIT(&w, ",\"response_id\":");
    jw_cstr(&w, r->resp_id);
    JW_LIT(&w, ",\"output_index\":0,\"item\":");
    item_json(s, &w, item_status, 1);
    rt_ev_send(s, &w, 0);
    if (!r->beta) {
        rt_ev_begin(s, &w, "conversation.item.done");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":");
        item_json(s, &w, item_status, 1);
        rt_ev_send(s, &w, 0);
    }
    rt_ev_begin(s, &w, "response.done");
    JW_LIT(&w, ",\"response\":");
    response_json(s, &w, status, reason ? status : NULL, reason, 1);
    rt_ev_send(s, &w, 0);
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
void rt_frame(sess *s, const sched_out *o) {
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
        rt_open_response(s);
    }
    jw w;
    if (o->has_pcm && !r->text_only) {
        uint8_t pcm[2 * MS_FRAME_SAMPLES];
        size_t n = rt_out_frame(&r->out, o->pcm, MS_FRAME_SAMPLES, pcm, sizeof pcm);
        char b64[((2 * MS_FRAME_SAMPLES + 2) / 3) * 4 + 1];
        if (n) {
            proto_b64_encode(pcm, n, b64);
            rt_ev_begin(s, &w, r->beta ? "response.audio.delta" : "response.output_audio.delta");
            part_ids(s, &w);
            JW_LIT(&w, ",\"delta\":\"");
            jw_raw(&w, b64, proto_b64_encoded_len(n));
            JW_LIT(&w, "\"");
            rt_ev_send(s, &w, 1);
        }
    }
    char text[64];
    size_t tn = piece && piece[0] ? piece_text(r, piece, text, sizeof text) : 0;
    if (tn) {
        jw_raw(&r->transcript, text, tn); /* raw text (escaped when sent); cut at RT_TRANSCRIPT_MAX */
        rt_ev_begin(s, &w, r->text_only ? (r->beta ? "response.text.delta" : "response.output_text.delta")
                                     : (r->beta ? "response.audio_transcript.delta" : "response.output_audio_transcript.delta"));
        part_ids(s, &w);
        JW_LIT(&w, ",\"delta\":");
        jw_str(&w, text, tn);
        rt_ev_send(s, &w, 0);
    }
    r->resp_frames++;
    if (r->quiet >= silence_frames) rt_close_response(s, "completed", NULL);
    else if ((double)r->resp_frames * MS_FRAME_MS >= (double)ao->realtime.max_response_s * 1000.0)
        rt_close_response(s, "incomplete", "max_output_tokens");
}
