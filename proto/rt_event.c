/* rt_event.c - the /v1/realtime client events (rt_event.h). */
#include "rt_event.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "text.h"

static const char *const ev_names[] = {
#define RT_EV_N(id, name) name,
    RT_CLIENT_EVENTS(RT_EV_N)
#undef RT_EV_N
};

const char *rt_event_name(rt_ev_type t) { return (unsigned)t < RT_EV__COUNT ? ev_names[t] : "?"; }

const char *rt_format_name(rt_format f) {
    return f == RT_FMT_ULAW ? "g711_ulaw" : f == RT_FMT_ALAW ? "g711_alaw" : "pcm16";
}
const char *rt_format_mime(rt_format f) {
    return f == RT_FMT_ULAW ? "audio/pcmu" : f == RT_FMT_ALAW ? "audio/pcma" : "audio/pcm";
}
int rt_format_rate_hz(rt_format f) { return f == RT_FMT_PCM16 ? 24000 : 8000; }
const char *rt_td_name(rt_td_type t) {
    return t == RT_TD_SERVER_VAD ? "server_vad" : t == RT_TD_SEMANTIC_VAD ? "semantic_vad" : "none";
}

/* Fill err (invalid_request_error) and return rc. */
static int fail(rt_err *err, int rc, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(rt_err *err, int rc, const char *code, const char *param, const char *fmt, ...) {
    err->type = "invalid_request_error";
    snprintf(err->code, sizeof err->code, "%s", code);
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return rc;
}

/* Values in text (an upper bound: every '{', '[' and ',' outside strings
 * starts one more value, plus the first), without building anything. */
static size_t count_values(const char *t, size_t n) {
    size_t c = 1;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '{' || ch == '[' || ch == ',') {
            c++;
        }
    }
    return c;
}

/* A string member `key` of o (NULL when absent) of at most max bytes
 * (0: any) copied into out (cap bytes); -1 with err filled when present
 * but not a string or too long; 0 absent; 1 copied. */
static int get_str(const js_value *o, const char *key, const char *param, char *out, size_t cap, rt_err *err) {
    const js_value *v = js_get(o, key);
    if (!v) return 0;
    if (v->type != JS_STRING)
        return fail(err, -1, "invalid_type", param, "%s must be a string, not %s", param, js_type_name(v->type));
    if (v->len >= cap)
        return fail(err, -1, "string_above_max_length", param, "%s is longer than %zu bytes", param, cap - 1);
    memcpy(out, v->str, v->len + 1);
    return 1;
}

static int want_type(const js_value *v, js_type t, const char *param, rt_err *err) {
    if (v->type == t) return 0;
    return fail(err, -1, "invalid_type", param, "%s must be %s %s, not %s", param, t == JS_OBJECT ? "an" : "a",
                js_type_name(t), js_type_name(v->type));
}

/* An audio format: a beta name ("pcm16", "g711_ulaw", "g711_alaw") or a GA
 * object {type: "audio/pcm" (rate 24000) | "audio/pcmu" | "audio/pcma"}. */
static int get_format(const js_value *v, const char *param, rt_format *f, rt_err *err) {
    const char *name = NULL;
    if (v->type == JS_STRING) {
        name = v->str;
    } else if (v->type == JS_OBJECT) {
        const js_value *t = js_get(v, "type"), *r = js_get(v, "rate");
        if (!t || t->type != JS_STRING)
            return fail(err, -1, "invalid_value", param, "%s.type must be a string", param);
        name = t->str;
        if (r && (r->type != JS_NUMBER || !r->is_int || (strcmp(name, "audio/pcm") == 0 && r->i != 24000) ||
                  (strcmp(name, "audio/pcm") != 0 && r->i != 8000)))
            return fail(err, -1, "invalid_value", param,
                        "%s.rate: audio/pcm is 24000 Hz and G.711 (audio/pcmu, audio/pcma) 8000 Hz", param);
    } else {
        return fail(err, -1, "invalid_type", param, "%s must be a string or an object", param);
    }
    if (strcmp(name, "pcm16") == 0 || strcmp(name, "audio/pcm") == 0) *f = RT_FMT_PCM16;
    else if (strcmp(name, "g711_ulaw") == 0 || strcmp(name, "audio/pcmu") == 0) *f = RT_FMT_ULAW;
    else if (strcmp(name, "g711_alaw") == 0 || strcmp(name, "audio/pcma") == 0) *f = RT_FMT_ALAW;
    else
        return fail(err, -1, "invalid_value", param,
                    "%s: unsupported audio format; use pcm16 (audio/pcm, 24 kHz), g711_ulaw (audio/pcmu) or "
                    "g711_alaw (audio/pcma)", param);
    return 0;
}

/* An integer member in [lo, hi] (absent or null: *out stays). */
static int get_int(const js_value *o, const char *key, const char *param, int lo, int hi, int *out, rt_err *err) {
    const js_value *v = js_get(o, key);
    if (!v || v->type == JS_NULL) return 0;
    if (v->type != JS_NUMBER || !v->is_int || v->i < lo || v->i > hi)
        return fail(err, -1, "invalid_value", param, "%s must be an integer in [%d, %d]", param, lo, hi);
    *out = (int)v->i;
    return 0;
}

static int get_bool(const js_value *o, const char *key, const char *param, int *out, rt_err *err) {
    const js_value *v = js_get(o, key);
    if (!v || v->type == JS_NULL) return 0;
    if (v->type != JS_BOOL) return fail(err, -1, "invalid_type", param, "%s must be a boolean", param);
    *out = v->boolean;
    return 0;
}

static int get_td(const js_value *v, const char *param, rt_turn_detection *td, rt_err *err) {
    *td = (rt_turn_detection){.type = RT_TD_NONE, .threshold = -1, .prefix_padding_ms = -1,
                              .silence_duration_ms = -1, .idle_timeout_ms = -1, .create_response = -1,
                              .interrupt_response = -1};
    if (v->type == JS_NULL) return 0;
    if (want_type(v, JS_OBJECT, param, err)) return -1;
    char type[16] = "", p[64];
    snprintf(p, sizeof p, "%s.type", param);
    if (get_str(v, "type", p, type, sizeof type, err) < 0) return -1;
    if (strcmp(type, "server_vad") == 0 || !type[0]) td->type = RT_TD_SERVER_VAD;
    else if (strcmp(type, "semantic_vad") == 0) td->type = RT_TD_SEMANTIC_VAD;
    else return fail(err, -1, "invalid_value", p, "%s must be server_vad or semantic_vad (or turn_detection null)", p);
    const js_value *th = js_get(v, "threshold");
    if (th && th->type != JS_NULL) {
        if (th->type != JS_NUMBER || th->num < 0 || th->num > 1)
            return fail(err, -1, "invalid_value", param, "%s.threshold must be a number in [0, 1]", param);
        td->threshold = th->num;
    }
    if (get_int(v, "prefix_padding_ms", param, 0, 10000, &td->prefix_padding_ms, err) ||
        get_int(v, "silence_duration_ms", param, 0, 10000, &td->silence_duration_ms, err) ||
        get_int(v, "idle_timeout_ms", param, 0, 600000, &td->idle_timeout_ms, err) ||
        get_bool(v, "create_response", param, &td->create_response, err) ||
        get_bool(v, "interrupt_response", param, &td->interrupt_response, err))
        return -1;
    snprintf(p, sizeof p, "%s.eagerness", param);
    if (get_str(v, "eagerness", p, td->eagerness, sizeof td->eagerness, err) < 0) return -1;
    if (td->eagerness[0] && strcmp(td->eagerness, "low") && strcmp(td->eagerness, "medium") &&
        strcmp(td->eagerness, "high") && strcmp(td->eagerness, "auto"))
        return fail(err, -1, "invalid_value", p, "%s must be low, medium, high or auto", p);
    return 0;
}

/* output_modalities / modalities: ["audio"], ["text"], or both (audio). */
static int get_modalities(const js_value *v, const char *param, int *text_only, rt_err *err) {
    if (want_type(v, JS_ARRAY, param, err)) return -1;
    int audio = 0, text = 0;
    for (const js_value *e = v->child; e; e = e->next) {
        if (e->type != JS_STRING) return fail(err, -1, "invalid_type", param, "%s holds strings", param);
        if (strcmp(e->str, "audio") == 0) audio = 1;
        else if (strcmp(e->str, "text") == 0) text = 1;
        else return fail(err, -1, "invalid_value", param, "%s: \"audio\" and/or \"text\"", param);
    }
    if (!audio && !text) return fail(err, -1, "invalid_value", param, "%s is empty", param);
    *text_only = text && !audio;
    return 0;
}

static int get_instructions(const js_value *o, const char *param, rt_session_cfg *c, rt_err *err) {
    const js_value *v = js_get(o, "instructions");
    if (!v || v->type == JS_NULL) return 0;
    if (v->type != JS_STRING) return fail(err, -1, "invalid_type", param, "%s must be a string", param);
    if (v->len > RT_INSTRUCTIONS_MAX)
        return fail(err, -1, "string_above_max_length", param, "%s is longer than %d bytes", param, RT_INSTRUCTIONS_MAX);
    c->instructions = v->str;
    c->instructions_len = v->len;
    c->set |= RT_SET_INSTRUCTIONS;
    return 0;
}

static int get_voice(const js_value *o, const char *param, rt_session_cfg *c, rt_err *err) {
    int r = get_str(o, "voice", param, c->voice, sizeof c->voice, err);
    if (r < 0) return -1;
    if (r) c->set |= RT_SET_VOICE;
    return 0;
}

/* session.update's session, GA (nested audio.*) and beta (flat) alike. */
static int parse_session(const js_value *s, rt_session_cfg *c, rt_err *err) {
    if (want_type(s, JS_OBJECT, "session", err)) return -1;
    char type[32] = "";
    if (get_str(s, "type", "session.type", type, sizeof type, err) < 0) return -1;
    if (type[0] && strcmp(type, "realtime") != 0)
        return fail(err, -1, "invalid_value", "session.type",
                    "session.type must be \"realtime\": transcription sessions are not offered");
    int r = get_str(s, "model", "session.model", c->model, sizeof c->model, err);
    if (r < 0) return -1;
    if (r) c->set |= RT_SET_MODEL;
    if (get_instructions(s, "session.instructions", c, err)) return -1;
    const js_value *v;
    if ((v = js_get(s, "output_modalities")) && v->type != JS_NULL) {
        if (get_modalities(v, "session.output_modalities", &c->text_only, err)) return -1;
        c->set |= RT_SET_MODALITIES;
    }
    if ((v = js_get(s, "modalities")) && v->type != JS_NULL) {
        if (get_modalities(v, "session.modalities", &c->text_only, err)) return -1;
        c->set |= RT_SET_MODALITIES;
    }
    /* beta, flat */
    if ((v = js_get(s, "input_audio_format")) && v->type != JS_NULL) {
        if (get_format(v, "session.input_audio_format", &c->in_fmt, err)) return -1;
        c->set |= RT_SET_IN_FMT;
    }
    if ((v = js_get(s, "output_audio_format")) && v->type != JS_NULL) {
        if (get_format(v, "session.output_audio_format", &c->out_fmt, err)) return -1;
        c->set |= RT_SET_OUT_FMT;
    }
    if (get_voice(s, "session.voice", c, err)) return -1;
    if ((v = js_get(s, "turn_detection"))) {
        if (get_td(v, "session.turn_detection", &c->td, err)) return -1;
        c->set |= RT_SET_TURN_DETECTION;
    }
    if ((v = js_get(s, "temperature")) && v->type != JS_NULL) {
        if (v->type != JS_NUMBER || v->num < 0 || v->num > 5)
            return fail(err, -1, "invalid_value", "session.temperature", "session.temperature must be in [0, 5]");
        c->temperature = v->num;
        c->set |= RT_SET_TEMPERATURE;
    }
    /* GA, nested */
    const js_value *audio = js_get(s, "audio");
    if (!audio || audio->type == JS_NULL) return 0;
    if (want_type(audio, JS_OBJECT, "session.audio", err)) return -1;
    const js_value *in = js_get(audio, "input"), *out = js_get(audio, "output");
    if (in && in->type != JS_NULL) {
        if (want_type(in, JS_OBJECT, "session.audio.input", err)) return -1;
        if ((v = js_get(in, "format")) && v->type != JS_NULL) {
            if (get_format(v, "session.audio.input.format", &c->in_fmt, err)) return -1;
            c->set |= RT_SET_IN_FMT;
        }
        if ((v = js_get(in, "turn_detection"))) {
            if (get_td(v, "session.audio.input.turn_detection", &c->td, err)) return -1;
            c->set |= RT_SET_TURN_DETECTION;
        }
    }
    if (out && out->type != JS_NULL) {
        if (want_type(out, JS_OBJECT, "session.audio.output", err)) return -1;
        if ((v = js_get(out, "format")) && v->type != JS_NULL) {
            if (get_format(v, "session.audio.output.format", &c->out_fmt, err)) return -1;
            c->set |= RT_SET_OUT_FMT;
        }
        if (get_voice(out, "session.audio.output.voice", c, err)) return -1;
    }
    return 0;
}

/* conversation.item.create's item: what kind of thing it is. */
static int parse_item(const js_value *it, rt_event *ev, rt_err *err) {
    if (want_type(it, JS_OBJECT, "item", err)) return -1;
    if (get_str(it, "id", "item.id", ev->id, sizeof ev->id, err) < 0) return -1;
    if (get_str(it, "type", "item.type", ev->item_type, sizeof ev->item_type, err) < 0) return -1;
    char role[16] = "";
    if (get_str(it, "role", "item.role", role, sizeof role, err) < 0) return -1;
    ev->item_kind = RT_ITEM_OTHER;
    if (strcmp(ev->item_type, "message") != 0 && ev->item_type[0]) return 0;
    const js_value *content = js_get(it, "content");
    if (!content || content->type != JS_ARRAY) return 0;
    for (const js_value *p = content->child; p; p = p->next) {
        if (p->type != JS_OBJECT) return fail(err, -1, "invalid_type", "item.content", "item.content holds objects");
        const js_value *t = js_get(p, "type"), *text = js_get(p, "text"), *audio = js_get(p, "audio");
        if (!t || t->type != JS_STRING) continue;
        if (strcmp(t->str, "input_text") == 0 && text && text->type == JS_STRING && !ev->text) {
            ev->text = text->str;
            ev->text_len = text->len;
        } else if (strcmp(t->str, "input_audio") == 0 && audio && audio->type == JS_STRING && !ev->audio) {
            ev->audio = audio->str;
            ev->audio_len = audio->len;
        }
    }
    if ((strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) && ev->text) ev->item_kind = RT_ITEM_SYSTEM_TEXT;
    else if (strcmp(role, "user") == 0 && ev->audio) ev->item_kind = RT_ITEM_USER_AUDIO;
    else if (strcmp(role, "user") == 0 && ev->text) ev->item_kind = RT_ITEM_USER_TEXT;
    if (ev->item_kind == RT_ITEM_SYSTEM_TEXT && ev->text_len > RT_INSTRUCTIONS_MAX)
        return fail(err, -1, "string_above_max_length", "item.content", "the text is longer than %d bytes",
                    RT_INSTRUCTIONS_MAX);
    return 0;
}

/* response.create's optional response: the fields read (the rest is
 * ignored, docs/realtime.md). */
static int parse_response(const js_value *r, rt_session_cfg *c, rt_err *err) {
    if (r->type == JS_NULL) return 0;
    if (want_type(r, JS_OBJECT, "response", err)) return -1;
    const js_value *v;
    if (get_instructions(r, "response.instructions", c, err)) return -1;
    if ((v = js_get(r, "output_modalities")) && v->type != JS_NULL) {
        if (get_modalities(v, "response.output_modalities", &c->text_only, err)) return -1;
        c->set |= RT_SET_MODALITIES;
    }
    if ((v = js_get(r, "modalities")) && v->type != JS_NULL) {
        if (get_modalities(v, "response.modalities", &c->text_only, err)) return -1;
        c->set |= RT_SET_MODALITIES;
    }
    return get_voice(r, "response.voice", c, err);
}

int rt_event_parse(const char *text, size_t len, rt_event *ev, rt_err *err) {
    memset(ev, 0, sizeof *ev);
    memset(err, 0, sizeof *err);
    err->type = "invalid_request_error";
    ev->type = RT_EV__COUNT;
    if (!text_utf8_valid(text, len))
        return fail(err, MS_ERR_FORMAT, "invalid_json", NULL, "the event is not UTF-8 text");
    if (count_values(text, len) > RT_EVENT_MAX_NODES)
        return fail(err, MS_ERR_LIMIT, "invalid_json", NULL, "the event holds more than %d JSON values",
                    RT_EVENT_MAX_NODES);
    ms_error je = {0};
    ev->root = js_parse(text, len, &je);
    if (!ev->root) {
        if (je.code == MS_ERR_NOMEM) {
            fail(err, MS_ERR_NOMEM, "server_error", NULL, "out of memory");
            err->type = "server_error";
            return MS_ERR_NOMEM;
        }
        return fail(err, MS_ERR_FORMAT, "invalid_json", NULL, "the event is not JSON: %s", je.msg);
    }
    const js_value *o = ev->root;
    if (o->type != JS_OBJECT)
        return fail(err, MS_ERR_FORMAT, "invalid_json", NULL, "an event is a JSON object, not %s", js_type_name(o->type));
    if (get_str(o, "event_id", "event_id", ev->event_id, sizeof ev->event_id, err) < 0) {
        ev->event_id[0] = '\0';
        return MS_ERR_FORMAT;
    }
    char type[64] = "";
    const js_value *tv = js_get(o, "type");
    if (!tv || tv->type != JS_STRING)
        return fail(err, MS_ERR_FORMAT, "missing_required_parameter", "type", "an event needs a string \"type\"");
    if (tv->len >= sizeof type)
        return fail(err, MS_ERR_NOTFOUND, "invalid_event", "type", "unknown event type");
    memcpy(type, tv->str, tv->len + 1);
    for (int i = 0; i < RT_EV__COUNT; i++)
        if (strcmp(type, ev_names[i]) == 0) ev->type = (rt_ev_type)i;
    if (ev->type == RT_EV__COUNT)
        return fail(err, MS_ERR_NOTFOUND, "invalid_event", "type", "unknown event type \"%s\"", type);
    const js_value *v;
    switch (ev->type) {
    case RT_EV_SESSION_UPDATE:
        if (!(v = js_get(o, "session")))
            return fail(err, MS_ERR_FORMAT, "missing_required_parameter", "session", "session.update needs a session");
        if (parse_session(v, &ev->cfg, err)) return MS_ERR_FORMAT;
        break;
    case RT_EV_APPEND:
        if (!(v = js_get(o, "audio")) || v->type != JS_STRING)
            return fail(err, MS_ERR_FORMAT, "missing_required_parameter", "audio",
                        "input_audio_buffer.append needs audio: a base64 string");
        ev->audio = v->str;
        ev->audio_len = v->len;
        break;
    case RT_EV_ITEM_CREATE:
        if (!(v = js_get(o, "item")))
            return fail(err, MS_ERR_FORMAT, "missing_required_parameter", "item", "conversation.item.create needs an item");
        if (parse_item(v, ev, err)) return MS_ERR_FORMAT;
        break;
    case RT_EV_ITEM_TRUNCATE:
    case RT_EV_ITEM_DELETE:
    case RT_EV_ITEM_RETRIEVE:
        if (get_str(o, "item_id", "item_id", ev->id, sizeof ev->id, err) <= 0) {
            if (!err->code[0]) fail(err, 0, "missing_required_parameter", "item_id", "%s needs an item_id", type);
            return MS_ERR_FORMAT;
        }
        if (ev->type == RT_EV_ITEM_TRUNCATE) {
            int ci = 0, end = 0;
            if (get_int(o, "content_index", "content_index", 0, 1 << 20, &ci, err) ||
                get_int(o, "audio_end_ms", "audio_end_ms", 0, 1 << 30, &end, err))
                return MS_ERR_FORMAT;
            ev->content_index = ci;
            ev->audio_end_ms = end;
        }
        break;
    case RT_EV_RESPONSE_CREATE:
        if ((v = js_get(o, "response")) && parse_response(v, &ev->cfg, err)) return MS_ERR_FORMAT;
        break;
    case RT_EV_RESPONSE_CANCEL:
        if (get_str(o, "response_id", "response_id", ev->id, sizeof ev->id, err) < 0) return MS_ERR_FORMAT;
        break;
    default: break;
    }
    return MS_OK;
}

void rt_event_free(rt_event *ev) {
    js_free(ev->root);
    ev->root = NULL;
}
