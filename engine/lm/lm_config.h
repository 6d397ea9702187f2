/* lm_config.h - the Moshi LM's configuration (official LMModel key names).
 *
 * Read from a checkpoint's config.json (the keyword arguments of the
 * official `LMModel`, plus loader keys that are ignored), or the built-in
 * Moshi 7B values when there is none. Options moshid does not implement
 * (other norms, gatings, positional embeddings, conditioners, CFG, LoRA, ...)
 * are refused with a message naming the key, never computed differently.
 * Derived sizes follow the official code (moshi/modules/gating.py).
 */
#ifndef MOSHID_LM_CONFIG_H
#define MOSHID_LM_CONFIG_H

#include <stdint.h>

#include "err.h"

/* Most audio input streams (n_q); the 7B has 16. */
#define LM_MAX_NQ 32
/* Most streams: text + n_q audio. */
#define LM_MAX_STREAMS (1 + LM_MAX_NQ)
/* Most depformer sub-steps (PersonaPlex: 16). */
#define LM_MAX_DEP_Q 16
/* Audio codebooks per side (agent, user) in PersonaPlex's step. */
#define PP_SIDE_CODEBOOKS 8
/* Largest stream delay accepted, frames. */
#define LM_MAX_DELAY 8
/* Bounds on sizes read from config.json (hostile files). */
#define LM_MAX_DIM 16384
#define LM_MAX_LAYERS 256
#define LM_MAX_HEADS 256
#define LM_MAX_CARD (1 << 20)
#define LM_MAX_CONTEXT (1 << 20)
/* Largest config.json accepted, bytes. */
#define LM_MAX_CONFIG_BYTES (1 << 20)

/* Which bookkeeping steps the checkpoint: Kyutai's LMGen (lmgen.h) or
 * PersonaPlex's (lmgen_pp.h); it also sets the attention window (window,
 * dep_window below). AUTO: decided from the checkpoint at load. */
typedef enum { LM_VARIANT_AUTO = -1, LM_VARIANT_KYUTAI = 0, LM_VARIANT_PERSONAPLEX = 1 } lm_variant;

/* Text token ids of every released Moshi and PersonaPlex checkpoint:
 * PAD (the default of existing_text_padding_id, and the text forced
 * while priming a persona) and EPAD (the end of a pad run). Neither is
 * shown to a client. */
#define LM_TEXT_PAD_ID 3
#define LM_TEXT_EPAD_ID 0

typedef struct lm_config {
    /* temporal transformer */
    int dim, num_heads, num_layers;
    double hidden_scale;          /* dim_feedforward = int(hidden_scale * dim) */
    int context;                  /* K/V ring slots per layer, steps */
    double max_period;            /* RoPE base */
    /* streams */
    int n_q, dep_q, card, text_card;
    int delays[LM_MAX_STREAMS];   /* (1 + n_q) */
    int existing_text_padding_id; /* LM_TEXT_PAD_ID unless the file says */
    int quantize;                 /* "quantize": true: a q8 checkpoint (int8 rows + _scb) */
    /* depformer */
    int depformer_dim, depformer_num_heads, depformer_num_layers;
    int depformer_dim_feedforward;
    /* derived (lm_config_finish) */
    int n_streams;                /* 1 + n_q */
    int n_user;                   /* n_q - dep_q: user streams fed by LMGen */
    int head_dim, dep_head_dim;
    int hidden;                   /* gated hidden width of the temporal FFN */
    int dep_hidden;               /* ... of the depformer FFN */
    int max_delay;
    lm_variant variant;
    /* attention windows, set from the variant by lm_config_finish: how many
     * positions a query attends to, its own included (the query at q sees
     * max(0, q - window + 1) .. q). Kyutai (moshi 0.2.13's RingKVCache):
     * window = context, dep_window = dep_q. PersonaPlex (NVIDIA's
     * RingKVCache.complete gives the oldest row of a full ring a position
     * in the future, so the mask drops it): context - 1 and dep_q - 1. */
    int window;                   /* temporal transformer, positions */
    int dep_window;               /* depformer, sub-steps of one frame */
} lm_config;

/* lm_config_default: the built-in Moshi 7B configuration (moshiko/moshika),
 * derived sizes included. */
void lm_config_default(lm_config *c);

/* lm_config_parse: the configuration of config.json text[0..len) into c.
 * As the official loader passes the file as LMModel's keyword arguments, an
 * absent key means the LMModel constructor default (moshi 0.2.13): where
 * that default is not implemented (norm "layer_norm", gating "none",
 * positional embeddings "sin", no multi-linear or per-step depformer) or
 * not usable (num_layers, context, delays) the file is refused; the
 * depformer's heads and layers default to the main transformer's. Then
 * validated and the sizes derived. `name` is used in messages. Returns
 * MS_OK, or an error naming the key. */
int lm_config_parse(lm_config *c, const char *text, size_t len, const char *name,
                    ms_error *err);

/* lm_config_load: lm_config_default, then config.json at path when it
 * exists (a missing file is not an error; an unreadable one is). */
int lm_config_load(lm_config *c, const char *path, ms_error *err);

/* lm_config_finish: check ranges and compute the derived fields (the
 * attention windows from the variant). Called by the two functions above
 * and by the model loader once the variant is resolved; call it again
 * after editing a config by hand. */
int lm_config_finish(lm_config *c, ms_error *err);

/* lm_gated_hidden: the official gated-FFN hidden width for (dim, F). */
int lm_gated_hidden(int dim, int dim_feedforward);

#endif
