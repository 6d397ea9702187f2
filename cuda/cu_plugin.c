/* cu_plugin.c - the entry point of libmoshid-cuda.so (engine/plugin.h).
 *
 * The plugin describes the devices it could use (probe) and carries the
 * CUDA backend table (cu_backend.c: the LM on the device, Mimi on the
 * host). Plain C against the CUDA runtime API (no device code, so no nvcc
 * pass for four targets).
 */
#include <stdio.h>
#include <stdarg.h>
#include <string.h>

#include "cu_check.h"

#include "backend.h"
#include "plugin.h"

/* The backend table (cu_backend.c). */
extern const lm_backend_ops lm_cuda_backend;

#ifndef CU_BUILD_STR
#define CU_BUILD_STR "CUDA (unknown build)"
#endif

/* Compute capability the device code needs: SASS for 8.0, 8.9, 9.0, PTX for
 * 9.0 (JIT-compiled by newer drivers for newer GPUs). */
#define CU_MIN_MAJOR 8

/* Append printf-style text to what[0..len) at *used; truncates silently. */
static void put(char *what, size_t len, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *what, size_t len, size_t *used, const char *fmt, ...) {
    if (*used >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(what + *used, len - *used, fmt, ap);
    va_end(ap);
    if (n > 0) *used = *used + (size_t)n < len ? *used + (size_t)n : len;
}

/* probe: count the usable CUDA devices (compute capability >= 8.0) and
 * describe every device in what ("no CUDA device (...)" when there is none
 * or no driver). Any thread. */
static int cu_probe(char *what, size_t len) {
    size_t used = 0;
    if (what && len) what[0] = '\0';
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary ||
        e == cudaErrorSystemDriverMismatch || e == cudaErrorCompatNotSupportedOnDevice) {
        put(what, len, &used, "no CUDA device (%s: %s)", cudaGetErrorName(e), cudaGetErrorString(e));
        return 0;
    }
    if (e != cudaSuccess) {
        ms_error err;
        cu_err_set(&err, e, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);
        put(what, len, &used, "%s", err.msg);
        return -1;
    }
    if (n == 0) {
        put(what, len, &used, "no CUDA device");
        return 0;
    }
    int drv = 0;
    cudaDriverGetVersion(&drv);
    put(what, len, &used, "driver %d.%d;", drv / 1000, drv % 1000 / 10);
    int usable = 0;
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, d);
        if (e != cudaSuccess) {
            put(what, len, &used, " %d: %s;", d, cudaGetErrorName(e));
            continue;
        }
        int ok = prop.major >= CU_MIN_MAJOR;
        usable += ok;
        put(what, len, &used, " %d: %s sm_%d%d %.1f GiB %d SMs%s;", d, prop.name, prop.major, prop.minor,
            (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount,
            ok ? "" : " (unsupported: needs sm_80 or newer)");
    }
    return usable;
}

static const moshid_plugin cu_plugin = {
    .abi = MOSHID_PLUGIN_ABI,
    .name = "cuda",
    .build = CU_BUILD_STR,
    .probe = cu_probe,
    .backend = &lm_cuda_backend,   /* cu_backend.c */
};

const moshid_plugin *moshid_plugin_entry(void);
const moshid_plugin *moshid_plugin_entry(void) {
    return &cu_plugin;
}
