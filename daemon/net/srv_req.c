/* srv_req.c - the front end's judgement of complete requests and the HTTP
 * answers it writes itself (srv_int.h): the method and path of every
 * request, the WebSocket handshake checks and ws_admit before the 101, and
 * the request of a dynamic path handed to http_get. srv.c's head comment
 * says which libwebsockets callback brings each. Loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "srv_int.h"

const char *const srv_dynamic_paths[SRV_NDYNAMIC + 1] = {"/healthz", "/metrics", "/api/personas", NULL};

static int path_is_dynamic(const char *p) {
    for (int i = 0; srv_dynamic_paths[i]; i++)
        if (strcmp(p, srv_dynamic_paths[i]) == 0) return 1;
    return 0;
}

/* The reason phrase of the statuses srv answers with itself. */
static const char *reason_phrase(unsigned status) {
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* "HTTP/1.1 NNN Reason\r\n" at *p. libwebsockets 4.1 takes the version
 * from the request, which it records only after the upgrade checks
 * (lib/roles/http/server/server.c): a refused upgrade would be answered
 * "HTTP/1.0", which HTTP/1.1 WebSocket clients (the `websockets` library)
 * report as an invalid answer instead of its status. Every request srv
 * answers is HTTP/1.1 or an upgrade (1.1 by definition); RFC 9110 6.2: a
 * server sends its own version. -1 when it does not fit. */
static int status_line(unsigned status, uint8_t **p, const uint8_t *end) {
    int n = snprintf((char *)*p, (size_t)(end - *p), "HTTP/1.1 %u %s\r\n", status, reason_phrase(status));
    if (n < 0 || n >= end - *p) return -1;
    *p += n;
    return 0;
}

/* Answer status with a one-line text/plain body and Connection: close,
 * written now (lws keeps what the socket does not take and flushes it
 * before the close). extra: one more "name:" / value header, or NULL; a
 * 401 also gets the WWW-Authenticate challenge. The caller then closes
 * (returns nonzero from the callback). */
static void answer(struct lws *wsi, unsigned status, const char *extra, const char *extra_val, const char *body) {
    uint8_t buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    char line[320], len[16];
    int n = snprintf(line, sizeof line, "%s\n", body);
    if (n < 0 || (size_t)n >= sizeof line) n = (int)sizeof line - 1, line[n - 1] = '\n';
    snprintf(len, sizeof len, "%d", n);
    const char *names[] = {"content-type:", "content-length:", "connection:", "cache-control:",
                           status == 401 ? "www-authenticate:" : extra, status == 401 ? extra : NULL};
    const char *vals[] = {"text/plain; charset=utf-8", len, "close", "no-store",
                          status == 401 ? SRV_WWW_AUTHENTICATE : extra_val, extra_val};
    if (status_line(status, &p, end)) return;
    for (size_t i = 0; i < sizeof names / sizeof *names && names[i]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)names[i], (const unsigned char *)vals[i],
                                        (int)strlen(vals[i]), &p, end))
            return;
    if (lws_finalize_http_header(wsi, &p, end) || end - p < n) return;
    memcpy(p, line, (size_t)n);
    p += n;
    lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS);
}

/* http_get's reply: the headers now, the body at HTTP_WRITEABLE. */
static int http_reply(struct lws *wsi, srv_conn *c, srv_http_reply *r) {
    uint8_t hdr[LWS_PRE + 512], *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof hdr - 1;
    if (lws_add_http_common_headers(wsi, (unsigned)r->status, r->content_type, r->body_len, &p, end) ||
        lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:", (const unsigned char *)"no-store", 8,
                                    &p, end) ||
        (r->status == 401 &&
         lws_add_http_header_by_name(wsi, (const unsigned char *)"www-authenticate:",
                                     (const unsigned char *)SRV_WWW_AUTHENTICATE,
                                     (int)strlen(SRV_WWW_AUTHENTICATE), &p, end)) ||
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

void srv_free_buffers(srv_conn *c) {
    srv_rx_free(&c->rx);
    free(c->http_body);
    c->http_body = NULL;
}

int srv_req_ws_endpoint(struct lws *wsi) {
    static const char *const paths[SRV_EP__COUNT] = {[SRV_EP_CHAT] = SRV_PATH_CHAT, [SRV_EP_REALTIME] = SRV_PATH_REALTIME};
    char path[32];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    if (n <= 0 || (size_t)n >= sizeof path || lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0) return -1;
    for (int i = 0; i < SRV_EP__COUNT; i++)
        if (strcmp(path, paths[i]) == 0) return i;
    return -1;
}

int srv_req_path_len(struct lws *wsi) {
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    return n > 0 ? n : -1;
}

int srv_refuse(srv *s, struct lws *wsi, srv_refusal why, unsigned status, const char *extra, const char *val,
               const char *body) {
    srv_refused(s, why);
    LOGI("http_refused", "peer=%s status=%u msg=\"%s\"", srv_lim_peer(wsi), status, body);
    answer(wsi, status, extra, val, body);
    return -1;
}

/* Pending -> active for a complete request, or the 503 / 429 answer. */
static int admit_request(srv *s, struct lws *wsi, int count) {
    switch (srv_lim_admit(s, wsi, count)) {
    case 0: return 0;
    case SRV_REF_busy:
        return srv_refuse(s, wsi, SRV_REF_busy, 503, "retry-after:", "5", "server busy: too many connections; retry later");
    case SRV_REF_per_ip:
        return srv_refuse(s, wsi, SRV_REF_per_ip, 429, "retry-after:", "5",
                          "too many connections from your address; close some and retry");
    default: return -1; /* being closed */
    }
}

/* The request came after a PROXY header from an address not trusted to
 * send one (libwebsockets skips such a line): refused, not served. */
static int untrusted_proxy_header(struct lws *wsi) {
    srv_track *t = lws_get_opaque_user_data(wsi);
    return t && srv_wire_proxy_header(t->wire);
}

static int refuse_proxy_header(srv *s, struct lws *wsi) {
    return srv_refuse(s, wsi, SRV_REF_proxy_header, 400, NULL, NULL,
                      "bad request: a PROXY protocol header from an address not in server.proxy_protocol_from");
}

int srv_req_http(srv *s, struct lws *wsi) {
    char path[32];
    int n = srv_req_path_len(wsi);
    int dynamic = n > 0 && (size_t)n < sizeof path && lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) > 0 &&
                  path_is_dynamic(path);
    if (admit_request(s, wsi, !dynamic)) return -1;
    if (untrusted_proxy_header(wsi)) return refuse_proxy_header(s, wsi);
    if (n < 0)
        return srv_refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: only GET is served");
    if ((size_t)n > s->max_path) return srv_refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long");
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

int srv_req_args(srv *s, struct lws *wsi, const char **args) {
    char *argbuf = s->argbuf;
    size_t cap = sizeof s->argbuf, used = 0;
    int nargs = 0;
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

int srv_req_upgrade(srv *s, struct lws *wsi, const char *upgrade) {
    char host[SRV_HDR_SHORT], origin[SRV_HDR_SHORT], conn[SRV_HDR_SHORT], ver[16], key[64], proto[SRV_HDR_SHORT];
    char authz[SRV_HDR_LONG], apikey[SRV_HDR_LONG], path[64];
    if (admit_request(s, wsi, 1)) return -1;
    if (untrusted_proxy_header(wsi)) return refuse_proxy_header(s, wsi);
    int n = srv_req_path_len(wsi);
    if (n < 0) return srv_refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: upgrades are GET");
    if ((size_t)n >= sizeof path || lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0 ||
        srv_req_ws_endpoint(wsi) < 0)
        return (size_t)n > s->max_path ? srv_refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long")
                                       : srv_refuse(s, wsi, SRV_REF_bad_request, 404, NULL, NULL,
                                                    "not found: WebSocket sessions are at " SRV_PATH_CHAT " and "
                                                    SRV_PATH_REALTIME);
    if (!upgrade || strcasecmp(upgrade, "websocket") != 0)
        return srv_refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: only WebSocket upgrades are served");
    if (hdr(wsi, WSI_TOKEN_HOST, host, sizeof host) || hdr(wsi, WSI_TOKEN_ORIGIN, origin, sizeof origin) ||
        hdr(wsi, WSI_TOKEN_CONNECTION, conn, sizeof conn) || hdr(wsi, WSI_TOKEN_VERSION, ver, sizeof ver) ||
        hdr(wsi, WSI_TOKEN_KEY, key, sizeof key) || hdr(wsi, WSI_TOKEN_PROTOCOL, proto, sizeof proto) ||
        hdr(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, authz, sizeof authz) ||
        hdr_custom(wsi, "kyutai-api-key:", apikey, sizeof apikey))
        return srv_refuse(s, wsi, SRV_REF_bad_request, 431, NULL, NULL, "request header fields too large");
    if (!host[0]) return srv_refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: no Host header");
    if (!has_token(conn, "upgrade"))
        return srv_refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL, "bad request: Connection must name upgrade");
    if (strcmp(ver, "13") != 0)
        return srv_refuse(s, wsi, SRV_REF_bad_request, 426, "sec-websocket-version:", "13",
                          "upgrade required: only WebSocket version 13 is spoken");
    if (!ws_key_ok(key))
        return srv_refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL,
                          "bad request: Sec-WebSocket-Key must be the base64 of 16 bytes");
    if (proto[0])
        return srv_refuse(s, wsi, SRV_REF_bad_request, 400, NULL, NULL,
                          "bad request: no WebSocket subprotocol is offered; connect without Sec-WebSocket-Protocol");
    if (!origin_allowed(s, origin))
        return srv_refuse(s, wsi, SRV_REF_bad_request, 403, NULL, NULL, "forbidden: origin not allowed");
    srv_lim_principal(wsi, 1, NULL);
    if (!s->h.ws_admit) return 0;
    const char *args[SRV_MAX_ARGS];
    int nargs = srv_req_args(s, wsi, args);
    srv_admit_req r = {.peer = srv_lim_peer(wsi), .path = path, .host = host, .origin = origin, .authorization = authz,
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
    srv_lim_principal(wsi, 1, principal);
    return 0;
}

int srv_req_dynamic(srv *s, struct lws *wsi, srv_conn *c) {
    char uri[SRV_MAX_PATH + 1];
    int n = srv_req_path_len(wsi);
    if (n < 0)
        return srv_refuse(s, wsi, SRV_REF_bad_request, 405, "allow:", "GET", "method not allowed: only GET is served");
    if ((size_t)n > s->max_path || lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0)
        return srv_refuse(s, wsi, SRV_REF_bad_request, 414, NULL, NULL, "URI too long");
    memset(c, 0, sizeof *c);
    c->s = s;
    if (path_is_dynamic(uri) && s->h.http_get) {
        /* The headers an access check needs, bounded as for upgrades. */
        char authz[SRV_HDR_LONG], apikey[SRV_HDR_LONG];
        if (hdr(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, authz, sizeof authz) ||
            hdr_custom(wsi, "kyutai-api-key:", apikey, sizeof apikey))
            return srv_refuse(s, wsi, SRV_REF_bad_request, 431, NULL, NULL, "request header fields too large");
        const char *args[SRV_MAX_ARGS];
        int nargs = srv_req_args(s, wsi, args);
        srv_http_req q = {.path = uri, .peer = srv_lim_peer(wsi), .authorization = authz, .api_key = apikey, .args = args,
                          .nargs = nargs, .tls = s->tls};
        srv_http_reply r = {.req = &q};
        if (s->h.http_get(s->ud, uri, &r)) return http_reply(wsi, c, &r);
    }
    answer(wsi, 404, NULL, NULL, "not found");
    return -1;
}
