/* clock.h - the monotonic clock (CLOCK_MONOTONIC), the one every timer,
 * deadline and duration in moshid reads; any thread. */
#ifndef MOSHID_CLOCK_H
#define MOSHID_CLOCK_H

#include <stdint.h>
#include <time.h>

/* ms_mono_ns: now, ns since an arbitrary fixed point. */
static inline uint64_t ms_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ms_mono_ms: now, ms (fractional) since the same point. */
static inline double ms_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#endif
