/* srv_conn.c - the connection calls of srv.h (send, close, deadlines, the
 * peer) on one WebSocket connection, and the wait for the peer's close
 * reply that the libwebsockets callback (srv.c) also sets. They call into
 * libwebsockets only, never back into srv.c, so that the wire guard
 * (srv_wire.c) may close a connection too. Loop thread.
 */
#include <string.h>

#include "srv_int.h"

/* Seconds to wait for the peer's reply to our close frame (less when a
 * drop deadline comes sooner). */
#define SRV_CLOSE_ACK_S 2

/* Seconds to wait for the peer's close reply: SRV_CLOSE_ACK_S, or what is
 * left before the drop deadline (lws's timeouts count whole seconds; at
 * least 1). */
int srv_conn_close_ack_s(const srv_conn *c) {
    if (!c->drop_at_ms) return SRV_CLOSE_ACK_S;
    uint64_t now = uv_now(c->s->loop);
    int left = c->drop_at_ms > now + 1000 ? (int)((c->drop_at_ms - now) / 1000) : 1;
    return left < SRV_CLOSE_ACK_S ? left : SRV_CLOSE_ACK_S;
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

int srv_conn_send_text(srv_conn *c, uint8_t *buf, size_t len) {
    if (c->failed || !c->wsi) return -1;
    int n = lws_write(c->wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT);
    if (n < (int)len) {
        c->failed = 1;
        return -1;
    }
    return 0;
}

int srv_conn_endpoint(const srv_conn *c) { return c->endpoint; }

int srv_conn_header(srv_conn *c, const char *name, char *buf, int len) {
    buf[0] = '\0';
    if (!c->wsi) return 0;
    int n = lws_hdr_custom_length(c->wsi, name, (int)strlen(name));
    if (n <= 0) return 0;
    if (n >= len) return -1;
    return lws_hdr_custom_copy(c->wsi, buf, len, name, (int)strlen(name)) < 0 ? -1 : 0;
}

void srv_conn_drop_after(srv_conn *c, int secs) {
    if (!c->wsi || secs <= 0) return;
    uint64_t at = uv_now(c->s->loop) + (uint64_t)secs * 1000;
    if (c->drop_at_ms && c->drop_at_ms <= at) return;
    c->drop_at_ms = at;
    /* One lws timeout per connection: the wait for the close reply, once
     * our close frame is out, is cut to the deadline as well. A timeout
     * closes the socket at once, without flushing (lws's "violent death"). */
    if (c->close_sent) lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_ACK, srv_conn_close_ack_s(c));
    else lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, secs);
}

void srv_conn_close(srv_conn *c, int status, const char *reason) {
    if (c->closing || !c->wsi) return; /* !wsi: already closed (ws_closed was called) */
    c->closing = 1;
    c->close_status = status;
    proto_msg_close_reason(c->close_reason, reason ? reason : "");
    lws_callback_on_writable(c->wsi);
}

const char *srv_conn_peer(const srv_conn *c) { return c->peer; }

void *srv_conn_principal(const srv_conn *c) { return c->principal; }
