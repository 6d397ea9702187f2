/* srv_echo.c - the HTTP/WebSocket front end (daemon/net/srv.c) alone, with echo
 * handlers, for the integration tests of routing, reassembly, limits and a
 * clean shutdown. Prints "port=N" when listening; SIGTERM shuts down and the
 * exit status says whether the loop closed cleanly (0) or not (3); SIGHUP
 * reloads the TLS pair from the same paths.
 *   srv_echo [max_message_bytes [name=value ...]]
 * names: the srv_config limits (max_connections, max_connections_per_ip,
 * max_pending, max_pending_per_ip, handshake_timeout_ms, rate, burst) and
 * tls_cert, tls_key, static_dir.
 * Messages: echoed back; a message "close" closes with status 4000.
 * /healthz: {"ready":true,"sessions":N,"refused":{"rate":N,...}} (srv's
 * refusal counts). ws_admit: a kyutai-api-key header "deny" is refused
 * with 401, a query argument deny=1 with 403; "p" sets a principal, and
 * the first message then starts with "principal\n". */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "srv.h"

typedef struct echo_sess {
    srv_conn *c;
    uint8_t *out; /* srv_pre headroom + payload */
    size_t out_len;
    struct echo_sess *next;
} echo_sess;

static uv_loop_t loop;
static uv_signal_t sigterm, sighup;
static srv *server;
static int nopen;
static unsigned long refusals[SRV_REF__COUNT];
static const char *cert_path, *key_path;

static void on_refuse(int why) {
    if (why >= 0 && why < SRV_REF__COUNT) refusals[why]++;
}

static int ws_admit(void *ud, const srv_admit_req *r, void **principal, char *why, size_t whylen) {
    (void)ud;
    if (strcmp(r->api_key, "deny") == 0) {
        snprintf(why, whylen, "denied by srv_echo");
        return 401;
    }
    for (int i = 0; i < r->nargs; i++)
        if (strcmp(r->args[i], "deny=1") == 0) {
            snprintf(why, whylen, "denied by srv_echo: query");
            return 403;
        }
    if (strcmp(r->api_key, "p") == 0) *principal = &nopen;
    return 0;
}

static int http_get(void *ud, const char *path, srv_http_reply *r) {
    (void)ud;
    if (strcmp(path, "/healthz") != 0) return 0;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"ready\":true,\"sessions\":%d,\"refused\":{", nopen);
    static const char *const names[] = {
#define NAME(nm, w) #nm,
        SRV_REFUSALS(NAME)
#undef NAME
    };
    for (int i = 0; i < SRV_REF__COUNT; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s\"%s\":%lu", i ? "," : "", names[i], refusals[i]);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "}}");
    r->status = 200;
    r->content_type = "application/json";
    r->body = strdup(buf);
    r->body_len = (size_t)n;
    return 1;
}

static void *ws_open(void *ud, srv_conn *c, const char *const *args, int nargs) {
    (void)ud;
    echo_sess *s = calloc(1, sizeof *s);
    s->c = c;
    nopen++;
    if (nargs < 0) nargs = 0; /* over the limits: echo nothing */
    /* First message: the decoded query arguments, "\n"-joined. */
    const char *pr = srv_conn_principal(c) ? "principal\n" : "";
    size_t len = strlen(pr);
    for (int i = 0; i < nargs; i++) len += strlen(args[i]) + 1;
    s->out = malloc(srv_pre + len + 1);
    strcpy((char *)s->out + srv_pre, pr);
    for (int i = 0; i < nargs; i++) {
        strcat((char *)s->out + srv_pre, args[i]);
        strcat((char *)s->out + srv_pre, "\n");
    }
    s->out_len = len;
    srv_conn_writable(c);
    return s;
}

static void ws_message(void *ud, void *sp, const uint8_t *data, size_t len) {
    (void)ud;
    echo_sess *s = sp;
    if (len == 5 && memcmp(data, "close", 5) == 0) { srv_conn_close(s->c, 4000, "bye"); return; }
    if (s->out) return; /* one in flight; drop (test sends one at a time) */
    s->out = malloc(srv_pre + len + 1);
    memcpy(s->out + srv_pre, data, len);
    s->out_len = len;
    srv_conn_writable(s->c);
}

static void ws_oversize(void *ud, void *sp, size_t n) {
    (void)ud;
    echo_sess *s = sp;
    char why[64];
    snprintf(why, sizeof why, "message too big: %zu bytes", n);
    srv_conn_close(s->c, 1009, why);
}

static void ws_writable(void *ud, void *sp) {
    (void)ud;
    echo_sess *s = sp;
    if (!s->out) return;
    srv_conn_send(s->c, s->out, s->out_len);
    free(s->out);
    s->out = NULL;
}

static void ws_closed(void *ud, void *sp) {
    (void)ud;
    echo_sess *s = sp;
    free(s->out);
    free(s);
    nopen--;
}

static void srv_done(void *ud) {
    (void)ud;
    uv_close((uv_handle_t *)&sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int sig) {
    (void)sig;
    uv_signal_stop(h);
    uv_close((uv_handle_t *)&sighup, NULL);
    srv_shutdown(server, srv_done);
}

static void on_hup(uv_signal_t *h, int sig) {
    (void)h;
    (void)sig;
    ms_error e = {0};
    if (srv_reload_tls(server, cert_path, key_path, &e) != MS_OK) fprintf(stderr, "reload_tls: %s\n", e.msg);
    else fprintf(stderr, "reload_tls: ok\n");
}

int main(int argc, char **argv) {
    static const srv_handlers h = {.http_get = http_get, .ws_open = ws_open, .ws_message = ws_message,
                                   .ws_oversize = ws_oversize, .ws_writable = ws_writable, .ws_closed = ws_closed,
                                   .ws_admit = ws_admit};
    static const char *const listen_local[] = {"127.0.0.1"};
    srv_config cfg = {.listen = listen_local, .nlisten = 1, .port = 0, .max_message_bytes = argc > 1 ? (size_t)atol(argv[1]) : 65536,
                      .max_header_bytes = 16384, .max_connections = 32, .send_buffer_bytes = 0,
                      .on_refuse = on_refuse};
    for (int i = 2; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq) { fprintf(stderr, "srv_echo: %s: name=value expected\n", argv[i]); return 2; }
        size_t nl = (size_t)(eq - argv[i]);
        const char *v = eq + 1;
#define IS(nm) (nl == strlen(nm) && strncmp(argv[i], nm, nl) == 0)
        if (IS("max_connections")) cfg.max_connections = (unsigned)atol(v);
        else if (IS("max_connections_per_ip")) cfg.max_connections_per_ip = (unsigned)atol(v);
        else if (IS("max_pending")) cfg.max_pending = (unsigned)atol(v);
        else if (IS("max_pending_per_ip")) cfg.max_pending_per_ip = (unsigned)atol(v);
        else if (IS("handshake_timeout_ms")) cfg.handshake_timeout_ms = (unsigned)atol(v);
        else if (IS("rate")) cfg.conn_rate_per_ip = atof(v);
        else if (IS("burst")) cfg.conn_burst_per_ip = (unsigned)atol(v);
        else if (IS("tls_cert")) cfg.tls_cert = cert_path = v;
        else if (IS("tls_key")) cfg.tls_key = key_path = v;
        else if (IS("static_dir")) cfg.static_dir = v;
        else { fprintf(stderr, "srv_echo: unknown option %s\n", argv[i]); return 2; }
#undef IS
    }
    uv_loop_init(&loop);
    uv_signal_init(&loop, &sigterm);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_init(&loop, &sighup);
    uv_signal_start(&sighup, on_hup, SIGHUP);
    ms_error err = {0};
    server = srv_create(&loop, &cfg, &h, NULL, &err);
    if (!server) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("port=%d\n", srv_port(server));
    fflush(stdout);
    uv_run(&loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&loop);
    fprintf(stderr, "loop_close=%d\n", rc);
    return rc == 0 ? 0 : 3;
}
