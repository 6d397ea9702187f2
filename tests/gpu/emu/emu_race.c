/* emu_race.c - the race check between the blocks of one launch
 * (emu_set_race_check, EMU_RACE=1; docs/cuda.md, "The emulator").
 *
 * Blocks run one after the other here, so two blocks' accesses to one
 * byte are never seen to race unless they are remembered. Per launch:
 *  - per byte of device memory stored to, written by an atomic or (once
 *    its block has executed an atomic) loaded: the block that stored it
 *    last and that block's fence count then, whether an atomic wrote it,
 *    and the blocks that loaded it since that store with their fence
 *    counts at their last load (race_tab, open addressing; the readers a
 *    chain in a pool);
 *  - per atomic address, its publications: a block's atomic after a
 *    __threadfence(), with the block's fence count then and a snapshot of
 *    what the block had acquired before that fence;
 *  - for the block running, what it has acquired: per block of the grid,
 *    the fence count below which that block's accesses are ordered before
 *    this block's (a vector clock indexed by block, stamped with the
 *    block generation so that it empties for free).
 * An access of block B to a byte that block A accessed (a store and a
 * load, or two stores) is ordered when B has acquired a publication of A
 * made after A's access: A's fence after it, then A's atomic on some X,
 * then B's atomic on X. Acquisition is transitive: acquiring a publication
 * acquires what its publisher had acquired before the publishing fence
 * (the PTX memory model's fences and gpu-scope release/acquire are
 * cumulative), so a chain of stages, each waiting for the previous one's
 * counter, orders the last stage after the first.
 *
 * Bounds: every table has a limit, and past one a check is dropped, never
 * made up (a false fault stops every test of a correct kernel; a missed
 * race is what the emulator had before this check): a byte beyond
 * RACE_PROBES probes goes unchecked; a byte whose readers overflow the
 * reader pool is not checked against them at its next store; a launch
 * whose publications or acquisitions overflow theirs (L.lost) stops
 * checking, for the rest of the launch, every pair that depends on them
 * (loads of others' stores, stores after others' loads or stores).
 * Launches without atomics never touch the publication tables; a load is
 * looked up only in a buffer stored to in this launch or once its block
 * has executed an atomic. Single host thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_int.h"

#define E emu_g

#define RACE_SLOTS (1u << 20)        /* bytes tracked per launch */
#define RACE_PROBES 32
#define RACE_NONE UINT32_MAX         /* no block */
#define RACE_ATOMIC 1u               /* race_ent.flags: an atomic of this launch wrote the byte */
#define RD_END (-1)                  /* no (more) readers */
#define RD_LOST (-2)                 /* readers not kept: the pool was full */
#define RD_MAX (1u << 22)            /* reader records per launch (12 bytes each) */
#define PUB_SLOTS (1u << 18)         /* atomic addresses per launch */
#define PUB_PROBES 64
#define PUB_MAX (1u << 22)           /* publications per launch */
#define SNAP_MAX (1u << 23)          /* snapshot entries per launch (8 bytes each) */
#define KNOW_MAX_BLOCKS (1u << 24)   /* blocks of a grid the running block's vector clock covers */
#define MEMO_ADDRS 8                 /* atomic addresses a block remembers having acquired up to */

typedef struct race_ent {
    uintptr_t addr;
    uint64_t launch;          /* 0 or an earlier launch: empty */
    uint32_t wblock, wgen;    /* the block that stored it last, its fence count then */
    int32_t rhead;            /* its readers since that store (L.rd), RD_END or RD_LOST */
    uint32_t flags;
} race_ent;
/* A block that loaded a byte after its first atomic, its fence count at its last such load. */
typedef struct rd_rec { uint32_t block, gen; int32_t next; } rd_rec;
typedef struct pub_head { uintptr_t addr; uint64_t launch; int32_t head; } pub_head;
/* A publication through one address: block's atomic with fence count gen (it publishes the block's accesses
 * made before its gen-th fence), and L.snap[off, off + n): what the block had acquired before that fence.
 * Newest first; a block's own are at the head while it runs (every other block's are older). */
typedef struct pub_rec { uint32_t block, gen, off, n; int32_t next; } pub_rec;
typedef struct snap_ent { uint32_t block, gen; } snap_ent;
/* What the running block has acquired of one block: gen; old, what it had before its last raise, which is
 * what it publishes until a fence follows that raise (at: its fence count at the raise). */
typedef struct know_ent { uint64_t stamp; uint32_t gen, old, at; } know_ent;

static race_ent *race_tab;
static pub_head *pub_heads;
static struct {
    uint64_t launch;          /* the launch the pools below are of */
    int lost;                 /* a publication or an acquisition did not fit: ordered pairs are not checked */
    rd_rec *rd;
    size_t nrd, caprd;
    pub_rec *pub;
    size_t npub, cappub;
    snap_ent *snap;
    size_t nsnap, capsnap;
} L;
static know_ent *know;        /* (capknow) indexed by block; valid where stamp is the running block's */
static size_t capknow;
static struct {
    uint64_t block_gen;       /* the block (E.block_gen) this state is of */
    uint32_t fence;           /* __threadfence calls by its threads */
    int atomics;              /* it has executed an atomic */
    uint32_t raised_at;       /* its fence count at the last raise of know */
    uint32_t *known;          /* the blocks with a know entry */
    size_t nknown, capknown;
    struct { uintptr_t addr; int32_t upto; } memo[MEMO_ADDRS];   /* acquired through addr up to pub upto */
    int nmemo;
} RB;

static uint64_t race_launch(void) { return E.stats.launches + 1; }   /* 0 marks an empty entry */
static uint32_t race_block(void) {
    const dim3 g = E.call->grid;
    return E.bidx.x + g.x * (E.bidx.y + g.y * E.bidx.z);
}
static uint32_t race_hash(uintptr_t key, unsigned slots) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & (slots - 1);
}

/* The per-launch pools and the running block's state start over when a
 * new launch or block first comes here. */
static void race_sync(void) {
    const uint64_t launch = race_launch();
    if (L.launch != launch) {
        L.launch = launch;
        L.lost = 0;
        L.nrd = L.npub = L.nsnap = 0;
    }
    if (RB.block_gen == E.block_gen) return;
    RB.block_gen = E.block_gen;
    RB.fence = 0;
    RB.atomics = 0;
    RB.raised_at = 0;
    RB.nknown = 0;
    RB.nmemo = 0;
}

/* Room for one more element in a growing array (*p, *cap elements of es
 * bytes, n used, at most max): doubled when full, first elements at the
 * start; 0 when it may not grow or the allocation failed (unchanged). */
static int room_for(void **p, size_t *cap, size_t n, size_t es, size_t first, size_t max) {
    if (n < *cap) return 1;
    if (n >= max) return 0;
    size_t c = *cap ? 2 * *cap : first;
    if (c > max) c = max;
    void *q = realloc(*p, c * es);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* The entry of byte key in this launch; absent: a new one if create, else
 * NULL (also when the probes run out: the byte goes unchecked). */
static race_ent *race_find(uintptr_t key, uint64_t launch, int create) {
    uint32_t h = race_hash(key, RACE_SLOTS);
    for (int k = 0; k < RACE_PROBES; k++, h = (h + 1) & (RACE_SLOTS - 1)) {
        race_ent *e = &race_tab[h];
        if (e->launch != launch) {
            if (!create) return NULL;
            *e = (race_ent){key, launch, RACE_NONE, 0, RD_END, 0};
            return e;
        }
        if (e->addr == key) return e;
    }
    return NULL;
}

static int race_tab_ready(void) { return race_tab || (race_tab = calloc(RACE_SLOTS, sizeof *race_tab)) != NULL; }

/* ---- happens-before ------------------------------------------------------------------------------ */

/* The fence count below which block b's accesses are ordered before the
 * running block's (acquired, directly or through others); 0: none. */
static uint32_t known(uint32_t b) {
    return b < capknow && know[b].stamp == RB.block_gen ? know[b].gen : 0;
}

/* The running block acquires block b's accesses before b's gen-th fence. */
static void know_raise(uint32_t b, uint32_t gen) {
    if (b >= capknow) {
        size_t c = capknow ? capknow : 1024;
        while (c <= b) c *= 2;
        know_ent *k = b < KNOW_MAX_BLOCKS ? realloc(know, c * sizeof *know) : NULL;
        if (!k) {
            L.lost = 1;
            return;
        }
        memset(k + capknow, 0, (c - capknow) * sizeof *k);   /* stamp 0: no block (block_gen starts at 1) */
        know = k;
        capknow = c;
    }
    know_ent *k = &know[b];
    if (k->stamp != RB.block_gen) {
        if (!room_for((void **)&RB.known, &RB.capknown, RB.nknown, sizeof *RB.known, 64, KNOW_MAX_BLOCKS)) {
            L.lost = 1;
            return;
        }
        RB.known[RB.nknown++] = b;
        *k = (know_ent){RB.block_gen, 0, 0, 0};
    }
    if (gen <= k->gen) return;
    if (k->at < RB.fence) k->old = k->gen;   /* a fence followed the previous raise: that value goes out from now */
    k->gen = gen;
    k->at = RB.fence;
    RB.raised_at = RB.fence;
}

/* What a publication of the running block with fence count f passes on of
 * block b: what it had acquired before its last fence. */
static uint32_t know_published(const know_ent *k, uint32_t f) { return k->at < f ? k->gen : k->old; }

/* The chain of publications through address p, NULL when the table is full. */
static pub_head *pub_find(uintptr_t p, uint64_t launch) {
    if (!pub_heads && !(pub_heads = calloc(PUB_SLOTS, sizeof *pub_heads))) return NULL;
    uint32_t h = race_hash(p, PUB_SLOTS);
    for (int k = 0; k < PUB_PROBES; k++, h = (h + 1) & (PUB_SLOTS - 1)) {
        pub_head *e = &pub_heads[h];
        if (e->launch != launch) *e = (pub_head){p, launch, -1};
        if (e->addr == p) return e;
    }
    return NULL;
}

/* An atomic of the running block on p (n bytes): its read acquires every
 * publication made through p before (other blocks', with what they had
 * acquired), then its write publishes the block's accesses fenced so far
 * and what it had acquired before that fence. */
static void race_atomic(emu_alloc *a, const char *p, size_t n) {
    race_sync();
    const uint32_t blk = race_block();
    const uint64_t launch = L.launch;
    RB.atomics = 1;
    E.race_atomic_gen = E.block_gen;   /* emu_check's shortcut: this block's loads are noted from now on */
    if (race_tab_ready()) {   /* the bytes an atomic wrote: a __ldg of them is stale (race_ldg) */
        a->race_launch = launch;
        for (size_t i = 0; i < n; i++) {
            race_ent *e = race_find((uintptr_t)(p + i), launch, 1);
            if (e) e->flags |= RACE_ATOMIC;
        }
    }
    pub_head *hd = pub_find((uintptr_t)p, launch);
    if (!hd) {
        L.lost = 1;
        return;
    }
    /* acquire: the publications through p newer than those this block acquired through it before (a poll
     * repeats its atomic: each sees only what is new, which while the block runs is its own) */
    int m = 0;
    while (m < RB.nmemo && RB.memo[m].addr != (uintptr_t)p) m++;
    const int32_t upto = m < RB.nmemo ? RB.memo[m].upto : -1;
    for (int32_t i = hd->head; i > upto; i = L.pub[i].next) {
        const pub_rec *r = &L.pub[i];
        if (r->block == blk) continue;
        know_raise(r->block, r->gen);
        for (uint32_t j = 0; j < r->n; j++)
            if (L.snap[r->off + j].block != blk) know_raise(L.snap[r->off + j].block, L.snap[r->off + j].gen);
    }
    if (m == RB.nmemo && m < MEMO_ADDRS) RB.memo[RB.nmemo++].addr = (uintptr_t)p;
    if (m < RB.nmemo) RB.memo[m].upto = hd->head;
    /* publish */
    const uint32_t f = RB.fence;
    if (f == 0) return;   /* nothing fenced: nothing published */
    pub_rec *own = hd->head >= 0 && L.pub[hd->head].block == blk ? &L.pub[hd->head] : NULL;
    if (own && RB.raised_at < own->gen) {   /* nothing acquired since its snapshot's fence: the snapshot stands */
        own->gen = f;
        return;
    }
    const size_t off = L.nsnap;
    for (size_t i = 0; i < RB.nknown; i++) {
        const uint32_t v = know_published(&know[RB.known[i]], f);
        if (!v) continue;
        if (!room_for((void **)&L.snap, &L.capsnap, L.nsnap, sizeof *L.snap, 1024, SNAP_MAX)) {
            L.lost = 1;
            return;
        }
        L.snap[L.nsnap++] = (snap_ent){RB.known[i], v};
    }
    if (own) {
        *own = (pub_rec){blk, f, (uint32_t)off, (uint32_t)(L.nsnap - off), own->next};
        return;
    }
    if (!room_for((void **)&L.pub, &L.cappub, L.npub, sizeof *L.pub, 1024, PUB_MAX)) {
        L.lost = 1;
        return;
    }
    L.pub[L.npub] = (pub_rec){blk, f, (uint32_t)off, (uint32_t)(L.nsnap - off), hd->head};
    hd->head = (int32_t)L.npub++;
}

void emu_threadfence(void) {
    if (!E.race_check || !E.in_kernel) return;
    race_sync();
    RB.fence++;
}

/* ---- stores and loads ---------------------------------------------------------------------------- */

/* "<op> <the byte>, which <what> (<where>)" */
static void race_fault(emu_fault_kind k, const emu_alloc *a, const char *p, emu_site site, const void *pc,
                       const char *op, const char *what) {
    char where[256], d[96];
    emu_where(where, sizeof where, site, pc);
    emu_describe(d, sizeof d, a, p);
    emu_fault_raise(k, "%s %s, which %s (%s)", op, d, what, where);
}

#define PUBLISHED_TO_THIS_BLOCK                                                                            \
    "published to this block (its __threadfence() after that, then an atomic that this block's atomic on " \
    "the same address came after, directly or through a chain of such publications)"

/* A plain store of the running block: another block's store or load of a
 * byte must be ordered before it. */
static void race_note(emu_alloc *a, const char *p, size_t n, emu_site site, const void *pc) {
    if (!race_tab_ready()) return;
    race_sync();
    const uint32_t blk = race_block();
    const uint64_t launch = L.launch;
    a->race_launch = launch;
    for (size_t i = 0; i < n; i++) {
        race_ent *e = race_find((uintptr_t)(p + i), launch, 1);
        if (!e) continue;
        char what[400];
        if (e->wblock != RACE_NONE && e->wblock != blk && !L.lost && !(known(e->wblock) > e->wgen)) {
            snprintf(what, sizeof what, "block #%u of this launch also stores to, its store not " PUBLISHED_TO_THIS_BLOCK
                     ": two blocks write one address in one launch, in no defined order", e->wblock);
            race_fault(EMU_FAULT_WRITE_RACE, a, p + i, site, pc, "store to", what);
        }
        for (int32_t r = e->rhead; r >= 0 && !L.lost; r = L.rd[r].next) {
            const rd_rec *rd = &L.rd[r];
            if (rd->block == blk || known(rd->block) > rd->gen) continue;
            snprintf(what, sizeof what, "block #%u of this launch read after an atomic, before this store, its read "
                     "not " PUBLISHED_TO_THIS_BLOCK ": read before this block arrived", rd->block);
            race_fault(EMU_FAULT_READ_RACE, a, p + i, site, pc, "store to", what);
        }
        e->wblock = blk;
        e->wgen = RB.fence;
        e->rhead = RD_END;   /* later stores are ordered after these reads through this one, or race with it */
    }
}

/* The running block loaded the byte of e after its first atomic. */
static void reader_add(race_ent *e, uint32_t blk) {
    if (e->rhead == RD_LOST) return;
    if (e->rhead >= 0 && L.rd[e->rhead].block == blk) {   /* its own record, the newest */
        L.rd[e->rhead].gen = RB.fence;
        return;
    }
    if (!room_for((void **)&L.rd, &L.caprd, L.nrd, sizeof *L.rd, 1024, RD_MAX)) {
        e->rhead = RD_LOST;
        return;
    }
    L.rd[L.nrd] = (rd_rec){blk, RB.fence, e->rhead};
    e->rhead = (int32_t)L.nrd++;
}

/* A plain load of the running block: another block's store to a byte must
 * be ordered before it. */
static void race_load(const emu_alloc *a, const char *p, size_t n, emu_site site, const void *pc) {
    race_sync();
    const uint64_t launch = L.launch;
    /* a buffer no block has stored to in this launch, read before any atomic: nothing to check or note
     * (most loads: weights, inputs) */
    if (a->race_launch != launch && !RB.atomics) return;
    if (!race_tab_ready()) return;
    const uint32_t blk = race_block();
    for (size_t i = 0; i < n; i++) {
        race_ent *e = race_find((uintptr_t)(p + i), launch, RB.atomics);
        if (!e) continue;
        if (e->wblock != RACE_NONE && e->wblock != blk && !L.lost && !(known(e->wblock) > e->wgen)) {
            char what[400];
            snprintf(what, sizeof what, "block #%u of this launch stored to, unpublished to this block (the store "
                     "not " PUBLISHED_TO_THIS_BLOCK ")", e->wblock);
            race_fault(EMU_FAULT_READ_RACE, a, p + i, site, pc, "load of", what);
        }
        if (RB.atomics) reader_add(e, blk);
    }
}

/* A __ldg (ld.global.nc) of the running block: the non-coherent path is
 * defined only for memory that is read-only for the whole kernel, so a
 * byte any block (this one too) stored to or wrote atomically in this
 * launch may come back stale, published or not. (A __ldg before the store,
 * in the order blocks run here, is not seen: other block orders show it.) */
static void race_ldg(const emu_alloc *a, const char *p, size_t n, emu_site site, const void *pc) {
    if (a->race_launch != race_launch() || !race_tab) return;   /* most __ldg: weights, inputs */
    race_sync();
    const uint32_t blk = race_block();
    for (size_t i = 0; i < n; i++) {
        const race_ent *e = race_find((uintptr_t)(p + i), L.launch, 0);
        if (!e || (e->wblock == RACE_NONE && !(e->flags & RACE_ATOMIC))) continue;
        char who[64], what[400];
        if (e->wblock == RACE_NONE) snprintf(who, sizeof who, "an atomic of this launch wrote");
        else if (e->wblock == blk) snprintf(who, sizeof who, "this block stored to in this launch");
        else snprintf(who, sizeof who, "block #%u of this launch stored to", e->wblock);
        snprintf(what, sizeof what, "%s: the non-coherent path (ld.global.nc) is defined only for memory read-only "
                 "for the whole kernel and may return a stale value, even after a publication (a plain load or "
                 "__ldcg reads it)", who);
        race_fault(EMU_FAULT_NC_STALE, a, p + i, site, pc, "__ldg of", what);
    }
}

void emu_race_access(emu_alloc *a, const char *p, size_t n, int flags, emu_site site, const void *pc) {
    if (flags & EMU_ATOMIC) {
        race_atomic(a, p, n);
    } else if (flags & EMU_STORE) {
        race_note(a, p, n, site, pc);
    } else {
        if (flags & EMU_LDG) race_ldg(a, p, n, site, pc);
        race_load(a, p, n, site, pc);
    }
}

void emu_set_race_check(int on) {
    emu_init();
    E.race_check = on != 0;
}
