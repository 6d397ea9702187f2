/* emu_int.h - the emulator's state, shared by its parts:
 *   emu_fiber.c  fibers, the block scheduler, __syncthreads, warp ops, faults
 *   emu_mem.c    device memory with guard pages, shadow bytes, the per-access
 *                hooks, shared variables, the SIGSEGV handler
 *   emu_race.c   the race check between the blocks of a launch
 *   emu_rt.c     the CUDA runtime API: errors, the device, memory, launches
 *   emu_stream.c streams, events, graph capture and replay
 *   emu_blas.c   the cuBLAS stand-ins
 * One process-wide state (emu_g); single host thread.
 */
#ifndef MOSHID_EMU_INT_H
#define MOSHID_EMU_INT_H

#include <setjmp.h>
#include <stdarg.h>
#include <ucontext.h>

#include "emu.h"

#define EMU_MAX_THREADS 1024        /* threads per block */
#define EMU_WARP 32
#define EMU_STACK_BYTES (64 * 1024) /* per fiber (the GPU's default is 1 KiB) */
#define EMU_SHARED_LIMIT (227 * 1024)   /* opt-in shared memory per block (sm_90) */
#define EMU_SHARED_DEFAULT (48 * 1024)  /* without cudaFuncSetAttribute */
#define EMU_POISON 0xFF             /* fresh device and shared memory: NaN, -1 */
#define EMU_TIMEOUT_MS 120000u      /* per launch (EMU_TIMEOUT_S): a spin-wait never ends here */

typedef enum emu_fstate { EMU_F_RUN, EMU_F_BAR, EMU_F_WARP, EMU_F_DONE } emu_fstate;

/* One GPU thread. */
typedef struct emu_fiber {
    jmp_buf jb;             /* where it is suspended (after its first start) */
    ucontext_t uc;          /* its first start */
    int started;
    char *stack;            /* EMU_STACK_BYTES above a guard page */
    uint3 tid;
    int lin, warp, lane;    /* linear id in the block, / 32, % 32 */
    emu_fstate st;
    emu_site site;          /* the barrier or warp op it waits at */
    int pred;               /* __syncthreads_* predicate */
    emu_wop wop;            /* the warp op it waits in */
    unsigned wmask;
    int warg, wwidth;
    uint64_t wval, wres;
    int wpred;
} emu_fiber;

/* Kinds of memory in the arena. */
typedef enum emu_akind { EMU_A_DEVICE, EMU_A_PINNED, EMU_A_SHARED, EMU_A_DYNSHARED } emu_akind;

/* One allocation: its pages follow a guard page and end where the next
 * allocation's guard page starts; the data is placed against that end. */
typedef struct emu_alloc {
    char *lo, *hi;          /* its pages (after the leading guard page) */
    char *ptr;              /* what the program sees */
    size_t size;
    emu_akind kind;
    int freed, id;
    int dev;                /* device memory: the device current when it was allocated */
    unsigned char *shadow;  /* (size) 1 = written; NULL for pinned host memory */
    const char *name;       /* shared variables: their name */
    size_t elem;            /* and element size */
    const void *key;        /* shared variables: the declaration */
    uint64_t gen;           /* block generation its shadow was reset for */
    uint64_t race_launch;   /* the race check: the last launch that stored to it (plainly) */
    int lazy;               /* emu_set_lazy: neither poisoned nor shadowed */
} emu_alloc;

typedef struct emu_state {
    int inited;
    /* options */
    emu_order order;
    emu_order block_order;  /* emu_set_block_order */
    uint32_t *block_perm;   /* a random block order's permutation, block_perm_n entries */
    size_t block_perm_n;
    uint64_t seed;
    int quiet, hooks;
    unsigned timeout_ms;
    unsigned inject_after;  /* emu_inject_fault: kernel runs left before the injected fault (0: none) */
    unsigned alloc_fail_after;   /* emu_inject_alloc_failure: allocations left before the failing one (0: none) */
    /* errors */
    cudaError_t sticky;     /* device-wide: a fault; the last error is per host thread (emu_t_last) */
    int ndev;               /* emulated devices (EMU_DEVICES, emu_set_devices; 0: not read yet) */
    int run_dev;            /* the device of the kernel being run (its stream's) */
    uint64_t alloc_calls;   /* cudaMalloc/cudaFree/cudaMallocHost/cudaHostAlloc/cudaFreeHost calls */
    int race_check;         /* emu_set_race_check */
    uint64_t race_atomic_gen;   /* the block (block_gen) that executed the race check's last atomic */
    int async;              /* streams run asynchronously (EMU_STREAMS, emu_set_streams; default 1) */
    uint64_t sched;         /* the stream scheduler's random state (from EMU_SEED) */
    char launched[EMU_NAME_LEN];   /* the kernel launched last (emu_last_kernel) */
    emu_fault fault;
    /* the grid being run */
    const emu_call *call;
    char kname[EMU_NAME_LEN];
    uint3 bidx;
    uint64_t block_gen;     /* advances every block: shared memory starts over */
    emu_alloc *dyn;         /* dynamic shared memory of this launch, or NULL */
    volatile int in_kernel; /* a fiber runs: hooks check, signals are faults */
    volatile int timed_out; /* the launch's alarm went off outside a fiber */
    emu_fiber *cur;
    emu_fiber *fib;         /* (EMU_MAX_THREADS) */
    int nfib_made;          /* fibers with a stack */
    int nthreads, live, exited;
    int *order_ix, *order_pos;  /* resume order: position -> fiber, fiber -> position */
    /* barrier */
    int bar_count, bar_result;
    emu_site bar_site;
    emu_fiber *bar_first;
    /* switching */
    jmp_buf sched_jb;
    sigjmp_buf fault_jb;
    emu_stats stats;
} emu_state;

extern emu_state emu_g;
/* Per host thread, as the runtime keeps them: the last error and the
 * current device (0 on a thread that never called cudaSetDevice). */
extern __thread cudaError_t emu_t_last;
extern __thread int emu_t_dev;

/* emu_fiber.c */
void emu_init(void);
/* emu_run_grid: run every block of c now; 0, or -1 after a fault (recorded,
 * printed, the sticky error set). */
int emu_run_grid(const emu_call *c);
/* emu_fault_raise: record a fault of the current thread (message formatted
 * from fmt) and abandon the grid. Only from code running in a fiber. */
void emu_fault_raise(emu_fault_kind k, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* emu_fault_raise_at: the same, blaming thread f (a lane whose result the
 * current thread computes). */
void emu_fault_raise_at(emu_fault_kind k, const emu_fiber *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* emu_fault_note: the same from outside a fiber (the scheduler, a signal
 * handler about to jump out, the runtime): records and prints; thread f
 * (may be NULL) is the one blamed. */
void emu_fault_note(emu_fault_kind k, const emu_fiber *f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void emu_vfault_note(emu_fault_kind k, const emu_fiber *f, const char *fmt, va_list ap);
/* emu_where: "file:line" of a site, or the code address pc as a symbol and
 * an offset for addr2line. */
void emu_where(char *out, size_t len, emu_site site, const void *pc);
/* emu_kernel_name: the kernel's name from an emu_call's pretty string. */
void emu_kernel_name(char *out, size_t len, const char *pretty);

/* emu_mem.c */
void emu_mem_init(void);
emu_alloc *emu_alloc_new(size_t size, size_t align, emu_akind kind);
void emu_alloc_free(emu_alloc *a);
/* emu_alloc_at: the live or freed allocation whose data holds p (NULL if
 * none); *span: [p, p+n) lies inside it. */
emu_alloc *emu_alloc_at(const void *p, size_t n, int *span);
void emu_alloc_reset_all(void);
void emu_alloc_reset_block(emu_alloc *a);
/* emu_shadow_set: mark [p, p+n) of device memory written (v = 1) or not. */
void emu_shadow_set(const void *p, size_t n, int v);
/* emu_mem_set: a memset node's work: [p, p+n) = v, marked written; a lazy
 * buffer set to 0 gets its whole pages back instead (emu_set_lazy). */
void emu_mem_set(void *p, int v, size_t n);
/* emu_lazy_on: emu_set_lazy's switch. */
int emu_lazy_on(void);
void emu_shadow_copy(void *dst, const void *src, size_t n);
/* emu_describe: "hist[3] (byte 12)", "device buffer #4 + 12": the byte p of a, for a fault's message. */
void emu_describe(char *out, size_t len, const emu_alloc *a, const char *p);
/* emu_check: one access by the current thread; faults on the first problem. */
void emu_check(const void *p, size_t n, int flags, emu_site site, const void *pc);
int emu_in_stack(const void *p, int *guard);

/* emu_race.c: the race check of one device-memory access of the current
 * thread (flags as emu_access's; emu_check calls it with the check on,
 * after the access's bounds are checked, for every store and atomic, and
 * for a load of a buffer stored to in this launch or by a block that has
 * executed an atomic: the others have nothing to check); faults on the
 * first race. */
void emu_race_access(emu_alloc *a, const char *p, size_t n, int flags, emu_site site, const void *pc);

/* emu_traffic.c (see emu.h): the hooks of emu_check, emu_run_grid and the
 * cuBLAS stand-in. insn: the access's instruction (code address or site). */
void emu_traffic_note(const emu_alloc *a, const void *p, size_t n, uint64_t insn);
int emu_traffic_on(void);
unsigned emu_traffic_stride(void);
int emu_traffic_skip_block(uint64_t block_no, unsigned x, unsigned y, unsigned gx);
void emu_traffic_block_done(void);
void emu_traffic_launch_begin(void);
void emu_traffic_launch_end(const emu_call *c);
void emu_traffic_gemm(int m, int n, int k, size_t a_es, size_t b_es, size_t c_es, int c_read);

/* emu_rt.c */
/* emu_note: "emu: ..." on stderr unless quiet (argument problems a device
 * reports only as an error code). emu_ret: record e as the last error
 * (unless cudaSuccess) and return it. */
void emu_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cudaError_t emu_ret(cudaError_t e);
/* Every runtime call but the error queries and reset starts here: a sticky
 * error is returned by everything. */
#define EMU_ENTER()                                 \
    do {                                            \
        emu_init();                                 \
        if (emu_g.sticky) return emu_t_last = emu_g.sticky; \
    } while (0)

/* emu_stream.c */
/* emu_stream_dev: the device of stream s (the calling thread's current one
 * for the default streams), -1 for a bad handle. */
int emu_stream_dev(cudaStream_t s);
/* emu_rt.c: the number of emulated devices. */
int emu_devices(void);
typedef void (*emu_host_fn)(const void *arg);
/* One piece of stream work: a launch, a copy, a memset or a host function
 * (the cuBLAS stand-ins); a graph is a list of these in stream order. */
typedef enum { EMU_NODE_KERNEL, EMU_NODE_MEMCPY, EMU_NODE_MEMSET, EMU_NODE_HOST } emu_node_kind;

typedef struct emu_node {
    emu_node_kind kind;
    void *own;                /* a buffer the node owns (a staged host copy), or NULL */
    const void *chk;          /* EMU_NODE_MEMCPY from pinned memory: the source as it was at the call */
    int dst_host;             /* EMU_NODE_MEMCPY into host memory (poisoned until the copy runs) */
    emu_call call;            /* EMU_NODE_KERNEL; call.params owned */
    void *dst;
    const void *src;
    size_t n;
    int value;
    enum cudaMemcpyKind ckind;
    emu_host_fn fn;           /* EMU_NODE_HOST; arg owned */
    void *arg;
} emu_node;

/* emu_enqueue: run nd now, or record a copy of it when stream captures. */
cudaError_t emu_enqueue(cudaStream_t stream, const emu_node *nd);
/* emu_enqueue_host: run fn(arg) in stream order (now, or as a node of the
 * graph being captured on stream; arg is copied, bytes long). The cuBLAS
 * stand-ins enqueue themselves this way. */
cudaError_t emu_enqueue_host(cudaStream_t stream, emu_host_fn fn, const void *arg, size_t bytes);
/* A stream captures in a mode that forbids synchronising calls; and the
 * invalidation of every capture by such a call (why names it). */
int emu_capture_active(void);
/* emu_stream_capturing: s is a capturing stream. */
int emu_stream_capturing(cudaStream_t s);
void emu_capture_invalidate(const char *why);
/* cudaDeviceReset: no stream captures any more, pending work is dropped. */
void emu_streams_reset(void);
/* Asynchronous streams (docs/cuda.md, "Streams run asynchronously"):
 * emu_sync_stream runs pending work until everything enqueued on stream so
 * far has completed (and what it waits for); emu_sync_all until nothing is
 * pending. Both return the sticky error, if any. */
cudaError_t emu_sync_stream(cudaStream_t stream);
cudaError_t emu_sync_all(void);

#endif
