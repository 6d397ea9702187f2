/* prime.h - PersonaPlex priming: the voice and role-text prompt that starts
 * a session, by single steps or by one prefill, the replay of saved voice
 * embeddings, and persona snapshots (shared/spec/personas.md).
 *
 * Phases, every stream forced (user = SINE tokens, text = PAD 3 unless
 * said otherwise), in calls of PersonaPlex's step (lmgen_pp.h):
 *   1 voice:   one call per voice frame, agent = the frame's 8 codes;
 *   2 silence: silence_frames calls, agent = SILENCE tokens;
 *   3 text:    one call per text id, text = the id, agent = SILENCE;
 *   4 silence: as 2.
 * Or, for phase 1, the replay of a saved voice (`.pt` converted to
 * embeddings [T, dim] + cache [17, R]) as PersonaPlex's step_embeddings
 * does: per row, calls with forced dummies (initial audio tokens, text
 * PAD) until one makes a model call, which reads the row instead of the
 * ring; then the saved ring is copied over the tokens (the provided flags
 * stay). From offset 0, T rows end at offset T + 1 with T positions: the
 * state that T + 1 voice frames stepped leave (their first call makes no
 * model call); T = 0 rows change nothing.
 *
 * Since every stream is provided at every target while priming, nothing
 * sampled is kept: the prime is the temporal K/V of its model calls plus
 * the ring bookkeeping. PP_PRIME_PREFILL runs the bookkeeping on the host
 * and all model calls as one lm_backend_prefill (causal over the prompt);
 * PP_PRIME_STEPS runs them as P single steps (the reference). Both end in
 * the same K/V (to rounding), ring, provided flags and offset.
 *
 * The role text is token ids: the caller tokenizes "<system> " + prompt +
 * " <system>" (personas.md); an empty list skips phase 3.
 * Threads: the engine thread.
 */
#ifndef MOSHID_PRIME_H
#define MOSHID_PRIME_H

#include <stdint.h>

#include "backend.h"
#include "lmgen.h"
#include "lmgen_pp.h"

/* Silence frames of phases 2 and 4 (0.5 s at 12.5 frames/s). */
#define PP_PRIME_SILENCE_FRAMES 6
/* Most calls of one prime (voice + silence + text + silence). */
#define PP_PRIME_MAX_CALLS 65536

/* Mimi codes of a silent frame and of a 440 Hz sine at 0.5, for the
 * released Mimi only (another codec encodes its own: pp_prompt). */
extern const int pp_silence_tokens_mimi[PP_SIDE_CODEBOOKS];
extern const int pp_sine_tokens_mimi[PP_SIDE_CODEBOOKS];

typedef enum { PP_PRIME_STEPS = 0, PP_PRIME_PREFILL = 1 } pp_prime_mode;

/* A prompt; every pointer borrowed for the duration of the call. */
typedef struct pp_prompt {
    const int *voice;          /* (n_voice, 8) agent codes of the voice frames, or NULL */
    int n_voice;
    const float *voice_embs;   /* (n_voice_embs, dim) saved rows (replaces voice), or NULL */
    int n_voice_embs;
    const int *voice_cache;    /* (17, max_delay + 3) saved ring, with voice_embs */
    const int *text;           /* (n_text) role text ids, or NULL */
    int n_text;
    const int *silence;        /* (8) SILENCE tokens of the codec */
    const int *sine;           /* (8) SINE tokens of the codec */
    int silence_frames;        /* phases 2 and 4 */
} pp_prompt;

/* pp_prompt_init: no voice, no text, the released Mimi's SILENCE/SINE,
 * PP_PRIME_SILENCE_FRAMES. */
void pp_prompt_init(pp_prompt *p);

/* pp_prime_frames: the forced calls of the prompt's token phases (1 when
 * voice codes are given, 2, 3, 4) as rows of PP_STREAMS tokens in stream
 * order (text, agent 0..7, user 0..7). Validates every token against c.
 * Returns the row count in *P and the rows in *rows (caller frees), or an
 * error. */
int pp_prime_frames(const lm_config *c, const pp_prompt *p, int **rows, int *P, ms_error *err);

/* pp_prime_rows: run P forced calls (rows from pp_prime_frames) on slot g
 * (backend slot g->slot) by mode. PP_PRIME_PREFILL needs every target
 * stream provided at every call (true from a fresh slot or after another
 * prime), else MS_ERR_STATE and nothing changed. */
int pp_prime_rows(lm_backend *b, lmgen_slot *g, const int *rows, int P, pp_prime_mode mode, ms_error *err);

/* pp_prime_plan: the host half of priming by prefill: run the bookkeeping
 * of P forced calls (rows from pp_prime_frames) on a copy of g; returns the
 * m model calls' input rows (*inputs, (m, PP_STREAMS), caller frees) and
 * the bookkeeping after them (*after). Prefilling the inputs at the slot's
 * next position, in any number of chunks, then taking *after is
 * pp_prime_rows by PP_PRIME_PREFILL. MS_ERR_STATE when a call would keep a
 * sample. */
int pp_prime_plan(lm_backend *b, const lmgen_slot *g, const int *rows, int P, int **inputs, int *m,
                  lmgen_slot *after, ms_error *err);

/* pp_replay_embeddings: phase 1 from saved rows: embs (T, dim) finite,
 * cache (17, R) tokens in [-2, card] ([-2, text_card] for text). mode
 * PP_PRIME_PREFILL: one prefill of T rows; PP_PRIME_STEPS: T prefills of
 * one row (the calls one by one). */
int pp_replay_embeddings(lm_backend *b, lmgen_slot *g, const float *embs, int T, const int *cache,
                         pp_prime_mode mode, ms_error *err);

/* pp_prime: the whole prompt on slot g: replay or voice frames, then
 * silence, text, silence. The slot need not be fresh for PP_PRIME_STEPS. */
int pp_prime(lm_backend *b, lmgen_slot *g, const pp_prompt *p, pp_prime_mode mode, ms_error *err);

/* A primed persona: the slot's K/V and bookkeeping, restorable into any
 * slot of the same backend. */
typedef struct pp_persona {
    lm_kv_snap *kv;            /* positions [0, pos) */
    int64_t pos;
    lmgen_slot st;             /* ring, provided flags, offset */
} pp_persona;

/* pp_persona_save: snapshot slot g (positions <= context). */
int pp_persona_save(lm_backend *b, const lmgen_slot *g, pp_persona *out, ms_error *err);
/* pp_persona_load: restore p into g (its slot and sampling are kept). */
int pp_persona_load(lm_backend *b, const pp_persona *p, lmgen_slot *g, ms_error *err);
/* pp_persona_close: free the snapshot (p itself is the caller's). */
void pp_persona_close(lm_backend *b, pp_persona *p);

#endif
