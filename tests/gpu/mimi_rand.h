/* mimi_rand.h - a random-weight Mimi checkpoint written to disk, for the
 * benchmarks that open a backend (which loads its codec from a file, as
 * moshid does: lm_backend_opts.mimi): lm-bench --e2e writes one at the real
 * dimensions on the GPU machine, where no checkpoint is carried.
 *
 * The file holds every tensor the loader (engine/mimi/mimi_model.c) reads
 * for the configuration, under the official names and shapes
 * (../shared/spec/mimi.md), as float32, so the backend loads it as a real
 * checkpoint; it leaves out what the loader never reads (the quantizer
 * levels past num_codebooks, the training-only buffers but `_initialized`).
 * The numbers are uniform random with a variance of about 1 / fan-in (so
 * activations stay finite through the stacks), norms 1, small biases and
 * layer scales, unit cluster usage: a codec that runs every kernel at the
 * real shapes and means nothing as audio.
 */
#ifndef MOSHID_MIMI_RAND_H
#define MOSHID_MIMI_RAND_H

#include <stdint.h>

#include "err.h"
#include "mimi.h"

/* mimi_rand_tiny: a small configuration (the committed tiny fixture's
 * sizes: SEANet of 4 filters, d_model 32, 2 transformer layers) serving
 * 1920-sample frames at 24 kHz, with `bins` codebook entries and
 * `codebooks` codes per frame (the LM it is paired with decides both). */
void mimi_rand_tiny(mimi_config *c, int bins, int codebooks);

/* mimi_rand_write: dir/mimi.safetensors (random weights from seed) and
 * dir/mimi.json (c under the official keys; read back and compared with c
 * before returning). Returns MS_OK, or an error with err set (a
 * configuration the parser refuses is MS_ERR_ARG). Bytes written: about 4 x
 * the parameters (334 MB at the real dimensions). */
int mimi_rand_write(const char *dir, const mimi_config *c, uint64_t seed, ms_error *err);

#endif
