/* gpu_util.h - helpers shared by engine-test and engine-bench: a
 * deterministic input generator, the device census, and checked device
 * allocation/copies (fatal on failure: these are test programs). */
#ifndef MOSHID_GPU_UTIL_H
#define MOSHID_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* A splitmix64 stream for test inputs (not the sampler's RNG). */
typedef struct gu_rng { uint64_t s; } gu_rng;
uint64_t gu_next(gu_rng *r);
/* gu_uniform: a double in [0, 1). gu_normal: a standard normal (Box-Muller). */
double gu_uniform(gu_rng *r);
double gu_normal(gu_rng *r);
/* gu_int: an integer in [lo, hi]. */
int gu_int(gu_rng *r, int lo, int hi);

/* gu_devices: the number of usable CUDA devices (sm_80 or newer); 0 with
 * the reason in why when there is none (no driver, no device), with the
 * CUDA version the driver supports beside the one the runtime needs. */
int gu_devices(char *why, size_t len);

/* Device memory, fatal on failure. */
void *gu_dalloc(size_t bytes);
void gu_dfree(void *p);
void gu_h2d(void *dst, const void *src, size_t bytes);
void gu_d2h(void *dst, const void *src, size_t bytes);
void gu_sync(void);

#endif
