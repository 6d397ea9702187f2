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
    size_t weight_bytes;         /* bytes of all matrices, stored precision */
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

/* lm_model_load_files: the same with explicit paths (config_path may be
 * NULL for the built-in values). */
lm_model *lm_model_load_files(const char *config_path, const char *weights_path, lm_variant variant,
                              ms_error *err);

void lm_model_free(lm_model *m);

const char *lm_variant_name(lm_variant v);

#endif
