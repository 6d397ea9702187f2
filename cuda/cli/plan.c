/* plan.c - build/moshid-plan: the CUDA backend's memory plan (cuda/cu_plan.h)
 * for a model, from the command line, with no GPU: what N slots at context
 * C need, and how many fit on a card of M GB.
 *
 *   moshid-plan (--preset 7b|personaplex | --config config.json [--personaplex])
 *               [--context C] [--slots N] [--gpu-gb M | --gpu-bytes B]
 *               [--bucket B] [--snapshots S --snap-positions P] [--codec | --host-codec]
 *               [--weights bf16|int8] [--kv bf16|int8]
 *   moshid-plan --preset 7b --table     the table of docs/operations.md
 *   moshid-plan --preset 7b --table-8bit  sessions at full context per card,
 *                                       bf16 and 8-bit weights and K/V
 *
 * 8-bit: cuda/cu_plan.c counts the schemes (cu_plan_req.w8, .kv8): int8
 * linear matrices (1 byte + a float32 scale per row) beside bf16 embeddings
 * and norms, int8 K/V (1 byte + a float32 scale per position, layer, K|V
 * and head).
 *
 * Slots are backend slots: sessions.max plus personas.max_concurrent_primes.
 * GB are 10^9 bytes, which every card named in the table reports more of
 * (an "80 GB" H100 has 79.6 GiB = 85.5e9 bytes): a plan that fits M GB fits
 * the card. Exit status 0, 1 when the request or the file is refused, 2 on
 * a bad command line.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cu_plan.h"
#include "lm.h"
#include "lm_config.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
/* Largest --gpu-gb: a card of 64 TB is far beyond any made. */
#define PLAN_MAX_GPU_GB 65536

/* cu_plan_compute with int8 weights (w8) and/or int8 K/V (kv8). 0 or -1. */
static int plan8(const lm_config *cfg, const cu_plan_req *req, int w8, int kv8, cu_plan *p) {
    cu_plan_req r = *req;
    r.w8 = w8;
    r.kv8 = kv8;
    return cu_plan_compute(cfg, &r, p);
}

/* cu_plan_max_slots with int8 weights and/or K/V */
static int max_slots8(const lm_config *cfg, const cu_plan_req *req, int w8, int kv8, size_t device_bytes) {
    cu_plan_req r = *req;
    r.w8 = w8;
    r.kv8 = kv8;
    return cu_plan_max_slots(cfg, &r, device_bytes);
}

/* sessions at the model's full context per card, for the four schemes */
static int print_table8(const lm_config *cfg, const cu_plan_req *base) {
    static const int cards_gb[] = {24, 48, 80, 141};
    printf("slots at full context (%d positions)\n", base->context > 0 ? base->context : cfg->context);
    printf("| card | bf16 / bf16 K/V | int8 / bf16 K/V | bf16 / int8 K/V | int8 / int8 K/V |\n|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof cards_gb / sizeof cards_gb[0]; k++) {
        printf("| %d GB |", cards_gb[k]);
        for (int s = 0; s < 4; s++)
            printf(" %d |", max_slots8(cfg, base, s & 1, s >> 1, (size_t)cards_gb[k] * 1000000000ull));
        printf("\n");
    }
    return 0;
}

static void usage(FILE *f) {
    fputs("usage: moshid-plan (--preset 7b|personaplex | --config config.json [--personaplex])\n"
          "                   [--context C] [--slots N] [--gpu-gb M | --gpu-bytes B] [--bucket B]\n"
          "                   [--snapshots S --snap-positions P] [--codec | --host-codec] [--table]\n"
          "\n"
          "  --preset NAME       the released 7B shape: 7b (Moshi: moshiko, moshika; dep_q 8)\n"
          "                      or personaplex (the same with 16 depformer sub-steps)\n"
          "  --config FILE       a checkpoint's config.json; --personaplex: 16 sub-steps, as\n"
          "                      the loader forces for a PersonaPlex checkpoint\n"
          "  --context C         K/V positions per slot (default: the model's)\n"
          "  --slots N           backend slots (sessions + prime slots; default 1)\n"
          "  --gpu-gb M          card memory in GB (10^9 bytes): also print the most slots that fit\n"
          "  --gpu-bytes B       the same in bytes (what cudaMemGetInfo reports as total)\n"
          "  --bucket B          largest batch-size bucket captured (default: the slots)\n"
          "  --snapshots S       K/V snapshots held on the device, of P positions each\n"
          "  --codec             count the Mimi codec's weights and state on the device (the\n"
          "                      default: the CUDA backend runs Mimi there)\n"
          "  --host-codec        leave the codec out (MOSHID_CU_MIMI=cpu keeps Mimi on the host)\n"
          "  --weights bf16|int8 weights counted at 16 or 8 bits (int8: linear layers 1 byte\n"
          "                      + a float32 scale per row; embeddings and norms bf16)\n"
          "  --kv bf16|int8      K/V counted at 16 or 8 bits (int8: + a float32 scale per\n"
          "                      position, layer, K|V and head)\n"
          "  --table             slots that fit on 24, 48, 80 and 141 GB cards at contexts\n"
          "                      3000 and 750 (Markdown)\n"
          "  --table-8bit        slots at full context on 24, 48, 80 and 141 GB cards with\n"
          "                      bf16 and int8 weights and K/V (Markdown)\n",
          f);
}

/* parse a decimal integer in [lo, hi] */
static int num(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "moshid-plan: %s: expected an integer in %lld..%lld, got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void print_plan(const cu_plan *p, int slots) {
    const struct { const char *name; size_t v; } rows[] = {
        {"weights", p->weights},   {"K/V", p->kv},         {"snapshots", p->snapshots},
        {"workspace", p->workspace}, {"graphs", p->graphs}, {"codec", p->codec},
        {"reserve", p->reserve},   {"total", p->total},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("  %-10s %9.3f GiB  %15zu bytes\n", rows[i].name, rows[i].v / GIB, rows[i].v);
    char line[512];
    printf("  %s\n", cu_plan_describe(p, slots, line, sizeof line));
}

/* The docs/operations.md table for cfg: slots that fit per card and context. */
static int print_table(const lm_config *cfg, const cu_plan_req *base, int w8, int kv8) {
    static const int cards_gb[] = {24, 48, 80, 141};
    static const int contexts[] = {3000, 750};
    printf("| card | context %d | context %d |\n|---|---|---|\n", contexts[0], contexts[1]);
    for (size_t k = 0; k < sizeof cards_gb / sizeof cards_gb[0]; k++) {
        printf("| %d GB |", cards_gb[k]);
        for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
            cu_plan_req r = *base;
            r.context = contexts[c];
            int m = max_slots8(cfg, &r, w8, kv8, (size_t)cards_gb[k] * 1000000000ull);
            printf(" %d |", m);
        }
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *preset = NULL, *config = NULL;
    int pp = 0, table = 0, table8 = 0, w8 = 0, kv8 = 0;
    long long context = 0, slots = 1, bucket = 0, snapshots = 0, snap_pos = 0, gpu_gb = 0, gpu_bytes = 0;
    int codec = 1;   /* the CUDA backend runs Mimi on the device (cuda/cu_mimi.c) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() do { if (!v) { fprintf(stderr, "moshid-plan: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "--preset")) { NEEDV(); preset = v; }
        else if (!strcmp(a, "--config")) { NEEDV(); config = v; }
        else if (!strcmp(a, "--personaplex")) pp = 1;
        else if (!strcmp(a, "--context")) { NEEDV(); if (num(a, v, 1, LM_MAX_CONTEXT, &context)) return 2; }
        else if (!strcmp(a, "--slots")) { NEEDV(); if (num(a, v, 1, INT_MAX, &slots)) return 2; }
        else if (!strcmp(a, "--bucket")) { NEEDV(); if (num(a, v, 1, INT_MAX, &bucket)) return 2; }
        else if (!strcmp(a, "--snapshots")) { NEEDV(); if (num(a, v, 0, INT_MAX, &snapshots)) return 2; }
        else if (!strcmp(a, "--snap-positions")) { NEEDV(); if (num(a, v, 0, LM_MAX_CONTEXT, &snap_pos)) return 2; }
        else if (!strcmp(a, "--gpu-gb")) { NEEDV(); if (num(a, v, 1, PLAN_MAX_GPU_GB, &gpu_gb)) return 2; }
        else if (!strcmp(a, "--gpu-bytes")) { NEEDV(); if (num(a, v, 1, LLONG_MAX, &gpu_bytes)) return 2; }
        else if (!strcmp(a, "--codec")) codec = 1;
        else if (!strcmp(a, "--host-codec")) codec = 0;
        else if (!strcmp(a, "--table")) table = 1;
        else if (!strcmp(a, "--table-8bit")) table8 = 1;
        else if (!strcmp(a, "--weights") || !strcmp(a, "--kv")) { NEEDV();
            int *f = a[2] == 'w' ? &w8 : &kv8;
            if (!strcmp(v, "int8")) *f = 1;
            else if (!strcmp(v, "bf16")) *f = 0;
            else { fprintf(stderr, "moshid-plan: %s: bf16 or int8, not '%s'\n", a, v); return 2; } }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else { fprintf(stderr, "moshid-plan: unknown option %s\n", a); usage(stderr); return 2; }
#undef NEEDV
    }
    if (!!preset == !!config) {
        fprintf(stderr, "moshid-plan: give exactly one of --preset and --config\n");
        usage(stderr);
        return 2;
    }
    if (gpu_gb && gpu_bytes) {
        fprintf(stderr, "moshid-plan: give at most one of --gpu-gb and --gpu-bytes\n");
        return 2;
    }
    lm_config c;
    lm_config_default(&c);
    const char *what = preset;
    if (preset) {
        if (!strcmp(preset, "personaplex")) pp = 1;
        else if (strcmp(preset, "7b") != 0) {
            fprintf(stderr, "moshid-plan: --preset: 7b or personaplex, not '%s'\n", preset);
            return 2;
        }
    } else {
        /* lm_config_load takes a missing file for the defaults: here that
         * would plan the wrong model */
        FILE *f = fopen(config, "rb");
        if (!f) {
            fprintf(stderr, "moshid-plan: %s: %s\n", config, strerror(errno));
            return 1;
        }
        fclose(f);
        ms_error err = {0};
        if (lm_config_load(&c, config, &err) != MS_OK) {
            fprintf(stderr, "moshid-plan: %s\n", err.msg);
            return 1;
        }
        what = config;
    }
    c.variant = pp ? LM_VARIANT_PERSONAPLEX : LM_VARIANT_KYUTAI;
    if (pp) c.dep_q = LM_MAX_DEP_Q;   /* PersonaPlex: 16 sub-steps (lm.h) */
    ms_error err = {0};
    if (lm_config_finish(&c, &err) != MS_OK) {
        fprintf(stderr, "moshid-plan: %s: %s\n", what, err.msg);
        return 1;
    }
    cu_plan_req r = {.slots = (int)slots, .context = (int)context, .snapshots = (int)snapshots,
                     .snap_positions = (int)snap_pos, .max_bucket = (int)bucket, .weight_bytes_per_el = 2,
                     .codec = codec};
    printf("model: %s (%s; dim %d, %d layers, dep_q %d, context %d), weights %s, K/V %s, codec %s\n", what,
           lm_variant_name(c.variant), c.dim, c.num_layers, c.dep_q, c.context, w8 ? "int8" : "bf16",
           kv8 ? "int8" : "bf16", codec ? "on the device" : "on the host (not counted)");
    if (table8) return print_table8(&c, &r);
    if (table) return print_table(&c, &r, w8, kv8);
    cu_plan p;
    if (plan8(&c, &r, w8, kv8, &p) != 0) {
        fprintf(stderr, "moshid-plan: the request is refused (slots 1..1024, snapshot positions <= context) "
                        "or its sizes overflow\n");
        return 1;
    }
    printf("plan for %d slot%s at context %d:\n", r.slots, r.slots == 1 ? "" : "s", r.context > 0 ? r.context : c.context);
    print_plan(&p, r.slots);
    if (gpu_gb || gpu_bytes) {
        size_t dev = gpu_bytes ? (size_t)gpu_bytes : (size_t)gpu_gb * 1000000000ull;
        int m = max_slots8(&c, &r, w8, kv8, dev);
        printf("most slots on %zu bytes (%.1f GiB): %d\n", dev, dev / GIB, m);
        if (m > 0) {
            cu_plan_req rm = r;
            rm.slots = m;
            if (plan8(&c, &rm, w8, kv8, &p) == 0) {
                printf("plan for %d slot%s:\n", m, m == 1 ? "" : "s");
                print_plan(&p, m);
            }
        }
    }
    return 0;
}
