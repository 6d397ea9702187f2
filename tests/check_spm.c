/* check_spm.c - SentencePiece model reader: a model trained at test time by
 * Debian's spm_train, its pieces compared with spm_export_vocab's; models
 * built by hand (unknown fields, wire types); hostile files. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "spm.h"

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

static Suite *make_suite(void) {
    Suite *s = suite_create("spm");
    TCase *tc = tcase_new("spm");
    tcase_add_test(tc, test_trained_models);
    tcase_add_test(tc, test_hand_built);
    tcase_add_test(tc, test_truncated_and_random);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
