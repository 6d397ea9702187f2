/* srv_limit.c - the front end's connection-level defences (srv.h,
 * srv_config): the per-IP rate and the table of client addresses at
 * accept, the pending limits (total and per IP) and the handshake
 * timeout until a request is complete, the active limits after. See
 * srv.c's head comment for where libwebsockets calls each.
 *
 * A connection is tracked (srv_track, the wsi's opaque user data) from
 * SERVER_NEW_CLIENT_INSTANTIATED to WSI_DESTROY. Connections the limits
 * close are "doomed": they leave the counts at once and are closed by the
 * sweep timer, outside any libwebsockets callback. The sweep timer points
 * only at srv, never at a connection: a track is freed in WSI_DESTROY
 * alone, after it has left every list. Loop thread.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "srv_int.h"

/* Defaults of the connection limits (srv.h: 0 in srv_config). */
#define SRV_DEF_MAX_CONNECTIONS 64
#define SRV_DEF_MAX_CONNECTIONS_PER_IP 32
#define SRV_DEF_MAX_PENDING 64
#define SRV_DEF_MAX_PENDING_PER_IP 16
#define SRV_DEF_HANDSHAKE_TIMEOUT_MS 5000

int srv_addr_text(const struct sockaddr *sa, char *out, size_t len) {
    const void *a;
    int af = sa->sa_family;
    if (af == AF_INET) a = &((const struct sockaddr_in *)sa)->sin_addr;
    else if (af == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        a = a6;
        if (IN6_IS_ADDR_V4MAPPED(a6)) { /* a dual-stack socket's IPv4 client: as IPv4 */
            a = a6->s6_addr + 12;
            af = AF_INET;
        }
    } else {
        snprintf(out, len, "?");
        return -1;
    }
    if (!inet_ntop(af, a, out, (socklen_t)len)) {
        snprintf(out, len, "?");
        return -1;
    }
    return 0;
}

void srv_refused(srv *s, srv_refusal why) {
    if (s->cfg.on_refuse) s->cfg.on_refuse((int)why);
}

int srv_lim_init(srv *s) {
    s->ips = calloc(SRV_IP_SLOTS, sizeof *s->ips);
    if (!s->ips) return MS_ERR_NOMEM;
    srv_config *c = &s->cfg;
    if (!c->max_connections) c->max_connections = SRV_DEF_MAX_CONNECTIONS;
    if (!c->max_connections_per_ip) c->max_connections_per_ip = SRV_DEF_MAX_CONNECTIONS_PER_IP;
    if (!c->max_pending) c->max_pending = SRV_DEF_MAX_PENDING;
    if (!c->max_pending_per_ip) c->max_pending_per_ip = SRV_DEF_MAX_PENDING_PER_IP;
    if (!c->handshake_timeout_ms) c->handshake_timeout_ms = SRV_DEF_HANDSHAKE_TIMEOUT_MS;
    if (c->conn_rate_per_ip > 0 && !c->conn_burst_per_ip)
        c->conn_burst_per_ip = c->conn_rate_per_ip * 2 >= 1 ? (unsigned)(c->conn_rate_per_ip * 2) : 1;
    if (getrandom(&s->hash_seed, sizeof s->hash_seed, GRND_NONBLOCK) != (ssize_t)sizeof s->hash_seed)
        s->hash_seed = (uint64_t)(uintptr_t)s ^ uv_hrtime();
    return MS_OK;
}

void srv_lim_free(srv *s) {
    free(s->ips);
    s->ips = NULL;
}

int srv_lim_key(const struct sockaddr *sa, uint8_t key[16]) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &a->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(key, a, 16);
        /* IPv4-mapped (a dual-stack listener's IPv4 clients): whole */
        if (!IN6_IS_ADDR_V4MAPPED(a)) memset(key + SRV_IP6_PREFIX_BYTES, 0, 16 - SRV_IP6_PREFIX_BYTES);
        return 0;
    }
    return -1;
}


static uint64_t ip_hash(const srv *s, const uint8_t key[16]) {
    uint64_t h = 1469598103934665603ull ^ s->hash_seed; /* FNV-1a, seeded: addresses are the client's choice */
    for (int i = 0; i < 16; i++) h = (h ^ key[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The entry of key, made if need be (reusing an entry with no open
 * connection in the probe window); NULL when the window holds none. */
static srv_ip *ip_get(srv *s, const uint8_t key[16]) {
    uint64_t h = ip_hash(s, key);
    srv_ip *reuse = NULL;
    for (unsigned i = 0; i < SRV_IP_PROBE; i++) {
        srv_ip *e = &s->ips[(h + i) & (SRV_IP_SLOTS - 1)];
        if (!e->used) {
            if (!reuse) reuse = e;
            break;
        }
        if (memcmp(e->addr, key, 16) == 0) return e;
        if (!reuse && e->conns == 0) reuse = e;
    }
    if (!reuse) return NULL;
    memset(reuse, 0, sizeof *reuse);
    memcpy(reuse->addr, key, 16);
    reuse->used = 1;
    reuse->tokens = -1; /* full bucket on first use */
    return reuse;
}

/* Take a token from the IP's bucket; 0 when it is empty. */
static int ip_take_token(srv *s, srv_ip *e) {
    double rate = s->cfg.conn_rate_per_ip;
    if (rate <= 0) return 1;
    double burst = s->cfg.conn_burst_per_ip;
    uint64_t now = uv_now(s->loop);
    if (e->tokens < 0) e->tokens = burst;
    else e->tokens += (double)(now - e->refill_ms) * rate / 1000.0;
    if (e->tokens > burst) e->tokens = burst;
    e->refill_ms = now;
    if (e->tokens < 1) return 0;
    e->tokens -= 1;
    return 1;
}

int srv_lim_accept(srv *s, const struct sockaddr *sa) {
    uint8_t key[16];
    if (srv_lim_key(sa, key) != 0) return 1;
    srv_ip *e = ip_get(s, key);
    if (!e) { srv_refused(s, SRV_REF_ip_table); return 1; }
    if (!ip_take_token(s, e)) { srv_refused(s, SRV_REF_rate); return 1; }
    return 0;
}

static void glist_remove(srv_track **head, srv_track **tail, srv_track *t) {
    if (t->gprev) t->gprev->gnext = t->gnext;
    else if (head) *head = t->gnext;
    if (t->gnext) t->gnext->gprev = t->gprev;
    else if (tail) *tail = t->gprev;
    t->gprev = t->gnext = NULL;
}

static void pending_leave(srv *s, srv_track *t) {
    if (t->state != TRK_PENDING) return;
    glist_remove(&s->pend_head, &s->pend_tail, t);
    srv_ip *e = t->ip;
    if (t->iprev) t->iprev->inext = t->inext;
    else e->pend_head = t->inext;
    if (t->inext) t->inext->iprev = t->iprev;
    else e->pend_tail = t->iprev;
    t->iprev = t->inext = NULL;
    e->pending--;
    s->npending--;
    if (e->pending == 0) {
        if (e->pprev) e->pprev->pnext = e->pnext;
        else s->pend_ips = e->pnext;
        if (e->pnext) e->pnext->pprev = e->pprev;
        e->pprev = e->pnext = NULL;
    }
    t->state = 0;
}

static void active_leave(srv *s, srv_track *t) {
    if (t->state != TRK_ACTIVE) return;
    if (t->counted) {
        t->ip->active--;
        s->nactive--;
    }
    t->counted = 0;
    t->state = 0;
}

static void sweep_arm(srv *s);

/* Close t at the next sweep (outside any lws callback): its pending slot
 * is free at once. */
static void doom(srv *s, srv_track *t, srv_refusal why) {
    pending_leave(s, t);
    active_leave(s, t);
    t->state = TRK_DOOMED;
    t->doomed_why = (int)why;
    t->gprev = NULL;
    t->gnext = s->doomed;
    if (s->doomed) s->doomed->gprev = t;
    s->doomed = t;
    srv_refused(s, why);
}

static void pending_enter(srv *s, srv_track *t) {
    srv_ip *e = t->ip;
    t->state = TRK_PENDING;
    t->since_ms = uv_now(s->loop);
    t->seq = ++s->pend_seq;
    t->gnext = NULL;
    t->gprev = s->pend_tail;
    if (s->pend_tail) s->pend_tail->gnext = t;
    else s->pend_head = t;
    s->pend_tail = t;
    t->inext = NULL;
    t->iprev = e->pend_tail;
    if (e->pend_tail) e->pend_tail->inext = t;
    else e->pend_head = t;
    e->pend_tail = t;
    if (e->pending++ == 0) {
        e->pprev = NULL;
        e->pnext = s->pend_ips;
        if (s->pend_ips) s->pend_ips->pprev = e;
        s->pend_ips = e;
    }
    s->npending++;
    /* Over the limits: the oldest of this IP, then of the IP with the
     * most pending (so a client with one pending connection is never the
     * one closed while another has more). */
    while (e->pending > s->cfg.max_pending_per_ip && e->pend_head != t) doom(s, e->pend_head, SRV_REF_pending_evicted);
    while (s->npending > s->cfg.max_pending) {
        /* the IP with the most pending; among equals, the one whose oldest
         * is oldest (many addresses with one each: the oldest overall).
         * A scan of the addresses with pending connections (at most
         * max_pending + 1 of them), only while the total is over. */
        srv_ip *most = NULL;
        for (srv_ip *x = s->pend_ips; x; x = x->pnext) {
            if (x->pend_head == t) continue;
            if (!most || x->pending > most->pending ||
                (x->pending == most->pending && x->pend_head->seq < most->pend_head->seq))
                most = x;
        }
        if (!most) break;
        doom(s, most->pend_head, SRV_REF_pending_evicted);
    }
    sweep_arm(s);
}

/* Pending -> active; 0, or the refusal when the active limits are full.
 * count 0: a request for a dynamic path (/healthz, /metrics: answered at
 * once from memory), which the active limits do not hold back, so that
 * monitoring sees a server whose sessions fill them. */
static int active_enter(srv *s, srv_track *t, int count) {
    if (t->state == TRK_ACTIVE && (t->counted || !count)) return 0; /* a further request on a keep-alive connection */
    pending_leave(s, t);
    sweep_arm(s);
    if (count && s->nactive >= s->cfg.max_connections) return SRV_REF_busy;
    if (count && t->ip->active >= s->cfg.max_connections_per_ip) return SRV_REF_per_ip;
    t->state = TRK_ACTIVE;
    t->counted = count;
    if (count) {
        t->ip->active++;
        s->nactive++;
    }
    return 0;
}

int srv_lim_admit(srv *s, struct lws *wsi, int count) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t) return 0;
    if (t->state == TRK_DOOMED || t->state == TRK_DONE) return -1; /* being closed */
    if (t->state == TRK_ACTIVE && !t->counted && count) active_leave(s, t); /* dynamic, now counted: judge again */
    return active_enter(s, t, count);
}

void srv_lim_answered(srv *s, struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t || t->state != TRK_ACTIVE) return;
    active_leave(s, t);
    pending_enter(s, t);
}

const char *srv_lim_peer(struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    return t ? t->peer : "-";
}

void *srv_lim_principal(struct lws *wsi, int set, void *p) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t) return NULL;
    if (set) t->principal = p;
    return t->principal;
}

static void on_sweep(uv_timer_t *h) {
    srv *s = h->data;
    uint64_t now = uv_now(s->loop);
    while (s->pend_head && now - s->pend_head->since_ms >= s->cfg.handshake_timeout_ms)
        doom(s, s->pend_head, SRV_REF_handshake_timeout);
    /* lws_set_timeout(LWS_TO_KILL_SYNC) closes at once: safe here, in a
     * timer callback of our own; the close calls WSI_DESTROY, which frees
     * t (already off the doomed list: it is not touched after the call). */
    while (s->doomed) {
        srv_track *t = s->doomed;
        s->doomed = t->gnext;
        if (s->doomed) s->doomed->gprev = NULL;
        t->gnext = t->gprev = NULL;
        t->state = TRK_DONE;
        lws_set_timeout(t->wsi, PENDING_TIMEOUT_HOLDING_AH, LWS_TO_KILL_SYNC);
    }
    s->sweep_on = 0;
    sweep_arm(s);
}

static void sweep_arm(srv *s) {
    if (!s->sweep_ready) return;
    uint64_t delay;
    if (s->doomed) delay = 0;
    else if (s->pend_head) {
        uint64_t now = uv_now(s->loop), due = s->pend_head->since_ms + s->cfg.handshake_timeout_ms;
        delay = due > now ? due - now : 0;
    } else {
        if (s->sweep_on) uv_timer_stop(&s->sweep);
        s->sweep_on = 0;
        return;
    }
    uv_timer_start(&s->sweep, on_sweep, delay, 0);
    s->sweep_on = 1;
}

void srv_lim_sweep_start(srv *s) {
    uv_timer_init(s->loop, &s->sweep);
    s->sweep.data = s;
    s->sweep_ready = 1;
}

static void sweep_closed(uv_handle_t *h) { (void)h; }

void srv_lim_sweep_stop(srv *s) {
    if (!s->sweep_ready) return;
    s->sweep_ready = 0;
    uv_timer_stop(&s->sweep);
    uv_close((uv_handle_t *)&s->sweep, sweep_closed);
}

/* A new connection (its wsi, no header slot yet): pending. Its client
 * address is the one srv_listen.c adopted it with; a connection adopted
 * otherwise is judged by its TCP peer. */
int srv_lim_track_new(srv *s, struct lws *wsi) {
    uint8_t key[16];
    struct sockaddr_storage ss;
    if (s->adopting) {
        ss = *s->adopting;
    } else {
        socklen_t sl = sizeof ss;
        int fd = lws_get_socket_fd(wsi);
        if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return -1; /* the peer is gone already */
    }
    if (srv_lim_key((const struct sockaddr *)&ss, key) != 0) return -1;
    srv_ip *e = ip_get(s, key);
    if (!e) { srv_refused(s, SRV_REF_ip_table); return -1; }
    srv_track *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->wsi = wsi;
    t->ip = e;
    srv_addr_text((const struct sockaddr *)&ss, t->peer, sizeof t->peer);
    e->conns++;
    lws_set_opaque_user_data(wsi, t);
    pending_enter(s, t);
    return 0;
}

void srv_lim_track_destroy(srv *s, struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t) return;
    lws_set_opaque_user_data(wsi, NULL);
    pending_leave(s, t);
    active_leave(s, t);
    if (t->state == TRK_DOOMED) {
        if (t->gprev) t->gprev->gnext = t->gnext;
        else s->doomed = t->gnext;
        if (t->gnext) t->gnext->gprev = t->gprev;
    }
    t->ip->conns--;
    free(t);
    sweep_arm(s);
}
