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

/* The labelled families: one sample per key of a label, counters
 * (unsigned) or gauges (signed). */
typedef struct met_family {
    const char *name, *type, *help, *label;
    const char *const *keys;
    int n;
    _Atomic uint64_t *u;   /* the values, or NULL */
    _Atomic int64_t *s;    /* or these */
} met_family;

static const met_family families[] = {
    {"errors_total", "counter", "Errors sent to clients, by kind", "kind", error_names, MET__NERR, errors, NULL},
    {"ignored_messages_total", "counter", "Client messages ignored, by kind", "kind", ignored_names, MET__NIGN,
     ignored, NULL},
    {"auth_refused_total", "counter", "WebSocket upgrades refused by access control, by reason", "reason",
     auth_names, MET__NAUTH, auth_refused, NULL},
    {"endpoint_sessions_total", "counter",
     "WebSocket sessions opened, by endpoint (chat: /api/chat, realtime: /v1/realtime)", "endpoint", ep_names,
     MET__NEP, ep_opened, NULL},
    {"endpoint_sessions", "gauge", "WebSocket sessions open now, by endpoint", "endpoint", ep_names, MET__NEP, NULL,
     ep_open},
};
#define MET_NFAMILIES (int)(sizeof families / sizeof families[0])

/* moshid_engine_info's labels (static strings, or NULL before start). */
static _Atomic(const char *) info_backend, info_weights, info_kv;

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
void met_set_engine_info(const char *backend, const char *weights, const char *kv) {
    atomic_store(&info_backend, backend);
    atomic_store(&info_weights, weights);
    atomic_store(&info_kv, kv);
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
    for (int f = 0; f < MET_NFAMILIES; f++)
        for (int i = 0; i < families[f].n; i++) {
            if (families[f].u) atomic_store(&families[f].u[i], 0);
            else atomic_store(&families[f].s[i], 0);
        }
    met_set_engine_info(NULL, NULL, NULL);
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

/* One labelled family: its HELP and TYPE, then a sample per key. */
static void put_labelled(out_t *o, const met_family *f) {
    put(o, "# HELP moshid_%s %s\n# TYPE moshid_%s %s\n", f->name, f->help, f->name, f->type);
    for (int i = 0; i < f->n; i++) {
        long long v = f->u ? (long long)atomic_load_explicit(&f->u[i], memory_order_relaxed)
                           : (long long)atomic_load_explicit(&f->s[i], memory_order_relaxed);
        put(o, "moshid_%s{%s=\"%s\"} %lld\n", f->name, f->label, f->keys[i], v);
    }
}

/* A label value: the backend's own words, kept to [A-Za-z0-9_.+-] so that
 * the exposition needs no escapes; NULL is "unknown". */
static const char *label_value(const char *s, char *buf, size_t len) {
    if (!s || !s[0]) s = "unknown";
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++) {
        char ch = s[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                 ch == '.' || ch == '+' || ch == '-';
        buf[i] = ok ? ch : '_';
    }
    buf[i] = '\0';
    return buf;
}

/* moshid_engine_info: which backend runs and in which schemes, once the
 * model is open (met_set_engine_info). */
static void put_info(out_t *o) {
    const char *b = atomic_load(&info_backend);
    if (!b) return;
    char vb[32], vw[32], vk[32];
    put(o, "# HELP moshid_engine_info The engine: backend, weight scheme of the linear layers, K/V cache scheme\n"
           "# TYPE moshid_engine_info gauge\n"
           "moshid_engine_info{backend=\"%s\",weights=\"%s\",kv=\"%s\"} 1\n",
        label_value(b, vb, sizeof vb), label_value(atomic_load(&info_weights), vw, sizeof vw),
        label_value(atomic_load(&info_kv), vk, sizeof vk));
}

size_t met_render(char *buf, size_t cap) {
    out_t o = {buf, cap, 0};
    for (int i = 0; i < MET__NCOUNTERS; i++)
        put(&o, "# HELP moshid_%s %s\n# TYPE moshid_%s counter\nmoshid_%s %llu\n", counter_names[i],
            counter_help[i], counter_names[i], counter_names[i], (unsigned long long)met_counter(i));
    for (int i = 0; i < MET__NGAUGES; i++)
        put(&o, "# HELP moshid_%s %s\n# TYPE moshid_%s gauge\nmoshid_%s %lld\n", gauge_names[i], gauge_help[i],
            gauge_names[i], gauge_names[i], (long long)met_gauge(i));
    for (int f = 0; f < MET_NFAMILIES; f++) put_labelled(&o, &families[f]);
    put_info(&o);
    render_hist(&o, &step_hist, "step_latency_seconds", "Engine step latency (one batched step)");
    render_hist(&o, &frame_hist, "frame_latency_seconds",
                "Frame latency: input frame complete -> its output ready (server side)");
    if (o.len >= cap && cap) buf[cap - 1] = '\0';
    return o.len;
}
