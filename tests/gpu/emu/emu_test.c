/* emu_test.c - emu-test: the CUDA emulator's own tests.
 *
 *  1. Detectors: every kind of fault the emulator claims to find is
 *     provoked by a deliberately faulty kernel (emu_faults.cu) and must be
 *     reported with its kind, kernel, block, thread and reason; then the
 *     error must be sticky until cudaDeviceReset. Then the project's own
 *     kernels, misused (a buffer one row short, W misaligned on the vector
 *     path, inputs never uploaded, a host pointer), must be caught in them.
 *  2. Semantics: correct kernels whose results pin down what the emulator
 *     computes (shuffle modes and widths, votes, matches, reductions,
 *     barrier counts, atomics, 3-D indices, dynamic shared memory), and the
 *     runtime: launch configuration errors, copy checks, graph capture and
 *     replay, capture invalidation, the cuBLAS stand-in.
 *     Asynchronous streams: a missing event wait reads what the producer
 *     has not written, the legacy stream's implicit synchronisation, the
 *     order of independent streams drawn from the seed, a reused pinned
 *     staging buffer reported, pageable sources staged, host destinations
 *     poisoned until their copy's event; the cuBLAS stand-in's
 *     shape-dependent order and its refusal to be captured without a
 *     workspace.
 *     Per host thread state: the last error and the current device, and
 *     the two-device mode (a thread that never set the device works on
 *     device 0); allocation calls counted.
 *     Publication between blocks: a last-block reduction (fence, atomic,
 *     counter reset) passes the race check in every block order, and a
 *     counter not reset shows in a second launch; ordered chains (three
 *     stages ordered transitively, a store after published reads or a
 *     published store) pass in every block order, and an __ldg of an
 *     earlier launch's stores passes.
 *  3. Resume order: the project's kernels give bit-identical results under
 *     every resume order; the LM attention under every block order.
 * One line per test, then "N passed, N failed, 0 skipped"; exit 1 on a
 * failure. Faults are expected here, so the emulator is quiet.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "cu_check.h"
#include "cu_kern.h"
#include "emu.h"
#include "gpu_util.h"
#include "kern_cpu.h"
#include "lm_config.h"
#include "samp.h"
#include "st.h"

/* emu_faults.cu */
typedef cudaError_t (*ef_launcher)(float *d, int n);
#define EF(name) cudaError_t ef_##name(float *d, int n);
EF(bar_exit_early) EF(bar_divergent) EF(warp_exited_lane) EF(warp_partial) EF(warp_not_in_mask)
EF(warp_mismatch) EF(warp_inactive_source) EF(warp_barrier_deadlock) EF(warp_bad_width) EF(ldg_misaligned)
EF(vector_misaligned) EF(scalar_misaligned) EF(oob_read) EF(oob_write_before) EF(oob_far_write) EF(oob_shared)
EF(oob_dyn_shared) EF(read_all) EF(ldg_shared) EF(atomic_local) EF(other_local) EF(hist_not_zeroed) EF(missing_barrier)
EF(shared_across_blocks) EF(stack_overflow) EF(trap_kernel) EF(divide_by_zero) EF(spin_wait) EF(write_race)
EF(publish_no_fence) EF(publish_no_atomic) EF(publish_early) EF(chain_late_wait) EF(war_no_fence) EF(war_no_wait)
EF(waw_no_fence) EF(war_one_seen) EF(nc_other) EF(nc_same) EF(nc_atomic) EF(chain2_blockidx) EF(chain2_no_wait)
EF(chain2_no_fence)
cudaError_t ef_chain2_mode(float *d, int mode);
#undef EF
cudaError_t ef_publish_mode(float *d, int mode);
enum { PUB_OK, PUB_NO_FENCE, PUB_NO_ATOMIC, PUB_EARLY, PUB_NO_RESET };   /* emu_faults.cu publish() */
/* emu_faults.cu chain(), handoff(), nc_load() and their launchers (the counters zeroed first) */
cudaError_t ef_chain_mode(float *d, int mode);
cudaError_t ef_handoff_mode(float *d, int mode);
cudaError_t ef_nc_mode(float *d, int mode);
#define CH_P 2
#define CH_T 8
enum { CH_OK, CH_LATE_WAIT };
enum { HO_READ_OK, HO_READ_NO_FENCE, HO_READ_NO_WAIT, HO_WRITE_OK, HO_WRITE_NO_FENCE, HO_TWO_OK, HO_TWO_ONE_SEEN };
enum { NC_OTHER, NC_SAME, NC_ATOMIC, NC_READ };
cudaError_t ef_matvec_vec_direct(float *y, const float *x, const uint16_t *w, int B, int N, int K);
cudaError_t es_shuffles_run(int *out);
cudaError_t es_votes_run(int *out);
cudaError_t es_atomics_run(float *d);
cudaError_t es_dims_run(float *d);
cudaError_t es_dyn_shared_run(float *d, int n, int optin);
cudaError_t es_add_one_run(float *d, int n, cudaStream_t s);
cudaError_t es_config_run(float *d, unsigned threads, unsigned gy);
cudaError_t es_traffic_run(float *out, const float *d, int mode);

static int n_pass, n_fail;

static void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(int ok, const char *name, const char *fmt, ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%-4s %-52s %s\n", ok ? "ok" : "FAIL", name, detail);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- 1. detectors ------------------------------------------------------------------ */

#define NBUF 96   /* floats in each case's buffer */

typedef enum { BUF_INIT, BUF_UNINIT, BUF_HALF, BUF_FREED, BUF_HOST, BUF_NULL } buf_mode;

typedef struct fault_case {
    const char *name;
    ef_launcher run;
    buf_mode buf;
    emu_fault_kind kind;
    const char *kernel;   /* the kernel's name */
    unsigned bx, tx;      /* blockIdx.x and threadIdx.x of the thread blamed (in this order) */
    const char *why;      /* in the reason */
    int hooks;            /* 0: the guard pages alone */
    emu_order order;
} fault_case;

static const fault_case fault_cases[] = {
    {"barrier: a thread exits before it", ef_bar_exit_early, BUF_INIT, EMU_FAULT_BARRIER, "bar_exit_early", 0, 5,
     "exits while 5 thread(s) wait at __syncthreads", 1, EMU_ORDER_FORWARD},
    {"barrier: two __syncthreads in divergent code", ef_bar_divergent, BUF_INIT, EMU_FAULT_BARRIER, "bar_divergent",
     0, 32, "different barriers", 1, EMU_ORDER_FORWARD},
    {"warp: a lane of the mask exited", ef_warp_exited_lane, BUF_INIT, EMU_FAULT_WARP, "warp_exited_lane", 0, 7,
     "lane 7 exits while lane 0 waits", 1, EMU_ORDER_FORWARD},
    {"warp: a lane of the mask does not exist", ef_warp_partial, BUF_INIT, EMU_FAULT_WARP, "warp_partial", 0, 32,
     "lane 16 in the mask 0xffffffff does not exist", 1, EMU_ORDER_FORWARD},
    {"warp: the caller is not in its mask", ef_warp_not_in_mask, BUF_INIT, EMU_FAULT_WARP, "warp_not_in_mask", 0, 16,
     "not in its mask", 1, EMU_ORDER_FORWARD},
    {"warp: lanes of one mask in different ops", ef_warp_mismatch, BUF_INIT, EMU_FAULT_WARP, "warp_mismatch", 0, 1,
     "disagree", 1, EMU_ORDER_FORWARD},
    {"warp: a shuffle reads a lane not in the mask", ef_warp_inactive_source, BUF_INIT, EMU_FAULT_WARP,
     "warp_inactive_source", 0, 0, "reads lane 20, which is not in the mask", 1, EMU_ORDER_FORWARD},
    {"warp: a lane of the mask waits at a barrier", ef_warp_barrier_deadlock, BUF_INIT, EMU_FAULT_WARP,
     "warp_barrier_deadlock", 0, 3, "goes to __syncthreads", 1, EMU_ORDER_FORWARD},
    {"warp: shuffle width not a power of two", ef_warp_bad_width, BUF_INIT, EMU_FAULT_WARP, "warp_bad_width", 0, 0,
     "width 12", 1, EMU_ORDER_FORWARD},
    {"misaligned: __ldg of a uint4", ef_ldg_misaligned, BUF_INIT, EMU_FAULT_MISALIGNED, "ldg_misaligned", 0, 0,
     "__ldg load of 16 bytes", 1, EMU_ORDER_FORWARD},
    {"misaligned: float4 load", ef_vector_misaligned, BUF_INIT, EMU_FAULT_MISALIGNED, "vector_misaligned", 0, 0,
     "vector load of a float4", 1, EMU_ORDER_FORWARD},
    {"misaligned: float load", ef_scalar_misaligned, BUF_INIT, EMU_FAULT_MISALIGNED, "scalar_misaligned", 0, 0,
     "not 4-byte aligned", 1, EMU_ORDER_FORWARD},
    {"out-of-bounds: one element past the end", ef_oob_read, BUF_INIT, EMU_FAULT_OOB, "oob_read", 2, 16,
     "byte 384 of device buffer", 1, EMU_ORDER_FORWARD},
    {"out-of-bounds: before the start", ef_oob_write_before, BUF_INIT, EMU_FAULT_OOB, "oob_write_before", 0, 0,
     "4 bytes before the start", 1, EMU_ORDER_FORWARD},
    {"out-of-bounds: the guard page alone (hooks off)", ef_oob_far_write, BUF_INIT, EMU_FAULT_OOB, "oob_far_write",
     0, 9, "caught by a guard page", 0, EMU_ORDER_FORWARD},
    {"out-of-bounds: a __shared__ array", ef_oob_shared, BUF_INIT, EMU_FAULT_OOB, "oob_shared", 0, 32,
     "shared variable s (128 bytes)", 1, EMU_ORDER_FORWARD},
    {"out-of-bounds: dynamic shared memory", ef_oob_dyn_shared, BUF_INIT, EMU_FAULT_OOB, "oob_dyn_shared", 0, 16,
     "dynamic shared memory", 1, EMU_ORDER_FORWARD},
    {"use-after-free: a freed buffer", ef_read_all, BUF_FREED, EMU_FAULT_FREED, "read_all", 0, 0, "was freed", 1,
     EMU_ORDER_FORWARD},
    {"write-race: two blocks store to one address (race check on)", ef_write_race, BUF_INIT, EMU_FAULT_WRITE_RACE,
     "write_race", 1, 0, "block #0 of this launch also stores", 1, EMU_ORDER_FORWARD},
    /* a last-block reduction missing a part of its publication (race check on) */
    {"read-race: last-block combine without __threadfence", ef_publish_no_fence, BUF_INIT, EMU_FAULT_READ_RACE,
     "publish", 3, 14, "block #0 of this launch stored to, unpublished", 1, EMU_ORDER_FORWARD},
    {"read-race: last-block combine without the atomic", ef_publish_no_atomic, BUF_INIT, EMU_FAULT_READ_RACE,
     "publish", 3, 14, "block #0 of this launch stored to, unpublished", 1, EMU_ORDER_FORWARD},
    {"read-race: combine before the counter says all arrived", ef_publish_early, BUF_INIT, EMU_FAULT_READ_RACE,
     "publish", 1, 0, "block #0 of this launch read after an atomic", 1, EMU_ORDER_FORWARD},
    /* ordered chains (emu_faults.cu chain, handoff, nc_load): what the publication rules must still refuse */
    {"read-race: a chain's relay acquires after its fence", ef_chain_late_wait, BUF_INIT, EMU_FAULT_READ_RACE,
     "chain", 4, 6, "block #0 of this launch stored to, unpublished", 1, EMU_ORDER_FORWARD},
    {"read-race: a store after a read published unfenced", ef_war_no_fence, BUF_INIT, EMU_FAULT_READ_RACE,
     "handoff", 1, 6, "block #0 of this launch read after an atomic", 1, EMU_ORDER_FORWARD},
    {"read-race: a store after a read, the writer not waiting", ef_war_no_wait, BUF_INIT, EMU_FAULT_READ_RACE,
     "handoff", 1, 6, "block #0 of this launch read after an atomic", 1, EMU_ORDER_FORWARD},
    {"read-race: two readers, the writer saw one", ef_war_one_seen, BUF_INIT, EMU_FAULT_READ_RACE, "handoff", 2, 6,
     "block #1 of this launch read after an atomic", 1, EMU_ORDER_FORWARD},
    {"write-race: a store after a store published unfenced", ef_waw_no_fence, BUF_INIT, EMU_FAULT_WRITE_RACE,
     "handoff", 1, 6, "block #0 of this launch also stores", 1, EMU_ORDER_FORWARD},
    {"nc-stale: __ldg of another block's published store", ef_nc_other, BUF_INIT, EMU_FAULT_NC_STALE, "nc_load", 1,
     6, "block #0 of this launch stored to: the non-coherent path", 1, EMU_ORDER_FORWARD},
    {"nc-stale: __ldg of this block's own store", ef_nc_same, BUF_INIT, EMU_FAULT_NC_STALE, "nc_load", 0, 7,
     "this block stored to in this launch", 1, EMU_ORDER_FORWARD},
    {"nc-stale: __ldg of what an atomic wrote", ef_nc_atomic, BUF_INIT, EMU_FAULT_NC_STALE, "nc_load", 1, 7,
     "an atomic of this launch wrote", 1, EMU_ORDER_FORWARD},
    {"host-memory: a malloc'd pointer", ef_read_all, BUF_HOST, EMU_FAULT_HOST, "read_all", 0, 0, "host pointer", 1,
     EMU_ORDER_FORWARD},
    {"host-memory: NULL", ef_read_all, BUF_NULL, EMU_FAULT_HOST, "read_all", 0, 0, "NULL", 1, EMU_ORDER_FORWARD},
    /* (after a barrier the thread that arrived last goes on first) */
    {"address-space: __ldg of shared memory", ef_ldg_shared, BUF_INIT, EMU_FAULT_SPACE, "ldg_shared", 0, 63,
     "__ldg of s", 1, EMU_ORDER_FORWARD},
    {"address-space: atomic on local memory", ef_atomic_local, BUF_INIT, EMU_FAULT_SPACE, "atomic_local", 0, 0,
     "atomic on local memory", 1, EMU_ORDER_FORWARD},
    {"address-space: another thread's local memory", ef_other_local, BUF_INIT, EMU_FAULT_SPACE, "other_local", 0, 7,
     "local memory of thread 0", 1, EMU_ORDER_FORWARD},
    {"uninit-shared: histogram not zeroed", ef_hist_not_zeroed, BUF_INIT, EMU_FAULT_UNINIT_SHARED, "hist_not_zeroed",
     0, 0, "h[0]", 1, EMU_ORDER_FORWARD},
    {"uninit-shared: missing __syncthreads (reverse order)", ef_missing_barrier, BUF_INIT, EMU_FAULT_UNINIT_SHARED,
     "missing_barrier", 0, 31, "s[0]", 1, EMU_ORDER_REVERSE},
    {"uninit-shared: not kept from block to block", ef_shared_across_blocks, BUF_INIT, EMU_FAULT_UNINIT_SHARED,
     "shared_across_blocks", 1, 31, "s[0]", 1, EMU_ORDER_FORWARD},
    {"uninit-global: never written", ef_read_all, BUF_UNINIT, EMU_FAULT_UNINIT_GLOBAL, "read_all", 0, 0,
     "was never written", 1, EMU_ORDER_FORWARD},
    {"uninit-global: only the first half written", ef_read_all, BUF_HALF, EMU_FAULT_UNINIT_GLOBAL, "read_all", 0, 16,
     "device buffer #", 1, EMU_ORDER_FORWARD},
    {"stack-overflow: deep recursion", ef_stack_overflow, BUF_INIT, EMU_FAULT_STACK, "stack_overflow", 0, 0,
     "stack", 1, EMU_ORDER_FORWARD},
    {"trap: __trap()", ef_trap_kernel, BUF_INIT, EMU_FAULT_TRAP, "trap_kernel", 0, 3, "__trap()", 1,
     EMU_ORDER_FORWARD},
    {"signal: integer division by zero", ef_divide_by_zero, BUF_INIT, EMU_FAULT_SIGNAL, "divide_by_zero", 0, 0,
     "SIGFPE", 1, EMU_ORDER_FORWARD},
    {"timeout: a spin-wait on another thread", ef_spin_wait, BUF_INIT, EMU_FAULT_TIMEOUT, "spin_wait", 0, 0,
     "longer than 300 ms", 1, EMU_ORDER_FORWARD},
};

/* The buffer of a case (device memory unless host or NULL). */
static float *case_buffer(buf_mode m, void **host) {
    *host = NULL;
    if (m == BUF_NULL) return NULL;
    float init[NBUF];
    for (int i = 0; i < NBUF; i++) init[i] = (float)i;
    if (m == BUF_HOST) {
        float *h = malloc(sizeof init);
        memcpy(h, init, sizeof init);
        *host = h;
        return h;
    }
    float *d = gu_dalloc(sizeof init);
    if (m == BUF_INIT) gu_h2d(d, init, sizeof init);
    if (m == BUF_HALF) gu_h2d(d, init, sizeof init / NBUF * 16);
    if (m == BUF_FREED) gu_dfree(d);
    return d;
}

/* Run a faulty launch and check what the emulator reported; restores the
 * defaults and resets the device afterwards. */
static void expect_fault(const char *name, emu_fault_kind kind, const char *kernel, unsigned bx, unsigned tx,
                         const char *why) {
    emu_fault f;
    emu_fault_kind got = emu_fault_last(&f);
    cudaError_t sync = cudaDeviceSynchronize();
    void *p = NULL;
    cudaError_t later = cudaMalloc(&p, 64);   /* still failing: the error is sticky */
    cudaDeviceReset();
    cudaError_t after = cudaMalloc(&p, 64);   /* and reset clears it */
    cudaDeviceReset();
    emu_set_order(EMU_ORDER_RANDOM);
    emu_set_hooks(1);
    emu_set_timeout_ms(120000);
    emu_set_race_check(0);
    int ok = got == kind && sync == emu_fault_error(kind) && later == sync && after == cudaSuccess &&
             strstr(f.kernel, kernel) && f.block.x == bx && f.thread.x == tx && strstr(f.msg, why);
    if (ok)
        result(1, name, "%s in %s block %u thread %u: %s", emu_fault_name(got), f.kernel, f.block.x, f.thread.x,
               f.msg);
    else
        result(0, name,
               "want %s in %s block %u thread %u (\"%s\"); got %s in %s block %u thread %u: \"%s\"; sync %s, later %s, "
               "after reset %s",
               emu_fault_name(kind), kernel, bx, tx, why, emu_fault_name(got), f.kernel, f.block.x, f.thread.x, f.msg,
               cudaGetErrorName(sync), cudaGetErrorName(later), cudaGetErrorName(after));
}

static void test_detectors(void) {
    for (size_t i = 0; i < sizeof fault_cases / sizeof fault_cases[0]; i++) {
        const fault_case *c = &fault_cases[i];
        cudaDeviceReset();
        emu_set_order(c->order);
        emu_set_hooks(c->hooks);
        if (c->kind == EMU_FAULT_TIMEOUT) emu_set_timeout_ms(300);
        emu_set_race_check(c->kind == EMU_FAULT_WRITE_RACE || c->kind == EMU_FAULT_READ_RACE ||
                           c->kind == EMU_FAULT_NC_STALE);
        void *host;
        float *d = case_buffer(c->buf, &host);
        c->run(d, NBUF);
        expect_fault(c->name, c->kind, c->kernel, c->bx, c->tx, c->why);
        free(host);
    }
    /* A missing barrier is an order-dependent race: the forward order (the
     * writer first) hides it; the reverse and random orders show it. */
    cudaDeviceReset();
    emu_set_order(EMU_ORDER_FORWARD);
    void *host;
    float *d = case_buffer(BUF_INIT, &host);
    ef_missing_barrier(d, NBUF);
    cudaError_t e = cudaDeviceSynchronize();
    emu_set_order(EMU_ORDER_RANDOM);
    result(e == cudaSuccess, "uninit-shared: missing barrier hidden in forward order",
           "%s (as documented: the emulator finds a race only when the order puts the reader first)",
           cudaGetErrorName(e));
    cudaDeviceReset();
}

/* ---- 1b. the project's kernels, misused ---------------------------------------------- */

static void test_real_kernels(void) {
    gu_rng r = {7};
    /* matvec with W one row short: the last block reads past its end */
    {
        const int B = 2, N = 33, K = 64;
        float x[2 * 64];
        uint16_t w[33 * 64];
        for (int i = 0; i < B * K; i++) x[i] = (float)gu_normal(&r);
        for (int i = 0; i < N * K; i++) w[i] = st_f32_to_bf16((float)gu_normal(&r));
        float *dx = gu_dalloc(sizeof x), *dy = gu_dalloc((size_t)B * N * 4);
        uint16_t *dw = gu_dalloc((size_t)(N - 1) * K * 2);
        gu_h2d(dx, x, sizeof x);
        gu_h2d(dw, w, (size_t)(N - 1) * K * 2);
        emu_set_order(EMU_ORDER_FORWARD);
        cu_matvec_bf16(dy, dx, dw, B, N, K, 0);
        expect_fault("matvec_bf16: W one row short", EMU_FAULT_OOB, "matvec_bf16_vec<2>", 16, 0, "past its end");

        /* the vector kernel given a misaligned W (its launcher would have
         * chosen the scalar path) */
        dx = gu_dalloc(sizeof x);
        dy = gu_dalloc((size_t)B * N * 4);
        dw = gu_dalloc(sizeof w + 16);
        gu_h2d(dx, x, sizeof x);
        gu_h2d(dw + 1, w, sizeof w);
        emu_set_order(EMU_ORDER_FORWARD);
        ef_matvec_vec_direct(dy, dx, dw + 1, B, N, K);
        expect_fault("matvec_bf16_vec: W misaligned on the vector path", EMU_FAULT_MISALIGNED, "matvec_bf16_vec<8>",
                     0, 0, "__ldg load of 8 bytes");

        /* x allocated but never uploaded */
        dx = gu_dalloc(sizeof x);
        dy = gu_dalloc((size_t)B * N * 4);
        dw = gu_dalloc(sizeof w);
        gu_h2d(dw, w, sizeof w);
        emu_set_order(EMU_ORDER_FORWARD);
        cu_matvec_bf16(dy, dx, dw, B, N, K, 0);
        expect_fault("matvec_bf16: x never written", EMU_FAULT_UNINIT_GLOBAL, "matvec_bf16_vec<2>", 0, 0,
                     "never written");
    }
    /* rmsnorm with alpha one element short */
    {
        const int B = 2, C = 300;
        float *x = malloc((size_t)B * C * 4), *a = malloc((size_t)C * 4);
        for (int i = 0; i < B * C; i++) x[i] = (float)gu_normal(&r);
        for (int i = 0; i < C; i++) a[i] = 1.0f;
        float *dx = gu_dalloc((size_t)B * C * 4), *dy = gu_dalloc((size_t)B * C * 4), *da = gu_dalloc((size_t)(C - 1) * 4);
        gu_h2d(dx, x, (size_t)B * C * 4);
        gu_h2d(da, a, (size_t)(C - 1) * 4);
        emu_set_order(EMU_ORDER_FORWARD);
        cu_rmsnorm(dy, dx, da, B, C, 1e-8f, 0);
        expect_fault("rmsnorm: alpha one element short", EMU_FAULT_OOB, "rmsnorm_kernel", 0, 43, "past its end");
        free(x);
        free(a);
    }
    /* sampler with the logits one element short, and rows on the host */
    {
        const int B = 2, N = 300;
        float *l = malloc((size_t)B * N * 4);
        for (int i = 0; i < B * N; i++) l[i] = (float)gu_normal(&r);
        samp_row rows[2] = {{1, 2, 0.0f, 0}, {3, 4, 0.0f, 0}};
        float *dl = gu_dalloc((size_t)(B * N - 1) * 4);
        samp_row *drows = gu_dalloc(sizeof rows);
        int32_t *dout = gu_dalloc(8);
        gu_h2d(dl, l, (size_t)(B * N - 1) * 4);
        gu_h2d(drows, rows, sizeof rows);
        emu_set_order(EMU_ORDER_FORWARD);
        cu_samp_topk_rows(dout, dl, drows, B, N, 0, 0);
        expect_fault("samp_topk_rows: logits one element short", EMU_FAULT_OOB, "sample_topk_kernel", 1, 43,
                     "past its end");
        dl = gu_dalloc((size_t)B * N * 4);
        dout = gu_dalloc(8);
        gu_h2d(dl, l, (size_t)B * N * 4);
        emu_set_order(EMU_ORDER_FORWARD);
        cu_samp_topk_rows(dout, dl, rows, B, N, 0, 0);   /* rows: a host array */
        expect_fault("samp_topk_rows: rows on the host", EMU_FAULT_HOST, "sample_topk_kernel", 0, 0, "host pointer");
        free(l);
    }
}

/* ---- 2. semantics ---------------------------------------------------------------------- */

static void test_shuffles(void) {
    int got[64 * 8];
    int *d = gu_dalloc(sizeof got);
    CU_CHECK_FATAL(es_shuffles_run(d));
    gu_d2h(got, d, sizeof got);
    int bad = -1;
    for (int t = 0; t < 64 && bad < 0; t++) {
        const int l = t % 32, base = t - l;
        const int want[8] = {base + 5,
                             l >= 3 ? t - 3 : t,
                             l + 4 < 32 ? t + 4 : t,
                             base + (l ^ 6),
                             base + (l & ~7) + 3,
                             l % 8 >= 2 ? t - 2 : t,
                             l % 8 + 2 < 8 ? t + 2 : t,
                             base + (l ^ 1)};
        for (int j = 0; j < 8; j++)
            if (got[t * 8 + j] != want[j]) bad = t * 8 + j;
    }
    result(bad < 0, "semantics: shuffles (idx/up/down/xor, widths 32/8/4)",
           bad < 0 ? "64 threads x 8 shuffles as documented" : "first mismatch at thread %d op %d: %d", bad / 8, bad % 8,
           bad >= 0 ? got[bad] : 0);
    gu_dfree(d);
}

static void test_votes(void) {
    int got[64 * 16];
    int *d = gu_dalloc(sizeof got);
    CU_CHECK_FATAL(es_votes_run(d));
    gu_d2h(got, d, sizeof got);
    int bad = -1;
    for (int t = 0; t < 64 && bad < 0; t++) {
        const int l = t % 32;
        unsigned b3 = 0;
        for (int j = 0; j < 32; j += 3) b3 |= 1u << j;
        const int want[16] = {(int)b3, 1, 1, 0, (int)(0xFu << (l / 4 * 4)), (int)0xFFFFFFFFu, 1, 0, 0, 496, -16, 31,
                              0xFF, 32, 3, __builtin_popcount((unsigned)t) + 100 * __builtin_ffs(t) +
                                               10000 * (t ? __builtin_clz((unsigned)t) : 32)};
        for (int j = 0; j < 16; j++)
            if (got[t * 16 + j] != want[j]) bad = t * 16 + j;
    }
    result(bad < 0, "semantics: votes, matches, reductions, barrier counts",
           bad < 0 ? "64 threads x 16 results as documented" : "first mismatch at thread %d result %d: %d", bad / 16,
           bad % 16, bad >= 0 ? got[bad] : 0);
    gu_dfree(d);
}

static void test_atomics_dims(void) {
    float z[13] = {0}, got[13];
    float *d = gu_dalloc(sizeof z);
    gu_h2d(d, z, sizeof z);
    CU_CHECK_FATAL(es_atomics_run(d));
    gu_d2h(got, d, sizeof got);
    int ok = got[12] == 192.0f;
    for (int b = 0; b < 3; b++)
        ok &= got[b * 4] == 64.0f && got[b * 4 + 1] == 189.0f && got[b * 4 + 2] == 4.0f && got[b * 4 + 3] == 128.0f;
    result(ok, "semantics: atomics (add, max, inc, CAS; shared and global)",
           "sum %g max %g inc %g cas %g global %g", got[0], got[1], got[2], got[3], got[12]);
    gu_dfree(d);

    float dims[144];
    d = gu_dalloc(sizeof dims);
    CU_CHECK_FATAL(es_dims_run(d));
    gu_d2h(dims, d, sizeof dims);
    int bad = -1;
    for (int by = 0; by < 3; by++)
        for (int bx = 0; bx < 2; bx++)
            for (int tz = 0; tz < 2; tz++)
                for (int ty = 0; ty < 3; ty++)
                    for (int tx = 0; tx < 4; tx++) {
                        int i = (bx + 2 * by) * 24 + tx + 4 * (ty + 3 * tz);
                        if (dims[i] != (float)(tx + 10 * ty + 100 * tz + 1000 * bx + 10000 * by) && bad < 0) bad = i;
                    }
    result(bad < 0, "semantics: 3-D blocks and grids", bad < 0 ? "grid (2,3,1) x block (4,3,2)" : "slot %d wrong", bad);
    gu_dfree(d);
}

static void test_dyn_shared_config(void) {
    const int n = 16384;   /* 64 KiB: needs the opt-in */
    float *d = gu_dalloc(4), got = 0.0f;
    cudaError_t no = es_dyn_shared_run(d, n, 0);
    cudaError_t yes = es_dyn_shared_run(d, n, 1);
    CU_CHECK_FATAL(cudaDeviceSynchronize());
    gu_d2h(&got, d, 4);
    result(no == cudaErrorInvalidValue && yes == cudaSuccess && got == (float)((double)n * (n - 1) / 2),
           "semantics: 64 KiB of dynamic shared memory", "without cudaFuncSetAttribute: %s; with: %s, sum %.0f",
           cudaGetErrorName(no), cudaGetErrorName(yes), got);
    cudaError_t big = es_config_run(d, 1025, 1), tall = es_config_run(d, 32, 65536), fine = es_config_run(d, 1024, 2);
    result(big == cudaErrorInvalidConfiguration && tall == cudaErrorInvalidConfiguration && fine == cudaSuccess &&
               cudaGetLastError() == cudaSuccess,
           "runtime: launch configurations", "1025 threads: %s; grid.y 65536: %s; 1024 x 2: %s", cudaGetErrorName(big),
           cudaGetErrorName(tall), cudaGetErrorName(fine));
    gu_dfree(d);
}

static void test_copies(void) {
    float h[8] = {0}, *d = NULL;
    CU_CHECK_FATAL(cudaMalloc((void **)&d, sizeof h));
    cudaError_t to_host = cudaMemcpy(h, h, sizeof h, cudaMemcpyHostToDevice);
    cudaError_t last = cudaGetLastError();
    cudaError_t past = cudaMemcpy(d, h, sizeof h + 4, cudaMemcpyHostToDevice);
    cudaError_t wrong = cudaMemcpy(d, d, sizeof h, cudaMemcpyHostToDevice);
    cudaError_t set = cudaMemset(d + 4, 0, sizeof h);
    cudaError_t f1 = cudaFree(d), f2 = cudaFree(d), mid = cudaFree(d + 1);
    cudaGetLastError();
    result(to_host == cudaErrorInvalidValue && last == cudaErrorInvalidValue && past == cudaErrorInvalidValue &&
               wrong == cudaErrorInvalidValue && set == cudaErrorInvalidValue && f1 == cudaSuccess &&
               f2 == cudaErrorInvalidValue && mid == cudaErrorInvalidValue,
           "runtime: copies and frees are checked",
           "H2D into host memory, past the end, device as host source, memset past the end, double free, free "
           "mid-buffer: all %s", cudaGetErrorName(cudaErrorInvalidValue));
}

/* ---- per host thread: current device, last error ------------------------------------------ */

typedef struct dev_job {
    int set;              /* call cudaSetDevice(1) first */
    float *d;
    cudaStream_t s;
    int dev_seen;
    cudaError_t launch, last_after, last_before;
} dev_job;

static void *dev_thread(void *arg) {
    dev_job *j = arg;
    j->last_before = cudaGetLastError();   /* the opening thread's error is not this one's */
    if (j->set) cudaSetDevice(1);
    cudaGetDevice(&j->dev_seen);
    j->launch = es_add_one_run(j->d, 8, j->s);   /* returns (and clears) this thread's last error */
    cudaDeviceSynchronize();
    j->last_after = cudaPeekAtLastError();
    return NULL;
}

static void run_dev_job(dev_job *j) {
    pthread_t t;
    if (pthread_create(&t, NULL, dev_thread, j) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(1);
    }
}

/* Two devices: the main thread sets device 1 and makes a buffer and a
 * stream there, leaving an error of its own pending. A thread that never
 * calls cudaSetDevice is on device 0: its launch into the device-1 stream
 * fails, and the main thread's pending error is not its. A thread that sets
 * device 1 runs the kernel. A thread on device 0 launching on its default
 * stream over the device-1 buffer faults (no peer access). */
static void test_devices(void) {
    const char *name = "runtime: per-thread device and last error, 2 devices";
    float h[8] = {0}, *d = NULL;
    cudaStream_t s = NULL;
    emu_set_devices(2);
    int count = 0;
    cudaGetDeviceCount(&count);
    CU_CHECK_FATAL(cudaSetDevice(1));
    CU_CHECK_FATAL(cudaMalloc((void **)&d, sizeof h));
    CU_CHECK_FATAL(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    CU_CHECK_FATAL(cudaStreamCreate(&s));
    cudaError_t bad_dev = cudaSetDevice(2);   /* pending on the main thread */
    dev_job unset = {.set = 0, .d = d, .s = s}, set = {.set = 1, .d = d, .s = s};
    run_dev_job(&unset);
    run_dev_job(&set);
    cudaError_t main_last = cudaGetLastError();
    int main_dev = -1;
    cudaGetDevice(&main_dev);
    CU_CHECK_FATAL(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    dev_job peer = {.set = 0, .d = d, .s = NULL};   /* device 0, its default stream, device 1's memory */
    run_dev_job(&peer);
    emu_fault f;
    emu_fault_kind k = emu_fault_last(&f);
    int ok = count == 2 && bad_dev == cudaErrorInvalidDevice && unset.dev_seen == 0 &&
             unset.last_before == cudaSuccess && unset.launch == cudaErrorInvalidResourceHandle &&
             set.dev_seen == 1 && set.launch == cudaSuccess && set.last_after == cudaSuccess &&
             main_last == cudaErrorInvalidDevice && main_dev == 1 && h[0] == 1.0f && h[7] == 1.0f &&
             k == EMU_FAULT_OOB && strstr(f.msg, "memory of device 1") != NULL;
    result(ok, name,
           "%d devices; unset thread on device %d: launch into device 1's stream %s; set thread: %s, h[0] = %g; "
           "main thread's own error kept: %s; device-0 kernel on device-1 memory: %s fault",
           count, unset.dev_seen, cudaGetErrorName(unset.launch), cudaGetErrorName(set.launch), h[0],
           cudaGetErrorName(main_last), emu_fault_name(k));
    cudaDeviceReset();
    cudaSetDevice(0);
    emu_set_devices(1);
    uint64_t a0 = emu_alloc_calls();
    CU_CHECK_FATAL(cudaMalloc((void **)&d, sizeof h));
    CU_CHECK_FATAL(cudaFree(d));
    uint64_t a1 = emu_alloc_calls();
    result(a1 - a0 == 2, "runtime: allocation calls counted", "cudaMalloc + cudaFree: %llu calls",
           (unsigned long long)(a1 - a0));
}

/* ---- traffic accounting ------------------------------------------------------------------- */

/* The row of the kernel whose name contains what, or NULL. */
static const emu_traffic *traffic_row(const emu_traffic *rows, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (strstr(rows[i].kernel, what)) return &rows[i];
    return NULL;
}

/* Known patterns, then the project's two attention kernels at small
 * shapes against the issue's bound (sector efficiency >= 0.85). */
/* emu_traffic_whole_z: the LM attention (the last split block of a row and
 * head to arrive combines, and sets the row and head's counter back to 0)
 * at 3 heads x 2 rows x 2 splits, sampled 1 in 4 by (head, row) column:
 * its counts within 1 % of the whole grid's (rows alike: one position),
 * every counter back at 0; sampled 1 in 4 by block (heads x rows not a
 * multiple of 4), no column runs whole: no combine, counters left at 1. */
/* The depformer chain (cu_dep_chain) under sampling: gpu-model runs it
 * whole (emu_traffic_whole) and its unsampled virtual blocks skip their
 * work (emu_traffic_vblock_skip): a quarter of the blocks do work, the
 * counters still end at 0 (every block took its ticket and arrived), and
 * the scaled DRAM bytes come near the unsampled launch's. Without the
 * skip the sampled launch would run every block's work (blocks_run ==
 * blocks); without emu_traffic_whole the sampled grid would leave the
 * counters short and its waits would time out. */
static void traffic_chain_sampled(void) {
    const int B = 1, D = 64, H = 128, card = 256, heads = 4, L = 2;
    const size_t cstride = (size_t)LM_MAX_DEP_Q * D;
    cu_dep_chain_args a;
    memset(&a, 0, sizeof a);
    float *buf = NULL;
    uint16_t *w = NULL;
    cu_dep_chain_ctl *ctl = NULL;
    const size_t wn = (size_t)L * (3 * D * D + D * D + 2 * H * D + D * H) + (size_t)card * D;
    const size_t fn = (size_t)B * (D + 3 * D + 2 * H + card) + (size_t)L * (2 * D + 2 * B * cstride);
    CU_CHECK_FATAL(cudaMalloc((void **)&w, sizeof(uint16_t) * wn));
    CU_CHECK_FATAL(cudaMalloc((void **)&buf, sizeof(float) * fn));
    CU_CHECK_FATAL(cudaMalloc((void **)&ctl, sizeof *ctl));
    CU_CHECK_FATAL(cudaMemset(w, 0, sizeof(uint16_t) * wn));
    CU_CHECK_FATAL(cudaMemset(buf, 0, sizeof(float) * fn));
    CU_CHECK_FATAL(cudaMemset(ctl, 0, sizeof *ctl));
    uint16_t *wp = w;
    float *fp = buf;
    a.dy = fp; fp += B * D;
    a.dqkv = fp; fp += 3 * B * D;
    a.du = fp; fp += 2 * B * H;
    a.logits = fp; fp += B * card;
    for (int l = 0; l < L; l++) {
        cu_dep_chain_layer *ly = &a.layer[l];
        ly->attn_in = wp; wp += 3 * D * D;
        ly->attn_out = wp; wp += D * D;
        ly->ffn_in = wp; wp += 2 * H * D;
        ly->ffn_out = wp; wp += D * H;
        ly->norm1 = fp; fp += D;
        ly->norm2 = fp; fp += D;
        ly->k_cache = fp; fp += B * cstride;
        ly->v_cache = fp; fp += B * cstride;
    }
    a.head = wp;
    a.ctl = ctl;
    a.cache_stride = cstride;
    a.layers = L; a.B = B; a.D = D; a.H = H; a.card = card; a.heads = heads; a.head_dim = D / heads;
    a.k = 2; a.window = LM_MAX_DEP_Q; a.eps = 1e-5f;
    emu_traffic rows[8];
    double bytes[2] = {0, 0};
    unsigned long long run[2] = {0, 0}, blocks[2] = {0, 0};
    cu_dep_chain_ctl h;
    int zero = 1;
    emu_traffic_whole("dep_chain");
    for (int i = 0; i < 2; i++) {
        emu_traffic_start(i ? 4 : 1);
        CU_CHECK_FATAL(cu_dep_chain(&a, 0));
        int n = emu_traffic_get(rows, 8);
        emu_traffic_stop();
        const emu_traffic *r = traffic_row(rows, n, "dep_chain_bf16");
        if (r) {
            bytes[i] = r->dram_bytes;
            run[i] = (unsigned long long)r->blocks_run;
            blocks[i] = (unsigned long long)r->blocks;
        }
        CU_CHECK_FATAL(cudaMemcpy(&h, ctl, sizeof h, cudaMemcpyDeviceToHost));
        zero &= h.ticket == 0;
        for (int s = 0; s < CU_DEP_CHAIN_STAGES; s++) zero &= h.done[s] == 0;
    }
    emu_traffic_whole(NULL);
    const double ratio = bytes[0] > 0 ? bytes[1] / bytes[0] : -1;
    /* a quarter of the tickets (every 4th, from 0) do work; the bytes an estimate within 10 % */
    result(zero && blocks[0] > 0 && run[0] == blocks[0] && blocks[1] == blocks[0] && run[1] == (blocks[1] + 3) / 4 &&
               ratio > 0.9 && ratio < 1.1,
           "traffic: the depformer chain sampled by virtual block",
           "dep_chain_bf16 (2 layers, D %d): whole %llu of %llu blocks, %.0f bytes; 1 in 4: %llu of %llu blocks do "
           "work, %.0f bytes (%.3f of whole, bound 10 %%); counters back to 0: %s", D, run[0], blocks[0], bytes[0],
           run[1], blocks[1], bytes[1], ratio, zero ? "yes" : "no");
    cudaFree(w); cudaFree(buf); cudaFree(ctl);
}

static void traffic_whole_z(void) {
    const int B = 2, heads = 3, hd = 128, ctx = 512, D = heads * hd, splits = cu_attend_splits(ctx);
    size_t slot_stride = (size_t)2 * ctx * D;
    uint16_t *ring = NULL;
    float *q = NULL, *att = NULL, *part = NULL;
    unsigned *cnt = NULL;
    int32_t *slot = NULL;
    int64_t *pos = NULL;
    const int32_t hslot[2] = {0, 1};
    const int64_t hpos[2] = {511, 511};
    CU_CHECK_FATAL(cudaMalloc((void **)&ring, 2 * slot_stride * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&q, sizeof(float) * 3 * D * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&att, sizeof(float) * D * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&part, sizeof(float) * B * heads * splits * CU_ATT_PART_FLOATS));
    CU_CHECK_FATAL(cudaMalloc((void **)&cnt, sizeof(unsigned) * B * heads));
    CU_CHECK_FATAL(cudaMalloc((void **)&slot, sizeof hslot));
    CU_CHECK_FATAL(cudaMalloc((void **)&pos, sizeof hpos));
    CU_CHECK_FATAL(cudaMemset(cnt, 0, sizeof(unsigned) * B * heads));
    CU_CHECK_FATAL(cudaMemset(ring, 0, 2 * slot_stride * B));
    CU_CHECK_FATAL(cudaMemset(q, 0, sizeof(float) * 3 * D * B));
    CU_CHECK_FATAL(cudaMemcpy(slot, hslot, sizeof hslot, cudaMemcpyHostToDevice));
    CU_CHECK_FATAL(cudaMemcpy(pos, hpos, sizeof hpos, cudaMemcpyHostToDevice));
    double gb[3] = {0, 0, 0}, gs[3] = {0, 0, 0};
    unsigned long long run[3] = {0, 0, 0}, all = 0;
    unsigned left[3] = {0, 0, 0}, hc[6];
    for (int mode = 0; mode < 3; mode++) {   /* 0: every block; 1: 1 in 4 by column; 2: 1 in 4 by block */
        emu_traffic_start(mode ? 4 : 1);
        emu_traffic_whole_z(mode == 1 ? "attend_ring_kernel" : NULL);
        CU_CHECK_FATAL(cu_attend_ring(att, part, cnt, q, 3 * D, NULL, ring, slot_stride, slot, pos, B, heads, hd, ctx,
                                      ctx, 0, 0));
        emu_traffic rows[4];
        int n = emu_traffic_get(rows, 4);
        emu_traffic_stop();
        emu_traffic_whole_z(NULL);
        CU_CHECK_FATAL(cudaMemcpy(hc, cnt, sizeof(unsigned) * B * heads, cudaMemcpyDeviceToHost));
        for (int i = 0; i < B * heads; i++) left[mode] += hc[i];
        CU_CHECK_FATAL(cudaMemset(cnt, 0, sizeof(unsigned) * B * heads));
        const emu_traffic *r = traffic_row(rows, n, "attend_ring_kernel");
        gb[mode] = r ? r->gl_bytes : -1;
        gs[mode] = r ? r->gl_sectors : -1;
        run[mode] = r ? (unsigned long long)r->blocks_run : 0;
        all = r ? (unsigned long long)r->blocks : 0;
    }
    int ok = left[0] == 0 && left[1] == 0 && left[2] > 0 && fabs(gb[1] - gb[0]) <= 0.01 * gb[0] &&
             fabs(gs[1] - gs[0]) <= 0.01 * gs[0];
    result(ok, "traffic: sampling by column keeps the attention's combine",
           "%llu blocks; every block: %.0f bytes in %.0f sectors, counters left %u; by column (%llu run): %.0f in "
           "%.0f, left %u; by block (%llu run): %.0f in %.0f, left %u", all, gb[0], gs[0], left[0], run[1], gb[1],
           gs[1], left[1], run[2], gb[2], gs[2], left[2]);
    cudaFree(ring); cudaFree(q); cudaFree(att); cudaFree(part); cudaFree(cnt); cudaFree(slot); cudaFree(pos);
}

static long rss_kb(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* emu_set_lazy: a 256 MiB lazy buffer set to 0 costs the host no memory and
 * reads back zeros; set to 7 it reads 7; the same buffer eager is poisoned
 * at once (256 MiB resident). */
static void traffic_lazy(void) {
    const size_t n = (size_t)256 << 20;
    unsigned char *p = NULL, *e = NULL, h[3] = {1, 1, 1};
    long r0 = rss_kb();
    emu_set_lazy(1);
    CU_CHECK_FATAL(cudaMalloc((void **)&p, n));
    emu_set_lazy(0);
    CU_CHECK_FATAL(cudaMemset(p, 0, n));
    CU_CHECK_FATAL(cudaMemcpy(&h[0], p + n / 2, 1, cudaMemcpyDeviceToHost));
    long r1 = rss_kb();
    CU_CHECK_FATAL(cudaMemset(p + 100, 7, 1));
    CU_CHECK_FATAL(cudaMemcpy(&h[1], p + 100, 1, cudaMemcpyDeviceToHost));
    CU_CHECK_FATAL(cudaMalloc((void **)&e, n));
    long r2 = rss_kb();
    CU_CHECK_FATAL(cudaMemcpy(&h[2], e + n / 2, 1, cudaMemcpyDeviceToHost));   /* eager: the poison */
    int ok = h[0] == 0 && h[1] == 7 && h[2] != 0 && r1 - r0 < 16 * 1024 && r2 - r1 > 200 * 1024;
    result(ok, "lazy device memory", "256 MiB lazy, set to 0: +%ld KiB resident, reads %u (then %u after a memset of "
           "7); eager: +%ld KiB, reads %u", r1 - r0, h[0], h[1], r2 - r1, h[2]);
    cudaFree(p);
    cudaFree(e);
}

#define BLAS_OK(call)                                                  \
    do {                                                               \
        if ((call) != CUBLAS_STATUS_SUCCESS) {                         \
            fprintf(stderr, "emu-test: %s failed\n", #call);           \
            exit(1);                                                   \
        }                                                              \
    } while (0)

/* A cuBLAS GEMM captured into a graph (sampled, as gpu-model captures its
 * graphs) is counted when the graph replays, once a replay, by shape. */
static void traffic_graph_gemm(void) {
    const int m = 64, n = 16, k = 128;
    cudaStream_t st = NULL;
    cublasHandle_t h = NULL;
    void *ws = NULL;
    uint16_t *A = NULL, *Bm = NULL;
    float *C = NULL;
    CU_CHECK_FATAL(cudaStreamCreate(&st));
    BLAS_OK(cublasCreate(&h));
    BLAS_OK(cublasSetStream(h, st));
    CU_CHECK_FATAL(cudaMalloc(&ws, 1 << 20));
    BLAS_OK(cublasSetWorkspace(h, ws, 1 << 20));
    CU_CHECK_FATAL(cudaMalloc((void **)&A, sizeof(uint16_t) * m * k));
    CU_CHECK_FATAL(cudaMalloc((void **)&Bm, sizeof(uint16_t) * k * n));
    CU_CHECK_FATAL(cudaMalloc((void **)&C, sizeof(float) * m * n));
    const float one = 1.0f, zero = 0.0f;
    emu_traffic_start(16);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CU_CHECK_FATAL(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    BLAS_OK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_16BF, k, Bm, CUDA_R_16BF, k,
                                    &zero, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CU_CHECK_FATAL(cudaStreamEndCapture(st, &g));
    CU_CHECK_FATAL(cudaGraphInstantiate(&x, g, 0));
    emu_traffic rows[4];
    int n0 = emu_traffic_get(rows, 4);
    emu_traffic_start(16);
    CU_CHECK_FATAL(cudaGraphLaunch(x, st));
    CU_CHECK_FATAL(cudaGraphLaunch(x, st));
    CU_CHECK_FATAL(cudaStreamSynchronize(st));
    int n1 = emu_traffic_get(rows, 4);
    emu_traffic_stop();
    const emu_traffic *r = traffic_row(rows, n1, "cublasGemmEx m=64 n=16 k=128");
    result(n0 == 0 && r && r->launches == 2 && r->gemm_flops == 2 * 2.0 * m * n * k,
           "traffic: a captured GEMM counts at each replay", "rows at capture %d; after 2 replays: %s, %llu launches",
           n0, r ? r->kernel : "no GEMM row", r ? (unsigned long long)r->launches : 0ull);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cublasDestroy(h);
    cudaFree(ws); cudaFree(A); cudaFree(Bm); cudaFree(C);
    cudaStreamDestroy(st);
}

static void test_traffic(void) {
    float *d = NULL, *out = NULL;
    CU_CHECK_FATAL(cudaMalloc((void **)&d, sizeof(float) * 8 * 64));
    CU_CHECK_FATAL(cudaMalloc((void **)&out, sizeof(float) * 64));
    CU_CHECK_FATAL(cudaMemset(d, 0, sizeof(float) * 8 * 64));
    double eff[5], wave[5], conf[5], req[5], dram[5];
    for (int mode = 0; mode < 5; mode++) {
        emu_traffic_start(1);
        CU_CHECK_FATAL(es_traffic_run(out, d, mode));
        emu_traffic rows[4];
        int n = emu_traffic_get(rows, 4);
        emu_traffic_stop();
        const emu_traffic *r = traffic_row(rows, n, "et_traffic");
        eff[mode] = r && r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : -1;
        wave[mode] = r ? r->sh_wavefronts : -1;
        conf[mode] = r ? r->sh_conflicts : -1;
        req[mode] = r ? r->gl_requests : -1;
        dram[mode] = r ? r->dram_bytes : -1;
    }
    /* modes 0-2: 2 warps x (1 load + 1 store); loads of mode 1 use 4 of 32 bytes of each sector */
    int ok = fabs(eff[0] - 1.0) < 1e-9 && fabs(eff[1] - (256.0 + 256.0) / (32.0 * (64 + 8))) < 1e-9 &&
             fabs(eff[2] - 1.0) < 1e-9 && req[0] == 4 && req[1] == 4 && req[2] == 4 &&
             dram[0] == 256 + 256 && dram[1] == 64 * 32 + 256 && dram[2] == 1024 + 256 &&
             wave[3] == 2 * 2 * 32 && conf[3] == 2 * 2 * 31 && wave[4] == 2 * 2 && conf[4] == 0;
    result(ok, "traffic: sectors, DRAM bytes and bank conflicts",
           "efficiency contiguous %.3f, stride 32 B %.3f, float4 %.3f; DRAM %g/%g/%g B; shared wavefronts "
           "same-bank %g (conflicts %g), distinct banks %g (%g)",
           eff[0], eff[1], eff[2], dram[0], dram[1], dram[2], wave[3], conf[3], wave[4], conf[4]);
    cudaFree(d);
    cudaFree(out);
    /* the LM's attention at the 7B's head_dim over a 512-row ring: the K/V
     * reads dominate; the issue's bound for attention is 0.85 */
    const int B = 2, heads = 4, hd = 128, ctx = 512, D = heads * hd, splits = cu_attend_splits(ctx);
    size_t slot_stride = (size_t)2 * ctx * D;
    uint16_t *ring = NULL, *kvl = NULL;
    float *q = NULL, *att = NULL, *part = NULL;
    unsigned *cnt = NULL;
    int32_t *slot = NULL;
    int64_t *pos = NULL;
    const int32_t hslot[2] = {0, 1};
    const int64_t hpos[2] = {511, 300};
    CU_CHECK_FATAL(cudaMalloc((void **)&ring, 2 * slot_stride * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&kvl, sizeof(uint16_t) * 2 * D * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&q, sizeof(float) * 3 * D * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&att, sizeof(float) * D * B));
    CU_CHECK_FATAL(cudaMalloc((void **)&part, sizeof(float) * B * heads * splits * CU_ATT_PART_FLOATS));
    CU_CHECK_FATAL(cudaMalloc((void **)&cnt, sizeof(unsigned) * B * heads));
    CU_CHECK_FATAL(cudaMemset(cnt, 0, sizeof(unsigned) * B * heads));
    CU_CHECK_FATAL(cudaMalloc((void **)&slot, sizeof hslot));
    CU_CHECK_FATAL(cudaMalloc((void **)&pos, sizeof hpos));
    CU_CHECK_FATAL(cudaMemset(ring, 0, 2 * slot_stride * B));
    CU_CHECK_FATAL(cudaMemset(kvl, 0, sizeof(uint16_t) * 2 * D * B));
    CU_CHECK_FATAL(cudaMemset(q, 0, sizeof(float) * 3 * D * B));
    CU_CHECK_FATAL(cudaMemcpy(slot, hslot, sizeof hslot, cudaMemcpyHostToDevice));
    CU_CHECK_FATAL(cudaMemcpy(pos, hpos, sizeof hpos, cudaMemcpyHostToDevice));
    emu_traffic_start(1);
    /* a step's pair: the new K/V straight to the ring, then the attention (split and combine) over it */
    CU_CHECK_FATAL(cu_qkv_rope_ring(q, ring, slot_stride, slot, pos, B, heads, hd, ctx, -0.01f, 0));
    CU_CHECK_FATAL(cu_attend_ring(att, part, cnt, q, 3 * D, NULL, ring, slot_stride, slot, pos, B, heads, hd, ctx, ctx,
                                  0, 0));
    emu_traffic rows[8];
    int n = emu_traffic_get(rows, 8);
    emu_traffic_stop();
    const emu_traffic *r = traffic_row(rows, n, "attend_ring_kernel");
    double e = r && r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : -1;
    double sw = r && r->sh_requests > 0 ? r->sh_wavefronts / r->sh_requests : -1;
    const emu_traffic *rr = traffic_row(rows, n, "qkv_rope_kernel");
    double er = rr && rr->gl_sectors > 0 ? rr->gl_bytes / (32.0 * rr->gl_sectors) : -1;
    result(e >= 0.85 && er >= 0.80, "traffic: the LM attention's reads are coalesced",
           "attend_ring_kernel (hd 128, 512 keys, the combine in it): sector efficiency %.3f (bound 0.85; the "
           "thread-per-key loop before issue 25: 0.120), %.2f shared wavefronts per request; qkv_rope_kernel "
           "writing the ring %.3f (bound 0.80)", e, sw, er);
    cudaFree(ring); cudaFree(kvl); cudaFree(q); cudaFree(att); cudaFree(part); cudaFree(cnt); cudaFree(slot);
    cudaFree(pos);
    /* sampling one block in 4 of the matvec (32 blocks of 2 rows): W's sectors are each block's own
     * (counted 4 times), x is read by every block (counted once), y is capped at its size */
    const int MN = 64, MK = 256;
    float *mx = NULL, *my = NULL;
    uint16_t *mw = NULL;
    CU_CHECK_FATAL(cudaMalloc((void **)&mx, sizeof(float) * MK));
    CU_CHECK_FATAL(cudaMalloc((void **)&my, sizeof(float) * MN));
    CU_CHECK_FATAL(cudaMalloc((void **)&mw, sizeof(uint16_t) * MN * MK));
    emu_traffic_start(4);
    CU_CHECK_FATAL(cu_matvec_bf16(my, mx, mw, 1, MN, MK, 0));
    n = emu_traffic_get(rows, 8);
    emu_traffic_stop();
    r = traffic_row(rows, n, "matvec_bf16_vec");
    double want = 2.0 * MN * MK + 4.0 * MK + 4.0 * MN;
    result(r && r->blocks == 32 && r->blocks_run == 8 && r->dram_bytes == want,
           "traffic: sampled blocks, private and shared data", "matvec %d x %d, 1 block in 4: %llu of %llu blocks run, "
           "DRAM %.0f bytes (W x 4 + x once + y capped: %.0f)", MN, MK, r ? (unsigned long long)r->blocks_run : 0ull,
           r ? (unsigned long long)r->blocks : 0ull, r ? r->dram_bytes : -1.0, want);
    cudaFree(mx); cudaFree(my); cudaFree(mw);
    traffic_whole_z();
    traffic_chain_sampled();
    traffic_lazy();
    traffic_graph_gemm();
}

/* The 8-bit schemes' kernels at the 7B's head_dim: every global access's
 * share of the sectors it touches (the issue's bounds: >= 0.80, the
 * attention >= 0.85): the int8 matvec (plain and gated, 1 and 8 rows), the
 * widening for the GEMM path and the scale after it, RoPE with the K/V
 * quantization, the int8 attention over a 512-row ring, its store, the
 * depformer's int8 cache, its attention inside the out-projection and the
 * grouped input projections (the norm folded). */
static double q8_eff(const emu_traffic *rows, int n, const char *what) {
    const emu_traffic *r = traffic_row(rows, n, what);
    return r && r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : -1;
}

/* The codec's kernels (cuda/cu_mimi_kern.cu) at the Mimi's shapes, cut to
 * a few items and channels where the grid allows: each kernel's global
 * requests against the issue's bound (sector efficiency >= 0.80). The
 * values in memory do not matter, only the addresses. */
static double codec_eff(const char *what) {
    emu_traffic rows[16];
    int n = emu_traffic_get(rows, 16);
    emu_traffic_reset();
    const emu_traffic *r = traffic_row(rows, n, what);
    return r && r->gl_sectors > 0 ? r->gl_bytes / (32.0 * r->gl_sectors) : -1;
}

static void test_traffic_q8(void) {
    const int heads = 4, hd = 128, D = heads * hd, ctx = 512, N = 64, K = 4096, B = 8;
    size_t lb = cu_kv_q8_layer_bytes(ctx, D, heads), dstride = (size_t)LM_MAX_DEP_Q * D;
    const int splits = cu_attend_splits(ctx);
    int8_t *w = gu_dalloc((size_t)N * K), *ring = gu_dalloc(2 * lb), *kv8 = gu_dalloc((size_t)2 * 2 * D);
    float *ws = gu_dalloc(4 * N), *x = gu_dalloc(4 * (size_t)B * 2 * K), *y = gu_dalloc(4 * (size_t)B * N);
    float *qkv = gu_dalloc(4 * (size_t)3 * D * B), *kvs = gu_dalloc(4 * 2 * 2 * heads), *att = gu_dalloc(4 * (size_t)D * B);
    float *part = gu_dalloc(4 * (size_t)2 * heads * splits * CU_ATT_PART_FLOATS);
    unsigned *cnt = gu_dalloc(sizeof(unsigned) * 2 * heads);
    float *dk = gu_dalloc(4 * dstride * B), *dv = gu_dalloc(4 * dstride * B);
    uint16_t *wb = gu_dalloc(2 * (size_t)N * K);
    int32_t *slot = gu_dalloc(sizeof(int32_t) * 2);
    int64_t *pos = gu_dalloc(sizeof(int64_t) * B);
    float *yg = gu_dalloc(4 * (size_t)2 * B * N), *alpha = gu_dalloc(4 * (size_t)K);
    const int32_t hslot[2] = {0, 1};
    const int64_t hpos[8] = {511, 300, 5, 6, 7, 8, 9, 10};
    CU_CHECK_FATAL(cudaMemset(w, 1, (size_t)N * K));
    CU_CHECK_FATAL(cudaMemset(ring, 0, 2 * lb));
    CU_CHECK_FATAL(cudaMemset(kv8, 0, (size_t)2 * 2 * D));
    CU_CHECK_FATAL(cudaMemset(ws, 0, 4 * N));
    CU_CHECK_FATAL(cudaMemset(x, 0, 4 * (size_t)B * 2 * K));
    CU_CHECK_FATAL(cudaMemset(qkv, 0, 4 * (size_t)3 * D * B));
    CU_CHECK_FATAL(cudaMemset(kvs, 0, 4 * 2 * 2 * heads));
    CU_CHECK_FATAL(cudaMemset(dk, 0, 4 * dstride * B));
    CU_CHECK_FATAL(cudaMemset(dv, 0, 4 * dstride * B));
    CU_CHECK_FATAL(cudaMemset(cnt, 0, sizeof(unsigned) * 2 * heads));
    CU_CHECK_FATAL(cudaMemset(alpha, 0, 4 * (size_t)K));
    gu_h2d(slot, hslot, sizeof hslot);
    gu_h2d(pos, hpos, sizeof hpos);
    emu_traffic_start(1);
    CU_CHECK_FATAL(cu_matvec_q8(y, x, w, ws, 1, N, K, 0));
    CU_CHECK_FATAL(cu_matvec_q8(y, x, w, ws, B, N, K, 0));
    CU_CHECK_FATAL(cu_matvec_q8_gated(y, x, w, ws, B, N, K, 0));
    CU_CHECK_FATAL(cu_q8_to_bf16(wb, w, (size_t)N * K, 0));
    CU_CHECK_FATAL(cu_scale_cols(y, ws, B, N, N, 0));
    /* a prefill chunk's store (staged, then stored), then a step's pair (to the ring, then the attention) */
    CU_CHECK_FATAL(cu_qkv_rope_q8(qkv, kv8, kvs, pos, 2, heads, hd, -0.01f, 0));
    CU_CHECK_FATAL(cu_kv_store_q8(ring, lb, kv8, kvs, slot, pos, 2, D, heads, ctx, 0));
    CU_CHECK_FATAL(cu_qkv_rope_ring_q8(qkv, ring, lb, slot, pos, 2, heads, hd, ctx, -0.01f, 0));
    CU_CHECK_FATAL(cu_attend_ring_q8(att, part, cnt, qkv, 3 * D, NULL, NULL, ring, lb, slot, pos, 2, heads, hd, ctx,
                                     ctx, 0, 0));
    for (int k = 0; k < 8; k++)
        CU_CHECK_FATAL(cu_dep_attend_q8(att, qkv, dk, dv, dstride, k, 8, B, heads, hd, 0));
    for (int k = 0; k < 8; k++)
        CU_CHECK_FATAL(cu_matvec_q8_dep_att(y, qkv, dk, dv, dstride, 1, k, 8, w, ws, B, N, D, heads, hd, 0));
    const void *gw[2] = {w, w};
    const float *gws[2] = {ws, ws};
    const cu_fuse on = {.norm = alpha, .eps = 1e-5f};
    CU_CHECK_FATAL(cu_matvec_group_fused(yg, x, gw, gws, 2, B, N, K, &on, 0));
    gu_sync();
    emu_traffic rows[16];
    int n = emu_traffic_get(rows, 16);
    emu_traffic_stop();
    static const char *const names[] = {"matvec_q8_vec<1>", "matvec_q8_vec<8>", "matvec_q8_gated<8>",
                                        "q8_to_bf16_kernel", "scale_cols_kernel", "qkv_rope_kernel<signed char>",
                                        "attend_ring_kernel<signed char, 8>", "kv_store_q8_kernel",
                                        "dep_attend_kernel<true>", "matvec_q8_att_acc<8, true>",
                                        "matvec_q8_group<8, 1>"};
    char line[900];
    size_t o = 0;
    int ok = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double e = q8_eff(rows, n, names[i]);
        double bound = strstr(names[i], "attend_ring") ? 0.85 : 0.80;
        ok = ok && e >= bound;
        o += (size_t)snprintf(line + o, sizeof line - o, "%s%s %.3f", i ? ", " : "", names[i], e);
        if (o >= sizeof line) o = sizeof line - 1;
    }
    result(ok, "traffic: the 8-bit kernels' reads and writes are coalesced",
           "sector efficiency (bounds 0.80, attention 0.85): %s", line);
    cudaFree(w); cudaFree(ring); cudaFree(kv8); cudaFree(ws); cudaFree(x); cudaFree(y); cudaFree(qkv); cudaFree(kvs);
    cudaFree(att); cudaFree(part); cudaFree(cnt); cudaFree(dk); cudaFree(dv); cudaFree(wb); cudaFree(slot);
    cudaFree(pos); cudaFree(yg); cudaFree(alpha);
}

static void test_traffic_codec(void) {
    const int n = 4, T = 2, D = 512, H = 8, ctx = 16, Dq = 256, bins = 2048, ci = 512, co = 256;
    float *a = gu_dalloc(sizeof(float) * 4 * 1024 * 1024), *b = gu_dalloc(sizeof(float) * 4 * 1024 * 1024);
    float *w = gu_dalloc(sizeof(float) * 4 * 1024 * 1024), *st = gu_dalloc(sizeof(float) * 1024 * 1024);
    float *kv = gu_dalloc(sizeof(float) * (size_t)n * 2 * ctx * D), *freq = gu_dalloc(sizeof(float) * D);
    int32_t hslot[4] = {0, 1, 2, 3}, *slot = gu_dalloc(sizeof hslot), *codes = gu_dalloc(sizeof(int32_t) * 64);
    int64_t hoff[4] = {40, 41, 3, 0}, *off = gu_dalloc(sizeof hoff);
    CU_CHECK_FATAL(cudaMemset(codes, 0, sizeof(int32_t) * 64));
    CU_CHECK_FATAL(cudaMemset(w, 0, sizeof(float) * 4 * 1024 * 1024));
    CU_CHECK_FATAL(cudaMemset(a, 0, sizeof(float) * 4 * 1024 * 1024));
    CU_CHECK_FATAL(cudaMemset(b, 0, sizeof(float) * 4 * 1024 * 1024));
    CU_CHECK_FATAL(cudaMemset(st, 0, sizeof(float) * 1024 * 1024));
    CU_CHECK_FATAL(cudaMemset(kv, 0, sizeof(float) * (size_t)n * 2 * ctx * D));
    CU_CHECK_FATAL(cudaMemset(freq, 0, sizeof(float) * D));
    gu_h2d(slot, hslot, sizeof hslot);
    gu_h2d(off, hoff, sizeof hoff);
    double e[11];
    const char *name[11] = {"conv (first, 1 -> 64, K 7, T 1920)", "conv (K 3 at T 2, 512 -> 256)",
                           "conv (down, K 16 stride 8, 256 -> 512)", "product (transformer, N = 8)",
                           "convtr (K 16 stride 8, 512 -> 256, T 2)", "RVQ search", "RVQ sum", "LayerNorm",
                           "RoPE + K/V store", "convtr depthwise (upsample, 512, K 4 stride 2, T 1)",
                           "convtr (K 12 stride 6, 256 -> 128, T 16, 64 items, 1 block in 16)"};
    /* each conv keeps its slots' state (the last P columns of its input) */
    const cu_mimi_keep keep7 = {st, 8 * 1024, 0, slot, 6}, keep3 = {st, 8 * 1024, 0, slot, 2},
                       keep16 = {st, 8 * 1024, 0, slot, 8};
    emu_traffic_start(1);
    CU_CHECK_FATAL(cu_mimi_conv(a, b, w, w, 1, 1, 64, 7, 1, 1, 1926, 1920, 0, &keep7, 0));
    e[0] = codec_eff("mimi_conv_tiled");
    CU_CHECK_FATAL(cu_mimi_conv(a, b, w, w, n, ci, co, 3, 1, 1, T + 2, T, 1, &keep3, 0));
    e[1] = codec_eff("mimi_conv_tiled");
    CU_CHECK_FATAL(cu_mimi_conv(a, b, w, w, 1, co, 2 * co, 16, 8, 1, 128 + 8, 16, 0, &keep16, 0));
    e[2] = codec_eff("mimi_conv_tiled");
    CU_CHECK_FATAL(cu_mimi_gemm(a, w, b, 3 * D, n * T, D, 0, 0));
    e[3] = codec_eff("mimi_conv_tiled");
    CU_CHECK_FATAL(cu_mimi_convtr(a, b, st, 8 * co, 0, a + 2 * 1024 * 1024, w, w, slot, n, ci, co, 16, 8, T, 0, 0, 0));
    e[4] = codec_eff("mimi_convtr_tiled");
    CU_CHECK_FATAL(cu_mimi_rvq_level(codes, 8, a, w, b, n, Dq, bins, 0));
    e[5] = codec_eff("mimi_rvq_level");
    CU_CHECK_FATAL(cu_mimi_rvq_sum(a, codes, 8, w, 7, n, Dq, bins, 0));
    e[6] = codec_eff("mimi_rvq_sum");
    CU_CHECK_FATAL(cu_mimi_layer_norm(a, b, w, w, D, n * T, 0));
    e[7] = codec_eff("mimi_layer_norm");
    CU_CHECK_FATAL(cu_mimi_rope_store(a, kv, (size_t)2 * ctx * D, slot, off, freq, 0, n, T, D, H, ctx, 0));
    double rope = codec_eff("mimi_rope");
    CU_CHECK_FATAL(cu_mimi_rope_store(a, kv, (size_t)2 * ctx * D, slot, off, freq, 0, n, T, D, H, ctx, 0));
    double store = codec_eff("mimi_kv_store");
    e[8] = rope < store ? rope : store;
    CU_CHECK_FATAL(cu_mimi_convtr(a, b, st, 8 * co, 0, a + 2 * 1024 * 1024, w, w, slot, n, D, D, 4, 2, 1, 1, 0, 0));
    e[9] = codec_eff("mimi_convtr_dw");
    emu_traffic_stop();
    /* the decoder's second transposed conv at 64 slots: a tile spans items, its input runs are
     * short; blocks sampled (the addresses, not the values, matter) */
    int32_t hslot64[64], *slot64 = gu_dalloc(sizeof hslot64);
    for (int i = 0; i < 64; i++) hslot64[i] = i;
    gu_h2d(slot64, hslot64, sizeof hslot64);
    emu_traffic_start(16);
    CU_CHECK_FATAL(cu_mimi_convtr(a, b, st, 6 * 128, 0, a + 2 * 1024 * 1024, w, NULL, slot64, 64, 256, 128, 12, 6, 16,
                                  0, 0, 0));
    e[10] = codec_eff("mimi_convtr_tiled");
    emu_traffic_stop();
    cudaFree(slot64);
    for (int i = 0; i < 11; i++)
        result(e[i] >= 0.80, "traffic: the codec's reads and writes are coalesced", "%s: sector efficiency %.3f "
               "(bound 0.80)", name[i], e[i]);
    cudaFree(a); cudaFree(b); cudaFree(w); cudaFree(st); cudaFree(kv); cudaFree(freq); cudaFree(slot);
    cudaFree(codes); cudaFree(off);
}

/* Graph capture: nothing runs while capturing; each replay runs again. */
static void test_graphs(void) {
    const int n = 100;
    float h[100], *d = gu_dalloc(sizeof h), *d2 = gu_dalloc(sizeof h);
    for (int i = 0; i < n; i++) h[i] = 5.0f;
    gu_h2d(d, h, sizeof h);
    gu_h2d(d2, h, sizeof h);
    cudaStream_t s;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g, g2, g3;
    cudaGraphExec_t x;
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CU_CHECK_FATAL(es_add_one_run(d, n, s));
    CU_CHECK_FATAL(es_add_one_run(d, n, s));
    enum cudaStreamCaptureStatus st;
    CU_CHECK_FATAL(cudaStreamIsCapturing(s, &st));
    CU_CHECK_FATAL(cudaStreamEndCapture(s, &g));
    float during[100];
    gu_d2h(during, d, sizeof during);
    size_t nodes = 0;
    CU_CHECK_FATAL(cudaGraphGetNodes(g, NULL, &nodes));
    CU_CHECK_FATAL(cudaGraphInstantiate(&x, g, 0));
    CU_CHECK_FATAL(cudaGraphLaunch(x, s));
    CU_CHECK_FATAL(cudaStreamSynchronize(s));
    float once[100], twice[100];
    gu_d2h(once, d, sizeof once);
    CU_CHECK_FATAL(cudaGraphLaunch(x, s));
    CU_CHECK_FATAL(cudaStreamSynchronize(s));
    gu_d2h(twice, d, sizeof twice);
    result(st == cudaStreamCaptureStatusActive && nodes == 2 && during[0] == 5.0f && once[0] == 7.0f &&
               once[n - 1] == 7.0f && twice[0] == 9.0f,
           "graphs: capture records, each replay runs",
           "2 launches captured (%zu nodes); during capture %g, after one replay %g, after two %g", nodes, during[0],
           once[0], twice[0]);

    /* update the executable graph with a capture on another buffer */
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CU_CHECK_FATAL(es_add_one_run(d2, n, s));
    CU_CHECK_FATAL(es_add_one_run(d2, n, s));
    CU_CHECK_FATAL(cudaStreamEndCapture(s, &g2));
    cudaGraphExecUpdateResultInfo info;
    cudaError_t up = cudaGraphExecUpdate(x, g2, &info);
    CU_CHECK_FATAL(cudaGraphLaunch(x, s));
    CU_CHECK_FATAL(cudaStreamSynchronize(s));   /* s is non-blocking: the legacy stream's copies do not wait */
    float a[100], b[100];
    gu_d2h(a, d, sizeof a);
    gu_d2h(b, d2, sizeof b);
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CU_CHECK_FATAL(es_add_one_run(d2, n, s));
    CU_CHECK_FATAL(cudaStreamEndCapture(s, &g3));
    cudaError_t up3 = cudaGraphExecUpdate(x, g3, &info);
    cudaGetLastError();
    result(up == cudaSuccess && a[0] == 9.0f && b[0] == 7.0f && up3 == cudaErrorGraphExecUpdateFailure &&
               info.result == cudaGraphExecUpdateErrorTopologyChanged,
           "graphs: cudaGraphExecUpdate", "same topology: %s (d %g, d2 %g); one node fewer: %s",
           cudaGetErrorName(up), a[0], b[0], cudaGetErrorName(up3));
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaGraphDestroy(g2);
    cudaGraphDestroy(g3);

    /* a synchronising call or legacy-stream work during a capture invalidates it */
    cudaGraph_t gi = (cudaGraph_t)1, gl = (cudaGraph_t)1;
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CU_CHECK_FATAL(es_add_one_run(d, n, s));
    cudaError_t sync = cudaDeviceSynchronize();
    cudaError_t end = cudaStreamEndCapture(s, &gi);
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t legacy = es_add_one_run(d, n, 0);
    cudaError_t end2 = cudaStreamEndCapture(s, &gl);
    cudaGetLastError();
    float c[100];
    gu_d2h(c, d, sizeof c);
    result(sync == cudaErrorStreamCaptureUnsupported && end == cudaErrorStreamCaptureInvalidated && !gi &&
               legacy == cudaErrorStreamCaptureImplicit && end2 == cudaErrorStreamCaptureInvalidated && !gl &&
               c[0] == 9.0f,
           "graphs: capture invalidated by synchronising calls",
           "cudaDeviceSynchronize: %s, then end: %s; legacy-stream launch: %s, then end: %s; nothing ran (%g)",
           cudaGetErrorName(sync), cudaGetErrorName(end), cudaGetErrorName(legacy), cudaGetErrorName(end2), c[0]);

    /* fork and join through events: both streams' work is captured */
    cudaStream_t s2;
    cudaEvent_t fork, join;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CU_CHECK_FATAL(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CU_CHECK_FATAL(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CU_CHECK_FATAL(cudaEventRecord(fork, s));
    CU_CHECK_FATAL(cudaStreamWaitEvent(s2, fork, 0));
    CU_CHECK_FATAL(es_add_one_run(d, n, s));
    CU_CHECK_FATAL(es_add_one_run(d2, n, s2));
    CU_CHECK_FATAL(cudaEventRecord(join, s2));
    CU_CHECK_FATAL(cudaStreamWaitEvent(s, join, 0));
    CU_CHECK_FATAL(cudaStreamEndCapture(s, &g));
    CU_CHECK_FATAL(cudaGraphGetNodes(g, NULL, &nodes));
    CU_CHECK_FATAL(cudaGraphInstantiate(&x, g, 0));
    CU_CHECK_FATAL(cudaGraphLaunch(x, s));
    CU_CHECK_FATAL(cudaStreamSynchronize(s));
    gu_d2h(a, d, sizeof a);
    gu_d2h(b, d2, sizeof b);
    result(nodes == 2 && a[0] == 10.0f && b[0] == 8.0f, "graphs: fork and join over two streams",
           "%zu nodes; d %g, d2 %g", nodes, a[0], b[0]);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cudaStreamDestroy(s2);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    gu_dfree(d);
    gu_dfree(d2);
}

/* The cuBLAS stand-in, called as engine-bench calls cuBLAS (y = x . W^T as
 * a column-major GEMM: C (N, B) = W^T-view (N, K) . x^T-view (K, B)),
 * against the CPU backend's matvec on the same bf16 inputs. */
static void test_cublas(void) {
    const int B = 3, N = 40, K = 96;
    gu_rng r = {11};
    uint16_t w[40 * 96], xb[3 * 96];
    float x[3 * 96], ref[3 * 40], got[3 * 40];
    for (int i = 0; i < N * K; i++) w[i] = st_f32_to_bf16((float)gu_normal(&r));
    for (int i = 0; i < B * K; i++) {
        xb[i] = st_f32_to_bf16((float)gu_normal(&r));
        x[i] = st_bf16_to_f32(xb[i]);
    }
    kern_matvec_bf16(ref, x, w, B, N, K, NULL);
    uint16_t *dw = gu_dalloc(sizeof w), *dxb = gu_dalloc(sizeof xb);
    float *dc = gu_dalloc(sizeof got), *dxf = gu_dalloc(sizeof x);
    gu_h2d(dw, w, sizeof w);
    gu_h2d(dxb, xb, sizeof xb);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one, dw, CUDA_R_16BF, K, dxb, CUDA_R_16BF,
                                    K, &zero, dc, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    gu_d2h(got, dc, sizeof got);
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += fabs((double)x[b * K + k] * st_bf16_to_f32(w[n * K + k]));
            double e = fabs((double)got[b * N + n] - ref[b * N + n]) / (sum * ldexp(1.0, -24) + 1e-300);
            worst = e > worst ? e : worst;
        }
    /* f32 x rounded to bf16 by the compute type: the same as bf16 inputs */
    float xf[3 * 96], got16[3 * 40];
    for (int i = 0; i < B * K; i++) xf[i] = x[i] + ldexp(x[i], -12);   /* bits bf16 drops */
    gu_h2d(dxf, xf, sizeof xf);
    cublasStatus_t s16 = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one, dw, CUDA_R_16BF, K, dxf, CUDA_R_32F,
                                      K, &zero, dc, CUDA_R_32F, N, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
    gu_d2h(got16, dc, sizeof got16);
    int same = !memcmp(got16, got, sizeof got);
    result(s == CUBLAS_STATUS_SUCCESS && s16 == CUBLAS_STATUS_SUCCESS && worst <= 2.0 * sqrt((double)K) + 8.0 && same,
           "cuBLAS stand-in: cublasGemmEx as engine-bench calls it",
           "vs kern_matvec_bf16: max normalised error %.3g; f32 inputs under _FAST_16BF equal bf16 inputs: %s", worst,
           same ? "yes" : "no");
    /* a GemmEx reading past its buffer is a fault, like a kernel's, seen
     * when the stream's work runs (with asynchronous streams the call
     * itself returns success) */
    cublasStatus_t bad = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N + 1, B, K, &one, dw, CUDA_R_16BF, K, dxb,
                                      CUDA_R_16BF, K, &zero, dc, CUDA_R_32F, N + 1, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
    emu_fault f;
    emu_fault_kind k = emu_fault_last(&f);
    cudaError_t sync = cudaDeviceSynchronize();
    cudaDeviceReset();
    result((bad == CUBLAS_STATUS_SUCCESS || bad == CUBLAS_STATUS_EXECUTION_FAILED) && k == EMU_FAULT_OOB &&
               sync == cudaErrorIllegalAddress,
           "cuBLAS stand-in: A one row short is out of bounds", "%s: %s", emu_fault_name(k), f.msg);
    cublasDestroy(h);
}

/* ---- publication between blocks ---------------------------------------------------------------- */

/* The last-block reduction (emu_faults.cu publish) done right: with the
 * race check on, no fault in any block order, the sum right in two
 * launches in a row (the counter set back to 0 by the first); and without
 * the reset, the second launch's sum is stale: what a replay test sees. */
static int publish_twice(int mode, emu_order order, float got[2][16], float want[2][16]) {
    float init[96];
    for (int i = 0; i < 96; i++) init[i] = (float)i;
    float *d = gu_dalloc(sizeof init);
    gu_h2d(d, init, sizeof init);
    emu_set_block_order(order);
    emu_set_race_check(1);
    int ok = 1;
    for (int run = 0; run < 2; run++) {
        for (int t = 0; t < 16; t++) {   /* partial k: k * 100 + t */
            want[run][t] = 0.0f;
            for (int k = 0; k < 4; k++) want[run][t] += (float)(k * 100 + t);
        }
        ok &= cudaMemset(d + 80, 0xff, 16 * sizeof(float)) == cudaSuccess;   /* NaN: a sum left unwritten */
        ok &= ef_publish_mode(d, mode) == cudaSuccess;
        ok &= cudaDeviceSynchronize() == cudaSuccess;
        float out[96];
        gu_d2h(out, d, sizeof out);
        memcpy(got[run], out + 80, sizeof got[run]);
    }
    emu_set_race_check(0);
    emu_set_block_order(EMU_ORDER_FORWARD);
    gu_dfree(d);
    return ok;
}

static void test_publish(void) {
    cudaDeviceReset();
    static const emu_order orders[] = {EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM};
    static const char *const onames[] = {"forward", "reverse", "random"};
    float got[2][16], want[2][16];
    int ok = 1;
    char line[200] = "";
    for (int o = 0; o < 3; o++) {
        int r = publish_twice(PUB_OK, orders[o], got, want) && !memcmp(got, want, sizeof got);
        ok &= r;
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s %s", o ? ", " : "", onames[o],
                 r ? "right" : "WRONG");
    }
    result(ok, "publication: a last-block reduction passes the race check",
           "fence, barrier, atomic, the last block combines and resets the counter; two launches in a row in each "
           "block order: %s", line);
    cudaDeviceReset();
    int launched = publish_twice(PUB_NO_RESET, EMU_ORDER_FORWARD, got, want);
    int first = !memcmp(got[0], want[0], sizeof got[0]), second = !memcmp(got[1], want[1], sizeof got[1]);
    result(launched && first && !second, "publication: a counter not reset shows in the second launch",
           "without the reset: first launch %s, second %s (its sum %g, want %g)", first ? "right" : "wrong",
           second ? "right (not caught)" : "stale (caught)", got[1][0], want[1][0]);
    cudaDeviceReset();
}

/* The chain of stages (cuda/cu_sync.cuh, emu_faults.cu's chain2): right
 * with tickets in every block order, twice in a row (the counters set
 * back); stages by blockIdx hang in reverse block order (the timeout ends
 * it); no wait, or no fence before the arrival: read-race. */
static void test_chain(void) {
    static const emu_order orders[] = {EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM};
    static const char *const onames[] = {"forward", "reverse", "random"};
    int ok = 1;
    char line[200] = "";
    for (int o = 0; o < 3; o++) {
        cudaDeviceReset();
        emu_set_block_order(orders[o]);
        emu_set_race_check(1);
        void *host;
        float *d = case_buffer(BUF_INIT, &host);
        int r = 1;
        for (int rep = 0; rep < 2 && r; rep++) {
            float got[NBUF];
            r = ef_chain2_mode(d, 0) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
            gu_d2h(got, d, sizeof got);
            for (int t = 0; t < 16 && r; t++) r = got[16 + t] == (float)t && got[32 + t] == (float)(100 + t);
            for (int t = 0; t < 32 && r; t++) r = got[48 + t] == (float)(100 + 2 * (t % 16));
            unsigned ctl[3];
            memcpy(ctl, got, sizeof ctl);
            r = r && !ctl[0] && !ctl[1] && !ctl[2];
        }
        ok &= r;
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s %s", o ? ", " : "", onames[o],
                 r ? "right" : "WRONG");
    }
    emu_set_race_check(0);
    emu_set_block_order(EMU_ORDER_FORWARD);
    result(ok, "chain: ticketed stages pass the race check", "two launches in each block order: %s", line);
    static const struct {
        const char *name;
        ef_launcher run;
        emu_order blocks;
        emu_fault_kind kind;
        unsigned bx, tx;
        const char *why;
    } bad[] = {
        {"timeout: chain stages by blockIdx, blocks in reverse", ef_chain2_blockidx, EMU_ORDER_REVERSE,
         EMU_FAULT_TIMEOUT, 3, 0, "longer than 300 ms"},
        {"read-race: chain stage without its wait", ef_chain2_no_wait, EMU_ORDER_FORWARD, EMU_FAULT_READ_RACE, 2, 15,
         "block #0 of this launch stored to, unpublished"},
        {"read-race: chain arrival without __threadfence", ef_chain2_no_fence, EMU_ORDER_FORWARD,
         EMU_FAULT_READ_RACE, 2, 14, "block #0 of this launch stored to, unpublished"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cudaDeviceReset();
        emu_set_order(EMU_ORDER_FORWARD);
        emu_set_block_order(bad[i].blocks);
        if (bad[i].kind == EMU_FAULT_TIMEOUT) emu_set_timeout_ms(300);
        emu_set_race_check(bad[i].kind == EMU_FAULT_READ_RACE);
        void *host;
        float *d = case_buffer(BUF_INIT, &host);
        bad[i].run(d, NBUF);   /* runs when expect_fault waits (asynchronous streams): the order set till then */
        expect_fault(bad[i].name, bad[i].kind, "chain2", bad[i].bx, bad[i].tx, bad[i].why);
        emu_set_block_order(EMU_ORDER_FORWARD);
    }
    cudaDeviceReset();
}

/* Ordered chains in one launch (emu_faults.cu chain, handoff, nc_load),
 * race check on: run launcher f in mode with the blocks in order, out the
 * buffer after it; 0 and the fault in why when it faulted. */
static int run_ordered(cudaError_t (*f)(float *, int), int mode, emu_order order, float out[NBUF], char *why,
                       size_t whylen) {
    cudaDeviceReset();
    void *host;
    float *d = case_buffer(BUF_INIT, &host);
    emu_set_block_order(order);
    emu_set_race_check(1);
    cudaError_t e = f(d, mode);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    emu_set_race_check(0);
    emu_set_block_order(EMU_ORDER_FORWARD);
    if (e != cudaSuccess) {
        emu_fault flt;
        emu_fault_kind k = emu_fault_last(&flt);
        snprintf(why, whylen, "%s: %s %s", cudaGetErrorName(e), emu_fault_name(k), flt.msg);
        cudaDeviceReset();
        return 0;
    }
    gu_d2h(out, d, NBUF * sizeof(float));
    gu_dfree(d);
    return 1;
}

static void test_chains(void) {
    static const emu_order orders[] = {EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM};
    static const char *const onames[] = {"forward", "reverse", "random"};
    float out[NBUF];
    char why[EMU_MSG_LEN + 64] = "", line[300] = "";
    /* three stages, stage 2 reading stage 0's stores through stage 1's arrivals */
    int ok = 1;
    for (int o = 0; o < 3; o++) {
        int r = run_ordered(ef_chain_mode, CH_OK, orders[o], out, why, sizeof why);
        for (int k = 0; k < CH_P && r; k++)
            for (int t = 0; t < CH_T; t++) {
                float a0 = (float)(100 * k + t), a1 = (float)(100 * (CH_P - 1 - k) + t);
                r &= out[48 + 8 * k + t] == a0 + a1 + 2.0f * a0;
            }
        ok &= r;
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s %s", o ? ", " : "", onames[o],
                 r ? "right" : "WRONG");
    }
    result(ok, "publication: a three-stage chain is ordered transitively",
           "tickets, each stage waits on the previous stage's counter only, fence + atomic arrival; stage 2 reads "
           "stage 0's stores: %s%s%s", line, ok ? "" : "; ", ok ? "" : why);
    /* a store after another block's access, ordered through a publication */
    static const struct { int mode; const char *name, *what; } ho[] = {
        {HO_READ_OK, "publication: a store after a published read", "reader: read, fence, flag; writer: waits, stores"},
        {HO_TWO_OK, "publication: a store after two published reads", "two readers, the writer waits for both flags"},
        {HO_WRITE_OK, "publication: a store after a published store", "the first block stores, fences, flags; the "
                                                                       "second waits, stores again"},
    };
    for (size_t i = 0; i < sizeof ho / sizeof ho[0]; i++) {
        int r = 1;
        line[0] = '\0';
        for (int o = 0; o < 3; o++) {
            int ro = run_ordered(ef_handoff_mode, ho[i].mode, orders[o], out, why, sizeof why);
            const int readers = ho[i].mode == HO_TWO_OK ? 2 : ho[i].mode == HO_READ_OK ? 1 : 0;
            for (int t = 0; t < CH_T && ro; t++) {
                ro &= out[16 + t] == (float)(2000 + t);
                for (int j = 0; j < readers; j++) ro &= out[32 + 8 * j + t] == (float)(16 + t);
            }
            r &= ro;
            snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s %s", o ? ", " : "", onames[o],
                     ro ? "right" : "WRONG");
        }
        result(r, ho[i].name, "%s: %s%s%s", ho[i].what, line, r ? "" : "; ", r ? "" : why);
    }
    /* __ldg of what an earlier launch stored */
    cudaDeviceReset();
    void *host;
    float *d = case_buffer(BUF_INIT, &host);
    emu_set_race_check(1);
    cudaError_t e = es_add_one_run(d, NBUF, 0);
    if (e == cudaSuccess) e = ef_nc_mode(d, NC_READ);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    emu_set_race_check(0);
    ok = e == cudaSuccess;
    if (ok) {
        gu_d2h(out, d, sizeof out);
        for (int t = 0; t < CH_T; t++) ok &= out[32 + t] == (float)(17 + t);
    } else {
        emu_fault flt;
        emu_fault_last(&flt);
        snprintf(why, sizeof why, "%s", flt.msg);
    }
    result(ok, "nc: __ldg of an earlier launch's stores passes", "a launch stores, the next reads through __ldg: %s%s",
           ok ? "no fault, values right" : cudaGetErrorName(e), ok ? "" : why);
    cudaDeviceReset();
}

/* ---- 3. resume order ------------------------------------------------------------------------------ */

static void test_orders(void) {
    const int B = 3, N = 45, K = 200, NS = 2048, BS = 4;
    gu_rng r = {5};
    float *x = malloc((size_t)B * K * 4), *l = malloc((size_t)BS * NS * 4);
    uint16_t *w = malloc((size_t)N * K * 2);
    for (int i = 0; i < B * K; i++) x[i] = (float)gu_normal(&r);
    for (int i = 0; i < N * K; i++) w[i] = st_f32_to_bf16((float)gu_normal(&r));
    for (int i = 0; i < BS * NS; i++) l[i] = (float)(3.0 * gu_normal(&r));
    samp_row rows[4] = {{1, 9, 0.7f, 25}, {2, 8, 1.0f, 250}, {3, 7, 0.0f, 0}, {4, 6, 0.8f, 0}};
    float *dx = gu_dalloc((size_t)B * K * 4), *dy = gu_dalloc((size_t)B * N * 4), *dl = gu_dalloc((size_t)BS * NS * 4);
    uint16_t *dw = gu_dalloc((size_t)N * K * 2);
    samp_row *drows = gu_dalloc(sizeof rows);
    int32_t *dout = gu_dalloc(sizeof(int32_t) * BS);
    gu_h2d(dx, x, (size_t)B * K * 4);
    gu_h2d(dw, w, (size_t)N * K * 2);
    gu_h2d(dl, l, (size_t)BS * NS * 4);
    gu_h2d(drows, rows, sizeof rows);
    float y0[3 * 45], y1[3 * 45];
    int32_t t0[4], t1[4];
    int same = 1;
    static const emu_order orders[] = {EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM, EMU_ORDER_RANDOM};
    for (int o = 0; o < 4; o++) {
        emu_set_order(orders[o]);
        CU_CHECK_FATAL(cu_matvec_bf16(dy, dx, dw, B, N, K, 0));
        CU_CHECK_FATAL(cu_samp_topk_rows(dout, dl, drows, BS, NS, 1, 0));
        gu_d2h(o ? y1 : y0, dy, sizeof y0);
        gu_d2h(o ? t1 : t0, dout, sizeof t0);
        if (o) same &= !memcmp(y0, y1, sizeof y0) && !memcmp(t0, t1, sizeof t0);
    }
    emu_set_order(EMU_ORDER_RANDOM);
    result(same, "resume order: matvec and sampler results do not depend on it",
           "forward, reverse and two random orders: bit-identical");
    free(x);
    free(l);
    free(w);
}

/* The LM attention (split and combine in one launch, the last block of a
 * row and head combining) over rows of 3, 2 and 1 splits (the last writes
 * its output itself), bf16 and int8 K/V, step mode (every key from the
 * ring): bit-identical outputs in every block order and resume order, two
 * launches in a row each (a counter not set back would leave the second
 * launch's output unwritten: it is poisoned before each), race check on. */
static void test_attend_orders(void) {
    cudaDeviceReset();
    const int B = 3, heads = 2, hd = 64, D = heads * hd, ctx = 700;
    const int splits = cu_attend_splits(ctx);
    const int64_t hpos[3] = {699, 300, 10};
    const int32_t hslot[3] = {0, 1, 2};
    const size_t stride16 = (size_t)2 * ctx * D, lb = cu_kv_q8_layer_bytes(ctx, D, heads);
    gu_rng r = {17};
    uint16_t *ring = malloc(sizeof(uint16_t) * B * stride16);
    int8_t *ring8 = malloc(B * lb);
    float *q = malloc(sizeof(float) * B * 3 * D);
    for (size_t i = 0; i < (size_t)B * stride16; i++) ring[i] = st_f32_to_bf16((float)gu_normal(&r));
    memset(ring8, 0, B * lb);
    for (int sl = 0; sl < B; sl++) {
        int8_t *v = ring8 + sl * lb;
        for (size_t i = 0; i < (size_t)2 * ctx * D; i++) v[i] = (int8_t)(gu_normal(&r) * 40.0);
        float *sc = (float *)(v + (size_t)2 * ctx * D);
        for (int i = 0; i < 2 * heads * ctx; i++) sc[i] = (float)(0.01 + 0.02 * fabs(gu_normal(&r)));
    }
    for (int i = 0; i < B * 3 * D; i++) q[i] = (float)gu_normal(&r);
    uint16_t *dring = gu_dalloc(sizeof(uint16_t) * B * stride16);
    int8_t *dring8 = gu_dalloc(B * lb);
    float *dq = gu_dalloc(sizeof(float) * B * 3 * D), *dout = gu_dalloc(sizeof(float) * B * D);
    float *dpart = gu_dalloc(sizeof(float) * B * heads * splits * CU_ATT_PART_FLOATS);
    unsigned *dcnt = gu_dalloc(sizeof(unsigned) * B * heads);
    int32_t *dslot = gu_dalloc(sizeof hslot);
    int64_t *dpos = gu_dalloc(sizeof hpos);
    gu_h2d(dring, ring, sizeof(uint16_t) * B * stride16);
    gu_h2d(dring8, ring8, B * lb);
    gu_h2d(dq, q, sizeof(float) * B * 3 * D);
    gu_h2d(dslot, hslot, sizeof hslot);
    gu_h2d(dpos, hpos, sizeof hpos);
    CU_CHECK_FATAL(cudaMemset(dcnt, 0, sizeof(unsigned) * B * heads));
    float ref[2][3 * 128], got[3 * 128];
    int same = 1, faults = 0;
    char why[EMU_MSG_LEN + 32] = "";
    static const emu_order orders[] = {EMU_ORDER_FORWARD, EMU_ORDER_REVERSE, EMU_ORDER_RANDOM, EMU_ORDER_RANDOM};
    emu_set_race_check(1);
    for (int q8 = 0; q8 < 2 && !faults; q8++)
        for (int o = 0; o < 4 && !faults; o++)
            for (int run = 0; run < 2 && !faults; run++) {
                emu_set_block_order(orders[o]);
                emu_set_order(orders[(o + 1) % 4]);
                CU_CHECK_FATAL(cudaMemset(dout, 0xff, sizeof(float) * B * D));   /* NaN: an output left unwritten */
                cudaError_t e = q8 ? cu_attend_ring_q8(dout, dpart, dcnt, dq, 3 * D, NULL, NULL, dring8, lb, dslot,
                                                       dpos, B, heads, hd, ctx, ctx, 0, 0)
                                   : cu_attend_ring(dout, dpart, dcnt, dq, 3 * D, NULL, dring, stride16, dslot, dpos,
                                                    B, heads, hd, ctx, ctx, 0, 0);
                if (e != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {   /* sticky: the test ends */
                    emu_fault f;
                    emu_fault_last(&f);
                    snprintf(why, sizeof why, ": %s %s", emu_fault_name(f.kind), f.msg);
                    faults++;
                    continue;
                }
                gu_d2h(o || run ? got : ref[q8], dout, sizeof got);
                if (o || run) same &= !memcmp(got, ref[q8], sizeof got);
            }
    emu_set_race_check(0);
    emu_set_block_order(EMU_ORDER_FORWARD);
    emu_set_order(EMU_ORDER_RANDOM);
    int finite = !faults;
    for (int q8 = 0; q8 < 2 && finite; q8++)
        for (int i = 0; i < B * D; i++) finite &= isfinite(ref[q8][i]);
    result(same && finite && !faults, "block order: the LM attention's split and combine do not depend on it",
           "rows of %d, 2 and 1 splits, bf16 and int8 K/V, 4 block orders x 2 launches: %s, %s, %d fault(s)%s",
           splits, same ? "bit-identical" : "DIFFERENT", finite ? "every output written" : "an output left unwritten",
           faults, why);
    cudaDeviceReset();
    free(ring); free(ring8); free(q);
}

/* ---- asynchronous streams ------------------------------------------------------------------ */

/* The value of d[0] after a consumer stream copies it, with or without an
 * event wait on the producer. */
static float consumer_reads(int wait, unsigned flags_b) {
    float *d = gu_dalloc(64 * sizeof(float)), *o = gu_dalloc(64 * sizeof(float)), got = -1.0f;
    CU_CHECK_FATAL(cudaMemset(d, 0, 64 * sizeof(float)));
    gu_sync();
    cudaStream_t a, b;
    cudaEvent_t ev;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&b, flags_b));
    CU_CHECK_FATAL(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CU_CHECK_FATAL(es_add_one_run(d, 64, a));   /* the producer: d = 1 */
    CU_CHECK_FATAL(cudaEventRecord(ev, a));
    if (wait) CU_CHECK_FATAL(cudaStreamWaitEvent(b, ev, 0));
    CU_CHECK_FATAL(cudaMemcpyAsync(o, d, 64 * sizeof(float), cudaMemcpyDeviceToDevice, b));
    CU_CHECK_FATAL(cudaMemcpyAsync(&got, o, sizeof got, cudaMemcpyDeviceToHost, b));
    CU_CHECK_FATAL(cudaStreamSynchronize(b));
    gu_sync();
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaEventDestroy(ev);
    gu_dfree(d);
    gu_dfree(o);
    return got;
}

static void test_async_streams(void) {
    cudaDeviceReset();
    const char *mode = getenv("EMU_STREAMS");
    emu_set_streams(1);   /* these cases are about the asynchronous mode, whatever EMU_STREAMS says */
    float with = consumer_reads(1, cudaStreamNonBlocking), without = consumer_reads(0, cudaStreamNonBlocking);
    result(with == 1.0f && without == 0.0f, "streams: a missing event wait reads stale data",
           "consumer with cudaStreamWaitEvent reads %g (1 expected), without it %g (the producer had not run)", with,
           without);

    /* the legacy stream: a blocking stream waits for it, a non-blocking one does not */
    float *d = gu_dalloc(64 * sizeof(float));
    float seen[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        CU_CHECK_FATAL(cudaMemset(d, 0, 64 * sizeof(float)));
        gu_sync();
        cudaStream_t s;
        CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s, k ? cudaStreamNonBlocking : cudaStreamDefault));
        CU_CHECK_FATAL(es_add_one_run(d, 64, NULL));   /* on the legacy stream */
        CU_CHECK_FATAL(cudaMemcpyAsync(&seen[k], d, sizeof(float), cudaMemcpyDeviceToHost, s));
        CU_CHECK_FATAL(cudaStreamSynchronize(s));
        gu_sync();
        cudaStreamDestroy(s);
    }
    result(seen[0] == 1.0f && seen[1] == 0.0f, "streams: the legacy stream's implicit synchronisation",
           "a blocking stream's copy after a legacy-stream kernel reads %g (1), a non-blocking stream's %g (0)",
           seen[0], seen[1]);

    /* two unordered streams writing one buffer: the winner depends on the seed */
    int wins[3] = {0, 0, 0};
    cudaStream_t s1, s2;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    unsigned char *db = gu_dalloc(16);
    for (uint64_t seed = 1; seed <= 16; seed++) {
        emu_set_seed(seed);
        for (int i = 0; i < 4; i++) {
            CU_CHECK_FATAL(cudaMemsetAsync(db, 1, 16, s1));
            CU_CHECK_FATAL(cudaMemsetAsync(db, 2, 16, s2));
        }
        gu_sync();
        unsigned char v = 0;
        gu_d2h(&v, db, 1);
        wins[v < 3 ? v : 0]++;
    }
    emu_set_seed(1);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    gu_dfree(db);
    result(wins[1] > 0 && wins[2] > 0 && wins[0] == 0, "streams: independent streams complete in a seeded order",
           "16 seeds: stream 1 last %d times, stream 2 last %d times", wins[1], wins[2]);

    /* a pinned staging buffer refilled before its copy ran: reported */
    float *h = NULL, *d2 = gu_dalloc(64 * sizeof(float));
    CU_CHECK_FATAL(cudaMallocHost((void **)&h, 64 * sizeof(float)));
    cudaStream_t s;
    cudaEvent_t ev;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU_CHECK_FATAL(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    for (int i = 0; i < 64; i++) h[i] = 1.0f;
    CU_CHECK_FATAL(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 64; i++) h[i] = 2.0f;   /* the next frame's data, no wait: the bug */
    CU_CHECK_FATAL(cudaMemcpyAsync(d2, h, 64 * sizeof(float), cudaMemcpyHostToDevice, s));
    cudaError_t sync = cudaStreamSynchronize(s);
    emu_fault f;
    emu_fault_kind k = emu_fault_last(&f);
    cudaDeviceReset();
    result(k == EMU_FAULT_ASYNC_COPY && sync == cudaErrorLaunchFailure && strstr(f.msg, "staging buffer"),
           "streams: a reused pinned staging buffer is reported", "%s (%s): %s", emu_fault_name(k),
           cudaGetErrorName(sync), f.msg);

    /* the same with the event waited for: no fault; pageable sources are staged at the call */
    d = gu_dalloc(64 * sizeof(float));
    d2 = gu_dalloc(64 * sizeof(float));
    CU_CHECK_FATAL(cudaMallocHost((void **)&h, 64 * sizeof(float)));
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU_CHECK_FATAL(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    for (int i = 0; i < 64; i++) h[i] = 1.0f;
    CU_CHECK_FATAL(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, s));
    CU_CHECK_FATAL(cudaEventRecord(ev, s));
    CU_CHECK_FATAL(cudaEventSynchronize(ev));
    for (int i = 0; i < 64; i++) h[i] = 2.0f;
    CU_CHECK_FATAL(cudaMemcpyAsync(d2, h, 64 * sizeof(float), cudaMemcpyHostToDevice, s));
    float pg[64];
    for (int i = 0; i < 64; i++) pg[i] = 3.0f;
    CU_CHECK_FATAL(cudaMemcpyAsync(d2 + 32, pg, 32 * sizeof(float), cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 64; i++) pg[i] = 4.0f;   /* allowed: the runtime staged it */
    /* a host destination holds garbage until its copy's event */
    float *h2 = NULL;
    CU_CHECK_FATAL(cudaMallocHost((void **)&h2, 64 * sizeof(float)));
    for (int i = 0; i < 64; i++) h2[i] = 0.0f;
    CU_CHECK_FATAL(cudaMemcpyAsync(h2, d2, 64 * sizeof(float), cudaMemcpyDeviceToHost, s));
    int poisoned = isnan(h2[0]) && isnan(h2[63]);
    CU_CHECK_FATAL(cudaEventRecord(ev, s));
    CU_CHECK_FATAL(cudaEventSynchronize(ev));
    float a0 = -1.0f;
    gu_d2h(&a0, d, sizeof a0);
    result(emu_fault_last(NULL) == EMU_FAULT_NONE && a0 == 1.0f && h2[0] == 2.0f && h2[32] == 3.0f && poisoned,
           "streams: staging waited for; pageable staged; results after the event",
           "first copy %g (1), refilled buffer %g (2), pageable source %g (3, changed after the call), host "
           "destination before its event: %s", a0, h2[0], h2[32], poisoned ? "poisoned (NaN)" : "not poisoned");
    cudaStreamDestroy(s);
    cudaEventDestroy(ev);
    cudaFreeHost(h);
    cudaFreeHost(h2);
    gu_dfree(d);
    gu_dfree(d2);
    emu_set_streams(!(mode && !strcmp(mode, "sync")));
}

/* The cuBLAS stand-in: its summation order follows the shape (as split-K
 * and tile choices do on a device), and a GEMM is captured only with a
 * workspace of the handle's own. */
static void test_cublas_shape_workspace(void) {
    const int M = 64, K = 2048, N1 = 16, N2 = 64;
    gu_rng r = {23};
    uint16_t *a = malloc((size_t)M * K * 2), *b = malloc((size_t)K * N2 * 2);
    float *c1 = malloc((size_t)M * N1 * 4), *c2 = malloc((size_t)M * N2 * 4);
    for (int i = 0; i < M * K; i++) a[i] = st_f32_to_bf16((float)gu_normal(&r));
    for (int i = 0; i < K * N2; i++) b[i] = st_f32_to_bf16((float)gu_normal(&r));
    uint16_t *da = gu_dalloc((size_t)M * K * 2), *db = gu_dalloc((size_t)K * N2 * 2);
    float *dc = gu_dalloc((size_t)M * N2 * 4);
    gu_h2d(da, a, (size_t)M * K * 2);
    gu_h2d(db, b, (size_t)K * N2 * 2);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1.0f, zero = 0.0f;
    /* the same 16 columns, in a batch of 16 and in one of 64 */
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N1, K, &one, da, CUDA_R_16BF, K, db, CUDA_R_16BF, K, &zero, dc,
                 CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    gu_d2h(c1, dc, (size_t)M * N1 * 4);
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N2, K, &one, da, CUDA_R_16BF, K, db, CUDA_R_16BF, K, &zero, dc,
                 CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    gu_d2h(c2, dc, (size_t)M * N2 * 4);
    int differ = 0;
    double worst = 0.0;
    for (int i = 0; i < M * N1; i++) {
        differ += c1[i] != c2[i];
        double e = fabs((double)c1[i] - c2[i]) / (fabs((double)c2[i]) + 1.0);
        worst = e > worst ? e : worst;
    }
    result(differ > 0 && worst < 1e-5, "cuBLAS stand-in: the summation order follows the shape",
           "%d of %d outputs differ in their bits between a batch of %d and one of %d (largest difference %.2g, "
           "relative to |c| + 1)", differ, M * N1, N1, N2, worst);

    cudaStream_t s;
    CU_CHECK_FATAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *ws = gu_dalloc(1 << 20);
    cublasStatus_t st[3];
    cudaGraph_t g[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        cublasSetStream(h, s);   /* resets the workspace (cuBLAS: cublasSetStream) */
        if (i == 1) cublasSetWorkspace(h, ws, 1 << 20);
        CU_CHECK_FATAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        st[i] = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N1, K, &one, da, CUDA_R_16BF, K, db, CUDA_R_16BF, K,
                             &zero, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        CU_CHECK_FATAL(cudaStreamEndCapture(s, &g[i]));
        if (g[i]) cudaGraphDestroy(g[i]);
    }
    result(st[0] == CUBLAS_STATUS_NOT_SUPPORTED && st[1] == CUBLAS_STATUS_SUCCESS &&
               st[2] == CUBLAS_STATUS_NOT_SUPPORTED,
           "cuBLAS stand-in: capture needs a workspace of its own",
           "captured GEMM without a workspace: %s; after cublasSetWorkspace: %s; after another cublasSetStream: %s",
           cublasGetStatusName(st[0]), cublasGetStatusName(st[1]), cublasGetStatusName(st[2]));
    cublasDestroy(h);
    cudaStreamDestroy(s);
    gu_dfree(ws);
    gu_dfree(da);
    gu_dfree(db);
    gu_dfree(dc);
    free(a);
    free(b);
    free(c1);
    free(c2);
}

int main(void) {
    emu_set_quiet(1);
    printf("emu-test: the CUDA emulator's detectors and semantics\n");
    fflush(stdout);
    test_detectors();
    test_real_kernels();
    test_shuffles();
    test_votes();
    test_atomics_dims();
    test_dyn_shared_config();
    test_copies();
    test_devices();
    test_traffic();
    test_traffic_q8();
    test_traffic_codec();
    test_graphs();
    test_cublas();
    test_async_streams();
    test_cublas_shape_workspace();
    test_publish();
    test_chain();
    test_chains();
    test_orders();
    test_attend_orders();
    printf("%d passed, %d failed, 0 skipped\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
