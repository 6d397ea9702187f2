/* msg.h - WebSocket message framing of the Moshi protocol (pure, no I/O).
 *
 * Every message is binary: byte 0 is the kind, the rest is the payload
 * (docs/protocol.md). This module classifies incoming messages and builds
 * outgoing ones into a caller buffer, optionally leaving headroom in front
 * (libwebsockets needs LWS_PRE bytes before the payload it writes).
 *
 * Parsing never fails on content: an incoming message is classified (known
 * kind, empty, unknown kind, oversize) and the caller decides what to do.
 * All functions are pure and thread-safe.
 */
#ifndef MOSHID_PROTO_MSG_H
#define MOSHID_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "text.h"

/* Protocol version carried in the handshake (u32 LE after the kind byte). */
#define PROTO_VERSION 0u
/* Size of the handshake message: kind + u32 version + u32 model version. */
#define PROTO_HANDSHAKE_BYTES 9u

/* What the server does with a kind when a client sends it. */
enum {
    PROTO_IN_IGNORE = 0, /* count and drop */
    PROTO_IN_AUDIO,      /* Ogg Opus pages: decode */
};

/* X(enum name, wire value, name, what the server does when a client sends it) */
#define PROTO_MSG_KINDS(X)                                  \
    X(PROTO_MSG_HANDSHAKE, 0x00, "handshake", PROTO_IN_IGNORE) \
    X(PROTO_MSG_AUDIO, 0x01, "audio", PROTO_IN_AUDIO)        \
    X(PROTO_MSG_TEXT, 0x02, "text", PROTO_IN_IGNORE)         \
    X(PROTO_MSG_CONTROL, 0x03, "control", PROTO_IN_IGNORE)   \
    X(PROTO_MSG_METADATA, 0x04, "metadata", PROTO_IN_IGNORE) \
    X(PROTO_MSG_ERROR, 0x05, "error", PROTO_IN_IGNORE)       \
    X(PROTO_MSG_PING, 0x06, "ping", PROTO_IN_IGNORE)

enum {
#define PROTO_MSG_ENUM(e, v, name, in) e = v,
    PROTO_MSG_KINDS(PROTO_MSG_ENUM)
#undef PROTO_MSG_ENUM
    PROTO_MSG__COUNT /* kinds are 0 .. PROTO_MSG__COUNT-1 */
};

/* Classification of an incoming message. */
#define PROTO_CLASSES(X)                                              \
    X(PROTO_CLASS_OK, "ok")             /* known kind, payload valid */ \
    X(PROTO_CLASS_EMPTY, "empty")       /* zero bytes: no kind */        \
    X(PROTO_CLASS_UNKNOWN, "unknown")   /* kind byte not in the table */ \
    X(PROTO_CLASS_OVERSIZE, "oversize") /* longer than the limit */

enum {
#define PROTO_CLASS_ENUM(e, name) e,
    PROTO_CLASSES(PROTO_CLASS_ENUM)
#undef PROTO_CLASS_ENUM
    PROTO_CLASS__COUNT
};

/* An incoming message: a view into the caller's buffer. */
typedef struct proto_msg {
    int cls;                /* PROTO_CLASS_* */
    int kind;               /* byte 0 (0..255), -1 when empty */
    const uint8_t *payload; /* borrowed from the parsed buffer; NULL when none */
    size_t payload_len;     /* bytes after the kind byte */
} proto_msg;

/* proto_msg_parse: classify the len bytes at buf (borrowed; the view in *out
 * points into it). max_bytes is the largest accepted message (kind byte
 * included; 0 means no limit). An oversize message is classified as such
 * without looking at its payload (payload NULL), but its kind is reported.
 * Returns out->cls. */
int proto_msg_parse(const uint8_t *buf, size_t len, size_t max_bytes, proto_msg *out);

/* proto_msg_kind_name: "audio", ... for a table kind, "unknown" otherwise. */
const char *proto_msg_kind_name(int kind);
/* proto_msg_class_name: "ok", "empty", "unknown", "oversize". */
const char *proto_msg_class_name(int cls);
/* proto_msg_in_action: PROTO_IN_* for a kind a client sent (unknown kinds
 * and out-of-range values: PROTO_IN_IGNORE). */
int proto_msg_in_action(int kind);

/* proto_msg_build: write a message of the given kind at buf + headroom:
 * the kind byte then len payload bytes copied from payload (memmove: the
 * payload may already sit at buf + headroom + 1). cap is the size of buf,
 * headroom included. Sets *out_len to the message length (kind byte +
 * payload, headroom excluded). Errors: MS_ERR_ARG for a kind outside the
 * table, MS_ERR_LIMIT when cap is too small. */
int proto_msg_build(uint8_t *buf, size_t cap, size_t headroom, int kind,
                    const void *payload, size_t len, size_t *out_len, ms_error *err);

/* proto_msg_build_handshake: the 9-byte handshake (kind 0, u32 LE protocol
 * version PROTO_VERSION, u32 LE model_version) at buf + headroom. */
int proto_msg_build_handshake(uint8_t *buf, size_t cap, size_t headroom,
                              uint32_t model_version, size_t *out_len, ms_error *err);

/* proto_msg_build_text / _metadata: kind 2 / kind 4 with len bytes of
 * UTF-8 (metadata: a JSON document the caller wrote). Invalid UTF-8 is
 * refused (MS_ERR_FORMAT). */
int proto_msg_build_text(uint8_t *buf, size_t cap, size_t headroom, const char *text,
                         size_t len, size_t *out_len, ms_error *err);
int proto_msg_build_metadata(uint8_t *buf, size_t cap, size_t headroom, const char *json,
                             size_t len, size_t *out_len, ms_error *err);

/* Longest error message text sent to a client, bytes. */
#define PROTO_ERROR_TEXT_MAX 1024u

/* proto_msg_build_error: kind 5 with the NUL-terminated message text,
 * truncated to PROTO_ERROR_TEXT_MAX bytes and to cap, at a UTF-8 character
 * boundary; invalid UTF-8 bytes are replaced by '?'. Fails only when cap
 * cannot hold headroom + the kind byte. */
int proto_msg_build_error(uint8_t *buf, size_t cap, size_t headroom, const char *text,
                          size_t *out_len, ms_error *err);

/* WebSocket close statuses moshid sends or names (RFC 6455 7.4.1), one
 * table: the enum below, and CLOSE of the page (daemon/web/wire_gen.js,
 * written by `make web-gen`). ABNORMAL is never sent: a client reports it
 * when the connection ends without a close frame. */
#define PROTO_CLOSE_CODES(X)                                              \
    X(NORMAL, 1000)         /* the session is over */                     \
    X(GOING_AWAY, 1001)     /* the server is shutting down */             \
    X(PROTOCOL_ERROR, 1002) /* a frame against RFC 6455 */                \
    X(ABNORMAL, 1006)       /* no close frame (never sent) */             \
    X(BAD_DATA, 1007)       /* a close reason that is not UTF-8 */        \
    X(POLICY, 1008)         /* the client broke a rule of the protocol */ \
    X(TOO_BIG, 1009)        /* a message over the size limit */           \
    X(INTERNAL, 1011)       /* the server failed */                       \
    X(TRY_LATER, 1013)      /* busy or overloaded: retry later */
#define PROTO_CLOSE_ENUM(name, code) PROTO_CLOSE_##name = code,
enum proto_close_code { PROTO_CLOSE_CODES(PROTO_CLOSE_ENUM) };
#undef PROTO_CLOSE_ENUM

/* Longest WebSocket close reason, bytes: a control frame carries at most 125
 * payload bytes (RFC 6455 section 5.5), 2 of them the status code. */
#define PROTO_CLOSE_REASON_MAX 123u

/* proto_msg_close_reason: the close reason that goes with an error text:
 * the text proto_msg_build_error sends in the kind-5 message (invalid UTF-8
 * bytes replaced by '?'), cut to at most PROTO_CLOSE_REASON_MAX bytes at a
 * character boundary, so it is always a prefix of that message's text and
 * valid UTF-8: the reason reaches every WebSocket client, also those that
 * drop kind 5 (moshi.client prints "unknown message kind 5"; no official
 * client shows either today, but a library or a log of the close does).
 * Writes it NUL-terminated into dst; returns its length. */
size_t proto_msg_close_reason(char dst[PROTO_CLOSE_REASON_MAX + 1], const char *text);

#endif
