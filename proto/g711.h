/* g711.h - ITU-T G.711 mu-law and A-law (8-bit companded samples, 8 kHz
 * in telephony) <-> 16-bit linear PCM. Pure. */
#ifndef MOSHID_PROTO_G711_H
#define MOSHID_PROTO_G711_H

#include <stdint.h>

uint8_t proto_ulaw_encode(int16_t pcm);
int16_t proto_ulaw_decode(uint8_t u);
uint8_t proto_alaw_encode(int16_t pcm);
int16_t proto_alaw_decode(uint8_t a);

#endif
