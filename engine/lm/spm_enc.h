/* spm_enc.h - SentencePiece encoding: text to token ids, the ids the Python
 * `sentencepiece` package's `encode(text)` returns (no BOS/EOS, default
 * options), computed by Debian's libsentencepiece (C++) behind a C API.
 *
 * In the engine I/O library (libengine_io.a), not the engine core: the core
 * builds with a C compiler only. Link with $(SPM_ENC_LIBS) (engine/lm/lm.mk).
 * Decoding (ids to pieces) stays in spm.h, which reads the same `.model`
 * file with its own bounded reader and needs no library.
 *
 * Every error is a return code with a message: the C++ side catches all
 * exceptions at this boundary. Text is checked before the library sees it
 * (length, UTF-8), so hostile input (a client's role prompt) never reaches
 * it unchecked.
 */
#ifndef MOSHID_SPM_ENC_H
#define MOSHID_SPM_ENC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "err.h" /* C declarations: inside the extern "C" block for the C++ side */

/* Longest text spm_encode accepts, bytes. A role prompt is a few KB; the
 * library's time and memory grow with the length (a lattice per word). */
#define SPM_ENC_MAX_TEXT_BYTES (1u << 20)

typedef struct spm_enc spm_enc;

/* spm_enc_load: load the SentencePiece model at path (the `.model` file
 * spm_load reads; at most SPM_MAX_FILE_BYTES). Returns the encoder (free
 * with spm_enc_free) or NULL with err set: MS_ERR_IO (cannot read, not a
 * regular file), MS_ERR_LIMIT (too large), MS_ERR_FORMAT (the library
 * refuses the model; its message is quoted), MS_ERR_NOMEM. */
spm_enc *spm_enc_load(const char *path, ms_error *err);

/* spm_encode: the ids of text[0..len) (UTF-8; NUL bytes are characters like
 * any other; text may be NULL when len is 0). Writes up to cap ids to ids
 * (ids may be NULL when cap is 0) and the number of ids the text encodes to
 * into *n, also when they do not fit. Returns MS_OK, or:
 *   MS_ERR_LIMIT   len > SPM_ENC_MAX_TEXT_BYTES (*n = 0), or *n > cap (the
 *                  first cap ids are written: call again with room for *n);
 *   MS_ERR_FORMAT  text is not UTF-8 (the byte offset is named; *n = 0):
 *                  overlong forms, surrogates and code points past U+10FFFF
 *                  are refused, as Python refuses to encode such a str;
 *   MS_ERR_NOMEM, MS_ERR_STATE  the library failed (message quoted).
 * Ids are in [0, spm_enc_size(e)). Thread-safe: e is only read, any number
 * of threads may encode with it at once. */
int spm_encode(const spm_enc *e, const char *text, size_t len, int *ids, size_t cap, size_t *n,
               ms_error *err);

/* spm_enc_size: number of pieces of the model (equals spm_size of the same
 * file's spm_model). */
int spm_enc_size(const spm_enc *e);

/* spm_enc_free: release e (NULL is fine). */
void spm_enc_free(spm_enc *e);

#ifdef __cplusplus
}
#endif

#endif
