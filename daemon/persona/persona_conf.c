/* persona_conf.c - the configured personas (personas.list): primed at
 * start-up (pers_start), added, re-primed and removed on SIGHUP
 * (pers_reload); each pins the cache entry of the snapshot it serves (see
 * persona.c). Loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "persona_int.h"

/* ---- configured personas ------------------------------------------------- */

/* The key and the role ids of a configured persona's definition. */
static int conf_key(pers *p, const cfg_persona *d, prompt_key *k, int **ids, int *n_ids, ms_error *err) {
    int rc = pers__role_ids(p, d->text, strlen(d->text), d->text_ids, d->n_text_ids, ids, n_ids, err);
    if (rc != MS_OK) return rc;
    rc = prompt_key_make(k, model_id(p->m), d->voice, *ids, *n_ids, PP_PRIME_SILENCE_FRAMES, err);
    if (rc != MS_OK) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

static void conf_set(pers_conf *c, const cfg_persona *d) {
    free(c->description);
    c->description = pers__dup(d->description);
    c->samp.text_temperature = d->text_temperature;
    c->samp.audio_temperature = d->audio_temperature;
    c->samp.text_topk = (int)d->text_topk;
    c->samp.audio_topk = (int)d->audio_topk;
}

/* Make c serve the definition d (whose key is k, owned from here): from
 * the cache when it is there, else by a prime (shared with one of the same
 * key in flight). Returns MS_OK or an error in err (c unchanged). */
static int conf_use(pers *p, pers_conf *c, const cfg_persona *d, prompt_key *k, int *ids, int n_ids, int startup,
                    ms_error *err) {
    pc_entry *e = pc_find(p->cache, k->b, k->n, k->hash);
    if (e) {
        pc_pin(p->cache, e);
        if (c->entry) pc_unpin(p->cache, c->entry);
        c->entry = e;
        c->pending = NULL;
        prompt_key_free(k);
        free(ids);
        return MS_OK;
    }
    pers_prime *q = pers__find_prime(p, k);
    if (q) {
        prompt_key_free(k);
        free(ids);
    } else {
        char label[160];
        snprintf(label, sizeof label, "persona %s", c->name);
        prompt_voice_kind kind = d->voice[0] ? prompt_voice_kind_of(d->voice) : PROMPT_VOICE_AUDIO;
        if (!(q = pers__prime_start(p, k, d->voice, kind, ids, n_ids, label, startup)))
            return ms_err_set(err, MS_ERR_NOMEM, "cannot start a prime");
        if (startup) p->startup_left++;
    }
    c->pending = q;
    return MS_OK;
}

void pers__conf_free(pers *p, pers_conf *c) {
    if (c->entry) pc_unpin(p->cache, c->entry);
    free(c->description);
    free(c);
}

/* Start-up failed: say so once. */
static void startup_fail(pers *p, const char *msg) {
    if (p->started) return;
    p->started = 1;
    p->ready(p->ready_ud, 0, msg);
}

void pers_start(pers *p, const pers_opts *o, void (*ready)(void *ud, int ok, const char *msg), void *ud) {
    p->ready = ready;
    p->ready_ud = ud;
    p->startup_left = 1; /* held until every prime is started (a prime may end at once) */
    int n = o->list ? o->list->n : 0;
    char msg[600];
    if (n > 0 && !p->pp) {
        snprintf(msg, sizeof msg, "personas.list: %d persona%s configured, but %s is a Kyutai checkpoint: personas "
                 "need a PersonaPlex checkpoint", n, n > 1 ? "s" : "", model_id(p->m));
        startup_fail(p, msg);
        return;
    }
    if (n > 0 && p->nslots == 0) {
        snprintf(msg, sizeof msg, "personas.list: %d persona%s configured, but no prime slot is left (sessions.max "
                 "takes every backend slot)", n, n > 1 ? "s" : "");
        startup_fail(p, msg);
        return;
    }
    pers_conf **tail = &p->confs;
    for (int i = 0; i < n; i++) {
        const cfg_persona *d = &o->list->v[i];
        ms_error e = {0};
        prompt_key k;
        int *ids = NULL, n_ids = 0;
        pers_conf *c = calloc(1, sizeof *c);
        if (!c || conf_key(p, d, &k, &ids, &n_ids, &e) != MS_OK) {
            snprintf(msg, sizeof msg, "personas.list[%d] (%s): %s", i, d->name, c ? e.msg : "out of memory");
            free(c);
            startup_fail(p, msg);
            return;
        }
        snprintf(c->name, sizeof c->name, "%s", d->name);
        conf_set(c, d);
        *tail = c;
        tail = &c->next;
        if (conf_use(p, c, d, &k, ids, n_ids, 1, &e) != MS_OK) {
            snprintf(msg, sizeof msg, "personas.list[%d] (%s): %s", i, d->name, e.msg);
            startup_fail(p, msg);
            return;
        }
    }
    LOGI("personas_start", "configured=%d primes=%d prime_slots=%d on_demand=%d", n, p->startup_left - 1, p->nslots,
         p->on_demand);
    pers__publish(p);
    if (--p->startup_left == 0 && !p->started) {
        p->started = 1;
        p->ready(p->ready_ud, 1, NULL);
    }
}

/* Does c's snapshot in service have key k? */
static int entry_has_key(const pc_entry *e, const prompt_key *k) {
    size_t n;
    const void *b = e ? pc_key(e, &n) : NULL;
    return b && n == k->n && memcmp(b, k->b, n) == 0;
}

void pers_reload(pers *p, const pers_opts *o) {
    pers__set_opts(p, o);
    int n = o->list ? o->list->n : 0, added = 0, changed = 0, removed = 0, refused = 0;
    if (!p->pp || p->nslots == 0) {
        if (n > 0)
            LOGW("personas_reload", "msg=\"%d personas configured, but %s: ignored\"", n,
                 !p->pp ? "this is a Kyutai checkpoint" : "no prime slot is left");
        pers__publish(p);
        return;
    }
    for (pers_conf *c = p->confs; c; c = c->next) c->seen = 0;
    pers_conf *list = NULL, **tail = &list;   /* the new order */
    for (int i = 0; i < n; i++) {
        const cfg_persona *d = &o->list->v[i];
        pers_conf *c = pers__find_conf(p, d->name);
        ms_error e = {0};
        prompt_key k;
        int *ids = NULL, n_ids = 0;
        if (conf_key(p, d, &k, &ids, &n_ids, &e) != MS_OK) {
            LOGW("persona_reload_refused", "name=%s msg=\"%s\" action=%s", d->name, e.msg,
                 c ? "keeping the old version" : "not added");
            refused++;
            if (!c) continue;
        } else if (!c) {
            if (!(c = calloc(1, sizeof *c))) {
                prompt_key_free(&k);
                free(ids);
                continue;
            }
            snprintf(c->name, sizeof c->name, "%s", d->name);
            conf_set(c, d);
            if (conf_use(p, c, d, &k, ids, n_ids, 0, &e) != MS_OK) {
                LOGW("persona_reload_refused", "name=%s msg=\"%s\" action=\"not added\"", d->name, e.msg);
                pers__conf_free(p, c);
                continue;
            }
            c->next = p->confs; /* linked in below with the others */
            p->confs = c;
            added++;
        } else {
            conf_set(c, d);
            if ((c->pending && prompt_key_equal(&c->pending->key, &k)) || (!c->pending && entry_has_key(c->entry, &k))) {
                prompt_key_free(&k);   /* unchanged (or already being primed) */
                free(ids);
            } else if (c->pending && entry_has_key(c->entry, &k)) {
                c->pending = NULL;     /* changed back: the prime goes on into the cache, unpinned */
                prompt_key_free(&k);
                free(ids);
            } else if (conf_use(p, c, d, &k, ids, n_ids, 0, &e) != MS_OK) {
                LOGW("persona_reload_refused", "name=%s msg=\"%s\" action=\"keeping the old version\"", d->name, e.msg);
            } else {
                changed++;
            }
        }
        c->seen = 1;
        /* move c to the new list */
        for (pers_conf **pp = &p->confs; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    /* what is left was removed from the file */
    for (pers_conf *c = p->confs, *nx; c; c = nx) {
        nx = c->next;
        LOGI("persona_removed", "name=%s restores_in_progress=%d", c->name, c->entry ? pc_refs(c->entry) : 0);
        pers__conf_free(p, c);
        removed++;
    }
    p->confs = list;
    LOGI("personas_reloaded", "configured=%d added=%d changed=%d removed=%d refused=%d", n, added, changed, removed,
         refused);
    pers__publish(p);
    pers__submit_queued(p);
}
