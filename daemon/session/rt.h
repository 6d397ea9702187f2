/* rt.h - the OpenAI Realtime view of a session (/v1/realtime,
 * docs/realtime.md): JSON events in text messages instead of /api/chat's
 * binary kinds, over the same core (sess.c: slot, persona, limits, close).
 * A sess_dialect; app.c installs it for SRV_EP_REALTIME. Loop thread.
 *
 * The mapping, in short: input audio streams into the model as it is
 * appended (no turns); the model's speech becomes responses, one opened
 * when it starts to speak (a text token, or audio above RT_SPEAK_RMS)
 * and closed after realtime.response_silence_ms of silence, each one
 * assistant message item with one audio content part, its transcript
 * from the text tokens; voice and instructions pick the persona before
 * the session starts; turn_detection runs an energy VAD that reports
 * speech_started / stopped and never creates or cancels responses.
 */
#ifndef MOSHID_RT_H
#define MOSHID_RT_H

#include "sess.h"

/* Output RMS (full scale 1.0) from which a frame counts as speech:
 * -40 dBFS. */
#define RT_SPEAK_RMS 0.01f
/* Bytes of a response's transcript kept for its .done events (the deltas
 * carry everything; past this the final transcript is cut). */
#define RT_TRANSCRIPT_MAX (64u * 1024u)
/* Largest server event, bytes (a transcript, instructions, escaped). */
#define RT_EVENT_OUT_MAX (1u << 20)

extern const sess_dialect rt_dialect;

#endif
