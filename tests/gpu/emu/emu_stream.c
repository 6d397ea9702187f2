/* emu_stream.c - streams, events and graphs on the emulator. Work is
 * immediate: enqueued on a stream that is not capturing, it runs at once,
 * in order (so every stream and event call is a valid, if serial, schedule
 * of the program). Capture is as in CUDA: work enqueued on a capturing
 * stream is recorded, not run; cudaGraphLaunch runs the recorded nodes, each
 * time; a stream joins a capture by waiting on an event recorded in it; a
 * synchronising call, or work on the legacy stream, while a stream captures
 * invalidates the capture and fails. Handles are checked (a destroyed or
 * foreign handle is cudaErrorInvalidResourceHandle).
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

struct CUstream_st {
    unsigned magic;
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

void emu_capture_invalidate(const char *why) {
    for (int i = 0; i < nstreams; i++)
        if (!streams[i]->dead && streams[i]->capturing && !streams[i]->invalidated) {
            streams[i]->invalidated = 1;
            emu_note("%s while a stream captures: the capture is invalidated", why);
        }
}

void emu_streams_reset(void) {
    for (int i = 0; i < nstreams; i++) {
        streams[i]->capturing = streams[i]->invalidated = 0;
        streams[i]->cap = NULL;
        streams[i]->origin = NULL;
    }
}

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
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
    EMU_ENTER();
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (st && st->capturing) return emu_ret(cudaErrorStreamCaptureUnsupported);
    return cudaSuccess;
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
    ev->ns = emu_clock();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    EMU_ENTER();
    cudaError_t e = event_of(ev);
    if (e) return emu_ret(e);
    if (ev->cap) return emu_ret(cudaErrorCapturedEvent);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    EMU_ENTER();
    cudaError_t e = event_of(ev);
    return e ? emu_ret(e) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    EMU_ENTER();
    cudaError_t e = event_of(a);
    if (!e) e = event_of(b);
    if (e) return emu_ret(e);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return emu_ret(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return emu_ret(cudaErrorInvalidResourceHandle);
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
    }
    return cudaSuccess;
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
}

static cudaError_t run_node(const emu_node *nd);   /* below */

int emu_stream_dev(cudaStream_t s) {
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return emu_t_dev;
    if (s->magic != MAGIC_STREAM || s->dead) return -1;
    return s->dev;
}

/* Enqueue a emu_node on stream s: record it when s captures, else run it. */
cudaError_t emu_enqueue(cudaStream_t s, const emu_node *nd) {
    struct CUstream_st *st;
    cudaError_t e = stream_of(s, &st);
    if (e) return emu_ret(e);
    if (st && st->capturing) {
        emu_node c;
        if (node_copy(&c, nd) != 0) return emu_ret(cudaErrorMemoryAllocation);
        return emu_ret(graph_add(st->cap, &c));
    }
    if (!st && emu_capture_active()) {   /* the legacy stream waits for a capturing stream */
        emu_capture_invalidate("work on the legacy default stream");
        return emu_ret(cudaErrorStreamCaptureImplicit);
    }
    E.run_dev = st ? st->dev : emu_t_dev;
    return run_node(nd);
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
        memmove(nd->dst, nd->src, nd->n);
        emu_shadow_copy(nd->dst, nd->src, nd->n);
        return cudaSuccess;
    case EMU_NODE_MEMSET:
        memset(nd->dst, nd->value, nd->n);
        emu_shadow_set(nd->dst, nd->n, 1);
        return cudaSuccess;
    case EMU_NODE_HOST:
        nd->fn(nd->arg);
        return E.sticky;
    }
    return cudaSuccess;
}
