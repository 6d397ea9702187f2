/* persona.c - configured and on-demand personas, their primes and the
 * snapshot cache (see persona.h): the manager, the requests of sessions
 * and their tickets, /api/personas. The primes are in persona_prime.c,
 * the configured personas in persona_conf.c, what all of them use in
 * persona_util.c; the shared declarations in persona_int.h. Calls run one
 * way: persona.c -> persona_conf.c -> persona_prime.c -> persona_util.c.
 * Loop thread.
 *
 * A prime goes LOADING (the voice read and encoded on a worker thread) ->
 * QUEUED (waiting for a free prime slot) -> RUNNING (the engine's) -> done:
 * its snapshot is inserted into the cache with one reference per waiting
 * session and one pin per configured persona that waits for it, and the
 * waiters are told. Two requests for the same prompt share one prime.
 */
#include "persona.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "metrics.h"
#include "persona_int.h"

/* The cache frees a snapshot: back to the engine thread. */
static void cache_free_snap(void *ud, void *snap) {
    pers *p = ud;
    model_snap_free(p->m, snap);
    if (!p->stopped) sched_wake(p->s);
}

pers *pers_create(uv_loop_t *loop, model *m, sched *s, const pers_opts *o, ms_error *err) {
    pers *p = calloc(1, sizeof *p);
    if (!p) {
        ms_err_set(err, MS_ERR_NOMEM, "personas: out of memory");
        return NULL;
    }
    p->loop = loop;
    p->m = m;
    p->s = s;
    p->pp = model_lm_config(m)->variant == LM_VARIANT_PERSONAPLEX;
    p->nslots = model_prime_slots(m);
    p->slot_busy = calloc((size_t)(p->nslots > 0 ? p->nslots : 1), sizeof *p->slot_busy);
    p->cache = pc_create(o->cache_bytes, cache_free_snap, p);
    if (!p->slot_busy || !p->cache) {
        free(p->slot_busy);
        pc_free(p->cache);
        free(p);
        ms_err_set(err, MS_ERR_NOMEM, "personas: out of memory");
        return NULL;
    }
    pers__set_opts(p, o);
    pers__publish(p);
    return p;
}

void pers_stop(pers *p) {
    if (p) p->stopped = 1;
}

void pers_free(pers *p) {
    if (!p) return;
    model_prime_abort(p->m);
    model_prime *t;
    while ((t = model_prime_poll(p->m))) {
        if (t->snap) model_snap_free(p->m, t->snap);
        t->snap = NULL;
    }
    while (p->primes) pers__prime_free(p, p->primes);
    while (p->confs) {
        pers_conf *c = p->confs;
        p->confs = c->next;
        pers__conf_free(p, c);
    }
    pc_free(p->cache);
    free(p->slot_busy);
    free(p->voices_dir);
    free(p->record_dir);
    free(p);
}

/* ---- sessions ----------------------------------------------------------- */

static void join(pers_prime *q, pers_ticket *t) {
    t->wait = q;
    t->next = q->waiters;
    q->waiters = t;
    t->key_hash = q->key.hash;
}

pers_answer pers_request(pers *p, const proto_query *q, pers_ticket *t, pers_fail *f) {
    void (*done)(pers_ticket *, int, const pers_fail *) = t->done;
    memset(t, 0, sizeof *t);
    t->done = done;
    t->samp.text_temperature = t->samp.audio_temperature = -1;
    t->samp.text_topk = t->samp.audio_topk = -1;
    int has_p = proto_query_has(q, PROTO_Q_PERSONA), has_v = proto_query_has(q, PROTO_Q_VOICE_PROMPT),
        has_t = proto_query_has(q, PROTO_Q_TEXT_PROMPT);
    char sb[80];
    if (!has_p && !has_v && !has_t) return PERS_NONE;
    if (!p->pp) {
        pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "personas (persona, voice_prompt, text_prompt) need a PersonaPlex "
                                               "checkpoint; this server runs a Kyutai model");
        return PERS_FAIL;
    }
    if (has_p && (has_v || has_t)) {
        pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "bad query: give persona=NAME or voice_prompt/text_prompt, not both");
        return PERS_FAIL;
    }
    if (p->stopped) {
        pers__fail_set(f, PROTO_CLOSE_TRY_LATER, MET_ERR_busy, "server is shutting down");
        return PERS_FAIL;
    }
    if (has_p) {
        pers_conf *c = pers__find_conf(p, q->persona);
        if (!c) {
            pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "unknown persona \"%s\" (GET /api/personas lists them)",
                     text_shown(q->persona, PERS_SHOWN_MAX, sb, sizeof sb));
            return PERS_FAIL;
        }
        snprintf(t->label, sizeof t->label, "persona %s", c->name);
        snprintf(t->name, sizeof t->name, "%s", c->name);
        t->samp = c->samp;
        if (c->entry) {
            pc_hit(p->cache, c->entry);
            pc_ref(c->entry);
            t->entry = c->entry;
            size_t kn;
            const void *kb = pc_key(c->entry, &kn);
            t->key_hash = prompt_hash(kb, kn);
            pers__publish(p);
            return PERS_READY;
        }
        if (c->pending) {
            join(c->pending, t);
            return PERS_WAIT;
        }
        pers__fail_set(f, PROTO_CLOSE_INTERNAL, MET_ERR_internal, "internal error: persona %s is unavailable: %s", c->name, c->failed);
        return PERS_FAIL;
    }
    if (!p->on_demand) {
        pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "voice_prompt and text_prompt are off on this server "
                                               "(personas.on_demand = false); ask for persona=NAME");
        return PERS_FAIL;
    }
    char path[PATH_MAX] = "";
    prompt_voice_kind kind = PROMPT_VOICE_AUDIO;
    ms_error e = {0};
    if (has_v) {
        if (!p->voices_dir[0]) {
            pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "voice_prompt: this server has no voice directory "
                                                   "(personas.voices_dir)");
            return PERS_FAIL;
        }
        int rc = prompt_voice_find(p->voices_dir, q->voice_prompt, path, sizeof path, &kind, &e);
        if (rc != MS_OK) {
            pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "%s voice_prompt \"%s\": %s", rc == MS_ERR_NOTFOUND ? "unknown" : "bad",
                     text_shown(q->voice_prompt, PERS_SHOWN_MAX, sb, sizeof sb), e.msg);
            return PERS_FAIL;
        }
    }
    int *ids = NULL, n_ids = 0;
    if (has_t && pers__role_ids(p, q->text_prompt, q->text_prompt_len, NULL, 0, &ids, &n_ids, &e) != MS_OK) {
        pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "text_prompt: %s", e.msg);
        return PERS_FAIL;
    }
    prompt_key k;
    if (prompt_key_make(&k, model_id(p->m), path, ids, n_ids, PP_PRIME_SILENCE_FRAMES, &e) != MS_OK) {
        free(ids);
        pers__fail_set(f, PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "voice_prompt \"%s\": %s", text_shown(q->voice_prompt, PERS_SHOWN_MAX, sb, sizeof sb), e.msg);
        return PERS_FAIL;
    }
    snprintf(t->label, sizeof t->label, "%s%s%s%s", has_v ? "voice " : "", has_v ? text_shown(q->voice_prompt, PERS_SHOWN_MAX, sb, sizeof sb) : "",
             has_v && has_t ? " + " : "", has_t ? "text prompt" : "");
    t->key_hash = k.hash;
    pc_entry *hit = pc_lookup(p->cache, k.b, k.n, k.hash);
    if (hit) {
        pc_ref(hit);
        t->entry = hit;
        prompt_key_free(&k);
        free(ids);
        pers__publish(p);
        return PERS_READY;
    }
    pers_prime *pr = pers__find_prime(p, &k);
    if (pr) {
        prompt_key_free(&k);
        free(ids);
        join(pr, t);
        pers__publish(p);
        return PERS_WAIT;
    }
    int running = 0;
    for (pers_prime *x = p->primes; x; x = x->next) running++;
    if (running >= p->nslots) {
        prompt_key_free(&k);
        free(ids);
        pers__publish(p);
        pers__fail_set(f, PROTO_CLOSE_TRY_LATER, MET_ERR_busy, "server busy: %d persona prime%s running (personas.max_concurrent_primes = %d); "
                 "try again later", running, running > 1 ? "s are" : " is", p->nslots);
        return PERS_FAIL;
    }
    if (!(pr = pers__prime_start(p, &k, path, kind, ids, n_ids, t->label, 0))) {
        pers__fail_set(f, PROTO_CLOSE_INTERNAL, MET_ERR_internal, "internal error: cannot start a prime");
        return PERS_FAIL;
    }
    join(pr, t);
    return PERS_WAIT;
}

const void *pers_ticket_persona(const pers_ticket *t) {
    return t->entry ? &((const model_snap *)pc_snap(t->entry))->p : NULL;
}

void pers_ticket_release(pers *p, pers_ticket *t) {
    if (t->wait) {
        for (pers_ticket **pp = &t->wait->waiters; *pp; pp = &(*pp)->next)
            if (*pp == t) {
                *pp = t->next;
                break;
            }
        t->wait = NULL;
        t->next = NULL;
    }
    if (t->entry) {
        pc_unref(p->cache, t->entry);
        t->entry = NULL;
        pers__publish(p);
    }
}

void pers_restored(pers *p) {
    (void)p;
    met_add(MET_persona_restores_total, 1);
}

char *pers_list_json(const pers *p) {
    cJSON *root = cJSON_CreateObject(), *a = root ? cJSON_AddArrayToObject(root, "personas") : NULL;
    if (!a) goto fail;
    for (const pers_conf *c = p->confs; c; c = c->next) {
        cJSON *o = cJSON_CreateObject();
        if (!o) goto fail;
        cJSON_AddItemToArray(a, o);
        if (!cJSON_AddStringToObject(o, "name", c->name) || !cJSON_AddStringToObject(o, "description", c->description) ||
            !cJSON_AddBoolToObject(o, "ready", c->entry != NULL))
            goto fail;
    }
    if (!cJSON_AddBoolToObject(root, "on_demand", p->pp && p->on_demand) ||
        !cJSON_AddBoolToObject(root, "voice_prompt", p->pp && p->on_demand && p->voices_dir[0]))
        goto fail;
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt) return NULL;
    char *out = strdup(txt); /* the caller frees with free() */
    cJSON_free(txt);
    return out;
fail:
    cJSON_Delete(root);
    return NULL;
}
