/* rt_event.h - the client events of the OpenAI Realtime protocol as
 * moshid's /v1/realtime reads them (docs/realtime.md): one JSON object
 * per text message, discriminated by "type". Parsing is pure and bounded
 * (the size the server accepts, RT_EVENT_MAX_NODES values, the JSON
 * reader's depth limit); everything a client can get wrong comes back as
 * an rt_err with the error event's type, code, param and message. Both
 * the GA and the beta ("OpenAI-Beta: realtime=v1") shapes of
 * session.update are read; the client event names are the same in both.
 */
#ifndef MOSHID_PROTO_RT_EVENT_H
#define MOSHID_PROTO_RT_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"

/* Most JSON values (objects, arrays, scalars) one event may hold, counted
 * before the tree is built: an event's tree costs about 80 bytes a value,
 * so a message of commas cannot make the reader allocate 80 times its
 * size. */
#define RT_EVENT_MAX_NODES 4096
/* Bytes kept of a client's event_id and of ids it names (longer: refused). */
#define RT_ID_MAX 64
/* Bytes of a model or voice name. */
#define RT_NAME_MAX 128
/* Bytes of instructions (the text prompt; PROTO_TEXT_PROMPT_MAX). */
#define RT_INSTRUCTIONS_MAX 8192

/* X(id, name): the client events read. */
#define RT_CLIENT_EVENTS(X)                                 \
    X(SESSION_UPDATE, "session.update")                     \
    X(APPEND, "input_audio_buffer.append")                  \
    X(COMMIT, "input_audio_buffer.commit")                  \
    X(CLEAR, "input_audio_buffer.clear")                    \
    X(ITEM_CREATE, "conversation.item.create")              \
    X(ITEM_TRUNCATE, "conversation.item.truncate")          \
    X(ITEM_DELETE, "conversation.item.delete")              \
    X(ITEM_RETRIEVE, "conversation.item.retrieve")          \
    X(RESPONSE_CREATE, "response.create")                   \
    X(RESPONSE_CANCEL, "response.cancel")                   \
    X(OUTPUT_CLEAR, "output_audio_buffer.clear")            \
    X(TRANSCRIPTION_UPDATE, "transcription_session.update")

typedef enum rt_ev_type {
#define RT_EV_E(id, name) RT_EV_##id,
    RT_CLIENT_EVENTS(RT_EV_E)
#undef RT_EV_E
    RT_EV__COUNT
} rt_ev_type;

/* Audio formats, both directions. */
typedef enum { RT_FMT_PCM16, RT_FMT_ULAW, RT_FMT_ALAW } rt_format;
/* turn_detection types. */
typedef enum { RT_TD_NONE, RT_TD_SERVER_VAD, RT_TD_SEMANTIC_VAD } rt_td_type;

typedef struct rt_turn_detection {
    rt_td_type type;
    double threshold;           /* server_vad: 0..1 */
    int prefix_padding_ms, silence_duration_ms, idle_timeout_ms; /* -1: not given */
    int create_response, interrupt_response;                     /* -1: not given */
    char eagerness[8];          /* semantic_vad: low|medium|high|auto ("" not given) */
} rt_turn_detection;

/* What a session.update (or response.create) sets: a bit per field. */
enum {
    RT_SET_IN_FMT = 1u << 0,
    RT_SET_OUT_FMT = 1u << 1,
    RT_SET_VOICE = 1u << 2,
    RT_SET_INSTRUCTIONS = 1u << 3,
    RT_SET_TURN_DETECTION = 1u << 4,
    RT_SET_MODALITIES = 1u << 5,
    RT_SET_MODEL = 1u << 6,
    RT_SET_TEMPERATURE = 1u << 7,
};

typedef struct rt_session_cfg {
    unsigned set;               /* RT_SET_* */
    rt_format in_fmt, out_fmt;
    char voice[RT_NAME_MAX + 1];
    const char *instructions;   /* borrowed from the event's tree; UTF-8 */
    size_t instructions_len;
    rt_turn_detection td;
    int text_only;              /* output modalities ["text"] */
    char model[RT_NAME_MAX + 1];
    double temperature;         /* beta */
} rt_session_cfg;

/* conversation.item.create, as far as it can be read. */
typedef enum { RT_ITEM_OTHER, RT_ITEM_SYSTEM_TEXT, RT_ITEM_USER_TEXT, RT_ITEM_USER_AUDIO } rt_item_kind;

typedef struct rt_event {
    rt_ev_type type;
    char event_id[RT_ID_MAX + 1];   /* "" when the client sent none */
    const char *audio;          /* APPEND, ITEM_CREATE (USER_AUDIO): base64, borrowed */
    size_t audio_len;
    rt_session_cfg cfg;         /* SESSION_UPDATE; RESPONSE_CREATE (its response's fields) */
    rt_item_kind item_kind;     /* ITEM_CREATE */
    const char *text;           /* ITEM_CREATE: the text of its content parts' first text, borrowed */
    size_t text_len;
    char item_type[32];         /* ITEM_CREATE: the item's type ("message", "function_call", ...) */
    char id[RT_ID_MAX + 1];     /* ITEM_*: item_id (ITEM_CREATE: item.id); RESPONSE_CANCEL: response_id */
    int content_index;          /* ITEM_TRUNCATE */
    int64_t audio_end_ms;       /* ITEM_TRUNCATE */
    js_value *root;             /* the parsed event (rt_event_free) */
} rt_event;

/* An error for the client: the error event's fields. */
typedef struct rt_err {
    const char *type;           /* "invalid_request_error", "server_error" */
    char code[48];
    char param[64];
    char message[320];
} rt_err;

/* rt_event_parse: len bytes of text (one WebSocket message) -> ev. MS_OK,
 * or an error code with err filled (ev->event_id is set as soon as the
 * event's own id could be read, so the error can name it); ev->root
 * must be released with rt_event_free either way. */
int rt_event_parse(const char *text, size_t len, rt_event *ev, rt_err *err);
void rt_event_free(rt_event *ev);

/* rt_event_name: "session.update", ... ("?" out of range). */
const char *rt_event_name(rt_ev_type t);
/* rt_format_name: the beta name ("pcm16", "g711_ulaw", "g711_alaw");
 * rt_format_mime: the GA type ("audio/pcm", "audio/pcmu", "audio/pcma");
 * rt_format_rate_hz: 24000 or 8000. */
const char *rt_format_name(rt_format f);
const char *rt_format_mime(rt_format f);
int rt_format_rate_hz(rt_format f);
/* rt_td_name: "none", "server_vad", "semantic_vad". */
const char *rt_td_name(rt_td_type t);

#endif
