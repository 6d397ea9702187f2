/* srv.c - libwebsockets on the daemon's libuv loop. See srv.h.
 *
 * What is checked where (libwebsockets 4.1.6, Debian's libwebsockets-dev):
 *
 *   accept   LWS_CALLBACK_FILTER_NETWORK_CONNECTION (the accepted fd, no
 *            wsi yet): the per-IP connection rate and the table of client
 *            addresses; a refusal is a bare close (no request exists yet).
 *            LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED (the new wsi, before
 *            libwebsockets gives it a header slot): the connection becomes
 *            pending; the pending limits close the oldest pending connection
 *            of the IP over its limit, or of the IP with the most pending
 *            when the total is over.
 *   headers  LWS_CALLBACK_FILTER_HTTP_CONNECTION (a complete non-upgrade
 *            request) and LWS_CALLBACK_HTTP_CONFIRM_UPGRADE (a complete
 *            upgrade request, before libwebsockets' own WebSocket checks and
 *            the 101): the connection becomes active (or is answered 429 /
 *            503), the method, path, Sec-WebSocket-Version (13 only: 426),
 *            Sec-WebSocket-Key (base64 of 16 bytes: 400), Host, Connection:
 *            upgrade, Sec-WebSocket-Protocol (none is offered: 400, see
 *            below) and ws_admit are judged there, and every refusal is an
 *            HTTP answer with a one-line text/plain body and Connection: close.
 *            libwebsockets would otherwise answer 101 to any version and key,
 *            and drop an upgrade that asks for a subprotocol without a word.
 *   timeout  a pending connection (TLS handshake included) older than
 *            handshake_timeout_ms is closed by srv's own timer (lws's
 *            timeouts count whole seconds and lws resets them as it parses).
 *   frames   LWS_CALLBACK_RECEIVE: srv_rx_feed with lws_is_first_fragment,
 *            lws_is_final_fragment and lws_remaining_packet_payload, so a
 *            frame that announces more than max_message_bytes is refused at
 *            its first payload bytes (libwebsockets delivers payload as soon
 *            as any arrives; a frame header alone gives no callback).
 *            LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: the peer's close code and
 *            reason are checked (RFC 6455 7.4: 1002 for a code no endpoint
 *            may send, 1007 for a reason that is not UTF-8) and the echo
 *            libwebsockets sends is rewritten in place.
 *   not fixable here: libwebsockets 4.1 parses the MASK bit of client
 *            frames (lib/roles/ws/ops-ws.c, this_frame_masked) and neither
 *            checks it nor tells the callback; unmasked client frames are
 *            therefore accepted (RFC 6455 5.1 says close). libwebsockets
 *            5.0 closes them with 1002 ("client unmasked").
 *
 * Subprotocols: moshid speaks one protocol and offers no WebSocket
 * subprotocol; the Kyutai clients ask for none. A browser whose page asks
 * for one fails the connection unless the server echoes one of them (RFC
 * 6455 4.1), so accepting without one helps nobody: such an upgrade is
 * answered 400 with a body that says so.
 */
#include "srv.h"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "log.h"
#include "msg.h"
#include "query.h"
#include "utf8.h"

const size_t srv_pre = LWS_PRE;

/* Longest query string and argument list accepted on /api/chat: the
 * protocol's query limits (proto/query.h), so that what srv hands over the
 * query parser can take. */
#define SRV_MAX_ARGS PROTO_QUERY_MAX_PARAMS
#define SRV_MAX_ARG_BYTES PROTO_QUERY_MAX_BYTES
/* Shutdown: poll period and the most polls before the second destroy. */
#define SRV_SHUTDOWN_POLL_MS 5
#define SRV_SHUTDOWN_MAX_POLLS 400
/* Most handles the loop may hold before srv_create (snapshot size). */
#define SRV_MAX_PREEXISTING 256

/* Seconds to wait for the peer's reply to our close frame (less when a
 * drop deadline comes sooner). */
#define SRV_CLOSE_ACK_S 2
/* lws's internal write type for a close frame (see lws-write.h). */
#define SRV_LWS_WRITE_CLOSE 4

/* Defaults of the connection limits (srv.h: 0 in srv_config). */
#define SRV_DEF_MAX_CONNECTIONS 64
#define SRV_DEF_MAX_CONNECTIONS_PER_IP 32
#define SRV_DEF_MAX_PENDING 64
#define SRV_DEF_MAX_PENDING_PER_IP 16
#define SRV_DEF_HANDSHAKE_TIMEOUT_MS 5000
/* Header slots beyond pending + active: connections closed by the
 * pending limits hold theirs until the next loop iteration. */
#define SRV_HEADER_SLOTS_SPARE 16
/* Client address table: slots (a power of two) and the longest probe.
 * Entries of addresses with no open connection are reused (their rate
 * bucket is forgotten); when the probe window of a new address holds
 * none, the connection is refused (SRV_REF_ip_table). */
#define SRV_IP_SLOTS 4096
#define SRV_IP_PROBE 64
/* Longest URL path served: lws builds a static file's path in a 256-byte
 * buffer (origin + "/" + path, lib/roles/http/server/server.c), so with
 * static files the bound is what is left of it; longer paths get 414. */
#define SRV_LWS_FILE_PATH 256
#define SRV_MAX_PATH 1024
/* Header copies handed to ws_admit (longer headers: 431). */
#define SRV_HDR_SHORT 256
#define SRV_HDR_LONG 1024
/* TLS files read for a reload, at most (bytes). */
#define SRV_TLS_FILE_MAX (1 << 20)

static const char *const srv_dynamic_paths[] = {"/healthz", "/metrics", "/api/personas", NULL};

/* ---- per-IP and per-connection accounting ---- */

typedef struct srv_track srv_track;

typedef struct srv_ip {
    uint8_t addr[16];              /* IPv6, or IPv4 as ::ffff:a.b.c.d */
    int used;                      /* never used slots end a probe */
    unsigned conns;                /* open connections (any state) */
    unsigned pending, active;
    double tokens;                 /* rate bucket */
    uint64_t refill_ms;
    srv_track *pend_head, *pend_tail; /* this IP's pending connections, oldest first */
} srv_ip;

enum { TRK_PENDING = 1, TRK_ACTIVE, TRK_DOOMED, TRK_DONE };

struct srv_track {
    struct lws *wsi;
    srv_ip *ip;
    int state;
    int counted;                   /* active and counted against the active limits */
    int doomed_why;                /* srv_refusal of a doomed connection */
    uint64_t since_ms;             /* pending since (uv_now) */
    srv_track *gprev, *gnext;      /* the pending list (oldest first) or the doomed list */
    srv_track *iprev, *inext;      /* the IP's pending list */
    void *principal;               /* ws_admit's, for the connection */
};

struct srv_conn {
    struct lws *wsi;
    srv *s;
    void *sess;
    void *principal;
    srv_rx rx;                     /* WebSocket message reassembly */
    /* asynchronous close */
    int closing;
    int close_status;
    int close_sent;           /* our close frame is written; waiting for the reply */
    char close_reason[PROTO_CLOSE_REASON_MAX + 1];  /* valid UTF-8, cut at a character boundary */
    uint64_t drop_at_ms;      /* uv_now of the hard deadline (srv_conn_drop_after), 0 = none */
    int failed;               /* a send failed: the connection is being dropped */
    /* HTTP reply waiting for HTTP_WRITEABLE */
    uint8_t *http_body; /* LWS_PRE headroom + body */
    size_t http_len;
    char peer[64];
};

struct srv {
    struct lws_context *ctx;
    uv_loop_t *loop;
    srv_config cfg;                /* the strings are not used after srv_create */
    srv_handlers h;
    void *ud;
    struct lws_protocols protocols[2];
    struct lws_http_mount mounts[sizeof srv_dynamic_paths / sizeof *srv_dynamic_paths]; /* the dynamic paths + static files */
    struct lws_protocol_vhost_options mime_wasm;
    int port;
    int tls;
    size_t max_path;
    /* accounting */
    srv_ip *ips;                   /* SRV_IP_SLOTS */
    uint64_t hash_seed;
    unsigned npending, nactive;
    srv_track *pend_head, *pend_tail;
    srv_track *doomed;             /* to close at the next sweep */
    uv_timer_t sweep;              /* handshake timeouts and closes (on_sweep) */
    int sweep_ready, sweep_on;     /* sweep is initialised (and not closing); started */
    /* TLS reload */
    SSL_CTX *ssl_ctx;              /* the vhost's (LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS) */
    char *tls_cert_pem, *tls_key_pem; /* the pair in use, as read */
    size_t tls_cert_len, tls_key_len;
    /* shutdown */
    uv_timer_t timer;
    int polls;
    int stopping;             /* srv_shutdown was called: later calls do nothing */
    void (*done)(void *ud);
    void *preexisting[SRV_MAX_PREEXISTING];
    int npre;
};

static void refused(srv *s, srv_refusal why) {
    if (s->cfg.on_refuse) s->cfg.on_refuse((int)why);
}

/* The peer's address as a table key; 0 on success. */
static int peer_key(int fd, uint8_t key[16]) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return -1;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &a->sin_addr, 4);
        return 0;
    }
    if (ss.ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)&ss)->sin6_addr, 16);
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
    refused(s, why);
}

static void pending_enter(srv *s, srv_track *t) {
    srv_ip *e = t->ip;
    t->state = TRK_PENDING;
    t->since_ms = uv_now(s->loop);
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
    e->pending++;
    s->npending++;
    /* Over the limits: the oldest of this IP, then of the IP with the
     * most pending (so a client with one pending connection is never the
     * one closed while another has more). */
    while (e->pending > s->cfg.max_pending_per_ip && e->pend_head != t) doom(s, e->pend_head, SRV_REF_pending_evicted);
    while (s->npending > s->cfg.max_pending) {
        /* the IP with the most pending; among equals, the one whose oldest
         * is oldest (many addresses with one each: the oldest overall).
         * A scan of the table, only while the total is over. */
        srv_ip *most = NULL;
        for (size_t i = 0; i < SRV_IP_SLOTS; i++) {
            srv_ip *x = &s->ips[i];
            if (!x->pending || x->pend_head == t) continue;
            if (!most || x->pending > most->pending ||
                (x->pending == most->pending && x->pend_head->since_ms < most->pend_head->since_ms))
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

/* An answer is through on a keep-alive connection: pending again (a new
 * handshake clock). */
static void back_to_pending(srv *s, struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t || t->state != TRK_ACTIVE) return;
    active_leave(s, t);
    pending_enter(s, t);
}

static void on_sweep(uv_timer_t *h) {
    srv *s = h->data;
    uint64_t now = uv_now(s->loop);
    while (s->pend_head && now - s->pend_head->since_ms >= s->cfg.handshake_timeout_ms)
        doom(s, s->pend_head, SRV_REF_handshake_timeout);
    /* lws_set_timeout(LWS_TO_KILL_SYNC) closes at once: safe here, in a
     * timer callback of our own; the close calls WSI_DESTROY, which takes
     * t off the list. */
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

/* A new connection (its wsi, no header slot yet): pending. */
static int track_new(srv *s, struct lws *wsi) {
    uint8_t key[16];
    if (peer_key(lws_get_socket_fd(wsi), key) != 0) return -1; /* the peer is gone already */
    srv_ip *e = ip_get(s, key);
    if (!e) { refused(s, SRV_REF_ip_table); return -1; }
    srv_track *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->wsi = wsi;
    t->ip = e;
    e->conns++;
    lws_set_opaque_user_data(wsi, t);
    pending_enter(s, t);
    return 0;
}

static void track_destroy(srv *s, struct lws *wsi) {
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

/* ---- HTTP answers ---- */

static int path_is_dynamic(const char *p) {
    for (int i = 0; srv_dynamic_paths[i]; i++)
        if (strcmp(p, srv_dynamic_paths[i]) == 0) return 1;
    return 0;
}

/* Answer status with a one-line text/plain body and Connection: close,
 * written now (lws keeps what the socket does not take and flushes it
 * before the close). extra: one more "name:" / value header, or NULL.
 * The caller then closes (returns nonzero from the callback). */
static void answer(struct lws *wsi, unsigned status, const char *extra, const char *extra_val, const char *body) {
    uint8_t buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    char line[320], len[16];
    int n = snprintf(line, sizeof line, "%s\n", body);
    if (n < 0 || (size_t)n >= sizeof line) n = (int)sizeof line - 1, line[n - 1] = '\n';
    snprintf(len, sizeof len, "%d", n);
    const char *names[] = {"content-type:", "content-length:", "connection:", "cache-control:", extra};
    const char *vals[] = {"text/plain; charset=utf-8", len, "close", "no-store", extra_val};
    if (lws_add_http_header_status(wsi, status, &p, end)) return;
    for (size_t i = 0; i < sizeof names / sizeof *names && names[i]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)names[i], (const unsigned char *)vals[i],
                                        (int)strlen(vals[i]), &p, end))
            return;
    if (lws_finalize_http_header(wsi, &p, end) || end - p < n) return;
    memcpy(p, line, (size_t)n);
    p += n;
    lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS);
}

static int http_reply(struct lws *wsi, srv_conn *c, srv_http_reply *r) {
    uint8_t hdr[LWS_PRE + 512], *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof hdr - 1;
    if (lws_add_http_common_headers(wsi, (unsigned)r->status, r->content_type, r->body_len, &p, end) ||
        lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:", (const unsigned char *)"no-store", 8,
                                    &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end)) {
        free(r->body);
        return -1;
    }
    c->http_body = malloc(LWS_PRE + r->body_len + 1);
    if (!c->http_body) { free(r->body); return -1; }
    if (r->body_len) memcpy(c->http_body + LWS_PRE, r->body, r->body_len);
    c->http_len = r->body_len;
    free(r->body);
    lws_callback_on_writable(wsi);
    return 0;
}

static void conn_free_buffers(srv_conn *c) {
    srv_rx_free(&c->rx);
    free(c->http_body);
    c->http_body = NULL;
}

/* The request's path length (GET only; -1: another method). */
static int get_path_len(struct lws *wsi) {
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    return n > 0 ? n : -1;
}

/* Refuse with an answer after the request: counted; the caller closes. */
static int refuse(srv *s, struct lws *wsi, srv_refusal why, unsigned status, const char *extra, const char *val,
                  const char *body) {
    refused(s, why);
    char peer[64] = "";
    lws_get_peer_simple(wsi, peer, sizeof peer);
    LOGI("http_refused", "peer=%s status=%u msg=\"%s\"", peer, status, body);
    answer(wsi, status, extra, val, body);
    return -1;
}

/* Pending -> active for a complete request, or the 503 / 429 answer. */
static int admit_request(srv *s, struct lws *wsi, int count) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (!t) return 0;
    if (t->state == TRK_DOOMED || t->state == TRK_DONE) return -1; /* being closed */
    if (t->state == TRK_ACTIVE && !t->counted && count) active_leave(s, t); /* dynamic, now counted: judge again */
    switch (active_enter(s, t, count)) {
    case SRV_REF_busy:
        return refuse(s, wsi, SRV_REF_busy, 503, "retry-after:", "5", "server busy: too many connections; retry later");
    case SRV_REF_per_ip:
        return refuse(s, wsi, SRV_REF_per_ip, 429, "retry-after:", "5",
                      "too many connections from your address; close some and retry");
    default: return 0;
    }
}

/* A complete non-upgrade request (before the mounts): limits, method, path. */
static int http_request(srv *s, struct lws *wsi) {
    char path[32];
    int n = get_path_len(wsi);
    int dynamic = n > 0 && (size_t)n < sizeof path && lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) > 0 &&
                  path_is_dynamic(path);
    if (admit_request(s, wsi, !dynamic)) return -1;
    if (n < 0)
        return refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: only GET is served");
    if ((size_t)n > s->max_path) return refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long");
    return 0;
}

/* Sec-WebSocket-Key: base64 of 16 bytes (22 characters and "=="). */
static int ws_key_ok(const char *k) {
    if (strlen(k) != 24 || k[22] != '=' || k[23] != '=') return 0;
    for (int i = 0; i < 22; i++) {
        char ch = k[i];
        int b64 = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '+' || ch == '/';
        if (!b64) return 0;
    }
    return 1;
}

/* Whether the comma-separated header value holds token (case-insensitive). */
static int has_token(const char *v, const char *token) {
    size_t tl = strlen(token);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *e = v;
        while (*e && *e != ',') e++;
        const char *te = e;
        while (te > v && (te[-1] == ' ' || te[-1] == '\t')) te--;
        if ((size_t)(te - v) == tl && strncasecmp(v, token, tl) == 0) return 1;
        v = e;
    }
    return 0;
}

/* A header copied whole into buf ("" when absent); -1 when longer. */
static int hdr(struct lws *wsi, enum lws_token_indexes tok, char *buf, int len) {
    buf[0] = '\0';
    int n = lws_hdr_total_length(wsi, tok);
    if (n <= 0) return 0;
    if (n >= len) return -1;
    return lws_hdr_copy(wsi, buf, len, tok) < 0 ? -1 : 0;
}

static int hdr_custom(struct lws *wsi, const char *name, char *buf, int len) {
    buf[0] = '\0';
    int n = lws_hdr_custom_length(wsi, name, (int)strlen(name));
    if (n <= 0) return 0;
    if (n >= len) return -1;
    return lws_hdr_custom_copy(wsi, buf, len, name, (int)strlen(name)) < 0 ? -1 : 0;
}

/* The decoded query arguments, one "name=value" fragment each, into
 * argbuf; the count, or -1 over the limits. */
static int read_args(struct lws *wsi, char *argbuf, size_t cap, const char **args) {
    int nargs = 0;
    size_t used = 0;
    for (int i = 0;; i++) {
        int fl = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (fl <= 0) break;
        if (nargs == (int)SRV_MAX_ARGS || used + (size_t)fl + 1 > cap) return -1; /* the handler refuses it */
        if (lws_hdr_copy_fragment(wsi, argbuf + used, (int)(cap - used), WSI_TOKEN_HTTP_URI_ARGS, i) < 0) break;
        args[nargs++] = argbuf + used;
        used += (size_t)fl + 1;
    }
    return nargs;
}

static int origin_allowed(const srv *s, const char *origin) {
    const char *const *o = s->cfg.allowed_origins;
    if (!o || !o[0] || !origin[0]) return 1; /* no list, or a non-browser client */
    for (; *o; o++)
        if (strcmp(*o, origin) == 0 || strcmp(*o, "*") == 0) return 1;
    return 0;
}

/* A complete upgrade request, before the 101 (LWS_CALLBACK_HTTP_CONFIRM_UPGRADE):
 * 0 lets libwebsockets answer 101, -1 after an answer. */
static int upgrade_request(srv *s, struct lws *wsi, const char *upgrade) {
    static char argbuf[SRV_MAX_ARG_BYTES + 1]; /* loop thread only */
    char host[SRV_HDR_SHORT], origin[SRV_HDR_SHORT], conn[SRV_HDR_SHORT], ver[16], key[64], proto[SRV_HDR_SHORT];
    char authz[SRV_HDR_LONG], apikey[SRV_HDR_LONG], path[64];
    if (admit_request(s, wsi, 1)) return -1;
    int n = get_path_len(wsi);
    if (n < 0) return refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: upgrades are GET");
    if ((size_t)n >= sizeof path || lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0 ||
        strcmp(path, "/api/chat") != 0)
        return (size_t)n > s->max_path ? refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long")
                                       : refuse(s, wsi, SRV_REF_bad_request, 404, NULL, NULL,
                                                "not found: WebSocket sessions are at /api/chat");
    if (!upgrade || strcasecmp(upgrade, "websocket") != 0)
        return refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: only WebSocket upgrades are served");
    if (hdr(wsi, WSI_TOKEN_HOST, host, sizeof host) || hdr(wsi, WSI_TOKEN_ORIGIN, origin, sizeof origin) ||
        hdr(wsi, WSI_TOKEN_CONNECTION, conn, sizeof conn) || hdr(wsi, WSI_TOKEN_VERSION, ver, sizeof ver) ||
        hdr(wsi, WSI_TOKEN_KEY, key, sizeof key) || hdr(wsi, WSI_TOKEN_PROTOCOL, proto, sizeof proto) ||
        hdr(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, authz, sizeof authz) ||
        hdr_custom(wsi, "kyutai-api-key:", apikey, sizeof apikey))
        return refuse(s, wsi, SRV_REF_bad_request, 431, NULL, NULL, "request header fields too large");
    if (!host[0]) return refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: no Host header");
    if (!has_token(conn, "upgrade"))
        return refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: Connection must name upgrade");
    if (strcmp(ver, "13") != 0)
        return refuse(s, wsi, SRV_REF_bad_request, 426, "sec-websocket-version:", "13",
                      "upgrade required: only WebSocket version 13 is spoken");
    if (!ws_key_ok(key))
        return refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL,
                      "bad request: Sec-WebSocket-Key must be the base64 of 16 bytes");
    if (proto[0])
        return refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL,
                      "bad request: no WebSocket subprotocol is offered; connect without Sec-WebSocket-Protocol");
    if (!origin_allowed(s, origin))
        return refuse(s, wsi, SRV_REF_bad_request, 403, NULL, NULL, "forbidden: origin not allowed");
    srv_track *t = lws_get_opaque_user_data(wsi);
    if (t) t->principal = NULL;
    if (!s->h.ws_admit) return 0;
    char peer[64] = "";
    lws_get_peer_simple(wsi, peer, sizeof peer);
    const char *args[SRV_MAX_ARGS];
    int nargs = read_args(wsi, argbuf, sizeof argbuf, args);
    srv_admit_req r = {.peer = peer, .path = path, .host = host, .origin = origin, .authorization = authz,
                       .api_key = apikey, .args = args, .nargs = nargs, .tls = s->tls};
    void *principal = NULL;
    char why[256] = "";
    int st = s->h.ws_admit(s->ud, &r, &principal, why, sizeof why);
    if (st) {
        /* counted by the handler (it knows why); answered here */
        answer(wsi, st >= 400 && st <= 599 ? (unsigned)st : 403, st == 429 || st == 503 ? "retry-after:" : NULL, "5",
               why[0] ? why : "refused");
        return -1;
    }
    if (t) t->principal = principal;
    return 0;
}

/* The peer's close frame (payload p, len bytes; the buffer libwebsockets
 * echoes): a code no endpoint may send becomes 1002, a reason that is not
 * UTF-8 1007, the reason then replaced by ASCII of the same length (the
 * echo's length is libwebsockets'). 0, or -1 when the payload cannot carry
 * a code (one byte): then our own close frame goes out and the connection
 * is dropped. */
static int check_peer_close(struct lws *wsi, uint8_t *p, size_t len) {
    if (len == 0) return 0;
    int code = len >= 2 ? (p[0] << 8) | p[1] : 0;
    int bad = 0;
    /* RFC 6455 7.4: 1000-1003, 1007-1011 and 3000-4999 may be sent
     * (libwebsockets already turns 1004-1006, 1012-2999 and < 1000 into
     * 1002; it lets >= 5000 through). */
    if (len == 1 || code < 1000 || code >= 5000 || (code >= 1004 && code <= 1006) || (code >= 1012 && code < 3000))
        bad = 1002;
    else if (!proto_utf8_valid(p + 2, len - 2))
        bad = 1007;
    if (!bad) return 0;
    if (len == 1) {
        uint8_t frame[LWS_PRE + 2];
        frame[LWS_PRE] = 1002 >> 8;
        frame[LWS_PRE + 1] = 1002 & 0xff;
        lws_write(wsi, frame + LWS_PRE, 2, (enum lws_write_protocol)SRV_LWS_WRITE_CLOSE);
        return -1;
    }
    static const char r1002[] = "invalid close code", r1007[] = "invalid UTF-8 in the close reason";
    const char *r = bad == 1002 ? r1002 : r1007;
    size_t rl = strlen(r);
    p[0] = (uint8_t)(bad >> 8);
    p[1] = (uint8_t)(bad & 0xff);
    for (size_t i = 2; i < len; i++) p[i] = i - 2 < rl ? (uint8_t)r[i - 2] : ' ';
    return 0;
}

/* ---- WebSocket message reassembly ---- */

srv_rx_verdict srv_rx_feed(srv_rx *r, unsigned flags, uint64_t frame_left, const uint8_t *data, size_t len,
                           size_t max, const uint8_t **msg, size_t *size) {
    static const uint8_t empty[1] = {0};
    *msg = NULL;
    *size = 0;
    if (r->dead) return SRV_RX_IGNORED;
    if (flags & SRV_RX_FIRST) r->len = 0; /* a new message (libwebsockets enforces the framing; defensive) */
    /* The least the message is: what came, this piece, what the frame announces. */
    uint64_t least = (uint64_t)r->len + len;
    if (least < len || frame_left > UINT64_MAX - least) least = UINT64_MAX;
    else least += frame_left;
    if (least > max) {
        r->dead = 1;
        *size = least > SIZE_MAX ? SIZE_MAX : (size_t)least;
        return SRV_RX_OVERSIZE;
    }
    if (len) {
        if (r->len + len > r->cap) {
            size_t nc = r->cap ? r->cap : 4096;
            while (nc < r->len + len) nc *= 2;
            if (nc > max) nc = max;
            uint8_t *n = realloc(r->buf, nc);
            if (!n) {
                r->dead = 1;
                return SRV_RX_NOMEM;
            }
            r->buf = n;
            r->cap = nc;
        }
        memcpy(r->buf + r->len, data, len);
        r->len += len;
    }
    if (!(flags & SRV_RX_FINAL) || frame_left) return SRV_RX_MORE;
    *msg = r->buf ? r->buf : empty;
    *size = r->len;
    r->len = 0;
    return SRV_RX_MESSAGE;
}

void srv_rx_free(srv_rx *r) {
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Seconds to wait for the peer's close reply: SRV_CLOSE_ACK_S, or what is
 * left before the drop deadline (lws's timeouts count whole seconds; at
 * least 1). */
static int close_ack_s(const srv_conn *c) {
    if (!c->drop_at_ms) return SRV_CLOSE_ACK_S;
    uint64_t now = uv_now(c->s->loop);
    int left = c->drop_at_ms > now + 1000 ? (int)((c->drop_at_ms - now) / 1000) : 1;
    return left < SRV_CLOSE_ACK_S ? left : SRV_CLOSE_ACK_S;
}

static int srv_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    srv *s = lws_context_user(lws_get_context(wsi));
    srv_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: {
        /* in: the accepted fd; nonzero closes it. */
        uint8_t key[16];
        if (peer_key((int)(intptr_t)in, key) != 0) return 1; /* the peer is gone already (a reset) */
        srv_ip *e = ip_get(s, key);
        if (!e) { refused(s, SRV_REF_ip_table); return 1; }
        if (!ip_take_token(s, e)) { refused(s, SRV_REF_rate); return 1; }
        return 0;
    }
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        return track_new(s, wsi);
    case LWS_CALLBACK_WSI_DESTROY:
        track_destroy(s, wsi);
        break;
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        s->ssl_ctx = user; /* the vhost's SSL_CTX: srv_reload_tls swaps its pair */
        return 0;
    case LWS_CALLBACK_FILTER_HTTP_CONNECTION:
        return http_request(s, wsi) ? 1 : 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return upgrade_request(s, wsi, in);
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* upgrade_request judged it; a second look costs nothing */
        return get_path_len(wsi) == (int)strlen("/api/chat") ? 0 : -1;
    case LWS_CALLBACK_ESTABLISHED: {
        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        c->s = s;
        srv_track *t = lws_get_opaque_user_data(wsi);
        c->principal = t ? t->principal : NULL;
        lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
        if (s->cfg.send_buffer_bytes > 0) {
            int fd = lws_get_socket_fd(wsi), sz = s->cfg.send_buffer_bytes;
            if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        }
        static char argbuf[SRV_MAX_ARG_BYTES + 1]; /* loop thread only */
        const char *args[SRV_MAX_ARGS];
        int nargs = read_args(wsi, argbuf, sizeof argbuf, args);
        c->sess = s->h.ws_open(s->ud, c, args, nargs);
        return c->sess ? 0 : -1;
    }
    case LWS_CALLBACK_RECEIVE: {
        if (!c->sess || c->closing) return 0; /* closing: input is dropped */
        unsigned fl = (lws_is_first_fragment(wsi) ? SRV_RX_FIRST : 0) | (lws_is_final_fragment(wsi) ? SRV_RX_FINAL : 0);
        const uint8_t *msg;
        size_t n;
        uint64_t left = lws_remaining_packet_payload(wsi);
        switch (srv_rx_feed(&c->rx, fl, left, in, len, s->cfg.max_message_bytes, &msg, &n)) {
        case SRV_RX_MESSAGE: s->h.ws_message(s->ud, c->sess, msg, n); break;
        case SRV_RX_OVERSIZE: s->h.ws_oversize(s->ud, c->sess, n); break;
        case SRV_RX_NOMEM: return -1;
        default: break;
        }
        return 0;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (c->closing) {
            /* lws 4.1 does not send the close frame that lws_close_reason
             * prepares when the callback returns -1 (the peer sees 1006), so
             * the frame is written here (opcode close = lws's internal write
             * type 4), then the connection is dropped. */
            uint8_t frame[LWS_PRE + 2 + sizeof c->close_reason];
            size_t rl = strlen(c->close_reason);
            frame[LWS_PRE] = (uint8_t)(c->close_status >> 8);
            frame[LWS_PRE + 1] = (uint8_t)c->close_status;
            memcpy(frame + LWS_PRE + 2, c->close_reason, rl);
            if (c->close_sent) return -1;
            lws_write(wsi, frame + LWS_PRE, 2 + rl, (enum lws_write_protocol)SRV_LWS_WRITE_CLOSE);
            /* Wait for the peer's close reply (a client whose socket is
             * reset before it reads our close frame reports 1006), at most
             * SRV_CLOSE_ACK_S seconds and never past the drop deadline. */
            c->close_sent = 1;
            lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, close_ack_s(c));
            return 0;
        }
        if (c->sess && !c->failed) s->h.ws_writable(s->ud, c->sess);
        return c->failed ? -1 : 0; /* a failed send: drop the connection */
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* Our close frame went out already: close without echoing theirs. */
        if (c->close_sent) return -1;
        return check_peer_close(wsi, in, len);
    case LWS_CALLBACK_CLOSED:
        if (c->sess) s->h.ws_closed(s->ud, c->sess);
        c->sess = NULL;
        c->wsi = NULL;
        conn_free_buffers(c);
        return 0;
    case LWS_CALLBACK_HTTP: {
        /* A dynamic path, or a path the static files do not have. */
        char uri[SRV_MAX_PATH + 1];
        int n = get_path_len(wsi);
        if (n < 0)
        return refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: only GET is served");
        if ((size_t)n > s->max_path || lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0)
            return refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long");
        memset(c, 0, sizeof *c);
        c->s = s;
        srv_http_reply r = {0};
        if (path_is_dynamic(uri) && s->h.http_get && s->h.http_get(s->ud, uri, &r)) return http_reply(wsi, c, &r);
        answer(wsi, 404, NULL, NULL, "not found");
        return -1;
    }
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (!c || !c->http_body) break;
        if (lws_write(wsi, c->http_body + LWS_PRE, c->http_len, LWS_WRITE_HTTP_FINAL) != (int)c->http_len) {
            conn_free_buffers(c);
            return -1;
        }
        conn_free_buffers(c);
        if (lws_http_transaction_completed(wsi)) return -1;
        back_to_pending(s, wsi);
        return 0;
    case LWS_CALLBACK_HTTP_FILE_COMPLETION:
        back_to_pending(s, wsi); /* lws_callback_http_dummy completes the transaction */
        break;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c) conn_free_buffers(c);
        break;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* lws's own log lines go through ours (warnings and errors only), one
 * record per line. */
static void lws_log_to_ours(int level, const char *line) {
    char msg[512];
    size_t n = strnlen(line, sizeof msg - 1);
    memcpy(msg, line, n);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) n--;
    msg[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (msg[i] == '"' || msg[i] == '\n' || msg[i] == '\r') msg[i] = msg[i] == '"' ? '\'' : ' ';
    if (level & LLL_ERR) LOGE("lws", "msg=\"%s\"", msg);
    else LOGW("lws", "msg=\"%s\"", msg);
}

static void snapshot_handle(uv_handle_t *h, void *arg) {
    srv *s = arg;
    if (s->npre < SRV_MAX_PREEXISTING) s->preexisting[s->npre++] = h;
}

/* ---- teardown: lws on a foreign loop closes its handles asynchronously ---- */

typedef struct { srv *s; int foreign; } walk_count;

static void count_foreign(uv_handle_t *h, void *arg) {
    walk_count *w = arg;
    if (h == (uv_handle_t *)&w->s->timer) return;
    for (int i = 0; i < w->s->npre; i++)
        if (w->s->preexisting[i] == h) return;
    w->foreign++;
}

static void srv_free(srv *s) {
    free(s->ips);
    free(s->tls_cert_pem);
    free(s->tls_key_pem);
    free(s);
}

static void timer_closed(uv_handle_t *h) {
    srv *s = h->data;
    void (*done)(void *) = s->done;
    void *ud = s->ud;
    srv_free(s);
    if (done) done(ud);
}

static void shutdown_poll(uv_timer_t *t) {
    srv *s = t->data;
    walk_count w = {s, 0};
    uv_walk(s->loop, count_foreign, &w);
    if (w.foreign > 0 && ++s->polls < SRV_SHUTDOWN_MAX_POLLS) return;
    if (w.foreign > 0) LOGW("shutdown", "lws_handles_left=%d", w.foreign);
    /* Second destroy: completes at once now that lws's handles are closed. */
    if (s->ctx) lws_context_destroy(s->ctx);
    s->ctx = NULL;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, timer_closed);
}

/* Poll until lws's handles are gone, then finish lws's teardown and free s
 * (srv_shutdown, and srv_create's failure). done(ud) follows, if set. */
static void teardown_start(srv *s, void (*done)(void *ud)) {
    s->done = done;
    uv_timer_init(s->loop, &s->timer);
    s->timer.data = s;
    uv_timer_start(&s->timer, shutdown_poll, SRV_SHUTDOWN_POLL_MS, SRV_SHUTDOWN_POLL_MS);
}

/* Read a whole file (at most SRV_TLS_FILE_MAX bytes) into a NUL-terminated
 * malloc'd buffer. */
static char *read_file(const char *path, size_t *len, ms_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { ms_err_set(err, MS_ERR_IO, "cannot open %s", path); return NULL; }
    char *buf = malloc(SRV_TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, SRV_TLS_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || n > SRV_TLS_FILE_MAX) {
        free(buf);
        ms_err_set(err, buf ? MS_ERR_IO : MS_ERR_NOMEM, "%s: %s", path,
                   !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

srv *srv_create(uv_loop_t *loop, const srv_config *cfg, const srv_handlers *h, void *ud, ms_error *err) {
    srv *s = calloc(1, sizeof *s);
    if (s) s->ips = calloc(SRV_IP_SLOTS, sizeof *s->ips);
    if (!s || !s->ips) { free(s); ms_err_set(err, MS_ERR_NOMEM, "server: out of memory"); return NULL; }
    s->loop = loop;
    s->cfg = *cfg;
    s->h = *h;
    s->ud = ud;
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
    s->max_path = SRV_MAX_PATH;
    if (cfg->static_dir && cfg->static_dir[0]) {
        size_t room = SRV_LWS_FILE_PATH - 2 - strlen(cfg->static_dir); /* the NUL and "/" */
        if (strlen(cfg->static_dir) + 2 >= SRV_LWS_FILE_PATH) room = 1;
        if (room < s->max_path) s->max_path = room;
    }
    uv_walk(loop, snapshot_handle, s);

    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_ours);
    s->protocols[0] = (struct lws_protocols){
        .name = "moshid-chat",
        .callback = srv_callback,
        .per_session_data_size = sizeof(srv_conn),
        .rx_buffer_size = 65536,
    };
    /* Dynamic paths go to our callback; "/" to the static files if any. */
    int nm = 0;
    for (int i = 0; srv_dynamic_paths[i]; i++) {
        struct lws_http_mount *m = &s->mounts[nm];
        memset(m, 0, sizeof *m);
        m->mountpoint = srv_dynamic_paths[i];
        m->mountpoint_len = (unsigned char)strlen(m->mountpoint);
        m->origin = "moshid-chat";
        m->protocol = "moshid-chat";
        m->origin_protocol = LWSMPRO_CALLBACK;
        if (nm) s->mounts[nm - 1].mount_next = m;
        nm++;
    }
    if (cfg->static_dir && cfg->static_dir[0]) {
        s->mime_wasm = (struct lws_protocol_vhost_options){NULL, NULL, ".wasm", "application/wasm"};
        struct lws_http_mount *m = &s->mounts[nm];
        memset(m, 0, sizeof *m);
        m->mountpoint = "/";
        m->mountpoint_len = 1;
        m->origin = cfg->static_dir;
        m->def = "index.html";
        m->origin_protocol = LWSMPRO_FILE;
        m->extra_mimetypes = &s->mime_wasm;
        s->mounts[nm - 1].mount_next = m;
        nm++;
    }

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *loops[1] = {loop};
    info.options = LWS_SERVER_OPTION_LIBUV;
    info.foreign_loops = loops;
    info.pcontext = &s->ctx;
    info.user = s;
    info.port = cfg->port;
    info.iface = cfg->listen && cfg->listen[0] ? cfg->listen : NULL;
    info.protocols = s->protocols;
    info.mounts = &s->mounts[0];
    info.max_http_header_data = (unsigned short)(cfg->max_header_bytes > 65535 ? 65535 : cfg->max_header_bytes);
    /* Every connection holding a header slot is pending or active: with
     * this many slots none waits for one (the defect of issue 16: idle
     * connections took every slot). */
    unsigned pool = c->max_pending + c->max_connections + SRV_HEADER_SLOTS_SPARE;
    info.max_http_header_pool = (unsigned short)(pool > 65535 ? 65535 : pool);
    info.timeout_secs = 20;
    /* HTTP/1.1 only: the accounting above is per network connection (an
     * h2 connection would carry many requests at once). */
    info.alpn = "http/1.1";
    if (cfg->tls_cert && cfg->tls_cert[0]) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = cfg->tls_cert;
        info.ssl_private_key_filepath = cfg->tls_key;
        s->tls = 1;
    }
    s->ctx = lws_create_context(&info);
    if (!s->ctx || !lws_get_vhost_by_name(s->ctx, "default")) {
        ms_err_set(err, MS_ERR_IO, "server: cannot listen on %s:%d (port in use, bad address or bad TLS files)",
                   info.iface ? info.iface : "*", cfg->port);
        if (!s->ctx) {
            /* lws gave up before it put anything on the loop and freed
             * what it had made (lws 4.1 context.c: the failures before
             * the event loop is set up). */
            srv_free(s);
            return NULL;
        }
        /* On a foreign libuv loop a failed creation (the default vhost
         * could not listen, TLS files refused) returns a context whose
         * destruction has begun (lws 4.1 context.c, fatal_exit_defer): its
         * handles close over the next loop iterations, and the context is
         * freed only by a second lws_context_destroy, which writes NULL
         * through info.pcontext (into s) and may call srv_callback with s
         * as the context's user. So s cannot be freed here: the shutdown
         * poll takes it over, makes that second destroy once lws's handles
         * are gone and frees s. The caller runs the loop to its end (srv.h). */
        teardown_start(s, NULL);
        return NULL;
    }
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    s->sweep_ready = 1;
    if (s->tls) { /* the pair in use, for srv_reload_tls to compare */
        ms_error e = {0};
        s->tls_cert_pem = read_file(cfg->tls_cert, &s->tls_cert_len, &e);
        s->tls_key_pem = read_file(cfg->tls_key, &s->tls_key_len, &e);
    }
    s->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(s->ctx, "default"));
    LOGI("listen", "addr=%s port=%d tls=%s static=%s max_connections=%u per_ip=%u max_pending=%u per_ip=%u "
         "handshake_timeout_ms=%u rate_per_ip=%g burst=%u",
         info.iface ? info.iface : "*", s->port, s->tls ? "on" : "off", cfg->static_dir ? cfg->static_dir : "-",
         c->max_connections, c->max_connections_per_ip, c->max_pending, c->max_pending_per_ip,
         c->handshake_timeout_ms, c->conn_rate_per_ip, c->conn_burst_per_ip);
    return s;
}

int srv_port(const srv *s) { return s->port; }

int srv_tls(const srv *s) { return s->tls; }

static void sweep_closed(uv_handle_t *h) { (void)h; }

void srv_shutdown(srv *s, void (*done)(void *ud)) {
    /* The caller's tick may ask again before the teardown's done callback
     * (which frees s) has run: one teardown only. */
    if (s->stopping) return;
    s->stopping = 1;
    /* The connections' WSI_DESTROY calls during the teardown find the
     * sweep closed (sweep_ready 0) and leave it alone. */
    s->sweep_ready = 0;
    uv_timer_stop(&s->sweep);
    uv_close((uv_handle_t *)&s->sweep, sweep_closed);
    lws_context_destroy(s->ctx); /* starts the teardown on the foreign loop */
    teardown_start(s, done);
}

void srv_conn_writable(srv_conn *c) {
    if (c->wsi) lws_callback_on_writable(c->wsi);
}

int srv_conn_choked(srv_conn *c) {
    /* lws_send_pipe_choked is also true while lws holds the rest of a
     * partial write: nothing more may be written then. */
    return c->failed || !c->wsi || lws_send_pipe_choked(c->wsi);
}

int srv_conn_send(srv_conn *c, uint8_t *buf, size_t len) {
    if (c->failed || !c->wsi) return -1;
    int n = lws_write(c->wsi, buf + LWS_PRE, len, LWS_WRITE_BINARY);
    if (n < (int)len) {
        c->failed = 1; /* the writable callback returns -1: lws drops it */
        return -1;
    }
    return 0;
}

void srv_conn_drop_after(srv_conn *c, int secs) {
    if (!c->wsi || secs <= 0) return;
    uint64_t at = uv_now(c->s->loop) + (uint64_t)secs * 1000;
    if (c->drop_at_ms && c->drop_at_ms <= at) return;
    c->drop_at_ms = at;
    /* One lws timeout per connection: the wait for the close reply, once
     * our close frame is out, is cut to the deadline as well. A timeout
     * closes the socket at once, without flushing (lws's "violent death"). */
    if (c->close_sent) lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_ACK, close_ack_s(c));
    else lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, secs);
}

void srv_conn_close(srv_conn *c, int status, const char *reason) {
    if (c->closing) return;
    c->closing = 1;
    c->close_status = status;
    proto_msg_close_reason(c->close_reason, reason ? reason : "");
    lws_callback_on_writable(c->wsi);
}

const char *srv_conn_peer(const srv_conn *c) { return c->peer; }

void *srv_conn_principal(const srv_conn *c) { return c->principal; }

/* ---- TLS reload ---- */

/* OpenSSL's first queued error as text (the queue is cleared). */
static const char *ssl_error(char *buf, size_t len) {
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, buf, len);
    else snprintf(buf, len, "no detail");
    ERR_clear_error();
    return buf;
}

int srv_reload_tls(srv *s, const char *cert, const char *key, ms_error *err) {
    if (!s->tls || !s->ssl_ctx)
        return ms_err_set(err, MS_ERR_STATE, "TLS: the listener was started without TLS; turning it on needs a restart");
    if (!cert || !cert[0] || !key || !key[0])
        return ms_err_set(err, MS_ERR_STATE, "TLS: turning TLS off needs a restart; keeping the certificate in use");
    size_t cl = 0, kl = 0;
    char *cp = read_file(cert, &cl, err);
    if (!cp) return err->code;
    char *kp = read_file(key, &kl, err);
    if (!kp) { free(cp); return err->code; }
    if (s->tls_cert_pem && cl == s->tls_cert_len && kl == s->tls_key_len && memcmp(cp, s->tls_cert_pem, cl) == 0 &&
        memcmp(kp, s->tls_key_pem, kl) == 0) {
        free(cp);
        free(kp);
        return MS_OK; /* unchanged */
    }
    /* Parse and check the whole pair before touching the context: the
     * leaf certificate, the rest of the chain, the key, and that the key
     * is the certificate's. SSL_CTX_use_cert_and_key then swaps all three
     * at once; SSL_new copies the context's pair, so connections open now
     * keep theirs. */
    char eb[256];
    int rc = MS_ERR_FORMAT;
    X509 *leaf = NULL;
    EVP_PKEY *pkey = NULL;
    STACK_OF(X509) *chain = sk_X509_new_null();
    BIO *bc = BIO_new_mem_buf(cp, (int)cl), *bk = BIO_new_mem_buf(kp, (int)kl);
    ERR_clear_error();
    if (!chain || !bc || !bk) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "TLS: out of memory");
        goto out;
    }
    if (!(leaf = PEM_read_bio_X509_AUX(bc, NULL, NULL, NULL))) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s: no PEM certificate (%s)", cert, ssl_error(eb, sizeof eb));
        goto out;
    }
    for (X509 *x; (x = PEM_read_bio_X509(bc, NULL, NULL, NULL)) != NULL;)
        if (!sk_X509_push(chain, x)) {
            X509_free(x);
            rc = ms_err_set(err, MS_ERR_NOMEM, "TLS: out of memory");
            goto out;
        }
    ERR_clear_error(); /* the end of the chain reads as an error */
    if (!(pkey = PEM_read_bio_PrivateKey(bk, NULL, NULL, NULL))) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s: no PEM private key (%s)", key, ssl_error(eb, sizeof eb));
        goto out;
    }
    if (X509_check_private_key(leaf, pkey) != 1) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s is not the key of %s (%s)", key, cert, ssl_error(eb, sizeof eb));
        goto out;
    }
    if (SSL_CTX_use_cert_and_key(s->ssl_ctx, leaf, pkey, chain, 1) != 1) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: the pair was refused (%s)", ssl_error(eb, sizeof eb));
        goto out;
    }
    free(s->tls_cert_pem);
    free(s->tls_key_pem);
    s->tls_cert_pem = cp;
    s->tls_key_pem = kp;
    s->tls_cert_len = cl;
    s->tls_key_len = kl;
    cp = kp = NULL;
    rc = MS_OK;
    LOGI("tls_reloaded", "cert=%s key=%s chain=%d", cert, key, sk_X509_num(chain));
out:
    if (rc != MS_OK) ERR_clear_error();
    sk_X509_pop_free(chain, X509_free);
    X509_free(leaf);
    EVP_PKEY_free(pkey);
    BIO_free(bc);
    BIO_free(bk);
    free(cp);
    free(kp);
    return rc;
}
