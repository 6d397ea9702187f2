/* spm.h - SentencePiece model reader: the piece table of a `.model` file
 * (a protobuf ModelProto), enough to turn sampled text tokens into text.
 *
 * Only the pieces are read (ModelProto field 1: SentencePiece messages with
 * piece = field 1, score = 2, type = 3); every other field is skipped by
 * wire type. The protobuf reader is bounded: the file size, the number of
 * pieces, the length of a piece and every length and varint are checked.
 * Encoding (text to ids) is spm_enc.h, in the engine I/O library: it
 * links the SentencePiece library itself and reads the same file.
 */
#ifndef MOSHID_SPM_H
#define MOSHID_SPM_H

#include "err.h"

#define SPM_MAX_FILE_BYTES (64u << 20)  /* refuse larger .model files */
#define SPM_MAX_PIECES (1u << 20)        /* refuse more pieces */
#define SPM_MAX_PIECE_BYTES 4096u        /* refuse longer pieces */

typedef struct spm_model spm_model;

/* spm_load: read the SentencePiece model at path. Returns the model (free
 * with spm_free) or NULL with err set: MS_ERR_IO (cannot read),
 * MS_ERR_FORMAT (not a valid model: truncated, bad varint, length past the
 * end, empty or non-UTF-8 piece, no pieces), MS_ERR_LIMIT (a limit above),
 * MS_ERR_NOMEM. Thread-safe; the model is immutable once loaded. */
spm_model *spm_load(const char *path, ms_error *err);

/* spm_piece: the text of piece id, with U+2581 (the word-boundary mark)
 * replaced by a space; NULL when id is out of range. Borrowed from m. */
const char *spm_piece(const spm_model *m, int id);

/* spm_size: number of pieces (the text vocabulary size). */
int spm_size(const spm_model *m);

/* spm_free: release m (NULL is fine). */
void spm_free(spm_model *m);

#endif
