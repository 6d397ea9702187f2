/* msg.c - Moshi protocol message classification and building. */
#include "msg.h"

#include <string.h>

static const char *const kind_names[PROTO_MSG__COUNT] = {
#define PROTO_MSG_NAME(e, v, name, in) [v] = name,
    PROTO_MSG_KINDS(PROTO_MSG_NAME)
#undef PROTO_MSG_NAME
};

static const int kind_in[PROTO_MSG__COUNT] = {
#define PROTO_MSG_IN(e, v, name, in) [v] = in,
    PROTO_MSG_KINDS(PROTO_MSG_IN)
#undef PROTO_MSG_IN
};

static const char *const class_names[PROTO_CLASS__COUNT] = {
#define PROTO_CLASS_NAME(e, name) [e] = name,
    PROTO_CLASSES(PROTO_CLASS_NAME)
#undef PROTO_CLASS_NAME
};

static bool kind_known(int kind) { return kind >= 0 && kind < PROTO_MSG__COUNT; }

const char *proto_msg_kind_name(int kind) {
    return kind_known(kind) ? kind_names[kind] : "unknown";
}

const char *proto_msg_class_name(int cls) {
    return cls >= 0 && cls < PROTO_CLASS__COUNT ? class_names[cls] : "invalid";
}

int proto_msg_in_action(int kind) { return kind_known(kind) ? kind_in[kind] : PROTO_IN_IGNORE; }

int proto_msg_parse(const uint8_t *buf, size_t len, size_t max_bytes, proto_msg *out) {
    MS_ASSERT(out != NULL);
    MS_ASSERT(buf != NULL || len == 0);
    out->kind = -1;
    out->payload = NULL;
    out->payload_len = 0;
    if (len == 0) return out->cls = PROTO_CLASS_EMPTY;
    out->kind = buf[0];
    if (max_bytes != 0 && len > max_bytes) return out->cls = PROTO_CLASS_OVERSIZE;
    if (!kind_known(out->kind)) return out->cls = PROTO_CLASS_UNKNOWN;
    out->payload = buf + 1;
    out->payload_len = len - 1;
    return out->cls = PROTO_CLASS_OK;
}

int proto_msg_build(uint8_t *buf, size_t cap, size_t headroom, int kind, const void *payload,
                    size_t len, size_t *out_len, ms_error *err) {
    MS_ASSERT(buf != NULL && out_len != NULL);
    MS_ASSERT(payload != NULL || len == 0);
    *out_len = 0;
    if (!kind_known(kind)) return ms_err_set(err, MS_ERR_ARG, "message kind %d not in the table", kind);
    if (headroom > cap || cap - headroom < 1 || cap - headroom - 1 < len)
        return ms_err_set(err, MS_ERR_LIMIT,
                          "%s message of %zu payload bytes does not fit in %zu bytes (headroom %zu)",
                          kind_names[kind], len, cap, headroom);
    if (len) memmove(buf + headroom + 1, payload, len);
    buf[headroom] = (uint8_t)kind;
    *out_len = len + 1;
    return MS_OK;
}

int proto_msg_build_handshake(uint8_t *buf, size_t cap, size_t headroom, uint32_t model_version,
                              size_t *out_len, ms_error *err) {
    uint8_t p[PROTO_HANDSHAKE_BYTES - 1];
    uint32_t v[2] = {PROTO_VERSION, model_version};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 4; i++) p[4 * w + i] = (uint8_t)(v[w] >> (8 * i));
    return proto_msg_build(buf, cap, headroom, PROTO_MSG_HANDSHAKE, p, sizeof p, out_len, err);
}

static int build_utf8(uint8_t *buf, size_t cap, size_t headroom, int kind, const char *s,
                      size_t len, size_t *out_len, ms_error *err) {
    MS_ASSERT(s != NULL || len == 0);
    *out_len = 0;
    if (len && !text_utf8_valid(s, len))
        return ms_err_set(err, MS_ERR_FORMAT, "%s message is not valid UTF-8", kind_names[kind]);
    return proto_msg_build(buf, cap, headroom, kind, s, len, out_len, err);
}

int proto_msg_build_text(uint8_t *buf, size_t cap, size_t headroom, const char *text, size_t len,
                         size_t *out_len, ms_error *err) {
    return build_utf8(buf, cap, headroom, PROTO_MSG_TEXT, text, len, out_len, err);
}

int proto_msg_build_metadata(uint8_t *buf, size_t cap, size_t headroom, const char *json,
                             size_t len, size_t *out_len, ms_error *err) {
    return build_utf8(buf, cap, headroom, PROTO_MSG_METADATA, json, len, out_len, err);
}

/* Copy the NUL-terminated text into dst, at most room bytes, never cutting
 * a character; each byte that does not start a well-formed UTF-8 sequence
 * becomes one '?'. Returns the bytes written. Greedy: the result for a
 * smaller room is a prefix of the result for a larger one. */
static size_t copy_utf8(uint8_t *dst, size_t room, const char *text) {
    const uint8_t *s = (const uint8_t *)text;
    size_t n = strlen(text), i = 0, o = 0;
    while (i < n) {
        size_t l = s[i] < 0x80 ? 1 : text_utf8_len(s + i, n - i);
        if (l == 0) { /* invalid byte: one '?' */
            if (o + 1 > room) break;
            dst[o++] = '?';
            i++;
            continue;
        }
        if (o + l > room) break; /* never cut a character */
        memcpy(dst + o, s + i, l);
        o += l;
        i += l;
    }
    return o;
}

int proto_msg_build_error(uint8_t *buf, size_t cap, size_t headroom, const char *text,
                          size_t *out_len, ms_error *err) {
    MS_ASSERT(buf != NULL && out_len != NULL && text != NULL);
    *out_len = 0;
    if (headroom > cap || cap - headroom < 1)
        return ms_err_set(err, MS_ERR_LIMIT, "error message does not fit in %zu bytes", cap);
    size_t room = cap - headroom - 1;
    if (room > PROTO_ERROR_TEXT_MAX) room = PROTO_ERROR_TEXT_MAX;
    size_t o = copy_utf8(buf + headroom + 1, room, text);
    buf[headroom] = PROTO_MSG_ERROR;
    *out_len = o + 1;
    return MS_OK;
}

size_t proto_msg_close_reason(char dst[PROTO_CLOSE_REASON_MAX + 1], const char *text) {
    MS_ASSERT(dst != NULL && text != NULL);
    size_t o = copy_utf8((uint8_t *)dst, PROTO_CLOSE_REASON_MAX, text);
    dst[o] = '\0';
    return o;
}
