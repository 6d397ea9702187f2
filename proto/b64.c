/* b64.c - base64 encode and strict decode (b64.h). */
#include "b64.h"

static const char b64_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t proto_b64_encode(const uint8_t *in, size_t n, char *out) {
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_alpha[v >> 18];
        out[o++] = b64_alpha[(v >> 12) & 63];
        out[o++] = b64_alpha[(v >> 6) & 63];
        out[o++] = b64_alpha[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = b64_alpha[v >> 18];
        out[o++] = b64_alpha[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_alpha[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

/* The value of one alphabet character, or -1. */
static int b64_val(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

long proto_b64_decode(const char *in, size_t n, uint8_t *out, size_t cap, size_t *bad) {
    size_t o = 0;
    if (bad) *bad = n;
    if (n % 4) {
        if (bad) *bad = n;
        return -1;
    }
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char ch = (unsigned char)in[i + k];
            if (ch == '=' && i + 4 == n && k >= 2 && (k == 3 || in[i + 3] == '=')) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64_val(ch)) < 0) {
                if (bad) *bad = i + (size_t)k;
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        size_t take = 3 - (size_t)pad;
        if (o + take > cap) {
            if (bad) *bad = i;
            return -1;
        }
        out[o++] = (uint8_t)(w >> 16);
        if (take > 1) out[o++] = (uint8_t)(w >> 8);
        if (take > 2) out[o++] = (uint8_t)w;
    }
    return (long)o;
}
