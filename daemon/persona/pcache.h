/* pcache.h - the persona snapshot cache: entries keyed by bytes (a
 * prompt_key), each holding one opaque snapshot of a known size, kept in
 * least-recently-used order under a memory budget.
 *
 * Rules:
 *  - refs: a session restoring an entry holds a reference; an entry with
 *    references is never freed (eviction skips it; when it is released
 *    and the cache is over budget, it goes then);
 *  - pins: a configured persona pins its entry; pinned entries are never
 *    evicted and their bytes do not count against the budget (the budget
 *    bounds what on-demand prompts may hold); unpinned again (the persona
 *    was removed or changed), an entry is an ordinary one;
 *  - eviction: while the unpinned bytes exceed the budget, the least
 *    recently used unpinned entry without references is freed (through
 *    the free function given at create). An entry is "used" when it is
 *    inserted and when a lookup finds it.
 * Lookups are linear in the number of entries (a few hundred at most:
 * each is a whole primed K/V range).
 *
 * Threads: one thread (the daemon's loop thread) calls everything; the
 * free function runs on that thread too (the daemon hands the snapshot to
 * the engine thread from there).
 */
#ifndef MOSHID_PCACHE_H
#define MOSHID_PCACHE_H

#include <stddef.h>
#include <stdint.h>

/* Most entries a cache holds (inserts past it evict first, or fail). */
#define PC_MAX_ENTRIES 4096

typedef struct pc_cache pc_cache;
typedef struct pc_entry pc_entry;

/* pc_free_fn: release one snapshot (the entry is already gone). */
typedef void (*pc_free_fn)(void *ud, void *snap);

typedef struct pc_stats {
    int entries, pinned;            /* entries now; of them pinned */
    size_t bytes, pinned_bytes;     /* snapshot bytes now; of them pinned */
    size_t budget;
    uint64_t hits, misses, evictions, inserts;
} pc_stats;

/* pc_create: an empty cache with budget bytes for unpinned entries.
 * NULL when out of memory. */
pc_cache *pc_create(size_t budget, pc_free_fn free_fn, void *ud);
/* pc_free: free every entry (references or not: the owner has stopped
 * everything that used them) and the cache. */
void pc_free(pc_cache *c);

/* pc_lookup: the entry of key[0..n), counted as a hit (and made the most
 * recently used) or a miss; NULL on a miss. Takes no reference. */
pc_entry *pc_lookup(pc_cache *c, const void *key, size_t n, uint64_t hash);
/* pc_hit: count a hit on e found by other means (a configured persona's
 * entry) and make it the most recently used. */
void pc_hit(pc_cache *c, pc_entry *e);
/* pc_find: the same without counting or touching the LRU order. */
pc_entry *pc_find(const pc_cache *c, const void *key, size_t n, uint64_t hash);

/* pc_insert: a new entry for key (copied) holding snap (owned from now on)
 * of bytes, with refs references and pins pins already taken, then
 * eviction. When key is already cached, snap is freed at once and the
 * existing entry gets the references and pins. Returns the entry, or NULL
 * when out of memory or PC_MAX_ENTRIES pinned or referenced entries fill
 * the cache (snap is freed then). An unpinned, unreferenced entry larger
 * than the budget is freed at once: NULL then too. */
pc_entry *pc_insert(pc_cache *c, const void *key, size_t n, uint64_t hash, void *snap, size_t bytes, int refs,
                    int pins);

/* References (sessions restoring the entry) and pins (configured
 * personas). Releasing the last may free the entry (eviction). */
void pc_ref(pc_entry *e);
void pc_unref(pc_cache *c, pc_entry *e);
void pc_pin(pc_cache *c, pc_entry *e);
void pc_unpin(pc_cache *c, pc_entry *e);

/* The entry's snapshot and size (borrowed). */
void *pc_snap(const pc_entry *e);
size_t pc_bytes(const pc_entry *e);
int pc_refs(const pc_entry *e);
int pc_pins(const pc_entry *e);
/* pc_key: the entry's key bytes (borrowed). */
const void *pc_key(const pc_entry *e, size_t *n);

/* pc_set_budget: a new budget, then eviction. */
void pc_set_budget(pc_cache *c, size_t budget);
void pc_stats_get(const pc_cache *c, pc_stats *st);

#endif
