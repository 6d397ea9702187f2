/* emu_stream.c - streams, events and graphs on the emulator.
 *
 * Streams run asynchronously (the default; EMU_STREAMS=sync runs work when
 * it is enqueued, in order): work enqueued on a stream that is not
 * capturing waits in that stream's queue, and runs only when the host
 * waits for it (cudaStreamSynchronize, cudaEventSynchronize,
 * cudaDeviceSynchronize, a synchronous copy, cudaFree...). A wait runs
 * exactly the work it needs: the stream's queue up to that point and,
 * transitively, what that work waits for (cudaStreamWaitEvent, the legacy
 * default stream's implicit synchronisation with blocking streams); among
 * the streams whose next item may run, the next one to run is drawn at
 * random (EMU_SEED, so a run repeats). Work nobody waited for runs no
 * earlier than a device-wide wait. So a missing event wait between two
 * streams reads what the producer has not written yet, every time, and the
 * order among independent streams varies with the seed (docs/cuda.md,
 * "Streams run asynchronously").
 *
 * Capture is as in CUDA: work enqueued on a capturing stream is recorded,
 * not run; cudaGraphLaunch enqueues the recorded nodes, each time; a stream
 * joins a capture by waiting on an event recorded in it; a synchronising
 * call, or work on the legacy stream, while a stream captures invalidates
 * the capture and fails. Handles are checked (a destroyed or foreign handle
 * is cudaErrorInvalidResourceHandle).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_int.h"

#define E emu_g

#define MAGIC_STREAM 0x5354524Du
#define MAGIC_EVENT 0x45564E54u
#define MAGIC_GRAPH 0x47524148u
#define MAGIC_EXEC 0x47455843u
#define MAX_STREAMS 256

/* One item of a stream's queue: work (a copy of the node), a wait for
 * another queue to reach a count, or an event's record. */
typedef enum { P_WORK, P_WAIT, P_EVENT } pend_kind;
typedef struct pend {
    pend_kind kind;
    int dev;
    emu_node nd;                  /* P_WORK (owned) */
    struct emu_queue *dep;        /* P_WAIT: runnable once dep->done >= count */
    uint64_t count;
    struct CUevent_st *ev;        /* P_EVENT */
} pend;

/* A stream's pending work: q[head, n); enq items were ever enqueued, done
 * have completed (so item number c is done when done >= c). */
typedef struct emu_queue {
    pend *q;
    size_t head, n, cap;
    uint64_t enq, done;
    int legacy, blocking, dev;
    uint64_t seen;                /* blocking stream: the legacy count it last waited for; legacy: unused */
    uint64_t need, scan;          /* the scheduler's scratch */
} emu_queue;

struct CUstream_st {
    unsigned magic;
    emu_queue qu;
    int dead;
    unsigned flags;
    int dev;                      /* the device current when it was created */
    int capturing, invalidated;
    enum cudaStreamCaptureMode mode;
    struct CUgraph_st *cap;
    struct CUstream_st *origin;   /* the stream that began the capture */
};

struct CUevent_st {
    unsigned magic;
    int dead, recorded;
    unsigned flags;
    int dev;                  /* the device current when it was created */
    long long ns;
    struct CUgraph_st *cap;   /* recorded during this capture */
    emu_queue *q;             /* its last record: complete once q->done >= count */
    uint64_t count;
};

/* A captured graph, and an instantiated one: the nodes in stream order. */
struct CUgraph_st {
    unsigned magic;
    emu_node *nodes;
    size_t n, cap;
};

struct CUgraphExec_st {
    unsigned magic;
    emu_node *nodes;
    size_t n;
};

/* Every stream created (destroyed ones stay, marked dead, so a later use
 * is reported). */
static struct CUstream_st *streams[MAX_STREAMS];
static int nstreams;

/* Any stream capturing in a mode that forbids synchronising calls. */
int emu_capture_active(void) {
    for (int i = 0; i < nstreams; i++)
        if (!streams[i]->dead && streams[i]->capturing && streams[i]->mode != cudaStreamCaptureModeRelaxed) return 1;
    return 0;
}

int emu_stream_capturing(cudaStream_t s) {
    return s && s != cudaStreamLegacy && s != cudaStreamPerThread && s->magic == MAGIC_STREAM && !s->dead &&
           s->capturing;
}

void emu_capture_invalidate(const char *why) {
    for (int i = 0; i < nstreams; i++)
        if (!streams[i]->dead && streams[i]->capturing && !streams[i]->invalidated) {
            streams[i]->invalidated = 1;
            emu_note("%s while a stream captures: the capture is invalidated", why);
        }
}

static void queues_drop(void);   /* below */

void emu_streams_reset(void) {
    queues_drop();
    for (int i = 0; i < nstreams; i++) {
        streams[i]->capturing = streams[i]->invalidated = 0;
        streams[i]->cap = NULL;
        streams[i]->origin = NULL;
    }
}

/* ---- queues and the scheduler ------------------------------------------------------------ */

/* The legacy default stream and the per-thread default stream of each
 * device (one host thread at a time uses the emulator). */
static emu_queue legacy_q[2] = {{.legacy = 1, .blocking = 1, .dev = 0}, {.legacy = 1, .blocking = 1, .dev = 1}};
static emu_queue perthread_q[2] = {{.blocking = 1, .dev = 0}, {.blocking = 1, .dev = 1}};

static int nqueues(void) { return nstreams + 4; }
static emu_queue *queue_at(int i) {
    return i < nstreams ? &streams[i]->qu : i < nstreams + 2 ? &legacy_q[i - nstreams] : &perthread_q[i - nstreams - 2];
}

/* The queue of a checked handle. */
static emu_queue *queue_of(cudaStream_t s) {
    if (s == NULL || s == cudaStreamLegacy) return &legacy_q[emu_t_dev & 1];
    if (s == cudaStreamPerThread) return &perthread_q[emu_t_dev & 1];
    return &s->qu;
}

static void node_free(emu_node *nd);   /* below */
static cudaError_t run_node(const emu_node *nd);

static int qpush(emu_queue *qu, const pend *p) {
    if (qu->n == qu->cap) {
        if (qu->head > 0) {
            memmove(qu->q, qu->q + qu->head, (qu->n - qu->head) * sizeof *qu->q);
            qu->n -= qu->head;
            qu->head = 0;
        } else {
            size_t cap = qu->cap ? 2 * qu->cap : 64;
            pend *q = realloc(qu->q, cap * sizeof *q);
            if (!q) return -1;
            qu->q = q;
            qu->cap = cap;
        }
    }
    qu->q[qu->n++] = *p;
    qu->enq++;
    return 0;
}

/* Append p to qu, after the legacy stream's implicit synchronisation: work
 * on the legacy stream waits for everything enqueued before it on the
 * blocking streams of its device, and work on a blocking stream for
 * everything enqueued before it on the legacy stream (programming guide,
 * "Default Stream"; cudaStreamNonBlocking streams take no part). */
static int submit(emu_queue *qu, const pend *p) {
    if (qu->legacy) {
        for (int i = 0; i < nqueues(); i++) {
            emu_queue *b = queue_at(i);
            if (b == qu || !b->blocking || b->legacy || b->dev != qu->dev || b->done >= b->enq) continue;
            pend w = {.kind = P_WAIT, .dep = b, .count = b->enq, .dev = qu->dev};
            if (qpush(qu, &w) != 0) return -1;
        }
    } else if (qu->blocking) {
        emu_queue *l = &legacy_q[qu->dev & 1];
        if (l->done < l->enq && qu->seen < l->enq) {
            pend w = {.kind = P_WAIT, .dep = l, .count = l->enq, .dev = qu->dev};
            if (qpush(qu, &w) != 0) return -1;
            qu->seen = l->enq;
        }
    }
    return qpush(qu, p);
}

/* Does a pending copy read host memory overlapping [p, p+n)? */
static int pending_reads(const void *p, size_t n) {
    const char *a = p;
    for (int i = 0; i < nqueues(); i++) {
        const emu_queue *qu = queue_at(i);
        for (size_t j = qu->head; j < qu->n; j++) {
            const emu_node *nd = &qu->q[j].nd;
            if (qu->q[j].kind == P_WORK && nd->kind == EMU_NODE_MEMCPY && nd->chk && (const char *)nd->src < a + n &&
                a < (const char *)nd->src + nd->n)
                return 1;
        }
    }
    return 0;
}

static int head_ready(const emu_queue *qu) {
    const pend *p = &qu->q[qu->head];
    return p->kind != P_WAIT || p->dep->done >= p->count;
}

static uint64_t sched_next(void) {   /* xorshift64* */
    if (!E.sched) E.sched = (E.seed ^ 0x5DEECE66Dull) * 0x9E3779B97F4A7C15ull | 1u;
    E.sched ^= E.sched >> 12;
    E.sched ^= E.sched << 25;
    E.sched ^= E.sched >> 27;
    return E.sched * 0x2545F4914F6CDD1Dull;
}

/* Run the next item of qu. */
static void run_head(emu_queue *qu) {
    pend p = qu->q[qu->head++];
    if (qu->head == qu->n) qu->head = qu->n = 0;
    if (p.kind == P_WORK) {
        E.run_dev = p.dev;
        run_node(&p.nd);
        E.call = NULL;   /* the node's copy of the launch goes now */
        node_free(&p.nd);
    } else if (p.kind == P_EVENT) {
        p.ev->ns = emu_clock();
    }
    qu->done++;
}

/* Every pending item dropped (a fault made the device unusable, or a reset). */
static void queues_drop(void) {
    for (int i = 0; i < nqueues(); i++) {
        emu_queue *qu = queue_at(i);
        for (size_t j = qu->head; j < qu->n; j++)
            if (qu->q[j].kind == P_WORK) node_free(&qu->q[j].nd);
        qu->head = qu->n = 0;
        qu->done = qu->enq;
        qu->seen = 0;
    }
}

/* Run pending work until tq has completed tc items (tq NULL: until nothing
 * is pending): the items needed, and what they wait for, in an order drawn
 * among the queues whose next item may run. */
static cudaError_t drain(emu_queue *tq, uint64_t tc) {
    static int cand[MAX_STREAMS + 4];
    const int nq = nqueues();
    for (int i = 0; i < nq; i++) {
        emu_queue *qu = queue_at(i);
        qu->need = tq ? qu->done : qu->enq;
        qu->scan = qu->done;
    }
    if (tq && tq->need < tc) tq->need = tc;
    for (int changed = tq != NULL; changed;) {   /* what the needed items wait for, transitively */
        changed = 0;
        for (int i = 0; i < nq; i++) {
            emu_queue *qu = queue_at(i);
            for (; qu->scan < qu->need; qu->scan++) {
                const pend *p = &qu->q[qu->head + (size_t)(qu->scan - qu->done)];
                if (p->kind == P_WAIT && p->dep->need < p->count) {
                    p->dep->need = p->count;
                    changed = 1;
                }
            }
        }
    }
    for (;;) {
        if (E.sticky) {
            queues_drop();
            return E.sticky;
        }
        int k = 0;
        for (int i = 0; i < nq; i++) {
            emu_queue *qu = queue_at(i);
            if (qu->done < qu->need && head_ready(qu)) cand[k++] = i;
        }
        if (!k) break;
        run_head(queue_at(cand[E.async && k > 1 ? (int)(sched_next() % (uint64_t)k) : 0]));
    }
    return E.sticky;
}

cudaError_t emu_sync_stream(cudaStream_t s) {
    emu_queue *qu = queue_of(s);
    return drain(qu, qu->enq);
}

cudaError_t emu_sync_all(void) { return drain(NULL, 0); }

/* ---- streams and events -------------------------------------------------------------------- */
/* The stream object of s (NULL for the legacy and per-thread default
 * streams), or an error for a bad handle. */
static cudaError_t stream_of(cudaStream_t s, struct CUstream_st **out) {
    *out = NULL;
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return cudaSuccess;
    if (s->magic != MAGIC_STREAM || s->dead) {
        emu_note("stream %p is not a live stream", (void *)s);
        return cudaErrorInvalidResourceHandle;
    }
    *out = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    EMU_ENTER();
    if (nstreams == MAX_STREAMS) return emu_ret(cudaErrorMemoryAllocation);
    struct CUstream_st *st = calloc(1, sizeof *st);
    if (!st) return emu_ret(cudaErrorMemoryAllocation);
    st->magic = MAGIC_STREAM;
    st->flags = flags;
    st->dev = emu_t_dev;
    st->qu.blocking = !(flags & cudaStreamNonBlocking);
    st->qu.dev = emu_t_dev;
    streams[nstreams++] = st;
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e || !st) return emu_ret(e ? e : cudaErrorInvalidResourceHandle);
    st->dead = 1;   /* kept, so a later use is reported */
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if ((st && st->capturing) || (!st && emu_capture_active())) {
        emu_capture_invalidate("cudaStreamSynchronize");
        return emu_ret(cudaErrorStreamCaptureUnsupported);
    }
    return emu_ret(emu_sync_stream(s));
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (st && st->capturing) return emu_ret(cudaErrorStreamCaptureUnsupported);
    return emu_ret(emu_sync_stream(s));   /* complete when asked: a poll loop ends */
}

static cudaError_t event_of(cudaEvent_t ev) {
    if (!ev || ev->magic != MAGIC_EVENT || ev->dead) {
        emu_note("event %p is not a live event", (void *)ev);
        return cudaErrorInvalidResourceHandle;
    }
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    EMU_ENTER();
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return emu_ret(cudaErrorMemoryAllocation);
    e->magic = MAGIC_EVENT;
    e->flags = flags;
    e->dev = emu_t_dev;
    *ev = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    EMU_ENTER();
    cudaError_t e = event_of(ev);
    if (e) return emu_ret(e);
    ev->dead = 1;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = event_of(ev);
    if (!e) e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if ((st ? st->dev : emu_t_dev) != ev->dev) {
        emu_note("cudaEventRecord: an event of device %d on a stream of device %d (cudaSetDevice missing on this "
                 "thread?)", ev->dev, st ? st->dev : emu_t_dev);
        return emu_ret(cudaErrorInvalidResourceHandle);
    }
    if (st && st->capturing) {   /* a captured event: a dependency inside the graph */
        ev->cap = st->cap;
        return cudaSuccess;
    }
    ev->cap = NULL;
    ev->recorded = 1;
    emu_queue *qu = queue_of(s);
    pend p = {.kind = P_EVENT, .ev = ev, .dev = qu->dev};
    if (submit(qu, &p) != 0) return emu_ret(cudaErrorMemoryAllocation);
    ev->q = qu;
    ev->count = qu->enq;
    return E.async ? cudaSuccess : emu_ret(drain(qu, qu->enq));
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    EMU_ENTER();
    cudaError_t e = event_of(ev);
    if (e) return emu_ret(e);
    if (ev->cap) return emu_ret(cudaErrorCapturedEvent);
    return ev->q ? emu_ret(drain(ev->q, ev->count)) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    EMU_ENTER();
    cudaError_t e = event_of(ev);
    if (e) return emu_ret(e);
    return ev->q ? emu_ret(drain(ev->q, ev->count)) : cudaSuccess;   /* complete when asked */
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    EMU_ENTER();
    cudaError_t e = event_of(a);
    if (!e) e = event_of(b);
    if (e) return emu_ret(e);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return emu_ret(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return emu_ret(cudaErrorInvalidResourceHandle);
    if ((a->q && a->q->done < a->count) || (b->q && b->q->done < b->count)) return emu_ret(cudaErrorNotReady);
    *ms = (float)((double)(b->ns - a->ns) / 1e6);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
    EMU_ENTER();
    (void)flags;
    struct CUstream_st *st;
    cudaError_t e = event_of(ev);
    if (!e) e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (ev->cap && st && !st->capturing) {   /* fork: s joins the capture */
        struct CUstream_st *origin = NULL;
        for (int i = 0; i < nstreams; i++)
            if (streams[i]->cap == ev->cap && streams[i]->capturing && !streams[i]->origin) origin = streams[i];
        st->capturing = 1;
        st->cap = ev->cap;
        st->origin = origin;
        st->mode = origin ? origin->mode : cudaStreamCaptureModeGlobal;
        return cudaSuccess;
    }
    if ((st && st->capturing) || !ev->q || ev->q->done >= ev->count) return cudaSuccess;
    emu_queue *qu = queue_of(s);
    if (qu == ev->q) return cudaSuccess;   /* stream order already */
    pend p = {.kind = P_WAIT, .dep = ev->q, .count = ev->count, .dev = qu->dev};
    return submit(qu, &p) != 0 ? emu_ret(cudaErrorMemoryAllocation) : cudaSuccess;
}

/* ---- graphs ----------------------------------------------------------------------------------- */

static cudaError_t graph_add(struct CUgraph_st *g, const emu_node *nd) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        emu_node *p = realloc(g->nodes, cap * sizeof *p);
        if (!p) return cudaErrorMemoryAllocation;
        g->nodes = p;
        g->cap = cap;
    }
    g->nodes[g->n++] = *nd;
    return cudaSuccess;
}

/* Deep copy of a emu_node (its parameters and host arguments). */
static int node_copy(emu_node *dst, const emu_node *src) {
    *dst = *src;
    dst->own = NULL;   /* a graph's copy reads its source when it runs */
    dst->chk = NULL;
    if (src->kind == EMU_NODE_KERNEL) {
        unsigned char *p = malloc(src->call.params_bytes ? src->call.params_bytes : 1);
        if (!p) return -1;
        memcpy(p, src->call.params, src->call.params_bytes);
        dst->call.params = p;
    }
    if (src->kind == EMU_NODE_HOST) {
        size_t n = src->n ? src->n : 1;
        dst->arg = malloc(n);
        if (!dst->arg) return -1;
        memcpy(dst->arg, src->arg, src->n);
    }
    return 0;
}

static void node_free(emu_node *nd) {
    if (nd->kind == EMU_NODE_KERNEL) free((void *)nd->call.params);
    if (nd->kind == EMU_NODE_HOST) free(nd->arg);
    free(nd->own);
    free((void *)nd->chk);
    nd->own = NULL;
    nd->chk = NULL;
}

static cudaError_t run_node(const emu_node *nd);   /* below */

int emu_stream_dev(cudaStream_t s) {
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return emu_t_dev;
    if (s->magic != MAGIC_STREAM || s->dead) return -1;
    return s->dev;
}

/* Enqueue a emu_node on stream s: record it when s captures, else queue
 * it (and, with EMU_STREAMS=sync, run it). Takes nd->own and nd->chk. */
cudaError_t emu_enqueue(cudaStream_t s, const emu_node *nd) {
    struct CUstream_st *st;
    emu_node tmp = *nd;
    cudaError_t e = stream_of(s, &st);
    if (e || (st && st->capturing) || (!st && emu_capture_active())) {
        free(tmp.own);
        free((void *)tmp.chk);
        tmp.own = NULL;
        tmp.chk = NULL;
    }
    if (e) return emu_ret(e);
    if (st && st->capturing) {
        emu_node c;
        if (node_copy(&c, &tmp) != 0) return emu_ret(cudaErrorMemoryAllocation);
        return emu_ret(graph_add(st->cap, &c));
    }
    if (!st && emu_capture_active()) {   /* the legacy stream waits for a capturing stream */
        emu_capture_invalidate("work on the legacy default stream");
        return emu_ret(cudaErrorStreamCaptureImplicit);
    }
    emu_queue *qu = queue_of(s);
    pend p = {.kind = P_WORK, .dev = qu->dev};
    if (node_copy(&p.nd, &tmp) != 0) return emu_ret(cudaErrorMemoryAllocation);
    p.nd.own = tmp.own;
    p.nd.chk = tmp.chk;
    /* host memory a copy will write holds garbage until the copy has run
     * (unless pending copies still read it: they run first in stream order
     * or race, which their check reports) */
    if (tmp.kind == EMU_NODE_MEMCPY && tmp.dst_host && !pending_reads(tmp.dst, tmp.n)) memset(tmp.dst, 0xFF, tmp.n);
    if (submit(qu, &p) != 0) {
        node_free(&p.nd);
        return emu_ret(cudaErrorMemoryAllocation);
    }
    return E.async ? cudaSuccess : emu_ret(drain(qu, qu->enq));
}

cudaError_t emu_enqueue_host(cudaStream_t stream, emu_host_fn fn, const void *arg, size_t bytes) {
    EMU_ENTER();
    emu_node nd = {.kind = EMU_NODE_HOST, .fn = fn, .arg = (void *)arg, .n = bytes};
    return emu_enqueue(stream, &nd);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (!st) {
        emu_note("cudaStreamBeginCapture on the legacy default stream");
        return emu_ret(cudaErrorStreamCaptureUnsupported);
    }
    if (st->capturing) return emu_ret(cudaErrorIllegalState);
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return emu_ret(cudaErrorMemoryAllocation);
    g->magic = MAGIC_GRAPH;
    st->capturing = 1;
    st->invalidated = 0;
    st->mode = mode;
    st->cap = g;
    st->origin = NULL;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (!st || !st->capturing) return emu_ret(cudaErrorIllegalState);
    if (st->origin) return emu_ret(cudaErrorStreamCaptureUnmatched);   /* only the origin ends it */
    struct CUgraph_st *g = st->cap;
    int bad = 0;
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->cap == g && streams[i]->capturing) {
            bad |= streams[i]->invalidated;
            streams[i]->capturing = 0;
            streams[i]->invalidated = 0;
            streams[i]->cap = NULL;
            streams[i]->origin = NULL;
        }
    if (bad) {
        for (size_t i = 0; i < g->n; i++) node_free(&g->nodes[i]);
        free(g->nodes);
        free(g);
        *graph = NULL;
        return emu_ret(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    *status = !st || !st->capturing ? cudaStreamCaptureStatusNone :
              st->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

static cudaError_t nodes_copy(emu_node **out, const emu_node *src, size_t n) {
    emu_node *p = calloc(n ? n : 1, sizeof *p);
    if (!p) return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < n; i++)
        if (node_copy(&p[i], &src[i]) != 0) return cudaErrorMemoryAllocation;
    *out = p;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    EMU_ENTER();
    (void)flags;
    if (!g || g->magic != MAGIC_GRAPH) return emu_ret(cudaErrorInvalidValue);
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x) return emu_ret(cudaErrorMemoryAllocation);
    x->magic = MAGIC_EXEC;
    cudaError_t e = nodes_copy(&x->nodes, g->nodes, g->n);
    if (e) return emu_ret(e);
    x->n = g->n;
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    EMU_ENTER();
    if (!x || x->magic != MAGIC_EXEC) return emu_ret(cudaErrorInvalidResourceHandle);
    for (size_t i = 0; i < x->n; i++) {
        cudaError_t e = emu_enqueue(s, &x->nodes[i]);
        if (e) return e;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t x, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
    EMU_ENTER();
    if (!x || x->magic != MAGIC_EXEC || !g || g->magic != MAGIC_GRAPH) return emu_ret(cudaErrorInvalidValue);
    enum cudaGraphExecUpdateResult r = cudaGraphExecUpdateSuccess;
    if (g->n != x->n) r = cudaGraphExecUpdateErrorTopologyChanged;
    for (size_t i = 0; r == cudaGraphExecUpdateSuccess && i < g->n; i++)
        if (g->nodes[i].kind != x->nodes[i].kind ||
            (g->nodes[i].kind == EMU_NODE_KERNEL && g->nodes[i].call.func != x->nodes[i].call.func))
            r = cudaGraphExecUpdateErrorNodeTypeChanged;
    if (info) {
        memset(info, 0, sizeof *info);
        info->result = r;
    }
    if (r != cudaGraphExecUpdateSuccess) return emu_ret(cudaErrorGraphExecUpdateFailure);
    emu_node *p;
    cudaError_t e = nodes_copy(&p, g->nodes, g->n);
    if (e) return emu_ret(e);
    for (size_t i = 0; i < x->n; i++) node_free(&x->nodes[i]);
    free(x->nodes);
    x->nodes = p;
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count) {
    EMU_ENTER();
    if (!g || g->magic != MAGIC_GRAPH || !count) return emu_ret(cudaErrorInvalidValue);
    if (nodes)
        for (size_t i = 0; i < g->n && i < *count; i++) nodes[i] = (cudaGraphNode_t)(void *)&g->nodes[i];
    *count = g->n;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    EMU_ENTER();
    if (!x || x->magic != MAGIC_EXEC) return emu_ret(cudaErrorInvalidResourceHandle);
    for (size_t i = 0; i < x->n; i++) node_free(&x->nodes[i]);
    free(x->nodes);
    x->magic = 0;
    free(x);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    EMU_ENTER();
    if (!g || g->magic != MAGIC_GRAPH) return emu_ret(cudaErrorInvalidValue);
    for (size_t i = 0; i < g->n; i++) node_free(&g->nodes[i]);
    free(g->nodes);
    g->magic = 0;
    free(g);
    return cudaSuccess;
}

/* A deferred copy to or from pinned host memory: the host buffer must be
 * live and, as a source, unchanged since the call (a staging buffer
 * reused before the copy's event completes is a race on a device). */
static int copy_hazard(const emu_node *nd) {
    const char *why = NULL;
    size_t at = 0;
    int changed = 0;
    int span = 0;
    emu_alloc *a = emu_alloc_at(nd->src, nd->n, &span);
    emu_alloc *b = emu_alloc_at(nd->dst, nd->n, &span);
    if (a && a->freed) why = "its source was freed before the copy ran";
    else if (b && b->freed) why = "its destination was freed before the copy ran";
    else if (nd->chk && memcmp(nd->src, nd->chk, nd->n) != 0) {
        while (((const unsigned char *)nd->src)[at] == ((const unsigned char *)nd->chk)[at]) at++;
        why = "the host wrote its pinned source between cudaMemcpyAsync and the copy's completion (a staging "
              "buffer reused before its event was waited for?)";
        changed = 1;
    }
    if (!why) return 0;
    snprintf(E.kname, sizeof E.kname, "cudaMemcpyAsync");
    memset(&E.bidx, 0, sizeof E.bidx);
    E.call = NULL;
    emu_fault_note(a && a->freed ? EMU_FAULT_FREED : EMU_FAULT_ASYNC_COPY, NULL,
                   "copy of %zu bytes %p -> %p: %s", nd->n, nd->src, nd->dst, why);
    if (changed) snprintf(E.fault.msg + strlen(E.fault.msg), sizeof E.fault.msg - strlen(E.fault.msg),
                          " (first changed byte: %zu)", at);
    return 1;
}

static cudaError_t run_node(const emu_node *nd) {
    switch (nd->kind) {
    case EMU_NODE_KERNEL:
        if (E.inject_after && --E.inject_after == 0) {   /* emu_inject_fault: this run faults */
            emu_kernel_name(E.kname, sizeof E.kname, nd->call.pretty);
            emu_fault_note(EMU_FAULT_OOB, NULL, "fault injected by emu_inject_fault (a test of error handling)");
            return E.sticky;
        }
        emu_run_grid(&nd->call);
        return E.sticky;
    case EMU_NODE_MEMCPY:
        if (copy_hazard(nd)) return E.sticky;
        memmove(nd->dst, nd->own ? nd->own : nd->src, nd->n);
        emu_shadow_copy(nd->dst, nd->own ? nd->own : nd->src, nd->n);
        return cudaSuccess;
    case EMU_NODE_MEMSET:
        emu_mem_set(nd->dst, nd->value, nd->n);
        return cudaSuccess;
    case EMU_NODE_HOST:
        nd->fn(nd->arg);
        return E.sticky;
    }
    return cudaSuccess;
}
