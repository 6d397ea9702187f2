/* pcache.c - LRU persona snapshot cache with pins and references (see
 * pcache.h). One doubly linked list, most recently used first. */
#include "pcache.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

struct pc_entry {
    pc_entry *prev, *next;   /* LRU list: head = most recently used */
    uint8_t *key;
    size_t key_n;
    uint64_t hash;
    void *snap;
    size_t bytes;
    int refs, pins;
};

struct pc_cache {
    pc_entry *head, *tail;
    size_t budget;
    pc_free_fn free_fn;
    void *ud;
    pc_stats st;
};

pc_cache *pc_create(size_t budget, pc_free_fn free_fn, void *ud) {
    pc_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->budget = budget;
    c->free_fn = free_fn;
    c->ud = ud;
    return c;
}

static void unlink_entry(pc_cache *c, pc_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(pc_cache *c, pc_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    else c->tail = e;
    c->head = e;
}

/* Remove e from the cache and free it and its snapshot. */
static void drop(pc_cache *c, pc_entry *e) {
    unlink_entry(c, e);
    c->st.entries--;
    c->st.bytes -= e->bytes;
    if (e->pins > 0) {
        c->st.pinned--;
        c->st.pinned_bytes -= e->bytes;
    }
    if (c->free_fn) c->free_fn(c->ud, e->snap);
    free(e->key);
    free(e);
}

/* Evict least recently used unpinned, unreferenced entries while the
 * unpinned bytes exceed the budget (and while the cache holds more than
 * PC_MAX_ENTRIES - room entries). */
static void evict(pc_cache *c, int room) {
    pc_entry *e = c->tail;
    while (e && (c->st.bytes - c->st.pinned_bytes > c->budget || c->st.entries > PC_MAX_ENTRIES - room)) {
        pc_entry *prev = e->prev;
        if (e->pins == 0 && e->refs == 0) {
            drop(c, e);
            c->st.evictions++;
        }
        e = prev;
    }
}

void pc_free(pc_cache *c) {
    if (!c) return;
    while (c->head) drop(c, c->head);
    free(c);
}

pc_entry *pc_find(const pc_cache *c, const void *key, size_t n, uint64_t hash) {
    for (pc_entry *e = c->head; e; e = e->next)
        if (e->hash == hash && e->key_n == n && memcmp(e->key, key, n) == 0) return e;
    return NULL;
}

pc_entry *pc_lookup(pc_cache *c, const void *key, size_t n, uint64_t hash) {
    pc_entry *e = pc_find(c, key, n, hash);
    if (!e) {
        c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    unlink_entry(c, e);
    push_front(c, e);
    return e;
}

void pc_hit(pc_cache *c, pc_entry *e) {
    c->st.hits++;
    unlink_entry(c, e);
    push_front(c, e);
}

pc_entry *pc_insert(pc_cache *c, const void *key, size_t n, uint64_t hash, void *snap, size_t bytes, int refs,
                    int pins) {
    MS_ASSERT(refs >= 0 && pins >= 0);
    pc_entry *e = pc_find(c, key, n, hash);
    if (e) { /* the same prompt primed twice: keep the one we have */
        if (c->free_fn) c->free_fn(c->ud, snap);
        if (pins > 0 && e->pins == 0) {
            c->st.pinned++;
            c->st.pinned_bytes += e->bytes;
        }
        e->refs += refs;
        e->pins += pins;
        unlink_entry(c, e);
        push_front(c, e);
        return e;
    }
    if (pins == 0 && refs == 0 && bytes > c->budget) { /* would evict everything, then itself */
        if (c->free_fn) c->free_fn(c->ud, snap);
        c->st.evictions++;
        return NULL;
    }
    evict(c, 1);
    e = calloc(1, sizeof *e);
    uint8_t *k = malloc(n ? n : 1);
    if (!e || !k || c->st.entries >= PC_MAX_ENTRIES) {
        free(e);
        free(k);
        if (c->free_fn) c->free_fn(c->ud, snap);
        return NULL;
    }
    memcpy(k, key, n);
    e->key = k;
    e->key_n = n;
    e->hash = hash;
    e->snap = snap;
    e->bytes = bytes;
    e->refs = refs;
    e->pins = pins;
    push_front(c, e);
    c->st.entries++;
    c->st.inserts++;
    c->st.bytes += bytes;
    if (pins > 0) {
        c->st.pinned++;
        c->st.pinned_bytes += bytes;
    }
    evict(c, 0);
    /* evict() may have freed the new entry itself (larger than the budget
     * and nobody holds it): look for it again */
    for (pc_entry *x = c->head; x; x = x->next)
        if (x == e) return e;
    return NULL;
}

void pc_ref(pc_entry *e) { e->refs++; }

void pc_unref(pc_cache *c, pc_entry *e) {
    MS_ASSERT(e->refs > 0);
    if (--e->refs == 0) evict(c, 0);
}

void pc_pin(pc_cache *c, pc_entry *e) {
    if (e->pins++ == 0) {
        c->st.pinned++;
        c->st.pinned_bytes += e->bytes;
    }
}

void pc_unpin(pc_cache *c, pc_entry *e) {
    MS_ASSERT(e->pins > 0);
    if (--e->pins == 0) {
        c->st.pinned--;
        c->st.pinned_bytes -= e->bytes;
        evict(c, 0);
    }
}

void *pc_snap(const pc_entry *e) { return e->snap; }
size_t pc_bytes(const pc_entry *e) { return e->bytes; }
int pc_refs(const pc_entry *e) { return e->refs; }
int pc_pins(const pc_entry *e) { return e->pins; }

const void *pc_key(const pc_entry *e, size_t *n) {
    *n = e->key_n;
    return e->key;
}

void pc_set_budget(pc_cache *c, size_t budget) {
    c->budget = budget;
    evict(c, 0);
}

void pc_stats_get(const pc_cache *c, pc_stats *st) {
    *st = c->st;
    st->budget = c->budget;
}
