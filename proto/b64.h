/* b64.h - base64 (RFC 4648 section 4, the standard alphabet with '='
 * padding) for audio carried in JSON (the /v1/realtime events). Pure. */
#ifndef MOSHID_PROTO_B64_H
#define MOSHID_PROTO_B64_H

#include <stddef.h>
#include <stdint.h>

/* proto_b64_encoded_len: characters proto_b64_encode writes for n bytes
 * (without the NUL). */
static inline size_t proto_b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }
/* proto_b64_decoded_max: the most bytes n characters decode to. */
static inline size_t proto_b64_decoded_max(size_t n) { return n / 4 * 3 + 3; }

/* proto_b64_encode: n bytes of in -> out (proto_b64_encoded_len(n) + 1
 * bytes of room, NUL-terminated). Returns the characters written. */
size_t proto_b64_encode(const uint8_t *in, size_t n, char *out);

/* proto_b64_decode: n characters of in -> out (cap bytes). Strict: only
 * the alphabet, the length a multiple of 4, '=' only as the last one or
 * two characters, no white space. Returns the bytes written, or -1 when
 * the text is not base64 (or out is too small); *bad (if not NULL) is
 * the offset of the first character refused. */
long proto_b64_decode(const char *in, size_t n, uint8_t *out, size_t cap, size_t *bad);

#endif
