/* persona.h - personas in sessions: the configured personas (primed at
 * start-up and on SIGHUP), on-demand prompts (voice_prompt + text_prompt),
 * the snapshot cache (pcache.h) and the primes that fill it.
 *
 * A session asks with the query (docs/protocol.md section 7); pers_request
 * answers at once (no persona, a cached snapshot to restore, an error) or
 * makes the session wait for a prime: the voice file is read and encoded
 * on a libuv worker thread, then the model primes it on a prime slot of
 * its own, in chunks between live steps (model.h, pjob.h), snapshots it,
 * and the snapshot goes into the cache; every session waiting for that
 * prompt gets it then. A session restores the snapshot into its own slot
 * (the model's restore job) and holds a reference on the cache entry
 * until the restore is done (READY) or the session is gone.
 *
 * Threads: everything here runs on the loop thread, except the voice
 * loading on a worker thread (which touches only its own prime and the
 * read-only codec and configuration of the model).
 */
#ifndef MOSHID_PERSONA_H
#define MOSHID_PERSONA_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cfg.h"
#include "model.h"
#include "query.h"
#include "scheduler.h"

/* Seconds between the ping messages (kind 6) a session waiting for its
 * persona gets before the handshake (the web clients close after 10 s
 * without a message; they decode and drop kind 6). */
#define PERS_WAIT_PING_S 2.0

typedef struct pers pers;
typedef struct pers_prime pers_prime;
typedef struct pc_entry pc_entry;

/* The options (app.h keeps them; reload hands new ones). Borrowed for
 * the call: the manager copies what it keeps. */
typedef struct pers_opts {
    const cfg_personas *list;  /* configured personas (may be NULL: none) */
    const char *voices_dir;    /* "" or NULL: voice_prompt refused */
    int on_demand;
    size_t cache_bytes;
    int max_prompt_tokens;
    double max_voice_s;
    int max_concurrent_primes; /* the model's prime slots (restart) */
    const char *record_dir;    /* debug: write each prime's prompt there (moshi-run formats), or NULL */
} pers_opts;

/* Sampling a persona overrides (< 0: not set). */
typedef struct pers_samp {
    double text_temperature, audio_temperature;
    int text_topk, audio_topk;
} pers_samp;

/* How a request is answered. */
typedef enum { PERS_NONE, PERS_READY, PERS_WAIT, PERS_FAIL } pers_answer;

/* A refusal: a WebSocket close status, a moshid_errors_total kind
 * (MET_ERR_*) and the message for the client. */
typedef struct pers_fail {
    int status;
    int kind;
    char msg[512];
} pers_fail;

/* One session's hold on a persona (embedded in the session). */
typedef struct pers_ticket {
    pc_entry *entry;              /* a reference on the snapshot to restore, or NULL */
    pers_prime *wait;             /* the prime it waits for, or NULL */
    struct pers_ticket *next;     /* in wait's list */
    /* done: the prime waited for is over: ok with entry held, or f says why */
    void (*done)(struct pers_ticket *t, int ok, const pers_fail *f);
    pers_samp samp;               /* the persona's overrides (persona=NAME) */
    char label[160];              /* for logs and metadata: "persona NAME" / "voice X" / "text prompt" */
    char name[CFG_PERSONA_NAME_MAX + 1];   /* persona=NAME, or "" */
    uint64_t key_hash;            /* the cache key's hash (logs, debug records) */
} pers_ticket;

/* pers_create: the manager for model m (its tokenizer, codec, prime
 * slots) and engine s; options o. NULL with err set. */
pers *pers_create(uv_loop_t *loop, model *m, sched *s, const pers_opts *o, ms_error *err);
/* pers_start: prime the configured personas of o->list; ready(ud, ok,
 * msg) runs once every one is primed (ok = 1) or one failed (ok = 0, msg
 * why), maybe before pers_start returns (no persona). A Kyutai checkpoint
 * with personas configured fails. */
void pers_start(pers *p, const pers_opts *o, void (*ready)(void *ud, int ok, const char *msg), void *ud);
/* pers_reload: new options (SIGHUP): personas added are primed (served
 * once primed), changed ones re-primed (the old version serves meanwhile),
 * removed ones unpinned (sessions restoring them are not disturbed). A
 * persona whose new definition cannot be used is logged and keeps its old
 * version. */
void pers_reload(pers *p, const pers_opts *o);
/* pers_drain: take the primes the engine finished (from the scheduler's
 * output callback). */
void pers_drain(pers *p);
/* pers_stop: the engine is about to stop (shutdown): no more primes are
 * handed to it, requests are refused. */
void pers_stop(pers *p);
/* pers_free: once the engine thread has stopped and no session is left. */
void pers_free(pers *p);

/* pers_request: the persona a session's query asks for (persona, or
 * voice_prompt / text_prompt). NONE: none asked. READY: t->entry holds
 * the snapshot (pers_ticket_persona). WAIT: t->done is called later (and
 * the session may buffer audio meanwhile). FAIL: f says why. */
pers_answer pers_request(pers *p, const proto_query *q, pers_ticket *t, pers_fail *f);
/* pers_check: the refusals pers_request would make that need no prime and
 * no slot (no PersonaPlex checkpoint, an unknown persona or voice, a bad
 * role text, on-demand prompts off, shutting down): 1 with f set, else 0.
 * Starts and holds nothing; for answering before the upgrade. */
int pers_check(pers *p, const proto_query *q, pers_fail *f);
/* pers_ticket_persona: the snapshot to restore (sched_params.persona). */
const void *pers_ticket_persona(const pers_ticket *t);
/* pers_ticket_release: the session's restore is done (READY) or the
 * session is gone: drop the reference, or stop waiting. Harmless twice. */
void pers_ticket_release(pers *p, pers_ticket *t);
/* pers_restored: count a session started from a snapshot (metrics). */
void pers_restored(pers *p);

/* pers_list_json: /api/personas: {"personas": [{"name", "description",
 * "ready"}...], "on_demand": bool, "voice_prompt": bool}; malloc'd, NULL
 * when out of memory. */
char *pers_list_json(const pers *p);

#endif
