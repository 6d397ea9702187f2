/* emu_traffic.c - memory traffic of every launch, counted the way Nsight
 * Compute counts it, for the performance model (tests/gpu/gpu_model.c,
 * `make gpu-model`; docs/cuda.md, "The performance model").
 *
 * A GPU executes a load or store instruction for a warp at once; the
 * emulator runs the warp's lanes one after the other. The lanes' accesses
 * of one instruction are matched by (warp, instruction, how many times this
 * lane executed that instruction before): lanes that diverge still pair up
 * with the lanes that executed the same instruction for the same time. The
 * instruction is the access hook's return address (a code address inside
 * the kernel), or for __ldg and atomics their file:line.
 *
 * Per warp-level global access (a "request"): the distinct bytes its lanes
 * asked for (lanes reading one address, a broadcast, count once) and the
 * 32-byte sectors their bytes lie in (l1tex__t_sectors /
 * l1tex__t_requests); sector efficiency = bytes / (32 * sectors). Per
 * warp-level shared access: the wavefronts it needs, the largest number of
 * distinct 4-byte words any of the 32 banks holds among its lanes, taken
 * per phase (the 32 lanes for accesses up to 4 bytes, half-warps for 8,
 * quarter-warps for 16 bytes, as the hardware splits wide accesses);
 * bank conflicts = wavefronts - phases. DRAM bytes of a launch: the
 * distinct sectors of each device buffer it touched (an L2 as large as the
 * launch's reuse distance: data read by many blocks comes from DRAM once).
 * When only a sample of the blocks runs, a sector touched by one sampled
 * block counts for the blocks it stands for (times the sampling stride), a
 * sector touched by several (shared data: the matvec's x, a codebook)
 * once; at most the buffer's size.
 *
 * Sampling (emu_traffic_start(stride)): only blocks whose linear index is
 * a multiple of stride run; counts are scaled by blocks / blocks run. The
 * skipped blocks write nothing, so the "never written" check of device
 * memory is off while sampling (the model runs kernels on whatever the
 * buffers hold; traffic does not depend on the values in the kernels
 * modelled, the sampler's data-dependent passes aside).
 *
 * Single host thread (the model program's); costs a hash lookup per access
 * while on, nothing while off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_int.h"

#define E emu_g

#define TR_KERNELS 128            /* distinct kernels (and GEMM shapes) in the table */
#define TR_SECTOR 32              /* bytes per sector */
#define TR_BANKS 32
#define TR_BUFS 64                /* device buffers touched by one launch */
/* A sector's entry: buffer index + 1 (7 bits), shared (1 bit), the
 * ordinal of the first block that touched it (24 bits, modulo). */
#define TR_SEC_BUF(v) ((int)((v) & 0x7Fu) - 1)
#define TR_SEC_SHARED 0x80u
#define TR_SEC_BLOCK(v) ((v) >> 8)

/* ---- open-addressing hash maps of 64-bit keys ------------------------------------------- */

typedef struct hmap {
    uint64_t *keys;   /* 0 = empty (keys are made non-zero) */
    uint32_t *vals;
    size_t cap, n;
} hmap;

static uint64_t hmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void hmap_clear(hmap *m) {
    if (m->keys) memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->n = 0;
}

/* The slot of key (inserted with value 0 when new, *fresh = 1). */
static uint32_t *hmap_get(hmap *m, uint64_t key, int *fresh) {
    key |= 1ull << 63;   /* never 0 */
    if (2 * (m->n + 1) > m->cap) {
        hmap o = *m;
        m->cap = o.cap ? 2 * o.cap : 1024;
        m->keys = calloc(m->cap, sizeof *m->keys);
        m->vals = calloc(m->cap, sizeof *m->vals);
        if (!m->keys || !m->vals) {
            fprintf(stderr, "emu: out of memory for traffic accounting\n");
            abort();
        }
        m->n = 0;
        for (size_t i = 0; i < o.cap; i++)
            if (o.keys[i]) {
                int f;
                *hmap_get(m, o.keys[i], &f) = o.vals[i];
            }
        free(o.keys);
        free(o.vals);
    }
    size_t i = hmix(key) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    *fresh = !m->keys[i];
    if (*fresh) {
        m->keys[i] = key;
        m->vals[i] = 0;
        m->n++;
    }
    return &m->vals[i];
}

/* ---- state ------------------------------------------------------------------------------ */

/* One warp-level access being gathered: its lanes' addresses. */
typedef struct wacc {
    uint8_t shared, bytes;
    uint8_t nl;
    uint8_t lane[EMU_WARP];
    uintptr_t addr[EMU_WARP];
} wacc;

static struct {
    int on;
    unsigned stride;
    char cols[EMU_NAME_LEN];   /* emu_traffic_whole_z's prefix ("": none) */
    int cols_now;              /* this launch is sampled by (x, y) columns */
    char whole[EMU_NAME_LEN];  /* emu_traffic_whole's prefix ("": none) */
    int whole_now;             /* this launch runs every block */
    int vskip;                 /* the running block skipped its virtual block (emu_traffic_vblock_skip) */
    hmap occ;            /* (thread, instruction) -> times executed in this block */
    hmap wmap;           /* (warp, instruction, time) -> index into acc */
    wacc *acc;
    size_t nacc, capacc;
    hmap sectors;        /* this launch's distinct sectors: sector -> TR_SEC_* packing */
    const emu_alloc *bufs[TR_BUFS];
    double buf_private[TR_BUFS], buf_shared[TR_BUFS];   /* sectors of one sampled block, of several */
    int nbufs;
    /* this launch, unscaled */
    double req, bytes, sect, shreq, shwave, shphase;
    uint64_t blocks_run;
    emu_traffic rows[TR_KERNELS];
    int nrows;
} T;

/* Pending stream work runs before the table changes hands: what was
 * enqueued before a start is not counted, what was enqueued before a get
 * or a stop is. */
void emu_traffic_start(unsigned stride) {
    emu_init();
    emu_sync_all();
    T.on = 1;
    T.stride = stride ? stride : 1;
    T.nrows = 0;
}

void emu_traffic_sample(unsigned stride) {
    emu_sync_all();   /* what was enqueued before runs at the old stride */
    T.stride = stride ? stride : 1;
}

void emu_traffic_stop(void) {
    emu_sync_all();
    T.on = 0;
}

int emu_traffic_on(void) { return T.on; }

unsigned emu_traffic_stride(void) { return T.on ? T.stride : 1; }

int emu_traffic_get(emu_traffic *rows, int max) {
    emu_sync_all();
    int n = T.nrows < max ? T.nrows : max;
    memcpy(rows, T.rows, sizeof *rows * (size_t)n);
    return n;
}

void emu_traffic_reset(void) {
    emu_sync_all();
    T.nrows = 0;
}

static emu_traffic *row_of(const char *name) {
    for (int i = 0; i < T.nrows; i++)
        if (!strcmp(T.rows[i].kernel, name)) return &T.rows[i];
    if (T.nrows == TR_KERNELS) {
        fprintf(stderr, "emu: more than %d kernels in the traffic table\n", TR_KERNELS);
        abort();
    }
    emu_traffic *r = &T.rows[T.nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", name);
    return r;
}

/* ---- per access -------------------------------------------------------------------------- */

void emu_traffic_note(const emu_alloc *a, const void *p, size_t n, uint64_t insn) {
    if (!T.on || n == 0 || n > 16) return;
    int shared = a->kind == EMU_A_SHARED || a->kind == EMU_A_DYNSHARED;
    if (!shared && a->kind != EMU_A_DEVICE) return;
    const emu_fiber *f = E.cur;
    int fresh;
    uint32_t *times = hmap_get(&T.occ, hmix(insn) ^ (uint64_t)f->lin, &fresh);
    uint64_t wkey = hmix(hmix(insn) ^ ((uint64_t)f->warp << 40)) ^ *times;
    (*times)++;
    uint32_t *ix = hmap_get(&T.wmap, wkey, &fresh);
    if (fresh) {
        if (T.nacc == T.capacc) {
            T.capacc = T.capacc ? 2 * T.capacc : 4096;
            T.acc = realloc(T.acc, T.capacc * sizeof *T.acc);
            if (!T.acc) {
                fprintf(stderr, "emu: out of memory for traffic accounting\n");
                abort();
            }
        }
        *ix = (uint32_t)T.nacc;
        wacc *w = &T.acc[T.nacc++];
        w->shared = (uint8_t)shared;
        w->bytes = (uint8_t)n;
        w->nl = 0;
    }
    wacc *w = &T.acc[*ix];
    if (w->nl < EMU_WARP) {
        w->lane[w->nl] = (uint8_t)f->lane;
        w->addr[w->nl++] = (uintptr_t)p;
    }
    if (!shared) {   /* the launch's distinct sectors, per buffer, private to one block or shared */
        const uint32_t blk = (uint32_t)(T.blocks_run & 0xFFFFFFu);
        for (uintptr_t s = (uintptr_t)p / TR_SECTOR; s <= ((uintptr_t)p + n - 1) / TR_SECTOR; s++) {
            uint32_t *v = hmap_get(&T.sectors, s, &fresh);
            if (!fresh) {
                int bi = TR_SEC_BUF(*v);
                if (bi >= 0 && !(*v & TR_SEC_SHARED) && TR_SEC_BLOCK(*v) != blk) {   /* a second block */
                    *v |= TR_SEC_SHARED;
                    T.buf_private[bi] -= 1;
                    T.buf_shared[bi] += 1;
                }
                continue;
            }
            int bi = 0;
            while (bi < T.nbufs && T.bufs[bi] != a) bi++;
            if (bi == T.nbufs && T.nbufs < TR_BUFS) {
                T.bufs[T.nbufs] = a;
                T.buf_private[T.nbufs] = T.buf_shared[T.nbufs] = 0;
                T.nbufs++;
            }
            if (bi < T.nbufs) T.buf_private[bi] += 1;
            *v = (bi < T.nbufs ? (uint32_t)bi + 1 : 0u) | blk << 8;
        }
    }
}

/* Distinct values among v[0..n-1] (n <= 64). */
static int distinct(const uintptr_t *v, int n) {
    int d = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = v[j] == v[i];
        d += !seen;
    }
    return d;
}

/* The block's warp-level accesses into the launch's sums. */
static void flush_block(void) {
    for (size_t i = 0; i < T.nacc; i++) {
        const wacc *w = &T.acc[i];
        if (!w->shared) {
            uintptr_t sec[2 * EMU_WARP];
            int ns = 0;
            for (int l = 0; l < w->nl; l++) {
                sec[ns++] = w->addr[l] / TR_SECTOR;
                uintptr_t last = (w->addr[l] + w->bytes - 1) / TR_SECTOR;
                if (last != sec[ns - 1]) sec[ns++] = last;
            }
            T.req += 1;
            T.bytes += (double)distinct(w->addr, w->nl) * w->bytes;   /* a broadcast asks for its bytes once */
            T.sect += distinct(sec, ns);
            continue;
        }
        /* shared: phases of 32 * 4 / bytes lanes (by lane number), banks of 4-byte words */
        int per = w->bytes <= 4 ? EMU_WARP : EMU_WARP * 4 / w->bytes;
        for (int ph = 0; ph < EMU_WARP / per; ph++) {
            uintptr_t words[TR_BANKS][EMU_WARP * 4];
            int nw[TR_BANKS] = {0}, any = 0;
            for (int l = 0; l < w->nl; l++) {
                if (w->lane[l] / per != ph) continue;
                any = 1;
                for (uintptr_t a = w->addr[l] / 4; a <= (w->addr[l] + w->bytes - 1) / 4; a++) {
                    int b = (int)(a % TR_BANKS);
                    words[b][nw[b]++] = a;
                }
            }
            if (!any) continue;
            int wave = 1;
            for (int b = 0; b < TR_BANKS; b++) {
                int d = distinct(words[b], nw[b]);
                if (d > wave) wave = d;
            }
            T.shwave += wave;
            T.shphase += 1;
        }
        T.shreq += 1;
    }
    T.nacc = 0;
    hmap_clear(&T.wmap);
    hmap_clear(&T.occ);
}

/* ---- per block and per launch (emu_fiber.c) ---------------------------------------------- */

int emu_traffic_skip_block(uint64_t block_no, unsigned x, unsigned y, unsigned gx) {
    if (!T.on || T.stride <= 1 || T.whole_now) return 0;
    if (T.cols_now) return ((uint64_t)y * gx + x) % T.stride != 0;
    return block_no % T.stride != 0;
}

void emu_traffic_whole_z(const char *prefix) {
    emu_sync_all();
    snprintf(T.cols, sizeof T.cols, "%s", prefix ? prefix : "");
}

void emu_traffic_whole(const char *prefix) {
    emu_sync_all();
    snprintf(T.whole, sizeof T.whole, "%s", prefix ? prefix : "");
}

int emu_traffic_vblock_skip(unsigned long long vblock) {
    if (!T.on || T.stride <= 1 || !T.whole_now || vblock % T.stride == 0) return 0;
    T.vskip = 1;
    return 1;
}

void emu_traffic_block_done(void) {
    if (!T.on) return;
    if (!T.vskip) T.blocks_run++;
    T.vskip = 0;
    flush_block();
}

void emu_traffic_launch_begin(void) {
    if (!T.on) return;
    T.cols_now = T.cols[0] && !strncmp(E.kname, T.cols, strlen(T.cols));
    T.whole_now = T.whole[0] && !strncmp(E.kname, T.whole, strlen(T.whole));
    T.req = T.bytes = T.sect = T.shreq = T.shwave = T.shphase = 0;
    T.blocks_run = 0;
    T.vskip = 0;
    T.nbufs = 0;
    T.nacc = 0;
    hmap_clear(&T.wmap);
    hmap_clear(&T.occ);
    hmap_clear(&T.sectors);
}

void emu_traffic_launch_end(const emu_call *c) {
    if (!T.on) return;
    flush_block();   /* a faulted block */
    uint64_t blocks = (uint64_t)c->grid.x * c->grid.y * c->grid.z;
    double k = T.blocks_run ? (double)blocks / (double)T.blocks_run : 0.0;
    emu_traffic *r = row_of(E.kname);
    r->launches++;
    r->blocks += blocks;
    r->blocks_run += T.blocks_run;
    r->gl_requests += T.req * k;
    r->gl_bytes += T.bytes * k;
    r->gl_sectors += T.sect * k;
    r->sh_requests += T.shreq * k;
    r->sh_wavefronts += T.shwave * k;
    r->sh_conflicts += (T.shwave - T.shphase) * k;
    for (int i = 0; i < T.nbufs; i++) {
        double b = (T.buf_private[i] * k + T.buf_shared[i]) * TR_SECTOR, size = (double)T.bufs[i]->size;
        r->dram_bytes += b < size ? b : size;
    }
}

/* A cuBLAS GEMM of the stand-in, by shape: the model prices it from its
 * shape (docs/cuda.md), not from the stand-in's loops. c_read: beta != 0,
 * C is read before it is written (the residual add folded into the GEMM). */
void emu_traffic_gemm(int m, int n, int k, size_t a_es, size_t b_es, size_t c_es, int c_read) {
    if (!T.on) return;
    char name[EMU_NAME_LEN];
    snprintf(name, sizeof name, "cublasGemmEx m=%d n=%d k=%d", m, n, k);
    emu_traffic *r = row_of(name);
    r->launches++;
    r->gemm_m = m;
    r->gemm_n = n;
    r->gemm_k = k;
    r->dram_bytes += (double)m * k * a_es + (double)k * n * b_es + (double)m * n * c_es * (c_read ? 2 : 1);
    r->gemm_flops += 2.0 * m * n * k;
}
