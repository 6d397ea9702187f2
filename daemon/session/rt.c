/* rt.c - the /v1/realtime dialect of a session (rt.h): client events in,
 * the session's settings and input audio; the events out are rt_out.c's.
 * Loop thread.
 */
#include "rt_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_int.h"
#include "b64.h"
#include "clock.h"
#include "jw.h"
#include "log.h"
#include "metrics.h"
#include "rt_audio.h"
#include "rt_event.h"

/* The OpenAI voices: accepted, reported, no effect (the model's own voice,
 * or the persona's, speaks). */
static const char *const stock_voices[] = {"alloy", "ash", "ballad", "coral", "echo", "sage",
                                           "shimmer", "verse", "marin", "cedar", NULL};

/* ---- input ---------------------------------------------------------------- */

static void user_item_events(sess *s, const char *item_id) {
    rt *r = R(s);
    jw w;
    rt_ev_begin(s, &w, "input_audio_buffer.committed");
    JW_LIT(&w, ",\"previous_item_id\":null,\"item_id\":");
    jw_cstr(&w, item_id);
    rt_ev_send(s, &w, 0);
    for (int done = 0; done <= !r->beta; done++) {
        rt_ev_begin(s, &w, done ? "conversation.item.done" : r->beta ? "conversation.item.created" : "conversation.item.added");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":{\"id\":");
        jw_cstr(&w, item_id);
        JW_LIT(&w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"user\",\"status\":\"completed\","
                   "\"content\":[{\"type\":\"input_audio\",\"transcript\":null}]}");
        rt_ev_send(s, &w, 0);
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
            rt_make_id(s, r->speech_item, "item");
            double start = end_ms - MS_FRAME_MS - prefix_ms;
            rt_ev_begin(s, &w, "input_audio_buffer.speech_started");
            jw_fmt(&w, ",\"audio_start_ms\":%lld,\"item_id\":", (long long)(start > 0 ? start : 0));
            jw_cstr(&w, r->speech_item);
            rt_ev_send(s, &w, 0);
        }
        if (loud) {
            r->vad_quiet_ms = 0;
        } else if (r->speaking && (r->vad_quiet_ms += (int)MS_FRAME_MS) >= silence_ms) {
            r->speaking = 0;
            rt_ev_begin(s, &w, "input_audio_buffer.speech_stopped");
            jw_fmt(&w, ",\"audio_end_ms\":%lld,\"item_id\":", (long long)end_ms);
            jw_cstr(&w, r->speech_item);
            rt_ev_send(s, &w, 0);
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
        rt_refuse(s, ev, "audio_too_large", param,
               "%s: %zu bytes of audio in one event, more than realtime.max_append_bytes = %zu; send smaller chunks",
               param, len / 4 * 3, max);
        return MS_ERR_LIMIT;
    }
    uint8_t *buf = malloc(proto_b64_decoded_max(len));
    if (!buf) {
        rt_send_error(s, "server_error", "server_error", param, "out of memory", ev->event_id);
        return MS_ERR_NOMEM;
    }
    size_t bad = 0;
    long n = proto_b64_decode(b64, len, buf, proto_b64_decoded_max(len), &bad);
    if (n < 0) {
        free(buf);
        rt_refuse(s, ev, "invalid_base64", param, "%s is not base64 (RFC 4648, padded): bad character or length at offset %zu",
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
        rt_refuse(s, ev, "invalid_value", param, "%s: %s", param, e.msg);
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
            rt_refuse(s, ev, "session_update_unsupported", "session.voice",
                   "the voice is fixed once the session has started (its first audio or update); set it in the first "
                   "session.update");
            return;
        }
        if ((c->set & RT_SET_INSTRUCTIONS) &&
            (c->instructions_len != r->instructions_len ||
             (c->instructions_len && memcmp(c->instructions, r->instructions, c->instructions_len)))) {
            rt_refuse(s, ev, "session_update_unsupported", "session.instructions",
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
            /* not an error event: clients such as Pipecat end the session
             * on one; session.updated reports instructions "" */
            LOGW("realtime_instructions_ignored", "id=%llu variant=%s msg=\"this model takes no text prompt\"",
                 (unsigned long long)s->id, model_variant_name(s->a->m));
        } else if ((s->q.present &= ~(1u << PROTO_Q_TEXT_PROMPT)),
                   proto_query_set(&s->q, "text_prompt", 11, c->instructions, c->instructions_len, &e) != MS_OK) {
            rt_refuse(s, ev, "invalid_value", "session.instructions", "session.instructions: %s", e.msg);
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
            sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: %s", e.msg);
            return;
        }
        r->in_fmt = c->in_fmt;
    }
    if ((c->set & RT_SET_OUT_FMT) && c->out_fmt != r->out_fmt) {
        if (rt_out_init(&r->out, c->out_fmt, &e) != MS_OK) {
            sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: %s", e.msg);
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
                rt_refuse(s, ev, "invalid_value", "session.temperature", "session.temperature: %s", e.msg);
        }
    }
    sess_start(s);
    if (!s->close_status) rt_send_session(s, "session.updated");
}

static void item_create(sess *s, const rt_event *ev) {
    rt *r = R(s);
    switch (ev->item_kind) {
    case RT_ITEM_SYSTEM_TEXT: {
        if (s->begun) {
            rt_refuse(s, ev, "session_update_unsupported", "item",
                   "a system message becomes the instructions, which are primed at the start: send it before the "
                   "first audio");
            return;
        }
        /* appended to the instructions, as a session.update would set them */
        size_t n = r->instructions_len + (r->instructions_len ? 1 : 0) + ev->text_len;
        if (n > RT_INSTRUCTIONS_MAX) {
            rt_refuse(s, ev, "string_above_max_length", "item", "the instructions would exceed %d bytes", RT_INSTRUCTIONS_MAX);
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
        ms_error e = {0};
        r->instructions_ignored = model_prime_slots(s->a->m) == 0; /* a Kyutai model: kept, reported "" */
        s->q.present &= ~(1u << PROTO_Q_TEXT_PROMPT); /* replaced by the joined text */
        if (!r->instructions_ignored && proto_query_set(&s->q, "text_prompt", 11, t, n, &e) != MS_OK) {
            rt_refuse(s, ev, "invalid_value", "item", "%s", e.msg);
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
        rt_refuse(s, ev, "text_input_unsupported", "item.content",
               "the model hears audio only: text items cannot be fed (speak it, or send it as input_audio)");
        return;
    default:
        rt_refuse(s, ev, "item_type_unsupported", "item.type",
               "conversation items of type \"%s\" are not supported (messages: system text before the start, user "
               "audio)", ev->item_type[0] ? ev->item_type : "?");
        return;
    }
    char id[RT_MADE_ID_MAX];
    if (ev->id[0]) snprintf(id, sizeof id, "%s", ev->id);
    else rt_make_id(s, id, "item");
    jw w;
    for (int done = 0; done <= !r->beta; done++) {
        rt_ev_begin(s, &w, done ? "conversation.item.done" : r->beta ? "conversation.item.created" : "conversation.item.added");
        JW_LIT(&w, ",\"previous_item_id\":null,\"item\":{\"id\":");
        jw_cstr(&w, id);
        jw_fmt(&w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"%s\",\"status\":\"completed\","
                   "\"content\":[]}", ev->item_kind == RT_ITEM_SYSTEM_TEXT ? "system" : "user");
        rt_ev_send(s, &w, 0);
    }
}

/* ---- events in ------------------------------------------------------------ */

/* realtime.max_events_per_s: 1 when the event may pass, else the session
 * fails (1008). */
static int rate_ok(sess *s) {
    rt *r = R(s);
    double rate = (double)s->a->o.realtime.max_events_per_s, now = ms_mono_ms();
    if (rate <= 0) return 1;
    r->tokens += (now - r->tok_ms) / 1000.0 * rate;
    if (r->tokens > 2 * rate) r->tokens = 2 * rate;
    r->tok_ms = now;
    if (r->tokens >= 1) {
        r->tokens -= 1;
        return 1;
    }
    sess_fail(s, MET_ERR_input_overrun, PROTO_CLOSE_POLICY, "event flood: more than %g client events per second "
              "(realtime.max_events_per_s)", rate);
    return 0;
}

static void rt_message(sess *s, const uint8_t *data, size_t len) {
    rt *r = R(s);
    if (!rate_ok(s)) return;
    rt_event ev;
    rt_err err;
    if (rt_event_parse((const char *)data, len, &ev, &err) != MS_OK) {
        met_error(MET_ERR_bad_event);
        rt_send_error(s, err.type, err.code, err.param, err.message, ev.event_id);
        rt_event_free(&ev);
        return;
    }
    jw w;
    switch (ev.type) {
    case RT_EV_SESSION_UPDATE: session_update(s, &ev); break;
    case RT_EV_APPEND: feed_b64(s, &ev, ev.audio, ev.audio_len, "audio"); break;
    case RT_EV_COMMIT:
        if (!r->uncommitted) {
            rt_refuse(s, &ev, "input_audio_buffer_commit_empty", NULL,
                   "no audio appended since the last commit (the model hears the audio as it arrives)");
            break;
        }
        {
            char id[RT_MADE_ID_MAX];
            rt_make_id(s, id, "item");
            user_item_events(s, id);
        }
        r->uncommitted = 0;
        break;
    case RT_EV_CLEAR:
        /* the model has heard it already: nothing to take back */
        r->uncommitted = 0;
        rt_ev_begin(s, &w, "input_audio_buffer.cleared");
        rt_ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_CREATE: item_create(s, &ev); break;
    case RT_EV_ITEM_TRUNCATE:
        /* the client cut its playback; the model heard the overlap itself */
        rt_ev_begin(s, &w, "conversation.item.truncated");
        JW_LIT(&w, ",\"item_id\":");
        jw_cstr(&w, ev.id);
        jw_fmt(&w, ",\"content_index\":%d,\"audio_end_ms\":%lld", ev.content_index, (long long)ev.audio_end_ms);
        rt_ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_DELETE:
        rt_ev_begin(s, &w, "conversation.item.deleted");
        JW_LIT(&w, ",\"item_id\":");
        jw_cstr(&w, ev.id);
        rt_ev_send(s, &w, 0);
        break;
    case RT_EV_ITEM_RETRIEVE:
        rt_refuse(s, &ev, "item_retrieve_unsupported", "item_id",
               "items are not kept: the conversation lives in the model's context");
        break;
    case RT_EV_RESPONSE_CREATE:
        if (r->resp) {
            rt_refuse(s, &ev, "conversation_already_has_active_response", NULL,
                   "a response is in progress (%s); the model speaks when it wants", r->resp_id);
            break;
        }
        if (ev.cfg.set & RT_SET_MODALITIES) r->text_only = ev.cfg.text_only;
        if (!s->begun) sess_start(s);
        if (!s->close_status) {
            r->muted = 0;
            r->quiet = 0;
            rt_open_response(s);   /* closed by the same rule: the model's silence */
        }
        break;
    case RT_EV_RESPONSE_CANCEL:
        if (!r->resp || (ev.id[0] && strcmp(ev.id, r->resp_id) != 0)) {
            rt_refuse(s, &ev, "response_cancel_not_active", "response_id", "no active response%s%s to cancel",
                   ev.id[0] ? " " : "", ev.id);
            break;
        }
        rt_close_response(s, "cancelled", "client_cancelled");
        r->muted = 1;
        break;
    case RT_EV_OUTPUT_CLEAR:
        rt_ev_begin(s, &w, "output_audio_buffer.cleared");
        JW_LIT(&w, ",\"response_id\":");
        jw_cstr(&w, r->resp ? r->resp_id : NULL);
        rt_ev_send(s, &w, 0);
        if (r->resp) rt_close_response(s, "cancelled", "client_cancelled");
        r->muted = 1;
        break;
    case RT_EV_TRANSCRIPTION_UPDATE:
        rt_refuse(s, &ev, "unsupported_event", "type", "transcription sessions are not offered");
        break;
    default: break;
    }
    rt_event_free(&ev);
}

/* ---- the dialect ---------------------------------------------------------- */

static int rt_open(sess *s, const char *const *args, int nargs) {
    rt *r = calloc(1, sizeof *r);
    if (!r) {
        sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: out of memory");
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
    r->tok_ms = ms_mono_ms();
    r->tokens = 2.0 * (double)s->a->o.realtime.max_events_per_s;
    ms_error e = {0};
    if (rt_in_init(&r->in, RT_FMT_PCM16, &e) != MS_OK || rt_out_init(&r->out, RT_FMT_PCM16, &e) != MS_OK) {
        sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: %s", e.msg);
        return MS_ERR_NOMEM;
    }
    LOGI("realtime_open", "id=%llu dialect=%s model=\"%s\"", (unsigned long long)s->id, r->beta ? "beta" : "ga",
         r->model);
    rt_send_session(s, "session.created");
    return MS_OK;
}

static void rt_ready(sess *s) { (void)s; /* session.created / updated went out already */ }

static void rt_fail(sess *s, int status, const char *text) {
    const char *code = status == PROTO_CLOSE_TOO_BIG      ? "message_too_large"
                     : status == PROTO_CLOSE_TRY_LATER    ? "server_busy"
                     : status == PROTO_CLOSE_GOING_AWAY   ? "server_shutting_down"
                     : status == PROTO_CLOSE_INTERNAL     ? "internal_error"
                     : status == PROTO_CLOSE_NORMAL       ? "session_ended"
                                                          : "policy_violation";
    int server = status == PROTO_CLOSE_INTERNAL || status == PROTO_CLOSE_TRY_LATER || status == PROTO_CLOSE_GOING_AWAY;
    rt_send_error(s, server ? "server_error" : "invalid_request_error", code, NULL, text, NULL);
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
