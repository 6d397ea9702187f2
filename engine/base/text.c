/* text.c - UTF-8 well-formedness, host names, printable excerpts. */
#include "text.h"

#include <string.h>

size_t text_utf8_len(const uint8_t *s, size_t n) {
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

bool text_utf8_valid(const void *p, size_t len) {
    const uint8_t *s = p;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) { i++; continue; }
        size_t l = text_utf8_len(s + i, len - i);
        if (l == 0) return false;
        i += l;
    }
    return true;
}

bool text_is_hostname(const char *s, size_t n) {
    if (n == 0 || n > TEXT_HOST_MAX) return false;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '.') {
            if (label == 0 || s[i - 1] == '-') return false;
            label = 0;
            continue;
        }
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  (ch == '-' && label > 0);
        if (!ok || ++label > TEXT_HOST_LABEL_MAX) return false;
    }
    return s[n - 1] != '-';
}

const char *text_shown(const char *s, size_t max, char *buf, size_t len) {
    size_t n = 0;
    for (; s[n] && n < max && n + 4 < len; n++) buf[n] = (s[n] >= 0x20 && s[n] < 0x7f) ? s[n] : '?';
    if (s[n] && n + 4 <= len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}
