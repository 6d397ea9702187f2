/* mimi_int.h - Mimi internals shared by mimi_model.c, mimi_layers.c, mimi.c.
 *
 * Activations are channel-major matrices (C, N): row c holds channel c for
 * N columns, where the columns are n streams x T steps (stream s owns columns
 * [s*T, (s+1)*T)). Every layer is one GEMM over all streams of a batch.
 */
#ifndef MOSHID_MIMI_INT_H
#define MOSHID_MIMI_INT_H

#include <stddef.h>

#include "mimi.h"

/* A causal streaming convolution (or transposed convolution). */
typedef struct mimi_conv {
    int cin, cout, k, stride, dil;
    int transposed;      /* 1: transposed conv */
    int depthwise;       /* 1: groups == cin == cout (upsample) */
    int replicate;       /* 1: state initialised from the first input column */
    int pad;             /* kept state, columns: conv (k-1)*dil+1-stride; transposed k-stride */
    float *w;            /* conv: (cout, cin*k); transposed: (cout*k, cin); depthwise: (c, k) */
    float *wp;           /* w pre-packed for mimi_gemm_prepacked (then w is NULL) */
    float *wpanel;       /* w in the panel layout for mimi_gemm_panel (then w is NULL) */
    float *b;            /* (cout) or NULL */
    size_t state_off;    /* offset of this layer's state in a stream's state block, floats */
} mimi_conv;

/* One SEANet step: a plain conv, or a residual block (two convs). */
typedef struct mimi_seanet_op {
    int elu_in;          /* ELU applied to the input first */
    int resblock;        /* 1: x + b.conv(elu(a.conv(elu(x)))) */
    mimi_conv a, b;      /* b used by residual blocks only */
} mimi_seanet_op;

typedef struct mimi_seanet {
    int nops;
    mimi_seanet_op *ops;
} mimi_seanet;

typedef struct mimi_tlayer {
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b;   /* (D) */
    float *in_proj;      /* (3D, D), panel layout */
    float *out_proj;     /* (D, D), panel layout */
    float *linear1;      /* (F, D), panel layout */
    float *linear2;      /* (D, F), panel layout */
    float *ls1, *ls2;    /* (D) or NULL */
} mimi_tlayer;

typedef struct mimi_transformer {
    int nlayers;
    mimi_tlayer *layers;
    size_t state_off;    /* K/V rings in a stream's state block, floats */
} mimi_transformer;

typedef struct mimi_rvq {
    int levels;          /* levels loaded (used ones only) */
    float *in_proj;      /* (Dq, D), panel layout */
    float *out_proj;     /* (D, Dq), panel layout */
    float *codebooks;    /* (levels, bins, Dq) */
    float *cb_panel;     /* (levels) x panel layout of (bins, Dq) */
    float *norms;        /* (levels, bins): |e|^2 */
} mimi_rvq;

struct mimi_model {
    mimi_config cfg;
    mimi_seanet enc, dec;
    mimi_transformer enc_tr, dec_tr;
    mimi_conv down, up;  /* used when cfg.resample_stride > 1 */
    mimi_rvq rvq_first, rvq_rest;
    float *rope_freq;    /* (head_dim/2) */
    size_t enc_state, dec_state;     /* floats of conv state per stream */
    size_t ws_act, ws_col, ws_xb;    /* workspace floats per stream */
    int plan_rc;         /* MS_OK, or the error met while planning */
    float **allocs;      /* every weight buffer, freed with the model */
    size_t nallocs, cap_allocs;
};

/* A batch workspace (mimi.h: mimi_ws_create), sized once for cap_n streams;
 * belongs to its creator (one batch call at a time), never to a stream. */
struct mimi_ws {
    const mimi_model *m;
    size_t cap_n;        /* streams it is sized for */
    float *act0, *act1, *act2, *col, *xb;
    float *pack;         /* (MIMI_GEMM_SCRATCH) */
    void **tab;          /* (cap_n * 4) per-stream state pointers of a call */
};

/* A transformer's streaming state for one stream. */
typedef struct mimi_tstate {
    long offset;         /* steps seen since reset (RoPE position of the next step) */
    float *kv;           /* (layers, 2, context, D) */
    long *pos;           /* (context): position stored in each ring slot, -1 empty */
} mimi_tstate;

struct mimi_stream {
    const mimi_model *m;
    float *enc_state;    /* conv states of encoder + downsample */
    float *dec_state;    /* conv states of upsample + decoder */
    unsigned char *enc_first;   /* replicate flags (one: the downsample) */
    mimi_tstate enc_tr, dec_tr;
};

/* ---- mimi_model.c ---- */

#define MIMI_HUGE_PAGE ((size_t)2 << 20)   /* bytes */
#define MIMI_HUGE_MIN ((size_t)1 << 20)    /* buffers from this size get huge pages */

/* mimi_alloc_floats: n floats (uninitialised) for weights, K/V rings and
 * workspaces: buffers of 1 MB and more are 2 MB aligned and marked for
 * transparent huge pages. Freed with free(). NULL when out of memory. */
float *mimi_alloc_floats(size_t n);

/* ---- mimi_layers.c ---- */

/* mimi_conv_forward: y (cout, n*Tout) from x (cin, n*T) for n streams whose
 * states are at states[s] + c->state_off. ELU is applied to x first when
 * elu_in. accumulate: y += bias + conv(x); else y = bias + conv(x).
 * first[s] (may be NULL): replicate flags, cleared after use. */
void mimi_conv_forward(const mimi_conv *c, int n, int T, const float *x, int elu_in,
                       float *const *states, unsigned char *const *first, float *y,
                       int accumulate, mimi_ws *ws);

/* mimi_conv_out_len: output steps for T input steps. */
int mimi_conv_out_len(const mimi_conv *c, int T);

/* mimi_seanet_forward: run every op; x (C0, n*T) in ws->act0; the result
 * is left in ws->act0 (the buffers are swapped as needed). Returns T out. */
int mimi_seanet_forward(const mimi_seanet *net, int n, int T, float *const *states, mimi_ws *ws);

/* mimi_transformer_forward: x (D, n*T) in place; ts[s] the states. */
void mimi_transformer_forward(const mimi_model *m, const mimi_transformer *tr, int n, int T,
                              float *x, mimi_tstate *const *ts, mimi_ws *ws);

/* The activations, exact to float rounding. */
void mimi_elu(float *dst, const float *src, size_t n);

/* ---- mimi_gemm.c ---- */

/* mimi_gemm: C (M, N; ldc) = [C +] A (M, K; lda) . B (K, N; ldb), row-major,
 * single thread. accumulate: add to C, else overwrite. */
void mimi_gemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
               float *C, int ldc, int accumulate);

/* Pre-packed A for layers whose N is always large: the packed size in
 * floats, the packing (A (M, K; lda) -> dst), and the product with it. */
size_t mimi_gemm_packed_size(int M, int K);
void mimi_gemm_pack_a(int M, int K, const float *A, int lda, float *dst);
void mimi_gemm_prepacked(int M, int N, int K, const float *Ap, const float *B, int ldb,
                         float *C, int ldc, int accumulate, float *scratch);

/* Packing space of the blocked kernel, floats: a caller that passes a
 * scratch buffer of this size (64-byte aligned) spares an allocation per
 * call; NULL allocates. */
#define MIMI_GEMM_SCRATCH ((size_t)256 * 2048 + (size_t)96 * 256)

/* A stride-1 convolution's input over n streams, read in place: stream s's
 * input with its kept state is xb + s*cin*L, (cin, L) row-major; the
 * im2col matrix B (cin*K, n*Tout) is B[ci*K + kk, s*Tout + t] =
 * xb_s[ci, t + kk*dil]. */
typedef struct mimi_conv_src {
    const float *xb;
    int n, cin, K, S, dil, L, Tout;
} mimi_conv_src;

/* C (M, n*Tout; ldc) += Ap (pre-packed, M x cin*K) . B of src, without
 * building B (S must be 1, Tout a multiple of 16). */
void mimi_gemm_conv_direct(int M, const float *Ap, const mimi_conv_src *src, float *C, int ldc);

/* The panel layout for weights of small-N products (the 25/12.5 Hz layers):
 * 16-row panels, k-major inside, so a product with few columns streams
 * the weights once. Size in floats, packing, and the product (any N: up to
 * 12 columns by the panel kernel, more by the blocked kernel). */
size_t mimi_panel_size(int M, int K);
void mimi_panel_pack(int M, int K, const float *A, int lda, float *dst);
void mimi_gemm_panel(int M, int N, int K, const float *P, const float *B, int ldb, float *C, int ldc,
                     int accumulate, float *scratch);

#endif
