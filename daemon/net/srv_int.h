/* srv_int.h - what the front end's files share (srv.h is the public side):
 *
 *   srv.c        the libwebsockets callback, creation and teardown
 *   srv_conn.c   the connection calls of srv.h (send, close, deadlines)
 *   srv_req.c    judging complete requests (method, path, WebSocket
 *                handshake, ws_admit, the dynamic paths' request) and the
 *                HTTP answers srv writes itself
 *   srv_limit.c  per-address and per-connection accounting: the pending and
 *                active limits, the handshake timeout, the per-IP rate
 *   srv_tls.c    the certificate pair: kept for comparison, reloaded
 *   srv_listen.c the listening sockets (bound by srv, exactly as
 *                configured), accept, the PROXY header of trusted
 *                proxies, the hand-over to libwebsockets
 *   srv_proxy.c  the PROXY protocol header parser (pure; srv_proxy.h)
 *   srv_rx.c     WebSocket message reassembly and the wire guard's parser
 *                (pure; srv_rx.h)
 *   srv_wire.c   the wire guard: recv and SSL_read, interposed, feed each
 *                tracked connection's bytes to its srv_wg (the MASK bit
 *                libwebsockets 4.1 does not check)
 *
 * Everything here runs on the loop thread.
 */
#ifndef MOSHID_SRV_INT_H
#define MOSHID_SRV_INT_H

#include <libwebsockets.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <sys/socket.h>

#include "msg.h"
#include "query.h"
#include "srv.h"
#include "srv_proxy.h"

/* Longest query string and argument list accepted on /api/chat and the
 * dynamic paths: the protocol's query limits (proto/query.h), so that
 * what srv hands over the query parser can take. */
#define SRV_MAX_ARGS PROTO_QUERY_MAX_PARAMS
#define SRV_MAX_ARG_BYTES PROTO_QUERY_MAX_BYTES
/* Longest URL path served: lws builds a static file's path in a 256-byte
 * buffer (origin + "/" + path, lib/roles/http/server/server.c), so with
 * static files the bound is what is left of it; longer paths get 414. */
#define SRV_LWS_FILE_PATH 256
#define SRV_MAX_PATH 1024
/* Header copies handed to ws_admit and http_get (longer headers: 431). */
#define SRV_HDR_SHORT 256
#define SRV_HDR_LONG 1024
/* Client address table: slots (a power of two) and the longest probe.
 * Entries of addresses with no open connection are reused (their rate
 * bucket is forgotten); when the probe window of a new address holds
 * none, the connection is refused (SRV_REF_ip_table). */
#define SRV_IP_SLOTS 4096
#define SRV_IP_PROBE 64
/* Most handles the loop may hold before srv_create (snapshot size). */
#define SRV_MAX_PREEXISTING 256
/* Most listening sockets (server.listen's addresses, resolved) and most
 * trusted proxy prefixes (server.proxy_protocol_from). */
#define SRV_MAX_LISTENERS 16
#define SRV_MAX_PROXIES SRV_MAX_PROXY_FROM
/* The challenge of every 401 srv sends (RFC 7235 4.1 requires one; bearer
 * tokens are the only scheme, RFC 6750 3). */
#define SRV_WWW_AUTHENTICATE "Bearer realm=\"moshid\""

/* ---- per-IP and per-connection accounting (srv_limit.c) ---- */

typedef struct srv_track srv_track;
typedef struct srv_wire srv_wire;

typedef struct srv_ip {
    uint8_t addr[16];              /* IPv6, or IPv4 as ::ffff:a.b.c.d */
    int used;                      /* never used slots end a probe */
    unsigned conns;                /* open connections (any state) */
    unsigned pending, active;
    double tokens;                 /* rate bucket */
    uint64_t refill_ms;
    srv_track *pend_head, *pend_tail; /* this IP's pending connections, oldest first */
    struct srv_ip *pprev, *pnext;  /* srv.pend_ips: the addresses with pending connections */
} srv_ip;

enum { TRK_PENDING = 1, TRK_ACTIVE, TRK_DOOMED, TRK_DONE };

/* One network connection, from accept (SERVER_NEW_CLIENT_INSTANTIATED) to
 * WSI_DESTROY: the wsi's opaque user data. */
struct srv_track {
    struct lws *wsi;
    srv_ip *ip;
    int state;
    int counted;                   /* active and counted against the active limits */
    int doomed_why;                /* srv_refusal of a doomed connection */
    uint64_t since_ms;             /* pending since (uv_now) */
    uint64_t seq;                  /* order of becoming pending (uv_now has ties within a millisecond) */
    srv_track *gprev, *gnext;      /* the pending list (oldest first) or the doomed list */
    srv_track *iprev, *inext;      /* the IP's pending list */
    void *principal;               /* ws_admit's, for the connection */
    char peer[INET6_ADDRSTRLEN];   /* the client's address (a trusted proxy's PROXY header, else the TCP peer) */
    srv_wire *wire;                /* the wire guard's entry (srv_wire.c), NULL without one */
};

/* libwebsockets' per-session data (per_session_data_size). */
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
    int endpoint;             /* srv_endpoint of its path */
    /* HTTP reply waiting for HTTP_WRITEABLE */
    uint8_t *http_body; /* LWS_PRE headroom + body */
    size_t http_len;
    char peer[64];
};

/* The dynamic paths, NULL-terminated (srv_req.c). */
extern const char *const srv_dynamic_paths[];
#define SRV_NDYNAMIC 3

/* One listening socket (srv_listen.c). */
typedef struct srv_listener {
    srv *s;
    uv_poll_t poll;
    int fd;
    int polling;                   /* poll initialised (closed with uv_close) */
} srv_listener;

typedef struct srv_ppw srv_ppw;

struct srv {
    struct lws_context *ctx;
    struct lws_vhost *vh;          /* the one vhost; it listens nowhere (srv_listen.c adopts into it) */
    uv_loop_t *loop;
    srv_config cfg;                /* the strings are not used after srv_create */
    srv_handlers h;
    void *ud;
    struct lws_protocols protocols[2];
    struct lws_http_mount mounts[SRV_NDYNAMIC + 1]; /* the dynamic paths + static files */
    struct lws_protocol_vhost_options mime_wasm;
    int port;
    int tls;
    /* listening (srv_listen.c) */
    srv_listener ls[SRV_MAX_LISTENERS];
    int nls;
    int loopback_only;             /* every bound address is a loopback one */
    char bound_text[SRV_MAX_LISTENERS * (INET6_ADDRSTRLEN + 9)]; /* "127.0.0.1:8998,[::1]:8998" */
    struct sockaddr_storage bound_first;
    const struct sockaddr_storage *adopting; /* the client's address during lws_adopt_descriptor_vhost */
    srv_cidr proxy[SRV_MAX_PROXIES];
    int nproxy;
    srv_ppw *ppw_head, *ppw_tail;  /* connections of trusted proxies waiting for their header */
    unsigned nppw;
    uv_timer_t ppw_timer, accept_timer;
    int ppw_timer_on;              /* both timers initialised */
    uint64_t accept_warned_ms;
    size_t max_path;
    char argbuf[SRV_MAX_ARG_BYTES + 1]; /* decoded query arguments, for one callback at a time */
    /* accounting */
    srv_ip *ips;                   /* SRV_IP_SLOTS */
    uint64_t hash_seed;
    unsigned npending, nactive;
    srv_track *pend_head, *pend_tail;
    srv_ip *pend_ips;              /* the addresses with pending > 0 (at most max_pending + 1 of them) */
    uint64_t pend_seq;             /* the last srv_track.seq given */
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

/* srv_lim_key: the address table's key of a peer address: IPv4 (and
 * IPv4-mapped IPv6) as ::ffff:a.b.c.d, whole; other IPv6 addresses by
 * their first SRV_IP6_PREFIX_BYTES (a /64), the rest zero. One IPv6 host
 * is routinely given a whole /64 (SLAAC and temporary addresses, a
 * customer's prefix): keyed by the whole address, a client could open
 * each connection from a new address and pass every per-IP limit, and a
 * flood from one prefix would evict other clients' pending connections
 * (the total's oldest) instead of its own. The cost: the hosts of one
 * IPv6 LAN share the per-IP limits, as hosts behind one IPv4 NAT share
 * theirs. 0, or -1 for another address family. */
#define SRV_IP6_PREFIX_BYTES 8
struct sockaddr;
int srv_lim_key(const struct sockaddr *sa, uint8_t key[16]);
/* srv_addr_text: the address of sa without its port, IPv4-mapped IPv6 as
 * IPv4 ("?" and -1 for another family). The listener's log lines and the
 * connections' peers use it too. */
int srv_addr_text(const struct sockaddr *sa, char *out, size_t len);
/* srv_lim_init: the limits' defaults (0 in cfg), the address table and its
 * hash seed. MS_OK or MS_ERR_NOMEM. */
int srv_lim_init(srv *s);
/* srv_lim_sweep_start: the sweep timer on s->loop (after lws is up). */
void srv_lim_sweep_start(srv *s);
/* srv_lim_sweep_stop: close the sweep timer (srv_shutdown); later calls
 * from WSI_DESTROY leave it alone. */
void srv_lim_sweep_stop(srv *s);
/* srv_lim_free: the address table. */
void srv_lim_free(srv *s);
/* srv_lim_accept: a connection accepted from the client address sa (a
 * trusted proxy's PROXY header, or the TCP peer), before libwebsockets
 * gets it: 0 admits, 1 closes (the rate, the table; counted). */
int srv_lim_accept(srv *s, const struct sockaddr *sa);
/* srv_lim_track_new: a new connection's wsi becomes pending (its client
 * address: s->adopting, set by srv_listen.c around the adoption); -1
 * closes it. */
int srv_lim_track_new(srv *s, struct lws *wsi);
/* srv_lim_track_destroy: WSI_DESTROY: forget the connection. */
void srv_lim_track_destroy(srv *s, struct lws *wsi);
/* srv_lim_admit: a complete request: pending -> active (count 0: a dynamic
 * path, which the active limits do not hold back). 0, -1 for a connection
 * being closed, or SRV_REF_busy / SRV_REF_per_ip (not yet counted). */
int srv_lim_admit(srv *s, struct lws *wsi, int count);
/* srv_lim_answered: an answer is through on a keep-alive connection: pending
 * again (a new handshake clock). */
void srv_lim_answered(srv *s, struct lws *wsi);
/* srv_lim_principal: the principal kept with wsi's connection (set, or
 * read: out NULL), NULL when untracked. */
void *srv_lim_principal(struct lws *wsi, int set, void *p);
/* srv_lim_peer: the client address of wsi's connection as text ("-" when
 * untracked). */
const char *srv_lim_peer(struct lws *wsi);
/* srv_refused: count a refusal (srv_config.on_refuse). */
void srv_refused(srv *s, srv_refusal why);

/* ---- one connection (srv_conn.c) ---- */

/* srv_conn_close_ack_s: seconds to wait for the peer's reply to our close
 * frame (2, or what is left before the drop deadline; at least 1). */
int srv_conn_close_ack_s(const srv_conn *c);

/* ---- requests and answers (srv_req.c) ---- */

/* srv_req_http: a complete non-upgrade request (before the mounts):
 * limits, method, path. 0 lets it through, nonzero after an answer. */
int srv_req_http(srv *s, struct lws *wsi);
/* srv_req_upgrade: a complete upgrade request (HTTP_CONFIRM_UPGRADE): 0
 * lets libwebsockets answer 101, -1 after an answer. */
int srv_req_upgrade(srv *s, struct lws *wsi, const char *upgrade);
/* srv_req_dynamic: LWS_CALLBACK_HTTP: a dynamic path to http_get, or 404;
 * the callback's return value. */
int srv_req_dynamic(srv *s, struct lws *wsi, srv_conn *c);
/* srv_req_ws_endpoint: the srv_endpoint of a WebSocket request's path, or
 * -1 for a path that serves none. */
int srv_req_ws_endpoint(struct lws *wsi);
/* srv_req_path_len: the request's path length (GET only; -1: another method). */
int srv_req_path_len(struct lws *wsi);
/* srv_req_args: the decoded query arguments, one "name=value" fragment
 * each, into s->argbuf; the count, or -1 over the limits. */
int srv_req_args(srv *s, struct lws *wsi, const char **args);
/* srv_refuse: count, log and answer status with a one-line body (extra: one
 * more "name:" header, or NULL); returns -1 (the caller closes). */
int srv_refuse(srv *s, struct lws *wsi, srv_refusal why, unsigned status, const char *extra, const char *val,
               const char *body);
/* srv_free_buffers: the connection's message and HTTP reply buffers. */
void srv_free_buffers(srv_conn *c);

/* ---- the wire guard (srv_wire.c) ---- */

/* srv_wire_attach: SERVER_NEW_CLIENT_INSTANTIATED: a guard for wsi's
 * descriptor (*out; NULL when the wsi has none). 0, or -1 without memory. */
int srv_wire_attach(srv *s, struct lws *wsi, srv_wire **out);
/* srv_wire_detach: WSI_DESTROY: forget and free w (NULL: nothing). */
void srv_wire_detach(srv_wire *w);
/* srv_wire_established: ESTABLISHED, c set up (wsi, s): from now on a
 * violation closes c. 1 when one came before the 101 (c is being closed
 * with 1002: open no session), else 0. */
int srv_wire_established(srv_wire *w, srv_conn *c);
/* srv_wire_proxy_header: 1 when the connection's stream began with a
 * PROXY protocol header (that nobody read: srv_listen.c consumes those of
 * trusted proxies before lws sees the stream); the caller refuses the
 * request and counts it. One that libwebsockets closes before any request
 * is counted at srv_wire_detach. */
int srv_wire_proxy_header(srv_wire *w);
/* srv_wire_closed: CLOSED: c is gone. */
void srv_wire_closed(srv_wire *w);

/* ---- listening (srv_listen.c) ---- */

/* srv_listen_bind: resolve s->cfg.listen and bind and listen on every
 * address (s->ls, s->port, s->bound_text, s->loopback_only); MS_OK, or
 * an error naming the address and the reason (nothing left open). */
int srv_listen_bind(srv *s, ms_error *err);
/* srv_listen_start: accept on the loop (after the vhost exists). */
int srv_listen_start(srv *s);
/* srv_listen_close: stop accepting; close the listening sockets and the
 * connections still waiting for a PROXY header (handles close
 * asynchronously). */
void srv_listen_close(srv *s);
/* srv_listen_free_fds: close the sockets of a bind whose server never
 * started (no handles made yet). */
void srv_listen_free_fds(srv *s);

/* ---- TLS (srv_tls.c) ---- */

/* srv_tls_remember: read the pair the listener started with, for
 * srv_reload_tls to compare (a failure only means a later reload of the
 * same files reloads them). */
void srv_tls_remember(srv *s);
/* srv_tls_free: the kept pair. */
void srv_tls_free(srv *s);

#endif
