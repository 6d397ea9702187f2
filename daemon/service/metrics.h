/* metrics.h - process-wide counters, gauges and the step-latency histogram,
 * rendered in the Prometheus text format at /metrics (names prefixed
 * moshid_). Updated from the loop thread and the engine thread with relaxed
 * atomics; rendering reads a consistent-enough view (each value atomically).
 */
#ifndef MOSHID_METRICS_H
#define MOSHID_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* X(name, help): monotonically increasing counters. */
#define MET_COUNTERS(X)                                                            \
    X(sessions_started_total, "Sessions that reached the handshake")              \
    X(sessions_rejected_total, "Connections refused (server busy, overloaded or not ready)") \
    X(frames_stepped_total, "Session frames stepped by the engine")               \
    X(late_frames_total, "Session frames stepped later than one frame period")    \
    X(engine_steps_total, "Batched engine steps")                                 \
    X(bytes_in_total, "WebSocket payload bytes received")                         \
    X(bytes_out_total, "WebSocket payload bytes sent")                            \
    X(persona_restores_total, "Sessions started from a persona snapshot (a restore, no priming)") \
    X(persona_primes_total, "Persona primes finished (configured and on demand)")  \
    X(persona_prime_failures_total, "Persona primes that failed (unreadable voice, engine error)") \
    X(persona_cache_hits_total, "Persona requests served from a cached snapshot")   \
    X(persona_cache_misses_total, "On-demand persona requests not in the cache (primed, or joined a prime)") \
    X(persona_cache_evictions_total, "Persona snapshots evicted under personas.cache_bytes") \
    X(connections_refused_rate_total, "Connections closed at accept: over server.conn_rate_per_ip") \
    X(connections_refused_ip_table_total, "Connections closed at accept: the table of client addresses was full") \
    X(handshake_timeouts_total, "Connections closed without a complete request within server.handshake_timeout_ms") \
    X(handshakes_evicted_total, "Pending connections closed over server.max_pending_handshakes or max_pending_per_ip") \
    X(connections_refused_busy_total, "Requests answered 503: over server.max_connections") \
    X(connections_refused_per_ip_total, "Requests answered 429: over server.max_connections_per_ip") \
    X(http_bad_requests_total, "Malformed or refused HTTP requests and WebSocket upgrades answered 4xx") \
    X(ws_unmasked_closed_total, "WebSocket connections closed 1002 for a client frame without a mask (RFC 6455 5.1)") \
    X(proxy_header_refused_total, "PROXY protocol headers refused: missing or malformed from a trusted proxy (closed), or sent from an address not in server.proxy_protocol_from (400)")

/* X(name, help): values that go up and down. */
#define MET_GAUGES(X)                                                              \
    X(sessions, "Sessions open now")                                              \
    X(capacity, "Sessions this instance admits")                                  \
    X(ready, "1 when the model is loaded and sessions are admitted")              \
    X(input_backlog_frames, "Largest input backlog of a session: 80 ms frames received and not yet stepped (sampled once a second)") \
    X(personas, "Configured personas primed and served")                          \
    X(persona_primes_running, "Persona primes loading, queued or running")        \
    X(persona_cache_entries, "Persona snapshots held (configured and cached)")    \
    X(persona_cache_bytes, "Bytes of the persona snapshots held (configured and cached)") \
    X(exposed_without_auth, "1 when a listening socket is bound beyond loopback and auth.tokens_file is not set (anyone who reaches it can open sessions)")

/* X(kind): labels of moshid_errors_total{kind=...} (errors sent to clients). */
#define MET_ERROR_KINDS(X)                                                         \
    X(busy) X(bad_query) X(bad_persona) X(bad_audio) X(oversize) X(input_overrun)  \
    X(slow_reader) X(idle_timeout) X(max_steps) X(overload) X(internal) X(bad_event)

/* X(kind): labels of moshid_ignored_messages_total{kind=...}. */
#define MET_IGNORED_KINDS(X) X(empty) X(control) X(ping) X(text) X(unknown)

/* X(reason): labels of moshid_auth_refused_total{reason=...}: upgrades
 * refused by access control (access.h, ACCESS_REFUSALS: same order). */
#define MET_AUTH_REFUSED_KINDS(X) X(origin) X(missing_token) X(unknown_token) X(token_limit)

/* X(name): labels of moshid_endpoint_sessions_total{endpoint=...} and
 * moshid_endpoint_sessions{endpoint=...}: the WebSocket endpoints, in
 * srv_endpoint's order (srv.h; sess.c checks). */
#define MET_ENDPOINTS(X) X(chat) X(realtime)

enum {
#define MET_E(n, h) MET_##n,
    MET_COUNTERS(MET_E) MET__NCOUNTERS
};
enum {
    MET_GAUGES(MET_E) MET__NGAUGES
#undef MET_E
};
enum {
#define MET_K(k) MET_ERR_##k,
    MET_ERROR_KINDS(MET_K) MET__NERR
#undef MET_K
};
enum {
#define MET_K(k) MET_IGN_##k,
    MET_IGNORED_KINDS(MET_K) MET__NIGN
#undef MET_K
};
enum {
#define MET_K(k) MET_AUTH_##k,
    MET_AUTH_REFUSED_KINDS(MET_K) MET__NAUTH
#undef MET_K
};
enum {
#define MET_K(k) MET_EP_##k,
    MET_ENDPOINTS(MET_K) MET__NEP
#undef MET_K
};

/* Upper bounds of the step-latency histogram buckets, milliseconds. */
#define MET_LATENCY_BUCKETS_MS {1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 100, 120, 160, 240, 320, 640, 1280}
#define MET_NBUCKETS 19

void met_add(int counter, uint64_t v);
void met_set(int gauge, int64_t v);
void met_gauge_add(int gauge, int64_t delta);
int64_t met_gauge(int gauge);
uint64_t met_counter(int counter);
void met_error(int kind);
void met_ignored(int kind);
void met_auth_refused(int kind);
/* met_endpoint_open / _close: a session opened on endpoint (an
 * MET_ENDPOINTS index; others are not counted) / closed. */
void met_endpoint_open(int endpoint);
void met_endpoint_close(int endpoint);
/* met_set_engine_info: the labels of moshid_engine_info (static strings:
 * the backend's name, its weights_scheme and kv_scheme, lm_backend_stats;
 * NULL = "unknown"); rendered once backend is set. */
void met_set_engine_info(const char *backend, const char *weights, const char *kv);
/* met_observe_step_ms: add one engine step latency (milliseconds). */
void met_observe_step_ms(double ms);
/* met_observe_frame_ms: add one frame latency: input frame complete on the
 * loop thread -> its output ready for the loop thread (milliseconds). */
void met_observe_frame_ms(double ms);
/* met_reset: zero everything (tests). */
void met_reset(void);

/* met_render: write the Prometheus text exposition into buf (NUL-terminated).
 * Returns the length, or the length needed (>= cap) when buf is too small. */
size_t met_render(char *buf, size_t cap);

#endif
