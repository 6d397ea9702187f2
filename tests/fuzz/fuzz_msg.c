/* fuzz_msg.c - libFuzzer target: message classification and builders.
 *
 * The input is parsed as an incoming message (with a limit taken from its
 * length), and its bytes are used as text/metadata/error payloads to build
 * outgoing messages, which must parse back to the same kind and payload. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"
#include "text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    proto_msg m;
    size_t limit = size ? data[0] * 4u : 0;
    int c = proto_msg_parse(data, size, limit, &m);
    if (c < 0 || c >= PROTO_CLASS__COUNT) abort();
    if (c == PROTO_CLASS_OK && (m.payload != data + 1 || m.payload_len != size - 1)) abort();
    if (c != PROTO_CLASS_OK && m.payload) abort();
    (void)proto_msg_kind_name(m.kind);
    (void)proto_msg_in_action(m.kind);

    static uint8_t buf[16 + 1 + 70000];
    size_t n;
    ms_error e;
    size_t cap = size + 17 < sizeof buf ? size + 17 : sizeof buf;
    int rc = proto_msg_build_text(buf, cap, 16, (const char *)data, size, &n, &e);
    if ((rc == MS_OK) != text_utf8_valid(data, size) && size + 17 <= sizeof buf) abort();
    if (rc == MS_OK) {
        if (proto_msg_parse(buf + 16, n, 0, &m) != PROTO_CLASS_OK || m.kind != PROTO_MSG_TEXT ||
            m.payload_len != size || (size && memcmp(m.payload, data, size)))
            abort();
    }
    /* error text: NUL-terminated copy, any bytes; the result is valid UTF-8 */
    char *t = malloc(size + 1);
    if (!t) return 0;
    if (size) memcpy(t, data, size);
    t[size] = 0;
    rc = proto_msg_build_error(buf, sizeof buf, 16, t, &n, &e);
    if (rc != MS_OK || buf[16] != PROTO_MSG_ERROR || n > PROTO_ERROR_TEXT_MAX + 1) abort();
    if (!text_utf8_valid(buf + 17, n - 1)) abort();
    free(t);
    rc = proto_msg_build_handshake(buf, size % 32, size % 7, 3, &n, &e);
    if (rc == MS_OK && (n != PROTO_HANDSHAKE_BYTES || size % 32 < size % 7 + 9)) abort();
    return 0;
}
