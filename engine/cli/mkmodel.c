/* mkmodel.c - build/moshid-mkmodel: writes a small deterministic
 * random-weight model in the official layout, so that moshid serves real
 * sessions on a fresh machine with no downloaded weights (it babbles; every
 * part of the pipeline is real).
 *
 *   moshid-mkmodel --out DIR --text-card N [--seed S] [--dep-q 16|8] [--lm-only]
 *                  [--context N] [--dim N --layers N]
 *
 * Writes DIR/lm/config.json + DIR/lm/model.safetensors (the LMModel keyword
 * names and the released tensor names; PersonaPlex-shaped: 16 audio inputs,
 * a 16-step depformer, audio card 2048) and DIR/mimi.json +
 * DIR/mimi.safetensors (the official Mimi naming, a small SEANet and 2-layer
 * transformers). --dep-q 8 writes a Kyutai-shaped LM instead (8 generated
 * streams); --lm-only skips Mimi; --context N sets the LM's K/V context in
 * steps (default 3000, as the 7B models; the weights do not depend on it,
 * so a small context gives the same model with a ring that wraps sooner:
 * the long-session tests); --dim (a multiple of 64 from 128) and --layers
 * widen and deepen the temporal transformer (heads of 64 above dim 128:
 * the larger random models the 8-bit quality measurement runs on,
 * docs/lm.md). The tokenizer (DIR/tokenizer.model) is trained separately
 * with spm_train (see config/demo/README.md); its vocabulary size is the
 * text card given here. Sizes are chosen so that LM + Mimi cost a few ms of
 * CPU per session frame (docs/benchmarks.md).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "lm_config.h"
#include "rng.h"
#include "st.h"

/* The demo LM. */
#define LM_DIM_DEFAULT 128
#define LM_LAYERS_DEFAULT 2
#define LM_DIM_MAX 8192
#define LM_LAYERS_MAX 64
/* the temporal transformer's width, heads and depth (--dim, --layers) */
static int lm_dim = LM_DIM_DEFAULT, lm_heads = 4, lm_layers = LM_LAYERS_DEFAULT;
#define LM_HIDDEN_SCALE 4.125
#define LM_CONTEXT 3000   /* default; --context */
#define LM_CONTEXT_MIN 8
#define LM_CONTEXT_MAX 100000
#define LM_NQ 16
#define LM_CARD 2048
#define DEP_DIM 64
#define DEP_HEADS 4
#define DEP_LAYERS 1
#define DEP_FF 264 /* int(4.125 * 64) */
/* The demo Mimi. */
#define MIMI_FILTERS 8
#define MIMI_DIM 64
#define MIMI_HEADS 4
#define MIMI_LAYERS 2
#define MIMI_FF 256
#define MIMI_QDIM 32
#define MIMI_NQ 8
#define MIMI_BINS 2048

typedef struct {
    uint64_t seed;
    uint32_t tensor;   /* counter: one stream of numbers per tensor */
    st_writer *w;
    float **bufs;      /* kept alive until save */
    int nbufs, cap;
} gen;

/* gated hidden size of the official SiLU FFN for feed-forward width ff */
static int gated_hidden(int dim, int ff) { return ff == 4 * dim ? 21 * dim / 8 : 2 * ff / 3; }

static float *newbuf(gen *g, size_t n) {
    if (g->nbufs == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->bufs = realloc(g->bufs, (size_t)g->cap * sizeof *g->bufs);
        if (!g->bufs) { perror("realloc"); exit(1); }
    }
    float *b = calloc(n ? n : 1, sizeof(float));
    if (!b) { perror("calloc"); exit(1); }
    return g->bufs[g->nbufs++] = b;
}

/* add: a float32 tensor; mode 'u' uniform(-a, a), 'c' constant a. */
static void add(gen *g, const char *name, char mode, double a, int ndim, ...) {
    int64_t shape[4];
    size_t n = 1;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) {
        shape[i] = va_arg(ap, int);
        n *= (size_t)shape[i];
    }
    va_end(ap);
    float *b = newbuf(g, n);
    uint32_t t = g->tensor++;
    for (size_t i = 0; i < n; i++)
        b[i] = mode == 'c' ? (float)a
                           : (float)(a * (2.0 * rng_uniform(g->seed, t, 0, (uint32_t)i) - 1.0));
    if (st_writer_add(g->w, name, ST_F32, ndim, shape, b) != MS_OK) {
        fprintf(stderr, "mkmodel: cannot add %s\n", name);
        exit(1);
    }
}

/* uniform with variance 1/fan_in */
static double lin(int fan_in) { return sqrt(3.0 / fan_in); }

static void save(gen *g, const char *path) {
    ms_error e = {0};
    if (st_writer_save(g->w, path, &e) != MS_OK) {
        fprintf(stderr, "mkmodel: %s\n", e.msg);
        exit(1);
    }
    st_writer_free(g->w);
    for (int i = 0; i < g->nbufs; i++) free(g->bufs[i]);
    free(g->bufs);
    g->bufs = NULL;
    g->nbufs = g->cap = 0;
    g->w = st_writer_create();
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "mkmodel: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void make_lm(gen *g, const char *dir, int text_card, int dep_q, int context) {
    char name[256], path[4096];
    int H = gated_hidden(lm_dim, (int)(LM_HIDDEN_SCALE * lm_dim));
    int DH = gated_hidden(DEP_DIM, DEP_FF);
    for (int k = 0; k < LM_NQ; k++) {
        snprintf(name, sizeof name, "emb.%d.weight", k);
        add(g, name, 'u', 1.0, 2, LM_CARD + 1, lm_dim);
    }
    add(g, "text_emb.weight", 'u', 1.0, 2, text_card + 1, lm_dim);
    add(g, "text_linear.weight", 'u', lin(lm_dim), 2, text_card, lm_dim);
    add(g, "out_norm.alpha", 'c', 1.0, 3, 1, 1, lm_dim);
    for (int l = 0; l < lm_layers; l++) {
#define LAYER(fmt) (snprintf(name, sizeof name, "transformer.layers.%d." fmt, l), name)
        add(g, LAYER("norm1.alpha"), 'c', 1.0, 3, 1, 1, lm_dim);
        add(g, LAYER("norm2.alpha"), 'c', 1.0, 3, 1, 1, lm_dim);
        add(g, LAYER("self_attn.in_proj_weight"), 'u', lin(lm_dim), 2, 3 * lm_dim, lm_dim);
        add(g, LAYER("self_attn.out_proj.weight"), 'u', lin(lm_dim), 2, lm_dim, lm_dim);
        add(g, LAYER("gating.linear_in.weight"), 'u', lin(lm_dim), 2, 2 * H, lm_dim);
        add(g, LAYER("gating.linear_out.weight"), 'u', lin(H), 2, lm_dim, H);
#undef LAYER
    }
    for (int k = 0; k < dep_q; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        add(g, name, 'u', lin(lm_dim), 2, DEP_DIM, lm_dim);
        snprintf(name, sizeof name, "linears.%d.weight", k);
        add(g, name, 'u', lin(DEP_DIM), 2, LM_CARD, DEP_DIM);
        if (k < dep_q - 1) {
            snprintf(name, sizeof name, "depformer_emb.%d.weight", k);
            add(g, name, 'u', 1.0, 2, LM_CARD + 1, DEP_DIM);
        }
    }
    add(g, "depformer_text_emb.weight", 'u', 1.0, 2, text_card + 1, DEP_DIM);
    for (int l = 0; l < DEP_LAYERS; l++) {
#define DLAYER(fmt, ...) (snprintf(name, sizeof name, "depformer.layers.%d." fmt, l, ##__VA_ARGS__), name)
        add(g, DLAYER("norm1.alpha"), 'c', 1.0, 3, 1, 1, DEP_DIM);
        add(g, DLAYER("norm2.alpha"), 'c', 1.0, 3, 1, 1, DEP_DIM);
        add(g, DLAYER("self_attn.in_proj_weight"), 'u', lin(DEP_DIM), 2, dep_q * 3 * DEP_DIM, DEP_DIM);
        add(g, DLAYER("self_attn.out_proj.weight"), 'u', lin(DEP_DIM), 2, dep_q * DEP_DIM, DEP_DIM);
        for (int k = 0; k < dep_q; k++) {
            add(g, DLAYER("gating.%d.linear_in.weight", k), 'u', lin(DEP_DIM), 2, 2 * DH, DEP_DIM);
            add(g, DLAYER("gating.%d.linear_out.weight", k), 'u', lin(DH), 2, DEP_DIM, DH);
        }
#undef DLAYER
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    save(g, path);

    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\n  \"dim\": %d, \"text_card\": %d, \"existing_text_padding_id\": %d,\n"
             "  \"n_q\": %d, \"dep_q\": %d, \"card\": %d, \"num_heads\": %d, \"num_layers\": %d,\n"
             "  \"hidden_scale\": %g, \"causal\": true, \"context\": %d, \"max_period\": 10000,\n"
             "  \"gating\": \"silu\", \"norm\": \"rms_norm_f32\", \"positional_embedding\": \"rope\",\n"
             "  \"depformer_dim\": %d, \"depformer_dim_feedforward\": %d, \"depformer_num_heads\": %d,\n"
             "  \"depformer_num_layers\": %d, \"depformer_multi_linear\": true, \"depformer_context\": %d,\n"
             "  \"depformer_max_period\": 10000, \"depformer_gating\": \"silu\", \"depformer_pos_emb\": \"none\",\n"
             "  \"depformer_weights_per_step\": true,\n"
             "  \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],\n"
             "  \"model_type\": \"moshid-demo\"\n}\n",
             lm_dim, text_card, LM_TEXT_PAD_ID, LM_NQ, dep_q, LM_CARD, lm_heads, lm_layers, LM_HIDDEN_SCALE, context, DEP_DIM,
             DEP_FF, DEP_HEADS, DEP_LAYERS, dep_q);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
}

static void conv(gen *g, const char *prefix, int cout, int cin, int k, int bias) {
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    add(g, name, 'u', lin(cin * k), 3, cout, cin, k);
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        add(g, name, 'u', 0.01, 1, cout);
    }
}

static void transformer(gen *g, const char *which) {
    char name[256];
    for (int l = 0; l < MIMI_LAYERS; l++) {
#define T(fmt) (snprintf(name, sizeof name, "%s.transformer.layers.%d." fmt, which, l), name)
        add(g, T("layer_scale_1.scale"), 'c', 0.01, 1, MIMI_DIM);
        add(g, T("layer_scale_2.scale"), 'c', 0.01, 1, MIMI_DIM);
        add(g, T("linear1.weight"), 'u', lin(MIMI_DIM), 2, MIMI_FF, MIMI_DIM);
        add(g, T("linear2.weight"), 'u', lin(MIMI_FF), 2, MIMI_DIM, MIMI_FF);
        add(g, T("norm1.weight"), 'c', 1.0, 1, MIMI_DIM);
        add(g, T("norm1.bias"), 'c', 0.0, 1, MIMI_DIM);
        add(g, T("norm2.weight"), 'c', 1.0, 1, MIMI_DIM);
        add(g, T("norm2.bias"), 'c', 0.0, 1, MIMI_DIM);
        add(g, T("self_attn.in_proj_weight"), 'u', lin(MIMI_DIM), 2, 3 * MIMI_DIM, MIMI_DIM);
        add(g, T("self_attn.out_proj.weight"), 'u', lin(MIMI_DIM), 2, MIMI_DIM, MIMI_DIM);
#undef T
    }
}

static void make_mimi(gen *g, const char *dir) {
    static const int ratios[4] = {8, 6, 5, 4}; /* decoder order; the encoder runs them reversed */
    char name[256], path[4096];
    /* SEANet encoder: conv k7, then per stage a residual block and a strided conv */
    int ch = MIMI_FILTERS, idx = 0;
    snprintf(name, sizeof name, "encoder.model.%d.conv.conv", idx);
    conv(g, name, ch, 1, 7, 1);
    idx = 1;
    for (int s = 3; s >= 0; s--) {
        int r = ratios[s];
        snprintf(name, sizeof name, "encoder.model.%d.block.1.conv.conv", idx);
        conv(g, name, ch / 2, ch, 3, 1);
        snprintf(name, sizeof name, "encoder.model.%d.block.3.conv.conv", idx);
        conv(g, name, ch, ch / 2, 1, 1);
        snprintf(name, sizeof name, "encoder.model.%d.conv.conv", idx + 2);
        conv(g, name, 2 * ch, ch, 2 * r, 1);
        ch *= 2;
        idx += 3;
    }
    snprintf(name, sizeof name, "encoder.model.%d.conv.conv", idx + 1);
    conv(g, name, MIMI_DIM, ch, 3, 1);
    /* SEANet decoder */
    snprintf(name, sizeof name, "decoder.model.0.conv.conv");
    conv(g, name, ch, MIMI_DIM, 7, 1);
    idx = 2;
    for (int s = 0; s < 4; s++) {
        int r = ratios[s];
        snprintf(name, sizeof name, "decoder.model.%d.convtr.convtr.weight", idx);
        add(g, name, 'u', lin(ch * 2 * r / r), 3, ch, ch / 2, 2 * r);
        snprintf(name, sizeof name, "decoder.model.%d.convtr.convtr.bias", idx);
        add(g, name, 'u', 0.01, 1, ch / 2);
        ch /= 2;
        snprintf(name, sizeof name, "decoder.model.%d.block.1.conv.conv", idx + 1);
        conv(g, name, ch / 2, ch, 3, 1);
        snprintf(name, sizeof name, "decoder.model.%d.block.3.conv.conv", idx + 1);
        conv(g, name, ch, ch / 2, 1, 1);
        idx += 3;
    }
    snprintf(name, sizeof name, "decoder.model.%d.conv.conv", idx);
    conv(g, name, 1, ch, 3, 1);
    transformer(g, "encoder_transformer");
    transformer(g, "decoder_transformer");
    add(g, "downsample.conv.conv.conv.weight", 'u', lin(MIMI_DIM * 4), 3, MIMI_DIM, MIMI_DIM, 4);
    add(g, "upsample.convtr.convtr.convtr.weight", 'u', 0.5, 3, MIMI_DIM, 1, 4);
    for (int q = 0; q < 2; q++) {
        const char *which = q ? "rvq_rest" : "rvq_first";
        int levels = q ? MIMI_NQ - 1 : 1;
        snprintf(name, sizeof name, "quantizer.%s.input_proj.weight", which);
        add(g, name, 'u', lin(MIMI_DIM), 3, MIMI_QDIM, MIMI_DIM, 1);
        snprintf(name, sizeof name, "quantizer.%s.output_proj.weight", which);
        add(g, name, 'u', lin(MIMI_QDIM), 3, MIMI_DIM, MIMI_QDIM, 1);
        for (int l = 0; l < levels; l++) {
            snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook._initialized", which, l);
            add(g, name, 'c', 1.0, 1, 1);
            snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", which, l);
            add(g, name, 'c', 1.0, 1, MIMI_BINS);
            snprintf(name, sizeof name, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", which, l);
            add(g, name, 'u', 1.0 / (l + 1), 2, MIMI_BINS, MIMI_QDIM);
        }
    }
    snprintf(path, sizeof path, "%s/mimi.safetensors", dir);
    save(g, path);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\n  \"sample_rate\": 24000, \"channels\": 1, \"frame_rate\": 12.5, \"num_codebooks\": %d,\n"
             "  \"seanet\": {\"channels\": 1, \"dimension\": %d, \"causal\": true, \"n_filters\": %d,\n"
             "    \"n_residual_layers\": 1, \"activation\": \"ELU\", \"compress\": 2, \"dilation_base\": 2,\n"
             "    \"disable_norm_outer_blocks\": 0, \"kernel_size\": 7, \"residual_kernel_size\": 3,\n"
             "    \"last_kernel_size\": 3, \"norm\": \"none\", \"pad_mode\": \"constant\", \"ratios\": [8, 6, 5, 4],\n"
             "    \"true_skip\": true},\n"
             "  \"quantizer\": {\"dimension\": %d, \"n_q\": %d, \"bins\": %d, \"input_dimension\": %d,\n"
             "    \"output_dimension\": %d},\n"
             "  \"transformer\": {\"d_model\": %d, \"num_heads\": %d, \"num_layers\": %d, \"causal\": true,\n"
             "    \"layer_scale\": 0.01, \"context\": 250, \"conv_layout\": true, \"max_period\": 10000,\n"
             "    \"gating\": \"none\", \"norm\": \"layer_norm\", \"positional_embedding\": \"rope\",\n"
             "    \"dim_feedforward\": %d, \"input_dimension\": %d, \"output_dimensions\": [%d]}\n}\n",
             MIMI_NQ, MIMI_DIM, MIMI_FILTERS, MIMI_QDIM, MIMI_NQ, MIMI_BINS, MIMI_DIM, MIMI_DIM, MIMI_DIM, MIMI_HEADS,
             MIMI_LAYERS, MIMI_FF, MIMI_DIM, MIMI_DIM);
    snprintf(path, sizeof path, "%s/mimi.json", dir);
    write_text(path, cfg);
}

static void usage(void) {
    fprintf(stderr, "usage: moshid-mkmodel --out DIR --text-card N [--seed S] [--dep-q 16|8] [--lm-only]\n"
                    "                      [--context N (%d..%d, default %d)] [--dim N (128..%d, a multiple of 64)]\n"
                    "                      [--layers N (1..%d)]\n",
            LM_CONTEXT_MIN, LM_CONTEXT_MAX, LM_CONTEXT, LM_DIM_MAX, LM_LAYERS_MAX);
    exit(2);
}

int main(int argc, char **argv) {
    const char *out = NULL;
    long text_card = 0;
    unsigned long long seed = 20261129;
    int dep_q = 16, lm_only = 0;
    long context = LM_CONTEXT, dim = LM_DIM_DEFAULT, layers = LM_LAYERS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--text-card") && i + 1 < argc) text_card = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dep-q") && i + 1 < argc) dep_q = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lm-only")) lm_only = 1;
        else if (!strcmp(argv[i], "--context") && i + 1 < argc) context = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc) dim = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = strtol(argv[++i], NULL, 10);
        else usage();
    }
    if (dim < LM_DIM_DEFAULT || dim > LM_DIM_MAX || dim % 64 || layers < 1 || layers > LM_LAYERS_MAX) usage();
    lm_dim = (int)dim;
    lm_heads = dim == LM_DIM_DEFAULT ? 4 : (int)dim / 64;
    lm_layers = (int)layers;
    if (!out || text_card < 4 || text_card > 100000 || (dep_q != 8 && dep_q != 16) || context < LM_CONTEXT_MIN ||
        context > LM_CONTEXT_MAX)
        usage();
    char lmdir[4096];
    snprintf(lmdir, sizeof lmdir, "%s/lm", out);
    if ((mkdir(out, 0755) && errno != EEXIST) || (mkdir(lmdir, 0755) && errno != EEXIST)) {
        fprintf(stderr, "mkmodel: cannot create %s: %s\n", lmdir, strerror(errno));
        return 1;
    }
    gen g = {.seed = seed, .w = st_writer_create()};
    make_lm(&g, lmdir, (int)text_card, dep_q, (int)context);
    if (!lm_only) make_mimi(&g, out);
    st_writer_free(g.w);
    fprintf(stderr, "mkmodel: wrote %s/lm/{config.json,model.safetensors}%s\n", out, lm_only ? "" : " and mimi.{json,safetensors}");
    return 0;
}
