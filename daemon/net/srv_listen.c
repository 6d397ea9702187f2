/* srv_listen.c - the listening sockets: bound by srv itself, exactly where
 * server.listen says, accepted on the loop and handed to libwebsockets.
 *
 * Why not libwebsockets' own listener: lws 4.1.6 binds its vhost's `iface`
 * through lws_interface_to_sa (lib/plat/unix/unix-sockets.c), and with IPv6
 * enabled it fills a sockaddr_in6: for an IPv4 literal inet_pton(AF_INET)
 * writes the four bytes at sockaddr_in's sin_addr offset, which in a
 * sockaddr_in6 is sin6_flowinfo, so sin6_addr stays "::" and the socket
 * listens on every address of every family. It also binds one address per
 * vhost and reads no PROXY protocol header. So srv creates, binds and
 * listens itself; the vhost listens nowhere (CONTEXT_PORT_NO_LISTEN_SERVER)
 * and every accepted socket is adopted into it with the flags lws's own
 * listener uses (lib/roles/listen/ops-listen.c: LWS_ADOPT_SOCKET |
 * LWS_ADOPT_HTTP, LWS_ADOPT_ALLOW_SSL on a TLS vhost), after the socket
 * options that listener sets (close-on-exec, TCP_NODELAY, non-blocking).
 *
 * What server.listen accepts (srv_config.listen): IPv4 and IPv6 literals
 * (bound exactly; an IPv6 socket is IPv6-only), host names (every address
 * they resolve to), and "" or "*" alone for every interface (one IPv6
 * socket that takes IPv4 too, or IPv4 alone where the host has no IPv6).
 * Every address must bind, or srv_create fails with the address and the
 * reason. With port 0 the first socket's ephemeral port is used for the
 * others (tried again with a new port if one of them has it taken).
 *
 * PROXY protocol: a connection from an address in srv_config.proxy_from
 * must start with a PROXY header (v1 or v2, srv_proxy.h); until it is
 * complete the connection waits here (bounded: max_pending of them, each
 * for handshake_timeout_ms). The header's bytes, and only those, are
 * consumed; the client's own bytes stay in the socket for lws. The client
 * address it names is the connection's peer for the limits, the logs and
 * the handlers. Loop thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "srv_int.h"
#include "srv_proxy.h"

/* Accepts per readable event of one listener (then the loop serves others). */
#define SRV_ACCEPT_BATCH 64
/* Out of descriptors or memory at accept: stop accepting this long. */
#define SRV_ACCEPT_PAUSE_MS 100
/* Ephemeral port (port 0) with several addresses: tries to find one port
 * free on all of them. */
#define SRV_EPHEMERAL_TRIES 8

/* A connection from a trusted proxy, waiting for its PROXY header. */
struct srv_ppw {
    srv *s;
    uv_poll_t poll;
    int fd;
    struct sockaddr_storage proxy;  /* the proxy's address (the TCP peer) */
    uint64_t since_ms;
    size_t got;                    /* header bytes consumed so far (all of them in hdr) */
    uint8_t hdr[SRV_PROXY_MAX];
    srv_ppw *prev, *next;          /* s->ppw_head: oldest first */
};

/* ---- addresses ---- */

/* "127.0.0.1:8998" or "[::1]:8998". */
static void addr_port_text(const struct sockaddr *sa, char *out, size_t len) {
    char a[INET6_ADDRSTRLEN];
    srv_addr_text(sa, a, sizeof a);
    int port = sa->sa_family == AF_INET ? ntohs(((const struct sockaddr_in *)sa)->sin_port)
                                        : ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    if (sa->sa_family == AF_INET6 && !IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr))
        snprintf(out, len, "[%s]:%d", a, port);
    else
        snprintf(out, len, "%s:%d", a, port);
}

/* The address as 16 bytes, IPv4 as ::ffff:a.b.c.d; -1 for other families. */
static int addr16(const struct sockaddr *sa, uint8_t out[16]) {
    if (sa->sa_family == AF_INET) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

static int is_loopback(const struct sockaddr *sa) {
    uint8_t a[16];
    if (addr16(sa, a)) return 0;
    static const uint8_t v4m[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, v4m, 12) == 0) return a[12] == 127;
    static const uint8_t lo6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return memcmp(a, lo6, 16) == 0;
}

static int trusted_proxy(const srv *s, const struct sockaddr *sa) {
    uint8_t a[16];
    if (!s->nproxy || addr16(sa, a)) return 0;
    for (int i = 0; i < s->nproxy; i++)
        if (srv_cidr_match(&s->proxy[i], a)) return 1;
    return 0;
}

/* ---- binding ---- */

/* One socket bound to sa (port set) and listening; -1 with err set. */
static int bind_one(const struct sockaddr *sa, socklen_t sl, int dual, const char *what, ms_error *err) {
    char at[INET6_ADDRSTRLEN + 8];
    addr_port_text(sa, at, sizeof at);
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ms_err_set(err, MS_ERR_IO, "server.listen \"%s\": cannot make a socket for %s: %s", what, at, strerror(errno));
        return -1;
    }
    int one = 1, v6only = !dual;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->sa_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) != 0) {
        ms_err_set(err, MS_ERR_IO, "server.listen \"%s\": cannot set IPV6_V6ONLY on %s: %s", what, at, strerror(errno));
        close(fd);
        return -1;
    }
    if (bind(fd, sa, sl) != 0) {
        int e = errno;
        ms_err_set(err, MS_ERR_IO, "server.listen \"%s\": cannot bind %s: %s%s", what, at, strerror(e),
                   e == EADDRNOTAVAIL ? " (not an address of this machine)"
                   : e == EADDRINUSE  ? " (another program, or another moshid, has the port)"
                   : e == EACCES      ? " (a port below 1024 needs privileges)"
                                      : "");
        close(fd);
        errno = e;
        return -1;
    }
    if (listen(fd, SOMAXCONN) != 0) {
        ms_err_set(err, MS_ERR_IO, "server.listen \"%s\": cannot listen on %s: %s", what, at, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct {
    struct sockaddr_storage ss;
    socklen_t len;
    int dual;                      /* the every-interface socket: IPv4 too */
    const char *what;              /* the server.listen entry it came from */
} want_addr;

/* The addresses of one server.listen entry, appended to w (deduplicated). */
static int resolve(const char *entry, want_addr *w, int *nw, ms_error *err) {
    if (!entry[0] || strcmp(entry, "*") == 0) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
        int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        want_addr *x = &w[(*nw)++];
        memset(x, 0, sizeof *x);
        x->what = entry;
        if (probe >= 0) {
            close(probe);
            memcpy(&x->ss, &a6, sizeof a6);
            x->len = sizeof a6;
            x->dual = 1;
        } else { /* no IPv6 on this host: every IPv4 address */
            struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
            memcpy(&x->ss, &a4, sizeof a4);
            x->len = sizeof a4;
        }
        return MS_OK;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(entry, NULL, &hints, &res);
    if (rc == EAI_NONAME) { /* not a literal: a host name */
        hints.ai_flags = 0;
        rc = getaddrinfo(entry, NULL, &hints, &res);
    }
    if (rc != 0)
        return ms_err_set(err, MS_ERR_ARG, "server.listen \"%s\": cannot resolve it: %s", entry, gai_strerror(rc));
    int added = 0;
    for (struct addrinfo *r = res; r; r = r->ai_next) {
        if ((r->ai_family != AF_INET && r->ai_family != AF_INET6) || r->ai_addrlen > sizeof(struct sockaddr_storage))
            continue;
        int dup = 0;
        for (int i = 0; i < *nw && !dup; i++)
            dup = w[i].len == r->ai_addrlen && memcmp(&w[i].ss, r->ai_addr, r->ai_addrlen) == 0;
        added++;
        if (dup) continue;
        if (*nw >= SRV_MAX_LISTENERS) {
            freeaddrinfo(res);
            return ms_err_set(err, MS_ERR_LIMIT, "server.listen: more than %d addresses to bind", SRV_MAX_LISTENERS);
        }
        want_addr *x = &w[(*nw)++];
        memset(x, 0, sizeof *x);
        memcpy(&x->ss, r->ai_addr, r->ai_addrlen);
        x->len = r->ai_addrlen;
        x->what = entry;
    }
    freeaddrinfo(res);
    if (!added)
        return ms_err_set(err, MS_ERR_ARG, "server.listen \"%s\": resolves to no IPv4 or IPv6 address", entry);
    return MS_OK;
}

static void set_port(struct sockaddr_storage *ss, int port) {
    if (ss->ss_family == AF_INET) ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
}

static int bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return -1;
    return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                   : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

static void close_fds(srv *s) {
    for (int i = 0; i < s->nls; i++)
        if (s->ls[i].fd >= 0) close(s->ls[i].fd);
    s->nls = 0;
}

int srv_listen_bind(srv *s, ms_error *err) {
    const srv_config *c = &s->cfg;
    want_addr w[SRV_MAX_LISTENERS];
    int nw = 0, all = 0;
    static const char *const local[] = {"127.0.0.1"};
    const char *const *entries = c->nlisten > 0 ? c->listen : local;
    int n = c->nlisten > 0 ? c->nlisten : 1;
    for (int i = 0; i < n; i++) {
        int star = !entries[i][0] || strcmp(entries[i], "*") == 0;
        all |= star;
        if (star && n > 1)
            return ms_err_set(err, MS_ERR_ARG, "server.listen: \"%s\" (every interface) cannot be listed with other "
                              "addresses", entries[i]);
        int rc = resolve(entries[i], w, &nw, err);
        if (rc != MS_OK) return rc;
    }
    for (int tries = 0;; tries++) {
        int port = c->port;
        s->nls = 0;
        for (int i = 0; i < nw; i++) {
            set_port(&w[i].ss, port);
            errno = 0;
            int fd = bind_one((const struct sockaddr *)&w[i].ss, w[i].len, w[i].dual, w[i].what, err);
            if (fd < 0) {
                int e = errno;
                close_fds(s);
                /* port 0: the port the first socket got is taken on a later address */
                if (c->port == 0 && i > 0 && e == EADDRINUSE && tries + 1 < SRV_EPHEMERAL_TRIES) goto again;
                return err->code ? err->code : MS_ERR_IO;
            }
            s->ls[s->nls].fd = fd;
            s->ls[s->nls].s = s;
            s->ls[s->nls].polling = 0;
            s->nls++;
            if (port == 0) port = bound_port(fd);
        }
        break;
    again:;
    }
    /* What is bound, read back from the sockets. */
    s->port = bound_port(s->ls[0].fd);
    s->loopback_only = 1;
    s->bound_text[0] = '\0';
    for (int i = 0; i < s->nls; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        char at[INET6_ADDRSTRLEN + 8];
        if (getsockname(s->ls[i].fd, (struct sockaddr *)&ss, &sl) != 0) {
            ms_err_set(err, MS_ERR_IO, "server.listen: getsockname: %s", strerror(errno));
            close_fds(s);
            return MS_ERR_IO;
        }
        if (!is_loopback((const struct sockaddr *)&ss)) s->loopback_only = 0;
        addr_port_text((const struct sockaddr *)&ss, at, sizeof at);
        if (i == 0) s->bound_first = ss;
        size_t u = strlen(s->bound_text);
        snprintf(s->bound_text + u, sizeof s->bound_text - u, "%s%s", i ? "," : "",
                 w[i].dual ? (snprintf(at, sizeof at, "*:%d", s->port), at) : at);
    }
    (void)all;
    return MS_OK;
}

/* ---- the PROXY header wait ---- */

static void ppw_closed(uv_handle_t *h) { free(h->data); }

/* Leave the waiting list; fd_keep: the descriptor now belongs to someone
 * else (lws), else it is closed. */
static void ppw_end(srv *s, srv_ppw *p, int fd_keep) {
    if (p->prev) p->prev->next = p->next;
    else s->ppw_head = p->next;
    if (p->next) p->next->prev = p->prev;
    else s->ppw_tail = p->prev;
    p->prev = p->next = NULL;
    s->nppw--;
    /* Stopped first: libuv forgets the descriptor at once, so lws may
     * watch it from the adoption on (the handle itself closes later). */
    uv_poll_stop(&p->poll);
    if (!fd_keep) close(p->fd);
    p->fd = -1;
    uv_close((uv_handle_t *)&p->poll, ppw_closed);
}

static void ppw_arm(srv *s);

static void ppw_timeout(uv_timer_t *t) {
    srv *s = t->data;
    uint64_t now = uv_now(s->loop);
    while (s->ppw_head && now - s->ppw_head->since_ms >= s->cfg.handshake_timeout_ms) {
        srv_ppw *p = s->ppw_head;
        char peer[INET6_ADDRSTRLEN];
        srv_addr_text((const struct sockaddr *)&p->proxy, peer, sizeof peer);
        LOGI("proxy_header_timeout", "proxy=%s bytes=%zu msg=\"no complete PROXY header within "
             "server.handshake_timeout_ms\"", peer, p->got);
        srv_refused(s, SRV_REF_handshake_timeout);
        ppw_end(s, p, 0);
    }
    ppw_arm(s);
}

static void ppw_arm(srv *s) {
    if (!s->ppw_timer_on) return;
    if (!s->ppw_head) {
        uv_timer_stop(&s->ppw_timer);
        return;
    }
    uint64_t now = uv_now(s->loop), due = s->ppw_head->since_ms + s->cfg.handshake_timeout_ms;
    uv_timer_start(&s->ppw_timer, ppw_timeout, due > now ? due - now : 0, 0);
}

static void handoff(srv *s, int fd, const struct sockaddr_storage *peer);

static void ppw_readable(uv_poll_t *h, int status, int events) {
    (void)events;
    srv_ppw *p = h->data;
    srv *s = p->s;
    char proxy[INET6_ADDRSTRLEN];
    srv_addr_text((const struct sockaddr *)&p->proxy, proxy, sizeof proxy);
    if (status < 0) {
        ppw_end(s, p, 0);
        return;
    }
    /* Look without taking: the bytes past the header are the client's. */
    ssize_t n = recv(p->fd, p->hdr + p->got, sizeof p->hdr - p->got, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* closed or reset before its header */
        ppw_end(s, p, 0);
        return;
    }
    srv_proxy_hdr hd;
    const char *why = NULL;
    int len = srv_proxy_parse(p->hdr, p->got + (size_t)n, &hd, &why);
    if (len == SRV_PROXY_BAD) {
        LOGW("proxy_header_refused", "proxy=%s msg=\"%s\"", proxy, why);
        srv_refused(s, SRV_REF_proxy_header);
        ppw_end(s, p, 0);
        return;
    }
    /* Take what belongs to the header: all of the bytes seen while it is
     * incomplete (a header comes first, whole), else exactly its rest. */
    size_t take = len == SRV_PROXY_NEED_MORE ? (size_t)n : (size_t)len - p->got;
    uint8_t sink[SRV_PROXY_MAX];
    ssize_t r = recv(p->fd, sink, take, 0);
    if (r != (ssize_t)take) { /* the kernel gave less than it showed: not expected; refuse */
        ppw_end(s, p, 0);
        return;
    }
    p->got += take;
    if (len == SRV_PROXY_NEED_MORE) return;
    struct sockaddr_storage peer = p->proxy;
    if (hd.has_addr) {
        memset(&peer, 0, sizeof peer);
        if (hd.family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&peer;
            a->sin_family = AF_INET;
            memcpy(&a->sin_addr, hd.src, 4);
            a->sin_port = htons(hd.sport);
        } else {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&peer;
            a->sin6_family = AF_INET6;
            memcpy(&a->sin6_addr, hd.src, 16);
            a->sin6_port = htons(hd.sport);
        }
    }
    if (MS_LOG_DEBUG >= ms_log_level) {
        char client[INET6_ADDRSTRLEN];
        srv_addr_text((const struct sockaddr *)&peer, client, sizeof client);
        LOGD("proxy_header", "proxy=%s client=%s version=%d", proxy, client, hd.version);
    }
    int fd = p->fd;
    ppw_end(s, p, 1);
    handoff(s, fd, &peer);
}

static void ppw_add(srv *s, int fd, const struct sockaddr_storage *proxy) {
    /* As many waiting as pending connections may be; over that the
     * oldest waiting goes. */
    while (s->nppw >= s->cfg.max_pending && s->ppw_head) {
        srv_refused(s, SRV_REF_pending_evicted);
        ppw_end(s, s->ppw_head, 0);
    }
    srv_ppw *p = calloc(1, sizeof *p);
    if (!p || uv_poll_init_socket(s->loop, &p->poll, fd) != 0) {
        free(p);
        close(fd);
        return;
    }
    p->s = s;
    p->fd = fd;
    p->proxy = *proxy;
    p->since_ms = uv_now(s->loop);
    p->poll.data = p;
    p->prev = s->ppw_tail;
    if (s->ppw_tail) s->ppw_tail->next = p;
    else s->ppw_head = p;
    s->ppw_tail = p;
    s->nppw++;
    uv_poll_start(&p->poll, UV_READABLE, ppw_readable);
    if (p == s->ppw_head) ppw_arm(s);
}

/* ---- accepting ---- */

/* The connection to lws, after the checks at accept (rate, address table)
 * on the client's address. The descriptor is lws's from the call on (it
 * closes it on failure). */
static void handoff(srv *s, int fd, const struct sockaddr_storage *peer) {
    if (s->stopping || srv_lim_accept(s, (const struct sockaddr *)peer)) {
        close(fd);
        return;
    }
    lws_sock_file_fd_type d;
    d.sockfd = fd;
    int type = LWS_ADOPT_SOCKET | LWS_ADOPT_HTTP | (s->tls ? LWS_ADOPT_ALLOW_SSL : 0);
    s->adopting = peer;
    lws_adopt_descriptor_vhost(s->vh, (lws_adoption_type)type, d, NULL, NULL);
    s->adopting = NULL;
}

static void on_listen(uv_poll_t *h, int status, int events);

static int poll_listener(srv_listener *l) { return uv_poll_start(&l->poll, UV_READABLE, on_listen); }

static void accept_resume(uv_timer_t *t) {
    srv *s = t->data;
    for (int i = 0; i < s->nls; i++)
        if (s->ls[i].polling && !s->stopping) poll_listener(&s->ls[i]);
}

static void accept_pause(srv *s, int e) {
    uint64_t now = uv_now(s->loop);
    if (now - s->accept_warned_ms >= 1000 || !s->accept_warned_ms) {
        s->accept_warned_ms = now ? now : 1;
        LOGW("accept_paused", "errno=%d msg=\"%s: accepting paused for %d ms\"", e, strerror(e), SRV_ACCEPT_PAUSE_MS);
    }
    for (int i = 0; i < s->nls; i++)
        if (s->ls[i].polling) uv_poll_stop(&s->ls[i].poll);
    uv_timer_start(&s->accept_timer, accept_resume, SRV_ACCEPT_PAUSE_MS, 0);
}

static void on_listen(uv_poll_t *h, int status, int events) {
    (void)events;
    srv_listener *l = h->data;
    srv *s = l->s;
    if (status < 0 || s->stopping) return;
    for (int k = 0; k < SRV_ACCEPT_BATCH; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK) return;
            if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM) continue;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) accept_pause(s, e);
            else LOGW("accept_failed", "errno=%d msg=\"%s\"", e, strerror(e));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (trusted_proxy(s, (const struct sockaddr *)&ss)) ppw_add(s, fd, &ss);
        else handoff(s, fd, &ss);
    }
}

int srv_listen_start(srv *s) {
    uv_timer_init(s->loop, &s->accept_timer);
    s->accept_timer.data = s;
    uv_timer_init(s->loop, &s->ppw_timer);
    s->ppw_timer.data = s;
    s->ppw_timer_on = 1;
    for (int i = 0; i < s->nls; i++) {
        srv_listener *l = &s->ls[i];
        if (uv_poll_init_socket(s->loop, &l->poll, l->fd) != 0) return MS_ERR_IO;
        l->poll.data = l;
        l->polling = 1;
        if (poll_listener(l) != 0) return MS_ERR_IO;
    }
    return MS_OK;
}

static void handle_closed(uv_handle_t *h) { (void)h; }

void srv_listen_close(srv *s) {
    while (s->ppw_head) ppw_end(s, s->ppw_head, 0);
    for (int i = 0; i < s->nls; i++) {
        srv_listener *l = &s->ls[i];
        if (l->polling) {
            uv_poll_stop(&l->poll);
            uv_close((uv_handle_t *)&l->poll, handle_closed);
            l->polling = 0;
        }
        if (l->fd >= 0) close(l->fd);
        l->fd = -1;
    }
    if (s->ppw_timer_on) {
        s->ppw_timer_on = 0;
        uv_close((uv_handle_t *)&s->ppw_timer, handle_closed);
        uv_close((uv_handle_t *)&s->accept_timer, handle_closed);
    }
}

void srv_listen_free_fds(srv *s) { close_fds(s); }
