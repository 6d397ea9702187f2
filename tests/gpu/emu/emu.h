/* emu.h - the CUDA emulator: runs the project's kernels on the host, one
 * fiber per GPU thread, and stops a kernel at the first logic fault with the
 * kernel, block, thread and reason (docs/cuda.md, "The emulator").
 *
 * Three audiences:
 *  - tests that want to see a fault (tests/gpu/emu/emu_test.c): emu_fault_last,
 *    emu_set_quiet, emu_set_order, emu_set_hooks, emu_stats_get;
 *  - the device-side shim (emu_device.h), which the rewritten kernels call:
 *    emu_launch, emu_syncthreads, emu_warp, emu_shared_var, ...;
 *  - nobody else: the CUDA runtime calls are the toolkit's names
 *    (include/cuda_runtime_api.h), so programs do not know they run here.
 * Single host thread: every call comes from the thread that launched.
 */
#ifndef MOSHID_EMU_H
#define MOSHID_EMU_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- faults ----------------------------------------------------------------- */

/* What stopped a kernel. X-macro: enum value, name in reports, the CUDA
 * error the runtime returns from then on (sticky, as on a device). */
#define EMU_FAULT_KINDS(X)                                                        \
    X(EMU_FAULT_NONE, "none", cudaSuccess)                                        \
    X(EMU_FAULT_BARRIER, "barrier", cudaErrorLaunchFailure)                       \
    X(EMU_FAULT_WARP, "warp", cudaErrorLaunchFailure)                             \
    X(EMU_FAULT_MISALIGNED, "misaligned", cudaErrorMisalignedAddress)             \
    X(EMU_FAULT_OOB, "out-of-bounds", cudaErrorIllegalAddress)                    \
    X(EMU_FAULT_FREED, "use-after-free", cudaErrorIllegalAddress)                 \
    X(EMU_FAULT_HOST, "host-memory", cudaErrorIllegalAddress)                     \
    X(EMU_FAULT_SPACE, "address-space", cudaErrorInvalidAddressSpace)             \
    X(EMU_FAULT_UNINIT_SHARED, "uninit-shared", cudaErrorLaunchFailure)           \
    X(EMU_FAULT_UNINIT_GLOBAL, "uninit-global", cudaErrorLaunchFailure)           \
    X(EMU_FAULT_STACK, "stack-overflow", cudaErrorHardwareStackError)             \
    X(EMU_FAULT_TRAP, "trap", cudaErrorLaunchFailure)                             \
    X(EMU_FAULT_SIGNAL, "signal", cudaErrorLaunchFailure)                         \
    X(EMU_FAULT_TIMEOUT, "timeout", cudaErrorLaunchFailure)                       \
    X(EMU_FAULT_ASYNC_COPY, "async-copy", cudaErrorLaunchFailure)                 \
    X(EMU_FAULT_WRITE_RACE, "write-race", cudaErrorLaunchFailure)                 \
    X(EMU_FAULT_READ_RACE, "read-race", cudaErrorLaunchFailure)                   \
    X(EMU_FAULT_NC_STALE, "nc-stale", cudaErrorLaunchFailure)

#define EMU_FAULT_ENUM_(e, name, err) e,
typedef enum emu_fault_kind { EMU_FAULT_KINDS(EMU_FAULT_ENUM_) EMU_FAULT_NKINDS } emu_fault_kind;
#undef EMU_FAULT_ENUM_

#define EMU_NAME_LEN 160
#define EMU_MSG_LEN 640

/* A fault, as printed ("emu: FAULT <kind> in <kernel> block (x,y,z) thread
 * (x,y,z): <msg>") and as kept for emu_fault_last. */
typedef struct emu_fault {
    emu_fault_kind kind;
    char kernel[EMU_NAME_LEN];  /* e.g. "matvec_bf16_vec<8>" */
    uint3 block, thread;        /* blockIdx, threadIdx of the faulting thread */
    int warp, lane;             /* linear thread id / 32, % 32 */
    char msg[EMU_MSG_LEN];      /* the reason, with the op's file:line where known */
} emu_fault;

/* emu_fault_last: the fault that made the runtime's error sticky, copied
 * to *f; returns its kind (EMU_FAULT_NONE when there is none). Pending
 * stream work runs first. Cleared by cudaDeviceReset. */
emu_fault_kind emu_fault_last(emu_fault *f);
/* emu_fault_name: "barrier", "warp", ...; emu_fault_error: the CUDA error
 * a fault of kind k leaves sticky. */
const char *emu_fault_name(emu_fault_kind k);
cudaError_t emu_fault_error(emu_fault_kind k);

/* ---- options (also from the environment, read at the first call) ------------ */

/* Order in which runnable fibers of a block are resumed: EMU_ORDER=forward,
 * reverse or random (the default; a permutation per block drawn from
 * EMU_SEED, so runs repeat). Varying it shows order-dependent results. */
typedef enum emu_order { EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM } emu_order;
void emu_set_order(emu_order o);
/* emu_set_block_order: the order in which the blocks of a grid run (one
 * after the other): forward (the default: x fastest, then y, then z),
 * reverse, or random (a permutation per launch drawn from EMU_SEED); also
 * EMU_BLOCKS=forward|reverse|random. A device runs blocks in no defined
 * order: a result that changes with it depends on that order. */
void emu_set_block_order(emu_order o);
/* emu_set_quiet: 1 = do not print faults to stderr (negative tests). */
void emu_set_quiet(int quiet);
/* emu_set_hooks: 0 = ignore the compiler's per-access hooks, leaving only
 * the guard pages (to prove that they catch an overrun alone); 1 = both. */
void emu_set_hooks(int on);
/* emu_set_timeout_ms: a launch running longer faults (0: never; default
 * EMU_TIMEOUT_S=120). A thread that spins waiting for another never yields
 * here (no preemption), so this is how such a kernel ends. */
void emu_set_timeout_ms(unsigned ms);
/* emu_inject_fault: the n-th kernel run from now (launched, or replayed in a
 * graph) does not run and faults instead, as an out-of-bounds access would
 * (cudaErrorIllegalAddress, sticky until cudaDeviceReset): for tests of a
 * caller's device-error handling. 0 cancels. */
void emu_inject_fault(unsigned n);
/* emu_inject_alloc_failure: the n-th cudaMalloc or cudaMallocHost call
 * from now fails with cudaErrorMemoryAllocation (not sticky: it becomes
 * the calling thread's last error, as on a device): for tests of a
 * caller's out-of-memory paths. 0 cancels. */
void emu_inject_alloc_failure(unsigned n);
/* emu_set_race_check: 1 = races between the blocks of one launch fault
 * (blocks run one after the other here, so such a pair is otherwise never
 * seen; emu_race.c). Block B's access to a byte that block A accessed
 * before must be ordered after A's through a publication: A executes
 * __threadfence() after its access and then an atomic on some address X,
 * and B's atomic on X comes after that one. Ordering is transitive: B also
 * acquires what A had acquired before that fence (a chain of stages, each
 * waiting on the previous one's counter, orders the last after the
 * first). Faults: a plain (not atomic) store to device memory that another
 * block stored to, not ordered before it (kind write-race); a load of
 * device memory another block stored to, not ordered (read-race); a store
 * to device memory that another block read after its first atomic of the
 * launch, that read not ordered before the store (read-race: read before
 * the writer arrived; every such reader is checked); a __ldg of device
 * memory that any block, this one included, stored to or wrote atomically
 * in the launch, published or not (nc-stale: the non-coherent path is
 * defined only for data read-only for the whole kernel). Fences count per
 * block (a fence by any thread of the block covers the block's earlier
 * accesses and acquisitions: the kernel's barrier before its atomic makes
 * that so on a device). Past its tables' limits a byte or a launch goes
 * unchecked (a missed race, never a false fault). Off by default (hash
 * probes per byte accessed); EMU_RACE=1 turns it on for a whole run. */
void emu_set_race_check(int on);
/* emu_capture_cold_kernels: how many kernels so far had their first launch
 * recorded into a graph capture, never launched outside one before (with
 * lazy loading, CUDA's default, such a kernel is loaded while the stream
 * captures; a warm-up run of the same launches first avoids it). */
unsigned emu_capture_cold_kernels(void);
/* emu_last_kernel: the name of the last kernel launched (or recorded), ""
 * before any. */
const char *emu_last_kernel(void);

/* emu_set_streams: 1 = streams run asynchronously (the default; also
 * EMU_STREAMS=async): enqueued work waits until the host waits for it, the
 * order among independent streams drawn from EMU_SEED, host memory that a
 * copy will write poisoned until it runs, a pinned source checked unchanged
 * when its copy runs (fault kind async-copy). 0 = each call runs its work at
 * once, in order (EMU_STREAMS=sync). Set it before any work is enqueued. */
void emu_set_streams(int async);
/* emu_set_seed: the seed of the resume orders and of the streams' order
 * (EMU_SEED; default 1). */
void emu_set_seed(uint64_t seed);
/* emu_set_devices: 1 or 2 emulated devices (also EMU_DEVICES=2). With 2, a
 * host thread that never called cudaSetDevice works on device 0, as on a
 * machine with two GPUs: a kernel launched into another device's stream
 * fails (cudaErrorInvalidResourceHandle), a kernel touching another
 * device's memory faults (out-of-bounds kind: an illegal address). The
 * current device and the last error are per host thread in every mode. */
void emu_set_devices(int n);
/* emu_alloc_calls: cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc and
 * cudaFreeHost calls so far (each may synchronise the device): a steady
 * state makes none. */
uint64_t emu_alloc_calls(void);
/* emu_set_lazy: 1 = device buffers allocated from now on are lazy: not
 * poisoned and not shadowed (no "never written" check on them), so their
 * pages stay uncommitted until touched; a cudaMemset to 0 on one hands its
 * whole pages back (zero on their next read) instead of writing them.
 * With it, emu_set_device_bytes: the size the device reports and allows
 * (0: the default 8 GiB). For gpu-model, whose 7B geometry needs more
 * memory than the host has while sampled blocks touch little of it. */
void emu_set_lazy(int on);
void emu_set_device_bytes(size_t bytes);

/* ---- traffic accounting (emu_traffic.c; the performance model) ------------- */

/* One kernel's (or one cuBLAS GEMM shape's) traffic, summed over its
 * launches since emu_traffic_start, scaled to every block of each grid. */
typedef struct emu_traffic {
    char kernel[EMU_NAME_LEN];
    uint64_t launches, blocks, blocks_run;
    double gl_requests;     /* warp-level global loads and stores */
    double gl_bytes;        /* bytes the lanes of those asked for */
    double gl_sectors;      /* 32-byte sectors they touched, per request (Nsight's sectors) */
    double dram_bytes;      /* distinct bytes per launch (capped at each buffer's size): the DRAM traffic */
    double sh_requests;     /* warp-level shared loads and stores */
    double sh_wavefronts;   /* the wavefronts they need (bank conflicts serialise) */
    double sh_conflicts;    /* wavefronts beyond one per phase */
    int gemm_m, gemm_n, gemm_k;   /* a cuBLAS row: its shape (column-major m x n, depth k) */
    double gemm_flops;
} emu_traffic;
/* emu_traffic_start: count from now on, the table emptied; only blocks
 * whose linear index is a multiple of stride run (1: all), and while
 * stride > 1 device memory's "never written" check is off and the cuBLAS
 * stand-in records its GEMMs without computing them. */
void emu_traffic_start(unsigned stride);
/* emu_traffic_sample: the sampling stride from the next launch on, the
 * table kept (a kernel whose blocks depend on each other, a last-block
 * combine, runs unsampled: 1). */
void emu_traffic_sample(unsigned stride);
/* emu_traffic_whole_z: kernels whose name starts with prefix are sampled by
 * (x, y) column instead: a block runs when its y * grid.x + x is a multiple
 * of the stride, at every z (a last-block combine across z, the LM
 * attention's over its splits, then sees all of its column's blocks while
 * the columns are still sampled). NULL or "": none. */
void emu_traffic_whole_z(const char *prefix);
/* emu_traffic_whole: kernels whose name starts with prefix run every block
 * whatever the stride (blocks that wait for each other through tickets and
 * counters, as the depformer's chain: a sampled grid would leave its
 * counters short and its waits unsatisfied). NULL or "": none. */
void emu_traffic_whole(const char *prefix);
/* emu_traffic_vblock_skip: called by a block of such a kernel with the
 * virtual block it took (its ticket); 1 when sampling is on and that
 * virtual block is not a sampled one: the block then skips its work (it
 * still takes part in the tickets and counters) and counts as not run, so
 * the launch's counts are scaled as a sampled grid's. 0 otherwise (no
 * sampling, or a kernel that is not run whole). */
int emu_traffic_vblock_skip(unsigned long long vblock);
void emu_traffic_stop(void);
/* emu_traffic_reset: empty the table (counting goes on). */
void emu_traffic_reset(void);
/* emu_traffic_get: copies up to max rows, returns how many were copied. */
int emu_traffic_get(emu_traffic *rows, int max);

typedef struct emu_stats {
    uint64_t launches, blocks, threads;   /* kernels run, blocks, GPU threads */
    uint64_t switches;                    /* fiber switches */
    uint64_t barriers, warp_ops;          /* completed __syncthreads, warp-wide ops */
    uint64_t accesses;                    /* loads and stores checked */
    uint64_t faults;
} emu_stats;
void emu_stats_get(emu_stats *s);

/* ---- device-side entry points (used by emu_device.h) ------------------------ */

typedef struct emu_site { const char *file; int line; } emu_site;

/* One kernel launch: the kernel, its parameters packed as CUDA packs them
 * (each at its alignment), the configuration and where it was launched. */
typedef struct emu_call {
    const void *func;               /* the kernel (key of cudaFuncSetAttribute) */
    const char *pretty;             /* __PRETTY_FUNCTION__ naming "F = kernel" */
    void (*thunk)(const unsigned char *params);   /* calls func with them */
    const unsigned char *params;
    size_t params_bytes;
    dim3 grid, block;
    size_t shmem;                   /* dynamic shared memory, bytes */
    cudaStream_t stream;
    emu_site site;
} emu_call;

/* emu_launch: run the grid now (or record it into the capturing stream's
 * graph); copies what it keeps. Sets the last error on a bad configuration.
 * A fault ends the grid and makes the error sticky. */
void emu_launch(const emu_call *c);

uint3 emu_thread_idx(void);
uint3 emu_block_idx(void);
dim3 emu_block_dim(void);
dim3 emu_grid_dim(void);

/* __syncthreads and its _count/_and/_or forms (kind 0..3); returns the
 * count/and/or of pred over the block. */
int emu_syncthreads(int kind, int pred, emu_site site);

typedef enum emu_wop {
    EMU_W_SYNC, EMU_W_SHFL_IDX, EMU_W_SHFL_UP, EMU_W_SHFL_DOWN, EMU_W_SHFL_XOR,
    EMU_W_BALLOT, EMU_W_ANY, EMU_W_ALL, EMU_W_MATCH_ANY, EMU_W_MATCH_ALL,
    EMU_W_ADD, EMU_W_MIN_U, EMU_W_MAX_U, EMU_W_MIN_S, EMU_W_MAX_S, EMU_W_AND, EMU_W_OR, EMU_W_XOR,
    EMU_W_NOPS
} emu_wop;
/* A warp-synchronous op of the calling lane: value (the low vbytes bytes
 * matter), arg (shuffle lane/delta/mask), width (shuffles). Returns the
 * op's result; *pred gets match_all's predicate. */
uint64_t emu_warp(emu_wop op, unsigned mask, uint64_t value, int vbytes, int arg, int width, int *pred,
                  emu_site site);

/* The block's copy of the __shared__ variable identified by key (one per
 * declaration and template instantiation), bytes long; name for reports. */
void *emu_shared_var(const void *key, size_t bytes, size_t align, size_t elem, const char *name, emu_site site);
/* The block's dynamic shared memory (extern __shared__), of the launch's size. */
void *emu_dyn_shared(emu_site site);

/* Access flags of emu_access. */
#define EMU_LOAD 1
#define EMU_STORE 2
#define EMU_ATOMIC 4
#define EMU_LDG 8
/* emu_access: check an access the compiler's hooks do not see (atomics,
 * __ldg's address space). */
void emu_access(const void *p, size_t bytes, int flags, emu_site site);
void emu_trap(emu_site site) __attribute__((noreturn));
long long emu_clock(void);
/* emu_threadfence: __threadfence() (the race check's publication). */
void emu_threadfence(void);

#ifdef __cplusplus
}
#endif

#endif
