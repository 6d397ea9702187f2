/* text.h - checks and shows bytes that come from outside (the wire, files,
 * the command line), pure: UTF-8 well-formedness (RFC 3629), host names
 * (RFC 1123), and a printable excerpt for messages. */
#ifndef MOSHID_TEXT_H
#define MOSHID_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEXT_HOST_MAX 253      /* longest host name, bytes (RFC 1035) */
#define TEXT_HOST_LABEL_MAX 63 /* longest label of one, bytes */

/* text_utf8_len: length (1..4) of the well-formed UTF-8 sequence that
 * starts at s (n bytes available), or 0 when there is none: truncated,
 * overlong, a surrogate, above U+10FFFF, or a stray continuation byte. */
size_t text_utf8_len(const uint8_t *s, size_t n);

/* text_utf8_valid: whether all len bytes at s are well-formed UTF-8. */
bool text_utf8_valid(const void *s, size_t len);

/* text_is_hostname: whether s[0..n) is a host name: dot-separated labels of
 * 1..63 letters, digits and inner hyphens, at most TEXT_HOST_MAX bytes in
 * all (an IPv4 literal passes too). */
bool text_is_hostname(const char *s, size_t n);

/* text_shown: the NUL-terminated s, safe to print in a message: its first
 * max bytes at most, bytes outside printable ASCII replaced by '?', "..."
 * appended when cut; written to buf (len bytes, len >= 4), which it returns. */
const char *text_shown(const char *s, size_t max, char *buf, size_t len);

#endif
