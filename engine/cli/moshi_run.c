/* moshi_run.c - build/moshi-run: run recorded user codes through the LM.
 *
 *   moshi-run --lm DIR --codes-in FILE [--greedy | --seed N --temp T
 *             --temp-text T --topk K --topk-text K] [--tokenizer FILE]
 *             [--out FILE] [--variant kyutai|personaplex] [--threads N]
 *             [--logits-out FILE.safetensors] [--weights stored|bf16|int8]
 *             [--kv native|int8]
 *   PersonaPlex checkpoints (prime before the live steps, engine/prime.h):
 *             [--voice-codes FILE | --voice-saved FILE.safetensors]
 *             [--text-ids FILE] [--silence-tokens FILE] [--sine-tokens FILE]
 *             [--silence-frames N] [--prime-mode prefill|steps]
 *
 * FILE: one frame per line, n_q - dep_q (8) whitespace-separated user codes
 * (PersonaPlex: the 8 user codes, streams 9..16).
 * Output: JSON Lines, one object per step and nothing else:
 *   {"step": 0, "out": null}
 *   {"step": 1, "out": [text, audio_0, ..., audio_{dep_q-1}], "text": "piece"}
 * "out" is what the official LMGen.step returns (null while it returns
 * nothing); "text" only with --tokenizer ("" for the PAD and EPAD ids, as the
 * official server skips them). Notes go to stderr. Bad input exits 1 with a
 * message naming the file, line or tensor.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "lm.h"
#include "lmgen.h"
#include "log.h"
#include "prime_io.h"
#include "samp.h"
#include "st.h"
#include "spm.h"

/* Longest line of the codes file, bytes. */
#define RUN_MAX_LINE 4096
/* Most steps written to --logits-out (memory bound). */
#define RUN_MAX_LOGIT_STEPS 100000

static void usage(FILE *f) {
    fprintf(f,
            "usage: moshi-run --lm DIR --codes-in FILE [--greedy | --seed N --temp T --temp-text T\n"
            "                 --topk K --topk-text K] [--tokenizer FILE] [--out FILE]\n"
            "                 [--variant kyutai|personaplex] [--threads N] [--logits-out FILE]\n"
            "                 [--weights stored|bf16|int8] [--kv native|int8]\n"
            "  PersonaPlex prime: [--voice-codes FILE | --voice-saved FILE] [--text-ids FILE]\n"
            "                 [--silence-tokens FILE] [--sine-tokens FILE] [--silence-frames N]\n"
            "                 [--prime-mode prefill|steps]\n");
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* one line of codes: exactly n integers in [0, card) */
static int parse_codes(char *line, int n, int card, int *codes, const char *file, long lineno, ms_error *err) {
    char *p = line;
    int k = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p == '\n' || *p == 0) break;
        if (k == n) return ms_err_set(err, MS_ERR_FORMAT, "%s:%ld: more than %d codes", file, lineno, n);
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n'))
            return ms_err_set(err, MS_ERR_FORMAT, "%s:%ld: code %d: not an integer", file, lineno, k + 1);
        if (v < 0 || v >= card)
            return ms_err_set(err, MS_ERR_RANGE, "%s:%ld: code %d = %ld out of range (0..%d)", file, lineno, k + 1,
                              v, card - 1);
        codes[k++] = (int)v;
        p = end;
    }
    if (k != n) return ms_err_set(err, MS_ERR_FORMAT, "%s:%ld: %d codes, expected %d", file, lineno, k, n);
    return MS_OK;
}

/* read_line: one line (without its newline) into buf[0..max], bounded.
 * Returns 1 for a line, 0 at end of file, -1 when longer than max, -2 on
 * a NUL byte, -3 on a read error. */
static int read_line(FILE *f, char *buf, size_t max, size_t *len) {
    size_t n = 0;
    int ch, nul = 0;
    while ((ch = getc(f)) != EOF && ch != '\n') {
        if (ch == 0) nul = 1;
        if (n == max) return -1;
        buf[n++] = (char)ch;
    }
    if (ch == EOF && ferror(f)) return -3;
    if (ch == EOF && n == 0) return 0;
    buf[n] = 0;
    *len = n;
    return nul ? -2 : 1;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

typedef struct {
    const char *lm, *codes, *tokenizer, *out, *logits_out;
    int greedy, threads, have_samp;
    lm_variant variant;
    lm_weights weights;       /* --weights: the linear matrices' scheme (lm.h) */
    lm_kv kv;                 /* --kv: the K/V cache's precision (backend.h) */
    lm_samp samp;
    pp_prompt_paths pp;       /* PersonaPlex prime */
    int have_prime, prime_mode;
} run_opts;

static int parse_args(int argc, char **argv, run_opts *o) {
    lm_samp_defaults(&o->samp, 0);
    o->variant = LM_VARIANT_AUTO;
    o->pp.silence_frames = -1;
    o->prime_mode = PP_PRIME_PREFILL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
#define NEEDV() do { if (!v) { fprintf(stderr, "moshi-run: %s needs a value\n", a); return -1; } i++; } while (0)
#define BAD() do { fprintf(stderr, "moshi-run: %s: bad value \"%s\"\n", a, v); return -1; } while (0)
        if (!strcmp(a, "--lm")) { NEEDV(); o->lm = v; }
        else if (!strcmp(a, "--codes-in")) { NEEDV(); o->codes = v; }
        else if (!strcmp(a, "--tokenizer")) { NEEDV(); o->tokenizer = v; }
        else if (!strcmp(a, "--out")) { NEEDV(); o->out = v; }
        else if (!strcmp(a, "--logits-out")) { NEEDV(); o->logits_out = v; }
        else if (!strcmp(a, "--greedy")) o->greedy = 1;
        else if (!strcmp(a, "--seed")) {
            NEEDV();
            char *e;
            errno = 0;
            unsigned long long s = strtoull(v, &e, 10);
            if (errno || e == v || *e || v[0] == '-') BAD();
            o->samp.seed = s;
            o->have_samp = 1;
        }
        else if (!strcmp(a, "--temp")) { NEEDV(); if (parse_float(v, 0, 100, &o->samp.audio_temp)) BAD(); o->have_samp = 1; }
        else if (!strcmp(a, "--temp-text")) { NEEDV(); if (parse_float(v, 0, 100, &o->samp.text_temp)) BAD(); o->have_samp = 1; }
        else if (!strcmp(a, "--topk")) { NEEDV(); if (parse_long(v, 0, INT_MAX, &l)) BAD(); o->samp.audio_topk = (int)l; o->have_samp = 1; }
        else if (!strcmp(a, "--topk-text")) { NEEDV(); if (parse_long(v, 0, INT_MAX, &l)) BAD(); o->samp.text_topk = (int)l; o->have_samp = 1; }
        else if (!strcmp(a, "--threads")) { NEEDV(); if (parse_long(v, 0, 1024, &l)) BAD(); o->threads = (int)l; }
        else if (!strcmp(a, "--variant")) { NEEDV();
            if (!strcmp(v, "kyutai")) o->variant = LM_VARIANT_KYUTAI;
            else if (!strcmp(v, "personaplex")) o->variant = LM_VARIANT_PERSONAPLEX;
            else BAD(); }
        else if (!strcmp(a, "--weights")) { NEEDV(); if (lm_weights_parse(v, &o->weights)) BAD(); }
        else if (!strcmp(a, "--kv")) { NEEDV(); if (lm_kv_parse(v, &o->kv)) BAD(); }
        else if (!strcmp(a, "--voice-codes")) { NEEDV(); o->pp.voice_codes = v; o->have_prime = 1; }
        else if (!strcmp(a, "--voice-saved")) { NEEDV(); o->pp.voice_saved = v; o->have_prime = 1; }
        else if (!strcmp(a, "--text-ids")) { NEEDV(); o->pp.text_ids = v; o->have_prime = 1; }
        else if (!strcmp(a, "--silence-tokens")) { NEEDV(); o->pp.silence = v; o->have_prime = 1; }
        else if (!strcmp(a, "--sine-tokens")) { NEEDV(); o->pp.sine = v; o->have_prime = 1; }
        else if (!strcmp(a, "--silence-frames")) { NEEDV(); if (parse_long(v, 0, 1000, &l)) BAD(); o->pp.silence_frames = (int)l; o->have_prime = 1; }
        else if (!strcmp(a, "--prime-mode")) { NEEDV();
            if (!strcmp(v, "prefill")) o->prime_mode = PP_PRIME_PREFILL;
            else if (!strcmp(v, "steps")) o->prime_mode = PP_PRIME_STEPS;
            else BAD(); }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        else { fprintf(stderr, "moshi-run: unknown option %s\n", a); usage(stderr); return -1; }
#undef NEEDV
#undef BAD
    }
    if (!o->lm || !o->codes) {
        fprintf(stderr, "moshi-run: --lm and --codes-in are required\n");
        usage(stderr);
        return -1;
    }
    if (o->greedy && o->have_samp) {
        fprintf(stderr, "moshi-run: --greedy excludes --seed/--temp/--topk options\n");
        return -1;
    }
    if (o->greedy) lm_samp_greedy(&o->samp);
    return 0;
}

int main(int argc, char **argv) {
    run_opts o = {0};
    if (parse_args(argc, argv, &o)) return 2;
    ms_error err = {0};
    int rc = 1;
    lm_backend *b = NULL;
    FILE *in = NULL, *out = stdout;
    float *tl = NULL, *al = NULL;
    char *line = NULL;
    pp_prompt_buf pb;
    memset(&pb, 0, sizeof pb);
    spm_model *spm = NULL;
    if (o.tokenizer) {
        spm = spm_load(o.tokenizer, &err);
        if (!spm) goto fail;
    }
    in = fopen(o.codes, "r");
    if (!in) {
        ms_err_set(&err, MS_ERR_IO, "%s: cannot open: %s", o.codes, strerror(errno));
        goto fail;
    }
    lm_backend_opts bo = {.max_slots = 1, .threads = o.threads, .variant = o.variant, .weights = o.weights, .kv = o.kv};
    b = lm_backend_open(&lm_cpu_backend, o.lm, &bo, &err);
    if (!b) goto fail;
    const lm_config *c = &b->cfg;
    int n_codes = c->n_user;   /* user codes per line */
    if (c->variant == LM_VARIANT_PERSONAPLEX) {
        if (pp_check_config(c, &err)) goto fail;
        n_codes = PP_SIDE_CODEBOOKS;
    } else if (o.have_prime) {
        ms_err_set(&err, MS_ERR_ARG, "%s: prime options need a PersonaPlex checkpoint (variant %s)", o.lm,
                   lm_variant_name(c->variant));
        goto fail;
    }
    if (n_codes < 1) {
        ms_err_set(&err, MS_ERR_UNSUPPORTED, "%s: n_q = dep_q = %d: this model takes no user input", o.lm, c->n_q);
        goto fail;
    }
    if (o.out && !(out = fopen(o.out, "w"))) {
        out = stdout;
        ms_err_set(&err, MS_ERR_IO, "%s: cannot create: %s", o.out, strerror(errno));
        goto fail;
    }
    lm_backend_stats bst;
    lm_backend_stats_get(b, &bst);
    fprintf(stderr,
            "moshi-run: model %s variant=%s dim=%d layers=%d dep_q=%d card=%d text_card=%d threads=%d %s weights=%s "
            "kv=%s\n",
            o.lm, lm_variant_name(c->variant), c->dim, c->num_layers, c->dep_q, c->card, c->text_card, bst.threads,
            o.greedy ? "greedy" : "sampling", bst.weights_scheme ? bst.weights_scheme : "?",
            bst.kv_scheme ? bst.kv_scheme : "?");
    lmgen_slot g;
    lmgen_init(&g, c, 0, &o.samp);
    lmgen_slot *gp = &g;
    if (o.have_prime) {
        double p0 = ms_mono_ms();
        if (pp_prompt_load(&pb, &o.pp, c, &err) || pp_prime(b, &g, &pb.p, (pp_prime_mode)o.prime_mode, &err))
            goto fail;
        double p1 = ms_mono_ms();
        fprintf(stderr, "moshi-run: primed by %s: offset %lld, %lld positions in %.3f s\n",
                o.prime_mode == PP_PRIME_PREFILL ? "prefill" : "steps", (long long)g.offset,
                (long long)lm_backend_pos(b, 0), (p1 - p0) / 1e3);
    }
    line = malloc(RUN_MAX_LINE + 1);
    int codes[LM_MAX_NQ], frame[1 + LM_MAX_DEP_Q], has;
    size_t tl_cap = 0;
    long lineno = 0;
    int64_t step = 0;
    double t0 = ms_mono_ms();
    if (!line) { ms_err_set(&err, MS_ERR_NOMEM, "out of memory"); goto fail; }
    for (;;) {
        size_t len;
        int lr = read_line(in, line, RUN_MAX_LINE, &len);
        if (lr == 0) break;
        lineno++;
        if (lr == -1) {
            ms_err_set(&err, MS_ERR_LIMIT, "%s:%ld: line longer than %d bytes", o.codes, lineno, RUN_MAX_LINE);
            goto fail;
        }
        if (lr == -2) {
            ms_err_set(&err, MS_ERR_FORMAT, "%s:%ld: NUL byte in line", o.codes, lineno);
            goto fail;
        }
        if (lr == -3) {
            ms_err_set(&err, MS_ERR_IO, "%s:%ld: read error: %s", o.codes, lineno, strerror(errno));
            goto fail;
        }
        if (parse_codes(line, n_codes, c->card, codes, o.codes, lineno, &err)) goto fail;
        float *tlp = NULL, *alp = NULL;
        if (o.logits_out) {
            if (step >= RUN_MAX_LOGIT_STEPS) {
                ms_err_set(&err, MS_ERR_LIMIT, "--logits-out: more than %d steps", RUN_MAX_LOGIT_STEPS);
                goto fail;
            }
            if ((size_t)step + 1 > tl_cap) {
                size_t cap = tl_cap ? 2 * tl_cap : 64;
                float *a = realloc(tl, cap * c->text_card * sizeof(float));
                if (a) tl = a;
                float *bb = a ? realloc(al, cap * c->dep_q * c->card * sizeof(float)) : NULL;
                if (bb) al = bb;
                if (!a || !bb) { ms_err_set(&err, MS_ERR_NOMEM, "out of memory"); goto fail; }
                tl_cap = cap;
            }
            tlp = tl + (size_t)step * c->text_card;
            alp = al + (size_t)step * c->dep_q * c->card;
        }
        if (lmgen_step_batch(b, &gp, 1, codes, frame, &has, tlp, alp, &err)) {
            ms_err_prefix(&err, "%s:%ld", o.codes, lineno);
            goto fail;
        }
        fprintf(out, "{\"step\": %lld, \"out\": ", (long long)step);
        if (!has) {
            fputs("null", out);
        } else {
            fputc('[', out);
            for (int k = 0; k <= c->dep_q; k++) fprintf(out, k ? ", %d" : "%d", frame[k]);
            fputc(']', out);
            if (spm) {
                const char *piece = frame[0] == 0 || frame[0] == c->existing_text_padding_id ? "" : spm_piece(spm, frame[0]);
                fputs(", \"text\": ", out);
                json_string(out, piece ? piece : "");
            }
        }
        fputs("}\n", out);
        step++;
    }
    double secs = (ms_mono_ms() - t0) / 1e3;
    fprintf(stderr, "moshi-run: %lld steps in %.3f s (%.1f ms/step)\n", (long long)step, secs,
            step ? 1000 * secs / step : 0.0);
    if (o.logits_out) {
        st_writer *w = st_writer_create();
        int64_t s1[2] = {step, c->text_card}, s2[3] = {step, c->dep_q, c->card};
        int wr = !w || st_writer_add(w, "text_logits", ST_F32, 2, s1, tl) ||
                 st_writer_add(w, "audio_logits", ST_F32, 3, s2, al) || st_writer_save(w, o.logits_out, &err);
        st_writer_free(w);
        if (wr) {
            if (!err.code) ms_err_set(&err, MS_ERR_IO, "%s: cannot write", o.logits_out);
            goto fail;
        }
    }
    if (out != stdout && fclose(out) != 0) {
        out = stdout;
        ms_err_set(&err, MS_ERR_IO, "%s: write error", o.out);
        goto fail;
    }
    out = stdout;
    if (fflush(stdout) != 0) { ms_err_set(&err, MS_ERR_IO, "stdout: write error"); goto fail; }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "moshi-run: error: %s\n", err.msg[0] ? err.msg : ms_strerror(err.code));
    (void)json_string;
    if (out != stdout) fclose(out);
    if (in) fclose(in);
    free(line);
    free(tl);
    free(al);
    pp_prompt_buf_free(&pb);
    lm_backend_close(b);
    spm_free(spm);
    return rc;
}
