/* srv.c - libwebsockets on the daemon's libuv loop. See srv.h. */
#include "srv.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "msg.h"
#include "query.h"

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

static const char *const srv_dynamic_paths[] = {"/healthz", "/metrics", "/api/personas", NULL};

struct srv_conn {
    struct lws *wsi;
    srv *s;
    void *sess;
    /* WebSocket message reassembly */
    uint8_t *rx;
    size_t rx_len, rx_cap;
    int oversize;
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
    srv_config cfg;
    srv_handlers h;
    void *ud;
    struct lws_protocols protocols[2];
    struct lws_http_mount mounts[sizeof srv_dynamic_paths / sizeof *srv_dynamic_paths]; /* the dynamic paths + static files */
    struct lws_protocol_vhost_options mime_wasm;
    int port;
    /* shutdown */
    uv_timer_t timer;
    int polls;
    void (*done)(void *ud);
    void *preexisting[SRV_MAX_PREEXISTING];
    int npre;
};

static int path_is_dynamic(const char *p) {
    for (int i = 0; srv_dynamic_paths[i]; i++)
        if (strcmp(p, srv_dynamic_paths[i]) == 0) return 1;
    return 0;
}

static int origin_allowed(const srv *s, struct lws *wsi) {
    const char *const *o = s->cfg.allowed_origins;
    if (!o || !o[0]) return 1;
    char origin[256];
    if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) <= 0) return 1; /* non-browser client */
    for (; *o; o++)
        if (strcmp(*o, origin) == 0 || strcmp(*o, "*") == 0) return 1;
    return 0;
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
    free(c->rx);
    c->rx = NULL;
    c->rx_len = c->rx_cap = 0;
    free(c->http_body);
    c->http_body = NULL;
}

static int rx_append(srv_conn *c, const void *in, size_t len, size_t max) {
    if (c->oversize) return 0;
    if (c->rx_len + len > max) {
        c->oversize = 1;
        return 0;
    }
    if (c->rx_len + len > c->rx_cap) {
        size_t nc = c->rx_cap ? c->rx_cap : 4096;
        while (nc < c->rx_len + len) nc *= 2;
        if (nc > max) nc = max;
        uint8_t *n = realloc(c->rx, nc);
        if (!n) return -1;
        c->rx = n;
        c->rx_cap = nc;
    }
    memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    return 0;
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
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        char uri[64];
        if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0 || strcmp(uri, "/api/chat") != 0) {
            LOGI("ws_refused", "reason=path");
            return -1;
        }
        if (!origin_allowed(s, wsi)) {
            LOGI("ws_refused", "reason=origin");
            return -1;
        }
        return 0;
    }
    case LWS_CALLBACK_ESTABLISHED: {
        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        c->s = s;
        lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
        if (s->cfg.send_buffer_bytes > 0) {
            int fd = lws_get_socket_fd(wsi), sz = s->cfg.send_buffer_bytes;
            if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        }
        /* The decoded query arguments, one "name=value" fragment each. */
        static char argbuf[SRV_MAX_ARG_BYTES + 1]; /* loop thread only */
        const char *args[SRV_MAX_ARGS];
        int nargs = 0;
        size_t used = 0;
        for (int i = 0;; i++) {
            int fl = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
            if (fl <= 0) break;
            if (nargs == (int)SRV_MAX_ARGS || used + (size_t)fl + 1 > sizeof argbuf) {
                nargs = -1; /* more than the limits: the handler refuses it */
                break;
            }
            if (lws_hdr_copy_fragment(wsi, argbuf + used, (int)(sizeof argbuf - used), WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
                break;
            args[nargs++] = argbuf + used;
            used += (size_t)fl + 1;
        }
        c->sess = s->h.ws_open(s->ud, c, args, nargs);
        return c->sess ? 0 : -1;
    }
    case LWS_CALLBACK_RECEIVE: {
        if (!c->sess || c->closing) return 0; /* closing: input is dropped */
        if (rx_append(c, in, len, s->cfg.max_message_bytes) < 0) return -1;
        if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) != 0) return 0;
        if (c->oversize) {
            size_t n = c->rx_len + len;
            c->oversize = 0;
            c->rx_len = 0;
            s->h.ws_oversize(s->ud, c->sess, n);
        } else {
            size_t n = c->rx_len;
            c->rx_len = 0;
            s->h.ws_message(s->ud, c->sess, c->rx, n);
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
        return c->close_sent ? -1 : 0;
    case LWS_CALLBACK_CLOSED:
        if (c->sess) s->h.ws_closed(s->ud, c->sess);
        c->sess = NULL;
        c->wsi = NULL;
        conn_free_buffers(c);
        return 0;
    case LWS_CALLBACK_HTTP: {
        char uri[256];
        if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0) {
            /* not a GET */
            if (lws_return_http_status(wsi, HTTP_STATUS_METHOD_NOT_ALLOWED, NULL)) return -1;
            return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        memset(c, 0, sizeof *c);
        c->s = s;
        srv_http_reply r = {0};
        if (path_is_dynamic(uri) && s->h.http_get && s->h.http_get(s->ud, uri, &r)) return http_reply(wsi, c, &r);
        if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL)) return -1;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (!c || !c->http_body) break;
        if (lws_write(wsi, c->http_body + LWS_PRE, c->http_len, LWS_WRITE_HTTP_FINAL) != (int)c->http_len) {
            conn_free_buffers(c);
            return -1;
        }
        conn_free_buffers(c);
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c) conn_free_buffers(c);
        break;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* lws's own log lines go through ours (warnings and errors only). */
static void lws_log_to_ours(int level, const char *line) {
    char msg[512];
    size_t n = strnlen(line, sizeof msg - 1);
    memcpy(msg, line, n);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) n--;
    msg[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (msg[i] == '"') msg[i] = '\'';
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

static void timer_closed(uv_handle_t *h) {
    srv *s = h->data;
    void (*done)(void *) = s->done;
    void *ud = s->ud;
    free(s);
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

srv *srv_create(uv_loop_t *loop, const srv_config *cfg, const srv_handlers *h, void *ud, ms_error *err) {
    srv *s = calloc(1, sizeof *s);
    if (!s) { ms_err_set(err, MS_ERR_NOMEM, "server: out of memory"); return NULL; }
    s->loop = loop;
    s->cfg = *cfg;
    s->h = *h;
    s->ud = ud;
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
    info.max_http_header_pool = (unsigned short)(cfg->max_connections ? cfg->max_connections : 64);
    info.timeout_secs = 20;
    if (cfg->tls_cert && cfg->tls_cert[0]) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = cfg->tls_cert;
        info.ssl_private_key_filepath = cfg->tls_key;
    }
    s->ctx = lws_create_context(&info);
    if (!s->ctx || !lws_get_vhost_by_name(s->ctx, "default")) {
        ms_err_set(err, MS_ERR_IO, "server: cannot listen on %s:%d (port in use, bad address or bad TLS files)",
                   info.iface ? info.iface : "*", cfg->port);
        if (!s->ctx) {
            /* lws gave up before it put anything on the loop and freed
             * what it had made (lws 4.1 context.c: the failures before
             * the event loop is set up). */
            free(s);
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
    s->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(s->ctx, "default"));
    LOGI("listen", "addr=%s port=%d tls=%s static=%s", info.iface ? info.iface : "*", s->port,
         info.ssl_cert_filepath ? "on" : "off", cfg->static_dir ? cfg->static_dir : "-");
    return s;
}

int srv_port(const srv *s) { return s->port; }

void srv_shutdown(srv *s, void (*done)(void *ud)) {
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
