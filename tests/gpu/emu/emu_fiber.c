/* emu_fiber.c - runs a grid block by block, one fiber per GPU thread, and
 * emulates what threads do together: __syncthreads (a cooperative barrier
 * that detects deadlock and divergence), the warp-synchronous ops with their
 * mask rules, and the reporting of faults.
 *
 * Fibers are ucontext contexts on their own stacks (a guard page below
 * each), started with makecontext/setcontext and afterwards switched with
 * _setjmp/_longjmp (no signal-mask system call: ~20 ns instead of ~400).
 * They are kept across blocks and launches: a fiber that finishes its
 * thread waits in fiber_exit and is resumed for the next block. A thread
 * runs until it waits (barrier, warp op) or exits; then the next runnable
 * thread in the block's resume order runs. No thread is ever preempted, so
 * everything between two waits is atomic; races are not emulated (the
 * device check runs compute-sanitizer's racecheck for those), but varying
 * the resume order (EMU_ORDER) shows results that depend on it.
 *
 * Faults are found as early as they are certain: a barrier reached after a
 * thread of the block exited, two barriers waited at together, a warp op
 * whose mask names a lane that exited, does not exist, waits at a barrier
 * or at another op; if nothing is runnable and threads still wait, that is
 * reported as a deadlock. A fault abandons the grid (siglongjmp back to
 * the scheduler) and makes the runtime's error sticky, as on a device.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "emu_int.h"

emu_state emu_g;
#define E emu_g

static void print_stats(void) {
    const emu_stats *t = &E.stats;
    fflush(stdout);
    fprintf(stderr,
            "emu: %llu launches, %llu blocks, %llu threads, %llu barriers, %llu warp ops, %llu checked accesses, "
            "%llu fiber switches, %llu faults\n",
            (unsigned long long)t->launches, (unsigned long long)t->blocks, (unsigned long long)t->threads,
            (unsigned long long)t->barriers, (unsigned long long)t->warp_ops, (unsigned long long)t->accesses,
            (unsigned long long)t->switches, (unsigned long long)t->faults);
}

/* ---- options, init --------------------------------------------------------------- */

void emu_init(void) {
    if (E.inited) return;
    E.inited = 1;
    E.order = EMU_ORDER_RANDOM;
    E.seed = 1;
    E.hooks = 1;
    const char *o = getenv("EMU_ORDER");
    if (o && !strcmp(o, "forward")) E.order = EMU_ORDER_FORWARD;
    if (o && !strcmp(o, "reverse")) E.order = EMU_ORDER_REVERSE;
    E.block_order = EMU_ORDER_FORWARD;
    const char *bo = getenv("EMU_BLOCKS");
    if (bo && !strcmp(bo, "reverse")) E.block_order = EMU_ORDER_REVERSE;
    if (bo && !strcmp(bo, "random")) E.block_order = EMU_ORDER_RANDOM;
    const char *s = getenv("EMU_SEED");
    if (s) E.seed = strtoull(s, NULL, 10);
    const char *rc = getenv("EMU_RACE");
    E.race_check = rc && rc[0] == '1';
    const char *as = getenv("EMU_STREAMS");
    E.async = !(as && !strcmp(as, "sync"));
    const char *t = getenv("EMU_TIMEOUT_S");
    E.timeout_ms = t ? (unsigned)strtoul(t, NULL, 10) * 1000u : EMU_TIMEOUT_MS;
    const char *st = getenv("EMU_STATS");
    if (st && st[0] == '1') atexit(print_stats);
    E.fib = calloc(EMU_MAX_THREADS, sizeof *E.fib);
    E.order_ix = calloc(EMU_MAX_THREADS, sizeof *E.order_ix);
    E.order_pos = calloc(EMU_MAX_THREADS, sizeof *E.order_pos);
    if (!E.fib || !E.order_ix || !E.order_pos) {
        fprintf(stderr, "emu: out of memory\n");
        abort();
    }
    emu_mem_init();
}

void emu_set_order(emu_order o) { emu_init(); E.order = o; }
void emu_set_block_order(emu_order o) { emu_init(); E.block_order = o; }
void emu_set_timeout_ms(unsigned ms) { emu_init(); E.timeout_ms = ms; }
void emu_set_quiet(int quiet) { emu_init(); E.quiet = quiet; }
void emu_set_hooks(int on) { emu_init(); E.hooks = on; }
void emu_inject_fault(unsigned n) { emu_init(); E.inject_after = n; }
const char *emu_last_kernel(void) { return E.launched; }
void emu_set_streams(int async) { emu_init(); E.async = async != 0; }
void emu_set_seed(uint64_t seed) {
    emu_init();
    E.seed = seed;
    E.sched = 0;   /* drawn again from the seed */
}
void emu_stats_get(emu_stats *s) { *s = E.stats; }

/* ---- faults ---------------------------------------------------------------------------- */

#define EMU_FAULT_NAME_(e, name, err) name,
static const char *fault_names[] = {EMU_FAULT_KINDS(EMU_FAULT_NAME_)};
#define EMU_FAULT_ERR_(e, name, err) err,
static const cudaError_t fault_errs[] = {EMU_FAULT_KINDS(EMU_FAULT_ERR_)};

const char *emu_fault_name(emu_fault_kind k) { return k < EMU_FAULT_NKINDS ? fault_names[k] : "?"; }
cudaError_t emu_fault_error(emu_fault_kind k) { return k < EMU_FAULT_NKINDS ? fault_errs[k] : cudaErrorUnknown; }

emu_fault_kind emu_fault_last(emu_fault *f) {
    emu_init();
    if (!E.sticky) emu_sync_all();   /* the pending work runs first: its fault is the one asked for */
    if (f) *f = E.fault;
    return E.fault.kind;
}

char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

void emu_where(char *out, size_t len, emu_site site, const void *pc) {
    if (site.file) {
        snprintf(out, len, "%s:%d", site.file, site.line);
        return;
    }
    Dl_info di;
    if (pc && dladdr(pc, &di) && di.dli_fname) {
        const char *sym = di.dli_sname;
        char *dem = NULL;
        int st = 0;
        if (sym) dem = __cxa_demangle(sym, NULL, NULL, &st);
        char *paren = dem ? strchr(dem, '(') : NULL;   /* the name without its parameter list */
        if (paren) *paren = '\0';
        snprintf(out, len, "pc %s+0x%lx in %s (addr2line -i -e %s 0x%lx)", dem ? dem : sym ? sym : "?",
                 (unsigned long)((const char *)pc - (const char *)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)),
                 di.dli_fname, di.dli_fname, (unsigned long)((const char *)pc - (const char *)di.dli_fbase));
        free(dem);
        return;
    }
    snprintf(out, len, "pc %p", pc);
}

void emu_vfault_note(emu_fault_kind k, const emu_fiber *f, const char *fmt, va_list ap) {
    emu_fault *r = &E.fault;
    memset(r, 0, sizeof *r);
    r->kind = k;
    snprintf(r->kernel, sizeof r->kernel, "%s", E.kname[0] ? E.kname : "(no kernel)");
    r->block = E.bidx;
    if (f) {
        r->thread = f->tid;
        r->warp = f->warp;
        r->lane = f->lane;
    } else {
        r->warp = r->lane = -1;
    }
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    E.sticky = emu_fault_error(k);
    emu_t_last = E.sticky;
    E.stats.faults++;
    if (!E.quiet) {
        fprintf(stderr, "emu: FAULT %s in %s block (%u,%u,%u) thread (%u,%u,%u) (warp %d, lane %d): %s\n",
                emu_fault_name(k), r->kernel, r->block.x, r->block.y, r->block.z, r->thread.x, r->thread.y,
                r->thread.z, r->warp, r->lane, r->msg);
        if (E.call && E.call->site.file)
            fprintf(stderr, "emu:   launched at %s:%d\n", E.call->site.file, E.call->site.line);
        if (E.async)
            fprintf(stderr, "emu:   streams asynchronous, their order drawn from EMU_SEED=%llu (EMU_STREAMS=sync runs "
                    "work in call order)\n", (unsigned long long)E.seed);
        fflush(stderr);
    }
}

void emu_fault_note(emu_fault_kind k, const emu_fiber *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emu_vfault_note(k, f, fmt, ap);
    va_end(ap);
}

void emu_fault_raise(emu_fault_kind k, const char *fmt, ...) {
    E.in_kernel = 0;
    va_list ap;
    va_start(ap, fmt);
    emu_vfault_note(k, E.cur, fmt, ap);
    va_end(ap);
    siglongjmp(E.fault_jb, 1);
}

void emu_fault_raise_at(emu_fault_kind k, const emu_fiber *f, const char *fmt, ...) {
    E.in_kernel = 0;
    va_list ap;
    va_start(ap, fmt);
    emu_vfault_note(k, f, fmt, ap);
    va_end(ap);
    siglongjmp(E.fault_jb, 1);
}

void emu_trap(emu_site site) {
    emu_fault_raise(EMU_FAULT_TRAP, "__trap() at %s:%d", site.file, site.line);
}

/* ---- fibers ------------------------------------------------------------------------------- */

static void fiber_entry(void);

/* switch_to: suspend from (NULL: the scheduler) and resume to (NULL: the
 * scheduler); returns when from is resumed. */
static void switch_to(emu_fiber *from, emu_fiber *to) {
    if (_setjmp(from ? from->jb : E.sched_jb)) return;
    E.stats.switches++;
    if (!to) _longjmp(E.sched_jb, 1);
    E.cur = to;
    if (!to->started) {
        to->started = 1;
        setcontext(&to->uc);
    }
    _longjmp(to->jb, 1);
}

/* The next runnable thread after from in the resume order, or NULL. */
static emu_fiber *pick_next(const emu_fiber *from) {
    int n = E.nthreads, p = from ? E.order_pos[from->lin] : -1;
    for (int k = 1; k <= n; k++) {
        emu_fiber *f = &E.fib[E.order_ix[(p + k) % n]];
        if (f->st == EMU_F_RUN) return f;
    }
    return NULL;
}

static void fiber_prepare(emu_fiber *f) {
    if (getcontext(&f->uc) != 0) {
        perror("emu: getcontext");
        abort();
    }
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = EMU_STACK_BYTES;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_entry, 0);
    f->started = 0;
}

char *emu_fiber_stack_new(void);   /* emu_mem.c */

/* Make sure n fibers exist; after a fault every fiber starts afresh. */
static void fibers_ready(int n, int fresh) {
    for (int i = 0; i < E.nfib_made; i++)
        if (fresh) fiber_prepare(&E.fib[i]);
    for (; E.nfib_made < n; E.nfib_made++) {
        emu_fiber *f = &E.fib[E.nfib_made];
        f->stack = emu_fiber_stack_new();
        fiber_prepare(f);
    }
}

static const char *wop_names[EMU_W_NOPS] = {
    "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__match_any_sync", "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync",
    "__reduce_xor_sync"};

static void fiber_exit(emu_fiber *f) {
    f->st = EMU_F_DONE;
    E.live--;
    E.exited++;
    if (E.bar_count > 0)
        emu_fault_raise(EMU_FAULT_BARRIER,
                        "thread exits while %d thread(s) wait at __syncthreads (%s:%d): not every thread of the "
                        "block reaches that barrier",
                        E.bar_count, E.bar_site.file, E.bar_site.line);
    const int base = f->warp * EMU_WARP;
    for (int j = 0; j < EMU_WARP && base + j < E.nthreads; j++) {
        const emu_fiber *g = &E.fib[base + j];
        if (g->st == EMU_F_WARP && (g->wmask >> f->lane & 1u))
            emu_fault_raise(EMU_FAULT_WARP,
                            "lane %d exits while lane %d waits for it in %s (%s:%d) with mask 0x%08x: an inactive "
                            "lane in the mask",
                            f->lane, g->lane, wop_names[g->wop], g->site.file, g->site.line, g->wmask);
    }
    switch_to(f, pick_next(f));
}

static void fiber_entry(void) {
    for (;;) {
        emu_fiber *f = E.cur;
        E.call->thunk(E.call->params);
        fiber_exit(f);   /* returns when resumed for another block */
    }
}

/* ---- built-in variables ------------------------------------------------------------------------ */

uint3 emu_thread_idx(void) { return E.cur->tid; }
uint3 emu_block_idx(void) { return E.bidx; }
dim3 emu_block_dim(void) { return E.call->block; }
dim3 emu_grid_dim(void) { return E.call->grid; }

long long emu_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ---- __syncthreads -------------------------------------------------------------------------------- */

static int same_site(emu_site a, emu_site b) {
    return a.line == b.line && (a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file)));
}

int emu_syncthreads(int kind, int pred, emu_site site) {
    emu_fiber *f = E.cur;
    if (E.exited > 0)
        emu_fault_raise(EMU_FAULT_BARRIER,
                        "__syncthreads (%s:%d) reached after %d thread(s) of the block exited: every thread must "
                        "reach it (%d of %d live)",
                        site.file, site.line, E.exited, E.live, E.nthreads);
    if (E.bar_count > 0 && !same_site(site, E.bar_site))
        emu_fault_raise(EMU_FAULT_BARRIER,
                        "threads wait at different barriers: this one at %s:%d, thread (%u,%u,%u) and %d other(s) "
                        "at %s:%d (a __syncthreads in divergent code)",
                        site.file, site.line, E.bar_first->tid.x, E.bar_first->tid.y, E.bar_first->tid.z,
                        E.bar_count - 1, E.bar_site.file, E.bar_site.line);
    const int base = f->warp * EMU_WARP;
    for (int j = 0; j < EMU_WARP && base + j < E.nthreads; j++) {
        const emu_fiber *g = &E.fib[base + j];
        if (g->st == EMU_F_WARP && (g->wmask >> f->lane & 1u))
            emu_fault_raise(EMU_FAULT_WARP,
                            "lane %d goes to __syncthreads (%s:%d) while lane %d waits for it in %s (%s:%d) with mask "
                            "0x%08x: an inactive lane in the mask (deadlock)",
                            f->lane, site.file, site.line, g->lane, wop_names[g->wop], g->site.file, g->site.line,
                            g->wmask);
    }
    if (E.bar_count == 0) {
        E.bar_site = site;
        E.bar_first = f;
    }
    f->st = EMU_F_BAR;
    f->site = site;
    f->pred = pred;
    if (++E.bar_count < E.nthreads) {
        switch_to(f, pick_next(f));
        return E.bar_result;
    }
    int cnt = 0;   /* the last thread releases the block */
    for (int i = 0; i < E.nthreads; i++) {
        cnt += E.fib[i].pred != 0;
        E.fib[i].st = EMU_F_RUN;
    }
    E.bar_count = 0;
    E.bar_result = kind == 1 ? cnt : kind == 2 ? cnt == E.nthreads : kind == 3 ? cnt > 0 : 0;
    E.stats.barriers++;
    return E.bar_result;
}

/* ---- warp ops ---------------------------------------------------------------------------------------- */

static int is_shfl(emu_wop op) { return op >= EMU_W_SHFL_IDX && op <= EMU_W_SHFL_XOR; }

/* Compute the op for every lane of mask (all arrived) and release them. */
static void warp_complete(emu_fiber *lanes, unsigned mask, emu_wop op) {
    uint64_t ballot = 0, acc = 0;
    int first = 1, all_eq = 1;
    uint64_t v0 = 0;
    for (int j = 0; j < EMU_WARP; j++) {
        if (!(mask >> j & 1u)) continue;
        const emu_fiber *g = &lanes[j];
        uint32_t v = (uint32_t)g->wval;
        if (g->wval) ballot |= 1ull << j;
        if (first) {
            v0 = g->wval;
            acc = v;
        } else {
            all_eq &= g->wval == v0;
            switch (op) {
            case EMU_W_ADD: acc = (uint32_t)(acc + v); break;
            case EMU_W_MIN_U: acc = v < (uint32_t)acc ? v : acc; break;
            case EMU_W_MAX_U: acc = v > (uint32_t)acc ? v : acc; break;
            case EMU_W_MIN_S: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
            case EMU_W_MAX_S: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
            case EMU_W_AND: acc &= v; break;
            case EMU_W_OR: acc |= v; break;
            case EMU_W_XOR: acc ^= v; break;
            default: break;
            }
        }
        first = 0;
    }
    for (int l = 0; l < EMU_WARP; l++) {
        if (!(mask >> l & 1u)) continue;
        emu_fiber *g = &lanes[l];
        uint64_t r = 0;
        if (is_shfl(op)) {
            /* PTX shfl.sync: c = ((32 - width) << 8) | clamp */
            const int b = g->warg, seg = (32 - g->wwidth) & 0x1F;
            const int cval = op == EMU_W_SHFL_UP ? 0 : 0x1F;
            const int maxl = (l & seg) | (cval & ~seg), minl = l & seg;
            int j = l, ok = 0;
            switch (op) {
            case EMU_W_SHFL_UP: j = l - b; ok = j >= maxl; break;
            case EMU_W_SHFL_DOWN: j = l + b; ok = j <= maxl; break;
            case EMU_W_SHFL_XOR: j = l ^ b; ok = j <= maxl; break;
            default: j = minl | (b & 0x1F & ~seg); ok = j <= maxl; break;
            }
            if (!ok) j = l;
            if (!(mask >> j & 1u))
                emu_fault_raise_at(EMU_FAULT_WARP, g,
                                "%s (%s:%d): lane %d reads lane %d, which is not in the mask 0x%08x (an inactive "
                                "lane: its value is undefined)",
                                wop_names[op], g->site.file, g->site.line, l, j, mask);
            r = lanes[j].wval;
        } else {
            switch (op) {
            case EMU_W_BALLOT: r = ballot; break;
            case EMU_W_ANY: r = ballot != 0; break;
            case EMU_W_ALL: r = ballot == mask; break;
            case EMU_W_MATCH_ANY:
                for (int j = 0; j < EMU_WARP; j++)
                    if ((mask >> j & 1u) && lanes[j].wval == g->wval) r |= 1ull << j;
                break;
            case EMU_W_MATCH_ALL:
                r = all_eq ? mask : 0;
                g->wpred = all_eq;
                break;
            case EMU_W_SYNC: break;
            default: r = acc; break;
            }
        }
        g->wres = r;
    }
    for (int l = 0; l < EMU_WARP; l++)
        if (mask >> l & 1u) lanes[l].st = EMU_F_RUN;
    E.stats.warp_ops++;
}

uint64_t emu_warp(emu_wop op, unsigned mask, uint64_t value, int vbytes, int arg, int width, int *pred,
                  emu_site site) {
    (void)vbytes;
    emu_fiber *f = E.cur;
    const int base = f->warp * EMU_WARP;
    const int nlanes = E.nthreads - base < EMU_WARP ? E.nthreads - base : EMU_WARP;
    emu_fiber *lanes = &E.fib[base];
    if (!(mask >> f->lane & 1u))
        emu_fault_raise(EMU_FAULT_WARP, "%s (%s:%d): the calling lane %d is not in its mask 0x%08x", wop_names[op],
                        site.file, site.line, f->lane, mask);
    if (is_shfl(op) && (width < 1 || width > EMU_WARP || (width & (width - 1))))
        emu_fault_raise(EMU_FAULT_WARP, "%s (%s:%d): width %d is not a power of two in [1, 32]", wop_names[op],
                        site.file, site.line, width);
    f->wop = op;
    f->wmask = mask;
    f->warg = arg;
    f->wwidth = width;
    f->wval = value;
    f->wpred = 0;
    f->site = site;
    f->st = EMU_F_WARP;
    for (int j = 0; j < nlanes; j++) {   /* lanes already waiting for this one must agree with it */
        const emu_fiber *g = &lanes[j];
        if (g != f && g->st == EMU_F_WARP && (g->wmask >> f->lane & 1u) && (g->wop != op || g->wmask != mask))
            emu_fault_raise(EMU_FAULT_WARP,
                            "lanes of one mask disagree: lane %d is in %s mask 0x%08x (%s:%d), lane %d waits for it in "
                            "%s mask 0x%08x (%s:%d)",
                            f->lane, wop_names[op], mask, site.file, site.line, j, wop_names[g->wop], g->wmask,
                            g->site.file, g->site.line);
    }
    int all = 1;
    for (int j = 0; j < EMU_WARP; j++) {
        if (!(mask >> j & 1u)) continue;
        if (j >= nlanes)
            emu_fault_raise(EMU_FAULT_WARP,
                            "%s (%s:%d): lane %d in the mask 0x%08x does not exist (the block has %d threads: this "
                            "warp has %d lanes): an inactive lane in the mask",
                            wop_names[op], site.file, site.line, j, mask, E.nthreads, nlanes);
        const emu_fiber *g = &lanes[j];
        if (g->st == EMU_F_DONE)
            emu_fault_raise(EMU_FAULT_WARP, "%s (%s:%d): lane %d in the mask 0x%08x has exited: an inactive lane in the mask",
                            wop_names[op], site.file, site.line, j, mask);
        if (g->st == EMU_F_BAR)
            emu_fault_raise(EMU_FAULT_WARP,
                            "%s (%s:%d): lane %d in the mask 0x%08x waits at __syncthreads (%s:%d): an inactive lane "
                            "in the mask (deadlock)",
                            wop_names[op], site.file, site.line, j, mask, g->site.file, g->site.line);
        if (g->st == EMU_F_WARP && (g->wop != op || g->wmask != mask || (is_shfl(op) && g->wwidth != width)))
            emu_fault_raise(EMU_FAULT_WARP,
                            "lanes of one mask disagree: lane %d is in %s mask 0x%08x (%s:%d), lane %d in %s mask "
                            "0x%08x (%s:%d)",
                            f->lane, wop_names[op], mask, site.file, site.line, j, wop_names[g->wop], g->wmask,
                            g->site.file, g->site.line);
        if (g->st == EMU_F_RUN) all = 0;
    }
    if (all) warp_complete(lanes, mask, op);
    else switch_to(f, pick_next(f));
    if (pred) *pred = f->wpred;
    return f->wres;
}

/* ---- grids ---------------------------------------------------------------------------------------------- */

/* The kernel's name from the launcher's __PRETTY_FUNCTION__ ("... [with
 * auto F = matvec_bf16_vec<8>; A = {...}]"). */
void emu_kernel_name(char *out, size_t len, const char *pretty) {
    const char *p = pretty ? strstr(pretty, "F = ") : NULL;
    if (!p) {
        snprintf(out, len, "%s", pretty ? pretty : "?");
        return;
    }
    p += 4;
    size_t n = strcspn(p, ";]");
    snprintf(out, len, "%.*s", (int)n, p);
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void make_order(int n, uint64_t block_no) {
    for (int i = 0; i < n; i++) E.order_ix[i] = E.order == EMU_ORDER_REVERSE ? n - 1 - i : i;
    if (E.order == EMU_ORDER_RANDOM) {
        uint64_t s = mix(E.seed * 0x9E3779B97F4A7C15ull + E.stats.launches * 0x632BE59BD9B4E019ull + block_no);
        for (int i = n - 1; i > 0; i--) {
            s = mix(s + 0x9E3779B97F4A7C15ull);
            int j = (int)(s % (uint64_t)(i + 1));
            int t = E.order_ix[i];
            E.order_ix[i] = E.order_ix[j];
            E.order_ix[j] = t;
        }
    }
    for (int i = 0; i < n; i++) E.order_pos[E.order_ix[i]] = i;
}

/* The linear index of the i-th block to run of a grid of n (after
 * block_order_begin for this launch). */
static int block_order_begin(uint64_t n) {
    if (E.block_order != EMU_ORDER_RANDOM) return 0;
    if (n > E.block_perm_n) {
        uint32_t *p = realloc(E.block_perm, sizeof *p * n);
        if (!p) return -1;
        E.block_perm = p;
        E.block_perm_n = n;
    }
    for (uint64_t i = 0; i < n; i++) E.block_perm[i] = (uint32_t)i;
    uint64_t s = mix(E.seed * 0xD1B54A32D192ED03ull + E.stats.launches * 0x9E3779B97F4A7C15ull);
    for (uint64_t i = n - 1; i > 0 && n > 1; i--) {
        s = mix(s + 0x9E3779B97F4A7C15ull);
        uint64_t j = s % (i + 1);
        uint32_t t = E.block_perm[i];
        E.block_perm[i] = E.block_perm[j];
        E.block_perm[j] = t;
    }
    return 0;
}
static uint64_t block_order_at(uint64_t i, uint64_t n) {
    return E.block_order == EMU_ORDER_REVERSE ? n - 1 - i : E.block_order == EMU_ORDER_RANDOM ? E.block_perm[i] : i;
}

/* Run one block; 0, or -1 after a fault. */
static int run_block(const emu_call *c, uint3 b, uint64_t block_no, int *fresh) {
    const int n = (int)(c->block.x * c->block.y * c->block.z);
    E.bidx = b;
    E.block_gen++;
    if (E.dyn) emu_alloc_reset_block(E.dyn);
    fibers_ready(n, *fresh);
    *fresh = 0;
    for (int i = 0; i < n; i++) {
        emu_fiber *f = &E.fib[i];
        f->lin = i;
        f->tid.x = (unsigned)i % c->block.x;
        f->tid.y = (unsigned)i / c->block.x % c->block.y;
        f->tid.z = (unsigned)i / (c->block.x * c->block.y);
        f->warp = i / EMU_WARP;
        f->lane = i % EMU_WARP;
        f->st = EMU_F_RUN;
        f->pred = 0;
    }
    E.nthreads = E.live = n;
    E.exited = 0;
    E.bar_count = 0;
    make_order(n, block_no);
    E.stats.blocks++;
    E.stats.threads += (uint64_t)n;
    if (sigsetjmp(E.fault_jb, 1)) {
        E.in_kernel = 0;
        *fresh = 1;
        return -1;
    }
    E.in_kernel = 1;
    switch_to(NULL, &E.fib[E.order_ix[0]]);
    E.in_kernel = 0;
    if (E.live > 0) {   /* nothing runnable, threads still wait */
        const emu_fiber *w = NULL;
        int nbar = 0, nwarp = 0;
        for (int i = 0; i < n; i++) {
            const emu_fiber *f = &E.fib[i];
            nbar += f->st == EMU_F_BAR;
            nwarp += f->st == EMU_F_WARP;
            if (!w && f->st == EMU_F_WARP) w = f;
        }
        if (!w)
            for (int i = 0; i < n && !w; i++)
                if (E.fib[i].st == EMU_F_BAR) w = &E.fib[i];
        emu_fault_note(w && w->st == EMU_F_WARP ? EMU_FAULT_WARP : EMU_FAULT_BARRIER, w,
                       "deadlock: %d thread(s) wait at barriers, %d in warp ops, %d exited; this one waits in %s (%s:%d)",
                       nbar, nwarp, E.exited, w && w->st == EMU_F_WARP ? wop_names[w->wop] : "__syncthreads",
                       w ? w->site.file : "?", w ? w->site.line : 0);
        *fresh = 1;
        return -1;
    }
    return 0;
}

static void timer_arm(unsigned ms) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (long)(ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}

int emu_run_grid(const emu_call *c) {
    static int fresh = 1;
    E.call = c;
    E.timed_out = 0;
    emu_kernel_name(E.kname, sizeof E.kname, c->pretty);
    E.stats.launches++;
    E.dyn = NULL;
    if (c->shmem) E.dyn = emu_alloc_new(c->shmem, 16, EMU_A_DYNSHARED);
    int rc = 0;
    uint64_t no = 0;
    if (E.timeout_ms) timer_arm(E.timeout_ms);
    emu_traffic_launch_begin();
    const uint64_t nb = (uint64_t)c->grid.x * c->grid.y * c->grid.z;
    if (block_order_begin(nb)) {
        emu_fault_note(EMU_FAULT_TIMEOUT, NULL, "out of memory for a block order of %llu blocks",
                       (unsigned long long)nb);
        rc = -1;
    }
    for (; no < nb && !rc; no++) {
        const uint64_t lin = block_order_at(no, nb);
        uint3 b = {(unsigned)(lin % c->grid.x), (unsigned)(lin / c->grid.x % c->grid.y),
                   (unsigned)(lin / ((uint64_t)c->grid.x * c->grid.y))};
        if (emu_traffic_skip_block(no)) continue;   /* sampling for the performance model */
        rc = run_block(c, b, no, &fresh);
        if (!rc) emu_traffic_block_done();
        if (!rc && E.timed_out) {   /* the alarm came between two blocks */
            emu_fault_note(EMU_FAULT_TIMEOUT, NULL, "the grid ran longer than %u ms", E.timeout_ms);
            rc = -1;
        }
    }
    if (E.timeout_ms) timer_arm(0);
    emu_traffic_launch_end(c);
    if (E.dyn) emu_alloc_free(E.dyn);
    E.dyn = NULL;
    E.call = NULL;
    return rc;
}
