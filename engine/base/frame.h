/* frame.h - the one frame geometry moshid serves: Mimi frames of 1920
 * samples at 24 kHz, 80 ms, 12.5 frames a second. Everything that cuts,
 * counts or times frames (the codec check at load, the daemon's audio path,
 * the scheduler, the protocol's metadata) uses these names. */
#ifndef MOSHID_FRAME_H
#define MOSHID_FRAME_H

#define MS_SAMPLE_RATE_HZ 24000                  /* model sample rate */
#define MS_FRAME_SAMPLES 1920                    /* samples per frame */
#define MS_FRAME_MS 80.0                         /* ms per frame */
#define MS_FRAMES_PER_S (1000.0 / MS_FRAME_MS)   /* 12.5 */

#endif
