/* fuzz_rt.c - libFuzzer target: the /v1/realtime client events
 * (proto/rt_event.c), and what the server does with their bytes: base64
 * (proto/b64.c), the JSON writer's escaping (proto/jw.c).
 *
 * Invariants: a refusal has a code and a message; an accepted event has a
 * known type and its fields within their limits (ids, names,
 * instructions, formats); base64 that decodes re-encodes to the same
 * text; any bytes written with jw_str read back as one JSON string
 * (js_parse; the same bytes when they were UTF-8), in valid UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "json.h"
#include "jw.h"
#include "rt_event.h"
#include "text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rt_event ev;
    rt_err err;
    int rc = rt_event_parse((const char *)data, size, &ev, &err);
    if (strlen(ev.event_id) > RT_ID_MAX) abort();
    if (rc != MS_OK) {
        if (!err.code[0] || !err.message[0] || !err.type) abort();
    } else {
        if ((unsigned)ev.type >= RT_EV__COUNT) abort();
        const rt_session_cfg *c = &ev.cfg;
        if (c->instructions_len > RT_INSTRUCTIONS_MAX || strlen(c->voice) > RT_NAME_MAX || strlen(c->model) > RT_NAME_MAX)
            abort();
        if ((c->set & RT_SET_INSTRUCTIONS) && !c->instructions) abort();
        if (c->in_fmt > RT_FMT_ALAW || c->out_fmt > RT_FMT_ALAW) abort();
        if (ev.type == RT_EV_APPEND && !ev.audio) abort();
        if (ev.audio) {
            size_t cap = proto_b64_decoded_max(ev.audio_len);
            uint8_t *buf = malloc(cap ? cap : 1);
            char *back = malloc(ev.audio_len + 8);
            long n = proto_b64_decode(ev.audio, ev.audio_len, buf, cap, NULL);
            if (n > (long)cap) abort();
            if (n >= 0) {
                size_t m = proto_b64_encode(buf, (size_t)n, back);
                if (m != ev.audio_len || memcmp(back, ev.audio, m) != 0) abort();
            }
            free(buf);
            free(back);
        }
    }
    rt_event_free(&ev);
    /* the writer: any bytes become one valid JSON string */
    jw w;
    jw_init(&w, 16 * size + 64);
    jw_str(&w, (const char *)data, size);
    size_t len = 0;
    char *out = jw_take(&w, &len);
    if (!out) abort();
    if (!text_utf8_valid(out, len)) abort();
    ms_error je;
    /* (the reader refuses a \u0000 escape: bytes holding a NUL are only
     * checked for UTF-8) */
    int nul = memchr(data, 0, size) != NULL;
    js_value *v = nul ? NULL : js_parse(out, len, &je);
    if (!nul && (!v || v->type != JS_STRING)) abort();
    if (v && text_utf8_valid(data, size) && (v->len != size || memcmp(v->str, data, size))) abort();
    js_free(v);
    free(out);
    return 0;
}
