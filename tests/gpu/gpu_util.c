/* gpu_util.c - see gpu_util.h. */
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cu_check.h"

uint64_t gu_next(gu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double gu_uniform(gu_rng *r) {
    return (double)(gu_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double gu_normal(gu_rng *r) {
    double u = 1.0 - gu_uniform(r), v = gu_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int gu_int(gu_rng *r, int lo, int hi) {
    return lo + (int)(gu_next(r) % (uint64_t)(hi - lo + 1));
}

int gu_devices(char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* A toolkit newer than the driver reads as "no device": say so. */
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        char vers[160];
        if (drv == 0) snprintf(vers, sizeof vers, "no CUDA driver found; runtime CUDA %d.%d", rt / 1000, rt % 1000 / 10);
        else
            snprintf(vers, sizeof vers, "driver supports CUDA %d.%d, runtime needs %d.%d%s", drv / 1000, drv % 1000 / 10,
                     rt / 1000, rt % 1000 / 10, drv < rt ? ": the driver is older than the toolkit" : "");
        snprintf(why, len, "no CUDA device (%s: %s; %s)", cudaGetErrorName(e), cudaGetErrorString(e), vers);
        return 0;
    }
    int usable = 0;
    for (int d = 0; d < n; d++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess && major >= 8)
            usable++;
    }
    if (!usable) snprintf(why, len, "no CUDA device (%d device(s), none sm_80 or newer)", n);
    return usable;
}

void *gu_dalloc(size_t bytes) {
    void *p = NULL;
    CU_CHECK_FATAL(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

void gu_dfree(void *p) {
    CU_CHECK_FATAL(cudaFree(p));
}

void gu_h2d(void *dst, const void *src, size_t bytes) {
    CU_CHECK_FATAL(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void gu_d2h(void *dst, const void *src, size_t bytes) {
    CU_CHECK_FATAL(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void gu_sync(void) {
    CU_CHECK_FATAL(cudaDeviceSynchronize());
}
