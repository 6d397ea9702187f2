/* persona_int.h - what the files of the persona module share (persona.c:
 * the manager, requests, tickets, the list; persona_conf.c: the configured
 * personas; persona_prime.c: the primes; persona_util.c: what they all
 * use). Not for other modules.
 * Loop thread, except load_work in persona_prime.c.
 */
#ifndef MOSHID_PERSONA_INT_H
#define MOSHID_PERSONA_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "pcache.h"
#include "persona.h"
#include "msg.h"
#include "prompt.h"
#include "text.h"

/* Longest client or file string quoted in a message, bytes (text_shown). */
#define PERS_SHOWN_MAX 64
/* Nice value of the worker threads that read and encode voices: the
 * lowest priority, so that the engine, its codec thread and the loop get
 * the CPU first (a voice encode is seconds of CPU on the real codec). */
#define PERS_LOAD_NICE 19
/* Largest voice file read, bytes (audio is also bounded by its length;
 * a saved voice by its rows, checked against max_voice_s before use). */
#define PERS_VOICE_FILE_MAX ((int64_t)512 << 20)

#define PERS_OF(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef enum { PR_LOADING, PR_QUEUED, PR_RUNNING } pr_stage;

struct pers_prime {
    pers *p;
    pers_prime *next;              /* p->primes */
    pers_prime *qnext;             /* p's queue of primes waiting for a slot */
    prompt_key key;
    char label[160];
    char voice[PATH_MAX];          /* "" = no voice phase */
    prompt_voice_kind kind;
    int *ids, n_ids;               /* role text ids */
    double max_voice_s;            /* the limit when it was asked (the worker reads it) */
    pr_stage stage;
    int slot;                      /* prime slot while RUNNING */
    int startup;                   /* one of the start-up primes */
    uv_work_t work;
    int load_rc;
    ms_error load_err;
    model_prime task;              /* the engine's while RUNNING */
    pers_ticket *waiters;
    double t0_ms;
};

typedef struct pers_conf {
    struct pers_conf *next;
    char name[CFG_PERSONA_NAME_MAX + 1];
    char *description;
    pers_samp samp;
    pc_entry *entry;               /* the pinned snapshot in service, or NULL */
    pers_prime *pending;           /* the prime of its (new) definition, or NULL */
    char failed[256];              /* why it has neither (its only prime failed) */
    int seen;                      /* pers_reload's mark */
} pers_conf;

struct pers {
    uv_loop_t *loop;
    model *m;
    sched *s;
    int pp;                        /* the checkpoint is PersonaPlex */
    char *voices_dir, *record_dir;
    int on_demand, max_prompt_tokens;
    double max_voice_s;
    int nslots;
    int *slot_busy;                /* (nslots) */
    pc_cache *cache;
    pers_conf *confs;
    pers_prime *primes;
    pers_prime *qhead, *qtail;
    int stopped;                   /* pers_stop: the engine is going away */
    /* start-up */
    void (*ready)(void *ud, int ok, const char *msg);
    void *ready_ud;
    int startup_left, started;
    /* published metrics */
    uint64_t pub_hits, pub_misses, pub_evictions;
};

/* persona_util.c */
/* pers__set_opts: copy what the manager keeps of o (the budget applied). */
void pers__set_opts(pers *p, const pers_opts *o);
char *pers__dup(const char *s);
void pers__fail_set(pers_fail *f, int status, int kind, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* pers__publish: the persona gauges and counters to the metrics. */
void pers__publish(pers *p);
/* pers__role_ids: the role text's ids: pre-tokenized ids (checked against
 * the LM), or the text wrapped (prompt_role_text) and tokenized; at most
 * max_prompt_tokens. *ids (caller frees) may be NULL with *n 0. */
int pers__role_ids(pers *p, const char *text, size_t len, const int *pre, int n_pre, int **ids, int *n, ms_error *err);
pers_prime *pers__find_prime(pers *p, const prompt_key *k);
pers_conf *pers__find_conf(pers *p, const char *name);

/* persona_prime.c */
/* pers__prime_start: a new prime of key k (owned from now on) for voice
 * (kind) and ids (owned): LOADING on a worker thread, then queued for a
 * prime slot. NULL when it cannot be started (key and ids freed). */
pers_prime *pers__prime_start(pers *p, prompt_key *k, const char *voice, prompt_voice_kind kind, int *ids, int n_ids,
                              const char *label, int startup);
void pers__prime_free(pers *p, pers_prime *q);
/* pers__submit_queued: hand queued primes to free prime slots. */
void pers__submit_queued(pers *p);

/* persona_conf.c */
void pers__conf_free(pers *p, pers_conf *c);

#endif
