/* backend.h - the engine's backend interface: one table per backend.
 *
 * A backend owns the weights and each slot's K/V; it steps any subset of its
 * slots together, primes a slot by prefill, snapshots and restores a slot's
 * K/V range, and (through entries the lead wires to the Mimi module) encodes
 * and decodes Mimi frames for a batch of streams. The LMGen bookkeeping
 * (token ring, delays, provided flags) is host code (lmgen.h) shared by all
 * backends. A backend is a `static const lm_backend_ops` table with
 * designated initialisers; entries it lacks are NULL and the dispatcher
 * (lm_backend_*) answers MS_ERR_UNSUPPORTED for them. The dispatcher checks
 * every argument (slot ids in range and distinct, tokens in range, sampling
 * parameters finite) so a backend need not.
 *
 * Threads: one thread (the engine thread) calls a backend; nothing here is
 * safe to call concurrently on the same lm_backend.
 */
#ifndef MOSHID_BACKEND_H
#define MOSHID_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "lm_config.h"

/* Most slots of one backend, and most slots in one step call. */
#define LM_MAX_SLOTS 1024

struct mimi_stream;   /* engine/mimi.h */
typedef struct lm_kv_snap lm_kv_snap;   /* a backend's copy of a slot's K/V range */

typedef struct lm_backend_opts {
    int max_slots;        /* slots to allocate K/V for (>= 1) */
    int threads;          /* CPU threads (<= 0: all online CPUs) */
    lm_variant variant;   /* LM_VARIANT_AUTO: detect from the checkpoint */
    int device;           /* GPU index (GPU backends) */
} lm_backend_opts;

/* Per-slot sampling parameters. temp <= 0 = greedy. topk <= 0 = no cut. */
typedef struct lm_samp {
    float text_temp;
    int text_topk;
    float audio_temp;
    int audio_topk;
    uint64_t seed;        /* rng.h key of the text stream; the noise of stream s
                             at this step is keyed (seed, step, s, index), see samp.h */
    uint64_t audio_seed;  /* key of the audio streams (the Kyutai client sends
                             text_seed and audio_seed); lm_samp_defaults sets it
                             to seed */
} lm_samp;

/* One slot's part of a step call. Inputs are read, outputs written. */
typedef struct lm_step_slot {
    int slot;                                /* 0 <= slot < max_slots */
    int tokens[LM_MAX_STREAMS];              /* (n_streams) model input: text, then n_q audio;
                                                -1 embeds to zero */
    /* Forced targets (PersonaPlex): when target != NULL and provided[0],
     * the depformer reads target[0] instead of the sampled text; when
     * provided[1+k], sub-step k+1 reads target[1+k] instead of sub-step k's
     * sample. NULL (Kyutai): the samples are fed. */
    const int *target;                       /* (1 + dep_q) or NULL */
    const uint8_t *provided;                 /* (1 + dep_q) or NULL */
    lm_samp samp;
    uint64_t step;                           /* rng step counter (LMGen offset) */
    int dep_steps;                           /* depformer sub-steps to run: 0..dep_q
                                                (-1 = all); the others output -1 */
    /* outputs */
    int out_text;                            /* sampled text token */
    int out_audio[LM_MAX_DEP_Q];             /* (dep_q) sampled audio tokens */
    float *text_logits;                      /* (text_card) or NULL: logits sampled from */
    float *audio_logits;                     /* (dep_q, card) or NULL */
} lm_step_slot;

typedef struct lm_backend_stats {
    uint64_t steps;             /* slot-steps done */
    uint64_t step_calls;        /* step calls */
    double step_seconds;        /* wall time inside step calls */
    uint64_t prefill_positions;
    size_t weight_bytes;        /* weights, stored precision */
    size_t kv_bytes;            /* K/V of all slots */
    int threads;
} lm_backend_stats;

typedef struct lm_backend_ops {
    const char *name;
    /* open: load config + weights of model_dir (config.json optional,
     * model.safetensors), allocate max_slots slots; *ctx owned by the backend. */
    int (*open)(void **ctx, const char *model_dir, const lm_backend_opts *opts, ms_error *err);
    void (*close)(void *ctx);
    /* config: the model's configuration, variant resolved (borrowed). */
    const lm_config *(*config)(void *ctx);
    /* reset_slot: forget the slot's K/V; its next position is 0. */
    int (*reset_slot)(void *ctx, int slot, ms_error *err);
    /* pos: the slot's next temporal position (positions written so far). */
    int64_t (*pos)(void *ctx, int slot);
    /* step: one temporal position per slot at the slot's next position, text
     * sampling, depformer; n slots, distinct. */
    int (*step)(void *ctx, lm_step_slot *slots, int n, ms_error *err);
    /* prefill: P positions pos0 .. pos0+P-1 of one slot, causal (pos0 must
     * be the slot's next position); input either tokens (P, n_streams) or
     * summed input embeddings embs (P, dim) (exactly one non-NULL). No
     * sampling, no depformer: only the K/V is kept. */
    int (*prefill)(void *ctx, int slot, int64_t pos0, int P, const int *tokens, const float *embs,
                   ms_error *err);
    /* kv_snapshot: copy of the slot's K/V for positions [0, P) (P <= the
     * slot's position and P <= context); *out owned by the caller, freed
     * with kv_snap_free. kv_restore: copy it into a slot, whose next
     * position becomes P. */
    int (*kv_snapshot)(void *ctx, int slot, int P, lm_kv_snap **out, ms_error *err);
    int (*kv_restore)(void *ctx, int slot, const lm_kv_snap *snap, ms_error *err);
    void (*kv_snap_free)(void *ctx, lm_kv_snap *snap);
    /* kv_snap_len: positions a snapshot holds. kv_snap_read: one layer of it
     * as float32, keys (which 0) or values (which 1), into dst (len, dim).
     * For tests and cross-backend comparisons. */
    int (*kv_snap_len)(void *ctx, const lm_kv_snap *snap);
    int (*kv_snap_read)(void *ctx, const lm_kv_snap *snap, int layer, int which, float *dst, ms_error *err);
    /* Mimi for a batch of streams (the CPU backend runs engine/mimi.h on the streams' model):
     *   pcm (n, 1920) float32 at 24 kHz, codes (n, ncb). */
    int (*mimi_encode)(void *ctx, struct mimi_stream *const *streams, int n, const float *pcm, int *codes,
                       ms_error *err);
    int (*mimi_decode)(void *ctx, struct mimi_stream *const *streams, int n, const int *codes, float *pcm,
                       ms_error *err);
    int (*stats)(void *ctx, lm_backend_stats *st);
} lm_backend_ops;

/* An opened backend: its table, context and facts the dispatcher checks. */
typedef struct lm_backend {
    const lm_backend_ops *ops;
    void *ctx;
    lm_config cfg;        /* copy of ops->config(ctx) */
    int max_slots;
} lm_backend;

/* The CPU reference backend (cpu_backend.c). */
extern const lm_backend_ops lm_cpu_backend;

/* lm_backend_open: open ops on model_dir. Returns NULL with err set. */
lm_backend *lm_backend_open(const lm_backend_ops *ops, const char *model_dir, const lm_backend_opts *opts,
                            ms_error *err);
void lm_backend_close(lm_backend *b);
int lm_backend_reset_slot(lm_backend *b, int slot, ms_error *err);
int64_t lm_backend_pos(lm_backend *b, int slot);
/* lm_backend_step: checks slots (range, distinct, tokens in
 * [-1, card] / [-1, text_card], targets in range, dep_steps, sampling
 * parameters finite), then steps. */
int lm_backend_step(lm_backend *b, lm_step_slot *slots, int n, ms_error *err);
int lm_backend_prefill(lm_backend *b, int slot, int64_t pos0, int P, const int *tokens, const float *embs,
                       ms_error *err);
int lm_backend_kv_snapshot(lm_backend *b, int slot, int P, lm_kv_snap **out, ms_error *err);
int lm_backend_kv_restore(lm_backend *b, int slot, const lm_kv_snap *snap, ms_error *err);
void lm_backend_kv_snap_free(lm_backend *b, lm_kv_snap *snap);
/* lm_backend_kv_snap_len / _read: see kv_snap_len / kv_snap_read (layer in
 * [0, num_layers), which 0 or 1; dst holds len x dim floats). */
int lm_backend_kv_snap_len(lm_backend *b, const lm_kv_snap *snap);
int lm_backend_kv_snap_read(lm_backend *b, const lm_kv_snap *snap, int layer, int which, float *dst, ms_error *err);
int lm_backend_mimi_encode(lm_backend *b, struct mimi_stream *const *streams, int n, const float *pcm, int *codes,
                           ms_error *err);
int lm_backend_mimi_decode(lm_backend *b, struct mimi_stream *const *streams, int n, const int *codes, float *pcm,
                           ms_error *err);
int lm_backend_stats_get(lm_backend *b, lm_backend_stats *st);

/* lm_samp_defaults: the official defaults (text 0.7/25, audio 0.8/250). */
void lm_samp_defaults(lm_samp *s, uint64_t seed);
/* lm_samp_greedy: temperatures 0 (parity mode). */
void lm_samp_greedy(lm_samp *s);

#endif
