/* sess.c - one client session: protocol state machine on the loop thread.
 *
 * Life of a session: the WebSocket opens -> query parsed and checked ->
 * its persona resolved (persona.h: none, a cached snapshot, or a prime to
 * wait for, with pings) -> a slot is attached (or "server busy" and
 * close), restoring the snapshot if any -> READY from the engine ->
 * handshake, then the metadata message (the official servers' order: a
 * client may take the first message for the handshake); then audio pages
 * are decoded to PCM,
 * cut into 1920-sample frames and pushed to the engine; the engine's frames
 * come back through sess_drain and are Opus-encoded and queued with the
 * text pieces. Every error a client can cause gets an error message, then a
 * clean close; no other session is affected.
 */
#include "sess.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "access.h"
#include "app_int.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"

_Static_assert((int)MET__NEP == (int)SRV_EP__COUNT, "moshid_endpoint_sessions labels follow srv_endpoint");

/* A message of `len` bytes for the caller to build into m->buf + srv_pre
 * (one spare byte after it), then to enqueue. NULL when out of memory. */
static sess_msg *msg_new(size_t len) {
    sess_msg *m = malloc(sizeof *m + srv_pre + len + 1);
    if (m) {
        m->next = NULL;
        m->len = len;
        m->audio_frames = 0;
        m->text = 0;
        m->enq_ms = 0;
    }
    return m;
}

/* Append m (owned from now on) to s's send queue, stamped with the time
 * (the slow-reader verdict reads the oldest audio's stamp), and ask for a
 * writable callback. */
static void enqueue(sess *s, sess_msg *m) {
    m->enq_ms = ms_mono_ms();
    s->qbytes += m->len;
    if (s->qtail) s->qtail->next = m;
    else s->qhead = m;
    s->qtail = m;
    srv_conn_writable(s->c);
}

/* Free every queued message (they are never sent). */
static void queue_free(sess *s) {
    while (s->qhead) {
        sess_msg *n = s->qhead->next;
        free(s->qhead);
        s->qhead = n;
    }
    s->qtail = NULL;
    s->qbytes = 0;
}

/* Give the engine slot back (once; sess_fail and sess_closed both call it):
 * the engine ends the slot on its thread, and its outputs of this
 * generation never reach a session again. The persona snapshot the slot
 * restores is released after this (pers_ticket_release): a snapshot is
 * freed on the engine thread, which never starts another chunk of a
 * detached slot's restore. */
static void release_slot(sess *s) {
    if (!s->attached) return;
    sched_detach(s->a->sch, s->slot, s->gen);
    s->attached = 0;
    met_gauge_add(MET_sessions, -1);
}

/* Give the session's access token back (once; sess_fail and sess_closed
 * both call it): its per-token count drops when the close is decided, as
 * the slot does. */
static void release_token(sess *s) {
    if (!s->token_held) return;
    access_release(s->a->acc, s->token);
    s->token_held = 0;
}

/* Build and queue a message of kind with payload (copied). */
static int send_kind(sess *s, int kind, const void *payload, size_t len) {
    sess_msg *m = msg_new(1 + len);
    if (!m) return MS_ERR_NOMEM;
    size_t out = 0;
    ms_error e = {0};
    int rc;
    if (kind == PROTO_MSG_TEXT)
        rc = proto_msg_build_text(m->buf, srv_pre + 1 + len + 1, srv_pre, payload, len, &out, &e);
    else
        rc = proto_msg_build(m->buf, srv_pre + 1 + len + 1, srv_pre, kind, payload, len, &out, &e);
    if (rc) { free(m); return rc; }
    m->len = out;
    enqueue(s, m);
    return MS_OK;
}

void sess_fail(sess *s, int kind, int status, const char *fmt, ...) {
    if (s->close_status) return;
    char text[PROTO_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (kind >= 0) met_error(kind);
    LOGI("session_error", "id=%llu peer=%s status=%d msg=\"%s\"", (unsigned long long)s->id, srv_conn_peer(s->c),
         status, text);
    sess_msg *m = s->d ? NULL : msg_new(1 + PROTO_ERROR_TEXT_MAX);
    size_t out = 0;
    if (s->d) {
        s->failing = 1;   /* its error event passes sess_send's queue limit */
        s->d->fail(s, status, text);
    } else if (m && proto_msg_build_error(m->buf, srv_pre + 1 + PROTO_ERROR_TEXT_MAX, srv_pre, text, &out, NULL) == MS_OK) {
        m->len = out;
        enqueue(s, m);
    } else {
        free(m);
    }
    s->close_status = status;
    /* The same text in the close frame (cut to 123 bytes at a character
     * boundary): clients that do not know kind 5 (moshi.client prints
     * "unknown message kind 5") still learn why. */
    proto_msg_close_reason(s->close_reason, text);
    /* The close is decided: the slot goes back now, not when the peer
     * finally closes TCP, and the whole close (flushing this message and
     * the close handshake included) gets a hard deadline. */
    release_slot(s);
    release_token(s);
    pers_ticket_release(s->a->pers, &s->pt);   /* after the detach: see release_slot */
    s->waiting = 0;
    srv_conn_drop_after(s->c, (int)s->a->o.close_timeout_s);
    srv_conn_writable(s->c);
}

/* The slow-reader verdict: the oldest audio still queued (not yet taken by
 * the socket) waited longer than limits.output_queue_s. The queue is then
 * dropped (the client cannot catch up) and the session fails. Returns 1
 * when it did. now_ms: ms_mono_ms. */
static int check_slow_reader(sess *s, double now_ms) {
    if (s->close_status) return 0;
    const sess_msg *m = s->qhead;
    while (m && !m->audio_frames) m = m->next;
    if (!m) return 0;
    double age_s = (now_ms - m->enq_ms) / 1000.0, limit_s = s->a->o.output_queue_s;
    if (age_s <= limit_s) return 0;
    queue_free(s);
    sess_fail(s, MET_ERR_slow_reader, PROTO_CLOSE_POLICY, "client reads too slowly: audio unsent for %.1f s (limit %.1f s)",
              age_s, limit_s);
    return 1;
}

int sess_metadata_json(const app_opts *o, const char *variant, const char *backend, const lm_config *c,
                       const sess *s, char *json, size_t len) {
    /* the persona: its name (configured; [A-Za-z0-9_.-]) or null, and its
     * cache key (debug records name primes by it) */
    char persona[160] = "";
    if (s->pt.label[0])
        snprintf(persona, sizeof persona, ",\"persona\":{\"name\":%s%s%s,\"key\":\"%016llx\"}",
                 s->pt.name[0] ? "\"" : "", s->pt.name[0] ? s->pt.name : "null", s->pt.name[0] ? "\"" : "",
                 (unsigned long long)s->pt.key_hash);
    /* the checkpoint's directory name, for the Kyutai web client's
     * lm_model_file: letters, digits, '.', '-', '_' kept, others '_' */
    char lm_file[64];
    const char *lm = o->model.lm_dir ? o->model.lm_dir : "";
    size_t ll = strlen(lm);
    while (ll > 1 && lm[ll - 1] == '/') ll--;
    const char *bn = lm + ll;
    while (bn > lm && bn[-1] != '/') bn--;
    size_t bl = (size_t)(lm + ll - bn), k = 0;
    for (; k < bl && k < sizeof lm_file - 1; k++) {
        char ch = bn[k];
        lm_file[k] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                             ch == '-' || ch == '_' ? ch : '_';
    }
    lm_file[k] = '\0';
    /* The flat fields moshi-backend sends, which the Kyutai web client
     * requires all of (client/src/pages/Conversation/hooks/useServerInfo.ts,
     * a zod schema: a missing one and it shows nothing); moshid has no
     * repetition penalty or pad multiplier (1 and 0: none), and is not
     * built by cargo (its build in git_describe, the rest empty). */
    char flat[768];
    snprintf(flat, sizeof flat,
             ",\"text_temperature\":%g,\"text_topk\":%d,\"audio_temperature\":%g,\"audio_topk\":%d,"
             "\"pad_mult\":0,\"repetition_penalty_context\":0,\"repetition_penalty\":1,\"lm_model_file\":\"%s\","
             "\"instance_name\":\"%s\",\"build_info\":{\"build_timestamp\":\"\",\"build_date\":\"\",\"git_branch\":\"\","
             "\"git_timestamp\":\"\",\"git_date\":\"\",\"git_hash\":\"\",\"git_describe\":\"%s\",\"rustc_host_triple\":\"\","
             "\"rustc_version\":\"\",\"cargo_target_triple\":\"\"}",
             (double)s->samp.text_temp, s->samp.text_topk, (double)s->samp.audio_temp, s->samp.audio_topk, lm_file,
             o->instance ? o->instance : "", o->build ? o->build : "");
    int n = snprintf(json, len,
                     "{\"server\":\"moshid\",\"build\":\"%s\",\"instance\":\"%s\",\"variant\":\"%s\","
                     "\"backend\":\"%s\",\"protocol_version\":%u,"
                     "\"sampling\":{\"text_temperature\":%g,\"text_topk\":%d,\"audio_temperature\":%g,"
                     "\"audio_topk\":%d},\"max_steps\":%lld,\"frame_ms\":%g,\"sample_rate\":%d,"
                     "\"limits\":{\"max_message_bytes\":%zu,\"input_buffer_s\":%g,\"output_queue_s\":%g,"
                     "\"idle_timeout_s\":%g},\"model\":{\"dim\":%d,\"num_layers\":%d,\"dep_q\":%d,\"context\":%d}%s%s}",
                     o->build ? o->build : "", o->instance ? o->instance : "", variant, backend, PROTO_VERSION,
                     (double)s->samp.text_temp, s->samp.text_topk, (double)s->samp.audio_temp, s->samp.audio_topk,
                     (long long)s->max_steps, MS_FRAME_MS, MS_SAMPLE_RATE_HZ, o->srv.max_message_bytes, o->input_buffer_s,
                     o->output_queue_s, o->idle_timeout_s, c->dim, c->num_layers, c->dep_q, c->context, persona, flat);
    return n > 0 && (size_t)n < len ? n : -1;
}

static void send_metadata(sess *s) {
    app *a = s->a;
    char json[SESS_METADATA_MAX];
    int n = sess_metadata_json(&a->o, model_variant_name(a->m), model_backend_name(a->m), model_lm_config(a->m), s,
                               json, sizeof json);
    if (n > 0) {
        sess_msg *m = msg_new(1 + (size_t)n);
        size_t out = 0;
        if (m && proto_msg_build_metadata(m->buf, srv_pre + 1 + (size_t)n + 1, srv_pre, json, (size_t)n, &out, NULL) == MS_OK) {
            m->len = out;
            enqueue(s, m);
        } else {
            free(m);
        }
    }
}

/* A random 63-bit seed for "pick one" (PROTO_SEED_RANDOM). */
static uint64_t pick_seed(int64_t v) {
    if (v != PROTO_SEED_RANDOM) return (uint64_t)v;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static uint64_t ctr;
    uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (++ctr * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    return x & 0x7fffffffffffffffull;
}

void sess_samp_resolve(const proto_query *q, const pers_samp *ov, const app_opts *o, lm_samp *p) {
    double tt = ov->text_temperature >= 0 ? ov->text_temperature : o->text_temperature;
    double at = ov->audio_temperature >= 0 ? ov->audio_temperature : o->audio_temperature;
    int tk = ov->text_topk >= 0 ? ov->text_topk : o->text_topk, ak = ov->audio_topk >= 0 ? ov->audio_topk : o->audio_topk;
    p->text_temp = (float)(proto_query_has(q, PROTO_Q_TEXT_TEMPERATURE) ? q->text_temperature : tt);
    p->text_topk = proto_query_has(q, PROTO_Q_TEXT_TOPK) ? q->text_topk : tk;
    p->audio_temp = (float)(proto_query_has(q, PROTO_Q_AUDIO_TEMPERATURE) ? q->audio_temperature : at);
    p->audio_topk = proto_query_has(q, PROTO_Q_AUDIO_TOPK) ? q->audio_topk : ak;
    p->seed = pick_seed(proto_query_text_seed(q));
    p->audio_seed = pick_seed(proto_query_audio_seed(q));
}

/* s->slot_wait_ms, with the app's count of waiting sessions kept with it
 * (sess_slot_retry does nothing while none waits). */
static void slot_wait_set(sess *s, double v) {
    if (!s->slot_wait_ms != !v) s->a->nslot_wait += v ? 1 : -1;
    s->slot_wait_ms = v;
}

/* Take an engine slot for s (with its persona's snapshot to restore, if
 * any), or refuse it as busy. */
static void attach(sess *s) {
    app *a = s->a;
    sched_params p = {.samp = s->samp, .session_id = s->id, .persona = pers_ticket_persona(&s->pt)};
    if (sched_attach(a->sch, &p, &s->slot, &s->gen) != MS_OK) {
        /* A slot given back a moment ago (a client that closes and
         * reconnects at once) is free within a step or two: wait for it
         * (sess_slot_retry) rather than refuse. */
        double now = ms_mono_ms();
        if (sched_detaching(a->sch) > 0 && (!s->slot_wait_ms || now - s->slot_wait_ms < SESS_SLOT_WAIT_MS)) {
            if (!s->slot_wait_ms) {
                slot_wait_set(s, now);
                LOGI("session_slot_wait", "id=%llu msg=\"every slot is taken, one is being freed\"",
                     (unsigned long long)s->id);
            }
            s->waiting = 1;
            return;
        }
        s->waiting = 0;
        slot_wait_set(s, 0);
        met_add(MET_sessions_rejected_total, 1);
        sess_fail(s, MET_ERR_busy, PROTO_CLOSE_TRY_LATER, "server busy: all %d session slots are taken, try again later",
                  sched_capacity(a->sch));
        return;
    }
    s->waiting = 0;
    slot_wait_set(s, 0);
    s->attached = 1;
    met_gauge_add(MET_sessions, 1);
}

void sess_slot_retry(app *a) {
    if (!a->nslot_wait) return;   /* the common case: on every engine output signal */
    sess *last = a->sessions;
    while (last && last->next) last = last->next;
    for (sess *s = last, *p; s; s = p) { /* the list starts with the newest */
        p = s->prev;
        if (s->slot_wait_ms && !s->attached && !s->close_status) attach(s);
    }
}

/* The prime s waited for is over (persona.h, pers_ticket.done): attach
 * with the snapshot, or refuse with why. */
static void persona_done(pers_ticket *t, int ok, const pers_fail *f) {
    sess *s = (sess *)((char *)t - offsetof(sess, pt));
    s->waiting = 0;
    if (s->close_status) return;
    if (!ok) {
        sess_fail(s, f->kind, f->status, "%s", f->msg);
        return;
    }
    attach(s);
}

int sess_query_set_args(proto_query *q, const char *const *args, int nargs, ms_error *e) {
    proto_query_init(q);
    if (nargs < 0)
        return ms_err_set(e, MS_ERR_LIMIT, "more than %u parameters or %u bytes", PROTO_QUERY_MAX_PARAMS,
                          PROTO_QUERY_MAX_BYTES);
    for (int i = 0; i < nargs; i++) {
        const char *eq = strchr(args[i], '=');
        size_t kl = eq ? (size_t)(eq - args[i]) : strlen(args[i]);
        const char *v = eq ? eq + 1 : "";
        int rc = proto_query_set(q, args[i], kl, v, strlen(v), e);
        if (rc != MS_OK) return rc;
    }
    return MS_OK;
}

int sess_query_finish(proto_query *q, const lm_config *lc, int64_t max_steps, ms_error *e) {
    proto_query_limits lim = {lc->text_card, lc->card, max_steps > 0 ? max_steps : 0};
    return proto_query_finish(q, &lim, e);
}

int64_t sess_max_steps(const proto_query *q, int64_t max_steps) {
    return proto_query_has(q, PROTO_Q_MAX_STEPS) ? q->max_steps : max_steps > 0 ? max_steps : 0;
}

int sess_query_read(app *a, const char *const *args, int nargs, proto_query *q, ms_error *e) {
    int rc = sess_query_set_args(q, args, nargs, e);
    return rc != MS_OK ? rc : sess_query_finish(q, model_lm_config(a->m), a->o.max_steps, e);
}

void *sess_open(void *ud, srv_conn *c, const char *const *args, int nargs) {
    app *a = ud;
    sess *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->a = a;
    s->c = c;
    s->id = ++a->next_id;
    s->slot = -1;
    s->last_rx_ms = s->last_ping_ms = s->open_ms = ms_mono_ms();
    s->pt.samp = (pers_samp){-1, -1, -1, -1};   /* no persona overrides */
    s->next = a->sessions;
    if (a->sessions) a->sessions->prev = s;
    a->sessions = s;
    a->nsessions++;
    s->endpoint = srv_conn_endpoint(c);
    s->d = s->endpoint >= 0 && s->endpoint < SRV_EP__COUNT ? a->dialect[s->endpoint] : NULL;
    met_endpoint_open(s->endpoint);
    /* Its token (access.h): ws_admit judged the upgrade; the session now
     * counts against the token's limit. With tokens required, a
     * connection without one was not judged: refused (fail closed). */
    uint64_t tok = (uint64_t)(uintptr_t)srv_conn_principal(c);
    LOGI("session_open", "id=%llu peer=%s token=%s", (unsigned long long)s->id, srv_conn_peer(c),
         tok ? access_name(a->acc, tok) : "-");
    if (tok || access_required(a->acc)) {
        ms_error ae = {0};
        int rc = tok ? access_acquire(a->acc, tok, &ae)
                     : ms_err_set(&ae, MS_ERR_NOTFOUND, "authentication required: the upgrade was not checked");
        if (rc != MS_OK) {
            met_auth_refused(rc == MS_ERR_LIMIT ? MET_AUTH_token_limit
                             : tok              ? MET_AUTH_unknown_token
                                                : MET_AUTH_missing_token);
            sess_fail(s, -1, rc == MS_ERR_LIMIT ? PROTO_CLOSE_TRY_LATER : PROTO_CLOSE_POLICY, "%s", ae.msg);
            return s;
        }
        s->token = tok;
        s->token_held = 1;
    }

    if (a->stopping) {
        sess_fail(s, MET_ERR_busy, PROTO_CLOSE_TRY_LATER, "server is shutting down");
        return s;
    }
    ms_error e = {0};
    if (sess_query_set_args(&s->q, args, nargs, &e) != MS_OK) {
        sess_fail(s, MET_ERR_bad_query, PROTO_CLOSE_POLICY, "bad query: %s", e.msg);
        return s;
    }
    if (s->d) {
        s->d->open(s, args, nargs);   /* it calls sess_start when it has the settings */
        return s;
    }
    sess_start(s);
    return s;
}

/* The second half of a session's opening (sess.h): for /api/chat at once,
 * for a dialect when it has the session's settings. */
void sess_start(sess *s) {
    app *a = s->a;
    ms_error e = {0};
    if (s->begun || s->close_status) return;
    s->begun = 1;
    if (sess_query_finish(&s->q, model_lm_config(a->m), a->o.max_steps, &e) != MS_OK) {
        sess_fail(s, MET_ERR_bad_query, PROTO_CLOSE_POLICY, "bad query: %s", e.msg);
        return;
    }
    s->max_steps = sess_max_steps(&s->q, a->o.max_steps);
    /* as tolerant as the official servers' reader: a stream joined late
     * (a client reconnecting with its encoder) or begun again (ogg.h) */
    static const ogg_limits chained = {.chain = true};
    if (!s->d && (!(s->dec = audio_dec_create(&chained, (audio_pre_skip)a->o.input_pre_skip, &e)) ||
                  !(s->enc = audio_enc_create((uint32_t)s->id, 0, OGG_OPUS_DEF_PRE_SKIP, &e)))) {
        sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: %s", e.msg);
        return;
    }
    /* The persona (persona.c): none, a snapshot to restore, or a prime to
     * wait for. Not asked of a server that is full or behind: the session
     * is refused below anyway. */
    int full = sched_free_slots(a->sch) == 0 && sched_detaching(a->sch) == 0, over = sched_overloaded(a->sch);
    pers_answer pa = PERS_NONE;
    s->pt.done = persona_done;
    if (!full && !over) {
        pers_fail pf;
        if ((pa = pers_request(a->pers, &s->q, &s->pt, &pf)) == PERS_FAIL) {
            sess_fail(s, pf.kind, pf.status, "%s", pf.msg);
            return;
        }
    }
    sess_samp_resolve(&s->q, &s->pt.samp, &a->o, &s->samp);   /* the one struct the engine and the metadata get */
    if (over) { /* /healthz says 503 too: no new session while the engine is behind */
        met_add(MET_sessions_rejected_total, 1);
        sess_fail(s, MET_ERR_overload, PROTO_CLOSE_TRY_LATER,
                  "server overloaded: the engine is behind real time, no new session now; try again later");
        return;
    }
    if (pa == PERS_WAIT) { /* attached when the prime is done (persona_done) */
        s->waiting = 1;
        LOGI("session_persona_wait", "id=%llu what=\"%s\" key=%016llx", (unsigned long long)s->id, s->pt.label,
             (unsigned long long)s->pt.key_hash);
        return;
    }
    attach(s);
}

/* How far the engine is behind this session, seconds: the lesser of how
 * long its oldest waiting frame has waited (oldest_ms) and how far the
 * audio stepped so far (stepped frames) trails the wall clock since its
 * first audio. Both are about the backlog for a client in real time; a
 * client that ran ahead (its wall clock is short) or paused and then sent
 * a burst (its frames are fresh) has a backlog of its own making, and
 * the engine is not behind for it. */
static double behind_s(const sess *s, double now, double oldest_ms, uint64_t stepped) {
    double waited = (now - oldest_ms) / 1000.0;
    double lag = (now - s->first_audio_ms) / 1000.0 - (double)stepped * MS_FRAME_MS / 1000.0;
    return waited < lag ? waited : lag;
}

/* The input buffer (the slot's ring, or the early frames before READY) is
 * full, with `waiting` frames, the oldest of them from oldest_ms, although
 * the client is not ahead of real time by more than the buffer (ahead_s):
 * who is behind? If the engine is behind by a good part of the buffer
 * (SESS_BEHIND_FRAC), the session is shed as an overload (1013, the
 * server's fault). Otherwise it is the client's (1008): ahead of real time
 * by that much, it sends too fast (a slow engine fills the buffer before
 * the client is a whole buffer ahead); else it sent more than the buffer
 * at once (a burst after a pause). The frame being pushed is counted in
 * frames_in but does not wait. */
static void input_full(sess *s, double now, double oldest_ms, int waiting, double ahead_s) {
    double lim = s->a->o.input_buffer_s;
    double behind = behind_s(s, now, oldest_ms, s->frames_in - 1 - (uint64_t)waiting);
    if (behind >= SESS_BEHIND_FRAC * lim) {
        LOGW("overload", "id=%llu action=shed why=input_full backlog_frames=%d behind_s=%.2f limit_s=%g",
             (unsigned long long)s->id, waiting, behind, lim);
        sess_fail(s, MET_ERR_overload, PROTO_CLOSE_TRY_LATER,
                  "server overloaded: the engine is %.1f s behind this session's audio (limits.input_buffer_s = %g); "
                  "try again later",
                  behind, lim);
        return;
    }
    if (ahead_s >= SESS_BEHIND_FRAC * lim) {
        sess_fail(s, MET_ERR_input_overrun, PROTO_CLOSE_POLICY,
                  "audio arrives faster than real time: %.1f s ahead, %.1f s waits for the engine "
                  "(limits.input_buffer_s = %g)",
                  ahead_s, (double)waiting * MS_FRAME_MS / 1000.0, lim);
        return;
    }
    sess_fail(s, MET_ERR_input_overrun, PROTO_CLOSE_POLICY,
              "audio burst: %.1f s of audio waits for the engine, more than limits.input_buffer_s = %g, but the "
              "engine is only %.1f s behind real time",
              (double)waiting * MS_FRAME_MS / 1000.0, lim, behind > 0 ? behind : 0.0);
}

/* Hand one full frame to the engine (or keep it until READY). Two bounds:
 * a client may be at most input_buffer_s ahead of real time, judged
 * against the wall clock since its first audio (bursts of that size pass);
 * and at most input_buffer_s of its audio may wait for the engine (the
 * ring), where input_full decides who is at fault. */
static int push_frame(sess *s, const float *pcm) {
    double now = ms_mono_ms();
    if (s->frames_in++ == 0) s->first_audio_ms = now;
    double ahead_s = (double)s->frames_in * MS_FRAME_MS / 1000.0 - (now - s->first_audio_ms) / 1000.0;
    if (ahead_s > s->a->o.input_buffer_s) {
        sess_fail(s, MET_ERR_input_overrun, PROTO_CLOSE_POLICY,
                  "audio arrives faster than real time: %.1f s ahead (limit %.1f s)", ahead_s, s->a->o.input_buffer_s);
        return MS_ERR_LIMIT;
    }
    if (!s->ready) {
        if (s->early_n == s->early_cap && s->waiting) {
            /* its persona is still being primed: the audio past the buffer
             * is dropped (docs/protocol.md, section 3), not held against
             * the client or the engine */
            if (s->early_dropped++ == 0)
                LOGI("early_audio_dropped", "id=%llu msg=\"the persona is being primed; audio past "
                     "limits.input_buffer_s before the handshake is dropped\"", (unsigned long long)s->id);
            return MS_OK;
        }
        if (s->early_n == s->early_cap) {
            input_full(s, now, s->early_t0_ms, s->early_n, ahead_s);
            return MS_ERR_LIMIT;
        }
        if (s->early_n == 0) s->early_t0_ms = now;
        memcpy(s->early + (size_t)s->early_n++ * MS_FRAME_SAMPLES, pcm, sizeof(float) * MS_FRAME_SAMPLES);
        return MS_OK;
    }
    int rc = sched_push(s->a->sch, s->slot, s->gen, pcm);
    if (rc == MS_ERR_LIMIT) {
        int frames = 0;
        double oldest = now;
        sched_backlog(s->a->sch, s->slot, s->gen, &frames, &oldest);
        input_full(s, now, frames ? oldest : now, frames, ahead_s);
    }
    return rc;
}

static int on_pcm(void *user, const float *pcm, size_t n, ms_error *err) {
    sess *s = user;
    (void)err;
    while (n > 0 && !s->close_status) {
        size_t take = MS_FRAME_SAMPLES - (size_t)s->acc_n;
        if (take > n) take = n;
        memcpy(s->acc + s->acc_n, pcm, take * sizeof(float));
        s->acc_n += (int)take;
        pcm += take;
        n -= take;
        if (s->acc_n == MS_FRAME_SAMPLES) {
            s->acc_n = 0;
            if (push_frame(s, s->acc) != MS_OK) return MS_ERR_LIMIT;
        }
    }
    return MS_OK;
}

/* The buffer of frames received before READY, made with the first audio.
 * MS_OK, or MS_ERR_NOMEM after sess_fail. */
static int early_alloc(sess *s) {
    if (s->early || s->early_cap != 0) return MS_OK;
    s->early_cap = s->a->in_frames;
    s->early = malloc(sizeof(float) * MS_FRAME_SAMPLES * (size_t)s->early_cap);
    if (s->early) return MS_OK;
    sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: out of memory");
    return MS_ERR_NOMEM;
}

int sess_feed_pcm(sess *s, const float *pcm, size_t n) {
    if (s->close_status || (!s->attached && !s->waiting)) return MS_ERR_STATE;
    s->last_rx_ms = ms_mono_ms();
    if (early_alloc(s) != MS_OK) return MS_ERR_NOMEM;
    return on_pcm(s, pcm, n, NULL);
}

int sess_send(sess *s, const void *data, size_t len, int text, int audio_frames) {
    if (s->close_status) return MS_ERR_STATE;
    if (!s->failing && s->qbytes + len > SESS_QUEUE_MAX_BYTES) {
        /* a client that sends events but does not read the answers (the
         * slow-reader verdict looks at audio only) */
        queue_free(s);
        sess_fail(s, MET_ERR_slow_reader, PROTO_CLOSE_POLICY,
                  "client reads too slowly: more than %u bytes of messages unsent", SESS_QUEUE_MAX_BYTES);
        return MS_ERR_LIMIT;
    }
    sess_msg *m = msg_new(len);
    if (!m) return MS_ERR_NOMEM;
    memcpy(m->buf + srv_pre, data, len);
    m->text = text;
    m->audio_frames = audio_frames;
    enqueue(s, m);
    return MS_OK;
}

void sess_message(void *ud, void *sp, const uint8_t *data, size_t len) {
    (void)ud;
    sess *s = sp;
    if (s->close_status) return;
    met_add(MET_bytes_in_total, len);
    if (s->d) {
        s->d->message(s, data, len);
        return;
    }
    proto_msg msg;
    switch (proto_msg_parse(data, len, s->a->o.srv.max_message_bytes, &msg)) {
    case PROTO_CLASS_EMPTY: met_ignored(MET_IGN_empty); return;
    case PROTO_CLASS_UNKNOWN: met_ignored(MET_IGN_unknown); return;
    case PROTO_CLASS_OVERSIZE: sess_oversize(ud, sp, len); return;
    default: break;
    }
    switch (msg.kind) {
    case PROTO_MSG_AUDIO:
        /* only audio counts as activity for limits.idle_timeout_s: a
         * client that sends one small unknown (or any ignored) message
         * every few seconds must not hold a slot for ever */
        s->last_rx_ms = ms_mono_ms();
        break;
    case PROTO_MSG_CONTROL: met_ignored(MET_IGN_control); return;
    case PROTO_MSG_PING: met_ignored(MET_IGN_ping); return;
    case PROTO_MSG_TEXT: met_ignored(MET_IGN_text); return;
    default: met_ignored(MET_IGN_unknown); return;
    }
    if (!s->attached && !s->waiting) return; /* refused session: its error is on the way */
    if (early_alloc(s) != MS_OK) return;
    ms_error e = {0};
    int rc = audio_dec_feed(s->dec, msg.payload, msg.payload_len, on_pcm, s, &e);
    if (rc != MS_OK && !s->close_status)
        sess_fail(s, MET_ERR_bad_audio, PROTO_CLOSE_POLICY, "bad audio: %s", e.msg);
}

void sess_oversize(void *ud, void *sp, size_t len) {
    (void)ud;
    sess *s = sp;
    sess_fail(s, MET_ERR_oversize, PROTO_CLOSE_TOO_BIG, "message of %zu bytes exceeds the limit of %zu bytes", len,
              s->a->o.srv.max_message_bytes);
}

/* The socket takes data: send queued messages as long as it takes them
 * (never while choked: libwebsockets may hold a partial write), then ask
 * for the next callback if any are left, or close once the queue of a
 * closing session is through. */
void sess_writable(void *ud, void *sp) {
    (void)ud;
    sess *s = sp;
    while (s->qhead && !srv_conn_choked(s->c)) {
        sess_msg *m = s->qhead;
        s->qhead = m->next;
        if (!s->qhead) s->qtail = NULL;
        s->qbytes -= m->len;
        int rc = m->text ? srv_conn_send_text(s->c, m->buf, m->len) : srv_conn_send(s->c, m->buf, m->len);
        if (rc == 0) met_add(MET_bytes_out_total, m->len);
        free(m);
        if (rc != 0) { /* the socket failed: the connection is dropped, ws_closed follows */
            queue_free(s);
            return;
        }
    }
    if (s->qhead) srv_conn_writable(s->c);
    else if (s->close_status) srv_conn_close(s->c, s->close_status, s->close_reason);
}

void sess_closed(void *ud, void *sp) {
    app *a = ud;
    sess *s = sp;
    release_slot(s);
    release_token(s);
    pers_ticket_release(a->pers, &s->pt);
    slot_wait_set(s, 0);
    met_endpoint_close(s->endpoint);
    if (s->d) s->d->closed(s);
    /* close_status 0: the client closed or the connection dropped (the
     * server decided no close); else the status and reason it sent */
    LOGI("session_closed",
         "id=%llu peer=%s duration_s=%.1f frames_in=%llu frames_out=%llu frames_late=%llu early_dropped=%llu "
         "close_status=%d reason=\"%s\"",
         (unsigned long long)s->id, srv_conn_peer(s->c), (ms_mono_ms() - s->open_ms) / 1000.0,
         (unsigned long long)s->frames_in, (unsigned long long)s->steps, (unsigned long long)s->frames_late,
         (unsigned long long)s->early_dropped, s->close_status, s->close_status ? s->close_reason : "");
    if (s->prev) s->prev->next = s->next;
    else a->sessions = s->next;
    if (s->next) s->next->prev = s->prev;
    a->nsessions--;
    queue_free(s);
    audio_dec_free(s->dec);
    audio_enc_free(s->enc);
    free(s->early);
    free(s);
}

/* READY: log it and hand the engine the frames that came before. */
static void push_early(sess *s) {
    LOGI("session_ready", "id=%llu peer=%s slot=%d early_frames=%d persona=%016llx", (unsigned long long)s->id,
         srv_conn_peer(s->c), s->slot, s->early_n, (unsigned long long)s->pt.key_hash);
    for (int i = 0; i < s->early_n && !s->close_status; i++)
        if (sched_push(s->a->sch, s->slot, s->gen, s->early + (size_t)i * MS_FRAME_SAMPLES) != MS_OK)
            sess_fail(s, MET_ERR_input_overrun, PROTO_CLOSE_POLICY, "too much audio before the session was ready");
    s->early_n = 0;
}

static void on_ready(sess *s) {
    s->ready = 1;
    met_add(MET_sessions_started_total, 1);
    if (s->pt.entry) pers_restored(s->a->pers);
    pers_ticket_release(s->a->pers, &s->pt);   /* the restore is done: the snapshot is no longer read */
    /* the idle timeout counts from the handshake at the earliest (a client
     * may wait for a prime without sending) */
    double now = ms_mono_ms();
    if (s->last_rx_ms < now) s->last_rx_ms = now;
    if (s->d) {
        s->d->ready(s);
        push_early(s);
        return;
    }
    sess_msg *m = msg_new(PROTO_HANDSHAKE_BYTES);
    size_t out = 0;
    if (!m || proto_msg_build_handshake(m->buf, srv_pre + PROTO_HANDSHAKE_BYTES + 1, srv_pre, 0, &out, NULL) != MS_OK) {
        free(m);
        sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: handshake");
        return;
    }
    m->len = out;
    enqueue(s, m);
    send_metadata(s);
    push_early(s);
}

static void on_frame(sess *s, const sched_out *o) {
    app *a = s->a;
    s->steps++;
    if (o->latency_ms > MS_FRAME_MS) s->frames_late++;   /* the scheduler's rule for moshid_late_frames_total */
    if (s->d) s->d->frame(s, o);
    else if (o->has_pcm) {
        uint8_t buf[AUDIO_ENC_OUT_MAX];
        size_t n = 0;
        ms_error e = {0};
        if (audio_enc_frame(s->enc, o->pcm, buf, sizeof buf, &n, &e) != MS_OK) {
            sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: %s", e.msg);
            return;
        }
        sess_msg *m = msg_new(1 + n);
        size_t out = 0;
        if (!m || proto_msg_build(m->buf, srv_pre + 1 + n + 1, srv_pre, PROTO_MSG_AUDIO, buf, n, &out, NULL) != MS_OK) {
            free(m);
            return;
        }
        m->len = out;
        m->audio_frames = 1;
        enqueue(s, m);
    }
    const char *piece = !s->d && o->text >= 0 ? model_piece(a->m, o->text) : NULL;
    if (piece && piece[0]) send_kind(s, PROTO_MSG_TEXT, piece, strlen(piece));
    if (check_slow_reader(s, ms_mono_ms())) return;
    if (s->max_steps > 0 && (int64_t)s->steps >= s->max_steps)
        sess_fail(s, MET_ERR_max_steps, PROTO_CLOSE_NORMAL, "session reached its maximum length of %lld frames (%.0f s)",
                  (long long)s->max_steps, (double)s->max_steps * MS_FRAME_MS / 1000.0);
}

void sess_drain(sess *s) {
    if (!s->attached) return;
    sched_out o;
    while (s->attached && sched_pop(s->a->sch, s->slot, s->gen, &o)) {
        if (!s->close_status) { /* closing: results are dropped */
            switch (o.kind) {
            case SCHED_OUT_READY: on_ready(s); break;
            case SCHED_OUT_FRAME: on_frame(s, &o); break;   /* reads o.pcm: released after */
            case SCHED_OUT_ERROR:
                sess_fail(s, MET_ERR_internal, PROTO_CLOSE_INTERNAL, "internal error: the engine could not serve this session");
                break;
            }
        }
        sched_release(s->a->sch, s->slot, s->gen);
    }
}

void sess_tick(sess *s, double now) {
    /* A client that stopped reading is found here too when the engine's
     * output for it has stopped (no new frame to check on). */
    if (check_slow_reader(s, now)) return;
    if (s->d && !s->begun) {
        /* a dialect's session not started yet (no settings, no audio):
         * it holds no slot, but its connection; the idle timeout counts
         * from the open */
        double idle = (now - s->last_rx_ms) / 1000.0;
        if (!s->close_status && s->a->o.idle_timeout_s > 0 && idle > s->a->o.idle_timeout_s)
            sess_fail(s, MET_ERR_idle_timeout, PROTO_CLOSE_POLICY, "no audio from the client for %.1f s (limits.idle_timeout_s = %g)",
                      idle, s->a->o.idle_timeout_s);
        return;
    }
    if (!s->ready) {
        /* before the handshake (a persona being primed): a ping every
         * PERS_WAIT_PING_S, so that clients that give up after 10 s
         * without a message wait; no idle timeout yet */
        if (!s->d && !s->close_status && (s->waiting || s->attached) && now - s->last_ping_ms >= PERS_WAIT_PING_S * 1000.0) {
            send_kind(s, PROTO_MSG_PING, "", 0);
            s->last_ping_ms = now;
        }
        return;
    }
    double idle = (now - s->last_rx_ms) / 1000.0;
    if (!s->close_status && s->a->o.idle_timeout_s > 0 && idle > s->a->o.idle_timeout_s)
        sess_fail(s, MET_ERR_idle_timeout, PROTO_CLOSE_POLICY, "no audio from the client for %.1f s (limits.idle_timeout_s = %g)",
                  idle, s->a->o.idle_timeout_s);
}

/* sess_shed_tick's view of one session: whether it waits for the engine
 * (a ready session with input not yet stepped) and, if so, how far the
 * engine is behind it (behind_s) and how many frames wait. */
static int engine_wait(const sess *s, double now, double *behind, int *frames) {
    double oldest = 0;
    *frames = 0;
    if (!s->attached || !s->ready || s->close_status) return 0;
    if (sched_backlog(s->a->sch, s->slot, s->gen, frames, &oldest) != MS_OK || *frames == 0) return 0;
    *behind = behind_s(s, now, oldest, s->frames_in - (uint64_t)*frames);
    return 1;
}

void sess_shed_tick(app *a, double now) {
    int worst_frames = 0, frames;
    double worst_s = 0, behind;
    for (sess *s = a->sessions; s; s = s->next) {
        if (!engine_wait(s, now, &behind, &frames)) continue;
        if (frames > worst_frames) worst_frames = frames;
        if (behind > worst_s) worst_s = behind;
    }
    met_set(MET_input_backlog_frames, worst_frames);
    double lim = a->o.input_buffer_s;
    if (!sched_overloaded(a->sch) || worst_s < SESS_BEHIND_FRAC * lim) return;
    /* The engine is behind and falls further behind (its steps take longer
     * than a frame): close the newest session it is that far behind for
     * (the list starts with the newest), one a second, so that the longer
     * conversations keep up. */
    for (sess *s = a->sessions; s; s = s->next) {
        if (!engine_wait(s, now, &behind, &frames) || behind < SESS_BEHIND_FRAC * lim) continue;
        LOGW("overload", "id=%llu action=shed why=newest backlog_frames=%d behind_s=%.2f limit_s=%g sessions=%d",
             (unsigned long long)s->id, frames, behind, lim, a->nsessions);
        sess_fail(s, MET_ERR_overload, PROTO_CLOSE_TRY_LATER,
                  "server overloaded: the engine is %.1f s behind real time; the newest sessions are closed "
                  "first; try again later",
                  behind);
        return;
    }
}
