/* check_pcache.c - the persona snapshot cache: LRU eviction under the
 * budget, pins (configured personas), references (restores in progress),
 * duplicate inserts, budget changes, the entry limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "pcache.h"

/* The snapshots are ints: freed ones are recorded in order. */
static int freed[PC_MAX_ENTRIES + 16], nfreed;

static void free_snap(void *ud, void *snap) {
    (void)ud;
    freed[nfreed++] = *(int *)snap;
    free(snap);
}

static void *snap(int v) {
    int *p = malloc(sizeof *p);
    *p = v;
    return p;
}

static pc_entry *put(pc_cache *c, const char *key, int v, size_t bytes, int refs, int pins) {
    return pc_insert(c, key, strlen(key), (uint64_t)key[0], snap(v), bytes, refs, pins);
}

static pc_entry *get(pc_cache *c, const char *key) { return pc_lookup(c, key, strlen(key), (uint64_t)key[0]); }

START_TEST(test_lru_budget) {
    nfreed = 0;
    pc_cache *c = pc_create(300, free_snap, NULL);
    ck_assert_ptr_nonnull(put(c, "a", 1, 100, 0, 0));
    ck_assert_ptr_nonnull(put(c, "b", 2, 100, 0, 0));
    ck_assert_ptr_nonnull(put(c, "c", 3, 100, 0, 0));
    ck_assert_int_eq(nfreed, 0);
    ck_assert_ptr_nonnull(get(c, "a"));   /* a is now the most recently used */
    ck_assert_ptr_nonnull(put(c, "d", 4, 100, 0, 0));
    ck_assert_int_eq(nfreed, 1);
    ck_assert_int_eq(freed[0], 2);        /* b, the least recently used, went */
    ck_assert_ptr_null(get(c, "b"));
    pc_stats st;
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.entries, 3);
    ck_assert_uint_eq(st.bytes, 300);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.evictions, 1);
    /* a larger entry evicts as many as needed, oldest first */
    ck_assert_ptr_nonnull(put(c, "e", 5, 250, 0, 0));
    ck_assert_int_eq(nfreed, 4);
    ck_assert_int_eq(freed[1], 3);
    ck_assert_int_eq(freed[2], 1);
    ck_assert_int_eq(freed[3], 4);
    /* an entry larger than the budget that nobody holds is not kept */
    ck_assert_ptr_null(put(c, "f", 6, 301, 0, 0));
    ck_assert_int_eq(nfreed, 5);
    ck_assert_int_eq(freed[4], 6);
    ck_assert_ptr_nonnull(get(c, "e"));
    /* budget 0 keeps nothing unheld; a lower budget evicts at once */
    pc_set_budget(c, 0);
    ck_assert_int_eq(nfreed, 6);
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.entries, 0);
    ck_assert_uint_eq(st.bytes, 0);
    pc_free(c);
}
END_TEST

START_TEST(test_pins) {
    nfreed = 0;
    pc_cache *c = pc_create(200, free_snap, NULL);
    pc_entry *p = put(c, "p", 1, 1000, 0, 1); /* pinned: over the budget, kept */
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(put(c, "a", 2, 100, 0, 0)); /* pinned bytes do not count */
    ck_assert_ptr_nonnull(put(c, "b", 3, 100, 0, 0));
    ck_assert_int_eq(nfreed, 0);
    pc_stats st;
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.pinned, 1);
    ck_assert_uint_eq(st.pinned_bytes, 1000);
    ck_assert_uint_eq(st.bytes, 1200);
    ck_assert_ptr_nonnull(put(c, "c", 4, 100, 0, 0)); /* a goes; p stays although older */
    ck_assert_int_eq(nfreed, 1);
    ck_assert_int_eq(freed[0], 2);
    /* two personas pin the same entry: it stays until both unpin */
    ck_assert_ptr_eq(put(c, "p", 9, 1000, 0, 1), p); /* same key: the new snapshot is dropped, p used */
    ck_assert_int_eq(nfreed, 2);
    ck_assert_int_eq(freed[1], 9);
    ck_assert_int_eq(pc_pins(p), 2);
    pc_unpin(c, p);
    ck_assert_int_eq(nfreed, 2);
    pc_unpin(c, p); /* an ordinary entry now: 1200 unpinned bytes, the least recently used go first */
    ck_assert_int_eq(nfreed, 5);
    ck_assert_int_eq(freed[2], 3);
    ck_assert_int_eq(freed[3], 4);
    ck_assert_int_eq(freed[4], 1);
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.entries, 0);
    ck_assert_int_eq(st.pinned, 0);
    ck_assert_uint_eq(st.pinned_bytes, 0);
    /* pinning an entry takes it out of the budget */
    pc_entry *q = put(c, "q", 5, 150, 0, 0);
    ck_assert_ptr_nonnull(q);
    pc_pin(c, q);
    ck_assert_ptr_nonnull(put(c, "x", 6, 100, 0, 0));
    ck_assert_ptr_nonnull(put(c, "y", 7, 100, 0, 0));
    ck_assert_int_eq(nfreed, 5);
    ck_assert_ptr_nonnull(put(c, "z", 8, 100, 0, 0));
    ck_assert_int_eq(nfreed, 6);
    ck_assert_int_eq(freed[5], 6);
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.pinned, 1);
    ck_assert_uint_eq(st.pinned_bytes, 150);
    pc_free(c);
    ck_assert_int_eq(nfreed, 9); /* pc_free frees the rest */
}
END_TEST

START_TEST(test_refs) {
    nfreed = 0;
    pc_cache *c = pc_create(100, free_snap, NULL);
    pc_entry *a = put(c, "a", 1, 100, 1, 0); /* a session restores it */
    ck_assert_ptr_nonnull(a);
    /* over budget, but a is held: b (unheld, newer) is not kept */
    ck_assert_ptr_null(put(c, "b", 2, 100, 0, 0));
    ck_assert_int_eq(nfreed, 1);
    ck_assert_int_eq(freed[0], 2);
    /* a larger-than-budget entry held by waiting sessions is kept for them */
    pc_entry *big = put(c, "g", 3, 500, 2, 0);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(nfreed, 1);
    pc_ref(a);
    pc_unref(c, a);
    pc_unref(c, a); /* last reference of a: over budget, a is the oldest unheld */
    ck_assert_int_eq(nfreed, 2);
    ck_assert_int_eq(freed[1], 1);
    pc_unref(c, big);
    ck_assert_int_eq(nfreed, 2);
    pc_unref(c, big); /* released: too big for the budget, freed now */
    ck_assert_int_eq(nfreed, 3);
    ck_assert_int_eq(freed[2], 3);
    pc_stats st;
    pc_stats_get(c, &st);
    ck_assert_int_eq(st.entries, 0);
    /* a pinned entry a session holds, unpinned (persona removed): stays
     * until the restore is done */
    pc_entry *p = put(c, "p", 4, 200, 0, 1);
    pc_ref(p);
    pc_unpin(c, p);
    ck_assert_int_eq(nfreed, 3);
    ck_assert_ptr_eq(get(c, "p"), p);
    pc_unref(c, p);
    ck_assert_int_eq(nfreed, 4);
    ck_assert_int_eq(freed[3], 4);
    pc_free(c);
}
END_TEST

START_TEST(test_entry_limit) {
    nfreed = 0;
    pc_cache *c = pc_create((size_t)1 << 40, free_snap, NULL);
    char key[16];
    for (int i = 0; i < PC_MAX_ENTRIES; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ck_assert_ptr_nonnull(pc_insert(c, key, strlen(key), (uint64_t)i, snap(i), 1, 0, 1));
    }
    /* full of pinned entries: refused, the snapshot freed */
    ck_assert_ptr_null(pc_insert(c, "new", 3, 7, snap(-1), 1, 0, 0));
    ck_assert_int_eq(nfreed, 1);
    ck_assert_int_eq(freed[0], -1);
    /* one unpinned: the next insert evicts it to make room */
    pc_entry *e = pc_find(c, "k5", 2, 5);
    ck_assert_ptr_nonnull(e);
    pc_unpin(c, e);
    ck_assert_ptr_nonnull(pc_insert(c, "new", 3, 7, snap(-2), 1, 0, 0));
    ck_assert_int_eq(nfreed, 2);
    ck_assert_int_eq(freed[1], 5);
    pc_free(c);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("pcache");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_lru_budget);
    tcase_add_test(tc, test_pins);
    tcase_add_test(tc, test_refs);
    tcase_add_test(tc, test_entry_limit);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
