/* g711.c - G.711 companding (g711.h), after the reference algorithm of
 * ITU-T G.191 (g711.c there): segment search on the magnitude, 4 bits of
 * mantissa, mu-law biased by 0x84 (33 in 14-bit units), A-law with the even
 * bits inverted (0x55). */
#include "g711.h"

#define ULAW_BIAS 0x84
#define ULAW_CLIP 32635

uint8_t proto_ulaw_encode(int16_t pcm) {
    int v = pcm, sign = 0;
    if (v < 0) {
        v = -v;
        sign = 0x80;
    }
    if (v > ULAW_CLIP) v = ULAW_CLIP;
    v += ULAW_BIAS;
    int seg = 7;
    for (int mask = 0x4000; (v & mask) == 0 && seg > 0; mask >>= 1) seg--;
    int mant = (v >> (seg + 3)) & 0x0f;
    return (uint8_t)~(sign | (seg << 4) | mant);
}

int16_t proto_ulaw_decode(uint8_t u) {
    u = (uint8_t)~u;
    int seg = (u >> 4) & 7, mant = u & 0x0f;
    int v = ((mant << 3) + ULAW_BIAS) << seg;
    v -= ULAW_BIAS;
    return (int16_t)(u & 0x80 ? -v : v);
}

uint8_t proto_alaw_encode(int16_t pcm) {
    int v = pcm >> 3, sign = 0x80; /* 13-bit magnitude */
    if (v < 0) {
        v = -v - 1;
        sign = 0;
    }
    if (v > 0xfff) v = 0xfff;
    int seg = 0;
    for (int t = v >> 5; t; t >>= 1) seg++;
    int mant = seg ? (v >> seg) & 0x0f : (v >> 1) & 0x0f;
    return (uint8_t)((sign | (seg << 4) | mant) ^ 0x55);
}

int16_t proto_alaw_decode(uint8_t a) {
    a ^= 0x55;
    int seg = (a >> 4) & 7, mant = a & 0x0f;
    int v = (mant << 4) + 8;
    if (seg) v = (v + 0x100) << (seg - 1);
    return (int16_t)(a & 0x80 ? v : -v);
}
