/* emu_faults.cu - kernels for the emulator's own tests (emu_test.c):
 *  - ef_*: each breaks one rule the emulator must report (the kind, the
 *    kernel, the block and thread are checked), one kernel per detector;
 *  - es_*: correct kernels whose results pin down the emulated semantics
 *    (shuffle modes and widths, votes, matches, reductions, barrier counts,
 *    atomics, 3-D indices, dynamic shared memory, graph replays).
 * Written as ordinary CUDA: this file goes through cu2emu like the
 * project's kernels (it is not built by nvcc: nothing here is for a GPU).
 * Every launcher takes a device buffer d of n floats and returns the
 * launch's error.
 */
#include <stdint.h>

#include <cuda_runtime_api.h>

#define FULL 0xFFFFFFFFu

/* ---- barriers -------------------------------------------------------------------- */

__global__ void bar_exit_early(float *d) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    d[threadIdx.x] = 1.0f;
}

__global__ void bar_divergent(float *d) {
    if (threadIdx.x < 32) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    d[threadIdx.x] = 1.0f;
}

/* ---- warp ops ---------------------------------------------------------------------- */

__global__ void warp_exited_lane(float *d) {
    float v = d[threadIdx.x];
    if (threadIdx.x == 7) return;
    v = __shfl_xor_sync(FULL, v, 1);
    d[threadIdx.x] = v;
}

__global__ void warp_partial(float *d) {   /* launched with 48 threads */
    float v = d[threadIdx.x];
    v += __shfl_xor_sync(FULL, v, 16);
    d[threadIdx.x] = v;
}

__global__ void warp_not_in_mask(float *d) {
    unsigned b = __ballot_sync(0x0000FFFFu, d[threadIdx.x] > 0.0f);
    d[threadIdx.x] = (float)b;
}

__global__ void warp_mismatch(float *d) {
    float v = d[threadIdx.x];
    if (threadIdx.x % 2) v = (float)__ballot_sync(FULL, v > 0.0f);
    else v = __shfl_xor_sync(FULL, v, 2);
    d[threadIdx.x] = v;
}

__global__ void warp_inactive_source(float *d) {
    float v = d[threadIdx.x];
    if (threadIdx.x < 16) v = __shfl_sync(0x0000FFFFu, v, 20);
    d[threadIdx.x] = v;
}

__global__ void warp_barrier_deadlock(float *d) {
    float v = d[threadIdx.x];
    if (threadIdx.x == 3) __syncthreads();
    else v = __shfl_xor_sync(FULL, v, 1);
    d[threadIdx.x] = v;
}

__global__ void warp_bad_width(float *d) {
    d[threadIdx.x] = __shfl_xor_sync(FULL, d[threadIdx.x], 1, 12);
}

/* ---- alignment ------------------------------------------------------------------------- */

__global__ void ldg_misaligned(float *d) {
    const uint4 *p = reinterpret_cast<const uint4 *>(d + 1);
    uint4 v = __ldg(p + threadIdx.x);
    d[32 + threadIdx.x] = __uint_as_float(v.x);
}

__global__ void vector_misaligned(float *d) {
    const float4 *p = reinterpret_cast<const float4 *>(d + 2);
    float4 v = p[threadIdx.x];
    d[32 + threadIdx.x] = v.y;
}

__global__ void scalar_misaligned(float *d) {
    const float *p = reinterpret_cast<const float *>(reinterpret_cast<const char *>(d) + 2);
    d[32 + threadIdx.x] = p[threadIdx.x];
}

/* ---- bounds and address spaces ----------------------------------------------------------- */

__global__ void oob_read(float *d, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) d[i % n] = d[i] + 1.0f;   /* i == n reads past the end */
}

__global__ void oob_write_before(float *d) {
    if (threadIdx.x == 0) d[-1] = 1.0f;
}

__global__ void oob_far_write(float *d, int n) {
    if (threadIdx.x == 9) d[n + 300] = 1.0f;   /* past the slack, into the guard page */
}

__global__ void oob_shared(float *d) {   /* 64 threads, 32 slots */
    __shared__ float s[32];
    s[threadIdx.x] = d[threadIdx.x];
    __syncthreads();
    d[threadIdx.x] = s[31 - threadIdx.x % 32];
}

__global__ void oob_dyn_shared(float *d) {   /* 32 threads, 16 floats of dynamic shared memory */
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = d[threadIdx.x];
    __syncthreads();
    d[threadIdx.x] = dyn[threadIdx.x % 16];
}

__global__ void read_all(float *d) {   /* freed, host, NULL, uninitialised: the driver's buffer */
    d[64 + threadIdx.x] = d[threadIdx.x] * 2.0f;
}

__global__ void write_race(float *d) {   /* every block writes its index to d[0..31]: no defined winner */
    d[threadIdx.x] = (float)blockIdx.x;
}

/* A last-block reduction over 4 blocks of 16 threads, the pattern of the
 * LM attention's combine (cuda/cu_lm.cu): block k writes its partial to
 * d[16 + 16k + t] (k * 100 + t; a plain store: the compiler's hooks do
 * not report a store to an address loaded just before in the same code
 * path, a read-modify-write, so the race check would not see that), then
 * arrives on the counter at d[0]
 * (0.0f: 0); the block that arrives last writes d[80 + t] = the sum of the
 * partials. mode: PUB_OK the right pattern (each thread fences, a barrier,
 * one atomic; the last block fences, combines and sets the counter back
 * to 0); PUB_NO_FENCE no __threadfence; PUB_NO_ATOMIC no counter, the block
 * of the highest index takes itself for the last; PUB_EARLY every block
 * combines after its own arrival, without looking at the count;
 * PUB_NO_RESET the counter is not set back (right in one launch, never
 * combines in the next). */
enum { PUB_OK, PUB_NO_FENCE, PUB_NO_ATOMIC, PUB_EARLY, PUB_NO_RESET };
__global__ void publish(float *d, int mode) {
    __shared__ int last;
    const int k = blockIdx.x, t = threadIdx.x;
    float *mine = d + 16 + 16 * k;
    mine[t] = (float)(k * 100 + t);
    if (mode != PUB_NO_FENCE) __threadfence();
    __syncthreads();
    if (t == 0) {
        if (mode == PUB_NO_ATOMIC) {
            last = k == (int)gridDim.x - 1;
        } else {
            unsigned *cnt = reinterpret_cast<unsigned *>(d);
            unsigned before = atomicAdd(cnt, 1u);
            last = mode == PUB_EARLY || before + 1 == gridDim.x;
            if (before + 1 == gridDim.x && mode != PUB_NO_RESET) *cnt = 0u;
        }
    }
    __syncthreads();
    if (!last) return;
    if (mode != PUB_NO_FENCE) __threadfence();
    float s = 0.0f;
    for (int j = 0; j < (int)gridDim.x; j++) s += d[16 + 16 * j + t];
    d[80 + t] = s;
}

/* Ordered chains of blocks in one launch (the race check's transitive
 * happens-before). d[0..15] are counters, zeroed by the launcher (as
 * unsigned): d[0] the ticket, d[1 + s] the blocks done of stage s. A block
 * takes a ticket; the ticket's order is the order blocks run in, on a
 * device and here. CH_P blocks of CH_T threads per stage, three stages:
 * stage 0 block k stores A[k] = d[16 + 8k + t], stage 1 B[k] = d[32 + 8k +
 * t] from A, stage 2 C[k] = d[48 + 8k + t] from A (both parts, stage 0's:
 * ordered only through stage 1) and B. A stage after the first waits until
 * the previous stage's blocks have all arrived (thread 0 polls done[s-1]
 * with an atomic, backing off with __nanosleep), works, then fences and
 * arrives on done[s]. mode: CH_OK; CH_LATE_WAIT stage 1 stores B without
 * reading A, fences, and only then waits for stage 0 before it arrives: it
 * acquired stage 0's stores after its fence, so its arrival does not pass
 * them on (stage 2's first read of A is reported). */
#define CH_P 2
#define CH_T 8
enum { CH_OK, CH_LATE_WAIT };
__device__ void chain_wait(unsigned *done) {
    while (atomicAdd(done, 0u) < CH_P) __nanosleep(100);
}
__global__ void chain(float *d, int mode) {
    __shared__ unsigned ticket;
    unsigned *cnt = reinterpret_cast<unsigned *>(d);
    const int t = threadIdx.x;
    if (t == 0) ticket = atomicAdd(&cnt[0], 1u);
    __syncthreads();
    const int s = (int)ticket / CH_P, k = (int)ticket % CH_P;
    const bool late = mode == CH_LATE_WAIT && s == 1;
    if (s > 0 && !late && t == 0) chain_wait(&cnt[s]);
    __syncthreads();
    float *A = d + 16, *B = d + 32, *C = d + 48;
    if (s == 0) {
        A[8 * k + t] = (float)(100 * k + t);
    } else if (s == 1) {
        B[8 * k + t] = late ? (float)t : 2.0f * A[8 * k + t];
    } else {
        const float a0 = A[8 * k + t], a1 = A[8 * (CH_P - 1 - k) + t];
        C[8 * k + t] = a0 + a1 + B[8 * k + t];
    }
    __threadfence();
    __syncthreads();
    if (t == 0) {
        if (late) chain_wait(&cnt[1]);
        atomicAdd(&cnt[1 + s], 1u);
    }
}

/* A store after another block's access of the same bytes, ordered (or not)
 * through a publication. d[0..15] are counters zeroed by the launcher:
 * d[0] the ticket, d[1 + j] block j's flag. Tickets 0 .. nb-2 access X =
 * d[16 .. 23] (read it into d[32 + 8j + t], or store to it), fence and
 * raise their flag; the last ticket waits for flags, then stores X. mode:
 * HO_READ_OK; HO_READ_NO_FENCE the readers do not fence; HO_READ_NO_WAIT
 * the writer does not wait; HO_WRITE_OK the first block stores X, then the
 * last overwrites it after its wait; HO_WRITE_NO_FENCE the same without the
 * fence; HO_TWO_OK two readers, the writer waits for both;
 * HO_TWO_ONE_SEEN the writer waits for the first reader's flag only. */
enum { HO_READ_OK, HO_READ_NO_FENCE, HO_READ_NO_WAIT, HO_WRITE_OK, HO_WRITE_NO_FENCE, HO_TWO_OK, HO_TWO_ONE_SEEN };
__global__ void handoff(float *d, int mode) {
    __shared__ unsigned ticket;
    unsigned *cnt = reinterpret_cast<unsigned *>(d);
    const int t = threadIdx.x, last = (int)gridDim.x - 1;
    if (t == 0) ticket = atomicAdd(&cnt[0], 1u);
    __syncthreads();
    const int j = (int)ticket;
    float *X = d + 16;
    if (j < last) {
        if (mode == HO_WRITE_OK || mode == HO_WRITE_NO_FENCE) X[t] = (float)(1000 + t);
        else d[32 + 8 * j + t] = X[t];
        if (mode != HO_READ_NO_FENCE && mode != HO_WRITE_NO_FENCE) __threadfence();
        __syncthreads();
        if (t == 0) atomicAdd(&cnt[1 + j], 1u);
        return;
    }
    if (t == 0 && mode != HO_READ_NO_WAIT) {
        const int wait_for = mode == HO_TWO_ONE_SEEN ? 1 : last;
        for (int w = 0; w < wait_for; w++)
            while (atomicAdd(&cnt[1 + w], 0u) == 0u) __nanosleep(100);
    }
    __syncthreads();
    X[t] = (float)(2000 + t);
}

/* __ldg of bytes stored in the same launch (the non-coherent path's rule).
 * d[0..15] counters zeroed by the launcher. mode: NC_OTHER the first
 * ticket stores X = d[16 .. 23], fences and raises d[1]; the second waits
 * for it and reads X through __ldg (published, still stale on a device);
 * NC_SAME one block stores X, a barrier, then reads a neighbour's element
 * through __ldg; NC_ATOMIC the first ticket's atomic adds to d[2], the
 * second reads it through __ldg; NC_READ X read through __ldg only (the
 * launch after a store: no fault). */
enum { NC_OTHER, NC_SAME, NC_ATOMIC, NC_READ };
__global__ void nc_load(float *d, int mode) {
    __shared__ unsigned ticket;
    unsigned *cnt = reinterpret_cast<unsigned *>(d);
    const int t = threadIdx.x;
    float *X = d + 16;
    if (mode == NC_READ) {
        d[32 + t] = __ldg(&X[t]);
        return;
    }
    if (mode == NC_SAME) {
        X[t] = (float)t;
        __syncthreads();
        d[32 + t] = __ldg(&X[(t + 1) % CH_T]);
        return;
    }
    if (t == 0) ticket = atomicAdd(&cnt[0], 1u);
    __syncthreads();
    if (ticket == 0) {
        if (mode == NC_ATOMIC) {
            if (t == 0) atomicAdd(&cnt[2], 5u);
            return;
        }
        X[t] = (float)(1000 + t);
        __threadfence();
        __syncthreads();
        if (t == 0) atomicAdd(&cnt[1], 1u);
        return;
    }
    if (mode == NC_ATOMIC) {
        d[32 + t] = __uint_as_float(__ldg(&cnt[2]));
        return;
    }
    if (t == 0)
        while (atomicAdd(&cnt[1], 0u) == 0u) __nanosleep(100);
    __syncthreads();
    d[32 + t] = __ldg(&X[t]);
}

__global__ void ldg_shared(float *d) {
    __shared__ float s[64];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    d[threadIdx.x] = __ldg(&s[threadIdx.x]);
}

__global__ void atomic_local(float *d) {
    float loc[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    atomicAdd(&loc[threadIdx.x % 4], 1.0f);
    d[threadIdx.x] = loc[threadIdx.x % 4];
}

__global__ void other_local(float *d) {
    __shared__ float *p0;
    float mine = d[threadIdx.x];
    if (threadIdx.x == 0) p0 = &mine;
    __syncthreads();
    d[32 + threadIdx.x] = *p0;   /* thread 0's local variable, read by every thread */
}

/* ---- shared memory never written ----------------------------------------------------------- */

__global__ void hist_not_zeroed(float *d) {
    __shared__ unsigned int h[8];
    atomicAdd(&h[threadIdx.x % 8], 1u);
    __syncthreads();
    d[threadIdx.x] = (float)h[threadIdx.x % 8];
}

__global__ void missing_barrier(float *d) {
    __shared__ float s;
    if (threadIdx.x == 0) s = d[0];
    d[1 + threadIdx.x] = s;   /* no __syncthreads between the write and the reads */
}

__global__ void shared_across_blocks(float *d) {
    __shared__ float s;
    if (blockIdx.x == 0 && threadIdx.x == 0) s = 1.0f;   /* only block 0 writes it */
    __syncthreads();
    d[blockIdx.x * 32 + threadIdx.x] = s;
}

/* ---- the rest ------------------------------------------------------------------------------ */

__device__ __noinline__ float deep(int n, float *d) {
    volatile float buf[256];
    buf[n % 256] = (float)n;
    return n > 0 ? deep(n - 1, d) + buf[0] : buf[0];
}

__global__ void stack_overflow(float *d) {
    d[threadIdx.x] = deep(100000, d);
}

__global__ void trap_kernel(float *d) {
    if (threadIdx.x == 3) __trap();
    d[threadIdx.x] = 1.0f;
}

__global__ void divide_by_zero(float *d) {
    int z = (int)d[0];   /* the driver stores 0 there */
    d[1 + threadIdx.x] = (float)(100 / z);
}

__global__ void spin_wait(float *d) {
    __shared__ int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        while (atomicAdd(&flag, 0) == 0) {
        }   /* waits for thread 1, which never runs: no preemption */
    } else if (threadIdx.x == 1) {
        atomicExch(&flag, 1);
    }
    d[threadIdx.x] = 1.0f;
}

/* ---- the project's kernel, launched without its launcher's checks --------------------------- */

template <int BT>
__global__ void matvec_bf16_vec(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w,
                                const float *__restrict__ ws, const float *__restrict__ alpha, int B, int N, int K,
                                float eps);

/* ---- correct kernels: the semantics -------------------------------------------------------- */

/* 64 threads: out (64, 8) ints, the shuffle of each mode at widths 32, 8, 4. */
__global__ void es_shuffles(int *out) {
    int v = (int)threadIdx.x, *o = out + threadIdx.x * 8;
    o[0] = __shfl_sync(FULL, v, 5);
    o[1] = __shfl_up_sync(FULL, v, 3);
    o[2] = __shfl_down_sync(FULL, v, 4);
    o[3] = __shfl_xor_sync(FULL, v, 6);
    o[4] = __shfl_sync(FULL, v, 3, 8);
    o[5] = __shfl_up_sync(FULL, v, 2, 8);
    o[6] = __shfl_down_sync(FULL, v, 2, 8);
    o[7] = __shfl_xor_sync(FULL, v, 1, 4);
}

/* 64 threads: out (64, 16) ints. */
__global__ void es_votes(int *out) {
    const int t = (int)threadIdx.x, lane = t % 32;
    int *o = out + t * 16, pred = -1;
    o[0] = (int)__ballot_sync(FULL, lane % 3 == 0);
    o[1] = __any_sync(FULL, lane == 31);
    o[2] = __all_sync(FULL, lane < 32);
    o[3] = __all_sync(FULL, lane < 31);
    o[4] = (int)__match_any_sync(FULL, lane / 4);
    o[5] = (int)__match_all_sync(FULL, 7, &pred);
    o[6] = pred;
    o[7] = (int)__match_all_sync(FULL, lane, &pred);
    o[8] = pred;
    o[9] = (int)__reduce_add_sync(FULL, (unsigned)lane);
    o[10] = __reduce_min_sync(FULL, lane - 16);
    o[11] = (int)__reduce_max_sync(FULL, (unsigned)lane);
    o[12] = (int)__reduce_or_sync(FULL, 1u << (lane % 8));
    o[13] = __syncthreads_count(t % 2);
    o[14] = __syncthreads_and(t < 64) + 2 * __syncthreads_or(t == 63) + 4 * __syncthreads_and(t < 63);
    o[15] = __popc((unsigned)t) + 100 * __ffs(t) + 10000 * __clz(t);
}

/* grid 3 x 64 threads: shared float and integer atomics, then a global one. */
__global__ void es_atomics(float *d) {
    __shared__ float sum;
    __shared__ unsigned int mx, inc;
    __shared__ int cas;
    if (threadIdx.x == 0) {
        sum = 0.0f;
        mx = 0;
        inc = 0;
        cas = 0;
    }
    __syncthreads();
    atomicAdd(&sum, 1.0f);
    atomicMax(&mx, threadIdx.x * 3u);
    atomicInc(&inc, 9u);   /* wraps to 0 after 9: 64 increments leave 64 % 10 */
    int old = cas, seen;
    while ((seen = atomicCAS(&cas, old, old + 2)) != old) old = seen;
    __syncthreads();
    if (threadIdx.x == 0) {
        d[blockIdx.x * 4 + 0] = sum;
        d[blockIdx.x * 4 + 1] = (float)mx;
        d[blockIdx.x * 4 + 2] = (float)inc;
        d[blockIdx.x * 4 + 3] = (float)cas;
    }
    atomicAdd(&d[12], 1.0f);
}

/* block (4, 3, 2), grid (2, 3, 1): every thread writes its coordinates. */
__global__ void es_dims(float *d) {
    int bl = (int)(blockIdx.x + gridDim.x * blockIdx.y);
    int th = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    int nt = (int)(blockDim.x * blockDim.y * blockDim.z);
    d[bl * nt + th] = (float)(threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z + 1000 * blockIdx.x +
                              10000 * blockIdx.y);
}

/* 256 threads over dynamic shared memory of n floats: d[0] = sum of 0..n-1. */
__global__ void es_dyn_shared(float *d, int n) {
    extern __shared__ float buf[];
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) buf[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < n; i++) s += buf[i];
        d[0] = (float)s;
    }
}

__global__ void es_add_one(float *d, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) d[i] += 1.0f;
}

/* ---- launchers ----------------------------------------------------------------------------------- */

#define LAUNCHER(name, grid, block, shmem, ...)                                    \
    extern "C" cudaError_t ef_##name(float *d, int n) {                            \
        (void)n;                                                                   \
        name<<<(grid), (block), (shmem), 0>>>(__VA_ARGS__);                       \
        return cudaGetLastError();                                                 \
    }

LAUNCHER(bar_exit_early, 1, 64, 0, d)
LAUNCHER(write_race, 3, 32, 0, d)
extern "C" cudaError_t ef_publish_mode(float *d, int mode) {
    publish<<<4, 16, 0, 0>>>(d, mode);
    return cudaGetLastError();
}
#define PUB_LAUNCHER(name, mode) \
    extern "C" cudaError_t ef_##name(float *d, int n) { (void)n; return ef_publish_mode(d, mode); }
PUB_LAUNCHER(publish_no_fence, PUB_NO_FENCE)
PUB_LAUNCHER(publish_no_atomic, PUB_NO_ATOMIC)
PUB_LAUNCHER(publish_early, PUB_EARLY)
/* The ordered-chain kernels (chain, handoff, nc_load) with their counters
 * d[0..15] zeroed first. */
extern "C" cudaError_t ef_chain_mode(float *d, int mode) {
    cudaError_t e = cudaMemset(d, 0, 16 * sizeof(float));
    if (e) return e;
    chain<<<3 * CH_P, CH_T, 0, 0>>>(d, mode);
    return cudaGetLastError();
}
extern "C" cudaError_t ef_handoff_mode(float *d, int mode) {
    cudaError_t e = cudaMemset(d, 0, 16 * sizeof(float));
    if (e) return e;
    handoff<<<mode == HO_TWO_OK || mode == HO_TWO_ONE_SEEN ? 3 : 2, CH_T, 0, 0>>>(d, mode);
    return cudaGetLastError();
}
extern "C" cudaError_t ef_nc_mode(float *d, int mode) {
    cudaError_t e = cudaMemset(d, 0, 16 * sizeof(float));
    if (e) return e;
    nc_load<<<mode == NC_SAME || mode == NC_READ ? 1 : 2, CH_T, 0, 0>>>(d, mode);
    return cudaGetLastError();
}
#define MODE_LAUNCHER(name, kernel, mode) \
    extern "C" cudaError_t ef_##name(float *d, int n) { (void)n; return ef_##kernel##_mode(d, mode); }
MODE_LAUNCHER(chain_late_wait, chain, CH_LATE_WAIT)
MODE_LAUNCHER(war_no_fence, handoff, HO_READ_NO_FENCE)
MODE_LAUNCHER(war_no_wait, handoff, HO_READ_NO_WAIT)
MODE_LAUNCHER(waw_no_fence, handoff, HO_WRITE_NO_FENCE)
MODE_LAUNCHER(war_one_seen, handoff, HO_TWO_ONE_SEEN)
MODE_LAUNCHER(nc_other, nc, NC_OTHER)
MODE_LAUNCHER(nc_same, nc, NC_SAME)
MODE_LAUNCHER(nc_atomic, nc, NC_ATOMIC)
LAUNCHER(bar_divergent, 1, 64, 0, d)
LAUNCHER(warp_exited_lane, 1, 32, 0, d)
LAUNCHER(warp_partial, 1, 48, 0, d)
LAUNCHER(warp_not_in_mask, 1, 32, 0, d)
LAUNCHER(warp_mismatch, 1, 32, 0, d)
LAUNCHER(warp_inactive_source, 1, 32, 0, d)
LAUNCHER(warp_barrier_deadlock, 1, 32, 0, d)
LAUNCHER(warp_bad_width, 1, 32, 0, d)
LAUNCHER(ldg_misaligned, 1, 8, 0, d)
LAUNCHER(vector_misaligned, 1, 8, 0, d)
LAUNCHER(scalar_misaligned, 1, 8, 0, d)
LAUNCHER(oob_read, 3, 40, 0, d, n)
LAUNCHER(oob_write_before, 1, 4, 0, d)
LAUNCHER(oob_far_write, 1, 16, 0, d, n)
LAUNCHER(oob_shared, 1, 64, 0, d)
LAUNCHER(oob_dyn_shared, 1, 32, 16 * sizeof(float), d)
LAUNCHER(read_all, 1, 32, 0, d)
LAUNCHER(ldg_shared, 1, 64, 0, d)
LAUNCHER(atomic_local, 1, 8, 0, d)
LAUNCHER(other_local, 1, 8, 0, d)
LAUNCHER(hist_not_zeroed, 1, 32, 0, d)
LAUNCHER(missing_barrier, 1, 32, 0, d)
LAUNCHER(shared_across_blocks, 2, 32, 0, d)
LAUNCHER(stack_overflow, 1, 4, 0, d)
LAUNCHER(trap_kernel, 1, 8, 0, d)
LAUNCHER(divide_by_zero, 1, 8, 0, d)
LAUNCHER(spin_wait, 1, 4, 0, d)

/* matvec_bf16_vec<8> on whatever pointers it is given (the launcher
 * cu_matvec_bf16 would have taken the scalar path for misaligned ones). */
extern "C" cudaError_t ef_matvec_vec_direct(float *y, const float *x, const uint16_t *w, int B, int N, int K) {
    matvec_bf16_vec<8><<<dim3((unsigned)(N + 1) / 2, (unsigned)(B + 7) / 8), 128, 0, 0>>>(y, x, w, nullptr, nullptr, B,
                                                                                       N, K, 0.0f);
    return cudaGetLastError();
}

extern "C" cudaError_t es_shuffles_run(int *out) {
    es_shuffles<<<1, 64, 0, 0>>>(out);
    return cudaGetLastError();
}

extern "C" cudaError_t es_votes_run(int *out) {
    es_votes<<<1, 64, 0, 0>>>(out);
    return cudaGetLastError();
}

extern "C" cudaError_t es_atomics_run(float *d) {
    es_atomics<<<3, 64, 0, 0>>>(d);
    return cudaGetLastError();
}

extern "C" cudaError_t es_dims_run(float *d) {
    es_dims<<<dim3(2, 3, 1), dim3(4, 3, 2), 0, 0>>>(d);
    return cudaGetLastError();
}

/* optin: ask for the shared memory first (cudaFuncSetAttribute). */
extern "C" cudaError_t es_dyn_shared_run(float *d, int n, int optin) {
    if (optin) {
        cudaError_t e = cudaFuncSetAttribute((const void *)es_dyn_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             n * (int)sizeof(float));
        if (e) return e;
    }
    es_dyn_shared<<<1, 256, (size_t)n * sizeof(float), 0>>>(d, n);
    return cudaGetLastError();
}

extern "C" cudaError_t es_add_one_run(float *d, int n, cudaStream_t s) {
    es_add_one<<<(unsigned)(n + 63) / 64, 64, 0, s>>>(d, n);
    return cudaGetLastError();
}

/* A launch with a block of threads threads and a grid of (1, gy). */
extern "C" cudaError_t es_config_run(float *d, unsigned threads, unsigned gy) {
    es_add_one<<<dim3(1, gy), threads, 0, 0>>>(d, 1);
    return cudaGetLastError();
}

/* ---- traffic accounting (emu_traffic.c) ------------------------------------------------------- */

/* mode 0: lane i reads d[i] (a warp: 128 contiguous bytes, 4 sectors);
 * 1: d[8 i] (32 bytes apart: a sector per lane); 2: 16-byte loads of
 * contiguous float4s; 3: shared s[32 t] (every lane in bank 0: 32
 * wavefronts); 4: shared s[t] (one wavefront). 64 threads, one block; out
 * gets one float per thread. */
__global__ void et_traffic(float *out, const float *d, int mode) {
    __shared__ float s[32 * 64];
    const int t = threadIdx.x;
    float v = 0.0f;
    if (mode == 0) v = d[t];
    else if (mode == 1) v = d[8 * t];
    else if (mode == 2) {
        float4 q = reinterpret_cast<const float4 *>(d)[t];
        v = q.x + q.y + q.z + q.w;
    } else if (mode == 3) {
        s[32 * t] = (float)t;
        __syncthreads();
        v = s[32 * ((t + 1) % 64)];
    } else {
        s[t] = (float)t;
        __syncthreads();
        v = s[(t + 1) % 64];
    }
    out[t] = v;
}

extern "C" cudaError_t es_traffic_run(float *out, const float *d, int mode) {
    et_traffic<<<1, 64, 0, 0>>>(out, d, mode);
    return cudaGetLastError();
}
