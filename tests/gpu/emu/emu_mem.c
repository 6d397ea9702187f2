/* emu_mem.c - the emulator's memory: device buffers between guard pages,
 * "written" shadow bytes, the checks of every load and store a kernel
 * makes, shared variables, fiber stacks and the fault signals.
 *
 * Every allocation (cudaMalloc, cudaMallocHost, each __shared__ variable,
 * dynamic shared memory) gets pages of its own in one reserved arena: a
 * PROT_NONE guard page, then its data placed against the end of its pages,
 * then the next allocation's guard page. Address space is never reused, so
 * a freed buffer stays unreadable (use after free). The kernel files are
 * compiled with -fsanitize=kernel-address and the hooks at the end of this
 * file (no sanitizer runtime): every load and store of a kernel comes here
 * first and is checked exactly (bounds, natural alignment, address space,
 * shadow "written" bytes); the guard pages catch what the hooks do not see
 * and are tested alone with emu_set_hooks(0).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_int.h"

#define E emu_g

#define ARENA_BYTES (1ull << 40)    /* reserved, not committed (gpu-model's lazy buffers: tens of GB) */
#define ARENA_MIN_BYTES (1ull << 30)
#define ALLOCS_MAX 65536
#define SIGSTACK_BYTES (256 * 1024)

static size_t pg;
static char *arena, *arena_end, *bump;
static emu_alloc *allocs;   /* in address order (the arena only grows) */
static int nallocs;
static emu_alloc *cache;    /* the last allocation a check hit */
static char *stacks;        /* EMU_MAX_THREADS x (guard page + stack) */
static int nstacks;
static emu_alloc **shared_vars;
static int nshared;

extern char __executable_start[], _end[];

static void on_signal(int sig, siginfo_t *si, void *uc);

void emu_mem_init(void) {
    pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t arena_bytes = ARENA_BYTES;   /* less where address space is limited (ulimit -v) */
    do {
        arena = mmap(NULL, arena_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    } while (arena == MAP_FAILED && (arena_bytes /= 4) >= ARENA_MIN_BYTES);
    size_t sbytes = (size_t)EMU_MAX_THREADS * (pg + EMU_STACK_BYTES);
    stacks = mmap(NULL, sbytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    allocs = calloc(ALLOCS_MAX, sizeof *allocs);
    shared_vars = calloc(ALLOCS_MAX, sizeof *shared_vars);
    if (arena == MAP_FAILED || stacks == MAP_FAILED || !allocs || !shared_vars) {
        fprintf(stderr, "emu: cannot reserve memory\n");
        abort();
    }
    arena_end = arena + arena_bytes;
    bump = arena;
    stack_t ss = {.ss_sp = malloc(SIGSTACK_BYTES), .ss_size = SIGSTACK_BYTES, .ss_flags = 0};
    if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) {
        perror("emu: sigaltstack");
        abort();
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
}

/* ---- fiber stacks ---------------------------------------------------------------- */

char *emu_fiber_stack_new(void);
char *emu_fiber_stack_new(void) {
    char *s = stacks + (size_t)nstacks * (pg + EMU_STACK_BYTES) + pg;
    if (mprotect(s, EMU_STACK_BYTES, PROT_READ | PROT_WRITE) != 0) {
        perror("emu: mprotect");
        abort();
    }
    nstacks++;
    return s;
}

/* 1 when p lies in a fiber's stack slot: *guard when in its guard page,
 * *owner the fiber (= stack) index. */
static int stack_slot(const void *p, int *guard, int *owner) {
    const char *c = p;
    size_t slot = pg + EMU_STACK_BYTES;
    if (c < stacks || c >= stacks + (size_t)nstacks * slot) return 0;
    *guard = (size_t)(c - stacks) % slot < pg;
    *owner = (int)((size_t)(c - stacks) / slot);
    return 1;
}

int emu_in_stack(const void *p, int *guard) {
    int owner;
    return stack_slot(p, guard, &owner);
}

/* ---- allocations ---------------------------------------------------------------------- */

emu_alloc *emu_alloc_new(size_t size, size_t align, emu_akind kind) {
    emu_init();
    if (nallocs == ALLOCS_MAX) return NULL;
    size_t pages = size ? (size + pg - 1) / pg : 1;
    char *lo = bump + pg, *hi = lo + pages * pg;
    char *ptr = (char *)((uintptr_t)(hi - size) & ~(uintptr_t)(align - 1));
    if (ptr < lo) {
        hi += pg;
        ptr = (char *)((uintptr_t)(hi - size) & ~(uintptr_t)(align - 1));
    }
    if (hi + pg > arena_end) return NULL;
    if (mprotect(lo, (size_t)(hi - lo), PROT_READ | PROT_WRITE) != 0) return NULL;
    int lazy = kind == EMU_A_DEVICE && emu_lazy_on();
    if (!lazy) memset(lo, EMU_POISON, (size_t)(hi - lo));
    emu_alloc *a = &allocs[nallocs];
    memset(a, 0, sizeof *a);
    a->lazy = lazy;
    a->lo = lo;
    a->hi = hi;
    a->ptr = ptr;
    a->size = size;
    a->kind = kind;
    a->id = nallocs++;
    if (kind != EMU_A_PINNED && !lazy) {
        a->shadow = calloc(size ? size : 1, 1);
        if (!a->shadow) return NULL;
    }
    bump = hi;
    return a;
}

void emu_alloc_free(emu_alloc *a) {
    if (a->freed) return;
    a->freed = 1;
    mprotect(a->lo, (size_t)(a->hi - a->lo), PROT_NONE);
    madvise(a->lo, (size_t)(a->hi - a->lo), MADV_DONTNEED);
    free(a->shadow);
    a->shadow = NULL;
    if (cache == a) cache = NULL;
}

/* cudaDeviceReset: every device and pinned buffer goes (shared variables
 * stay: they belong to the kernels). */
void emu_alloc_reset_all(void) {
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].kind == EMU_A_DEVICE || allocs[i].kind == EMU_A_PINNED) emu_alloc_free(&allocs[i]);
}

void emu_alloc_reset_block(emu_alloc *a) {
    memset(a->ptr, EMU_POISON, a->size);
    if (a->shadow) memset(a->shadow, 0, a->size);
    a->gen = E.block_gen;
}

/* The allocation whose pages or leading guard page hold p (for the last
 * allocation, its trailing guard page too), or NULL. */
static emu_alloc *region_of(const char *p) {
    if (p < arena || p >= bump + pg) return NULL;
    int lo = 0, hi = nallocs - 1;
    while (lo < hi) {   /* the last allocation whose guard page starts at or before p */
        int mid = (lo + hi + 1) / 2;
        if (allocs[mid].lo - pg <= p) lo = mid;
        else hi = mid - 1;
    }
    return nallocs ? &allocs[lo] : NULL;
}

emu_alloc *emu_alloc_at(const void *p, size_t n, int *span) {
    const char *c = p;
    emu_alloc *a = region_of(c);
    if (!a || c < a->ptr || c > a->ptr + a->size) return NULL;
    *span = (size_t)(a->ptr + a->size - c) >= n;
    return a;
}

void emu_shadow_set(const void *p, size_t n, int v) {
    int span = 0;
    emu_alloc *a = emu_alloc_at(p, n, &span);
    if (a && a->shadow && span) memset(a->shadow + ((const char *)p - a->ptr), v ? 1 : 0, n);
}

void emu_mem_set(void *p, int v, size_t n) {
    int span = 0;
    emu_alloc *a = emu_alloc_at(p, n, &span);
    if (!a || !a->lazy || !span || v != 0) {
        memset(p, v, n);
        emu_shadow_set(p, n, 1);
        return;
    }
    /* lazy, to 0: the partial pages at either end written, the whole ones handed back */
    char *c = p, *end = c + n;
    char *first = (char *)(((uintptr_t)c + pg - 1) & ~(uintptr_t)(pg - 1));
    char *last = (char *)((uintptr_t)end & ~(uintptr_t)(pg - 1));
    if (first >= last) {
        memset(c, 0, n);
        return;
    }
    memset(c, 0, (size_t)(first - c));
    if (madvise(first, (size_t)(last - first), MADV_DONTNEED) != 0) memset(first, 0, (size_t)(last - first));
    memset(last, 0, (size_t)(end - last));
}

void emu_shadow_copy(void *dst, const void *src, size_t n) {
    int s1 = 0, s2 = 0;
    emu_alloc *d = emu_alloc_at(dst, n, &s1), *s = emu_alloc_at(src, n, &s2);
    if (!d || !d->shadow || !s1) return;
    unsigned char *ds = d->shadow + ((char *)dst - d->ptr);
    if (s && s->shadow && s2) memmove(ds, s->shadow + ((const char *)src - s->ptr), n);
    else memset(ds, 1, n);
}

/* ---- checks ------------------------------------------------------------------------------ */

static const char *kind_word(emu_akind k) {
    return k == EMU_A_SHARED ? "shared variable" : k == EMU_A_DYNSHARED ? "dynamic shared memory" :
           k == EMU_A_PINNED ? "pinned host buffer" : "device buffer";
}

/* "hist[3]", "buffer #4 (+12)" */
void emu_describe(char *out, size_t len, const emu_alloc *a, const char *p) {
    long off = (long)(p - a->ptr);
    if (a->name && a->elem) snprintf(out, len, "%s[%ld] (byte %ld)", a->name, off / (long)a->elem, off);
    else snprintf(out, len, "%s #%d + %ld", kind_word(a->kind), a->id, off);
}

/* An access of n bytes (0: size unknown, from a signal) outside a. */
static void oob(const emu_alloc *a, const char *p, size_t n, int flags, const char *where, const char *how) {
    const char *op0 = flags & EMU_STORE ? (flags & EMU_LOAD ? "atomic" : "store") : "load";
    char op[48];
    if (n) snprintf(op, sizeof op, "%s of %zu bytes", op0, n);
    else snprintf(op, sizeof op, "%s", op0);
    if (!n) n = 1;
    char what[96];
    snprintf(what, sizeof what, "%s #%d", kind_word(a->kind), a->id);
    if (a->name) snprintf(what, sizeof what, "shared variable %s", a->name);
    if (a->freed)
        emu_fault_raise(EMU_FAULT_FREED, "%s at %p: %s (%zu bytes) was freed (%s)%s", op, (const void *)p, what,
                        a->size, where, how);
    if (p < a->ptr)
        emu_fault_raise(EMU_FAULT_OOB, "%s at %p: %ld bytes before the start of %s (%zu bytes) (%s)%s", op,
                        (const void *)p, (long)(a->ptr - p), what, a->size, where, how);
    emu_fault_raise(EMU_FAULT_OOB, "%s at %p: byte %ld of %s (%zu bytes), %ld bytes past its end (%s)%s", op,
                    (const void *)p, (long)(p - a->ptr), what, a->size, (long)(p + n - (a->ptr + a->size)), where, how);
}

/* The allocation an arena address belongs to: its own, or for a guard page
 * the nearer of the two neighbours. */
static emu_alloc *owner(const char *p) {
    emu_alloc *a = region_of(p);
    if (a && p < a->lo && a->id > 0) {
        emu_alloc *prev = &allocs[a->id - 1];
        if (p - (prev->ptr + prev->size) < a->ptr - p) a = prev;
    }
    return a;
}

void emu_check(const void *vp, size_t n, int flags, emu_site site, const void *pc) {
    const char *p = vp;
    E.stats.accesses++;
    emu_alloc *a = cache;
    if (!(a && p >= a->ptr && p + n <= a->ptr + a->size)) {
        char where[256];
        if (p >= arena && p < arena_end) {
            a = owner(p);
            if (!a || a->freed || p < a->ptr || p + n > a->ptr + a->size) {
                emu_where(where, sizeof where, site, pc);
                if (!a) emu_fault_raise(EMU_FAULT_OOB, "access to %p outside every buffer (%s)", vp, where);
                oob(a, p, n, flags, where, "");
            }
            cache = a;
        } else {
            int guard = 0, owner = -1;
            const char *space = NULL;
            if (stack_slot(p, &guard, &owner)) {
                if (guard) {
                    emu_where(where, sizeof where, site, pc);
                    emu_fault_raise(EMU_FAULT_STACK, "access to %p in the guard page below the thread's stack (%s)",
                                    vp, where);
                }
                if (owner != E.cur->lin) {   /* fiber i runs on stack i */
                    emu_where(where, sizeof where, site, pc);
                    emu_fault_raise(EMU_FAULT_SPACE,
                                    "%s of %zu bytes at %p: local memory of thread %d of the block, not this one's "
                                    "(local memory is private to a thread) (%s)",
                                    flags & EMU_STORE ? "store" : "load", n, vp, owner, where);
                }
                space = "local memory (the thread's stack)";
            } else if (p >= __executable_start && p < _end) {
                space = "a global variable";
            }
            if (!space) {
                emu_where(where, sizeof where, site, pc);
                emu_fault_raise(EMU_FAULT_HOST,
                                "%s of %zu bytes at %p: not device, shared or local memory (a host pointer%s?) (%s)",
                                flags & EMU_STORE ? "store" : "load", n, vp, p ? "" : ": NULL", where);
            }
            if ((flags & (EMU_LDG | EMU_ATOMIC)) && space[0] == 'l') {
                emu_where(where, sizeof where, site, pc);
                emu_fault_raise(EMU_FAULT_SPACE, "%s on %s at %p (%s)", flags & EMU_LDG ? "__ldg" : "atomic", space,
                                vp, where);
            }
            return;
        }
    }
    if (a->kind == EMU_A_DEVICE && a->dev != E.run_dev) {
        char where[256];
        emu_where(where, sizeof where, site, pc);
        emu_fault_raise(EMU_FAULT_OOB,
                        "%s of %zu bytes at %p: memory of device %d, the kernel runs on device %d (no peer access) (%s)",
                        flags & EMU_STORE ? "store" : "load", n, vp, a->dev, E.run_dev, where);
    }
    if ((n == 2 || n == 4 || n == 8 || n == 16) && ((uintptr_t)p & (n - 1))) {
        char where[256];
        emu_where(where, sizeof where, site, pc);
        char d[96];
        emu_describe(d, sizeof d, a, p);
        emu_fault_raise(EMU_FAULT_MISALIGNED, "%s%s of %zu bytes at %p (%s) is not %zu-byte aligned (%s)",
                        flags & EMU_ATOMIC ? "atomic " : flags & EMU_LDG ? "__ldg " : "",
                        flags & EMU_STORE ? "store" : "load", n, vp, d, n, where);
    }
    if ((flags & EMU_LDG) && (a->kind == EMU_A_SHARED || a->kind == EMU_A_DYNSHARED)) {
        char where[256];
        emu_where(where, sizeof where, site, pc);
        emu_fault_raise(EMU_FAULT_SPACE, "__ldg of %s: __ldg reads global memory only (%s)", a->name ? a->name :
                        "dynamic shared memory", where);
    }
    if (emu_traffic_on()) {
        emu_traffic_note(a, p, n, site.file ? (uint64_t)(uintptr_t)site.file * 131u + (uint64_t)site.line
                                            : (uint64_t)(uintptr_t)pc);
        if (a->kind == EMU_A_DEVICE && emu_traffic_stride() > 1) return;   /* sampled: skipped blocks wrote nothing */
    }
    /* the race check; a load (__ldg too) of a buffer no block stored to in this launch, by a block that has
     * executed no atomic, has nothing to check or note (most loads: weights, inputs): not even a call */
    if (E.race_check && a->kind == EMU_A_DEVICE &&
        ((flags & (EMU_STORE | EMU_ATOMIC)) || a->race_launch == E.stats.launches + 1 ||
         E.race_atomic_gen == E.block_gen))
        emu_race_access(a, p, n, flags, site, pc);
    if (!a->shadow) return;
    unsigned char *sh = a->shadow + (p - a->ptr);
    if (flags & EMU_LOAD)
        for (size_t i = 0; i < n; i++)
            if (!sh[i]) {
                char where[256], d[96];
                emu_where(where, sizeof where, site, pc);
                emu_describe(d, sizeof d, a, p + i);
                int shared = a->kind == EMU_A_SHARED || a->kind == EMU_A_DYNSHARED;
                emu_fault_raise(shared ? EMU_FAULT_UNINIT_SHARED : EMU_FAULT_UNINIT_GLOBAL,
                                "%sload of %zu bytes at %p reads %s, which %s (%s)", flags & EMU_ATOMIC ? "atomic " : "",
                                n, vp, d,
                                shared ? "no thread of this block has written" :
                                         "was never written (by a copy, a memset or a kernel)",
                                where);
            }
    if (flags & EMU_STORE) memset(sh, 1, n);
}

void emu_access(const void *p, size_t bytes, int flags, emu_site site) {
    if (E.in_kernel) emu_check(p, bytes, flags, site, __builtin_return_address(0));
}

void emu_vec_misaligned(const void *p, unsigned align, const char *type) {
    if (!E.in_kernel) return;
    char where[256];
    emu_site none = {NULL, 0};
    emu_where(where, sizeof where, none, __builtin_return_address(0));
    emu_fault_raise(EMU_FAULT_MISALIGNED, "vector load of a %s from %p, which is not %u-byte aligned (%s)", type, p,
                    align, where);
}

/* ---- shared variables ---------------------------------------------------------------------- */

void *emu_shared_var(const void *key, size_t bytes, size_t align, size_t elem, const char *name, emu_site site) {
    static emu_alloc *last;
    emu_alloc *a = last && last->key == key ? last : NULL;
    for (int i = 0; !a && i < nshared; i++)
        if (shared_vars[i]->key == key) a = shared_vars[i];
    if (!a) {
        a = emu_alloc_new(bytes, align, EMU_A_SHARED);
        if (!a) emu_fault_raise(EMU_FAULT_SIGNAL, "out of emulator memory for __shared__ %s (%s:%d)", name, site.file,
                                site.line);
        a->key = key;
        a->name = name;
        a->elem = elem;
        shared_vars[nshared++] = a;
    }
    last = a;
    if (a->gen != E.block_gen) emu_alloc_reset_block(a);
    return a->ptr;
}

void *emu_dyn_shared(emu_site site) {
    (void)site;
    if (!E.dyn) return (void *)(arena_end - 4096);   /* no dynamic shared memory: any access faults */
    return E.dyn->ptr;
}

/* ---- signals --------------------------------------------------------------------------------- */

static void on_signal(int sig, siginfo_t *si, void *ucv) {
    if (sig == SIGALRM) {   /* the launch's time is up */
        if (!E.in_kernel) {
            E.timed_out = 1;
            return;
        }
        E.in_kernel = 0;
        emu_fault_note(EMU_FAULT_TIMEOUT, E.cur, "the grid ran longer than %u ms: a thread that waits for another "
                       "by spinning never yields on the emulator", E.timeout_ms);
        siglongjmp(E.fault_jb, 1);
    }
    if (!E.in_kernel) {   /* not a kernel's: let it crash as it would */
        signal(sig, SIG_DFL);
        return;
    }
    E.in_kernel = 0;
    const void *pc = NULL;
#if defined(__x86_64__)
    pc = (const void *)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    pc = (const void *)((ucontext_t *)ucv)->uc_mcontext.pc;
#else
    (void)ucv;
#endif
    char where[256];
    emu_site none = {NULL, 0};
    emu_where(where, sizeof where, none, pc);
    const char *p = si->si_addr;
    if (sig == SIGSEGV || sig == SIGBUS) {
        int guard = 0;
        if (p >= arena && p < arena_end) {
            emu_alloc *a = owner(p);
            int write = 0;
#if defined(__x86_64__)
            write = (((ucontext_t *)ucv)->uc_mcontext.gregs[REG_ERR] & 2) != 0;   /* page fault error code */
#endif
            if (a) oob(a, p, 0, write ? EMU_STORE : EMU_LOAD, where, " (caught by a guard page)");
        }
        if (emu_in_stack(p, &guard) && guard)
            emu_fault_note(EMU_FAULT_STACK, E.cur, "stack overflow: %p is in the guard page below the thread's %d-KiB "
                           "stack (%s)", (const void *)p, EMU_STACK_BYTES / 1024, where);
        else
            emu_fault_note(EMU_FAULT_HOST, E.cur, "%s at %p: not device, shared or local memory (%s)",
                           sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", (const void *)p, where);
    } else {
        emu_fault_note(EMU_FAULT_SIGNAL, E.cur, "%s (%s)",
                       sig == SIGFPE ? "SIGFPE: integer division by zero (no trap on a GPU: garbage)" : "SIGILL", where);
    }
    siglongjmp(E.fault_jb, 1);
}

/* ---- the compiler's hooks (-fsanitize=kernel-address, recover mode) ---------------------------- */

#define EMU_HOOK(kind, n, flag)                                                               \
    void __asan_##kind##n##_noabort(uintptr_t p);                                           \
    void __asan_##kind##n##_noabort(uintptr_t p) {                                          \
        if (E.in_kernel && E.hooks) {                                                        \
            emu_site none = {NULL, 0};                                                       \
            emu_check((const void *)p, n, flag, none, __builtin_return_address(0));          \
        }                                                                                    \
    }
EMU_HOOK(load, 1, EMU_LOAD)
EMU_HOOK(load, 2, EMU_LOAD)
EMU_HOOK(load, 4, EMU_LOAD)
EMU_HOOK(load, 8, EMU_LOAD)
EMU_HOOK(load, 16, EMU_LOAD)
EMU_HOOK(store, 1, EMU_STORE)
EMU_HOOK(store, 2, EMU_STORE)
EMU_HOOK(store, 4, EMU_STORE)
EMU_HOOK(store, 8, EMU_STORE)
EMU_HOOK(store, 16, EMU_STORE)

void __asan_loadN_noabort(uintptr_t p, size_t n);
void __asan_loadN_noabort(uintptr_t p, size_t n) {
    emu_site none = {NULL, 0};
    if (E.in_kernel && E.hooks) emu_check((const void *)p, n, EMU_LOAD, none, __builtin_return_address(0));
}
void __asan_storeN_noabort(uintptr_t p, size_t n);
void __asan_storeN_noabort(uintptr_t p, size_t n) {
    emu_site none = {NULL, 0};
    if (E.in_kernel && E.hooks) emu_check((const void *)p, n, EMU_STORE, none, __builtin_return_address(0));
}
void __asan_handle_no_return(void);
void __asan_handle_no_return(void) {}
