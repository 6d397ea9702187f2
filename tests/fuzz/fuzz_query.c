/* fuzz_query.c - libFuzzer target: /api/chat query string parsing.
 *
 * Invariants on success: every value within its documented range, names
 * free of path separators, text_prompt within its limit and its stated
 * length. Then top-k is checked against small cards. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"

static proto_query q; /* 8 KB: keep it off the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ms_error e;
    int rc = proto_query_parse(&q, (const char *)data, size, &e);
    if (rc != MS_OK) {
        if (e.msg[0] == 0) abort(); /* every refusal says why */
        return 0;
    }
    if (proto_query_has(&q, PROTO_Q_TEXT_TEMPERATURE) &&
        !(isfinite(q.text_temperature) && q.text_temperature >= 0 && q.text_temperature <= PROTO_TEMPERATURE_MAX))
        abort();
    if (proto_query_has(&q, PROTO_Q_AUDIO_TEMPERATURE) &&
        !(isfinite(q.audio_temperature) && q.audio_temperature >= 0 && q.audio_temperature <= PROTO_TEMPERATURE_MAX))
        abort();
    if (proto_query_has(&q, PROTO_Q_TEXT_TOPK) && (q.text_topk < 1 || q.text_topk > PROTO_TOPK_MAX)) abort();
    if (proto_query_text_seed(&q) < -1 || proto_query_audio_seed(&q) < -1) abort();
    if (proto_query_has(&q, PROTO_Q_MAX_STEPS) && q.max_steps < 1) abort();
    if (proto_query_has(&q, PROTO_Q_VOICE_PROMPT) &&
        (strchr(q.voice_prompt, '/') || strstr(q.voice_prompt, "..") || q.voice_prompt[0] == 0))
        abort();
    if (q.text_prompt_len > PROTO_TEXT_PROMPT_MAX || strlen(q.text_prompt) != q.text_prompt_len) abort();
    if (q.ignored > q.params || q.params > PROTO_QUERY_MAX_PARAMS) abort();
    proto_query_limits lim = {.text_card = 100, .audio_card = 50, .max_steps_cap = 10};
    if (proto_query_finish(&q, &lim, &e) == MS_OK) {
        if (proto_query_has(&q, PROTO_Q_MAX_STEPS) && q.max_steps > 10) abort();
        if (proto_query_has(&q, PROTO_Q_AUDIO_TOPK) && q.audio_topk > 50) abort();
    }
    return 0;
}
