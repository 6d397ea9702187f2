/* lm.h - the Moshi LM's weights: config.json + model.safetensors.
 *
 * Tensors are checked by name and shape against the configuration (released
 * naming, see shared/spec/moshi-lm.md section 1) and kept in their stored
 * precision; they stay inside the read-only mapping of the file unless a
 * tensor is misaligned for its element size (then it alone is copied).
 * Norm scales are small and widened to float32 copies.
 */
#ifndef MOSHID_LM_H
#define MOSHID_LM_H

#include "err.h"
#include "kern_cpu.h"
#include "lm_config.h"
#include "st.h"

/* How the linear layers' matrices are kept (engine.weights, moshi-run
 * --weights): the attention in/out projections and FFN linears of the
 * temporal transformer and the depformer, depformer_in and the output
 * heads (text_linear, linears). Embedding tables and norms stay as stored.
 *   STORED: the checkpoint's dtype (a q8 checkpoint: its int8 rows);
 *   BF16:   widened-from bf16 (f32/f16 matrices rounded to bf16 at load);
 *   INT8:   int8 per output row with a float32 scale (kern_q8_quantize_rows),
 *           quantized at load; a q8 checkpoint's rows as stored. */
typedef enum { LM_WEIGHTS_STORED = 0, LM_WEIGHTS_BF16 = 1, LM_WEIGHTS_INT8 = 2 } lm_weights;

/* lm_weights_name: "stored", "bf16", "int8". lm_weights_parse: the
 * reverse; -1 for anything else. */
const char *lm_weights_name(lm_weights w);
int lm_weights_parse(const char *s, lm_weights *out);

/* RMSNorm epsilon of norm = "rms_norm_f32". */
#define LM_NORM_EPS 1e-8f
/* Depformer steps in a PersonaPlex checkpoint. */
#define LM_PERSONAPLEX_DEP_Q 16

typedef struct lm_layer_w {
    const float *norm1, *norm2;  /* (dim) */
    kern_mat attn_in;            /* (3*dim, dim): rows Q | K | V */
    kern_mat attn_out;           /* (dim, dim) */
    kern_mat ffn_in;             /* (2*hidden, dim): rows gate | linear */
    kern_mat ffn_out;            /* (dim, hidden) */
} lm_layer_w;

typedef struct lm_dep_layer_w {
    const float *norm1, *norm2;  /* (depformer_dim), shared by all steps */
    kern_mat attn_in[LM_MAX_DEP_Q];   /* (3*ddim, ddim) per step */
    kern_mat attn_out[LM_MAX_DEP_Q];  /* (ddim, ddim) */
    kern_mat ffn_in[LM_MAX_DEP_Q];    /* (2*dep_hidden, ddim) */
    kern_mat ffn_out[LM_MAX_DEP_Q];   /* (ddim, dep_hidden) */
} lm_dep_layer_w;

typedef struct lm_model {
    lm_config cfg;               /* variant resolved (never LM_VARIANT_AUTO) */
    lm_weights weights;          /* the scheme asked for at load */
    int int8;                    /* 1: the linear matrices are ST_I8 (quantized at load or a q8 checkpoint) */
    st_file *st;                 /* owns the mapping the matrices point into */
    kern_mat emb[LM_MAX_NQ];     /* (card+1, dim) */
    kern_mat text_emb;           /* (text_card+1, dim) */
    kern_mat text_linear;        /* (text_card, dim) */
    const float *out_norm;       /* (dim) */
    lm_layer_w *layers;          /* (num_layers) */
    kern_mat dep_in[LM_MAX_DEP_Q];        /* (ddim, dim) */
    kern_mat dep_text_emb;                /* (text_card+1, ddim) */
    kern_mat dep_emb[LM_MAX_DEP_Q];       /* (card+1, ddim), dep_q - 1 of them */
    lm_dep_layer_w *dep_layers;           /* (depformer_num_layers) */
    kern_mat linears[LM_MAX_DEP_Q];       /* (card, ddim) */
    size_t weight_bytes;         /* bytes of all matrices as they run (int8: rows + scales) */
    size_t copied_bytes;         /* bytes copied out of the mapping */
    void **owned;                /* heap blocks to free */
    int n_owned, cap_owned;
} lm_model;

/* lm_model_load: read DIR/config.json (optional: built-in 7B values without
 * it) and map DIR/model.safetensors. variant: LM_VARIANT_AUTO detects it
 * (16 depformer steps = PersonaPlex). Returns NULL with err naming the file
 * and tensor on failure. Thread: any; the model is read-only afterwards and
 * may be shared by threads. */
lm_model *lm_model_load(const char *dir, lm_variant variant, ms_error *err);

/* lm_model_load_ex: lm_model_load with the weight scheme (LM_WEIGHTS_*).
 * Kyutai's q8 checkpoints ("quantize": true in config.json: int8 linear
 * matrices, each with a float32 `<name>_scb` row absmax, scale = scb / 127;
 * the attention projections concatenated as `in_proj_weight` or per step as
 * `in_projs.<k>.weight`) load with STORED or INT8; BF16 refuses them.
 * lm_model_load (= STORED) refuses them: its callers (the CUDA backend)
 * read float matrices only. */
lm_model *lm_model_load_ex(const char *dir, lm_variant variant, lm_weights weights, ms_error *err);

/* lm_model_load_files: the same with explicit paths (config_path may be
 * NULL for the built-in values). */
lm_model *lm_model_load_files(const char *config_path, const char *weights_path, lm_variant variant,
                              ms_error *err);
lm_model *lm_model_load_files_ex(const char *config_path, const char *weights_path, lm_variant variant,
                                 lm_weights weights, ms_error *err);

void lm_model_free(lm_model *m);

const char *lm_variant_name(lm_variant v);

#endif
