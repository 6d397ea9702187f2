/* cu_plan.h - the CUDA backend's memory plan: what the device must hold
 * for N slots at context C (weights, K/V, snapshots, workspaces, graph
 * buckets), and how many slots fit on a card of M bytes. Plain C (no CUDA
 * headers): the plugin calls it at open, the daemon and the benchmarks call
 * it to explain a refusal, and check_plan tests it on the CPU.
 */
#ifndef MOSHID_CU_PLAN_H
#define MOSHID_CU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "lm_config.h"

/* What is asked for. */
typedef struct cu_plan_req {
    int slots;                /* backend slots (sessions + prime slots) */
    int context;              /* K/V positions per slot (<= 0: cfg->context) */
    int snapshots;            /* K/V snapshots held on the device */
    int snap_positions;       /* positions of each snapshot */
    int max_bucket;           /* largest batch-size bucket captured (<= 0: slots) */
    int weight_bytes_per_el;  /* 2: bf16 (the backend's storage) */
    int codec;                /* 1: the Mimi codec's weights and per-slot state too */
    int w8;                   /* 1: the 8-bit weight scheme: every linear matrix int8 + a
                                 float32 scale per row, embeddings and norms at
                                 weight_bytes_per_el, and the GEMM path's scratch */
    int kv8;                  /* 1: the 8-bit K/V: int8 + a float32 scale per position,
                                 layer, K|V and head (rings and snapshots) */
} cu_plan_req;

/* The plan, in bytes. */
typedef struct cu_plan {
    size_t weights;           /* LM matrices, embeddings, norms */
    size_t kv;                /* every slot's K/V ring (bf16), scratch slot included */
    size_t kv_per_slot;
    size_t snapshots;
    size_t workspace;         /* activations and logits of the largest bucket */
    size_t graphs;            /* captured graphs' estimated overhead */
    size_t codec;             /* Mimi weights and per-slot state (0 unless req->codec) */
    size_t reserve;           /* CUDA context, cuBLAS workspace, fragmentation margin */
    size_t total;
} cu_plan;

/* cu_plan_compute: fill *out for req on cfg. Returns 0, or -1 when req is
 * invalid (slots < 1, ...) or a size overflows. */
int cu_plan_compute(const lm_config *cfg, const cu_plan_req *req, cu_plan *out);

/* cu_plan_max_slots: the most slots (with req's other fields) whose plan
 * fits in device_bytes; 0 when not even one does. */
int cu_plan_max_slots(const lm_config *cfg, const cu_plan_req *req, size_t device_bytes);

/* cu_plan_describe: one line, "weights 14.2 GiB + K/V 32 x 0.40 GiB + ...
 * = 29.5 GiB", for logs and errors. Returns buf. */
char *cu_plan_describe(const cu_plan *p, int slots, char *buf, size_t len);

/* ---- added with cu_plan.c: the plan's assumptions, named ---------------- */

/* Positions of one attention split (the ring is attended in splits of this
 * many positions, each giving a partial max, sum and accumulator per head
 * that a second pass combines). */
#define CU_PLAN_ATTN_SPLIT 256
/* Rows of one prefill chunk (a prime's matrix-matrix products): the
 * workspace holds at least this many rows, and the chunk's attention
 * scores (rows x heads x context). */
#define CU_PLAN_PREFILL_ROWS 64
/* Elements of the int8 weight path's bf16 scratch (rows widened for a
 * GEMM, a chunk at a time): 32 MiB. */
#define CU_PLAN_Q8_SCRATCH ((size_t)16 << 20)
/* Depformer sub-steps a captured graph holds (the backend's
 * CU_GRAPH_DEP_STEPS): the graphs' size counts these, not dep_q. */
#define CU_PLAN_GRAPH_DEP_STEPS 8
/* Most batch-size buckets (1, 2, 4, ... up to LM_MAX_SLOTS). */
#define CU_PLAN_MAX_BUCKETS 16

/* cu_plan_buckets: the batch sizes a graph is captured for when the
 * largest is max_bucket: the powers of two below it, then max_bucket
 * itself (1, 2, 4, 8, 12 for 12). Writes at most cap sizes, ascending, and
 * returns how many there are (-1 when max_bucket < 1 or cap is too small). */
int cu_plan_buckets(int max_bucket, int *sizes, int cap);

#endif
