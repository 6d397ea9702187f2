/* cu_kern.h - launchers of the CUDA kernels, callable from C. Each has a C
 * twin in the CPU backend with the same name stem and argument order
 * (outputs, inputs, weights, dims), the CUDA stream last where the C twin
 * has its CPU resource (thread pool, scratch):
 *     cu_matvec_bf16     kern_matvec_bf16   (engine/cpu/kern_cpu.h)
 *     cu_matvec_q8       kern_matmul_rows_i8 (engine/cpu/kern_q8.c)
 *     cu_rmsnorm         kern_rmsnorm       (engine/cpu/kern_cpu.h)
 *     cu_rmsnorm_bf16    kern_rmsnorm, then st_f32_to_bf16
 *     cu_matvec_*_fused  kern_rmsnorm, then the product; or the product,
 *                        then kern_add (cu_fuse below)
 *     cu_matvec_*_dep_att kern_attend over the depformer's sub-steps, then
 *                        the product, then kern_add
 *     cu_matvec_group_fused  cu_matvec_*_fused for G matrices
 *     cu_matvec_*_norm_rope  kern_rmsnorm, the product, then cu_qkv_rope_ring's
 *                        twins (kern_rope, st_f32_to_bf16 into the ring)
 *     cu_samp_topk_feed_emb  samp_topk_rows, the feed-back, kern_embed_add
 *     cu_samp_topk_rows  samp_topk_rows     (engine/lm/samp.h)
 * and the LM step's other kernels (cuda/cu_lm.cu), whose twins are the
 * CPU backend's kernels applied row by row:
 *     cu_embed_sum       kern_embed_add over the n_q audio tables, then text
 *     cu_embed_add_rows  kern_embed_add, one token per row
 *     cu_qkv_rope        kern_rope on q and k, then st_f32_to_bf16 of k and v
 *                        (cu_qkv_rope_ring: the same, k and v to the ring)
 *     cu_attend_ring     kern_attend_ring (keys and values bf16 here)
 *     cu_dep_attend      kern_attend over the depformer's sub-steps
 *     cu_qkv_rope_q8     kern_rope, then kern_q8_quantize_heads of k and v
 *                        (cu_qkv_rope_ring_q8: to the ring)
 *     cu_attend_ring_q8  kern_attend_ring_q8
 *     cu_dep_attend_q8   kern_q8_quantize_heads, then kern_attend_ring_q8
 *     cu_silu_gate       kern_silu_gate
 *     cu_add             kern_add
 *     cu_f32_to_bf16     st_f32_to_bf16
 * (cu_kv_store, cu_kv_store_q8, cu_q8_to_bf16, cu_scale_cols and
 * cu_rand_bf16 only move, widen, scale or generate data;
 * tests/gpu/backend_test.c covers them through the whole step).
 * (kern_X <-> cu_X: kern_ only says "CPU kernel"; samp_X <-> cu_samp_X).
 * tests/gpu/engine_test.c compares each launcher against its twin.
 *
 * Every pointer is a device pointer. A launcher only enqueues work: it
 * returns cudaErrorInvalidValue for bad dimensions, otherwise the launch's
 * status (cudaGetLastError); wrap it in CU_CHECK (cu_check.h). Errors inside
 * the kernel surface at the next synchronising call. Any host thread.
 */
#ifndef MOSHID_CU_KERN_H
#define MOSHID_CU_KERN_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "samp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest batch one matvec launch reads W once for; larger batches tile the
 * batch and read W once per tile of this many rows. */
#define CU_MATVEC_BATCH_TILE 8

/* cu_matvec_bf16: y = x . W^T (f32 accumulation). Fast path when K % 8 == 0
 * and x, w are 16-byte aligned; otherwise a scalar path. */
cudaError_t cu_matvec_bf16(float *y,          /* (B, N) */
                           const float *x,    /* (B, K) */
                           const uint16_t *w, /* (N, K) bf16 */
                           int B, int N, int K, cudaStream_t stream);

/* cu_fuse: what a product folds into its own launch (issue 25: each launch
 * is a graph node, and nodes were most of the predicted batch-1 step over
 * its floor), each bit for bit the launches it replaces:
 *   norm (non-NULL): the product of rmsnorm(x) * norm (K floats, eps
 *     inside the root) instead of x: every block sums its rows' squares
 *     itself, in cu_rmsnorm's order (cuda/cu_norm.cuh), and reads
 *     x * (norm * inv) where it read x: = cu_rmsnorm, then the product;
 *   acc: y += the product (int8: the product times the row scale, rounded,
 *     then added): = the product into a temporary, then cu_add. Each
 *     output is written by one thread: deterministic.
 * Not both at once (cudaErrorInvalidValue). The vector paths need norm
 * 16-byte aligned too (else the scalar path). A NULL cu_fuse: neither. */
typedef struct cu_fuse {
    const float *norm;   /* (K) RMSNorm scales, or NULL */
    float eps;
    int acc;
} cu_fuse;

/* cu_matvec_bf16_fused: cu_matvec_bf16 with f's fusions. */
cudaError_t cu_matvec_bf16_fused(float *y,          /* (B, N) in (acc) and out */
                                 const float *x,    /* (B, K) */
                                 const uint16_t *w, /* (N, K) bf16 */
                                 int B, int N, int K, const cu_fuse *f, cudaStream_t stream);

/* cu_matvec_bf16_gated: y = silu_gate(u) . W^T, the gated FFN's output
 * product with the gate computed as cu_silu_gate does, in the matvec's
 * launch: bit for bit cu_silu_gate then cu_matvec_bf16, one launch fewer.
 * Vector path only: cu_matvec_gated_ok(u, w, K) must hold (K % 8 == 0,
 * u and w 16-byte aligned), else cudaErrorInvalidValue. */
int cu_matvec_gated_ok(const float *u, const uint16_t *w, int K);
cudaError_t cu_matvec_bf16_gated(float *y,          /* (B, N) */
                                 const float *u,    /* (B, 2K): gate | up */
                                 const uint16_t *w, /* (N, K) bf16 */
                                 int B, int N, int K, cudaStream_t stream);
/* cu_matvec_bf16_gated_fused: with f->acc, y += (the residual add); f->norm
 * must be NULL. */
cudaError_t cu_matvec_bf16_gated_fused(float *y, const float *u, const uint16_t *w, int B, int N, int K,
                                       const cu_fuse *f, cudaStream_t stream);

/* The 8-bit weight scheme (W8A16): int8 rows, one f32 scale per row. */
/* cu_matvec_q8: y = (x . Wq^T) * ws per column: each row's sum of q * x,
 * then times the row's scale (kern_matmul_rows_i8). Vector path when
 * cu_matvec_q8_ok(x, w, K) (K % 4 == 0, x 16- and w 4-byte aligned),
 * otherwise a scalar path. */
int cu_matvec_q8_ok(const float *x, const int8_t *w, int K);
cudaError_t cu_matvec_q8(float *y,          /* (B, N) */
                         const float *x,    /* (B, K) */
                         const int8_t *w,   /* (N, K) int8 */
                         const float *ws,   /* (N) row scales */
                         int B, int N, int K, cudaStream_t stream);
/* cu_matvec_q8_gated: cu_matvec_q8 of silu_gate(u), as cu_matvec_bf16_gated;
 * cu_matvec_q8_ok(u, w, K) must hold. */
cudaError_t cu_matvec_q8_gated(float *y, const float *u /* (B, 2K) */, const int8_t *w, const float *ws, int B,
                               int N, int K, cudaStream_t stream);
/* cu_matvec_q8_fused, cu_matvec_q8_gated_fused: with f's fusions, as the
 * bf16 ones (the gated: acc only). */
cudaError_t cu_matvec_q8_fused(float *y, const float *x, const int8_t *w, const float *ws, int B, int N, int K,
                               const cu_fuse *f, cudaStream_t stream);
cudaError_t cu_matvec_q8_gated_fused(float *y, const float *u, const int8_t *w, const float *ws, int B, int N, int K,
                                     const cu_fuse *f, cudaStream_t stream);
/* cu_matvec_bf16_dep_att, cu_matvec_q8_dep_att: y (B, N) += attend (B, K)
 * W^T (bf16 rows; int8 rows with their scales ws), where attend is
 * cu_dep_attend's output for sub-step k (kv8: cu_dep_attend_q8's, the
 * int8 cache), computed inside the product's launch (issue 25: one graph
 * node fewer per depformer layer and sub-step): bit for bit the attention
 * launch then the matvec with the add (cu_fuse acc), the cache updated the
 * same way. Every block computes the whole attention output of its batch
 * tile (the extra L2 reads: docs/cuda.md); one block stores the new keys
 * and values. cu_matvec_dep_att_ok(w, w8, kv8, K, heads, head_dim) must
 * hold (K = heads * head_dim <= 1024, heads <= 16, the vector path's
 * alignment), else cudaErrorInvalidValue. */
int cu_matvec_dep_att_ok(const void *w, int w8, int kv8, int K, int heads, int head_dim);
cudaError_t cu_matvec_bf16_dep_att(float *y, const float *qkv, float *k_cache, float *v_cache, size_t cache_stride,
                                   int kv8, int k, int window, const uint16_t *w, int B, int N, int K, int heads,
                                   int head_dim, cudaStream_t stream);
cudaError_t cu_matvec_q8_dep_att(float *y, const float *qkv, float *k_cache, float *v_cache, size_t cache_stride,
                                 int kv8, int k, int window, const int8_t *w, const float *ws, int B, int N, int K,
                                 int heads, int head_dim, cudaStream_t stream);
/* cu_matvec_group_fused: y (G, B, N), y[g] = x W_g^T with f's fusions
 * (the norm, not the add), for G <= 16 matrices of one shape: bf16 (ws
 * NULL) or int8 rows with their scales ws[g]. One launch with the norm
 * on the vector path (x and every W aligned as there; int8: every ws[g]
 * the same number of bytes after its w[g], as the backend places them),
 * each product's blocks exactly
 * those of its own launch (cu_matvec_*_fused: the same bits); else a
 * launch per product. The depformer's input projections (issue 25). */
cudaError_t cu_matvec_group_fused(float *y, const float *x, const void *const *w, const float *const *ws, int G,
                                  int B, int N, int K, const cu_fuse *f, cudaStream_t stream);

/* ---- the depformer sub-step in one launch (cu_dep_chain) ------------------
 * Issue 25: at batch 1 a sub-step was 4 launches per depformer layer and
 * the head's, each a graph node. cu_dep_chain runs them all as stages of
 * one launch: a block per block of each stage's own launch (the same
 * bodies, so every output bit for bit the launches'), blocks handed their
 * work by a ticket in stage order, each stage waiting on the counter of
 * the one before (cuda/cu_sync.cuh gives the protocol and why it cannot
 * deadlock), the weight rows prefetched into L2 while it waits. Stages
 * per layer l: QKV (norm1 folded), the out-projection with the attention
 * (cu_matvec_*_dep_att) and the add, ffn_in (norm2 folded), the gated
 * ffn_out with the add; then the head. */
#define CU_DEP_CHAIN_MAX_LAYERS 16
#define CU_DEP_CHAIN_STAGES (4 * CU_DEP_CHAIN_MAX_LAYERS + 1)

/* The chain's counters, in device memory, all zero between launches (the
 * block that finishes the last stage sets them back): allocate zeroed, one
 * per stream that runs chains (one chain at a time uses it). */
typedef struct cu_dep_chain_ctl {
    unsigned ticket;                        /* the next block's ticket */
    unsigned done[CU_DEP_CHAIN_STAGES];     /* blocks of each stage finished */
} cu_dep_chain_ctl;

/* One depformer layer's operands at sub-step k. int8 rows (w8): each
 * matrix's row scales beside it; bf16: the scales NULL. */
typedef struct cu_dep_chain_layer {
    const void *attn_in, *attn_out, *ffn_in, *ffn_out;   /* (3D, D), (D, D), (2H, D), (D, H) */
    const float *attn_in_s, *attn_out_s, *ffn_in_s, *ffn_out_s;
    const float *norm1, *norm2;                          /* (D) RMSNorm scales */
    float *k_cache, *v_cache;   /* (B, cache_stride) each, as cu_matvec_*_dep_att's */
} cu_dep_chain_layer;

typedef struct cu_dep_chain_args {
    float *dy;            /* (B, D) the residual stream: in, and out after the last layer */
    float *dqkv;          /* (B, 3D) scratch */
    float *du;            /* (B, 2H) scratch */
    float *logits;        /* (B, card) the head's output */
    const void *head;     /* (card, D) */
    const float *head_s;  /* its int8 row scales (w8), else NULL */
    cu_dep_chain_layer layer[CU_DEP_CHAIN_MAX_LAYERS];
    cu_dep_chain_ctl *ctl;
    size_t cache_stride;
    int w8, kv8;          /* int8 rows; the int8 K/V cache */
    int layers, B, D, H, card, heads, head_dim, k, window;
    float eps;
} cu_dep_chain_args;

/* cu_dep_chain_ok: the chain applies: layers <= CU_DEP_CHAIN_MAX_LAYERS
 * and every stage's own launch would take the vector path
 * (cu_matvec_dep_att_ok for the out-projection; the alignments and K % 8
 * (bf16) or % 4 (int8) of the others, the gated one's included). */
int cu_dep_chain_ok(const cu_dep_chain_args *a);
/* cu_dep_chain: the sub-step as one launch (kernels dep_chain_bf16 and
 * dep_chain_q8): bit for bit cu_matvec_*_fused (QKV, ffn_in),
 * cu_matvec_*_dep_att, cu_matvec_*_gated_fused (add) per layer, then
 * cu_matvec_* (head), the caches written the same way.
 * cudaErrorInvalidValue where cu_dep_chain_ok does not hold. */
cudaError_t cu_dep_chain(const cu_dep_chain_args *a, cudaStream_t stream);
/* cu_q8_to_bf16: wb = (bf16) w, n int8 (exact: |q| <= 127); n % 4 == 0, w
 * 4- and wb 8-byte aligned. The large-batch path widens a matrix's rows
 * into a scratch buffer, runs the bf16 GEMM, then cu_scale_cols. */
cudaError_t cu_q8_to_bf16(uint16_t *wb, const int8_t *w, size_t n, cudaStream_t stream);
/* cu_scale_cols: y[b][n] *= ws[n], b < B, n < N, rows ldy apart. */
cudaError_t cu_scale_cols(float *y, const float *ws, int B, int N, int ldy, cudaStream_t stream);
/* cu_scale_cols_add: y[b][n] += p[b][n] * ws[n] (the product rounded, then
 * added: cu_scale_cols on p, then cu_add), rows ld apart in both: the int8
 * GEMM path's residual add. */
cudaError_t cu_scale_cols_add(float *y, const float *p, const float *ws, int B, int N, int ld, cudaStream_t stream);

/* cu_rmsnorm: y = x * alpha / sqrt(mean(x^2) + eps) per row; y may alias x. */
cudaError_t cu_rmsnorm(float *y,            /* (B, C) */
                       const float *x,      /* (B, C) */
                       const float *alpha,  /* (C) */
                       int B, int C, float eps, cudaStream_t stream);

/* cu_rmsnorm_bf16: yb = bf16(rmsnorm(x) * alpha) per row, cu_rmsnorm's
 * values rounded as cu_f32_to_bf16 rounds: the GEMM path's input
 * conversion with the norm in it (one launch for two). */
cudaError_t cu_rmsnorm_bf16(uint16_t *yb,         /* (B, C) bf16 */
                            const float *x,       /* (B, C) */
                            const float *alpha,   /* (C) */
                            int B, int C, float eps, cudaStream_t stream);

/* cu_samp_topk_rows: one token per row, the same index as samp_topk_rows
 * for the same inputs (samp.h; cuda/samp_core.h). stream_id is the RNG
 * stream (SAMP_STREAM_*); rows is a device array. */
cudaError_t cu_samp_topk_rows(int32_t *out,          /* (B) token index in [0, N) */
                              const float *logits,   /* (B, N) */
                              const samp_row *rows,  /* (B) */
                              int B, int N, uint32_t stream_id, cudaStream_t stream);

/* ---- the LM step (cuda/cu_lm.cu) ----------------------------------------- */

/* Keys one attention block takes (a split of the ring); the ring of a
 * query is cut into cu_attend_splits(window) splits whose partial softmaxes
 * the last of them to finish combines (flash-decoding in one launch), so
 * a long context spreads over many blocks even at batch 1. */
#define CU_ATT_SPLIT 256
/* Largest head_dim the attention kernels take (the 7B has 128). */
#define CU_ATT_MAX_HEAD_DIM 256
/* Floats of attention workspace per (row, head, split). */
#define CU_ATT_PART_FLOATS (CU_ATT_MAX_HEAD_DIM + 2)

/* cu_embed_sum: x[b] = sum_q audio_emb[q][tok[b][1 + q]] + text_emb[tok[b][0]]
 * (audio first, then text, as the CPU backend sums); -1 adds nothing. */
cudaError_t cu_embed_sum(float *x,                  /* (B, D) */
                         const int32_t *tok,        /* (B, tok_stride): text, then n_q audio */
                         int tok_stride,
                         const uint16_t *audio_emb, /* (n_q, card + 1, D) bf16 */
                         const uint16_t *text_emb,  /* (text_card + 1, D) bf16 */
                         int B, int D, int n_q, int card, int text_card, cudaStream_t stream);

/* cu_embed_add_rows: y[b] += table[tok[b]]; tok < 0 adds nothing. */
cudaError_t cu_embed_add_rows(float *y,              /* (B, D) */
                              const int32_t *tok,    /* (B) */
                              const uint16_t *table, /* (rows, D) bf16 */
                              int B, int D, int rows, cudaStream_t stream);

/* cu_qkv_rope: rotate q and k of each row at pos[b] (kern_rope's
 * arithmetic; rope_k = (float)(-log(max_period) * 2 / head_dim), computed
 * by the caller as kern_rope does), in place, and pack the row's new key
 * and value as bf16 into kvl. */
cudaError_t cu_qkv_rope(float *qkv,           /* (B, 3D): q | k | v, D = heads * head_dim */
                        uint16_t *kvl,        /* (B, 2D) out: k | v bf16 */
                        const int64_t *pos,   /* (B) */
                        int B, int heads, int head_dim, float rope_k, cudaStream_t stream);
/* cu_qkv_rope_ring: cu_qkv_rope with the row's new key and value written
 * straight to ring row pos[b] % ctx of slot slot[b] (what cu_kv_store
 * would write from kvl), for a step: one row per slot, so no row's window
 * (at most ctx positions, pos[b] among them) holds the position the row
 * overwrites. Then cu_attend_ring with kvl NULL. */
cudaError_t cu_qkv_rope_ring(float *qkv,              /* (B, 3D) */
                             uint16_t *kv_layer,      /* slot 0's view of this layer: K (ctx, D) then V (ctx, D) */
                             size_t slot_stride,      /* elements */
                             const int32_t *slot,     /* (B) distinct */
                             const int64_t *pos,      /* (B) */
                             int B, int heads, int head_dim, int ctx, float rope_k, cudaStream_t stream);

/* cu_rope_ring: RoPE's operands in a step, and where the new keys and
 * values go (cu_qkv_rope_ring's arguments). */
typedef struct cu_rope_ring {
    uint16_t *kv_layer;     /* slot 0's view of this layer: K (ctx, D) then V (ctx, D) */
    size_t slot_stride;     /* elements */
    const int32_t *slot;    /* (B) distinct */
    const int64_t *pos;     /* (B) */
    int heads, head_dim, ctx;
    float rope_k;
} cu_rope_ring;

/* cu_matvec_bf16_norm_rope, cu_matvec_q8_norm_rope: a step's QKV product
 * qkv (B, 3D) = rmsnorm(x) W^T (f: the norm, required; no add) with RoPE
 * and the ring store in the product's launch (issue 25: one graph node per
 * temporal layer fewer): bit for bit cu_matvec_*_fused, then
 * cu_qkv_rope_ring (qkv and the ring as those leave them). bf16 K/V only:
 * the int8 ring's per-head scale spans many of the product's blocks, so
 * it keeps cu_qkv_rope_ring_q8. cu_matvec_rope_ok(x, w, w8, K, f, rr)
 * must hold (the vector path's alignment, the norm's, an even head_dim,
 * the ring 4-byte aligned with an even slot_stride), else
 * cudaErrorInvalidValue. */
int cu_matvec_rope_ok(const float *x, const void *w, int w8, int K, const cu_fuse *f, const cu_rope_ring *rr);
cudaError_t cu_matvec_bf16_norm_rope(float *qkv, const float *x, const uint16_t *w, int B, int K, const cu_fuse *f,
                                     const cu_rope_ring *rr, cudaStream_t stream);
cudaError_t cu_matvec_q8_norm_rope(float *qkv, const float *x, const int8_t *w, const float *ws, int B, int K,
                                   const cu_fuse *f, const cu_rope_ring *rr, cudaStream_t stream);

/* cu_attend_splits: the splits cu_attend_ring uses for a window. */
int cu_attend_splits(int window);

/* cu_attend_ring: softmax(q k^T / sqrt(head_dim)) v per head, row b
 * attending to positions max(0, p - window + 1) .. p (p = pos[b]) of slot
 * slot[b]. Positions before the chunk start c0 (prefill ? pos[0] : p) are
 * read from the ring (row x % ctx of the slot's layer view), the chunk's
 * own from kvl (row b - (p - x)): in a prefill chunk the rows are
 * consecutive positions of one slot. The ring is written after (cu_kv_store),
 * so a chunk never reads a row it overwrites. kvl NULL (a step after
 * cu_qkv_rope_ring; prefill 0): every position from the ring, p's too.
 * One launch: the splits and their combine (the last split of a row and
 * head to finish does it, counted in count; docs/cuda.md). */
cudaError_t cu_attend_ring(float *out,               /* (B, heads * head_dim) */
                           float *part,              /* (B, heads, splits * CU_ATT_PART_FLOATS) workspace */
                           unsigned *count,          /* (B, heads) arrival counters: 0 before the first call
                                                        (cudaMemset), left at 0 by every call; one launch
                                                        at a time uses them */
                           const float *q,           /* (B, q_stride) */
                           int q_stride,
                           const uint16_t *kvl,      /* (B, 2D) the chunk's keys | values, bf16; or NULL */
                           const uint16_t *kv_layer, /* slot 0's view of this layer: K (ctx, D) then V (ctx, D) */
                           size_t slot_stride,       /* elements from one slot's view to the next */
                           const int32_t *slot,      /* (B) */
                           const int64_t *pos,       /* (B) */
                           int B, int heads, int head_dim, int ctx, int window, int prefill, cudaStream_t stream);

/* cu_kv_store: ring row pos[b] % ctx of slot slot[b] = kvl[b]. */
cudaError_t cu_kv_store(uint16_t *kv_layer, size_t slot_stride, const uint16_t *kvl, const int32_t *slot,
                        const int64_t *pos, int B, int D, int ctx, cudaStream_t stream);

/* cu_dep_attend: depformer sub-step k: store the rows' keys and values
 * (from qkv) at sub-step k of their caches, then attend over sub-steps
 * max(0, k - window + 1) .. k. */
cudaError_t cu_dep_attend(float *out,         /* (B, D) */
                          const float *qkv,   /* (B, 3D) */
                          float *k_cache,     /* (B, cache_stride): (LM_MAX_DEP_Q, D) used */
                          float *v_cache,
                          size_t cache_stride, int k, int window, int B, int heads, int head_dim,
                          cudaStream_t stream);

/* ---- the int8 K/V scheme ----------------------------------------------------
 * A slot's view of one layer's ring (bytes): keys int8 (ctx, D), values
 * int8 (ctx, D), key scales f32 (heads, ctx), value scales f32 (heads, ctx):
 * cu_kv_q8_layer_bytes(ctx, D, heads) in all. The scales of one head are
 * contiguous over positions, so a split of keys reads its scales in one
 * coalesced load. A chunk's own new keys and values: kv8 (B, 2D) int8, k
 * then v, and kvs (B, 2, heads) f32. */
size_t cu_kv_q8_layer_bytes(int ctx, int D, int heads);

/* cu_qkv_rope_q8: cu_qkv_rope, then each row's rotated key and its value
 * quantized per head (kern_q8_quantize_heads: s = max|x| / 127, 1 for a
 * zero vector; q = x / s rounded half to even, clamped to +-127). */
cudaError_t cu_qkv_rope_q8(float *qkv, int8_t *kv8, float *kvs, const int64_t *pos, int B, int heads, int head_dim,
                           float rope_k, cudaStream_t stream);
/* cu_qkv_rope_ring_q8: cu_qkv_rope_q8 with the quantized key and value and
 * their scales written straight to the ring (cu_kv_store_q8's places), as
 * cu_qkv_rope_ring; slot_stride in bytes. */
cudaError_t cu_qkv_rope_ring_q8(float *qkv, int8_t *kv_layer, size_t slot_stride, const int32_t *slot,
                                const int64_t *pos, int B, int heads, int head_dim, int ctx, float rope_k,
                                cudaStream_t stream);
/* cu_attend_ring_q8: cu_attend_ring over the int8 ring and chunk (the
 * layout above): score = (q . k8) * ks / sqrt(head_dim), the value's
 * scale folded into its softmax weight (kern_attend_ring_q8).
 * slot_stride in bytes. */
cudaError_t cu_attend_ring_q8(float *out, float *part, unsigned *count, const float *q, int q_stride,
                              const int8_t *kv8, const float *kvs, const int8_t *kv_layer, size_t slot_stride,
                              const int32_t *slot, const int64_t *pos, int B, int heads, int head_dim, int ctx,
                              int window, int prefill, cudaStream_t stream);
/* cu_kv_store_q8: ring row pos[b] % ctx of slot slot[b] = kv8[b], and the
 * row's scales from kvs[b]; slot_stride in bytes. */
cudaError_t cu_kv_store_q8(int8_t *kv_layer, size_t slot_stride, const int8_t *kv8, const float *kvs,
                           const int32_t *slot, const int64_t *pos, int B, int D, int heads, int ctx,
                           cudaStream_t stream);
/* cu_dep_attend_q8: cu_dep_attend with the int8 cache: each layer's
 * (LM_MAX_DEP_Q, D) float region of k_cache / v_cache holds the int8
 * values (LM_MAX_DEP_Q, D) then the scales (LM_MAX_DEP_Q, heads) f32;
 * D % 4 == 0. */
cudaError_t cu_dep_attend_q8(float *out, const float *qkv, float *k_cache, float *v_cache, size_t cache_stride,
                             int k, int window, int B, int heads, int head_dim, cudaStream_t stream);

/* cu_silu_gate: h = silu(u[:, :H]) * u[:, H:]. */
cudaError_t cu_silu_gate(float *h, const float *u, int B, int H, cudaStream_t stream);   /* h (B, H), u (B, 2H) */
/* cu_silu_gate_bf16: hb = bf16(silu(u[:, :H]) * u[:, H:]): cu_silu_gate then
 * cu_f32_to_bf16 in one launch (the GEMM path's input). */
cudaError_t cu_silu_gate_bf16(uint16_t *hb, const float *u, int B, int H, cudaStream_t stream);   /* hb (B, H) */
/* cu_add: y += x (n). */
cudaError_t cu_add(float *y, const float *x, size_t n, cudaStream_t stream);
/* cu_f32_to_bf16: y = bf16(x) (n), nearest even: the GEMMs' activations. */
cudaError_t cu_f32_to_bf16(uint16_t *y, const float *x, size_t n, cudaStream_t stream);

/* cu_samp_topk_feed: cu_samp_topk_rows, then the depformer's token
 * feed-back in the same launch (by the thread that writes a row's token):
 * prev[b] = target[b * t_stride] where >= 0 (forced), else the sampled
 * token; with dep_steps (non-NULL) the token becomes -1 where k >=
 * dep_steps[b] (a sub-step the row did not ask for). One graph node per
 * sub-step fewer than a separate feed-back kernel (issue 25). */
cudaError_t cu_samp_topk_feed(int32_t *out,            /* (B) */
                              const float *logits,     /* (B, N) */
                              const samp_row *rows,    /* (B) */
                              int B, int N, uint32_t stream_id,
                              int32_t *prev,           /* (B) */
                              const int32_t *target,   /* (B, t_stride): column 0 read */
                              int t_stride,
                              const int32_t *dep_steps,/* (B) or NULL */
                              int k, cudaStream_t stream);

/* cu_samp_topk_feed_emb: cu_samp_topk_feed, and the next depformer
 * sub-step's input in the same launch: dy[b] = base[b] + table[prev[b]]
 * (D floats; bf16 table of table_rows rows; base[b] alone where prev[b] is
 * not a row), the sums cu_embed_add_rows makes on base: one graph node
 * per sub-step fewer (issue 25). dy NULL: no next input (the last
 * sub-step), cu_samp_topk_feed exactly (base, table, D, table_rows
 * ignored). */
cudaError_t cu_samp_topk_feed_emb(int32_t *out, const float *logits, const samp_row *rows, int B, int N,
                                  uint32_t stream_id, int32_t *prev, const int32_t *target, int t_stride,
                                  const int32_t *dep_steps, int k, float *dy, const float *base,
                                  const uint16_t *table, int D, int table_rows, cudaStream_t stream);

/* cu_rand_bf16: w = bf16(scale * (2 u - 1)), u = rng_uniform(seed, tensor, i >> 32, i). */
cudaError_t cu_rand_bf16(uint16_t *w, size_t n, uint64_t seed, uint32_t tensor, float scale, cudaStream_t stream);

/* cu_rand_q8: int8 rows q = rint(127 (2u - 1)) (u as cu_rand_bf16), each
 * row's scale ws = scale / 127. */
cudaError_t cu_rand_q8(int8_t *w, float *ws, int rows, int cols, uint64_t seed, uint32_t tensor, float scale,
                       cudaStream_t stream);

/* ---- Mimi (cuda/cu_mimi_kern.cu) ------------------------------------------------
 * float32 throughout; activations channel-major (C, n*T) as the CPU codec
 * (engine/mimi/mimi_int.h); per-slot state in slabs reached through slot[]
 * (device arrays of the call's n items; an item whose slot repeats the
 * previous item's reads that state but does not store it: the codec's
 * padding rows, cu_mimi_kern.cu's header). C twins: the CPU codec's own
 * layers (engine/mimi/mimi_layers.c, mimi.c); tests/gpu/engine_test.c
 * compares the convolutions, GEMM, ELU and the RVQ search with them one by
 * one, tests/gpu/mimi_test.c the whole codec (the transformer's steps and
 * the RVQ sum, static in the C, only there):
 *     cu_mimi_conv_stage + cu_mimi_conv   mimi_conv_forward (plain conv)
 *     cu_mimi_convtr                      mimi_conv_forward (transposed,
 *                                         depthwise)
 *     cu_mimi_elu, cu_mimi_gelu           mimi_elu, the transformer's GELU
 *     cu_mimi_gemm                        mimi_gemm
 *     cu_mimi_layer_norm, cu_mimi_rope_store, cu_mimi_attend,
 *     cu_mimi_add_scaled                  mimi_transformer_forward's steps
 *     cu_mimi_rvq_level, cu_mimi_rvq_sum  mimi.c's rvq_encode, rvq_sum */

/* y = ELU(x) (n), the CPU's expm1 polynomial. */
cudaError_t cu_mimi_elu(float *y, const float *x, size_t n, cudaStream_t stream);
/* x = GELU(x) (n), erf form. */
cudaError_t cu_mimi_gelu(float *x, size_t n, cudaStream_t stream);
/* x (D, N) += g[d] * h (D, N); g NULL: 1. */
cudaError_t cu_mimi_add_scaled(float *x, const float *h, const float *g, int D, int N, cudaStream_t stream);
/* C (M, N) [+]= A (M, K) . B (K, N), row-major. */
cudaError_t cu_mimi_gemm(float *C, const float *A, const float *B, int M, int N, int K, int accumulate,
                         cudaStream_t stream);
/* Causal conv input: xb (n, cin, P + T) = [slot state (cin, P) | elu?(x)
 * columns of item s], first[s] (NULL: none) replicates the first input
 * column into the state part. state + slot[s] * state_stride + state_off
 * is the slot's (cin, P); the conv that reads xb keeps the new state
 * (cu_mimi_conv's keep). */
cudaError_t cu_mimi_conv_stage(float *xb, float *state, size_t state_stride, size_t state_off,
                               const float *x /* (cin, n*T) */, const int32_t *slot /* (n) */,
                               const int32_t *first /* (n) or NULL */, int n, int cin, int T, int P, int elu,
                               cudaStream_t stream);
/* The state a causal conv keeps: the last P columns of each item's xb
 * into state + slot[s] * stride + off, (cin, P). */
typedef struct cu_mimi_keep {
    float *state;
    size_t stride, off;
    const int32_t *slot;   /* (n) */
    int P;
} cu_mimi_keep;
/* y (cout, n*Tout) [+]= b + w (cout, cin*K) conv xb (n, cin, L), stride S,
 * dilation dil; keep (NULL: none) the slots' new state, from the same xb. */
cudaError_t cu_mimi_conv(float *y, const float *xb, const float *w, const float *b /* (cout) or NULL */, int n,
                         int cin, int cout, int K, int S, int dil, int L, int Tout, int accumulate,
                         const cu_mimi_keep *keep, cudaStream_t stream);
/* Transposed conv (K >= S, kept partial sums (cout, K - S) per slot):
 * y (cout, n*T*S) [+]= b + convtr(x (cin, n*T)); w (cout*K, cin), or
 * depthwise (cout, K) with cin == cout; full: scratch (n, cout, T*S + K - S). */
cudaError_t cu_mimi_convtr(float *y, float *full, float *state, size_t state_stride, size_t state_off,
                           const float *x, const float *w, const float *b, const int32_t *slot, int n, int cin,
                           int cout, int K, int S, int T, int depthwise, int accumulate, cudaStream_t stream);
/* y (D, N) = LayerNorm over D of x (D, N), eps 1e-5, scale w, shift b. */
cudaError_t cu_mimi_layer_norm(float *y, const float *x, const float *w, const float *b, int D, int N,
                               cudaStream_t stream);
/* RoPE on q and k of qkv (3D, n*T) at positions offset[s] + t (freq:
 * (head_dim / 2)), then k and v into ring row pos % ctx of layer `layer`
 * of slot slot[s]: kv + slot * kv_slot + layer * 2 * ctx * D, K then V. */
cudaError_t cu_mimi_rope_store(float *qkv, float *kv, size_t kv_slot, const int32_t *slot, const int64_t *offset,
                               const float *freq, int layer, int n, int T, int D, int heads, int ctx,
                               cudaStream_t stream);
/* att (D, n*T): each column's heads over the valid rows of its slot's ring. */
cudaError_t cu_mimi_attend(float *att, const float *qkv, const float *kv, size_t kv_slot, const int32_t *slot,
                           const int64_t *offset, int layer, int n, int T, int D, int heads, int ctx,
                           cudaStream_t stream);
/* One RVQ level: codes[s * code_stride] = argmin_j |e_j|^2 - 2 e_j . r[:, s]
 * (lowest j on ties), r (Dq, n) -= e_code. cb (bins, Dq), norms (bins). */
cudaError_t cu_mimi_rvq_level(int32_t *codes, int code_stride, float *r, const float *cb, const float *norms, int n,
                              int Dq, int bins, cudaStream_t stream);
/* sum (Dq, n) = sum over levels of cb[l][codes[s * code_stride + l]]. */
cudaError_t cu_mimi_rvq_sum(float *sum, const int32_t *codes, int code_stride, const float *cb /* (levels, bins, Dq) */,
                            int levels, int n, int Dq, int bins, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
