/* kern_pool.c - a small fork-join thread pool for the CPU kernels. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "err.h"
#include "kern_cpu.h"

/* Most threads of one pool. */
#define KERN_MAX_THREADS 256

struct kern_pool {
    int n;                       /* threads, caller included */
    pthread_t *tid;              /* (n - 1) */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen;                /* bumped for each run */
    int pending;                 /* workers still running this run */
    int quit;
    void (*fn)(void *ctx, int i, int n);
    void *ctx;
};

typedef struct { kern_pool *p; int i; } worker_arg;

static void *worker(void *arg) {
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    kern_pool *p = a.p;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        void (*fn)(void *, int, int) = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, a.i, p->n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kern_pool *kern_pool_create(int nthreads) {
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > KERN_MAX_THREADS) nthreads = KERN_MAX_THREADS;
    kern_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = nthreads;
    p->tid = calloc((size_t)nthreads, sizeof *p->tid);
    if (!p->tid) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < nthreads - 1; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || (a->p = p, a->i = i + 1, pthread_create(&p->tid[i], NULL, worker, a) != 0)) {
            free(a);
            p->n = i + 1;   /* fewer workers than asked: shut down those started */
            kern_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void kern_pool_free(kern_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n - 1; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}

int kern_pool_threads(const kern_pool *p) { return p ? p->n : 1; }

void kern_pool_run(kern_pool *p, void (*fn)(void *ctx, int i, int n), void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    MS_ASSERT(p->pending == 0);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
