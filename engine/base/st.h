/* st.h - safetensors files: a validating, memory-mapped reader and a writer.
 *
 * Format: u64 little-endian header length N, then N bytes of JSON mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the byte after the header) plus an optional "__metadata__"
 * object of strings, then the data. The reader validates everything before
 * any tensor is handed out: header size limit, JSON, dtypes, shapes, sizes
 * against offsets, offsets inside the file, no two tensors overlapping, no
 * duplicate names. Tensor data stays in the read-only mapping; it may be
 * unaligned (the header length is arbitrary), so readers load elements with
 * memcpy or the st_load_* helpers.
 */
#ifndef MOSHID_ST_H
#define MOSHID_ST_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Largest header accepted, bytes (the official library's limit is 100 MB). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Most tensors in one file. */
#define ST_MAX_TENSORS 1000000
/* Most dimensions of one tensor. */
#define ST_MAX_DIMS 8
/* Longest tensor name, bytes. */
#define ST_MAX_NAME 1024

typedef enum { ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_U8, ST_BOOL, ST_I8, ST__NDTYPES } st_dtype;

typedef struct st_tensor {
    const char *name;              /* owned by the st_file */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];    /* (shape[0], ..., shape[ndim-1]) */
    uint64_t nel;                  /* product of shape (1 for a scalar) */
    const void *data;              /* inside the mapping; may be unaligned */
    size_t nbytes;
} st_tensor;

typedef struct st_file st_file;

/* st_open: map and validate path. Returns NULL with err set (the message
 * names the file and, where one is at fault, the tensor). Thread: any. */
st_file *st_open(const char *path, ms_error *err);
/* st_open_mem: validate a file image held in memory (borrowed, must outlive
 * the st_file); for tests and fuzzing. name is used in messages. */
st_file *st_open_mem(const void *buf, size_t len, const char *name, ms_error *err);
void st_close(st_file *f);

const char *st_path(const st_file *f);
size_t st_count(const st_file *f);
/* st_at: tensor i in header order (0 <= i < st_count). */
const st_tensor *st_at(const st_file *f, size_t i);
/* st_find: tensor by exact name, or NULL. O(log n). */
const st_tensor *st_find(const st_file *f, const char *name);

/* st_get: tensor `name` checked against ndim and shape (shape may be NULL to
 * skip the check; a shape entry of -1 matches any size). Float tensors are
 * accepted when float_ok and their dtype is F32/F16/BF16; otherwise the dtype
 * must equal want. NULL with err set ("FILE: tensor NAME: ...") otherwise. */
const st_tensor *st_get(const st_file *f, const char *name, int ndim,
                        const int64_t *shape, int float_ok, st_dtype want,
                        ms_error *err);

/* st_to_f32: convert n elements of a float tensor starting at element
 * `first` to float32 in dst. Returns MS_ERR_ARG if out of range or not a
 * float dtype. */
int st_to_f32(const st_tensor *t, uint64_t first, size_t n, float *dst);

size_t st_dtype_size(st_dtype d);
const char *st_dtype_name(st_dtype d);
/* st_dtype_parse: "F32" -> ST_F32 ...; -1 when unknown. */
int st_dtype_parse(const char *s);

/* Scalar conversions used by every reader of bf16/f16 data. */
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);    /* round to nearest even */

/* --- writer ----------------------------------------------------------- */

typedef struct st_writer st_writer;

/* st_fill_fn: writes nbytes of a tensor's data into dst; called once per
 * tensor while saving, so data need not all live in memory at once. */
typedef int (*st_fill_fn)(void *ctx, void *dst, size_t nbytes);

st_writer *st_writer_create(void);
void st_writer_free(st_writer *w);
/* st_writer_add: a tensor whose bytes are at data (borrowed until save). */
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim,
                  const int64_t *shape, const void *data);
/* st_writer_add_fn: a tensor whose bytes fill(ctx, ...) produces at save. */
int st_writer_add_fn(st_writer *w, const char *name, st_dtype dtype, int ndim,
                     const int64_t *shape, st_fill_fn fill, void *ctx);
/* st_writer_save: write every tensor, in the order added, to path (through a
 * temporary file renamed into place). Header padded to 8 bytes. */
int st_writer_save(st_writer *w, const char *path, ms_error *err);

#endif
