/* srv.h - the HTTP/WebSocket front end: libwebsockets on the daemon's libuv
 * loop. Knows nothing about models or sessions: it routes requests, reassembles
 * WebSocket messages (bounded), and hands events to the handlers.
 *
 * Routes: GET /api/chat and /v1/realtime upgrade to a WebSocket (srv_endpoint;
 * upgrades on any other path
 * are answered 404); /healthz, /metrics and /api/personas go to the http
 * handler (dynamic) when it claims them; everything else is a static file
 * under static_dir, or 404. Methods other than GET: 405; paths too long:
 * 414.
 *
 * Upgrades are checked before the 101 (srv.c's head comment has the list):
 * Sec-WebSocket-Version 13 only (else 426), a Sec-WebSocket-Key that is
 * the base64 of 16 bytes (else 400), no subprotocol asked for (400: none
 * is offered; a browser would fail the connection anyway without one
 * echoed), then ws_admit. Refusals are HTTP answers with a one-line
 * text/plain body and Connection: close.
 *
 * Connection-level defences (srv_config): the handshake timeout, pending
 * and active limits in total and per client IP, the per-IP rate; each
 * refusal is reported through srv_config.on_refuse.
 *
 * Every 401 srv sends (a ws_admit or http_get verdict) carries
 * "WWW-Authenticate: Bearer realm="moshid"".
 *
 * The implementation: srv.c and the files daemon/net/srv_int.h lists.
 *
 * Threading: every srv_* call and every handler runs on the loop thread.
 */
#ifndef MOSHID_SRV_H
#define MOSHID_SRV_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "err.h"
#include "srv_rx.h" /* WebSocket message reassembly (pure; the fuzz target drives it) */

/* Bytes of headroom libwebsockets needs before every payload passed to
 * srv_conn_send (LWS_PRE, fixed by the library build). */
extern const size_t srv_pre;

typedef struct srv srv;
typedef struct srv_conn srv_conn;

/* The WebSocket endpoints: the Kyutai protocol (docs/protocol.md) and the
 * OpenAI Realtime view of the same sessions (docs/realtime.md). Upgrades
 * on any other path are answered 404. */
#define SRV_PATH_CHAT "/api/chat"
#define SRV_PATH_REALTIME "/v1/realtime"
typedef enum srv_endpoint { SRV_EP_CHAT, SRV_EP_REALTIME, SRV_EP__COUNT } srv_endpoint;

typedef struct srv_config {
    /* Addresses to listen on (srv_listen.c): IPv4/IPv6 literals, host
     * names (every address), or one "" / "*" for every interface;
     * nlisten 0 = 127.0.0.1. */
    const char *const *listen;
    int nlisten;
    int port;                      /* 0 = ephemeral (srv_port tells) */
    /* Proxies that send a PROXY protocol header (v1 or v2) first:
     * addresses or prefixes ("10.0.0.0/8", "::1"). A connection from one
     * of them must start with a header, whose client address then stands
     * for the connection; nproxy_from 0 = none. */
    const char *const *proxy_from;
    int nproxy_from;
    const char *tls_cert;          /* PEM paths, both or neither */
    const char *tls_key;
    const char *static_dir;        /* NULL = no static files */
    const char *const *allowed_origins; /* NULL-terminated; NULL or empty = any */
    size_t max_message_bytes;      /* larger incoming messages -> ws_oversize */
    unsigned max_header_bytes;     /* request headers, bytes */
    int send_buffer_bytes;         /* SO_SNDBUF of accepted sockets, 0 = system */
    /* Connection-level defences (srv.c, "connections"). A connection is
     * pending from accept until its request headers are complete (on a
     * keep-alive connection, again after each answer), then active while
     * a request is answered or as a WebSocket. 0 = the default in
     * brackets. */
    unsigned max_connections;      /* active connections, total [64]; over: 503 (requests
                                    * for the dynamic paths are answered whatever the count) */
    unsigned max_connections_per_ip; /* active connections of one client IP [32]; over: 429 */
    unsigned max_pending;          /* pending connections, total [64]; over: the oldest of the
                                    * client IP with the most is closed */
    unsigned max_pending_per_ip;   /* pending of one IP [16]; over: its oldest is closed */
    unsigned handshake_timeout_ms; /* pending for longer is closed [5000] */
    double conn_rate_per_ip;       /* new connections per second of one IP (token bucket); 0 = no limit */
    unsigned conn_burst_per_ip;    /* the bucket's size [2 x rate, at least 1] */
    /* on_refuse: count a refusal (an srv_refusal); NULL = not counted.
     * Called on the loop thread. */
    void (*on_refuse)(int why);
} srv_config;

/* Why srv turned a connection away (srv_config.on_refuse). X(name, what). */
#define SRV_REFUSALS(X)                                                                  \
    X(rate, "closed at accept: over server.conn_rate_per_ip")                            \
    X(ip_table, "closed at accept: the table of client addresses is full")               \
    X(handshake_timeout, "closed: no complete request within server.handshake_timeout_ms") \
    X(pending_evicted, "closed before its request: over server.max_pending_handshakes or max_pending_per_ip") \
    X(busy, "answered 503: over server.max_connections")                                 \
    X(per_ip, "answered 429: over server.max_connections_per_ip")                        \
    X(bad_request, "answered 4xx: a malformed or refused HTTP request or WebSocket upgrade") \
    X(unmasked, "closed 1002: a client WebSocket frame without a mask (RFC 6455 5.1)")   \
    X(proxy_header, "closed: no valid PROXY header from a trusted proxy; answered 400: one from an untrusted address")
typedef enum srv_refusal {
#define SRV_REF_E(n, w) SRV_REF_##n,
    SRV_REFUSALS(SRV_REF_E)
#undef SRV_REF_E
    SRV_REF__COUNT
} srv_refusal;

/* What http_get sees of a request for a dynamic path (borrowed for the
 * call; absent headers are ""). Headers longer than 1023 bytes and
 * queries over PROTO_QUERY_MAX_BYTES / PROTO_QUERY_MAX_PARAMS never get
 * here: srv answers 431 / hands nargs -1. */
typedef struct srv_http_req {
    const char *path;              /* "/metrics" (without the query) */
    const char *peer;              /* client IP */
    const char *authorization;     /* Authorization header */
    const char *api_key;           /* kyutai-api-key header */
    const char *const *args;       /* decoded query arguments, "name=value" (as ws_open) */
    int nargs;                     /* -1: over the query limits */
    int tls;                       /* 1 on an https listener */
} srv_http_req;

/* http_get's answer. A 401 gets "WWW-Authenticate: Bearer realm="moshid""
 * added by srv (RFC 7235 4.1: a 401 carries a challenge). */
typedef struct srv_http_reply {
    const srv_http_req *req;       /* in: the request, set by srv before http_get (borrowed for the call) */
    int status;                    /* 200, 401, 503, ... */
    const char *content_type;
    char *body;                    /* malloc'd; the server frees it */
    size_t body_len;
} srv_http_reply;

/* What ws_admit sees of an upgrade request (borrowed for the call; absent
 * headers are ""). */
typedef struct srv_admit_req {
    const char *peer;              /* client IP */
    const char *path;              /* "/api/chat" */
    const char *host;              /* Host header */
    const char *origin;            /* Origin header */
    const char *authorization;     /* Authorization header */
    const char *api_key;           /* kyutai-api-key header */
    const char *const *args;       /* decoded query arguments, "name=value" (as ws_open) */
    int nargs;                     /* -1: over the query limits */
    int tls;                       /* 1 on an https/wss listener */
} srv_admit_req;

typedef struct srv_handlers {
    /* http_get: claim a dynamic GET path (reply->req: the request, with
     * the headers an access check needs). Fill reply and return 1, or 0
     * for a 404. (The request travels in the reply so that the handler's
     * signature stays that of the handlers written before it.) */
    int (*http_get)(void *ud, const char *path, srv_http_reply *reply);
    /* ws_open: a WebSocket on /api/chat is up. query: the decoded query
     * arguments as "name=value" strings (n of them, borrowed for the call);
     * nargs is -1 when the query has more than PROTO_QUERY_MAX_PARAMS
     * arguments or PROTO_QUERY_MAX_BYTES (proto/query.h).
     * Return the session pointer to attach, or NULL to close at once. */
    void *(*ws_open)(void *ud, srv_conn *c, const char *const *args, int nargs);
    /* ws_message: one complete message (borrowed for the call). */
    void (*ws_message)(void *ud, void *sess, const uint8_t *data, size_t len);
    /* ws_oversize: a message exceeds max_message_bytes (told as soon as
     * the bytes received plus what the current frame announces do; n is
     * that sum); the rest of the connection's input is dropped. */
    void (*ws_oversize)(void *ud, void *sess, size_t n);
    /* ws_writable: the socket takes data now: srv_conn_send while
     * srv_conn_choked says 0, then srv_conn_writable if anything is left. */
    void (*ws_writable)(void *ud, void *sess);
    /* ws_closed: the connection is gone; the session must forget c. */
    void (*ws_closed)(void *ud, void *sess);
    /* ws_admit: decide an upgrade before the 101 is sent. Return 0 to
     * accept (*principal, NULL unless set, is kept with the connection:
     * srv_conn_principal), or the HTTP status to refuse with (401, 403,
     * 429, 503), why[0..whylen) holding a one-line reason sent as the
     * text/plain body (a 401 with "WWW-Authenticate: Bearer
     * realm="moshid""). NULL: every upgrade on /api/chat is accepted. */
    int (*ws_admit)(void *ud, const srv_admit_req *r, void **principal, char *why, size_t whylen);
} srv_handlers;


/* srv_create: listen and serve on loop. NULL with err set on failure (port
 * in use, bad certificate, ...); then nothing is leaked, but libwebsockets
 * may still be closing handles of its half-made context on loop: run the
 * loop until it returns (uv_run) before uv_loop_close, and they close and
 * free themselves. */
srv *srv_create(uv_loop_t *loop, const srv_config *cfg, const srv_handlers *h, void *ud, ms_error *err);
/* srv_port: the bound port (useful with port 0). */
int srv_port(const srv *s);
/* srv_bound: what the listening sockets are bound to, read back from them:
 * "127.0.0.1:8998", "[::1]:8998,127.0.0.1:8998", "*:8998" (every
 * interface). Borrowed for s's life. */
const char *srv_bound(const srv *s);
/* srv_url_host: a host for URLs that reach the first listening socket:
 * its address ("127.0.0.1", "[::1]"), or the loopback address of its
 * family when it is bound to every address. */
void srv_url_host(const srv *s, char *out, size_t len);
/* srv_loopback_only: 1 when every listening socket is bound to a
 * loopback address (only this machine can connect), else 0. */
int srv_loopback_only(const srv *s);
/* srv_tls: 1 when the listener serves TLS. */
int srv_tls(const srv *s);
/* srv_shutdown: stop accepting, close every connection, tear down lws over
 * the next loop iterations, then call done(ud) and free s. The loop keeps
 * running; after done the server owns no handle. Calls after the first
 * (before done) do nothing. */
void srv_shutdown(srv *s, void (*done)(void *ud));

/* srv_conn_writable: ask for a ws_writable callback. */
void srv_conn_writable(srv_conn *c);
/* srv_conn_choked: 1 when the socket takes nothing more now (the kernel's
 * send buffer is full, libwebsockets holds the rest of a partial write, or
 * a send failed): stop sending until the next ws_writable. */
int srv_conn_choked(srv_conn *c);
/* srv_conn_send: send one binary message; payload at buf + srv_pre, len
 * bytes (buf has srv_pre bytes of headroom the library may overwrite;
 * copied or written before it returns). Only inside ws_writable and only
 * while srv_conn_choked is 0 (a message the kernel does not take whole is
 * kept by libwebsockets, which then reports choked). Returns 0, or -1 when
 * the socket failed (the connection is dropped; ws_closed follows). */
int srv_conn_send(srv_conn *c, uint8_t *buf, size_t len);
/* srv_conn_close: close with a WebSocket status and reason once pending
 * writes are done (asynchronously; ws_closed follows). The reason is cut to
 * PROTO_CLOSE_REASON_MAX (123) bytes at a character boundary, invalid UTF-8
 * bytes replaced by '?' (proto_msg_close_reason). The wait for the
 * peer's close reply is short (2 s) and never outlasts the deadline of
 * srv_conn_drop_after. */
void srv_conn_close(srv_conn *c, int status, const char *reason);
/* srv_conn_drop_after: a hard deadline: if the connection is still open
 * secs seconds from now (whole seconds, libwebsockets' timeout unit), drop
 * it: the socket is closed without a close frame and without flushing what
 * is unsent; ws_closed follows. A later call only moves the deadline
 * sooner. For a close the handler decided (it usually flushes an error
 * message first, then calls srv_conn_close). */
void srv_conn_drop_after(srv_conn *c, int secs);
/* srv_conn_send_text: srv_conn_send for a text message (valid UTF-8, the
 * caller's promise). */
int srv_conn_send_text(srv_conn *c, uint8_t *buf, size_t len);
/* srv_conn_endpoint: the path the connection was upgraded on (srv_endpoint). */
int srv_conn_endpoint(const srv_conn *c);
/* srv_conn_header: a request header (name with its colon, lower case:
 * "openai-beta:") copied into buf ("" when absent; -1 when longer than
 * len - 1). Only inside ws_open, while the request's headers exist. */
int srv_conn_header(srv_conn *c, const char *name, char *buf, int len);
/* srv_conn_peer: "ip" of the peer (for logs). */
const char *srv_conn_peer(const srv_conn *c);
/* srv_conn_principal: what ws_admit set for this connection (NULL if none). */
void *srv_conn_principal(const srv_conn *c);
/* srv_reload_tls: load a new certificate chain and key (PEM paths) for the
 * listener; connections open now keep theirs, new ones get the new pair.
 * On failure the old pair stays in use and err says why. MS_ERR_STATE when
 * the listener was started without TLS. */
int srv_reload_tls(srv *s, const char *cert, const char *key, ms_error *err);

#endif
