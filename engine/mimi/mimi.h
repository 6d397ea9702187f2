/* mimi.h - the Mimi neural audio codec on the CPU (streaming, float32).
 *
 * A mimi_model holds the weights and the configuration; it is immutable after
 * mimi_model_load and may be shared by any number of threads. A mimi_stream
 * holds one session's streaming state (encoder and decoder); it belongs to
 * one thread at a time. Encode: one frame of mimi_frame_samples() samples
 * (1920 at 24 kHz) gives mimi_num_codebooks() codes (semantic first). Decode:
 * one frame of codes gives one frame of samples. Both keep their state
 * between calls as the official streaming implementation does (moshi 0.2.13,
 * see shared/spec/mimi.md).
 *
 * Configuration: JSON with the key names of the official `_mimi_config`
 * (sample_rate, channels, frame_rate, seanet{...}, quantizer{...},
 * transformer{...}) plus an optional "num_codebooks" (default 8); every key
 * is optional and defaults to the official value; unknown keys and
 * unsupported values are refused with a message. docs/mimi.md lists them.
 */
#ifndef MOSHID_MIMI_H
#define MOSHID_MIMI_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Limits on configurations (a config file is input). */
#define MIMI_MAX_RATIOS 8            /* SEANet down/upsampling stages */
#define MIMI_MAX_CHANNELS 8192       /* widest SEANet layer, d_model, dim_feedforward */
#define MIMI_MAX_KERNEL 64           /* any convolution kernel */
#define MIMI_MAX_LAYERS 64           /* transformer layers, residual layers */
#define MIMI_MAX_CONTEXT 8192        /* transformer K/V ring, steps */
#define MIMI_MAX_BINS 65536          /* codebook entries */
#define MIMI_MAX_CODEBOOKS 64        /* quantizer levels (n_q) */
#define MIMI_MAX_FRAME 48000         /* samples per frame */
#define MIMI_MAX_CONFIG_BYTES (1 << 20)
#define MIMI_MAX_BATCH 4096          /* streams in one batch call */
#define MIMI_MAX_STREAM_BYTES (1 << 30)   /* K/V rings of one stream */

/* The hyper-parameters (official names in comments). */
typedef struct mimi_config {
    int sample_rate;                 /* sample_rate, Hz */
    int channels;                    /* channels (only 1) */
    double frame_rate;               /* frame_rate, Hz */
    /* seanet */
    int dimension;                   /* seanet.dimension: latent channels */
    int n_filters;                   /* seanet.n_filters */
    int n_residual_layers;           /* seanet.n_residual_layers */
    int compress;                    /* seanet.compress */
    int dilation_base;               /* seanet.dilation_base */
    int kernel_size;                 /* seanet.kernel_size */
    int residual_kernel_size;        /* seanet.residual_kernel_size */
    int last_kernel_size;            /* seanet.last_kernel_size */
    int n_ratios;
    int ratios[MIMI_MAX_RATIOS];     /* seanet.ratios, decoder order */
    /* quantizer */
    int q_dimension;                 /* quantizer.dimension: codebook vector size */
    int q_n_q;                       /* quantizer.n_q: levels in the checkpoint */
    int q_bins;                      /* quantizer.bins: entries per codebook */
    /* transformer */
    int d_model, num_heads, num_layers, dim_feedforward;
    int context;                     /* transformer.context, steps */
    double max_period;               /* transformer.max_period (RoPE) */
    int layer_scale;                 /* 1: layer_scale tensors present (non-null) */
    int num_codebooks;               /* codes per frame used (num_codebooks) */
    /* derived */
    int hop;                         /* product of ratios: samples per encoder step */
    int frame_samples;               /* sample_rate / frame_rate */
    int resample_stride;             /* encoder steps per frame (downsample stride) */
} mimi_config;

typedef struct mimi_model mimi_model;   /* weights + config; immutable after load; shared by threads */
typedef struct mimi_stream mimi_stream; /* one session's streaming encoder + decoder state */
typedef struct mimi_ws mimi_ws;         /* a batch workspace: activations and scratch of one call */

/* mimi_config_default: the official configuration (Mimi of Moshi 7B). */
void mimi_config_default(mimi_config *cfg);

/* mimi_config_parse: defaults, then the values of the JSON text[0..len)
 * (borrowed). Returns MS_OK or an error (MS_ERR_FORMAT bad JSON or type,
 * MS_ERR_UNSUPPORTED unknown key or unsupported value, MS_ERR_RANGE,
 * MS_ERR_LIMIT) with a message naming the key. */
int mimi_config_parse(mimi_config *cfg, const char *text, size_t len, ms_error *err);

/* mimi_config_load: mimi_config_parse of a file (NULL path: defaults). */
int mimi_config_load(mimi_config *cfg, const char *path, ms_error *err);

/* mimi_model_load: read the weights (official safetensors names; float32,
 * bf16 or f16, converted to float32) checked by name and shape against the
 * configuration from config_json_path (NULL: defaults). The file is not
 * kept open. Returns MS_OK and *out (caller frees with mimi_model_free), or
 * an error with a message naming the file and tensor. Thread: any. */
int mimi_model_load(mimi_model **out, const char *safetensors_path,
                    const char *config_json_path /* NULL: defaults */, ms_error *err);
/* mimi_model_load_cfg: the same with a configuration already parsed. */
int mimi_model_load_cfg(mimi_model **out, const char *safetensors_path,
                        const mimi_config *cfg, ms_error *err);
/* mimi_model_random: the configuration's shapes with random weights from
 * seed (deterministic); for benchmarks and demos. */
int mimi_model_random(mimi_model **out, const mimi_config *cfg, uint64_t seed, ms_error *err);
void mimi_model_free(mimi_model *m);
/* mimi_model_bytes: host memory the model holds (weights, plans). */
size_t mimi_model_bytes(const mimi_model *m);
/* mimi_model_check_serving: MS_OK when the codec's frame is the one moshid
 * serves (frame.h: 1920 samples at 24 kHz); MS_ERR_UNSUPPORTED with a
 * message otherwise (other geometries load for tests and tools only). */
int mimi_model_check_serving(const mimi_model *m, ms_error *err);

const mimi_config *mimi_model_config(const mimi_model *m);
int mimi_num_codebooks(const mimi_model *m);   /* 8 by default */
int mimi_frame_samples(const mimi_model *m);   /* 1920 by default */
int mimi_sample_rate(const mimi_model *m);     /* 24000 by default */
int mimi_cardinality(const mimi_model *m);     /* codebook entries: 2048 by default */

/* mimi_stream_create: a fresh streaming state for m (borrowed: m must
 * outlive the stream). NULL with err set on allocation failure. */
mimi_stream *mimi_stream_create(const mimi_model *m, ms_error *err);
/* mimi_stream_model: the model the stream was created for (borrowed). */
const mimi_model *mimi_stream_model(const mimi_stream *s);
void mimi_stream_free(mimi_stream *s);
/* mimi_stream_bytes: memory one stream of m holds. */
size_t mimi_stream_bytes(const mimi_model *m);
/* Back to the fresh state (encoder side / decoder side only). The Kyutai
 * server resets the encoder after the first frame of a session. */
void mimi_stream_reset_encoder(mimi_stream *s);
void mimi_stream_reset_decoder(mimi_stream *s);

/* mimi_ws_create: a workspace for batch calls of up to max_streams streams
 * of m, allocated once (no allocation per call). One call at a time uses a
 * workspace: a thread that encodes while another decodes needs two.
 * mimi_ws_bytes: what one takes. */
mimi_ws *mimi_ws_create(const mimi_model *m, int max_streams, ms_error *err);
void mimi_ws_free(mimi_ws *ws);
size_t mimi_ws_bytes(const mimi_model *m, int max_streams);

/* mimi_encode_batch_ws / mimi_decode_batch_ws: the batch calls below with
 * the caller's workspace (n <= its max_streams, same model): the serving
 * path. A stream's encoder and decoder state are separate: one thread may
 * encode a stream while another decodes it (each with its own workspace).
 * mimi_encode_batch / mimi_decode_batch: the same with a workspace made
 * for the call (tools, tests). */
int mimi_encode_batch_ws(const mimi_model *m, mimi_ws *ws, mimi_stream *const *streams, int n, const float *pcm,
                         int *codes, ms_error *err);
int mimi_decode_batch_ws(const mimi_model *m, mimi_ws *ws, mimi_stream *const *streams, int n, const int *codes,
                         float *pcm, ms_error *err);

/* mimi_encode_batch: n independent streams (borrowed, distinct, created from
 * m), one frame each. pcm (n, frame_samples) float samples in [-1, 1]
 * nominal; codes (n, num_codebooks) written, semantic first. Non-finite
 * samples are refused (MS_ERR_RANGE, nothing advanced). Thread: the caller
 * owns every stream of the batch for the call. */
int mimi_encode_batch(const mimi_model *m, mimi_stream *const *streams, int n,
                      const float *pcm /* (n, frame_samples) */,
                      int *codes /* (n, num_codebooks) */, ms_error *err);

/* mimi_decode_batch: n streams, one frame of codes each -> (n, frame_samples)
 * samples. A code outside [0, cardinality) is refused (MS_ERR_RANGE, no
 * stream advanced). */
int mimi_decode_batch(const mimi_model *m, mimi_stream *const *streams, int n,
                      const int *codes /* (n, num_codebooks) */,
                      float *pcm /* (n, frame_samples) */, ms_error *err);

#endif
