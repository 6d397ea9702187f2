/* cu_mimi.h - the Mimi codec on the device for a batch of slots
 * (cuda/cu_mimi.c, kernels in cuda/cu_mimi_kern.cu; docs/cuda.md, "Mimi on the
 * device").
 *
 * A cu_mimi holds the weights of a loaded CPU mimi_model as float32 device
 * arrays (uploaded once at open), the streaming state of max_slots slots in
 * device slabs (conv states, transformer K/V rings; the steps since each
 * slot's reset and the downsample's first-frame flag on the host), and
 * workspaces for max_slots items. Encode and decode take one frame for each
 * of n distinct slots and give the CPU codec's result for the same inputs:
 * the codes equal (float32 storage and arithmetic, the C's loop order where
 * it has one), the PCM within float rounding (tests/gpu/mimi_test.c).
 *
 * Encode and decode have a stream and workspaces each. Encode is
 * synchronous (the LM needs its codes on the host: the one host wait of
 * the call); decode may be split into submit (enqueued, returns at once)
 * and finish (waits, copies the PCM), up to CU_MIMI_TICKETS deep, so that a
 * decode runs on the device while the next encode and LM step do (the
 * backend's frame_submit / frame_wait). Calls on one side run in call
 * order; a slot's encoder and decoder state are disjoint. Threads: one
 * at a time (the engine thread); each entry first makes the device that was
 * current at cu_mimi_open current on the calling thread (the current
 * device is per host thread). Every device failure is MS_ERR_DEVICE with
 * the call's text; after one the device state is unknown (the caller
 * decides: the backend marks itself dead).
 */
#ifndef MOSHID_CU_MIMI_H
#define MOSHID_CU_MIMI_H

#include <stddef.h>

#include "backend.h"
#include "err.h"
#include "mimi.h"

typedef struct cu_mimi cu_mimi;

/* Decodes in flight at once (LM_MAX_INFLIGHT frames, each one decode). */
#define CU_MIMI_TICKETS 4

/* cu_mimi_open: upload m (borrowed: it must outlive the cu_mimi; its
 * weights are read once here) on the current device, state for max_slots
 * slots (all reset). */
int cu_mimi_open(cu_mimi **out, const mimi_model *m, int max_slots, ms_error *err);
/* cu_mimi_open_with: the same with the GPU choices of gpu (codec_graphs_off;
 * NULL: the defaults; lm_gpu_opts_get applies the environment's
 * overrides). cu_mimi_open passes NULL. */
int cu_mimi_open_with(cu_mimi **out, const mimi_model *m, int max_slots, const lm_gpu_opts *gpu, ms_error *err);
void cu_mimi_close(cu_mimi *g);

/* Device bytes it holds (weights, state slabs, workspaces, upload block). */
size_t cu_mimi_bytes(const cu_mimi *g);
/* 1 when calls replay the CUDA graphs captured at open (one per batch-size
 * bucket and side), 0 when they enqueue their launches
 * (MOSHID_CU_MIMI_GRAPHS=0 at open). */
int cu_mimi_graphs(const cu_mimi *g);

/* cu_mimi_reset: the slot's encoder (which & 1) and/or decoder (which & 2)
 * back to the fresh state; other slots untouched. Enqueued in order with
 * the calls. */
int cu_mimi_reset(cu_mimi *g, int slot, int which, ms_error *err);

/* cu_mimi_encode: slots[0..n) distinct in [0, max_slots); pcm (n, frame)
 * -> codes (n, num_codebooks). Non-finite samples are refused (MS_ERR_RANGE,
 * nothing advanced), as the CPU codec. */
int cu_mimi_encode(cu_mimi *g, const int *slots, int n, const float *pcm, int *codes, ms_error *err);
/* cu_mimi_decode: codes (n, num_codebooks) -> pcm (n, frame); a code
 * outside [0, cardinality) is refused (MS_ERR_RANGE, nothing advanced). */
int cu_mimi_decode(cu_mimi *g, const int *slots, int n, const int *codes, float *pcm, ms_error *err);
/* The same in two halves: submit checks and enqueues (the slots' decoder
 * state advances in submit order) and gives a ticket; finish waits for it
 * and copies the n x frame samples to pcm (NULL: drop them). Tickets are
 * finished in any order; at most CU_MIMI_TICKETS unfinished
 * (MS_ERR_STATE beyond). */
int cu_mimi_decode_submit(cu_mimi *g, const int *slots, int n, const int *codes, int *ticket, ms_error *err);
int cu_mimi_decode_finish(cu_mimi *g, int ticket, float *pcm, ms_error *err);

#endif
