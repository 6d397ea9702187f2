/* mimi_rand.c - a random-weight Mimi checkpoint in the official layout (see
 * mimi_rand.h). The tensor list walks the configuration in the order the
 * loader (engine/mimi/mimi_model.c) reads it; the numbers are produced
 * while saving (st_writer_add_fn), so no tensor is held in memory. */
#include "mimi_rand.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st.h"

/* Most tensors of one checkpoint: the real configuration has 246 (SEANet
 * 2 x 28, transformers 2 x 8 x 10, quantizer 2 x 2 + 8 x 3, resampling 2),
 * each the name and shape of ../shared/spec/mimi-tensors.txt (checked by
 * hand against that list: only its 24 quantizer levels past the 8 used are
 * left out). */
#define MR_MAX_TENSORS 4096
#define MR_MAX_JSON 4096

/* How one tensor's numbers are made: constant c, or c + uniform(-a, a). */
typedef struct mr_fill {
    uint64_t seed;
    float c, a;
} mr_fill;

typedef struct mr {
    st_writer *w;
    mr_fill *fills;
    int n;
    uint64_t seed;
    int rc;
    ms_error *err;
} mr;

/* splitmix64: one stream per tensor (the seed mixed with its index) */
static uint64_t mr_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int mr_fill_fn(void *ctx, void *dst, size_t nbytes) {
    mr_fill *f = ctx;
    float *p = dst;
    size_t n = nbytes / sizeof(float);
    uint64_t s = f->seed;
    for (size_t i = 0; i < n; i++) {
        /* 24 random bits to [-1, 1) */
        double u = (double)(mr_next(&s) >> 40) * (2.0 / 16777216.0) - 1.0;
        p[i] = f->c + f->a * (float)u;
    }
    return MS_OK;
}

/* add: tensor `name` of ndim dims (shape), constant c plus uniform(-a, a). */
static void add(mr *r, const char *name, float c, float a, int ndim, const int64_t *shape) {
    if (r->rc) return;
    if (r->n == MR_MAX_TENSORS) {
        r->rc = ms_err_set(r->err, MS_ERR_LIMIT, "mimi_rand: more than %d tensors", MR_MAX_TENSORS);
        return;
    }
    mr_fill *f = &r->fills[r->n];
    uint64_t s = r->seed ^ (0xD1B54A32D192ED03ULL * (uint64_t)(r->n + 1));
    *f = (mr_fill){.seed = mr_next(&s), .c = c, .a = a};
    r->n++;
    int rc = st_writer_add_fn(r->w, name, ST_F32, ndim, shape, mr_fill_fn, f);
    if (rc) r->rc = ms_err_set(r->err, rc, "mimi_rand: cannot add tensor %s", name);
}

/* A weight whose first dimension is the output: variance 1 / fan-in, the
 * fan-in being the product of the other dimensions. */
static void weight(mr *r, const char *name, int ndim, const int64_t *shape) {
    double fan = 1;
    for (int i = 1; i < ndim; i++) fan *= (double)shape[i];
    add(r, name, 0.f, (float)sqrt(3.0 / fan), ndim, shape);
}

/* A convolution prefix.weight [cout, cin, k] and prefix.bias [cout]. */
static void conv(mr *r, const char *prefix, int cout, int cin, int k) {
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    weight(r, name, 3, (const int64_t[]){cout, cin, k});
    snprintf(name, sizeof name, "%s.bias", prefix);
    add(r, name, 0.f, 0.01f, 1, (const int64_t[]){cout});
}

/* A transposed convolution prefix.weight [cin, cout, k] (torch's layout),
 * bias [cout]; each output sums cin x k / stride products. */
static void convtr(mr *r, const char *prefix, int cin, int cout, int k, int stride) {
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    add(r, name, 0.f, (float)sqrt(3.0 * stride / ((double)cin * k)), 3, (const int64_t[]){cin, cout, k});
    snprintf(name, sizeof name, "%s.bias", prefix);
    add(r, name, 0.f, 0.01f, 1, (const int64_t[]){cout});
}

/* A residual block of `dim` channels (dilation only changes the reading). */
static void resblock(mr *r, const mimi_config *c, const char *side, int idx, int dim) {
    char p[160];
    int hidden = dim / c->compress;
    snprintf(p, sizeof p, "%s.model.%d.block.1.conv.conv", side, idx);
    conv(r, p, hidden, dim, c->residual_kernel_size);
    snprintf(p, sizeof p, "%s.model.%d.block.3.conv.conv", side, idx);
    conv(r, p, dim, hidden, 1);
}

static void seanets(mr *r, const mimi_config *c) {
    char p[160];
    const int nf = c->n_filters;
    /* encoder: conv; per ratio, last first: residual blocks, ELU, strided
     * conv; ELU, conv (the ELUs take a module index each) */
    int idx = 0, mult = 1;
    conv(r, "encoder.model.0.conv.conv", nf, c->channels, c->kernel_size);
    idx++;
    for (int i = c->n_ratios - 1; i >= 0; i--) {
        for (int j = 0; j < c->n_residual_layers; j++) resblock(r, c, "encoder", idx++, mult * nf);
        idx++;
        snprintf(p, sizeof p, "encoder.model.%d.conv.conv", idx++);
        conv(r, p, 2 * mult * nf, mult * nf, 2 * c->ratios[i]);
        mult *= 2;
    }
    idx++;
    snprintf(p, sizeof p, "encoder.model.%d.conv.conv", idx);
    conv(r, p, c->dimension, mult * nf, c->last_kernel_size);
    /* decoder: conv; per ratio: ELU, transposed conv, residual blocks; ELU, conv */
    idx = 0;
    conv(r, "decoder.model.0.conv.conv", mult * nf, c->dimension, c->kernel_size);
    idx++;
    for (int i = 0; i < c->n_ratios; i++) {
        idx++;
        snprintf(p, sizeof p, "decoder.model.%d.convtr.convtr", idx++);
        convtr(r, p, mult * nf, mult * nf / 2, 2 * c->ratios[i], c->ratios[i]);
        for (int j = 0; j < c->n_residual_layers; j++) resblock(r, c, "decoder", idx++, mult * nf / 2);
        mult /= 2;
    }
    idx++;
    snprintf(p, sizeof p, "decoder.model.%d.conv.conv", idx);
    conv(r, p, c->channels, nf, c->last_kernel_size);
}

static void transformer(mr *r, const mimi_config *c, const char *side) {
    const int64_t D = c->d_model, F = c->dim_feedforward;
    char p[200];
#define NAME(suffix) (snprintf(p, sizeof p, "%s_transformer.transformer.layers.%d." suffix, side, l), p)
    for (int l = 0; l < c->num_layers; l++) {
        add(r, NAME("norm1.weight"), 1.f, 0.f, 1, (const int64_t[]){D});
        add(r, NAME("norm1.bias"), 0.f, 0.01f, 1, (const int64_t[]){D});
        add(r, NAME("norm2.weight"), 1.f, 0.f, 1, (const int64_t[]){D});
        add(r, NAME("norm2.bias"), 0.f, 0.01f, 1, (const int64_t[]){D});
        weight(r, NAME("self_attn.in_proj_weight"), 2, (const int64_t[]){3 * D, D});
        weight(r, NAME("self_attn.out_proj.weight"), 2, (const int64_t[]){D, D});
        weight(r, NAME("linear1.weight"), 2, (const int64_t[]){F, D});
        weight(r, NAME("linear2.weight"), 2, (const int64_t[]){D, F});
        if (c->layer_scale) {
            /* the official initial layer scale */
            add(r, NAME("layer_scale_1.scale"), 0.01f, 0.f, 1, (const int64_t[]){D});
            add(r, NAME("layer_scale_2.scale"), 0.01f, 0.f, 1, (const int64_t[]){D});
        }
    }
#undef NAME
}

static void rvq(mr *r, const mimi_config *c, const char *which, int levels) {
    const int64_t D = c->dimension, Dq = c->q_dimension, bins = c->q_bins;
    char p[200];
    snprintf(p, sizeof p, "quantizer.%s.input_proj.weight", which);
    weight(r, p, 3, (const int64_t[]){Dq, D, 1});
    snprintf(p, sizeof p, "quantizer.%s.output_proj.weight", which);
    weight(r, p, 3, (const int64_t[]){D, Dq, 1});
    for (int l = 0; l < levels; l++) {
        snprintf(p, sizeof p, "quantizer.%s.vq.layers.%d._codebook._initialized", which, l);
        add(r, p, 1.f, 0.f, 1, (const int64_t[]){1});
        snprintf(p, sizeof p, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", which, l);
        add(r, p, 1.f, 0.f, 1, (const int64_t[]){bins});
        /* entries of unit size per component, like the projected latents */
        snprintf(p, sizeof p, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", which, l);
        add(r, p, 0.f, 1.f, 2, (const int64_t[]){bins, Dq});
    }
}

/* json: c under the official keys (the fixed strings are the only values
 * the parser supports). */
static int json(const mimi_config *c, char *buf, size_t len) {
    char ratios[128] = "";
    size_t k = 0;
    for (int i = 0; i < c->n_ratios && k < sizeof ratios; i++)
        k += (size_t)snprintf(ratios + k, sizeof ratios - k, "%s%d", i ? ", " : "", c->ratios[i]);
    if (k >= sizeof ratios) return -1;
    int n = snprintf(
        buf, len,
        "{\n  \"sample_rate\": %d, \"channels\": %d, \"frame_rate\": %.17g, \"num_codebooks\": %d,\n"
        "  \"seanet\": {\"channels\": %d, \"dimension\": %d, \"causal\": true, \"n_filters\": %d,\n"
        "    \"n_residual_layers\": %d, \"activation\": \"ELU\", \"compress\": %d, \"dilation_base\": %d,\n"
        "    \"kernel_size\": %d, \"residual_kernel_size\": %d, \"last_kernel_size\": %d, \"norm\": \"none\",\n"
        "    \"pad_mode\": \"constant\", \"ratios\": [%s], \"true_skip\": true},\n"
        "  \"quantizer\": {\"dimension\": %d, \"n_q\": %d, \"bins\": %d, \"input_dimension\": %d,\n"
        "    \"output_dimension\": %d},\n"
        "  \"transformer\": {\"d_model\": %d, \"num_heads\": %d, \"num_layers\": %d, \"causal\": true,\n"
        "    \"layer_scale\": %s, \"context\": %d, \"conv_layout\": true, \"max_period\": %.17g,\n"
        "    \"gating\": \"none\", \"norm\": \"layer_norm\", \"positional_embedding\": \"rope\",\n"
        "    \"dim_feedforward\": %d, \"input_dimension\": %d, \"output_dimensions\": [%d]}\n}\n",
        c->sample_rate, c->channels, c->frame_rate, c->num_codebooks, c->channels, c->dimension, c->n_filters,
        c->n_residual_layers, c->compress, c->dilation_base, c->kernel_size, c->residual_kernel_size,
        c->last_kernel_size, ratios, c->q_dimension, c->q_n_q, c->q_bins, c->dimension, c->dimension, c->d_model,
        c->num_heads, c->num_layers, c->layer_scale ? "0.01" : "null", c->context, c->max_period,
        c->dim_feedforward, c->dimension, c->dimension);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* same: the fields the tensor list and the codec's shapes depend on. */
static int same(const mimi_config *a, const mimi_config *b) {
    int ok = a->sample_rate == b->sample_rate && a->channels == b->channels && a->frame_rate == b->frame_rate &&
             a->dimension == b->dimension && a->n_filters == b->n_filters &&
             a->n_residual_layers == b->n_residual_layers && a->compress == b->compress &&
             a->dilation_base == b->dilation_base && a->kernel_size == b->kernel_size &&
             a->residual_kernel_size == b->residual_kernel_size && a->last_kernel_size == b->last_kernel_size &&
             a->n_ratios == b->n_ratios && a->q_dimension == b->q_dimension && a->q_n_q == b->q_n_q &&
             a->q_bins == b->q_bins && a->d_model == b->d_model && a->num_heads == b->num_heads &&
             a->num_layers == b->num_layers && a->dim_feedforward == b->dim_feedforward &&
             a->context == b->context && a->max_period == b->max_period && a->layer_scale == b->layer_scale &&
             a->num_codebooks == b->num_codebooks;
    for (int i = 0; ok && i < a->n_ratios; i++) ok = a->ratios[i] == b->ratios[i];
    return ok;
}

void mimi_rand_tiny(mimi_config *c, int bins, int codebooks) {
    mimi_config_default(c);
    c->dimension = c->d_model = 32;
    c->n_filters = 4;
    c->q_dimension = 16;
    c->q_bins = bins;
    c->q_n_q = codebooks > 2 ? codebooks : 2;   /* the parser wants 2 levels or more */
    c->num_codebooks = codebooks;
    c->num_heads = 2;
    c->num_layers = 2;
    c->dim_feedforward = 64;
    c->context = 8;
}

int mimi_rand_write(const char *dir, const mimi_config *c, uint64_t seed, ms_error *err) {
    char text[MR_MAX_JSON], path[4096];
    mimi_config back;
    if (json(c, text, sizeof text) || mimi_config_parse(&back, text, strlen(text), err) != MS_OK) {
        ms_err_prefix(err, "mimi_rand: the configuration");
        return MS_ERR_ARG;
    }
    if (!same(c, &back)) return ms_err_set(err, MS_ERR_ARG, "mimi_rand: the configuration does not read back as written");
    if (snprintf(path, sizeof path, "%s/mimi.json", dir) >= (int)sizeof path)
        return ms_err_set(err, MS_ERR_ARG, "mimi_rand: directory name too long");
    FILE *f = fopen(path, "w");
    if (!f) return ms_err_set(err, MS_ERR_IO, "mimi_rand: %s: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    if (!ok) return ms_err_set(err, MS_ERR_IO, "mimi_rand: cannot write %s", path);

    mr r = {.seed = seed, .err = err, .w = st_writer_create(), .fills = calloc(MR_MAX_TENSORS, sizeof(mr_fill))};
    if (!r.w || !r.fills) {
        st_writer_free(r.w);
        free(r.fills);
        return ms_err_set(err, MS_ERR_NOMEM, "mimi_rand: out of memory");
    }
    seanets(&r, &back);
    transformer(&r, &back, "encoder");
    transformer(&r, &back, "decoder");
    if (back.resample_stride > 1) {
        const int64_t D = back.dimension, s = back.resample_stride;
        weight(&r, "downsample.conv.conv.conv.weight", 3, (const int64_t[]){D, D, 2 * s});
        /* depthwise: each output sums 2 taps of its own channel */
        add(&r, "upsample.convtr.convtr.convtr.weight", 0.f, (float)sqrt(1.5), 3, (const int64_t[]){D, 1, 2 * s});
    }
    rvq(&r, &back, "rvq_first", 1);
    rvq(&r, &back, "rvq_rest", back.num_codebooks - 1);
    snprintf(path, sizeof path, "%s/mimi.safetensors", dir);
    if (!r.rc && st_writer_save(r.w, path, err) != MS_OK) r.rc = err ? err->code : MS_ERR_IO;
    st_writer_free(r.w);
    free(r.fills);
    return r.rc;
}
