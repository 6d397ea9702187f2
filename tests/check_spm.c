/* check_spm.c - SentencePiece: the model reader (decoding) and the encoder.
 *
 * Reader (spm.h): a model trained at test time by Debian's spm_train, its
 * pieces compared with spm_export_vocab's; models built by hand (unknown
 * fields, wire types); hostile files.
 *
 * Encoder (spm_enc.h, Debian's libsentencepiece 0.1.97): the committed
 * corpus of tests/fixtures/spm (over 1000 strings, tests/fixtures/gen_spm.py)
 * under the committed models, id for id against the references of Python's
 * encode() (Debian's python3-sentencepiece 0.1.97 and PyPI's 0.2.3, which
 * agreed on every string when generated); ids pinned in this file; hostile
 * text (invalid UTF-8, NUL, length and output limits) and model files;
 * several threads encoding with one model. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>
#include <pthread.h>

#include "check_lm_util.h"
#include "check_main.h"
#include "json.h"
#include "spm.h"
#include "spm_enc.h"

/* Train a model of vocab_size pieces on a generated corpus; returns the
 * path of the .model file (static buffer). */
static const char *train(const char *type, int vocab, int byte_fallback, const char *norm) {
    /* words of 1 to 3 syllables (some not ASCII): a vocabulary rich enough
     * for a few hundred pieces */
    static const char *syl[] = {"ka", "mo", "shi", "ta", "ne", "ri", "lu", "po", "ve", "zi", "an",
                                "or", "el", "um", "st", "caf\xC3\xA9", "\xC3\xBC", "\xC3\x9F" "a",
                                "\xE6\x97\xA5", "the", "ing", "qu", "br", "x"};
    const unsigned nsyl = sizeof syl / sizeof syl[0];
    char corpus[128], cmd[1024];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", check_tmp);
    FILE *f = fopen(corpus, "w");
    ck_assert_ptr_nonnull(f);
    unsigned s = 7;
    for (int line = 0; line < 4000; line++) {
        s = s * 1103515245u + 12345u;
        int n = 4 + (int)((s >> 16) % 9);
        for (int w = 0; w < n; w++) {
            if (w) fputc(' ', f);
            s = s * 1103515245u + 12345u;
            int k = 1 + (int)((s >> 16) % 3);
            for (int j = 0; j < k; j++) {
                s = s * 1103515245u + 12345u;
                fputs(syl[(s >> 16) % nsyl], f);
            }
        }
        fputc('\n', f);
    }
    fclose(f);
    static char model[160];
    snprintf(model, sizeof model, "%s/m_%s.model", check_tmp, type);
    snprintf(cmd, sizeof cmd,
             "spm_train --input='%s' --model_prefix='%s/m_%s' --model_type=%s --vocab_size=%d "
             "--character_coverage=1.0 --byte_fallback=%s --normalization_rule_name=%s --minloglevel=2 "
             ">'%s/train.log' 2>&1",
             corpus, check_tmp, type, type, vocab, byte_fallback ? "true" : "false", norm, check_tmp);
    ck_assert_msg(system(cmd) == 0, "spm_train failed (Debian package sentencepiece); see %s/train.log", check_tmp);
    return model;
}

/* Compare every piece with spm_export_vocab's list ("piece\tscore" lines). */
static int compare_with_export(const char *model) {
    char vocab[200], cmd[512];
    snprintf(vocab, sizeof vocab, "%s.vocab.txt", model);
    snprintf(cmd, sizeof cmd, "spm_export_vocab --model='%s' --output='%s' >/dev/null 2>&1", model, vocab);
    ck_assert_int_eq(system(cmd), 0);
    ms_error e = {0};
    spm_model *m = spm_load(model, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    size_t n;
    char *txt = (char *)check_read_file(vocab, &n);
    int id = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n"), id++) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = 0;
        /* expected: the exported piece with U+2581 -> ' ' */
        char want[256];
        size_t o = 0;
        for (char *c = line; *c; c++) {
            if (!strncmp(c, "\xE2\x96\x81", 3)) want[o++] = ' ', c += 2;
            else want[o++] = *c;
        }
        want[o] = 0;
        const char *got = spm_piece(m, id);
        ck_assert_ptr_nonnull(got);
        ck_assert_msg(strcmp(got, want) == 0, "piece %d: got '%s' want '%s'", id, got, want);
    }
    ck_assert_int_eq(spm_size(m), id);
    ck_assert_ptr_null(spm_piece(m, -1));
    ck_assert_ptr_null(spm_piece(m, id));
    ck_assert_str_eq(spm_piece(m, 0), "<unk>");
    spm_free(m);
    free(txt);
    return id;
}

START_TEST(test_trained_models) {
    check_tmp_make();
    int n = compare_with_export(train("unigram", 400, 1, "nmt_nfkc"));
    ck_assert_int_eq(n, 400);
    n = compare_with_export(train("bpe", 120, 0, "identity"));
    ck_assert_int_eq(n, 120);
    check_tmp_remove();
}
END_TEST

/* ---- hand-built protobufs ---- */
typedef struct { uint8_t b[4096]; size_t n; } pbw;
static void w_varint(pbw *w, uint64_t v) {
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        w->b[w->n++] = (uint8_t)(c | (v ? 0x80 : 0));
    } while (v);
}
static void w_key(pbw *w, uint32_t f, int wt) { w_varint(w, (uint64_t)f << 3 | (unsigned)wt); }
static void w_bytes(pbw *w, uint32_t f, const void *s, size_t n) {
    w_key(w, f, 2);
    w_varint(w, n);
    memcpy(w->b + w->n, s, n);
    w->n += n;
}
static void w_piece(pbw *w, const char *text) { /* a full SentencePiece message */
    pbw p = {.n = 0};
    w_bytes(&p, 1, text, strlen(text));
    w_key(&p, 2, 5);
    memcpy(p.b + p.n, "\0\0\x80\xbf", 4); /* score -1.0 */
    p.n += 4;
    w_key(&p, 3, 0);
    w_varint(&p, 1);
    w_bytes(w, 1, p.b, p.n);
}

static spm_model *load_buf(const void *b, size_t n, ms_error *e) {
    char path[128];
    snprintf(path, sizeof path, "%s/x.model", check_tmp);
    check_write_file(path, b, n);
    return spm_load(path, e);
}

static void expect_refused(const pbw *w, int code, const char *needle) {
    ms_error e = {0};
    spm_model *m = load_buf(w->b, w->n, &e);
    ck_assert_msg(m == NULL, "accepted (%d pieces), wanted '%s'", spm_size(m), needle);
    ck_assert_msg(e.code == code, "code %d want %d (%s)", e.code, code, e.msg);
    ck_assert_msg(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
}

START_TEST(test_hand_built) {
    check_tmp_make();
    ms_error e = {0};
    pbw w = {.n = 0};
    /* unknown fields of every wire type around the pieces */
    w_key(&w, 2, 2); w_varint(&w, 3); memcpy(w.b + w.n, "abc", 3); w.n += 3; /* trainer_spec */
    w_piece(&w, "<unk>");
    w_key(&w, 7, 0); w_varint(&w, 123456789);
    w_key(&w, 8, 1); memset(w.b + w.n, 1, 8); w.n += 8;
    w_piece(&w, "\xE2\x96\x81hello\xE2\x96\x81\xE2\x96\x81");
    w_key(&w, 9, 5); memset(w.b + w.n, 2, 4); w.n += 4;
    /* a piece message whose text field repeats: the last wins; unknown inner field */
    pbw p = {.n = 0};
    w_bytes(&p, 1, "first", 5);
    w_key(&p, 11, 0); w_varint(&p, 5);
    w_bytes(&p, 1, "second", 6);
    w_bytes(&w, 1, p.b, p.n);
    spm_model *m = load_buf(w.b, w.n, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    ck_assert_int_eq(spm_size(m), 3);
    ck_assert_str_eq(spm_piece(m, 0), "<unk>");
    ck_assert_str_eq(spm_piece(m, 1), " hello  ");
    ck_assert_str_eq(spm_piece(m, 2), "second");
    spm_free(m);

    /* hostile */
    pbw h = {.n = 0};
    expect_refused(&h, MS_ERR_FORMAT, "no pieces"); /* empty file */
    w_key(&h, 2, 0); w_varint(&h, 1);
    expect_refused(&h, MS_ERR_FORMAT, "no pieces"); /* valid protobuf, no pieces */
    h.n = 0;
    memset(h.b, 0xff, 11); h.n = 11;
    expect_refused(&h, MS_ERR_FORMAT, "varint");
    h.n = 0;
    w_key(&h, 1, 2); memcpy(h.b + h.n, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10); h.n += 10;
    expect_refused(&h, MS_ERR_FORMAT, "varint longer than 64 bits");
    h.n = 0;
    w_key(&h, 1, 2); w_varint(&h, 1ull << 40); /* huge length */
    expect_refused(&h, MS_ERR_FORMAT, "length past the end");
    h.n = 0;
    w_key(&h, 1, 2); w_varint(&h, 100); h.b[h.n++] = 0x0a;
    expect_refused(&h, MS_ERR_FORMAT, "length past the end");
    h.n = 0;
    w_key(&h, 4, 3); /* start group */
    expect_refused(&h, MS_ERR_FORMAT, "wire type");
    h.n = 0;
    w_key(&h, 5, 6); /* wire type 6 does not exist */
    expect_refused(&h, MS_ERR_FORMAT, "wire type");
    h.n = 0;
    h.b[h.n++] = 0x02; /* field number 0 */
    expect_refused(&h, MS_ERR_FORMAT, "field number");
    h.n = 0;
    w_key(&h, 1, 0); w_varint(&h, 5); /* pieces as a varint */
    expect_refused(&h, MS_ERR_FORMAT, "wrong wire type");
    h.n = 0;
    w_key(&h, 7, 1); memset(h.b + h.n, 0, 5); h.n += 5; /* truncated fixed64 */
    expect_refused(&h, MS_ERR_FORMAT, "truncated");
    h.n = 0; w_piece(&h, "ok"); w_piece(&h, "a\xC3"); /* invalid UTF-8 */
    expect_refused(&h, MS_ERR_FORMAT, "UTF-8");
    h.n = 0; w_piece(&h, "ok"); p.n = 0; w_bytes(&p, 1, "a\0b", 3); w_bytes(&h, 1, p.b, p.n);
    expect_refused(&h, MS_ERR_FORMAT, "UTF-8"); /* NUL inside a piece */
    h.n = 0; p.n = 0; w_key(&p, 2, 5); memset(p.b + p.n, 0, 4); p.n += 4; w_bytes(&h, 1, p.b, p.n);
    expect_refused(&h, MS_ERR_FORMAT, "empty piece"); /* no text */
    h.n = 0; p.n = 0; w_key(&p, 2, 0); w_varint(&p, 1); w_bytes(&h, 1, p.b, p.n);
    expect_refused(&h, MS_ERR_FORMAT, "score with a wrong wire type");
    h.n = 0; p.n = 0;
    static char longp[SPM_MAX_PIECE_BYTES + 2];
    memset(longp, 'x', SPM_MAX_PIECE_BYTES + 1);
    {   /* a piece over the limit needs a bigger buffer */
        size_t L = SPM_MAX_PIECE_BYTES + 1;
        uint8_t *big = malloc(L + 32);
        size_t o = 0;
        big[o++] = 0x0a; /* field 1, LEN: the SentencePiece message */
        size_t inner = 1 + 2 + L; /* key + 2-byte varint + text */
        big[o++] = (uint8_t)(0x80 | (inner & 0x7f)); big[o++] = (uint8_t)(inner >> 7);
        big[o++] = 0x0a;
        big[o++] = (uint8_t)(0x80 | (L & 0x7f)); big[o++] = (uint8_t)(L >> 7);
        memcpy(big + o, longp, L); o += L;
        m = load_buf(big, o, &e);
        ck_assert_ptr_null(m);
        ck_assert_int_eq(e.code, MS_ERR_LIMIT);
        free(big);
    }
    /* missing file, a directory, a file over the size limit (sparse) */
    ck_assert_ptr_null(spm_load("/nonexistent/x.model", &e));
    ck_assert_int_eq(e.code, MS_ERR_IO);
    ck_assert_ptr_null(spm_load(check_tmp, &e));
    ck_assert_int_eq(e.code, MS_ERR_IO);
    char path[128];
    snprintf(path, sizeof path, "%s/huge.model", check_tmp);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)SPM_MAX_FILE_BYTES + 1), 0);
    close(fd);
    ck_assert_ptr_null(spm_load(path, &e));
    ck_assert_int_eq(e.code, MS_ERR_LIMIT);
    check_tmp_remove();
}
END_TEST

START_TEST(test_truncated_and_random) {
    check_tmp_make();
    /* identity normalisation: no 240 KB character map, a small file */
    const char *model = train("unigram", 300, 0, "identity");
    ms_error e = {0};
    spm_model *full = spm_load(model, &e);
    ck_assert_ptr_nonnull(full);
    size_t n;
    uint8_t *b = check_read_file(model, &n);
    /* Every cut either is refused or (at a field boundary) yields a valid
     * model whose pieces are a prefix of the full list. */
    int refused = 0, accepted = 0;
    printf("model of %zu bytes\n", n);
    for (size_t cut = 0; cut < n; cut += (cut < 3000 ? 1 : 61)) {
        spm_model *m = load_buf(b, cut, &e);
        if (!m) {
            refused++;
            ck_assert(e.code == MS_ERR_FORMAT);
            continue;
        }
        accepted++;
        ck_assert_int_le(spm_size(m), spm_size(full));
        for (int i = 0; i < spm_size(m); i++) ck_assert_str_eq(spm_piece(m, i), spm_piece(full, i));
        spm_free(m);
    }
    printf("truncations: %d refused, %d accepted as shorter models\n", refused, accepted);
    ck_assert_int_gt(refused, accepted);
    /* random bytes and random corruptions never crash and stay consistent */
    srand(3);
    uint8_t *c = malloc(n);
    for (int it = 0; it < 300; it++) {
        memcpy(c, b, n);
        for (int k = 0; k < 1 + it % 8; k++) c[(size_t)rand() % (n < 3000 ? n : 3000)] = (uint8_t)rand();
        spm_model *m = load_buf(c, n, &e);
        if (m) {
            ck_assert_int_gt(spm_size(m), 0);
            for (int i = 0; i < spm_size(m); i++) ck_assert_ptr_nonnull(spm_piece(m, i));
        }
        spm_free(m);
        for (size_t i = 0; i < 2000; i++) c[i] = (uint8_t)rand();
        m = load_buf(c, 2000, &e);
        spm_free(m);
    }
    free(c);
    free(b);
    spm_free(full);
    check_tmp_remove();
}
END_TEST

/* ---- the encoder (spm_enc.h) ---------------------------------------- */

#define SPM_FIX_DIR "tests/fixtures/spm"
static const char *const enc_models[] = {"demo", "uni_bf"};
#define ENC_NMODELS 2

/* printable excerpt of b[0..n) for messages: at most 60 bytes, bytes under
 * 0x20 and 0x7F as \xHH (static buffer) */
static const char *excerpt(const char *b, size_t n) {
    static char out[300];
    size_t o = 0;
    for (size_t i = 0; i < n && i < 60; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c < 0x20 || c == 0x7f || c == '\\') o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    if (n > 60) o += (size_t)snprintf(out + o, sizeof out - o, "... (%zu bytes)", n);
    out[o] = 0;
    return out;
}

typedef struct { char *b; size_t n; } span;

/* unescape s[0..n) of strings.txt (\\ and \xHH) into a fresh buffer */
static span unesc(const char *s, size_t n, size_t repeat) {
    char *u = malloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') { u[k++] = s[i]; continue; }
        ck_assert_msg(i + 1 < n, "strings.txt: backslash at the end of a field");
        if (s[i + 1] == '\\') { u[k++] = '\\'; i++; continue; }
        ck_assert_msg(s[i + 1] == 'x' && i + 3 < n, "strings.txt: bad escape");
        char hex[3] = {s[i + 2], s[i + 3], 0};
        u[k++] = (char)strtol(hex, NULL, 16);
        i += 3;
    }
    span r = {malloc(k * repeat + 1), k * repeat};
    for (size_t j = 0; j < repeat; j++) memcpy(r.b + j * k, u, k);
    r.b[r.n] = 0;
    free(u);
    return r;
}

/* strings.txt -> array of spans (*count of them); free with free_strings */
static span *read_strings(size_t *count) {
    size_t len;
    char *txt = slurp(SPM_FIX_DIR "/strings.txt", &len);
    ck_assert_msg(txt != NULL, "cannot read %s/strings.txt", SPM_FIX_DIR);
    size_t cap = 2048, n = 0;
    span *v = malloc(cap * sizeof *v);
    for (char *line = txt, *end; line < txt + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(txt + len - line));
        if (!end) end = txt + len;
        size_t ll = (size_t)(end - line);
        if (ll == 0 || line[0] == '#') continue;
        ck_assert_msg(n < cap, "strings.txt: more than %zu strings", cap);
        ck_assert_msg(ll >= 2 && line[1] == '\t', "strings.txt line %zu: no kind", n);
        if (line[0] == 's') {
            v[n++] = unesc(line + 2, ll - 2, 1);
        } else {
            ck_assert_msg(line[0] == 'r', "strings.txt line %zu: kind %c", n, line[0]);
            char *tab = memchr(line + 2, '\t', ll - 2);
            ck_assert_ptr_nonnull(tab);
            size_t rep = strtoul(line + 2, NULL, 10);
            v[n++] = unesc(tab + 1, (size_t)(end - tab - 1), rep);
        }
    }
    free(txt);
    *count = n;
    return v;
}

static void free_strings(span *v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i].b);
    free(v);
}

/* FNV-1a 64 of ids as int32 little-endian (gen_spm.py's fnv64) */
static uint64_t fnv64(const int *ids, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xff)) * 0x100000001B3ull;
    return h;
}

/* One reference field ("N [~HASH] ids..."): n, the ids written (*nw of
 * them, all N unless hashed) and the hash when there is one. */
typedef struct { size_t n, nw; int has_hash; uint64_t hash; int *ids; } ref_ids;

static const char *parse_field(const char *p, ref_ids *r) {
    char *e;
    r->n = strtoul(p, &e, 10);
    ck_assert_msg(e != p, "ids file: no count");
    p = e;
    r->has_hash = 0;
    while (*p == ' ') p++;
    if (*p == '~') {
        r->has_hash = 1;
        r->hash = strtoull(p + 1, &e, 16);
        p = e;
    }
    r->ids = malloc((r->n + 1) * sizeof *r->ids);
    r->nw = 0;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == '\t' || *p == '\n' || *p == 0) break;
        long v = strtol(p, &e, 10);
        ck_assert_msg(e != p, "ids file: bad id at '%.10s'", p);
        ck_assert_msg(r->nw < r->n, "ids file: more ids than the count %zu", r->n);
        r->ids[r->nw++] = (int)v;
        p = e;
    }
    ck_assert_msg(r->has_hash ? r->nw < r->n : r->nw == r->n, "ids file: %zu ids for a count of %zu", r->nw, r->n);
    return p;
}

static spm_enc *enc_open(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.model", SPM_FIX_DIR, name);
    ms_error e = {0};
    spm_enc *enc = spm_enc_load(path, &e);
    ck_assert_msg(enc != NULL, "%s: %s", path, e.msg);
    return enc;
}

/* encode b[0..n) into a fresh array (*out, *nout); asserts MS_OK */
static void enc_all(const spm_enc *enc, const char *b, size_t n, int **out, size_t *nout) {
    size_t cap = 2 * n + 16, got = 0;
    int *ids = malloc(cap * sizeof *ids);
    ms_error e = {0};
    int rc = spm_encode(enc, b, n, ids, cap, &got, &e);
    ck_assert_msg(rc == MS_OK, "'%s': %s (%s)", excerpt(b, n), ms_err_name(rc), e.msg);
    *out = ids;
    *nout = got;
}

START_TEST(test_enc_manifest) {
    char *txt;
    size_t len;
    txt = slurp(SPM_FIX_DIR "/MANIFEST.json", &len);
    ck_assert_msg(txt != NULL, "no %s/MANIFEST.json (tests/fixtures/gen_spm.py writes it)", SPM_FIX_DIR);
    ms_error e = {0};
    js_value *root = js_parse(txt, len, &e);
    ck_assert_msg(root != NULL, "MANIFEST.json: %s", e.msg);
    const js_value *v = js_get(root, "versions");
    ck_assert_str_eq(js_get(v, "pypi_sentencepiece")->str, "0.2.3");
    ck_assert_str_eq(js_get(v, "debian_sentencepiece")->str, "0.1.97");
    /* every file listed, with its size and sha256; nothing unlisted */
    const js_value *files = js_get(root, "files");
    int nf = check_manifest_files(SPM_FIX_DIR, ".", files);
    DIR *d = opendir(SPM_FIX_DIR);
    ck_assert_ptr_nonnull(d);
    int seen = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "MANIFEST.json")) continue;
        ck_assert_msg(js_get(files, de->d_name) != NULL, "%s/%s is not in the manifest", SPM_FIX_DIR, de->d_name);
        seen++;
    }
    closedir(d);
    ck_assert_int_eq(seen, nf);
    size_t ns;
    span *strs = read_strings(&ns);
    ck_assert_int_eq((int64_t)ns, js_get(js_get(root, "strings"), "count")->i);
    ck_assert_uint_ge(ns, 1000);
    free_strings(strs, ns);
    for (int m = 0; m < ENC_NMODELS; m++) {
        const js_value *mv = js_get(js_get(root, "models"), enc_models[m]);
        ck_assert_msg(mv != NULL, "model %s not in the manifest", enc_models[m]);
        printf("%s: %lld pieces, %lld strings where PyPI 0.2.3 and Debian 0.1.97 differ\n", enc_models[m],
               (long long)js_get(mv, "pieces")->i, (long long)js_get(mv, "differences")->i);
    }
    printf("manifest: %d files checked, %zu strings\n", nf, ns);
    js_free(root);
    free(txt);
}
END_TEST

/* Every string of the corpus under every model: the ids of Debian's
 * library (field 1 of the .ids file). A string where PyPI 0.2.3 differed
 * (field 2) is counted and printed, and the C shim must still give
 * Debian's ids: it links Debian's libsentencepiece. */
START_TEST(test_enc_references) {
    size_t ns;
    span *strs = read_strings(&ns);
    for (int m = 0; m < ENC_NMODELS; m++) {
        spm_enc *enc = enc_open(enc_models[m]);
        char path[256];
        snprintf(path, sizeof path, "%s/%s.model", SPM_FIX_DIR, enc_models[m]);
        ms_error e = {0};
        spm_model *dec = spm_load(path, &e);
        ck_assert_msg(dec != NULL, "%s", e.msg);
        ck_assert_int_eq(spm_enc_size(enc), spm_size(dec)); /* both sides read the same pieces */
        snprintf(path, sizeof path, "%s/%s.ids", SPM_FIX_DIR, enc_models[m]);
        size_t len;
        char *txt = slurp(path, &len);
        ck_assert_msg(txt != NULL, "cannot read %s", path);
        size_t i = 0, nids = 0, ndiff = 0, nhashed = 0;
        for (char *line = txt; line < txt + len; line = strchr(line, '\n') + 1) {
            if (*line == '#') continue;
            ck_assert_msg(i < ns, "%s: more lines than strings", path);
            ref_ids want, pypi = {0};
            const char *p = parse_field(line, &want);
            if (*p == '\t') {
                ndiff++;
                parse_field(p + 1, &pypi);
                free(pypi.ids);
            }
            int *got;
            size_t ngot;
            enc_all(enc, strs[i].b, strs[i].n, &got, &ngot);
            size_t k = 0;
            while (k < want.nw && k < ngot && got[k] == want.ids[k]) k++;
            ck_assert_msg(k == want.nw && ngot == want.n && (!want.has_hash || fnv64(got, ngot) == want.hash),
                          "%s string %zu '%s': %zu ids, want %zu; first difference at id %zu (got %d, want %d)%s",
                          enc_models[m], i, excerpt(strs[i].b, strs[i].n), ngot, want.n, k,
                          k < ngot ? got[k] : -1, k < want.nw ? want.ids[k] : -1,
                          k == want.nw && want.has_hash ? " (past the ids written: the hash differs)" : "");
            for (size_t j = 0; j < ngot; j++) ck_assert_ptr_nonnull(spm_piece(dec, got[j]));
            nids += ngot;
            nhashed += (size_t)want.has_hash;
            free(got);
            free(want.ids);
            i++;
        }
        ck_assert_msg(i == ns, "%s: %zu lines for %zu strings", path, i, ns);
        printf("%s: %zu strings, %zu ids equal to Debian 0.1.97's (%zu long lists by count, prefix and hash); "
               "%zu strings where PyPI 0.2.3 differs\n",
               enc_models[m], ns, nids, nhashed, ndiff);
        free(txt);
        spm_free(dec);
        spm_enc_free(enc);
    }
    free_strings(strs, ns);
}
END_TEST

/* Ids pinned here, not in the fixtures: a change of the library (or a
 * regenerated fixture) cannot pass unnoticed. Python's encode() under
 * tests/fixtures/spm/{demo,uni_bf}.model, the same from PyPI 0.2.3 and
 * Debian 0.1.97 (`gen_spm.py --pinned` prints this table). */
typedef struct { const char *text; size_t len, n; int ids[40]; } pinned;
static const pinned pin_demo[] = {
    {"Hello world", 11, 7, {69, 164, 22, 157, 18, 35, 24}},
    {"Hello, and welcome to the demo voice of moshid.", 47, 17, {69, 164, 22, 5, 10, 169, 185, 33, 8, 115, 75, 14, 13, 96, 192, 229, 6}},
    {"<system> You are a helpful assistant. <system>", 46, 38, {4, 0, 7, 16, 7, 11, 9, 54, 0, 4, 0, 88, 4, 59, 12, 60, 9, 35, 211, 13, 61, 12, 7, 7, 26, 11, 154, 11, 6, 4, 0, 7, 16, 7, 11, 9, 54, 0}},
    {"", 0, 0, {}},
    {" ", 1, 0, {}},
    {"   leading and trailing   ", 26, 10, {4, 53, 65, 24, 55, 10, 161, 19, 35, 55}},
    {"a\011b\012c", 5, 3, {12, 86, 234}},
    {"a\000b", 3, 3, {12, 0, 258}},
    {"\357\275\210\357\275\205\357\275\214\357\275\214\357\275\217 \357\274\267\357\274\257\357\274\262\357\274\254\357\274\244", 31, 8, {60, 164, 22, 144, 205, 0, 202, 201}},
    {"\357\254\201ne \302\275 x\302\262 \342\221\240", 16, 10, {4, 13, 56, 4, 0, 4, 72, 0, 4, 0}},
    {"caf\303\251", 5, 3, {58, 13, 0}},
    {"cafe\314\201", 6, 3, {58, 13, 0}},
    {"\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210", 24, 2, {4, 0}},
    {"\344\275\240\345\245\275\357\274\214\344\270\226\347\225\214", 15, 4, {4, 0, 5, 0}},
    {"\360\237\230\200\360\237\221\215\360\237\217\275", 12, 2, {4, 0}},
    {"\320\237\321\200\320\270\320\262\320\265\321\202, \320\274\320\270\321\200", 20, 5, {4, 0, 5, 4, 0}},
    {"1,234.50 \342\202\254 at 10:30", 21, 12, {4, 0, 5, 0, 6, 0, 4, 0, 12, 11, 4, 0}},
    {"don't stop!!!", 13, 8, {126, 17, 0, 11, 23, 11, 141, 0}},
    {"e\314\201\314\201\314\201", 7, 2, {4, 0}},
    {"\357\273\277\342\200\213x\343\200\200y", 11, 4, {4, 72, 4, 16}},
};
static const pinned pin_bf[] = {
    {"Hello world", 11, 5, {395, 616, 283, 363, 420}},
    {"Hello, and welcome to the demo voice of moshid.", 47, 19, {395, 616, 260, 266, 614, 377, 630, 263, 305, 264, 539, 401, 259, 280, 259, 641, 584, 273, 261}},
    {"<system> You are a helpful assistant. <system>", 46, 35, {259, 689, 262, 271, 378, 263, 310, 690, 259, 92, 353, 259, 327, 268, 381, 312, 364, 284, 621, 268, 262, 262, 336, 267, 334, 267, 261, 259, 689, 262, 271, 378, 263, 310, 690}},
    {"", 0, 0, {}},
    {" ", 1, 0, {}},
    {"   leading and trailing   ", 26, 11, {259, 287, 270, 273, 365, 266, 649, 270, 277, 276, 365}},
    {"a\011b\012c", 5, 3, {268, 333, 313}},
    {"a\000b", 3, 3, {268, 3, 350}},
    {"\357\275\210\357\275\205\357\275\214\357\275\214\357\275\217 \357\274\267\357\274\257\357\274\262\357\274\254\357\274\244", 31, 7, {381, 616, 414, 884, 85, 894, 654}},
    {"\357\254\201ne \302\275 x\302\262 \342\221\240", 16, 11, {439, 437, 357, 229, 132, 135, 372, 259, 383, 372, 357}},
    {"caf\303\251", 5, 3, {325, 284, 317}},
    {"cafe\314\201", 6, 3, {325, 284, 317}},
    {"\346\227\245\346\234\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210", 24, 16, {259, 524, 870, 836, 230, 134, 137, 230, 133, 176, 230, 133, 188, 230, 134, 139}},
    {"\344\275\240\345\245\275\357\274\214\344\270\226\347\225\214", 15, 10, {259, 843, 527, 260, 231, 187, 153, 234, 152, 143}},
    {"\360\237\230\200\360\237\221\215\360\237\217\275", 12, 13, {259, 243, 162, 155, 131, 243, 162, 148, 144, 243, 162, 146, 192}},
    {"\320\237\321\200\320\270\320\262\320\265\321\202, \320\274\320\270\321\200", 20, 12, {259, 733, 397, 290, 387, 338, 346, 260, 259, 477, 290, 397}},
    {"1,234.50 \342\202\254 at 10:30", 21, 18, {357, 260, 372, 445, 444, 261, 366, 314, 259, 229, 133, 175, 268, 267, 461, 298, 445, 314}},
    {"don't stop!!!", 13, 9, {354, 265, 294, 267, 652, 457, 340, 340, 340}},
    {"e\314\201\314\201\314\201", 7, 6, {259, 317, 207, 132, 207, 132}},
    {"\357\273\277\342\200\213x\343\200\200y", 11, 4, {259, 383, 259, 271}},
};
#define NPINNED (sizeof pin_demo / sizeof pin_demo[0])

static void check_pinned(const spm_enc *enc, const char *name, const pinned *t, size_t nt) {
    for (size_t i = 0; i < nt; i++) {
        int ids[64];
        size_t n = 0;
        ms_error e = {0};
        int rc = spm_encode(enc, t[i].text, t[i].len, ids, 64, &n, &e);
        ck_assert_msg(rc == MS_OK, "%s '%s': %s", name, excerpt(t[i].text, t[i].len), e.msg);
        size_t k = 0;
        while (k < n && k < t[i].n && ids[k] == t[i].ids[k]) k++;
        ck_assert_msg(n == t[i].n && k == n, "%s '%s': %zu ids, want %zu; first difference at %zu (got %d, want %d)",
                      name, excerpt(t[i].text, t[i].len), n, t[i].n, k, k < n ? ids[k] : -1,
                      k < t[i].n ? t[i].ids[k] : -1);
    }
}

START_TEST(test_enc_pinned) {
    ck_assert_uint_eq(NPINNED, 20);
    ck_assert_uint_eq(sizeof pin_bf / sizeof pin_bf[0], NPINNED);
    spm_enc *demo = enc_open("demo"), *bf = enc_open("uni_bf");
    check_pinned(demo, "demo", pin_demo, NPINNED);
    check_pinned(bf, "uni_bf", pin_bf, NPINNED);
    ck_assert_int_eq(spm_enc_size(demo), 263);
    ck_assert_int_eq(spm_enc_size(bf), 900);
    spm_enc_free(demo);
    spm_enc_free(bf);
}
END_TEST

static void expect_enc_error(const spm_enc *enc, const char *b, size_t n, int code, const char *needle) {
    int ids[16] = {0};
    size_t got = 99;
    ms_error e = {0};
    int rc = spm_encode(enc, b, n, ids, 16, &got, &e);
    ck_assert_msg(rc == code, "'%s': %s, want %s (%s)", excerpt(b, n), ms_err_name(rc), ms_err_name(code), e.msg);
    ck_assert_msg(strstr(e.msg, needle), "'%s': message '%s' lacks '%s'", excerpt(b, n), e.msg, needle);
    ck_assert_uint_eq(got, 0);
}

START_TEST(test_enc_hostile) {
    spm_enc *enc = enc_open("uni_bf");
    /* not UTF-8: each refused with the offset of the first bad byte */
    static const struct { const char *b; size_t n; const char *at; } bad[] = {
        {"\xff", 1, "offset 0"},          {"ab\x80", 3, "offset 2"},           {"a\xc3", 2, "offset 1"},
        {"\xc0\x80", 2, "offset 0"},      {"\xc1\xbf", 2, "offset 0"},         {"\xe0\x80\x80", 3, "offset 0"},
        {"\xe0\x9f\xbf", 3, "offset 0"},  {"\xed\xa0\x80", 3, "offset 0"},     {"x\xed\xbf\xbf", 4, "offset 1"},
        {"\xf0\x8f\xbf\xbf", 4, "offset 0"}, {"\xf4\x90\x80\x80", 4, "offset 0"}, {"\xf5\x80\x80\x80", 4, "offset 0"},
        {"\xf8\x88\x80\x80\x80", 5, "offset 0"}, {"\xfe\xff", 2, "offset 0"},  {"\xe6\x97", 2, "offset 0"},
        {"ok \xf0\x9f\x98", 6, "offset 3"}, {"\xe6\x97\xa5\xe6", 4, "offset 3"}, {"a\0\xff", 3, "offset 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_enc_error(enc, bad[i].b, bad[i].n, MS_ERR_FORMAT, bad[i].at);
    /* the edges of the ranges are accepted */
    static const char *good[] = {"\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                                 "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"};
    int ids[4096];
    size_t n = 0;
    ms_error e = {0};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(spm_encode(enc, good[i], strlen(good[i]), ids, 4096, &n, &e) == MS_OK, "%s", e.msg);
    /* NUL bytes are text: "a\0b" is not "a" */
    ck_assert_int_eq(spm_encode(enc, "a\0b", 3, ids, 4096, &n, &e), MS_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(ids[1], 3); /* <0x00> */
    ck_assert_int_eq(spm_encode(enc, "\0\0\0\0", 4, ids, 4096, &n, &e), MS_OK);
    ck_assert_uint_ge(n, 4);
    /* empty text, NULL text */
    ck_assert_int_eq(spm_encode(enc, "", 0, NULL, 0, &n, &e), MS_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(spm_encode(enc, NULL, 0, NULL, 0, &n, &e), MS_OK);
    expect_enc_error(enc, NULL, 5, MS_ERR_ARG, "NULL");
    /* the output cap: the first cap ids written, nothing past them, *n the
     * full count; then a second call with room for *n */
    const char *t = "Hello, and welcome to the demo voice of moshid.";
    int all[64];
    size_t nall = 0;
    ck_assert_int_eq(spm_encode(enc, t, strlen(t), all, 64, &nall, &e), MS_OK);
    ck_assert_uint_eq(nall, pin_bf[1].n);
    for (size_t cap = 0; cap < nall; cap++) {
        for (int k = 0; k < 64; k++) ids[k] = -7;
        n = 0;
        int rc = spm_encode(enc, t, strlen(t), cap ? ids : NULL, cap, &n, &e);
        ck_assert_int_eq(rc, MS_ERR_LIMIT);
        ck_assert_uint_eq(n, nall);
        ck_assert_msg(strstr(e.msg, "room for"), "%s", e.msg);
        ck_assert_int_eq(memcmp(ids, all, cap * sizeof *ids), 0);
        ck_assert_int_eq(ids[cap], -7);
    }
    ck_assert_int_eq(spm_encode(enc, t, strlen(t), ids, nall, &n, &e), MS_OK); /* exactly enough */
    ck_assert_uint_eq(n, nall);
    /* the input limit: one byte over is refused before the library sees it,
     * the limit itself is encoded */
    size_t big = SPM_ENC_MAX_TEXT_BYTES;
    char *b = malloc(big + 1);
    for (size_t i = 0; i < big + 1; i++) b[i] = "ab c"[i % 4];
    expect_enc_error(enc, b, big + 1, MS_ERR_LIMIT, "max");
    expect_enc_error(enc, b, (size_t)-1, MS_ERR_LIMIT, "max");
    int *bigids = malloc((big + 16) * sizeof *bigids);
    ck_assert_int_eq(spm_encode(enc, b, big, bigids, big + 16, &n, &e), MS_OK);
    printf("%zu bytes (the limit) -> %zu ids\n", big, n);
    ck_assert_uint_gt(n, big / 4);
    free(bigids);
    free(b);
    /* random bytes: refused as not UTF-8 (at a byte inside the text) or
     * encoded to ids in range; random code points (valid UTF-8): encoded */
    srand(11);
    int refused = 0, encoded = 0;
    char buf[256];
    for (int it = 0; it < 3000; it++) {
        size_t len = 1 + (size_t)rand() % 64;
        if (it % 2) {
            for (size_t i = 0; i < len; i++) buf[i] = (char)(rand() % (it % 4 == 1 ? 256 : 128));
        } else { /* valid UTF-8 of random code points (surrogates skipped) */
            size_t o = 0;
            while (o + 4 < len + 4 && o < 200) {
                uint32_t cp = (uint32_t)rand() % (it % 3 ? 0x800 : 0x110000);
                if (cp >= 0xD800 && cp < 0xE000) continue;
                if (cp < 0x80) buf[o++] = (char)cp;
                else if (cp < 0x800) { buf[o++] = (char)(0xC0 | cp >> 6); buf[o++] = (char)(0x80 | (cp & 63)); }
                else if (cp < 0x10000) { buf[o++] = (char)(0xE0 | cp >> 12); buf[o++] = (char)(0x80 | ((cp >> 6) & 63)); buf[o++] = (char)(0x80 | (cp & 63)); }
                else { buf[o++] = (char)(0xF0 | cp >> 18); buf[o++] = (char)(0x80 | ((cp >> 12) & 63)); buf[o++] = (char)(0x80 | ((cp >> 6) & 63)); buf[o++] = (char)(0x80 | (cp & 63)); }
            }
            len = o;
        }
        int rc = spm_encode(enc, buf, len, ids, 4096, &n, &e);
        if (it % 2 == 0) ck_assert_msg(rc == MS_OK, "valid UTF-8 '%s' refused: %s", excerpt(buf, len), e.msg);
        if (rc == MS_OK) {
            encoded++;
            for (size_t k = 0; k < n; k++) ck_assert(ids[k] >= 0 && ids[k] < spm_enc_size(enc));
        } else {
            ck_assert_int_eq(rc, MS_ERR_FORMAT);
            refused++;
        }
    }
    printf("random text: %d encoded, %d refused as not UTF-8\n", encoded, refused);
    ck_assert_int_gt(refused, 100);
    spm_enc_free(enc);
}
END_TEST

START_TEST(test_enc_load_errors) {
    check_tmp_make();
    ms_error e = {0};
    ck_assert_ptr_null(spm_enc_load("/nonexistent/x.model", &e));
    ck_assert_int_eq(e.code, MS_ERR_IO);
    ck_assert_ptr_null(spm_enc_load(check_tmp, &e)); /* a directory */
    ck_assert_int_eq(e.code, MS_ERR_IO);
    char path[128];
    snprintf(path, sizeof path, "%s/huge.model", check_tmp);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)SPM_MAX_FILE_BYTES + 1), 0);
    close(fd);
    ck_assert_ptr_null(spm_enc_load(path, &e));
    ck_assert_int_eq(e.code, MS_ERR_LIMIT);
    snprintf(path, sizeof path, "%s/x.model", check_tmp);
    check_write_file(path, "", 0);
    ck_assert_ptr_null(spm_enc_load(path, &e));
    ck_assert_int_eq(e.code, MS_ERR_FORMAT);
    printf("empty file: %s\n", e.msg);
    check_write_file(path, "not a model\n", 12);
    ck_assert_ptr_null(spm_enc_load(path, &e));
    ck_assert_int_eq(e.code, MS_ERR_FORMAT);
    /* cut and corrupted models: refused (MS_ERR_FORMAT) or loaded, never a
     * crash; a loaded one encodes */
    size_t n;
    uint8_t *b = check_read_file(SPM_FIX_DIR "/demo.model", &n), *c = malloc(n);
    int refused = 0, loaded = 0;
    srand(5);
    for (int it = 0; it < 120; it++) {
        size_t len = n;
        memcpy(c, b, n);
        if (it < 60) len = (size_t)rand() % n; /* the pieces come first: cuts mostly hit them */
        else for (int k = 0; k < 1 + it % 6; k++) c[(size_t)rand() % 4000] = (uint8_t)rand();
        check_write_file(path, c, len);
        spm_enc *enc = spm_enc_load(path, &e);
        if (!enc) {
            ck_assert_msg(e.code == MS_ERR_FORMAT, "%s: %s", ms_err_name(e.code), e.msg);
            refused++;
            continue;
        }
        loaded++;
        int ids[64];
        size_t k;
        int rc = spm_encode(enc, "hello world", 11, ids, 64, &k, &e);
        ck_assert(rc == MS_OK || rc == MS_ERR_STATE);
        spm_enc_free(enc);
    }
    printf("cut or corrupted models: %d refused, %d loaded\n", refused, loaded);
    ck_assert_int_gt(refused, 0);
    free(b);
    free(c);
    spm_enc_free(NULL);
    ck_assert_int_eq(spm_enc_size(NULL), 0);
    check_tmp_remove();
}
END_TEST

/* One encoder, several threads at once: every result equals the one of a
 * single thread. */
typedef struct { const spm_enc *enc; int bad; } enc_job;
static void *enc_thread(void *arg) {
    enc_job *j = arg;
    for (int it = 0; it < 200; it++) {
        const pinned *p = &pin_bf[(size_t)it % NPINNED];
        int ids[64];
        size_t n = 0;
        if (spm_encode(j->enc, p->text, p->len, ids, 64, &n, NULL) != MS_OK || n != p->n ||
            memcmp(ids, p->ids, n * sizeof *ids) != 0)
            j->bad++;
    }
    return NULL;
}

START_TEST(test_enc_threads) {
    spm_enc *enc = enc_open("uni_bf");
    pthread_t th[6];
    enc_job jobs[6];
    for (int i = 0; i < 6; i++) {
        jobs[i] = (enc_job){enc, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, enc_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].bad, 0);
    }
    spm_enc_free(enc);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("spm");
    TCase *tc = tcase_new("spm");
    tcase_add_test(tc, test_trained_models);
    tcase_add_test(tc, test_hand_built);
    tcase_add_test(tc, test_truncated_and_random);
    tcase_add_test(tc, test_enc_manifest);
    tcase_add_test(tc, test_enc_references);
    tcase_add_test(tc, test_enc_pinned);
    tcase_add_test(tc, test_enc_hostile);
    tcase_add_test(tc, test_enc_load_errors);
    tcase_add_test(tc, test_enc_threads);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
