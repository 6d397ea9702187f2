/* persona_prime.c - the primes of the persona module: a prompt's voice
 * read and encoded on a libuv worker thread (load_work, at nice 19), the
 * prompt queued for a free prime slot, handed to the model (model.h), and
 * its snapshot inserted into the cache for the sessions and configured
 * personas waiting for it (see persona.c). Loop thread, except load_work.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "persona_int.h"
#include "prime_io.h"
#include "voice_io.h"

/* ---- primes ------------------------------------------------------------- */

void pers__prime_free(pers *p, pers_prime *q) {
    for (pers_prime **pp = &p->primes; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    prompt_key_free(&q->key);
    free(q->ids);
    pjob_prompt_free(&q->task.prompt);
    free(q);
}

/* The start-up accounting: one start-up prime is over. */
static void startup_step(pers *p, pers_prime *q, int ok, const char *msg) {
    if (!q->startup || p->started) return;
    q->startup = 0;
    if (!ok) {
        p->started = 1;
        p->ready(p->ready_ud, 0, msg);
        return;
    }
    if (--p->startup_left == 0) {
        p->started = 1;
        p->ready(p->ready_ud, 1, NULL);
    }
}

/* The prime could not be done: tell the waiters and the configured
 * personas that wait for it, then free it. */
static void prime_fail(pers *p, pers_prime *q, const char *why) {
    met_add(MET_persona_prime_failures_total, 1);
    LOGW("persona_prime_failed", "what=\"%s\" key=%016llx msg=\"%s\"", q->label, (unsigned long long)q->key.hash, why);
    pers_fail f;
    pers__fail_set(&f, PROTO_CLOSE_INTERNAL, MET_ERR_internal, "internal error: %s cannot be primed: %s", q->label, why);
    for (pers_conf *c = p->confs; c; c = c->next)
        if (c->pending == q) {
            c->pending = NULL;
            if (!c->entry) snprintf(c->failed, sizeof c->failed, "%s", why);
        }
    pers_ticket *w;
    while ((w = q->waiters)) { /* one at a time off the list: a callback may end other sessions */
        q->waiters = w->next;
        w->wait = NULL;
        w->next = NULL;
        w->done(w, 0, &f);
    }
    startup_step(p, q, 0, f.msg);
    pers__prime_free(p, q);
    pers__publish(p);
}

/* Hand queued primes to free prime slots. */
void pers__submit_queued(pers *p) {
    while (p->qhead && !p->stopped) {
        int k = 0;
        while (k < p->nslots && p->slot_busy[k]) k++;
        if (k == p->nslots) return;
        pers_prime *q = p->qhead;
        p->qhead = q->qnext;
        if (!p->qhead) p->qtail = NULL;
        q->qnext = NULL;
        p->slot_busy[k] = 1;
        q->slot = k;
        q->stage = PR_RUNNING;
        q->task.prime_slot = k;
        model_prime_submit(p->m, &q->task);
        sched_wake(p->s);
    }
}

/* Debugging (debug.record_dir): the prompt as moshi-run reads it. */
static void record_prompt(pers *p, const pers_prime *q) {
    const pjob_prompt *pr = &q->task.prompt;
    char path[PATH_MAX];
    FILE *f;
#define REC_OPEN(ext) (snprintf(path, sizeof path, "%s/prime-%016llx." ext, p->record_dir, \
                                (unsigned long long)q->key.hash), f = fopen(path, "w"))
    if (pr->voice && REC_OPEN("voice-codes")) {
        for (int i = 0; i < pr->n_voice; i++)
            for (int k = 0; k < PP_SIDE_CODEBOOKS; k++)
                fprintf(f, "%d%c", pr->voice[i * PP_SIDE_CODEBOOKS + k], k == PP_SIDE_CODEBOOKS - 1 ? '\n' : ' ');
        fclose(f);
    }
    if (pr->embs && REC_OPEN("voice-saved")) {
        fprintf(f, "%s\n", q->voice);
        fclose(f);
    }
    if (REC_OPEN("text-ids")) {
        for (int i = 0; i < pr->n_text; i++) fprintf(f, "%d\n", pr->text[i]);
        fclose(f);
    }
    if (REC_OPEN("silence")) {
        for (int k = 0; k < PP_SIDE_CODEBOOKS; k++) fprintf(f, "%d ", pr->silence[k]);
        fputc('\n', f);
        fclose(f);
    }
    if (REC_OPEN("sine")) {
        for (int k = 0; k < PP_SIDE_CODEBOOKS; k++) fprintf(f, "%d ", pr->sine[k]);
        fputc('\n', f);
        fclose(f);
    }
#undef REC_OPEN
}

/* Worker thread: read and encode the voice, build the prompt. Touches only
 * q and the model's read-only codec and configuration. */
static void load_work(uv_work_t *w) {
    pers_prime *q = PERS_OF(w, pers_prime, work);
    /* this libuv worker thread only ever reads voices (the daemon queues no
     * other work): lowering its priority for good is harmless */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PERS_LOAD_NICE);
    model *m = q->p->m;
    const lm_config *c = model_lm_config(m);
    pjob_prompt *pr = &q->task.prompt;
    ms_error *err = &q->load_err;
    memset(pr, 0, sizeof *pr);
    model_side_tokens(m, pr->silence, pr->sine);
    pr->silence_frames = PP_PRIME_SILENCE_FRAMES;
    int max_frames = (int)ceil(q->max_voice_s * MS_FRAMES_PER_S);
    q->load_rc = MS_OK;
    if (q->n_ids > 0) {
        if (!(pr->text = malloc(sizeof(int) * (size_t)q->n_ids))) {
            q->load_rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
            return;
        }
        memcpy(pr->text, q->ids, sizeof(int) * (size_t)q->n_ids);
        pr->n_text = q->n_ids;
    }
    if (q->voice[0]) {
        struct stat st;
        if (stat(q->voice, &st) != 0) {
            q->load_rc = ms_err_set(err, MS_ERR_IO, "%s: %s", q->voice, strerror(errno));
            return;
        }
        if (st.st_size > PERS_VOICE_FILE_MAX) {
            q->load_rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %lld bytes, more than %lld", q->voice,
                                    (long long)st.st_size, (long long)PERS_VOICE_FILE_MAX);
            return;
        }
        if (q->kind == PROMPT_VOICE_AUDIO) {
            pp_voice_opts vo;
            pp_voice_opts_init(&vo);
            vo.max_seconds = q->max_voice_s;
            pp_voice_info info;
            q->load_rc = pp_voice_from_audio(model_mimi(m), q->voice, &vo, &pr->voice, &pr->n_voice, &info, err);
            if (q->load_rc != MS_OK) return;
        } else {
            /* a saved voice: bound its size by max_voice_s before reading */
            int64_t most = ((int64_t)max_frames + 1) * c->dim * 4 + ((int64_t)1 << 20);
            if (st.st_size > most) {
                q->load_rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %lld bytes, more than a %g s voice takes", q->voice,
                                        (long long)st.st_size, q->max_voice_s);
                return;
            }
            pp_prompt_buf pb;
            pp_prompt_paths paths = {.voice_saved = q->voice, .silence_frames = -1};
            q->load_rc = pp_prompt_load(&pb, &paths, c, err);
            if (q->load_rc == MS_OK) {
                pr->embs = pb.embs;
                pr->n_embs = pb.p.n_voice_embs;
                pr->cache = pb.cache;
                pb.embs = NULL;
                pb.cache = NULL;
            }
            pp_prompt_buf_free(&pb);
            if (q->load_rc != MS_OK) return;
            if (pr->n_embs + 1 > max_frames) {
                q->load_rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %d frames (%.1f s), longer than personas.max_voice_s = %g",
                                        q->voice, pr->n_embs + 1, (pr->n_embs + 1) / MS_FRAMES_PER_S, q->max_voice_s);
                return;
            }
        }
    }
    int64_t calls = pjob_prompt_calls(pr);
    if (calls > c->context)
        q->load_rc = ms_err_set(err, MS_ERR_LIMIT, "the prompt takes %lld steps, more than the model's context of %d",
                                (long long)calls, c->context);
}

/* Loop thread: the worker is done. */
static void load_done(uv_work_t *w, int status) {
    pers_prime *q = PERS_OF(w, pers_prime, work);
    pers *p = q->p;
    if (status == UV_ECANCELED && q->load_rc == MS_OK) q->load_rc = ms_err_set(&q->load_err, MS_ERR_STATE, "cancelled");
    if (p->stopped && q->load_rc == MS_OK) q->load_rc = ms_err_set(&q->load_err, MS_ERR_STATE, "the server is stopping");
    if (q->load_rc != MS_OK) {
        prime_fail(p, q, q->load_err.msg);
        return;
    }
    if (p->record_dir[0]) record_prompt(p, q);
    LOGI("persona_prime_queued", "what=\"%s\" key=%016llx voice_frames=%d saved_rows=%d text_tokens=%d steps=%lld "
         "load_ms=%.0f", q->label, (unsigned long long)q->key.hash, q->task.prompt.n_voice, q->task.prompt.n_embs,
         q->task.prompt.n_text, (long long)pjob_prompt_calls(&q->task.prompt), ms_mono_ms() - q->t0_ms);
    q->stage = PR_QUEUED;
    if (p->qtail) p->qtail->qnext = q;
    else p->qhead = q;
    p->qtail = q;
    pers__submit_queued(p);
}

/* A new prime of key k (owned from now on) for voice (kind) and ids
 * (owned). Returns it (LOADING), or NULL when the worker cannot be
 * started (key and ids freed). */
pers_prime *pers__prime_start(pers *p, prompt_key *k, const char *voice, prompt_voice_kind kind, int *ids, int n_ids,
                               const char *label, int startup) {
    pers_prime *q = calloc(1, sizeof *q);
    if (!q) {
        prompt_key_free(k);
        free(ids);
        return NULL;
    }
    q->p = p;
    q->key = *k;
    snprintf(q->label, sizeof q->label, "%s", label);
    snprintf(q->voice, sizeof q->voice, "%s", voice ? voice : "");
    q->kind = kind;
    q->ids = ids;
    q->n_ids = n_ids;
    q->max_voice_s = p->max_voice_s;
    q->slot = -1;
    q->startup = startup;
    q->t0_ms = ms_mono_ms();
    q->stage = PR_LOADING;
    q->next = p->primes;
    p->primes = q;
    if (uv_queue_work(p->loop, &q->work, load_work, load_done) != 0) {
        p->primes = q->next;
        prompt_key_free(&q->key);
        free(q->ids);
        free(q);
        return NULL;
    }
    pers__publish(p);
    return q;
}

/* The engine finished q: cache the snapshot, serve the waiters. */
static void prime_done(pers *p, pers_prime *q) {
    model_snap *snap = q->task.snap;
    q->task.snap = NULL;
    int waiters = 0, pins = 0;
    for (pers_ticket *w = q->waiters; w; w = w->next) waiters++;
    for (pers_conf *c = p->confs; c; c = c->next) pins += c->pending == q;
    size_t bytes = snap->bytes;
    int positions = snap->positions;
    /* one reference of our own until every waiter holds its own: the entry
     * cannot be evicted in between, whatever the budget */
    pc_entry *e = pc_insert(p->cache, q->key.b, q->key.n, q->key.hash, snap, bytes, 1, pins);
    met_add(MET_persona_primes_total, 1);
    LOGI("persona_primed", "what=\"%s\" key=%016llx positions=%d bytes=%zu chunks=%d engine_ms=%.0f total_ms=%.0f "
         "waiters=%d pinned=%d",
         q->label, (unsigned long long)q->key.hash, positions, bytes, q->task.chunks, q->task.ms, ms_mono_ms() - q->t0_ms,
         waiters, pins);
    if (!e) {
        prime_fail(p, q, "out of memory for the cache entry");
        return;
    }
    for (pers_conf *c = p->confs; c; c = c->next)
        if (c->pending == q) {
            c->pending = NULL;
            c->failed[0] = '\0';
            if (c->entry) pc_unpin(p->cache, c->entry); /* the old version (or e itself, pinned twice) */
            c->entry = e;
        }
    /* one waiter at a time off the list: a callback may end other sessions */
    pers_ticket *w;
    while ((w = q->waiters)) {
        q->waiters = w->next;
        w->wait = NULL;
        w->next = NULL;
        pc_ref(e);
        w->entry = e;
        w->done(w, 1, NULL);
    }
    pc_unref(p->cache, e);   /* ours: the entry is now the cache's (and the waiters') */
    startup_step(p, q, 1, NULL);
    pers__prime_free(p, q);
    pers__publish(p);
}

void pers_drain(pers *p) {
    if (!p) return;
    model_prime *t;
    int any = 0;
    while ((t = model_prime_poll(p->m))) {
        pers_prime *q = PERS_OF(t, pers_prime, task);
        p->slot_busy[q->slot] = 0;
        q->slot = -1;
        if (t->rc != MS_OK || !t->snap) prime_fail(p, q, t->err.msg[0] ? t->err.msg : "engine error");
        else prime_done(p, q);
        any = 1;
    }
    if (any) pers__submit_queued(p);
}
