/* clock.h - the monotonic clock (CLOCK_MONOTONIC), the one every timer,
 * deadline, timed wait and duration in moshid reads; any thread. */
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

/* ms_mono_deadline: the monotonic time after_s seconds from now, as the
 * absolute deadline pthread_cond_timedwait takes on a condition variable
 * whose clock is CLOCK_MONOTONIC (pthread_condattr_setclock). */
static inline struct timespec ms_mono_deadline(double after_s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)after_s;
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((after_s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
