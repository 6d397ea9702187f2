/* backend.h - the engine's backend interface (version 2): one table per backend.
 *
 * A backend owns, per slot, everything a session's model state is made of
 * on its memory (host or device): the LM's K/V ring and the Mimi encoder and
 * decoder state. It opens the LM and the codec together, steps any subset of
 * its slots as one batch, primes a slot by prefill, snapshots and restores a
 * slot's K/V range (in layer chunks, so a restore can be interleaved with
 * live steps), and runs the whole frame step of a batch (encode the input
 * PCM, LM step with sampling, decode the output) as an asynchronous pair:
 * frame_submit returns once the step is under way, frame_wait returns its
 * result, so a device backend overlaps step t's decode with step t+1. The
 * work of the three stages is shared host code (frame.c): the dispatcher
 * hands it to the backend once, as a table (lm_frame_stages), and the
 * backend only chooses when and on which thread each stage runs. The
 * LMGen bookkeeping (token ring, delays, provided flags) is host code
 * (lmgen.h) owned by the caller, one lmgen_slot per slot, borrowed by a
 * frame step between submit and wait. Batch workspaces belong to the
 * backend's context and are sized once at open.
 *
 * A backend is a `static const lm_backend_ops` table with designated
 * initialisers; entries it lacks are NULL and the dispatcher (lm_backend_*)
 * answers MS_ERR_UNSUPPORTED for them, or does the work itself from the
 * entries it has (a backend without frame_submit gets a synchronous frame
 * step built from mimi_encode, step and mimi_decode). The dispatcher checks
 * every argument (slot ids in range and distinct, tokens in range, sampling
 * parameters finite, K/V rings not wrapped) so a backend need not, and it
 * applies the codec's first-frame rule per slot (Kyutai: the encoder is
 * reset after a session's first frame) for every backend.
 *
 * Threads: one thread (the engine thread) calls a backend; nothing here is
 * safe to call concurrently on the same lm_backend. A backend may run work
 * of a submitted frame on threads (or streams) of its own until frame_wait.
 */
#ifndef MOSHID_BACKEND_H
#define MOSHID_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "frame.h"
#include "lm_config.h"

/* The interface's version; plugins carry it in MOSHID_PLUGIN_ABI. */
#define LM_BACKEND_VERSION 3

/* Most slots of one backend, and most slots in one step call. */
#define LM_MAX_SLOTS 1024
/* Most frame steps submitted and not yet waited for. */
#define LM_MAX_INFLIGHT 3

struct lmgen_slot;    /* lmgen.h */
struct lm_backend;    /* below */
typedef struct lm_kv_snap lm_kv_snap;   /* a backend's copy of a slot's K/V range */

/* The K/V cache's precision (engine.kv, moshi-run --kv): the backend's own
 * (float32 on the CPU, bf16 on the GPU), or int8 with one float32 scale per
 * (position, head): s = max|x| / 127 over head_dim (1 for a zero vector),
 * q = x / s rounded half to even, clamped to +-127; keys after RoPE; the
 * temporal ring and the depformer's per-frame cache; a step's own new keys
 * and values are read back quantized like older positions. */
typedef enum { LM_KV_NATIVE = 0, LM_KV_INT8 = 1 } lm_kv;
/* lm_kv_name: "native", "int8"; lm_kv_parse: the reverse ("f32" and "bf16"
 * also name the native precision); -1 for anything else. */
const char *lm_kv_name(lm_kv k);
int lm_kv_parse(const char *s, lm_kv *out);

/* Schemes a backend implements beyond its defaults (lm_backend_ops.schemes);
 * lm_backend_open refuses options a backend does not declare. */
#define LM_SCHEME_W_BF16 1u   /* opts.weights = LM_WEIGHTS_BF16 */
#define LM_SCHEME_W_INT8 2u   /* opts.weights = LM_WEIGHTS_INT8 (and q8 checkpoints) */
#define LM_SCHEME_KV_INT8 4u  /* opts.kv = LM_KV_INT8 */

/* GPU backends' own choices (the cuda.* options, docs/configuration.md);
 * all zero = the defaults. Each has an environment variable that overrides
 * it (docs/cuda.md), for measurements and tests, read by lm_gpu_opts_get. */
typedef struct lm_gpu_opts {
    int codec_host;       /* 1: the codec runs on the host (the CPU Mimi),
                             0: on the device (MOSHID_CU_MIMI=cpu / gpu) */
    int gemm_min_rows;    /* rows from which a product runs as a GEMM, not
                             a matvec; 0: the backend's own crossover
                             (MOSHID_CU_GEMM_MIN_ROWS=N) */
    int graphs_off;       /* 1: every launch of an LM step enqueued; 0: steps
                             replayed from captured graphs (MOSHID_CU_GRAPHS=0 / 1) */
    int codec_graphs_off; /* the same for the device codec
                             (MOSHID_CU_MIMI_GRAPHS=0 / 1) */
    int dep_chain_off;    /* 1: a depformer sub-step at the matvec path runs
                             as its separate launches; 0: as one launch
                             where it applies (MOSHID_CU_DEP_CHAIN=0 / 1) */
} lm_gpu_opts;

/* lm_gpu_opts_get: *in (NULL: all defaults) with the environment's
 * overrides applied, into *out. A variable with another value than the
 * ones listed above is ignored; MOSHID_CU_GEMM_MIN_ROWS must be 1 ..
 * LM_MAX_SLOTS + 1. */
void lm_gpu_opts_get(const lm_gpu_opts *in, lm_gpu_opts *out);

typedef struct lm_backend_opts {
    int max_slots;        /* slots to allocate K/V and codec state for (>= 1) */
    int threads;          /* CPU threads (<= 0: all online CPUs) */
    lm_variant variant;   /* LM_VARIANT_AUTO: detect from the checkpoint */
    int device;           /* GPU index (GPU backends) */
    const char *mimi;     /* Mimi safetensors; NULL: no codec (LM only: the
                             mimi and frame entries answer MS_ERR_STATE) */
    const char *mimi_config;  /* Mimi JSON, NULL: the official configuration */
    int pipeline;         /* 1: a frame step may still run after frame_submit
                             returns (overlap with the next); 0: submit does
                             all the work (the synchronous engine) */
    uint64_t random_weights;  /* 0: load model_dir/model.safetensors. Nonzero
                             (benchmarks only): model_dir holds config.json
                             alone and the weights are generated from this
                             seed (a backend without the feature answers
                             MS_ERR_UNSUPPORTED) */
    int weights;          /* lm_weights (lm.h): LM_WEIGHTS_STORED (0), BF16, INT8 */
    int kv;               /* lm_kv: LM_KV_NATIVE (0) or LM_KV_INT8 */
    const lm_gpu_opts *gpu;   /* GPU backends: NULL = the defaults (the
                             environment overrides either) */
} lm_backend_opts;

/* Where a backend keeps slot state and snapshots. */
typedef enum { LM_MEM_HOST = 0, LM_MEM_DEVICE = 1 } lm_mem_where;

/* Which codec state of a slot (codec_reset). */
enum { LM_CODEC_ENCODER = 1, LM_CODEC_DECODER = 2, LM_CODEC_BOTH = 3 };

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

/* One frame step of a batch of slots: buffers owned by the caller (sized
 * for its largest batch), borrowed by the backend from frame_submit until
 * frame_wait returns. */
typedef struct lm_frame {
    int n;                            /* slots in this step (0 <= n <= max_slots) */
    int nout;                         /* ints per row of out: 1 + dep_q (lm_frame_alloc) */
    const int *slots;                 /* (n) distinct backend slots */
    struct lmgen_slot *const *gens;   /* (n) each slot's bookkeeping (lmgen.h), host */
    const float *pcm_in;              /* (n, MS_FRAME_SAMPLES) the user's audio */
    /* results, valid after frame_wait */
    int *codes;                       /* (n, n_user) the user codes the LM read */
    int *out;                         /* (n, nout) LMGen's frame: text, audio */
    int *has_out;                     /* (n) 1 where out and pcm_out hold a frame */
    float *pcm_out;                   /* (n, MS_FRAME_SAMPLES) Moshi's audio where has_out */
    /* scratch of the frame step (lm_frame_alloc sizes them) */
    int *enc_codes;                   /* (n, ncb) */
    int *dec_slots;                   /* (n) */
    int *dec_codes;                   /* (n, ncb) */
    float *dec_pcm;                   /* (n, MS_FRAME_SAMPLES) */
    int n_dec;
    int rc;                           /* status of the work a backend runs after submit */
    ms_error err;
    /* The early hand-over (optional, set by the caller): a backend that
     * finishes a frame on a thread of its own (the CPU backend's codec
     * thread with opts.pipeline) calls on_done(on_done_ud, f) on that
     * thread as soon as the frame's results (codes, out, has_out, pcm_out)
     * are final, once per successful frame, before frame_wait returns; the
     * buffers stay lent to the backend until frame_wait. Not called for a
     * frame that failed, nor by a backend that finishes frames in
     * frame_submit or frame_wait (the results are read after frame_wait). */
    void (*on_done)(void *ud, const struct lm_frame *f);
    void *on_done_ud;
} lm_frame;

/* The three stages of a frame step (frame.c), handed once to a backend
 * that schedules them itself (lm_backend_ops.frame_stages):
 *   encode: the batch's Mimi encode (encoder state only), the first n_user
 *     codes of each row to f->codes;
 *   step: LMGen + LM step (lmgen.h), the list of rows to decode;
 *   decode: Mimi decode of those rows (decoder state only), their PCM to
 *     f->pcm_out.
 * A slot's encoder, LM and decoder state are disjoint, so the stages of
 * consecutive frames may run on different threads at once, each stage kind
 * in frame order. ctx is the stages' own (passed back as their first
 * argument). */
typedef struct lm_frame_stages {
    int (*encode)(void *ctx, lm_frame *f, ms_error *err);
    int (*step)(void *ctx, lm_frame *f, ms_error *err);
    int (*decode)(void *ctx, lm_frame *f, ms_error *err);
    void *ctx;
} lm_frame_stages;

/* What a snapshot holds and where. */
typedef struct lm_snap_info {
    int positions;
    size_t bytes;
    lm_mem_where where;
} lm_snap_info;

typedef struct lm_backend_stats {
    uint64_t steps;             /* slot-steps done */
    uint64_t step_calls;        /* step calls */
    double step_seconds;        /* wall time inside step calls */
    uint64_t prefill_positions;
    uint64_t frames;            /* slot-frames through the frame step */
    size_t weight_bytes;        /* weights, stored precision */
    size_t kv_bytes;            /* K/V of all slots */
    size_t codec_bytes;         /* codec weights, per-slot codec state and workspaces */
    size_t snap_bytes;          /* snapshots alive */
    lm_mem_where where;         /* where weights and slot state live */
    size_t mem_used;            /* bytes this backend holds there */
    size_t mem_free;            /* bytes still available there (host: MemAvailable) */
    int threads;
    int pipeline;               /* frame steps overlap (opts.pipeline honoured) */
    const char *weights_scheme; /* what the matrices run in: "f32", "bf16", "f16", "int8" (static string) */
    const char *kv_scheme;      /* the K/V cache: "f32", "bf16", "int8" (static string) */
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
    /* codec_reset: the slot's Mimi encoder and/or decoder state (which:
     * LM_CODEC_*) back to fresh. */
    int (*codec_reset)(void *ctx, int slot, int which, ms_error *err);
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
     * slot's position, and the ring has not wrapped: position <= context);
     * *out owned by the caller, freed with kv_snap_free. kv_restore: copy
     * layers [l0, l1) of it into a slot; when l1 is num_layers the slot's
     * next position becomes P (restore every layer, in any number of
     * chunks, before stepping the slot). */
    int (*kv_snapshot)(void *ctx, int slot, int P, lm_kv_snap **out, ms_error *err);
    int (*kv_restore)(void *ctx, int slot, const lm_kv_snap *snap, int l0, int l1, ms_error *err);
    void (*kv_snap_free)(void *ctx, lm_kv_snap *snap);
    /* kv_snap_info: positions, size in bytes and where it lives. */
    int (*kv_snap_info)(void *ctx, const lm_kv_snap *snap, lm_snap_info *info);
    /* kv_snap_len: positions a snapshot holds. kv_snap_read: one layer of it
     * as float32, keys (which 0) or values (which 1), into dst (len, dim).
     * For tests and cross-backend comparisons. */
    int (*kv_snap_len)(void *ctx, const lm_kv_snap *snap);
    int (*kv_snap_read)(void *ctx, const lm_kv_snap *snap, int layer, int which, float *dst, ms_error *err);
    /* codec_books: codes per Mimi frame (0 without a codec). */
    int (*codec_books)(void *ctx);
    /* Mimi for a batch of slots, one frame each, on the slots' codec state:
     *   pcm (n, MS_FRAME_SAMPLES) float32 at 24 kHz, codes (n, codec_books). */
    int (*mimi_encode)(void *ctx, const int *slots, int n, const float *pcm, int *codes, ms_error *err);
    int (*mimi_decode)(void *ctx, const int *slots, int n, const int *codes, float *pcm, ms_error *err);
    /* frame_stages: the stages of the frame step, given once before the
     * first frame_submit; the backend keeps a copy of *st. frame_submit /
     * frame_wait: the frame step of f (st's encode, step and decode, in that
     * order), started by submit and finished by wait. At most
     * LM_MAX_INFLIGHT frames are submitted and not waited; waits come in
     * submit order; a slot may be in consecutive frames (its step t + 1
     * starts after step t's LM step). All three NULL: the dispatcher runs
     * the stages in submit. */
    void (*frame_stages)(void *ctx, const lm_frame_stages *st);
    int (*frame_submit)(void *ctx, lm_frame *f, ms_error *err);
    int (*frame_wait)(void *ctx, lm_frame *f, ms_error *err);
    int (*stats)(void *ctx, lm_backend_stats *st);
    unsigned schemes;     /* LM_SCHEME_* bits: the non-default options it implements */
} lm_backend_ops;

/* An opened backend: its table, context and facts the dispatcher checks. */
typedef struct lm_backend {
    const lm_backend_ops *ops;
    void *ctx;
    lm_config cfg;        /* copy of ops->config(ctx) */
    int max_slots;
    int ncb;              /* codes per Mimi frame, 0 without a codec */
    int n_user;           /* user codes per frame the bookkeeping reads */
    uint64_t *enc_frames; /* (max_slots) frames encoded since the slot's codec reset */
    int inflight;         /* frames submitted and not waited for */
    int stages_given;     /* ops->frame_stages called */
    /* scratch of one step call of the bookkeeping (lmgen_step_batch,
     * pp_step_batch), max_slots rows each, made at open */
    lm_step_slot *step_req;   /* the backend step's requests */
    int *step_rows;           /* request -> row of the batch */
} lm_backend;

/* The CPU reference backend (cpu_backend.c). */
extern const lm_backend_ops lm_cpu_backend;

/* lm_backend_open: open ops on model_dir. Returns NULL with err set. */
lm_backend *lm_backend_open(const lm_backend_ops *ops, const char *model_dir, const lm_backend_opts *opts,
                            ms_error *err);
void lm_backend_close(lm_backend *b);
/* lm_backend_reset_slot: K/V and both codec states of the slot. */
int lm_backend_reset_slot(lm_backend *b, int slot, ms_error *err);
int lm_backend_codec_reset(lm_backend *b, int slot, int which, ms_error *err);
int64_t lm_backend_pos(lm_backend *b, int slot);
/* lm_backend_step: checks slots (range, distinct, tokens in
 * [-1, card] / [-1, text_card], targets in range, dep_steps, sampling
 * parameters finite), then steps. */
int lm_backend_step(lm_backend *b, lm_step_slot *slots, int n, ms_error *err);
int lm_backend_prefill(lm_backend *b, int slot, int64_t pos0, int P, const int *tokens, const float *embs,
                       ms_error *err);
/* lm_backend_kv_snapshot: MS_ERR_STATE when the slot's ring has wrapped
 * (position > context: rows no longer hold positions 0..P-1). */
int lm_backend_kv_snapshot(lm_backend *b, int slot, int P, lm_kv_snap **out, ms_error *err);
/* lm_backend_kv_restore: every layer at once; lm_backend_kv_restore_layers:
 * layers [l0, l1) (the slot's position is set with the last layer). */
int lm_backend_kv_restore(lm_backend *b, int slot, const lm_kv_snap *snap, ms_error *err);
int lm_backend_kv_restore_layers(lm_backend *b, int slot, const lm_kv_snap *snap, int l0, int l1, ms_error *err);
int lm_backend_kv_snap_info(lm_backend *b, const lm_kv_snap *snap, lm_snap_info *info);
void lm_backend_kv_snap_free(lm_backend *b, lm_kv_snap *snap);
/* lm_backend_kv_snap_len / _read: see kv_snap_len / kv_snap_read (layer in
 * [0, num_layers), which 0 or 1; dst holds len x dim floats). */
int lm_backend_kv_snap_len(lm_backend *b, const lm_kv_snap *snap);
int lm_backend_kv_snap_read(lm_backend *b, const lm_kv_snap *snap, int layer, int which, float *dst, ms_error *err);
/* lm_backend_mimi_encode / _decode: one frame for each of n distinct slots.
 * Encode applies the first-frame rule: with Kyutai's bookkeeping a slot's
 * encoder is reset after the first frame since its codec reset (Kyutai's
 * server puts that frame "in the LM's past"); PersonaPlex's server does not. */
int lm_backend_mimi_encode(lm_backend *b, const int *slots, int n, const float *pcm, int *codes, ms_error *err);
int lm_backend_mimi_decode(lm_backend *b, const int *slots, int n, const int *codes, float *pcm, ms_error *err);

/* lm_frame_alloc / lm_frame_free: the buffers of a frame step for batches of
 * up to max_n slots (every array of lm_frame but slots, gens and pcm_in,
 * which the caller points at its own). */
int lm_frame_alloc(lm_backend *b, lm_frame *f, int max_n, ms_error *err);
void lm_frame_free(lm_frame *f);
/* lm_frame_submit / lm_frame_wait: see frame_submit (checks: n, slots in
 * range and distinct, gens[i]->slot == slots[i], a codec, in-flight count).
 * The first submit hands the backend its lm_frame_stages (frame_stages). */
int lm_frame_submit(lm_backend *b, lm_frame *f, ms_error *err);
int lm_frame_wait(lm_backend *b, lm_frame *f, ms_error *err);

int lm_backend_stats_get(lm_backend *b, lm_backend_stats *st);

/* lm_samp_defaults: the official defaults (text 0.7/25, audio 0.8/250). */
void lm_samp_defaults(lm_samp *s, uint64_t seed);
/* lm_samp_greedy: temperatures 0 (parity mode). */
void lm_samp_greedy(lm_samp *s);

#endif
