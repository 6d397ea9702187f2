/* cu_sync.cuh - ordering between the blocks of one launch: the ticketed
 * chain of stages (cu_matvec.cu's dep_chain kernels, issue 25: a whole
 * depformer sub-step in one launch) and whatever else needs a block to
 * wait for earlier blocks' results inside a kernel.
 *
 * The protocol (why it cannot deadlock and why it is ordered):
 *  - tickets, not blockIdx: a block's first act is cu_chain_ticket, an
 *    atomicAdd on a counter; the ticket, not its blockIdx, says which
 *    piece of work it does, and work is handed out in stage order. A block
 *    only ever waits for stages of lower tickets, whose blocks have already
 *    taken their tickets, so they are running (resident) or finished, and
 *    none of them waits for it. By induction on the ticket every wait ends,
 *    whatever order the hardware starts blocks in and however few fit at
 *    once: no cooperative launch needed. (The argument of the decoupled
 *    look-back scan and of stream-K GEMMs, which hand out work the same
 *    way; with blockIdx a block of a late stage could be resident while the
 *    blocks it waits for are not yet scheduled, and spin forever.)
 *  - release: a block's stores, a barrier, then one thread's
 *    __threadfence() and atomicAdd on its stage's done counter
 *    (cu_chain_arrive): the fence is cumulative over the barrier, so every
 *    thread's stores are visible before the count says the block is done.
 *  - acquire: one thread polls the previous stage's counter with an
 *    acquire load until every block of that stage has arrived
 *    (cu_chain_wait), then a barrier hands that to the block's threads.
 *    Waiting on stage s - 1 alone is enough: each of its blocks waited on
 *    s - 2 before it ran (acquire and release chain transitively).
 *
 * On the emulator (emu_device.h defines MOSHID_EMU_DEVICE_H) the acquire
 * load is an atomicOr(p, 0): the race check (tests/gpu/emu/emu_race.c)
 * takes an atomic on the counter as the acquire that sees the fenced
 * publications made on it, and blocks run one after another there, so a
 * wait is met at once or never (the timeout ends it). No __shared__
 * declarations here (cu2emu rewrites only .cu files): the caller passes
 * its shared slot in.
 */
#ifndef MOSHID_CU_SYNC_CUH
#define MOSHID_CU_SYNC_CUH

/* The value at p, read with acquire semantics at device scope: loads
 * after it see what the writers released before they stored it. */
__device__ __forceinline__ unsigned cu_load_acquire(unsigned *p) {
#ifdef MOSHID_EMU_DEVICE_H
    return atomicOr(p, 0u);
#else
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#endif
}

/* Spins until *p >= n (one thread; the counter only grows while anyone
 * waits on it), backing off up to 256 ns between polls so that the
 * waiting blocks leave the memory system to the ones they wait for. */
__device__ __forceinline__ void cu_spin_until(unsigned *p, unsigned n) {
#ifdef MOSHID_EMU_DEVICE_H
    while (cu_load_acquire(p) < n) {
    }
#else
    unsigned ns = 8;
    while (cu_load_acquire(p) < n) {
        __nanosleep(ns);
        ns = ns < 256 ? 2 * ns : 256;
    }
#endif
}

/* Hints the 128-byte line at p into L2 (the device's prefetch.global.L2;
 * nothing on the emulator, which has no cache). */
__device__ __forceinline__ void cu_prefetch_l2(const void *p) {
#ifdef MOSHID_EMU_DEVICE_H
    (void)p;
#else
    asm volatile("prefetch.global.L2 [%0];" : : "l"(p));
#endif
}

/* The block's ticket: thread 0 takes the next value of *ticket and every
 * thread returns it. slot: one unsigned of the caller's shared memory. All
 * threads must call it (it synchronises). */
__device__ __forceinline__ unsigned cu_chain_ticket(unsigned *ticket, unsigned *slot) {
    if (threadIdx.x == 0) *slot = atomicAdd(ticket, 1u);
    __syncthreads();
    return *slot;
}

/* Waits until *done == n, every block of the stage before arrived (thread
 * 0 polls, then a barrier). All threads must call it. */
__device__ __forceinline__ void cu_chain_wait(unsigned *done, unsigned n) {
    if (threadIdx.x == 0) cu_spin_until(done, n);
    __syncthreads();
}

/* The block's arrival on its stage's counter, after all its threads'
 * stores (a barrier, then thread 0's fence and atomic). Returns in thread
 * 0 how many blocks had arrived before it (other threads: 0). All threads
 * must call it. */
__device__ __forceinline__ unsigned cu_chain_arrive(unsigned *done) {
    __syncthreads();
    unsigned before = 0;
    if (threadIdx.x == 0) {
        __threadfence();
        before = atomicAdd(done, 1u);
    }
    return before;
}

#endif
