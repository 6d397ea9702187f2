/* query.c - /api/chat query string parsing and validation. */
#include "query.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static const char *const param_names[PROTO_Q__COUNT] = {
#define PROTO_Q_NAME(id, name) [PROTO_Q_##id] = name,
    PROTO_QUERY_PARAMS(PROTO_Q_NAME)
#undef PROTO_Q_NAME
};

const char *proto_query_param_name(int id) {
    return id >= 0 && id < PROTO_Q__COUNT ? param_names[id] : "?";
}

void proto_query_init(proto_query *q) {
    MS_ASSERT(q != NULL);
    memset(q, 0, sizeof *q);
    q->text_seed = q->audio_seed = q->seed = PROTO_SEED_RANDOM;
}

/* A printable excerpt of a client value for error messages: at most 32
 * bytes, anything outside printable ASCII shown as '?'. */
static const char *excerpt(const char *v, size_t n, char out[40]) {
    size_t k = n < 32 ? n : 32, i;
    for (i = 0; i < k; i++) out[i] = (v[i] >= 0x20 && v[i] < 0x7f) ? v[i] : '?';
    if (n > k) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = 0;
    return out;
}

static int parse_double(int id, const char *v, size_t n, double lo, double hi, double *out,
                        ms_error *err) {
    char tmp[PROTO_QUERY_NUM_MAX + 1], ex[40];
    const char *name = param_names[id];
    bool ok = n > 0 && n <= PROTO_QUERY_NUM_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = (v[i] >= '0' && v[i] <= '9') || v[i] == '.' || v[i] == '-' || v[i] == '+' ||
             v[i] == 'e' || v[i] == 'E';
    if (ok) {
        memcpy(tmp, v, n);
        tmp[n] = 0;
        char *end;
        errno = 0;
        *out = strtod(tmp, &end);
        ok = end == tmp + n && errno == 0 && isfinite(*out);
    }
    if (!ok) return ms_err_set(err, MS_ERR_FORMAT, "%s=%s is not a number", name, excerpt(v, n, ex));
    if (!(*out >= lo && *out <= hi))
        return ms_err_set(err, MS_ERR_RANGE, "%s=%s out of range [%g, %g]", name, excerpt(v, n, ex), lo, hi);
    return MS_OK;
}

static int parse_int(int id, const char *v, size_t n, int64_t lo, int64_t hi, int64_t *out,
                     ms_error *err) {
    char tmp[PROTO_QUERY_NUM_MAX + 1], ex[40];
    const char *name = param_names[id];
    bool ok = n > 0 && n <= 20;
    for (size_t i = 0; ok && i < n; i++) ok = (v[i] >= '0' && v[i] <= '9') || (i == 0 && v[i] == '-' && n > 1);
    if (ok) {
        memcpy(tmp, v, n);
        tmp[n] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(tmp, &end, 10);
        ok = end == tmp + n && errno == 0;
        *out = x;
    }
    if (!ok) return ms_err_set(err, MS_ERR_FORMAT, "%s=%s is not an integer", name, excerpt(v, n, ex));
    if (*out < lo || *out > hi)
        return ms_err_set(err, MS_ERR_RANGE, "%s=%s out of range [%lld, %lld]", name,
                          excerpt(v, n, ex), (long long)lo, (long long)hi);
    return MS_OK;
}

static int parse_seed(int id, const char *v, size_t n, int64_t *out, ms_error *err) {
    int rc = parse_int(id, v, n, -1, INT64_MAX, out, err);
    if (rc == MS_ERR_RANGE)
        return ms_err_set(err, MS_ERR_RANGE, "%s must be -1 (random) or an integer in [0, 2^63-1]",
                          param_names[id]);
    return rc;
}

/* A file name inside the server's voice directory: no path, no "..". */
static int parse_file_name(int id, const char *v, size_t n, char *out, ms_error *err) {
    const char *name = param_names[id];
    if (n == 0) return ms_err_set(err, MS_ERR_FORMAT, "%s is empty", name);
    if (n > PROTO_NAME_MAX) return ms_err_set(err, MS_ERR_LIMIT, "%s longer than %u bytes", name, PROTO_NAME_MAX);
    if (!text_utf8_valid(v, n)) return ms_err_set(err, MS_ERR_FORMAT, "%s is not valid UTF-8", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':')
            return ms_err_set(err, MS_ERR_FORMAT, "%s must be a plain file name (no path or control characters)", name);
    }
    bool dotdot = false;
    for (size_t i = 0; i + 1 < n; i++) dotdot |= v[i] == '.' && v[i + 1] == '.';
    if (v[0] == '.' || dotdot)
        return ms_err_set(err, MS_ERR_FORMAT, "%s must not start with '.' or contain '..'", name);
    memcpy(out, v, n);
    out[n] = 0;
    return MS_OK;
}

static int parse_identifier(int id, const char *v, size_t n, char *out, ms_error *err) {
    const char *name = param_names[id];
    if (n == 0 || n > PROTO_NAME_MAX)
        return ms_err_set(err, MS_ERR_FORMAT, "%s must hold 1 to %u characters", name, PROTO_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || (c == '.' && i > 0);
        if (!ok) return ms_err_set(err, MS_ERR_FORMAT, "%s may hold only letters, digits, '_', '-', '.'", name);
    }
    memcpy(out, v, n);
    out[n] = 0;
    return MS_OK;
}

static int parse_text(int id, const char *v, size_t n, char *out, size_t *out_len, ms_error *err) {
    const char *name = param_names[id];
    if (n > PROTO_TEXT_PROMPT_MAX)
        return ms_err_set(err, MS_ERR_LIMIT, "%s longer than %u bytes", name, PROTO_TEXT_PROMPT_MAX);
    if (!text_utf8_valid(v, n)) return ms_err_set(err, MS_ERR_FORMAT, "%s is not valid UTF-8", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
            return ms_err_set(err, MS_ERR_FORMAT, "%s holds a control character", name);
    }
    if (n) memcpy(out, v, n);
    out[n] = 0;
    *out_len = n;
    return MS_OK;
}

static int neutral(int id, const char *v, size_t n, bool ok, const char *want, ms_error *err) {
    char ex[40];
    if (ok) return MS_OK;
    return ms_err_set(err, MS_ERR_UNSUPPORTED,
                      "%s=%s is not implemented by moshid (only the neutral value %s is accepted)",
                      param_names[id], excerpt(v, n, ex), want);
}

/* Apply one known parameter id with its decoded value. */
static int apply(proto_query *q, int id, const char *v, size_t n, ms_error *err) {
    int64_t i64;
    double d;
    int rc;
    switch (id) {
    case PROTO_Q_TEXT_TEMPERATURE:
        return parse_double(id, v, n, 0.0, PROTO_TEMPERATURE_MAX, &q->text_temperature, err);
    case PROTO_Q_AUDIO_TEMPERATURE:
        return parse_double(id, v, n, 0.0, PROTO_TEMPERATURE_MAX, &q->audio_temperature, err);
    case PROTO_Q_TEXT_TOPK:
    case PROTO_Q_AUDIO_TOPK:
        rc = parse_int(id, v, n, 1, PROTO_TOPK_MAX, &i64, err);
        if (!rc) *(id == PROTO_Q_TEXT_TOPK ? &q->text_topk : &q->audio_topk) = (int)i64;
        return rc;
    case PROTO_Q_TEXT_SEED: return parse_seed(id, v, n, &q->text_seed, err);
    case PROTO_Q_AUDIO_SEED: return parse_seed(id, v, n, &q->audio_seed, err);
    case PROTO_Q_SEED: return parse_seed(id, v, n, &q->seed, err);
    case PROTO_Q_PAD_MULT:
        rc = parse_double(id, v, n, -1e9, 1e9, &d, err);
        return rc ? rc : neutral(id, v, n, d == PROTO_PAD_MULT_NEUTRAL, "0", err);
    case PROTO_Q_REPETITION_PENALTY:
        rc = parse_double(id, v, n, -1e9, 1e9, &d, err);
        return rc ? rc : neutral(id, v, n, d == PROTO_REP_PENALTY_NEUTRAL, "1.0", err);
    case PROTO_Q_REPETITION_PENALTY_CONTEXT:
        rc = parse_int(id, v, n, 0, PROTO_MAX_STEPS_MAX, &i64, err);
        return rc ? rc : neutral(id, v, n, i64 == PROTO_REP_PENALTY_CONTEXT_NEUTRAL, "64", err);
    case PROTO_Q_MAX_STEPS: return parse_int(id, v, n, 1, PROTO_MAX_STEPS_MAX, &q->max_steps, err);
    case PROTO_Q_VOICE_PROMPT: return parse_file_name(id, v, n, q->voice_prompt, err);
    case PROTO_Q_PERSONA: return parse_identifier(id, v, n, q->persona, err);
    case PROTO_Q_TEXT_PROMPT: return parse_text(id, v, n, q->text_prompt, &q->text_prompt_len, err);
    default: MS_ASSERT(0 && "parameter without a parser");
    }
    return MS_ERR_ARG;
}

static int lookup(const char *key, size_t klen) {
    for (int i = 0; i < PROTO_Q__COUNT; i++)
        if (strlen(param_names[i]) == klen && memcmp(param_names[i], key, klen) == 0) return i;
    return -1;
}

int proto_query_set(proto_query *q, const char *key, size_t klen, const char *val, size_t vlen,
                    ms_error *err) {
    MS_ASSERT(q != NULL && (key != NULL || klen == 0) && (val != NULL || vlen == 0));
    if (++q->params > PROTO_QUERY_MAX_PARAMS)
        return ms_err_set(err, MS_ERR_LIMIT, "more than %u query parameters", PROTO_QUERY_MAX_PARAMS);
    int id = lookup(key, klen);
    if (id < 0) {
        q->ignored++;
        return MS_OK;
    }
    if (proto_query_has(q, id))
        return ms_err_set(err, MS_ERR_FORMAT, "query parameter %s given twice", param_names[id]);
    int rc = apply(q, id, val ? val : "", vlen, err);
    if (rc == MS_OK) q->present |= 1u << id;
    return rc;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* URL-decode n bytes at s into out (cap bytes). Returns the decoded length,
 * -1 on a malformed escape, -2 when the result would exceed cap. */
static long url_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (n - i < 3) return -1;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0) return -1;
            c = (char)(h << 4 | l);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o == cap) return -2;
        out[o++] = c;
    }
    return (long)o;
}

int proto_query_parse(proto_query *q, const char *qs, size_t len, ms_error *err) {
    MS_ASSERT(q != NULL && (qs != NULL || len == 0));
    proto_query_init(q);
    if (len > PROTO_QUERY_MAX_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "query string longer than %u bytes", PROTO_QUERY_MAX_BYTES);
    if (len && qs[0] == '?') qs++, len--;
    char val[PROTO_TEXT_PROMPT_MAX]; /* decoded value */
    size_t i = 0;
    while (i < len) {
        const char *pair = qs + i;
        const char *amp = memchr(pair, '&', len - i);
        size_t plen = amp ? (size_t)(amp - pair) : len - i;
        i += plen + 1;
        if (plen == 0) continue; /* "a=1&&b=2" */
        const char *eq = memchr(pair, '=', plen);
        size_t kraw = eq ? (size_t)(eq - pair) : plen;
        const char *vraw = eq ? eq + 1 : pair + plen;
        size_t vrawlen = eq ? plen - kraw - 1 : 0;
        char key[PROTO_QUERY_KEY_MAX];
        long kl = url_decode(pair, kraw, key, sizeof key);
        if (kl < 0 || lookup(key, (size_t)kl) < 0) { /* unknown (or undecodable) key */
            int rc = proto_query_set(q, "", 0, "", 0, err); /* counts it as ignored */
            if (rc) return rc;
            continue;
        }
        long vl = url_decode(vraw, vrawlen, val, sizeof val);
        if (vl == -1)
            return ms_err_set(err, MS_ERR_FORMAT, "query parameter %.*s: malformed %%-escape", (int)kl, key);
        if (vl == -2)
            return ms_err_set(err, MS_ERR_LIMIT, "query parameter %.*s longer than %u bytes", (int)kl,
                              key, PROTO_TEXT_PROMPT_MAX);
        int rc = proto_query_set(q, key, (size_t)kl, val, (size_t)vl, err);
        if (rc) return rc;
    }
    return MS_OK;
}

int proto_query_finish(proto_query *q, const proto_query_limits *lim, ms_error *err) {
    MS_ASSERT(q != NULL && lim != NULL);
    if (proto_query_has(q, PROTO_Q_TEXT_TOPK) && q->text_topk > lim->text_card)
        return ms_err_set(err, MS_ERR_RANGE, "text_topk=%d out of range [1, %d]", q->text_topk, lim->text_card);
    if (proto_query_has(q, PROTO_Q_AUDIO_TOPK) && q->audio_topk > lim->audio_card)
        return ms_err_set(err, MS_ERR_RANGE, "audio_topk=%d out of range [1, %d]", q->audio_topk, lim->audio_card);
    q->max_steps_capped = false;
    if (proto_query_has(q, PROTO_Q_MAX_STEPS) && lim->max_steps_cap > 0 && q->max_steps > lim->max_steps_cap) {
        q->max_steps = lim->max_steps_cap;
        q->max_steps_capped = true;
    }
    return MS_OK;
}

int64_t proto_query_text_seed(const proto_query *q) {
    if (proto_query_has(q, PROTO_Q_TEXT_SEED)) return q->text_seed;
    return proto_query_has(q, PROTO_Q_SEED) ? q->seed : PROTO_SEED_RANDOM;
}

int64_t proto_query_audio_seed(const proto_query *q) {
    if (proto_query_has(q, PROTO_Q_AUDIO_SEED)) return q->audio_seed;
    return proto_query_has(q, PROTO_Q_SEED) ? q->seed : PROTO_SEED_RANDOM;
}
