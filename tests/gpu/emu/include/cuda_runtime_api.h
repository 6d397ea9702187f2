/* cuda_runtime_api.h (emulator) - the part of the CUDA runtime API that the
 * project's CUDA code and its tests use, implemented on the host by the
 * emulator (tests/gpu/emu/emu_rt.c). It stands in for the toolkit's header
 * when a file is compiled for the emulator (-Itests/gpu/emu/include first),
 * so the same sources build against either; no toolkit is needed.
 *
 * Names, types and error numbers are the toolkit's (driver_types.h), so a
 * message reads the same under both. What is missing here is missing on
 * purpose: a call the emulator does not implement fails to compile rather
 * than to behave differently. docs/cuda.md ("The emulator") says what is
 * and is not checked.
 */
#ifndef MOSHID_EMU_CUDA_RUNTIME_API_H
#define MOSHID_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>

#define CUDART_VERSION 13000
#define MOSHID_CUDA_EMULATOR 1

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorStubLibrary = 34,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorAssert = 710,
    cudaErrorHardwareStackError = 714,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorInvalidAddressSpace = 717,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorSystemDriverMismatch = 803,
    cudaErrorCompatNotSupportedOnDevice = 804,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorGraphExecUpdateFailure = 910,
    cudaErrorUnknown = 999
} cudaError_t;

/* ---- vector types (vector_types.h) ---------------------------------------
 * Same layout and alignment as the toolkit's. In C++ the 8- and 16-byte
 * ones check, when copied, that the source is aligned as the GPU requires
 * (a misaligned vector load faults on the device), and copy as one access
 * of their size (one hook call, as the device's one vector load or store:
 * what the traffic accounting counts). */
typedef struct uint3 { unsigned int x, y, z; } uint3;

#ifdef __cplusplus
void emu_vec_misaligned(const void *p, unsigned align, const char *type);
#define EMU_VEC_CHECK(T, A)                                                              \
    static void emu_vcheck_(const T *p) {                                               \
        if ((uintptr_t)p % (A)) emu_vec_misaligned(p, (A), #T);                          \
    }
#define EMU_VEC4(T, E, A)                                                                \
    struct __attribute__((aligned(A))) T {                                              \
        E x, y, z, w;                                                                   \
        T() = default;                                                                  \
        T(E a, E b, E c, E d) : x(a), y(b), z(c), w(d) {}                               \
        T(const T &o) { emu_vcheck_(&o); __builtin_memcpy((void *)this, (const void *)&o, sizeof(T)); } \
        T &operator=(const T &o) {                                                      \
            emu_vcheck_(&o);                                                            \
            __builtin_memcpy((void *)this, (const void *)&o, sizeof(T));                \
            return *this;                                                               \
        }                                                                               \
        EMU_VEC_CHECK(T, A)                                                             \
    };
#define EMU_VEC2(T, E, A)                                                                \
    struct __attribute__((aligned(A))) T {                                              \
        E x, y;                                                                         \
        T() = default;                                                                  \
        T(E a, E b) : x(a), y(b) {}                                                     \
        T(const T &o) { emu_vcheck_(&o); __builtin_memcpy((void *)this, (const void *)&o, sizeof(T)); } \
        T &operator=(const T &o) {                                                      \
            emu_vcheck_(&o);                                                            \
            __builtin_memcpy((void *)this, (const void *)&o, sizeof(T));                \
            return *this;                                                               \
        }                                                                               \
        EMU_VEC_CHECK(T, A)                                                             \
    };
EMU_VEC4(uint4, unsigned int, 16)
EMU_VEC4(int4, int, 16)
EMU_VEC4(float4, float, 16)
EMU_VEC2(uint2, unsigned int, 8)
EMU_VEC2(int2, int, 8)
EMU_VEC2(float2, float, 8)
EMU_VEC2(double2, double, 16)
#undef EMU_VEC4
#undef EMU_VEC2
#undef EMU_VEC_CHECK
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#else
typedef struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; } uint4;
typedef struct __attribute__((aligned(16))) int4 { int x, y, z, w; } int4;
typedef struct __attribute__((aligned(16))) float4 { float x, y, z, w; } float4;
typedef struct __attribute__((aligned(8))) uint2 { unsigned int x, y; } uint2;
typedef struct __attribute__((aligned(8))) int2 { int x, y; } int2;
typedef struct __attribute__((aligned(8))) float2 { float x, y; } float2;
typedef struct __attribute__((aligned(16))) double2 { double x, y; } double2;
typedef struct dim3 { unsigned int x, y, z; } dim3;
#endif

#define EMU_MAKE4(T, E) \
    static inline T make_##T(E x, E y, E z, E w) { T v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
#define EMU_MAKE2(T, E) \
    static inline T make_##T(E x, E y) { T v; v.x = x; v.y = y; return v; }
EMU_MAKE4(uint4, unsigned int)
EMU_MAKE4(int4, int)
EMU_MAKE4(float4, float)
EMU_MAKE2(uint2, unsigned int)
EMU_MAKE2(int2, int)
EMU_MAKE2(float2, float)
EMU_MAKE2(double2, double)
#undef EMU_MAKE4
#undef EMU_MAKE2

/* ---- handles and enums ---------------------------------------------------- */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

enum cudaGraphExecUpdateResult {
    cudaGraphExecUpdateSuccess = 0,
    cudaGraphExecUpdateError = 1,
    cudaGraphExecUpdateErrorTopologyChanged = 2,
    cudaGraphExecUpdateErrorNodeTypeChanged = 3
};

typedef struct cudaGraphExecUpdateResultInfo {
    enum cudaGraphExecUpdateResult result;
    cudaGraphNode_t errorNode;
    cudaGraphNode_t errorFromNode;
} cudaGraphExecUpdateResultInfo;

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
};

/* ---- device and errors ---------------------------------------------------- */
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);

/* ---- memory ---------------------------------------------------------------- */
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream);

/* ---- streams, events, graphs ------------------------------------------------ */
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

#ifdef __cplusplus
}
#endif

#endif
