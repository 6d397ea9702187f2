/* utf8.h - UTF-8 validation for text that crosses the wire (pure). */
#ifndef MOSHID_PROTO_UTF8_H
#define MOSHID_PROTO_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* proto_utf8_seq_len: length (1..4) of the well-formed UTF-8 sequence that
 * starts at s (n bytes available), or 0 when there is none: truncated,
 * overlong, a surrogate, above U+10FFFF, or a stray continuation byte. */
size_t proto_utf8_seq_len(const uint8_t *s, size_t n);

/* proto_utf8_valid: whether all len bytes at s are well-formed UTF-8. */
bool proto_utf8_valid(const void *s, size_t len);

#endif
