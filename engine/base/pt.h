/* pt.h - PyTorch files as torch.save writes them (a zip archive holding a
 * pickle and the tensors' storages), read without Python and without
 * executing anything: the one structure accepted is the one PersonaPlex
 * saves for a voice prompt, a dict of named tensors
 *   {"embeddings": tensor, "cache": tensor}
 * (moshi/models/lm.py, LMGen's voice save: torch.save of a dict), or any
 * dict of str -> tensor within the bounds below.
 *
 * The archive: entries "<dir>/data.pkl", "<dir>/data/<key>" (one per
 * storage), "<dir>/byteorder" ("little"), "<dir>/version" and a few
 * others, all in one top directory, stored without compression (torch's
 * writer never compresses). Zip64, compression, encryption, entries
 * outside the directory, overlapping or out-of-file data, a bad CRC-32:
 * refused.
 *
 * The pickle (protocol 2, as torch.save writes; the protocol 4 framing
 * opcodes are accepted too) runs on a small interpreter that knows only
 * the opcodes torch.save emits for such a dict and only these globals,
 * which it treats as names, never imports:
 *   torch._utils._rebuild_tensor_v2   (storage, offset, size, stride,
 *                                     requires_grad, hooks) -> a tensor
 *   collections.OrderedDict          () -> an empty dict (the hooks)
 *   torch.FloatStorage, HalfStorage, BFloat16Storage, LongStorage,
 *   IntStorage                        storage types (F32, F16, BF16, I64, I32)
 * A persistent id ("storage", type, key, location, numel) names a storage
 * entry; location is "cpu" or "cuda[:N]" (voices saved on a GPU). Any
 * other opcode, global or shape of data is refused with a message naming
 * it. Tensors must be contiguous (row-major strides) and lie inside their
 * storage, whose entry holds exactly numel elements; they are little-
 * endian ("byteorder").
 *
 * Tensors are handed out as st_tensor (st.h): data points into the file's
 * read-only mapping (64-byte aligned by torch, but read it with memcpy).
 * Threads: any; a pt_file is not shared between threads while opening.
 */
#ifndef MOSHID_PT_H
#define MOSHID_PT_H

#include <stddef.h>

#include "err.h"
#include "st.h"

/* Bounds of what is read (a voice file holds 2 tensors, a pickle of a few
 * hundred bytes and storages of a few MB). */
#define PT_MAX_FILE_BYTES ((size_t)1 << 32)  /* 4 GiB: no zip64 */
#define PT_MAX_ENTRIES 256                   /* zip entries */
#define PT_MAX_NAME 256                      /* zip entry name, bytes */
#define PT_MAX_PICKLE_BYTES (1 << 20)
#define PT_MAX_TENSORS 64
#define PT_MAX_KEY 128                       /* dict key, bytes */

typedef struct pt_file pt_file;

/* pt_open: map and read path. NULL with err set ("FILE: ..."). */
pt_file *pt_open(const char *path, ms_error *err);
/* pt_open_mem: the same from an image in memory (borrowed: it must outlive
 * the pt_file); for tests and fuzzing. */
pt_file *pt_open_mem(const void *buf, size_t len, const char *name, ms_error *err);
void pt_close(pt_file *f);

size_t pt_count(const pt_file *f);
/* pt_at: tensor i in the dict's order; pt_find: by key, or NULL. */
const st_tensor *pt_at(const pt_file *f, size_t i);
const st_tensor *pt_find(const pt_file *f, const char *name);

/* pt_is_zip: 1 when the first bytes of a file (n of them) are a zip local
 * header ("PK\3\4"), as every torch.save file starts. */
int pt_is_zip(const void *head, size_t n);

#endif
