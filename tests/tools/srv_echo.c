/* srv_echo.c - the HTTP/WebSocket front end (daemon/srv.c) alone, with echo
 * handlers, for the integration tests of routing, reassembly, limits and a
 * clean shutdown. Prints "port=N" when listening; SIGTERM shuts down and the
 * exit status says whether the loop closed cleanly (0) or not (3).
 *   srv_echo [max_message_bytes]
 * Messages: echoed back; a message "close" closes with status 4000. */
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
static uv_signal_t sigterm;
static srv *server;
static int nopen;

static int http_get(void *ud, const char *path, srv_http_reply *r) {
    (void)ud;
    if (strcmp(path, "/healthz") != 0) return 0;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "{\"ready\":true,\"sessions\":%d}", nopen);
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
    size_t len = 0;
    for (int i = 0; i < nargs; i++) len += strlen(args[i]) + 1;
    s->out = malloc(srv_pre + len + 1);
    s->out[srv_pre] = 0;
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
    (void)ud; (void)n;
    echo_sess *s = sp;
    srv_conn_close(s->c, 1009, "message too big");
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
    srv_shutdown(server, srv_done);
}

int main(int argc, char **argv) {
    static const srv_handlers h = {http_get, ws_open, ws_message, ws_oversize, ws_writable, ws_closed, NULL};
    srv_config cfg = {.listen = "127.0.0.1", .port = 0, .max_message_bytes = argc > 1 ? (size_t)atol(argv[1]) : 65536,
                      .max_header_bytes = 16384, .max_connections = 32, .send_buffer_bytes = 0};
    uv_loop_init(&loop);
    uv_signal_init(&loop, &sigterm);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
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
