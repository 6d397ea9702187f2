/* prompt.c - role text, voice names and cache keys (see prompt.h). */
#include "prompt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "text.h"

/* The length of the UTF-8 white space character at s[0..n) (Python's
 * str.isspace: ASCII \t\n\v\f\r, 0x1c..0x1f, space; U+0085, U+00A0,
 * U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), 0 when
 * it is not one. */
static size_t space_at(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
    if (n >= 2 && c == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && c == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3;
    if (n >= 3 && c == 0xe2 && s[1] == 0x80 && ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 ||
                                                s[2] == 0xaf))
        return 3;
    if (n >= 3 && c == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3;
    if (n >= 3 && c == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3;
    return 0;
}

/* The length of the white space character that ends s[0..n), 0 if none. */
static size_t space_before(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t l = space_at(s + n - k, k);
        if (l == k) return k;
    }
    return 0;
}

int prompt_role_text(const char *text, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (len == 0) return MS_OK;
    const unsigned char *s = (const unsigned char *)text;
    size_t a = 0, b = len, k;
    while (a < b && (k = space_at(s + a, b - a)) > 0) a += k;
    while (b > a && (k = space_before(s + a, b - a)) > 0) b -= k;
    size_t n = b - a, tl = strlen(PROMPT_SYSTEM_TAG);
    int wrapped = n >= tl && memcmp(s + a, PROMPT_SYSTEM_TAG, tl) == 0 &&
                  memcmp(s + b - tl, PROMPT_SYSTEM_TAG, tl) == 0;
    size_t total = wrapped ? n : n + 2 * (tl + 1);
    char *r = malloc(total + 1);
    if (!r) return MS_ERR_NOMEM;
    if (wrapped) {
        memcpy(r, s + a, n);
    } else {
        memcpy(r, PROMPT_SYSTEM_TAG " ", tl + 1);
        memcpy(r + tl + 1, s + a, n);
        memcpy(r + tl + 1 + n, " " PROMPT_SYSTEM_TAG, tl + 1);
    }
    r[total] = '\0';
    *out = r;
    *out_len = total;
    return MS_OK;
}

int prompt_voice_name_check(const char *name, char *why, size_t len) {
    size_t n = strnlen(name, PROMPT_VOICE_NAME_MAX + 1);
    if (n == 0) return snprintf(why, len, "empty voice name"), 1;
    if (n > PROMPT_VOICE_NAME_MAX) return snprintf(why, len, "longer than %d bytes", PROMPT_VOICE_NAME_MAX), 1;
    if (name[0] == '.') return snprintf(why, len, "starts with '.'"), 1;
    if (strstr(name, "..")) return snprintf(why, len, "holds \"..\""), 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/' || c == '\\' || c == ':') return snprintf(why, len, "holds a path separator ('%c')", c), 1;
        if (c < 0x20 || c == 0x7f) return snprintf(why, len, "holds a control character"), 1;
    }
    if (!text_utf8_valid(name, n)) return snprintf(why, len, "not valid UTF-8"), 1;
    return 0;
}

static int ends_with(const char *s, const char *ext) {
    size_t n = strlen(s), e = strlen(ext);
    return n >= e && strcmp(s + n - e, ext) == 0;
}

prompt_voice_kind prompt_voice_kind_of(const char *path) {
    return ends_with(path, ".safetensors") || ends_with(path, ".pt") ? PROMPT_VOICE_SAVED : PROMPT_VOICE_AUDIO;
}

int prompt_voice_find(const char *dir, const char *name, char *path, size_t cap, prompt_voice_kind *kind,
                      ms_error *err) {
    /* saved voices first (a converted .pt, the .pt as NVIDIA publishes it),
     * then audio */
    static const char *const exts[] = {".safetensors", ".pt", ".wav", ".flac", ".ogg"};
    char why[96];
    if (prompt_voice_name_check(name, why, sizeof why))
        return ms_err_set(err, MS_ERR_ARG, "voice name: %s", why);
    size_t stem = strlen(name);
    const char *dot = strrchr(name, '.');
    if (dot) stem = (size_t)(dot - name);   /* not 0: a name does not start with '.' */
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        int w = snprintf(path, cap, "%s/%.*s%s", dir, (int)stem, name, exts[i]);
        if (w < 0 || (size_t)w >= cap) return ms_err_set(err, MS_ERR_LIMIT, "voice path longer than %zu bytes", cap);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            *kind = i <= 1 ? PROMPT_VOICE_SAVED : PROMPT_VOICE_AUDIO;
            return MS_OK;
        }
    }
    path[0] = '\0';
    return ms_err_set(err, MS_ERR_NOTFOUND, "no voice %.*s (.safetensors, .pt, .wav, .flac or .ogg) in the voice directory",
                      (int)(stem < 64 ? stem : 64), name);
}

uint64_t prompt_hash(const void *b, size_t n) {
    const uint8_t *p = b;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int prompt_key_make(prompt_key *k, const char *model_id, const char *voice, const int *ids, int n_ids,
                    int silence_frames, ms_error *err) {
    memset(k, 0, sizeof *k);
    char head[PATH_MAX + 256], real[PATH_MAX];
    int hn;
    if (voice && voice[0]) {
        struct stat st;
        if (stat(voice, &st) != 0) return ms_err_set(err, MS_ERR_IO, "voice %s: %s", voice, strerror(errno));
        if (!S_ISREG(st.st_mode)) return ms_err_set(err, MS_ERR_IO, "voice %s: not a regular file", voice);
        if (!realpath(voice, real)) return ms_err_set(err, MS_ERR_IO, "voice %s: %s", voice, strerror(errno));
        hn = snprintf(head, sizeof head, "moshid-persona-1\n%s\nvoice %s\n%lld %lld.%09ld\nsilence %d\n",
                      model_id, real, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                      silence_frames);
    } else {
        hn = snprintf(head, sizeof head, "moshid-persona-1\n%s\nno voice\nsilence %d\n", model_id, silence_frames);
    }
    if (hn < 0 || (size_t)hn >= sizeof head) return ms_err_set(err, MS_ERR_LIMIT, "persona key: names too long");
    size_t n = (size_t)hn + 4 * (size_t)(n_ids > 0 ? n_ids : 0);
    k->b = malloc(n ? n : 1);
    if (!k->b) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    memcpy(k->b, head, (size_t)hn);
    for (int i = 0; i < n_ids; i++) { /* little endian, whatever the host */
        uint32_t v = (uint32_t)ids[i];
        uint8_t *d = k->b + hn + 4 * (size_t)i;
        d[0] = (uint8_t)v;
        d[1] = (uint8_t)(v >> 8);
        d[2] = (uint8_t)(v >> 16);
        d[3] = (uint8_t)(v >> 24);
    }
    k->n = n;
    k->hash = prompt_hash(k->b, n);
    return MS_OK;
}

void prompt_key_copy(prompt_key *dst, const prompt_key *src) {
    dst->b = malloc(src->n ? src->n : 1);
    MS_ASSERT(dst->b != NULL); /* a few bytes on the loop thread */
    memcpy(dst->b, src->b, src->n);
    dst->n = src->n;
    dst->hash = src->hash;
}

int prompt_key_equal(const prompt_key *a, const prompt_key *b) {
    return a->hash == b->hash && a->n == b->n && memcmp(a->b, b->b, a->n) == 0;
}

void prompt_key_free(prompt_key *k) {
    free(k->b);
    k->b = NULL;
    k->n = 0;
}
