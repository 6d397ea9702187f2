/* query.h - the /api/chat query string (docs/protocol.md section "Query
 * parameters"): URL decoding, validation, values (pure, no I/O).
 *
 * Policy:
 *  - unknown parameters are ignored and counted (proto_query.ignored);
 *  - a known parameter given twice is refused (no silent "last wins");
 *  - a known parameter with a malformed or out-of-range value is refused
 *    with a message naming the parameter and the accepted range;
 *  - pad_mult, repetition_penalty_context and repetition_penalty are
 *    accepted only at the neutral values the Kyutai web client sends by
 *    default (0, 64, 1.0); other values are refused as not implemented.
 * Checks that need the model (top-k against the card) or the configuration
 * (max_steps cap) are done by proto_query_finish.
 */
#ifndef MOSHID_PROTO_QUERY_H
#define MOSHID_PROTO_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "lm_config.h"

#define PROTO_QUERY_MAX_BYTES (32u * 1024u) /* whole query string */
#define PROTO_QUERY_MAX_PARAMS 64u          /* key=value pairs, ignored ones included */
#define PROTO_QUERY_KEY_MAX 64u             /* longer keys are unknown by definition */
#define PROTO_QUERY_NUM_MAX 32u             /* bytes of a numeric value */
#define PROTO_TEXT_PROMPT_MAX 8192u         /* bytes of text_prompt, decoded */
#define PROTO_NAME_MAX 128u                 /* bytes of voice_prompt / persona */
#define PROTO_TEMPERATURE_MAX 5.0           /* temperatures in [0, 5] */
/* Largest top-k anywhere (the query, the configuration, personas, the
 * page): the largest card a checkpoint may have (a top-k past a
 * vocabulary keeps all of it); proto_query_finish then checks a query's
 * against the model's cards. */
#define PROTO_TOPK_MAX LM_MAX_CARD
#define PROTO_MAX_STEPS_MAX 1000000000LL    /* before the configuration's cap */
#define PROTO_SEED_RANDOM (-1LL)            /* "pick a seed" */

/* Neutral values of the text sampling tweaks moshid does not implement. */
#define PROTO_PAD_MULT_NEUTRAL 0.0
#define PROTO_REP_PENALTY_CONTEXT_NEUTRAL 64
#define PROTO_REP_PENALTY_NEUTRAL 1.0

/* X(id, name): every parameter moshid knows. */
#define PROTO_QUERY_PARAMS(X)                                     \
    X(TEXT_TEMPERATURE, "text_temperature")                       \
    X(TEXT_TOPK, "text_topk")                                     \
    X(AUDIO_TEMPERATURE, "audio_temperature")                     \
    X(AUDIO_TOPK, "audio_topk")                                   \
    X(TEXT_SEED, "text_seed")                                     \
    X(AUDIO_SEED, "audio_seed")                                   \
    X(SEED, "seed")                                               \
    X(PAD_MULT, "pad_mult")                                       \
    X(REPETITION_PENALTY_CONTEXT, "repetition_penalty_context")   \
    X(REPETITION_PENALTY, "repetition_penalty")                   \
    X(MAX_STEPS, "max_steps")                                     \
    X(VOICE_PROMPT, "voice_prompt")                               \
    X(TEXT_PROMPT, "text_prompt")                                 \
    X(PERSONA, "persona")

enum {
#define PROTO_Q_ENUM(id, name) PROTO_Q_##id,
    PROTO_QUERY_PARAMS(PROTO_Q_ENUM)
#undef PROTO_Q_ENUM
    PROTO_Q__COUNT
};

/* The parsed parameters. A field is meaningful only when its bit
 * (1u << PROTO_Q_<ID>) is set in present. */
typedef struct proto_query {
    uint32_t present;
    double text_temperature, audio_temperature; /* [0, 5] */
    int text_topk, audio_topk;                  /* [1, card] after finish */
    int64_t text_seed, audio_seed, seed;        /* -1 (random) or [0, 2^63-1] */
    int64_t max_steps;                          /* >= 1, capped by finish */
    bool max_steps_capped;                      /* finish lowered max_steps */
    char voice_prompt[PROTO_NAME_MAX + 1];      /* a file name, no path */
    char persona[PROTO_NAME_MAX + 1];           /* [A-Za-z0-9_.-]+ */
    char text_prompt[PROTO_TEXT_PROMPT_MAX + 1];/* UTF-8, NUL-terminated */
    size_t text_prompt_len;                     /* bytes */
    unsigned params;                            /* pairs seen */
    unsigned ignored;                           /* unknown parameters */
} proto_query;

/* proto_query_init: no parameter present. */
void proto_query_init(proto_query *q);

/* proto_query_parse: init q, then parse the len bytes of a raw query
 * string (the part after '?'; a leading '?' is skipped): pairs separated
 * by '&', "key=value" or "key", '+' and %HH decoded. Returns MS_OK or
 * MS_ERR_FORMAT / MS_ERR_RANGE / MS_ERR_LIMIT / MS_ERR_UNSUPPORTED with a
 * readable message for the client. */
int proto_query_parse(proto_query *q, const char *qs, size_t len, ms_error *err);

/* proto_query_set: apply one already URL-decoded pair (for servers whose
 * HTTP library decodes the arguments). Same rules and errors as parse. */
int proto_query_set(proto_query *q, const char *key, size_t klen, const char *val, size_t vlen,
                    ms_error *err);

/* proto_query_has: whether parameter id (PROTO_Q_*) was given. */
static inline bool proto_query_has(const proto_query *q, int id) {
    return (q->present >> id) & 1u;
}

/* proto_query_param_name: "text_temperature", ... ("?" out of range). */
const char *proto_query_param_name(int id);

/* What proto_query_finish checks against. */
typedef struct proto_query_limits {
    int text_card;          /* text vocabulary size (top-k bound) */
    int audio_card;         /* audio codebook size (top-k bound) */
    int64_t max_steps_cap;  /* configuration's maximum session steps; 0 = none */
} proto_query_limits;

/* proto_query_finish: check top-k against the cards (MS_ERR_RANGE) and cap
 * max_steps at lim->max_steps_cap (sets max_steps_capped). */
int proto_query_finish(proto_query *q, const proto_query_limits *lim, ms_error *err);

/* proto_query_text_seed / _audio_seed: the seed to use: the specific
 * parameter when given, else `seed`, else PROTO_SEED_RANDOM. */
int64_t proto_query_text_seed(const proto_query *q);
int64_t proto_query_audio_seed(const proto_query *q);

#endif
