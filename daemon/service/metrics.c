/* metrics.c - counters, gauges, histogram, Prometheus rendering. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic uint64_t counters[MET__NCOUNTERS];
static _Atomic int64_t gauges[MET__NGAUGES];
static _Atomic uint64_t errors[MET__NERR];
static _Atomic uint64_t ignored[MET__NIGN];
static _Atomic uint64_t auth_refused[MET__NAUTH];
static _Atomic uint64_t ep_opened[MET__NEP];
static _Atomic int64_t ep_open[MET__NEP];
typedef struct {
    _Atomic uint64_t buckets[MET_NBUCKETS + 1]; /* last = +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} met_hist;
static met_hist step_hist, frame_hist;
static const double bucket_ms[MET_NBUCKETS] = MET_LATENCY_BUCKETS_MS;

static const char *const counter_names[] = {
#define N(n, h) #n,
    MET_COUNTERS(N)};
static const char *const counter_help[] = {
#undef N
#define N(n, h) h,
    MET_COUNTERS(N)};
static const char *const gauge_names[] = {
#undef N
#define N(n, h) #n,
    MET_GAUGES(N)};
static const char *const gauge_help[] = {
#undef N
#define N(n, h) h,
    MET_GAUGES(N)};
#undef N
static const char *const error_names[] = {
#define K(k) #k,
    MET_ERROR_KINDS(K)};
static const char *const ignored_names[] = {MET_IGNORED_KINDS(K)};
static const char *const auth_names[] = {MET_AUTH_REFUSED_KINDS(K)};
static const char *const ep_names[] = {MET_ENDPOINTS(K)};
#undef K

void met_add(int c, uint64_t v) { atomic_fetch_add_explicit(&counters[c], v, memory_order_relaxed); }
uint64_t met_counter(int c) { return atomic_load_explicit(&counters[c], memory_order_relaxed); }
void met_set(int g, int64_t v) { atomic_store_explicit(&gauges[g], v, memory_order_relaxed); }
void met_gauge_add(int g, int64_t d) { atomic_fetch_add_explicit(&gauges[g], d, memory_order_relaxed); }
int64_t met_gauge(int g) { return atomic_load_explicit(&gauges[g], memory_order_relaxed); }
void met_error(int k) { atomic_fetch_add_explicit(&errors[k], 1, memory_order_relaxed); }
void met_ignored(int k) { atomic_fetch_add_explicit(&ignored[k], 1, memory_order_relaxed); }
void met_auth_refused(int k) { atomic_fetch_add_explicit(&auth_refused[k], 1, memory_order_relaxed); }
void met_endpoint_open(int e) {
    if (e < 0 || e >= MET__NEP) return;
    atomic_fetch_add_explicit(&ep_opened[e], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ep_open[e], 1, memory_order_relaxed);
}
void met_endpoint_close(int e) {
    if (e >= 0 && e < MET__NEP) atomic_fetch_add_explicit(&ep_open[e], -1, memory_order_relaxed);
}

static void observe(met_hist *h, double ms) {
    int b = 0;
    while (b < MET_NBUCKETS && ms > bucket_ms[b]) b++;
    atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)(ms * 1000.0 + 0.5), memory_order_relaxed);
}

void met_observe_step_ms(double ms) { observe(&step_hist, ms); }
void met_observe_frame_ms(double ms) { observe(&frame_hist, ms); }

static void hist_reset(met_hist *h) {
    for (int i = 0; i <= MET_NBUCKETS; i++) atomic_store(&h->buckets[i], 0);
    atomic_store(&h->count, 0);
    atomic_store(&h->sum_us, 0);
}

void met_reset(void) {
    for (int i = 0; i < MET__NCOUNTERS; i++) atomic_store(&counters[i], 0);
    for (int i = 0; i < MET__NGAUGES; i++) atomic_store(&gauges[i], 0);
    for (int i = 0; i < MET__NERR; i++) atomic_store(&errors[i], 0);
    for (int i = 0; i < MET__NIGN; i++) atomic_store(&ignored[i], 0);
    for (int i = 0; i < MET__NAUTH; i++) atomic_store(&auth_refused[i], 0);
    for (int i = 0; i < MET__NEP; i++) atomic_store(&ep_opened[i], 0), atomic_store(&ep_open[i], 0);
    hist_reset(&step_hist);
    hist_reset(&frame_hist);
}

typedef struct { char *buf; size_t cap, len; } out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void render_hist(out_t *o, met_hist *h, const char *name, const char *help) {
    put(o, "# HELP moshid_%s %s\n# TYPE moshid_%s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b <= MET_NBUCKETS; b++) {
        cum += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
        if (b < MET_NBUCKETS)
            put(o, "moshid_%s_bucket{le=\"%g\"} %llu\n", name, bucket_ms[b] / 1000.0, (unsigned long long)cum);
        else
            put(o, "moshid_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    put(o, "moshid_%s_sum %.6f\nmoshid_%s_count %llu\n", name, (double)atomic_load(&h->sum_us) / 1e6, name,
        (unsigned long long)atomic_load(&h->count));
}

size_t met_render(char *buf, size_t cap) {
    out_t o = {buf, cap, 0};
    for (int i = 0; i < MET__NCOUNTERS; i++)
        put(&o, "# HELP moshid_%s %s\n# TYPE moshid_%s counter\nmoshid_%s %llu\n", counter_names[i],
            counter_help[i], counter_names[i], counter_names[i], (unsigned long long)met_counter(i));
    for (int i = 0; i < MET__NGAUGES; i++)
        put(&o, "# HELP moshid_%s %s\n# TYPE moshid_%s gauge\nmoshid_%s %lld\n", gauge_names[i], gauge_help[i],
            gauge_names[i], gauge_names[i], (long long)met_gauge(i));
    put(&o, "# HELP moshid_errors_total Errors sent to clients, by kind\n# TYPE moshid_errors_total counter\n");
    for (int i = 0; i < MET__NERR; i++)
        put(&o, "moshid_errors_total{kind=\"%s\"} %llu\n", error_names[i],
            (unsigned long long)atomic_load_explicit(&errors[i], memory_order_relaxed));
    put(&o, "# HELP moshid_ignored_messages_total Client messages ignored, by kind\n"
            "# TYPE moshid_ignored_messages_total counter\n");
    for (int i = 0; i < MET__NIGN; i++)
        put(&o, "moshid_ignored_messages_total{kind=\"%s\"} %llu\n", ignored_names[i],
            (unsigned long long)atomic_load_explicit(&ignored[i], memory_order_relaxed));
    put(&o, "# HELP moshid_auth_refused_total WebSocket upgrades refused by access control, by reason\n"
            "# TYPE moshid_auth_refused_total counter\n");
    for (int i = 0; i < MET__NAUTH; i++)
        put(&o, "moshid_auth_refused_total{reason=\"%s\"} %llu\n", auth_names[i],
            (unsigned long long)atomic_load_explicit(&auth_refused[i], memory_order_relaxed));
    put(&o, "# HELP moshid_endpoint_sessions_total WebSocket sessions opened, by endpoint (chat: /api/chat, "
            "realtime: /v1/realtime)\n# TYPE moshid_endpoint_sessions_total counter\n");
    for (int i = 0; i < MET__NEP; i++)
        put(&o, "moshid_endpoint_sessions_total{endpoint=\"%s\"} %llu\n", ep_names[i],
            (unsigned long long)atomic_load_explicit(&ep_opened[i], memory_order_relaxed));
    put(&o, "# HELP moshid_endpoint_sessions WebSocket sessions open now, by endpoint\n"
            "# TYPE moshid_endpoint_sessions gauge\n");
    for (int i = 0; i < MET__NEP; i++)
        put(&o, "moshid_endpoint_sessions{endpoint=\"%s\"} %lld\n", ep_names[i],
            (long long)atomic_load_explicit(&ep_open[i], memory_order_relaxed));
    render_hist(&o, &step_hist, "step_latency_seconds", "Engine step latency (one batched step)");
    render_hist(&o, &frame_hist, "frame_latency_seconds",
                "Frame latency: input frame complete -> its output ready (server side)");
    if (o.len >= cap && cap) buf[cap - 1] = '\0';
    return o.len;
}
