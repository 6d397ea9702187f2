/* prime_io.h - a PersonaPlex prompt read from files (hostile input: every
 * value range-checked, sizes bounded), for moshi-run and the daemon.
 *
 *   voice codes:  text, one voice frame per line, 8 agent codes in [0, card)
 *   voice saved:  safetensors, "embeddings" [T, dim] (F32/F16/BF16, finite)
 *                 and "cache" [17, max_delay + 3] (I32 or I64, tokens in
 *                 [-2, card], text row [-2, text_card]): a PersonaPlex `.pt`
 *                 voice converted (personas.md); or the `.pt` itself as
 *                 NVIDIA publishes it (torch.save of {"embeddings" (T, 1,
 *                 1, dim), "cache" (1, 17, R)}, read by pt.h without
 *                 Python), recognised by its zip signature
 *   text ids:     text, whitespace-separated ids in [0, text_card)
 *   silence/sine: text, 8 codes in [0, card) (the codec's SILENCE / SINE
 *                 frames; the released Mimi's are built in)
 */
#ifndef MOSHID_PRIME_IO_H
#define MOSHID_PRIME_IO_H

#include "err.h"
#include "lm_config.h"
#include "prime.h"

/* Largest prompt text file read, bytes. */
#define PP_IO_MAX_TEXT_BYTES (16 << 20)

typedef struct pp_prompt_paths {
    const char *voice_codes;   /* or NULL */
    const char *voice_saved;   /* or NULL (not with voice_codes) */
    const char *text_ids;      /* or NULL */
    const char *silence;       /* or NULL: the released Mimi's */
    const char *sine;          /* or NULL: the released Mimi's */
    int silence_frames;        /* < 0: PP_PRIME_SILENCE_FRAMES */
} pp_prompt_paths;

/* A loaded prompt: p points into the buffers; do not move it. */
typedef struct pp_prompt_buf {
    pp_prompt p;
    int *voice, *text, *cache;
    float *embs;
    int silence[PP_SIDE_CODEBOOKS], sine[PP_SIDE_CODEBOOKS];
} pp_prompt_buf;

/* pp_prompt_load: read the files named in paths for model c into pb
 * (pp_prompt_buf_free it, also after an error). Returns MS_OK or an error
 * naming the file and line or tensor. */
int pp_prompt_load(pp_prompt_buf *pb, const pp_prompt_paths *paths, const lm_config *c, ms_error *err);
void pp_prompt_buf_free(pp_prompt_buf *pb);

/* pp_read_ints: every whitespace-separated integer of a text file into a
 * new array (caller frees), each in [lo, hi], at most max of them. */
int pp_read_ints(const char *path, long lo, long hi, int max, int **out, int *n, ms_error *err);

#endif
