/* prompt.h - the pieces of a persona prompt that are plain rules, kept apart
 * so that they can be tested alone: the role-text wrapper
 * (shared/spec/personas.md), voice names as clients send them
 * (voice_prompt=NATF0.pt) and the files they map to, and the key a
 * primed persona is cached under. No model, no threads: any thread.
 */
#ifndef MOSHID_PROMPT_H
#define MOSHID_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Longest voice name a client may send, bytes (the query's limit). */
#define PROMPT_VOICE_NAME_MAX 128
/* The wrapper's tag. */
#define PROMPT_SYSTEM_TAG "<system>"

/* prompt_role_text: the text the tokenizer gets for a role prompt of len
 * bytes: white space (Python's str.strip set: ASCII and Unicode spaces)
 * stripped from both ends, then "<system> " + text + " <system>" unless
 * the stripped text already starts and ends with "<system>". An empty
 * prompt (len 0, before stripping) has no role phase: returns 0 with *out
 * NULL. Otherwise returns MS_OK with *out (NUL-terminated, caller frees)
 * and *out_len; MS_ERR_NOMEM. */
int prompt_role_text(const char *text, size_t len, char **out, size_t *out_len);

/* prompt_voice_name_check: a voice name as a client may give it: 1 ..
 * PROMPT_VOICE_NAME_MAX bytes, valid UTF-8, no '/', '\\', ':' or control
 * character, not starting with '.', no ".." anywhere. Returns 0, or 1 with
 * the reason in why[0..len). */
int prompt_voice_name_check(const char *name, char *why, size_t len);

typedef enum { PROMPT_VOICE_SAVED = 0, PROMPT_VOICE_AUDIO = 1 } prompt_voice_kind;

/* prompt_voice_kind_of: SAVED for a path ending in ".safetensors" or ".pt", AUDIO
 * for any other (libsndfile decides what it reads). */
prompt_voice_kind prompt_voice_kind_of(const char *path);

/* prompt_voice_find: the file in dir a client's voice name stands for. The
 * name's last extension, whatever it is, is dropped (NATF0.pt, NATF0.wav
 * and NATF0 all mean the stem NATF0); the first regular file of
 * STEM.safetensors (a converted .pt), STEM.pt (NVIDIA's voice file as
 * published, read by engine/base/pt.h), STEM.wav, STEM.flac, STEM.ogg is
 * taken. Writes its path (cap bytes) and kind. MS_ERR_ARG for a bad name
 * (prompt_voice_name_check), MS_ERR_NOTFOUND when none exists, MS_ERR_LIMIT
 * when the path does not fit. */
int prompt_voice_find(const char *dir, const char *name, char *path, size_t cap, prompt_voice_kind *kind,
                      ms_error *err);

/* The key a primed persona is cached under: the checkpoint, the voice
 * file's identity (real path, size, modification time: a file replaced
 * under the same name is a new voice), the role text's ids and the
 * silence frames. */
typedef struct prompt_key {
    uint8_t *b;      /* owned */
    size_t n;
    uint64_t hash;   /* FNV-1a 64 of b */
} prompt_key;

/* prompt_key_make: the key of (model_id, voice path or NULL/"" for none,
 * ids). Stats the voice file: MS_ERR_IO when it is gone or not a regular
 * file. */
int prompt_key_make(prompt_key *k, const char *model_id, const char *voice, const int *ids, int n_ids,
                    int silence_frames, ms_error *err);
/* prompt_key_copy: a deep copy (dst needs prompt_key_free). */
void prompt_key_copy(prompt_key *dst, const prompt_key *src);
int prompt_key_equal(const prompt_key *a, const prompt_key *b);
void prompt_key_free(prompt_key *k);
/* prompt_hash: FNV-1a 64 of n bytes. */
uint64_t prompt_hash(const void *b, size_t n);

#endif
