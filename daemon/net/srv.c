/* srv.c - libwebsockets on the daemon's libuv loop: the callback, creation
 * and teardown. See srv.h; srv_int.h lists the other files of the front
 * end (srv_conn.c holds the connection calls, srv_req.c judges requests,
 * srv_limit.c counts connections, srv_tls.c holds the certificate pair,
 * srv_rx.c reassembles messages).
 *
 * What is checked where (libwebsockets 4.1.6, Debian's libwebsockets-dev):
 *
 *   accept   srv_listen.c accepts (srv binds its own sockets; a trusted
 *            proxy's PROXY header is read there first), then the per-IP
 *            connection rate and the table of client addresses, on the
 *            client's address; a refusal is a bare close (no request
 *            exists yet). The socket is then adopted into lws's vhost.
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
 *   masks    libwebsockets 4.1 parses the MASK bit of client frames
 *            (lib/roles/ws/ops-ws.c, this_frame_masked) and neither checks
 *            it nor tells the callback: srv_wire.c follows the bytes lws
 *            reads (recv and SSL_read, interposed) and closes a connection
 *            that sends an unmasked frame with 1002 (RFC 6455 5.1), before
 *            or after the 101 (libwebsockets 5.0 checks it itself).
 *
 * Subprotocols: moshid speaks one protocol and offers no WebSocket
 * subprotocol; the Kyutai clients ask for none. A browser whose page asks
 * for one fails the connection unless the server echoes one of them (RFC
 * 6455 4.1), so accepting without one helps nobody: such an upgrade is
 * answered 400 with a body that says so.
 */
#include "srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "log.h"
#include "srv_int.h"
#include "text.h"

const size_t srv_pre = LWS_PRE;

/* Shutdown: poll period and the most polls before the second destroy. */
#define SRV_SHUTDOWN_POLL_MS 5
#define SRV_SHUTDOWN_MAX_POLLS 400

/* lws's internal write type for a close frame (see lws-write.h). */
#define SRV_LWS_WRITE_CLOSE 4

/* Header slots beyond pending + active: connections closed by the
 * pending limits hold theirs until the next loop iteration. */
#define SRV_HEADER_SLOTS_SPARE 16

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
        bad = PROTO_CLOSE_PROTOCOL_ERROR;
    else if (!text_utf8_valid(p + 2, len - 2))
        bad = PROTO_CLOSE_BAD_DATA;
    if (!bad) return 0;
    if (len == 1) {
        uint8_t frame[LWS_PRE + 2];
        frame[LWS_PRE] = PROTO_CLOSE_PROTOCOL_ERROR >> 8;
        frame[LWS_PRE + 1] = PROTO_CLOSE_PROTOCOL_ERROR & 0xff;
        lws_write(wsi, frame + LWS_PRE, 2, (enum lws_write_protocol)SRV_LWS_WRITE_CLOSE);
        return -1;
    }
    static const char r_code[] = "invalid close code", r_utf8[] = "invalid UTF-8 in the close reason";
    const char *r = bad == PROTO_CLOSE_PROTOCOL_ERROR ? r_code : r_utf8;
    size_t rl = strlen(r);
    p[0] = (uint8_t)(bad >> 8);
    p[1] = (uint8_t)(bad & 0xff);
    for (size_t i = 2; i < len; i++) p[i] = i - 2 < rl ? (uint8_t)r[i - 2] : ' ';
    return 0;
}

/* The wire guard's entry of wsi's connection (NULL: none). */
static srv_wire *wire_of(struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    return t ? t->wire : NULL;
}

static int srv_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    srv *s = lws_context_user(lws_get_context(wsi));
    srv_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: {
        if (srv_lim_track_new(s, wsi)) return -1;
        srv_track *t = lws_get_opaque_user_data(wsi);
        return srv_wire_attach(s, wsi, &t->wire) ? -1 : 0;
    }
    case LWS_CALLBACK_WSI_DESTROY:
        srv_wire_detach(wire_of(wsi));
        srv_lim_track_destroy(s, wsi);
        break;
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        s->ssl_ctx = user; /* the vhost's SSL_CTX: srv_reload_tls swaps its pair */
        return 0;
    case LWS_CALLBACK_FILTER_HTTP_CONNECTION:
        return srv_req_http(s, wsi) ? 1 : 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return srv_req_upgrade(s, wsi, in);
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* srv_req_upgrade judged it; a second look costs nothing */
        return srv_req_ws_endpoint(wsi) >= 0 ? 0 : -1;
    case LWS_CALLBACK_ESTABLISHED: {
        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        c->s = s;
        c->principal = srv_lim_principal(wsi, 0, NULL);
        c->endpoint = srv_req_ws_endpoint(wsi);
        snprintf(c->peer, sizeof c->peer, "%s", srv_lim_peer(wsi));
        if (s->cfg.send_buffer_bytes > 0) {
            int fd = lws_get_socket_fd(wsi), sz = s->cfg.send_buffer_bytes;
            if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        }
        /* A frame without a mask that came with the request (before the
         * 101): the connection is being closed, no session opens. */
        if (srv_wire_established(wire_of(wsi), c)) return 0;
        const char *args[SRV_MAX_ARGS];
        int nargs = srv_req_args(s, wsi, args);
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
            lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, srv_conn_close_ack_s(c));
            return 0;
        }
        if (c->sess && !c->failed) s->h.ws_writable(s->ud, c->sess);
        return c->failed ? -1 : 0; /* a failed send: drop the connection */
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* Our close frame went out already: close without echoing theirs. */
        if (c->close_sent) return -1;
        return check_peer_close(wsi, in, len);
    case LWS_CALLBACK_CLOSED:
        srv_wire_closed(wire_of(wsi));
        if (c->sess) s->h.ws_closed(s->ud, c->sess);
        c->sess = NULL;
        c->wsi = NULL;
        srv_free_buffers(c);
        return 0;
    case LWS_CALLBACK_HTTP:
        /* A dynamic path, or a path the static files do not have. */
        return srv_req_dynamic(s, wsi, c);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (!c || !c->http_body) break;
        if (lws_write(wsi, c->http_body + LWS_PRE, c->http_len, LWS_WRITE_HTTP_FINAL) != (int)c->http_len) {
            srv_free_buffers(c);
            return -1;
        }
        srv_free_buffers(c);
        if (lws_http_transaction_completed(wsi)) return -1;
        srv_lim_answered(s, wsi);
        return 0;
    case LWS_CALLBACK_HTTP_FILE_COMPLETION:
        srv_lim_answered(s, wsi); /* lws_callback_http_dummy completes the transaction */
        break;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c) srv_free_buffers(c);
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
    srv_lim_free(s);
    srv_tls_free(s);
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

srv *srv_create(uv_loop_t *loop, const srv_config *cfg, const srv_handlers *h, void *ud, ms_error *err) {
    srv *s = calloc(1, sizeof *s);
    if (!s) { ms_err_set(err, MS_ERR_NOMEM, "server: out of memory"); return NULL; }
    s->loop = loop;
    s->cfg = *cfg;
    s->h = *h;
    s->ud = ud;
    const srv_config *c = &s->cfg;
    if (srv_lim_init(s) != MS_OK) { free(s); ms_err_set(err, MS_ERR_NOMEM, "server: out of memory"); return NULL; }
    s->max_path = SRV_MAX_PATH;
    if (cfg->static_dir && cfg->static_dir[0]) {
        size_t room = SRV_LWS_FILE_PATH - 2 - strlen(cfg->static_dir); /* the NUL and "/" */
        if (strlen(cfg->static_dir) + 2 >= SRV_LWS_FILE_PATH) room = 1;
        if (room < s->max_path) s->max_path = room;
    }
    for (int i = 0; i < cfg->nproxy_from; i++) {
        if (s->nproxy >= SRV_MAX_PROXIES || srv_cidr_parse(cfg->proxy_from[i], &s->proxy[s->nproxy]) != 0) {
            ms_err_set(err, MS_ERR_ARG, "server.proxy_protocol_from: \"%s\" is not an address or prefix (or more "
                       "than %d of them)", cfg->proxy_from[i], SRV_MAX_PROXIES);
            srv_free(s);
            return NULL;
        }
        s->nproxy++;
    }
    if (srv_listen_bind(s, err) != MS_OK) {
        srv_free(s);
        return NULL;
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
    /* The vhost listens nowhere: srv_listen.c binds, accepts and adopts. */
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    info.protocols = s->protocols;
    info.mounts = &s->mounts[0];
    info.max_http_header_data = (unsigned short)(cfg->max_header_bytes > 65535 ? 65535 : cfg->max_header_bytes);
    /* Every connection holding a header slot is pending or active: with
     * this many slots none waits for one (idle connections cannot take
     * every slot). */
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
        ms_err_set(err, MS_ERR_IO, "server: cannot start libwebsockets on %s (bad TLS files?)", s->bound_text);
        srv_listen_free_fds(s);
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
    s->vh = lws_get_vhost_by_name(s->ctx, "default");
    srv_lim_sweep_start(s);
    if (s->tls) srv_tls_remember(s); /* the pair in use, for srv_reload_tls to compare */
    if (srv_listen_start(s) != MS_OK) {
        ms_err_set(err, MS_ERR_IO, "server: cannot watch the listening sockets on the loop");
        srv_shutdown(s, NULL);
        return NULL;
    }
    LOGI("listen", "addr=%s port=%d loopback_only=%s proxy_protocol_from=%d tls=%s static=%s max_connections=%u "
         "per_ip=%u max_pending=%u per_ip=%u handshake_timeout_ms=%u rate_per_ip=%g burst=%u",
         s->bound_text, s->port, s->loopback_only ? "true" : "false", s->nproxy, s->tls ? "on" : "off",
         cfg->static_dir ? cfg->static_dir : "-", c->max_connections, c->max_connections_per_ip, c->max_pending,
         c->max_pending_per_ip, c->handshake_timeout_ms, c->conn_rate_per_ip, c->conn_burst_per_ip);
    return s;
}

int srv_port(const srv *s) { return s->port; }

const char *srv_bound(const srv *s) { return s->bound_text; }

int srv_loopback_only(const srv *s) { return s->loopback_only; }

void srv_url_host(const srv *s, char *out, size_t len) {
    const struct sockaddr *sa = (const struct sockaddr *)&s->bound_first;
    int v6 = sa->sa_family == AF_INET6;
    int any = v6 ? IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr)
                 : ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    int v4mapped = v6 && IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    char a[INET6_ADDRSTRLEN];
    int v6only = 0;
    socklen_t ol = sizeof v6only;
    if (any && v6 && s->nls > 0) getsockopt(s->ls[0].fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol);
    if (any) snprintf(out, len, "%s", v6only ? "[::1]" : "127.0.0.1");
    else if (srv_addr_text(sa, a, sizeof a) != 0) snprintf(out, len, "127.0.0.1");
    else if (v6 && !v4mapped) snprintf(out, len, "[%s]", a);
    else snprintf(out, len, "%s", a);
}

int srv_tls(const srv *s) { return s->tls; }

void srv_shutdown(srv *s, void (*done)(void *ud)) {
    /* The caller's tick may ask again before the teardown's done callback
     * (which frees s) has run: one teardown only. */
    if (s->stopping) return;
    s->stopping = 1;
    /* The connections' WSI_DESTROY calls during the teardown find the
     * sweep closed (sweep_ready 0) and leave it alone. */
    srv_lim_sweep_stop(s);
    srv_listen_close(s);
    lws_context_destroy(s->ctx); /* starts the teardown on the foreign loop */
    teardown_start(s, done);
}
