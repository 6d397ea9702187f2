/* persona_util.c - what the files of the persona module share (see
 * persona_int.h): small strings, failures, the options kept,
 * the metrics published, lookups of primes and configured personas, the
 * role text's ids. It calls no other file of the module, so that
 * persona.c, persona_conf.c and persona_prime.c all sit above it. Loop
 * thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "persona_int.h"

char *pers__dup(const char *s) {
    char *d = strdup(s ? s : "");
    MS_ASSERT(d != NULL); /* a few bytes on the loop thread */
    return d;
}

void pers__fail_set(pers_fail *f, int status, int kind, const char *fmt, ...) {
    f->status = status;
    f->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
}

void pers__publish(pers *p) {
    pc_stats st;
    pc_stats_get(p->cache, &st);
    met_add(MET_persona_cache_hits_total, st.hits - p->pub_hits);
    met_add(MET_persona_cache_misses_total, st.misses - p->pub_misses);
    met_add(MET_persona_cache_evictions_total, st.evictions - p->pub_evictions);
    p->pub_hits = st.hits;
    p->pub_misses = st.misses;
    p->pub_evictions = st.evictions;
    met_set(MET_persona_cache_entries, st.entries);
    met_set(MET_persona_cache_bytes, (int64_t)st.bytes);
    int ready = 0, running = 0;
    for (pers_conf *c = p->confs; c; c = c->next) ready += c->entry != NULL;
    for (pers_prime *q = p->primes; q; q = q->next) running++;
    met_set(MET_personas, ready);
    met_set(MET_persona_primes_running, running);
}

/* ---- options ------------------------------------------------------------ */

void pers__set_opts(pers *p, const pers_opts *o) {
    free(p->voices_dir);
    free(p->record_dir);
    p->voices_dir = pers__dup(o->voices_dir);
    p->record_dir = pers__dup(o->record_dir);
    p->on_demand = o->on_demand;
    p->max_prompt_tokens = o->max_prompt_tokens;
    p->max_voice_s = o->max_voice_s;
    if (p->cache) pc_set_budget(p->cache, o->cache_bytes);
}

/* ---- prompts: role text ids, keys ---------------------------------------- */

/* The role text's ids: pre-tokenized ids (checked against the LM), or the
 * text wrapped (prompt_role_text) and tokenized; at most
 * max_prompt_tokens. *ids (caller frees) may be NULL with *n 0. */
int pers__role_ids(pers *p, const char *text, size_t len, const int *pre, int n_pre, int **ids, int *n,
                    ms_error *err) {
    *ids = NULL;
    *n = 0;
    const lm_config *c = model_lm_config(p->m);
    if (n_pre > 0) {
        if (n_pre > p->max_prompt_tokens)
            return ms_err_set(err, MS_ERR_LIMIT, "%d text ids, more than personas.max_prompt_tokens = %d", n_pre,
                              p->max_prompt_tokens);
        for (int i = 0; i < n_pre; i++)
            if (pre[i] < 0 || pre[i] >= c->text_card)
                return ms_err_set(err, MS_ERR_RANGE, "text id %d = %d is outside the model's text vocabulary (0..%d)",
                                  i, pre[i], c->text_card - 1);
        *ids = malloc(sizeof(int) * (size_t)n_pre);
        if (!*ids) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        memcpy(*ids, pre, sizeof(int) * (size_t)n_pre);
        *n = n_pre;
        return MS_OK;
    }
    char *wrapped = NULL;
    size_t wl = 0;
    if (prompt_role_text(text, len, &wrapped, &wl) != MS_OK) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    if (!wrapped) return MS_OK; /* an empty prompt: no role phase */
    const spm_enc *e = model_spm_enc(p->m);
    if (!e) {
        free(wrapped);
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "a role text needs model.tokenizer");
    }
    int cap = p->max_prompt_tokens;
    int *v = malloc(sizeof(int) * (size_t)cap);
    size_t got = 0;
    if (!v) {
        free(wrapped);
        return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    }
    int rc = spm_encode(e, wrapped, wl, v, (size_t)cap, &got, err);
    free(wrapped);
    if (rc == MS_ERR_LIMIT && got > (size_t)cap)
        rc = ms_err_set(err, MS_ERR_LIMIT, "%zu tokens, more than personas.max_prompt_tokens = %d", got, cap);
    if (rc != MS_OK) {
        free(v);
        return rc;
    }
    *ids = v;
    *n = (int)got;
    return MS_OK;
}

pers_prime *pers__find_prime(pers *p, const prompt_key *k) {
    for (pers_prime *q = p->primes; q; q = q->next)
        if (prompt_key_equal(&q->key, k)) return q;
    return NULL;
}

pers_conf *pers__find_conf(pers *p, const char *name) {
    for (pers_conf *c = p->confs; c; c = c->next)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}
