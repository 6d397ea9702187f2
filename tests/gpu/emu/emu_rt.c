/* emu_rt.c - the CUDA runtime API on the emulator: errors, one device,
 * device memory in the checked arena (emu_mem.c), launches. Streams,
 * events and graphs are emu_stream.c's: work runs when it is enqueued, in
 * order, except on a capturing stream, where it is recorded as CUDA does
 * (so host code that forgets to launch its graph, or captures a
 * synchronising call, fails here as it would on a device).
 *
 * Errors follow the runtime: a bad argument returns its error and becomes
 * the last error (cudaGetLastError); a fault in a kernel is sticky: every
 * later call returns it until cudaDeviceReset. Argument problems that a
 * device would report only as "invalid argument" are explained on stderr
 * ("emu: ...") unless emu_set_quiet(1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_int.h"

#define E emu_g

#define EMU_DEVICE_BYTES (8ull << 30)   /* what the emulated device reports and allows */
#define EMU_FUNC_ATTRS 64

static struct { const void *func; int dyn_max; } func_attrs[EMU_FUNC_ATTRS];
static int nfunc_attrs;
static size_t device_used;
static size_t device_bytes = EMU_DEVICE_BYTES;   /* emu_set_device_bytes */
static int lazy;                                 /* emu_set_lazy */

void emu_set_lazy(int on) { lazy = on != 0; }
int emu_lazy_on(void) { return lazy; }
void emu_set_device_bytes(size_t bytes) { device_bytes = bytes ? bytes : EMU_DEVICE_BYTES; }

__thread cudaError_t emu_t_last;
__thread int emu_t_dev;

void emu_note(const char *fmt, ...) {
    if (E.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "emu: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

cudaError_t emu_ret(cudaError_t e) {
    if (e != cudaSuccess) emu_t_last = e;
    return e;
}


/* ---- errors -------------------------------------------------------------------------- */

#define ERRS(X)                                                                                       \
    X(cudaSuccess, "no error")                                                                          \
    X(cudaErrorInvalidValue, "invalid argument")                                                        \
    X(cudaErrorMemoryAllocation, "out of memory")                                                       \
    X(cudaErrorInitializationError, "initialization error")                                             \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                                  \
    X(cudaErrorInvalidSymbol, "invalid device symbol")                                                  \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                          \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                             \
    X(cudaErrorStubLibrary, "CUDA driver is a stub library")                                            \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")      \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                          \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                                 \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                        \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state")                  \
    X(cudaErrorNotReady, "device not ready")                                                            \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                              \
    X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                         \
    X(cudaErrorAssert, "device-side assert triggered")                                                  \
    X(cudaErrorHardwareStackError, "hardware stack error")                                              \
    X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                            \
    X(cudaErrorMisalignedAddress, "misaligned address")                                                 \
    X(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space")           \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                                             \
    X(cudaErrorNotSupported, "operation not supported")                                                 \
    X(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination") \
    X(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW")    \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")           \
    X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")     \
    X(cudaErrorStreamCaptureUnmatched, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(cudaErrorStreamCaptureUnjoined, "capture was not joined")                                         \
    X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
    X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
    X(cudaErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes "      \
                                       "which violated constraints specific to instantiated graph update")     \
    X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorName(cudaError_t e) {
#define NAME_(c, s) \
    if (e == c) return #c;
    ERRS(NAME_)
#undef NAME_
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
#define STR_(c, s) \
    if (e == c) return s;
    ERRS(STR_)
#undef STR_
    return "unknown error";
}

cudaError_t cudaGetLastError(void) {
    emu_init();
    cudaError_t e = emu_t_last;
    emu_t_last = E.sticky;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    emu_init();
    return emu_t_last;
}

/* ---- device ------------------------------------------------------------------------------ */

static int no_device(void) {
    const char *v = getenv("EMU_NO_DEVICE");
    return v && v[0] == '1';
}

/* Emulated devices: EMU_DEVICES (1 or 2, read at the first use) or
 * emu_set_devices. They share one arena; what tells them apart is the
 * device each allocation, stream and event was made on (the calling host
 * thread's current device), checked where a device would fail: a kernel
 * launched into a stream of another device (cudaErrorInvalidResourceHandle,
 * as the programming guide's "Stream and Event Behavior" says), an event
 * recorded on a stream of another device (the same), and a kernel touching
 * another device's memory (an illegal address: no peer access is enabled). */
int emu_devices(void) {
    if (!E.ndev) {
        const char *v = getenv("EMU_DEVICES");
        E.ndev = v && v[0] == '2' ? 2 : 1;
    }
    return E.ndev;
}

void emu_set_devices(int n) { E.ndev = n == 2 ? 2 : 1; }

uint64_t emu_alloc_calls(void) { return E.alloc_calls; }

void emu_inject_alloc_failure(unsigned n) {
    emu_init();
    E.alloc_fail_after = n;
}

cudaError_t cudaGetDeviceCount(int *count) {
    emu_init();
    if (no_device()) {
        *count = 0;
        return emu_ret(cudaErrorNoDevice);
    }
    *count = emu_devices();
    return E.sticky;
}

cudaError_t cudaSetDevice(int device) {
    EMU_ENTER();
    if (no_device()) return emu_ret(cudaErrorNoDevice);
    if (device < 0 || device >= emu_devices()) return emu_ret(cudaErrorInvalidDevice);
    emu_t_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    EMU_ENTER();
    *device = emu_t_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    EMU_ENTER();
    if (device < 0 || device >= emu_devices() || no_device()) return emu_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "moshid CUDA emulator (host fibers)");
    p->totalGlobalMem = device_bytes;
    p->sharedMemPerBlock = EMU_SHARED_DEFAULT;
    p->sharedMemPerBlockOptin = EMU_SHARED_LIMIT;
    p->regsPerBlock = 65536;
    p->warpSize = EMU_WARP;
    p->maxThreadsPerBlock = EMU_MAX_THREADS;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7FFFFFFF;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int device) {
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e) return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    default: return emu_ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    EMU_ENTER();
    if (emu_capture_active()) {
        emu_capture_invalidate("cudaDeviceSynchronize");
        return emu_ret(cudaErrorStreamCaptureUnsupported);
    }
    return emu_ret(emu_sync_all());
}

cudaError_t cudaDeviceReset(void) {
    emu_init();
    emu_alloc_reset_all();
    device_used = 0;
    emu_streams_reset();
    memset(&E.fault, 0, sizeof E.fault);
    E.sticky = emu_t_last = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    EMU_ENTER();
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > EMU_SHARED_LIMIT)
        return emu_ret(cudaErrorInvalidValue);
    for (int i = 0; i < nfunc_attrs; i++)
        if (func_attrs[i].func == func) {
            func_attrs[i].dyn_max = value;
            return cudaSuccess;
        }
    if (nfunc_attrs == EMU_FUNC_ATTRS) return emu_ret(cudaErrorInvalidValue);
    func_attrs[nfunc_attrs].func = func;
    func_attrs[nfunc_attrs++].dyn_max = value;
    return cudaSuccess;
}

/* ---- launches ----------------------------------------------------------------------------------- */

static cudaError_t check_config(const emu_call *c) {
    const dim3 g = c->grid, b = c->block;
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || g.x > 0x7FFFFFFFu || g.y > 65535 || g.z > 65535 || b.x > 1024 ||
        b.y > 1024 || b.z > 64 || nt > EMU_MAX_THREADS) {
        char k[EMU_NAME_LEN];
        emu_kernel_name(k, sizeof k, c->pretty);
        emu_note("launch of %s at %s:%d: grid (%u,%u,%u) block (%u,%u,%u) is not a valid configuration", k, c->site.file,
             c->site.line, g.x, g.y, g.z, b.x, b.y, b.z);
        return cudaErrorInvalidConfiguration;
    }
    if (c->shmem > EMU_SHARED_DEFAULT) {
        int allowed = 0;
        for (int i = 0; i < nfunc_attrs; i++)
            if (func_attrs[i].func == c->func) allowed = (size_t)func_attrs[i].dyn_max >= c->shmem;
        if (!allowed) {
            emu_note("launch at %s:%d asks for %zu bytes of dynamic shared memory: more than %d needs "
                 "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", c->site.file, c->site.line, c->shmem,
                 EMU_SHARED_DEFAULT);
            return cudaErrorInvalidValue;
        }
    }
    return cudaSuccess;
}

/* Kernels launched outside a capture so far, and those whose first launch
 * was recorded into one (emu_capture_cold_kernels). */
#define EMU_KERNELS_MAX 4096
static const void *warm_kernels[EMU_KERNELS_MAX], *cold_kernels[EMU_KERNELS_MAX];
static int nwarm, ncold;

static int kernel_in(const void *const *set, int n, const void *f) {
    for (int i = 0; i < n; i++)
        if (set[i] == f) return 1;
    return 0;
}

unsigned emu_capture_cold_kernels(void) { return (unsigned)ncold; }

static void note_first_launch(const emu_call *c) {
    if (emu_stream_capturing(c->stream)) {
        if (!kernel_in(warm_kernels, nwarm, c->func) && !kernel_in(cold_kernels, ncold, c->func) &&
            ncold < EMU_KERNELS_MAX) {
            cold_kernels[ncold++] = c->func;
            emu_note("%s: first launched into a graph capture at %s:%d (no warm-up run loaded it)", E.kname,
                     c->site.file, c->site.line);
        }
    } else if (!kernel_in(warm_kernels, nwarm, c->func) && nwarm < EMU_KERNELS_MAX) {
        warm_kernels[nwarm++] = c->func;
    }
}

void emu_launch(const emu_call *c) {
    emu_init();
    if (E.sticky) {
        emu_t_last = E.sticky;
        return;
    }
    emu_kernel_name(E.kname, sizeof E.kname, c->pretty);
    snprintf(E.launched, sizeof E.launched, "%s", E.kname);
    cudaError_t e = check_config(c);
    if (e) {
        emu_t_last = e;
        return;
    }
    int sdev = emu_stream_dev(c->stream);
    if (sdev >= 0 && sdev != emu_t_dev) {
        emu_note("launch at %s:%d into a stream of device %d from a host thread whose current device is %d "
                 "(cudaSetDevice missing on this thread?)", c->site.file, c->site.line, sdev, emu_t_dev);
        emu_t_last = cudaErrorInvalidResourceHandle;
        return;
    }
    note_first_launch(c);
    emu_node nd = {.kind = EMU_NODE_KERNEL, .call = *c};
    emu_enqueue(c->stream, &nd);
}

/* ---- memory ---------------------------------------------------------------------------------------- */

static emu_alloc *alloc_start(const void *p) {
    int span;
    emu_alloc *a = emu_alloc_at(p, 0, &span);
    return a && a->ptr == p ? a : NULL;
}

static cudaError_t malloc_kind(void **ptr, size_t bytes, emu_akind kind, const char *call) {
    EMU_ENTER();
    E.alloc_calls++;
    if (!ptr) return emu_ret(cudaErrorInvalidValue);
    if (emu_capture_active()) {
        emu_capture_invalidate(call);
        return emu_ret(cudaErrorStreamCaptureUnsupported);
    }
    if (bytes == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    if (device_used + bytes > device_bytes) return emu_ret(cudaErrorMemoryAllocation);
    if (E.alloc_fail_after && --E.alloc_fail_after == 0) return emu_ret(cudaErrorMemoryAllocation);
    emu_alloc *a = emu_alloc_new(bytes, 256, kind);
    if (!a) return emu_ret(cudaErrorMemoryAllocation);
    device_used += bytes;
    a->dev = emu_t_dev;
    *ptr = a->ptr;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) { return malloc_kind(ptr, bytes, EMU_A_DEVICE, "cudaMalloc"); }
cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return malloc_kind(ptr, bytes, EMU_A_PINNED, "cudaMallocHost"); }
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    (void)flags;
    return malloc_kind(ptr, bytes, EMU_A_PINNED, "cudaHostAlloc");
}

static cudaError_t free_kind(void *ptr, emu_akind kind, const char *call) {
    EMU_ENTER();
    E.alloc_calls++;
    if (!ptr) return cudaSuccess;
    /* the runtime's frees wait for the device (NVIDIA's "Using the NVIDIA CUDA
     * Stream-Ordered Memory Allocator": cudaFree synchronises the device) */
    cudaError_t se = emu_sync_all();
    if (se) return emu_ret(se);
    emu_alloc *a = alloc_start(ptr);
    if (!a || a->kind != kind || a->freed) {
        emu_note("%s(%p): %s", call, ptr, !a ? "not the start of an allocation" : a->freed ? "already freed" :
             "allocated by the other call (cudaMalloc / cudaMallocHost)");
        return emu_ret(cudaErrorInvalidValue);
    }
    device_used -= a->size;
    emu_alloc_free(a);
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) { return free_kind(ptr, EMU_A_DEVICE, "cudaFree"); }
cudaError_t cudaFreeHost(void *ptr) { return free_kind(ptr, EMU_A_PINNED, "cudaFreeHost"); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    EMU_ENTER();
    *free_bytes = device_bytes - device_used;
    *total_bytes = device_bytes;
    return cudaSuccess;
}

/* Is [p, p+n) inside one live device (or pinned) buffer? 1 device, 2
 * pinned, 0 host memory, -1 a device address outside its buffer. */
static int space_of(const void *p, size_t n, const char *call, const char *which) {
    int span = 0;
    emu_alloc *a = emu_alloc_at(p, n, &span);
    if (!a) return 0;
    if (a->freed || !span) {
        emu_note("%s: %s %p + %zu bytes: %s", call, which, p, n, a->freed ? "the buffer was freed" :
             "runs past the end of its buffer");
        return -1;
    }
    return a->kind == EMU_A_PINNED ? 2 : 1;
}

static const char *kind_names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};

static cudaError_t copy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, const char *call) {
    if ((unsigned)k > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    int d = space_of(dst, n, call, "destination"), s = space_of(src, n, call, "source");
    if (d < 0 || s < 0) return cudaErrorInvalidValue;
    int dev_d = d == 1, dev_s = s == 1;
    int want_d = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    int want_s = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    if (k != cudaMemcpyDefault && ((want_d && !dev_d) || (want_s && !dev_s) || (!want_d && dev_d) || (!want_s && dev_s))) {
        emu_note("%s(%s): destination %p is %s memory, source %p is %s memory", call, kind_names[k], dst,
             dev_d ? "device" : "host", src, dev_s ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

/* A copy as the runtime's "API synchronization behavior" describes it
 * (docs/cuda.md, "Streams run asynchronously"): from pageable memory the
 * source is staged at the call, so the caller may reuse it at once; from
 * pinned memory the copy reads it when it runs, and the emulator checks
 * that it is unchanged then; host memory a copy writes is poisoned until it
 * runs. sync: cudaMemcpy, which returns once the copy has completed, except
 * from pageable memory to the device (staged, the DMA may still be pending)
 * and between two device buffers (no host synchronisation). */
static cudaError_t copy_enqueue(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s,
                                int sync) {
    const char *call = sync ? "cudaMemcpy" : "cudaMemcpyAsync";
    cudaError_t e = copy_check(dst, src, n, k, call);
    if (e) return emu_ret(e);
    int d = space_of(dst, n, call, "destination"), sp = space_of(src, n, call, "source");
    if (d != 1 && sp != 1) {   /* host to host: at once */
        memmove(dst, src, n);
        return cudaSuccess;
    }
    emu_node nd = {.kind = EMU_NODE_MEMCPY, .dst = dst, .src = src, .n = n, .ckind = k, .dst_host = d != 1};
    if (sp == 0 && E.async) {   /* pageable: staged now */
        if (!(nd.own = malloc(n))) return emu_ret(cudaErrorMemoryAllocation);
        memcpy(nd.own, src, n);
    } else if (sp == 2 && E.async) {   /* pinned: read when it runs */
        void *c = malloc(n);
        if (!c) return emu_ret(cudaErrorMemoryAllocation);
        memcpy(c, src, n);
        nd.chk = c;
    }
    e = emu_enqueue(s, &nd);
    if (e || !sync || (sp == 0 && d == 1) || (sp == 1 && d == 1)) return e;
    return emu_ret(emu_sync_stream(s));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) {
    EMU_ENTER();
    if (!n) return cudaSuccess;
    return copy_enqueue(dst, src, n, k, s, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
    EMU_ENTER();
    if (!n) return cudaSuccess;
    return copy_enqueue(dst, src, n, k, NULL, 1);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    EMU_ENTER();
    if (!n) return cudaSuccess;
    if (space_of(p, n, "cudaMemset", "destination") != 1) {
        emu_note("cudaMemset: %p + %zu bytes is not inside a device buffer", p, n);
        return emu_ret(cudaErrorInvalidValue);
    }
    emu_node nd = {.kind = EMU_NODE_MEMSET, .dst = p, .n = n, .value = value & 0xFF};
    return emu_enqueue(s, &nd);
}

cudaError_t cudaMemset(void *p, int value, size_t n) { return cudaMemsetAsync(p, value, n, NULL); }
