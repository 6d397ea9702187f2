/* rng.h - counter-based random numbers shared by the CPU and GPU backends.
 *
 * Philox-4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11): a pure function of (key, counter), so any thread
 * on any device can draw the number for (seed, step, stream, index) without
 * shared state, and the CPU and CUDA backends draw exactly the same bits.
 * Sampling keys it as key = seed, counter = (index, stream, step low, step
 * high). Compiles as C and as CUDA (host and device).
 */
#ifndef MOSHID_RNG_H
#define MOSHID_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define RNG_FN __host__ __device__ __forceinline__ static
#else
#define RNG_FN static inline
#endif

#define RNG_PHILOX_M0 0xD2511F53u
#define RNG_PHILOX_M1 0xCD9E8D57u
#define RNG_PHILOX_W0 0x9E3779B9u
#define RNG_PHILOX_W1 0xBB67AE85u

/* rng_philox: the first 32-bit word of Philox4x32-10(key, counter). */
RNG_FN uint32_t rng_philox(uint64_t key, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)RNG_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)RNG_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += RNG_PHILOX_W0;
        k1 += RNG_PHILOX_W1;
    }
    return c0;
}

/* rng_bits: 32 random bits for (seed, step, stream, index). */
RNG_FN uint32_t rng_bits(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index) {
    return rng_philox(seed, index, stream, (uint32_t)step, (uint32_t)(step >> 32));
}

/* rng_unit: 32 random bits to a number in the open interval (0, 1): the top
 * 24 bits, centred, (b + 0.5) / 2^24, exact in double (so CPU and GPU agree
 * bit for bit). Keep it in double: rounded to float, the largest values
 * become 1.0 (then -log(-log(u)) is infinite). */
RNG_FN double rng_unit(uint32_t bits) { return ((double)(bits >> 8) + 0.5) * (1.0 / 16777216.0); }

/* rng_uniform: rng_unit of the bits for (seed, step, stream, index). */
RNG_FN double rng_uniform(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index) {
    return rng_unit(rng_bits(seed, step, stream, index));
}

#endif
