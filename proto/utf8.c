/* utf8.c - UTF-8 validation (RFC 3629 well-formedness). */
#include "utf8.h"

size_t proto_utf8_seq_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* no overlongs */
        if (c == 0xED) hi = 0x9F;      /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;      /* no overlongs */
        if (c == 0xF4) hi = 0x8F;      /* nothing above U+10FFFF */
    } else {
        return 0;                      /* continuation byte, C0, C1, F5..FF */
    }
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

bool proto_utf8_valid(const void *p, size_t len) {
    const uint8_t *s = p;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) { i++; continue; }
        size_t l = proto_utf8_seq_len(s + i, len - i);
        if (l == 0) return false;
        i += l;
    }
    return true;
}
