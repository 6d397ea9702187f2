/* srv_wire.c - the wire guard: the checks libwebsockets 4.1 leaves out of
 * its frame parser, made on the bytes it reads.
 *
 * libwebsockets 4.1.6 parses the MASK bit of every client frame
 * (lib/roles/ws/ops-ws.c, this_frame_masked) and neither checks it nor
 * tells the callback, so an unmasked client frame would be accepted (RFC
 * 6455 5.1: the server MUST close the connection). The only place the bit
 * can still be seen is the byte stream itself, and libwebsockets reads it
 * with recv(2) (plain connections) and SSL_read (TLS), both called through
 * the dynamic linker. This file defines both in the program: each calls
 * the real function, then, for a connection srv tracks, feeds what was read
 * to that connection's srv_wg (srv_rx.h: it follows the headers to the
 * upgrade request's end, then every frame header). Bytes are never changed
 * or held back: libwebsockets sees what it would have seen. On a frame
 * without the MASK bit the connection is closed with 1002 (srv_conn_close,
 * as every close srv makes: our close frame, then the drop) and counted
 * (SRV_REF_unmasked); what the client sent in the same read, before the
 * bad frame, is dropped with the rest (the close drops input at once).
 *
 * Proof that the guard sees the stream: at the 101, the guard of the
 * connection must have found the upgrade request's end. If it did not (a
 * libwebsockets that reads by other means), the guard of that connection is
 * switched off and a warning logged once: a guard that lost track could
 * misjudge a good client. tests/integration/test_srv_defects.py checks
 * the close on plain and TLS connections, before and after the 101.
 *
 * Calls from other threads, and for descriptors srv does not track, go
 * straight through: one mutex-guarded table lookup by descriptor. The
 * table is indexed by descriptor (grown as needed); entries are attached
 * at a connection's creation and detached at its destruction, both on the
 * loop thread, the only thread that reads those descriptors.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#undef _FORTIFY_SOURCE /* recv is defined here: no fortified inline of it */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "srv_int.h"
#include "srv_proxy.h"

/* Bytes of the stream's start kept to recognise a PROXY header. */
#define SRV_WIRE_HEAD 6

struct srv_wire {
    srv *s;
    struct lws *wsi;
    srv_conn *conn;                /* from ESTABLISHED to CLOSED */
    int fd;
    int off;                       /* the guard lost track: no verdicts */
    int told;                      /* the violation was acted on */
    /* The stream's first bytes: a PROXY header where none is read (the
     * peer is not in server.proxy_protocol_from) is refused by srv_req.c;
     * libwebsockets itself would skip the line and serve the request. */
    uint8_t head[SRV_WIRE_HEAD];
    int nhead;
    int proxy_hdr;                 /* 1 seen, 2 seen and refused by srv_req.c */
    srv_wg g;
};

int srv_wire_proxy_header(srv_wire *w) {
    if (!w || !w->proxy_hdr) return 0;
    w->proxy_hdr = 2; /* told: srv_req.c answers 400 and counts it */
    return 1;
}

static pthread_mutex_t wire_mu = PTHREAD_MUTEX_INITIALIZER;
static srv_wire **wire_tab;        /* by descriptor */
static int wire_cap;

static const char wire_reason[] = "client frames must be masked (RFC 6455 5.1)";

int srv_wire_attach(srv *s, struct lws *wsi, srv_wire **out) {
    *out = NULL;
    int fd = lws_get_socket_fd(wsi);
    if (fd < 0) return 0;
    srv_wire *w = calloc(1, sizeof *w);
    if (!w) return -1;
    w->s = s;
    w->wsi = wsi;
    w->fd = fd;
    pthread_mutex_lock(&wire_mu);
    if (fd >= wire_cap) {
        int nc = wire_cap ? wire_cap : 256;
        while (nc <= fd) nc *= 2;
        srv_wire **n = realloc(wire_tab, (size_t)nc * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&wire_mu);
            free(w);
            return -1;
        }
        memset(n + wire_cap, 0, (size_t)(nc - wire_cap) * sizeof *n);
        wire_tab = n;
        wire_cap = nc;
    }
    /* A descriptor is reused only after its connection was destroyed (its
     * entry detached); an entry left over would be replaced. */
    srv_wire *old = wire_tab[fd];
    wire_tab[fd] = w;
    pthread_mutex_unlock(&wire_mu);
    if (old) old->fd = -1; /* its owner's detach frees it */
    *out = w;
    return 0;
}

void srv_wire_detach(srv_wire *w) {
    if (!w) return;
    if (w->proxy_hdr == 1) {
        /* libwebsockets closed it before a request came (a v2 header is no
         * HTTP at all): counted and said here */
        LOGI("proxy_header_untrusted", "msg=\"a PROXY protocol header from an address not in "
             "server.proxy_protocol_from: closed\"");
        srv_refused(w->s, SRV_REF_proxy_header);
    }
    pthread_mutex_lock(&wire_mu);
    if (w->fd >= 0 && w->fd < wire_cap && wire_tab[w->fd] == w) wire_tab[w->fd] = NULL;
    pthread_mutex_unlock(&wire_mu);
    free(w);
}

/* Close the connection with 1002, once. */
static void wire_act(srv_wire *w) {
    if (w->told || !w->conn) return;
    w->told = 1;
    LOGW("ws_unmasked", "peer=%s frames=%llu msg=\"a client frame without a mask: closed 1002\"",
         srv_conn_peer(w->conn), (unsigned long long)w->g.frames);
    srv_refused(w->s, SRV_REF_unmasked);
    srv_conn_close(w->conn, PROTO_CLOSE_PROTOCOL_ERROR, wire_reason);
}

int srv_wire_established(srv_wire *w, srv_conn *c) {
    if (!w) return 0;
    w->conn = c;
    if (w->g.state == SRV_WG_HTTP) {
        /* The guard did not see the request end: it cannot follow the
         * frames. */
        static int warned;
        if (!warned) {
            warned = 1;
            LOGW("ws_guard", "msg=\"the unmasked-frame check did not see the upgrade request: off for "
                 "this connection (libwebsockets does not read with recv/SSL_read?)\"");
        }
        w->off = 1;
        return 0;
    }
    if (w->g.state == SRV_WG_UNMASKED) {
        wire_act(w);
        return 1;
    }
    return 0;
}

void srv_wire_closed(srv_wire *w) {
    if (w) w->conn = NULL;
}

/* Feed n bytes read from fd to its guard, if it has one; on a violation of
 * an established connection, close it. */
static void wire_saw(int fd, const void *buf, size_t n) {
    if (fd < 0 || n == 0) return;
    pthread_mutex_lock(&wire_mu);
    srv_wire *w = fd < wire_cap ? wire_tab[fd] : NULL;
    int act = 0;
    if (w && w->nhead < SRV_WIRE_HEAD) {
        size_t k = SRV_WIRE_HEAD - (size_t)w->nhead;
        if (k > n) k = n;
        memcpy(w->head + w->nhead, buf, k);
        w->nhead += (int)k;
        /* "PROXY " (v1) or six bytes of v2's signature: no HTTP request starts so */
        if (w->nhead >= SRV_WIRE_HEAD) w->proxy_hdr = srv_proxy_looks_like(w->head, (size_t)w->nhead);
    }
    if (w && !w->off && w->g.state != SRV_WG_UNMASKED) {
        srv_wg_feed(&w->g, buf, n);
        act = w->g.state == SRV_WG_UNMASKED;
    }
    pthread_mutex_unlock(&wire_mu);
    /* The entry is the loop thread's (only libwebsockets reads tracked
     * descriptors, on the loop thread): safe to use unlocked here. */
    if (act) wire_act(w);
}

ssize_t recv(int fd, void *buf, size_t len, int flags) {
    ssize_t n = recvfrom(fd, buf, len, flags, NULL, NULL);
    if (n > 0 && !(flags & MSG_PEEK)) wire_saw(fd, buf, (size_t)n);
    return n;
}

typedef int (*ssl_read_fn)(SSL *, void *, int);
static ssl_read_fn real_ssl_read;
static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;

static void find_ssl_read(void) {
    void *f = dlsym(RTLD_NEXT, "SSL_read");
    memcpy(&real_ssl_read, &f, sizeof f); /* object to function pointer, without a cast ISO C forbids */
}

int SSL_read(SSL *ssl, void *buf, int num) {
    pthread_once(&ssl_once, find_ssl_read);
    if (!real_ssl_read) {
        errno = ENOSYS;
        return -1;
    }
    int n = real_ssl_read(ssl, buf, num);
    if (n > 0) wire_saw(SSL_get_fd(ssl), buf, (size_t)n);
    return n;
}
