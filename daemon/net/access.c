/* access.c - the Origin policy and the bearer tokens. See access.h. */
#include "access.h"
#include "text.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIGEST_BYTES 32
/* Bytes of a presented credential looked at (srv hands over headers of at
 * most 1023 bytes and query values of at most PROTO_QUERY_MAX_BYTES; past
 * this a credential is too long to be a token anyway). */
#define ACCESS_CRED_SCAN (64 * 1024)

/* One token. Kept while it can be presented (in the file) or while a
 * session holds it (withdrawn by a reload: then only released). */
typedef struct access_tok {
    uint8_t digest[DIGEST_BYTES];
    char name[ACCESS_NAME_MAX + 1];
    int max_sessions;                  /* 0 = no per-token limit */
    int open;                          /* sessions that hold it */
    uint64_t id;                       /* never reused, never 0 */
    int withdrawn;                     /* not in the file any more */
} access_tok;

/* A parsed origin: scheme://host:port, host lower-case ("[...]" kept
 * around IPv6). */
typedef struct origin {
    int https;
    char host[TEXT_HOST_MAX + 3];
    int port;
} origin;

enum { KW_SAME_ORIGIN = 1, KW_LOCALHOST = 2, KW_ANY = 4 };

struct access_ctl {
    access_tok *tok;                   /* (ntok) presentable and withdrawn-but-held, any order */
    int ntok;
    int required;                      /* a tokens file is loaded */
    uint64_t next_id;
    unsigned keywords;                 /* KW_* */
    origin list[ACCESS_MAX_ORIGINS];   /* explicit origins */
    int nlist;
};

static const char *const reason_names[] = {
    "ok",
#define ACCESS_N(k) #k,
    ACCESS_REFUSALS(ACCESS_N)
#undef ACCESS_N
};

const char *access_reason_name(int r) {
    return r >= 0 && r < ACCESS_R__COUNT ? reason_names[r] : "?";
}

void access_sha256(const void *data, size_t len, uint8_t out[32]) {
    unsigned n = 0;
    /* EVP_Digest fails only when out of memory; a zero digest then matches
     * no token (a token's digest is never all zero in practice), so the
     * request is refused, never admitted. */
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != DIGEST_BYTES) memset(out, 0, DIGEST_BYTES);
}

access_ctl *access_create(void) {
    access_ctl *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->next_id = 1;
    a->keywords = KW_SAME_ORIGIN | KW_LOCALHOST;
    return a;
}

void access_free(access_ctl *a) {
    if (!a) return;
    free(a->tok);
    free(a);
}

/* ---- origins ---- */

/* Parse "host[:port]" (s[0..n), a Host header or the part of an origin
 * after "scheme://") into o->host/o->port; def_port when no port is
 * given. 0, or -1 when malformed. */
static int parse_hostport(const char *s, size_t n, int def_port, origin *o) {
    const char *end = s + n, *p;
    size_t hl;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        char a[64];
        unsigned char buf[16];
        if (!close || close - s - 1 <= 0 || (size_t)(close - s - 1) >= sizeof a) return -1;
        memcpy(a, s + 1, (size_t)(close - s - 1));
        a[close - s - 1] = '\0';
        if (inet_pton(AF_INET6, a, buf) != 1) return -1;
        p = close + 1;
        hl = (size_t)(p - s);
    } else {
        p = memchr(s, ':', n);
        if (!p) p = end;
        hl = (size_t)(p - s);
        if (!text_is_hostname(s, hl)) return -1;   /* IPv4 literals are host names to this check */
    }
    if (hl >= sizeof o->host) return -1;
    for (size_t i = 0; i < hl; i++) {
        char ch = s[i];
        o->host[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
    }
    o->host[hl] = '\0';
    o->port = def_port;
    if (p == end) return 0;
    if (*p != ':' || p + 1 == end || end - p - 1 > 5) return -1;
    int port = 0;
    for (const char *q = p + 1; q < end; q++) {
        if (*q < '0' || *q > '9') return -1;
        port = port * 10 + (*q - '0');
    }
    if (port < 1 || port > 65535) return -1;
    o->port = port;
    return 0;
}

/* Parse an origin "scheme://host[:port]" (http or https, nothing after). */
static int parse_origin(const char *s, origin *o) {
    size_t n = strnlen(s, ACCESS_ORIGIN_MAX + 1);
    if (n > ACCESS_ORIGIN_MAX) return -1;
    size_t skip;
    if (n > 7 && strncasecmp(s, "http://", 7) == 0) o->https = 0, skip = 7;
    else if (n > 8 && strncasecmp(s, "https://", 8) == 0) o->https = 1, skip = 8;
    else return -1;
    return parse_hostport(s + skip, n - skip, o->https ? 443 : 80, o);
}

static int origin_eq(const origin *x, const origin *y) {
    return x->https == y->https && x->port == y->port && strcmp(x->host, y->host) == 0;
}

static int is_loopback_name(const char *host) {
    return strcmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0 || strcmp(host, "[::1]") == 0;
}

/* An IP literal (or localhost): a name no web page can rebind. */
static int is_literal(const char *host) {
    unsigned char buf[16];
    return host[0] == '[' || inet_pton(AF_INET, host, buf) == 1 || strcmp(host, "localhost") == 0;
}

int access_origin_entry_ok(const char *s, char *why, size_t len) {
    origin o;
    if (strcmp(s, "*") == 0 || strcmp(s, "same-origin") == 0 || strcmp(s, "localhost") == 0) return 0;
    if (parse_origin(s, &o) == 0) return 0;
    snprintf(why, len,
             "\"%.64s\" is not \"*\", \"same-origin\", \"localhost\" or an origin like https://example.com[:port] "
             "(no path)", s);
    return 1;
}

int access_set_origins(access_ctl *a, const char *const *list, int n, ms_error *err) {
    if (n < 0 || n > ACCESS_MAX_ORIGINS)
        return ms_err_set(err, MS_ERR_LIMIT, "server.allowed_origins: more than %d entries", ACCESS_MAX_ORIGINS);
    unsigned kw = 0;
    origin tmp[ACCESS_MAX_ORIGINS];
    int nl = 0;
    for (int i = 0; i < n; i++) {
        const char *s = list[i];
        if (strcmp(s, "*") == 0) kw |= KW_ANY;
        else if (strcmp(s, "same-origin") == 0) kw |= KW_SAME_ORIGIN;
        else if (strcmp(s, "localhost") == 0) kw |= KW_LOCALHOST;
        else if (parse_origin(s, &tmp[nl]) == 0) nl++;
        else return ms_err_set(err, MS_ERR_FORMAT, "server.allowed_origins[%d]: \"%.64s\" is not a valid entry", i, s);
    }
    a->keywords = kw;
    memcpy(a->list, tmp, sizeof tmp[0] * (size_t)nl);
    a->nlist = nl;
    return MS_OK;
}

/* The origin verdict: 0 admitted, else 403 with why. */
static int judge_origin(const access_ctl *a, const access_request *r, char *why, size_t len) {
    const char *ov = r->origin ? r->origin : "";
    if (!ov[0] || (a->keywords & KW_ANY)) return 0;   /* no Origin: not a browser */
    origin o;
    if (parse_origin(ov, &o) != 0) {
        /* "null" (sandboxed frames, file: pages) and anything malformed */
        snprintf(why, len, "origin refused: \"%.64s\" is not an http(s) origin (server.allowed_origins)", ov);
        return 403;
    }
    for (int i = 0; i < a->nlist; i++)
        if (origin_eq(&o, &a->list[i])) return 0;
    if ((a->keywords & KW_LOCALHOST) && is_loopback_name(o.host)) return 0;
    if (a->keywords & KW_SAME_ORIGIN) {
        origin h;
        const char *hv = r->host ? r->host : "";
        h.https = r->tls ? 1 : 0;
        if (hv[0] && parse_hostport(hv, strnlen(hv, TEXT_HOST_MAX + 8), h.https ? 443 : 80, &h) == 0 &&
            origin_eq(&o, &h)) {
            if (a->required || is_literal(h.host)) return 0;
            snprintf(why, len,
                     "origin refused: %.64s is this server's own name, but without auth.tokens_file a name is not "
                     "trusted (DNS rebinding): list it in server.allowed_origins or use tokens", ov);
            return 403;
        }
    }
    snprintf(why, len, "origin refused: %.64s is not allowed (server.allowed_origins)", ov);
    return 403;
}

/* ---- tokens ---- */

static int token_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '~' || c == '-';
}

static int name_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* One parsed line of the file. */
typedef struct tok_line {
    uint8_t digest[DIGEST_BYTES];
    char name[ACCESS_NAME_MAX + 1];
    int max_sessions;
} tok_line;

/* Parse line s[0..n) (blanks trimmed, not a comment) into *t. */
static int parse_line(const char *s, size_t n, tok_line *t, const char *fname, int lineno, ms_error *err) {
    const char *c1 = memchr(s, ':', n);
    if (!c1) return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: expected NAME:TOKEN[:MAX_SESSIONS]", fname, lineno);
    size_t nl = (size_t)(c1 - s);
    if (nl == 0 || nl > ACCESS_NAME_MAX)
        return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: the name must hold 1 to %d characters", fname, lineno,
                          ACCESS_NAME_MAX);
    for (size_t i = 0; i < nl; i++)
        if (!name_char(s[i]))
            return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: the name may hold only letters, digits, '_', '-', '.'",
                              fname, lineno);
    const char *tk = c1 + 1, *end = s + n;
    const char *c2 = memchr(tk, ':', (size_t)(end - tk));
    size_t tl = (size_t)((c2 ? c2 : end) - tk);
    /* the token itself is never quoted in a message */
    if (tl < ACCESS_TOKEN_MIN || tl > ACCESS_TOKEN_MAX)
        return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: token of %.*s: %zu bytes, must be %d to %d", fname, lineno,
                          (int)nl, s, tl, ACCESS_TOKEN_MIN, ACCESS_TOKEN_MAX);
    for (size_t i = 0; i < tl; i++)
        if (!token_char(tk[i]))
            return ms_err_set(err, MS_ERR_FORMAT,
                              "%s:%d: token of %.*s: only letters, digits and '.', '_', '~', '-' are allowed "
                              "(e.g. openssl rand -hex 32)", fname, lineno, (int)nl, s);
    t->max_sessions = 0;
    if (c2) {
        const char *m = c2 + 1;
        long v = 0;
        if (m == end || end - m > 5)
            return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: MAX_SESSIONS must be 1 to %d", fname, lineno,
                              ACCESS_MAX_SESSIONS);
        for (const char *q = m; q < end; q++) {
            if (*q < '0' || *q > '9')
                return ms_err_set(err, MS_ERR_FORMAT, "%s:%d: MAX_SESSIONS must be 1 to %d", fname, lineno,
                                  ACCESS_MAX_SESSIONS);
            v = v * 10 + (*q - '0');
        }
        if (v < 1 || v > ACCESS_MAX_SESSIONS)
            return ms_err_set(err, MS_ERR_RANGE, "%s:%d: MAX_SESSIONS must be 1 to %d", fname, lineno,
                              ACCESS_MAX_SESSIONS);
        t->max_sessions = (int)v;
    }
    memcpy(t->name, s, nl);
    t->name[nl] = '\0';
    access_sha256(tk, tl, t->digest);
    return MS_OK;
}

/* Constant-time equality of two digests: 1 or 0. */
static unsigned digest_eq(const uint8_t *x, const uint8_t *y) {
    unsigned d = 0;
    for (int i = 0; i < DIGEST_BYTES; i++) d |= (unsigned)(x[i] ^ y[i]);
    return 1u & ((d - 1u) >> 8);   /* d in [0, 255]: d == 0 -> 1 */
}

/* Replace the token set by lines[0..n) (required: authentication on). */
static int install(access_ctl *a, const tok_line *lines, int n, int required) {
    /* new array: the presentable ones, then the withdrawn ones still held */
    int cap = n;
    for (int i = 0; i < a->ntok; i++) cap += a->tok[i].open > 0;
    access_tok *nt = calloc(cap ? (size_t)cap : 1, sizeof *nt);
    if (!nt) return MS_ERR_NOMEM;
    char *kept = calloc(a->ntok ? (size_t)a->ntok : 1, 1);
    if (!kept) { free(nt); return MS_ERR_NOMEM; }
    int k = 0;
    for (int i = 0; i < n; i++) {
        access_tok *t = &nt[k++];
        memcpy(t->digest, lines[i].digest, DIGEST_BYTES);
        memcpy(t->name, lines[i].name, sizeof t->name);
        t->max_sessions = lines[i].max_sessions;
        t->id = 0;
        /* the same token (also one withdrawn but still held): keep its id and count */
        for (int j = 0; j < a->ntok; j++) {
            if (!kept[j] && memcmp(a->tok[j].digest, t->digest, DIGEST_BYTES) == 0) {
                t->id = a->tok[j].id;
                t->open = a->tok[j].open;
                kept[j] = 1;
                break;
            }
        }
        if (!t->id) t->id = a->next_id++;
    }
    for (int j = 0; j < a->ntok; j++) {
        if (kept[j] || a->tok[j].open == 0) continue;
        nt[k] = a->tok[j];
        nt[k++].withdrawn = 1;
    }
    free(kept);
    free(a->tok);
    a->tok = nt;
    a->ntok = k;
    a->required = required;
    return MS_OK;
}

int access_parse_tokens(access_ctl *a, const char *text, size_t len, const char *fname, ms_error *err) {
    if (len > ACCESS_FILE_MAX)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: larger than %d bytes", fname, ACCESS_FILE_MAX);
    tok_line *lines = malloc(sizeof *lines * ACCESS_MAX_TOKENS);
    if (!lines) return ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", fname);
    int n = 0, lineno = 0, rc = MS_OK;
    size_t pos = 0;
    while (pos < len && rc == MS_OK) {
        const char *s = text + pos;
        const char *nlp = memchr(s, '\n', len - pos);
        size_t ll = nlp ? (size_t)(nlp - s) : len - pos;
        pos += ll + (nlp ? 1 : 0);
        lineno++;
        if (ll > ACCESS_LINE_MAX) {
            rc = ms_err_set(err, MS_ERR_LIMIT, "%s:%d: line longer than %d bytes", fname, lineno, ACCESS_LINE_MAX);
            break;
        }
        if (memchr(s, '\0', ll)) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s:%d: NUL byte", fname, lineno);
            break;
        }
        while (ll && (s[ll - 1] == '\r' || s[ll - 1] == ' ' || s[ll - 1] == '\t')) ll--;
        while (ll && (s[0] == ' ' || s[0] == '\t')) s++, ll--;
        if (ll == 0 || s[0] == '#') continue;
        if (n == ACCESS_MAX_TOKENS) {
            rc = ms_err_set(err, MS_ERR_LIMIT, "%s:%d: more than %d tokens", fname, lineno, ACCESS_MAX_TOKENS);
            break;
        }
        if ((rc = parse_line(s, ll, &lines[n], fname, lineno, err)) != MS_OK) break;
        for (int i = 0; i < n && rc == MS_OK; i++) {
            if (strcmp(lines[i].name, lines[n].name) == 0)
                rc = ms_err_set(err, MS_ERR_FORMAT, "%s:%d: name %s given twice", fname, lineno, lines[n].name);
            else if (memcmp(lines[i].digest, lines[n].digest, DIGEST_BYTES) == 0)
                rc = ms_err_set(err, MS_ERR_FORMAT, "%s:%d: the token of %s is also that of %s", fname, lineno,
                                lines[n].name, lines[i].name);
        }
        n++;
    }
    if (rc == MS_OK && n == 0)
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: no token (NAME:TOKEN[:MAX_SESSIONS] lines); an empty "
                        "auth.tokens_file turns authentication off", fname);
    if (rc == MS_OK && install(a, lines, n, 1) != MS_OK) rc = ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", fname);
    memset(lines, 0, sizeof *lines * (size_t)n);
    free(lines);
    return rc;
}

int access_load_tokens(access_ctl *a, const char *path, int *loose, ms_error *err) {
    if (loose) *loose = 0;
    if (!path || !path[0]) {
        if (install(a, NULL, 0, 0) != MS_OK) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        return MS_OK;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return ms_err_set(err, MS_ERR_IO, "auth.tokens_file: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ms_err_set(err, MS_ERR_IO, "auth.tokens_file: %s is not a regular file", path);
    }
    if (st.st_size > ACCESS_FILE_MAX) {
        close(fd);
        return ms_err_set(err, MS_ERR_LIMIT, "auth.tokens_file: %s is larger than %d bytes", path, ACCESS_FILE_MAX);
    }
    char *buf = malloc(ACCESS_FILE_MAX + 1);
    if (!buf) { close(fd); return ms_err_set(err, MS_ERR_NOMEM, "out of memory"); }
    size_t len = 0;
    for (;;) {   /* read to the end (the file may have grown since fstat) */
        ssize_t r = read(fd, buf + len, ACCESS_FILE_MAX + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return ms_err_set(err, MS_ERR_IO, "auth.tokens_file: cannot read %s: %s", path, strerror(e));
        }
        if (r == 0 || (len += (size_t)r) > ACCESS_FILE_MAX) break;
    }
    close(fd);
    int rc = access_parse_tokens(a, buf, len, path, err);
    memset(buf, 0, len < ACCESS_FILE_MAX + 1 ? len : ACCESS_FILE_MAX + 1);   /* no token copy left in the heap */
    free(buf);
    if (rc == MS_OK && loose) *loose = (st.st_mode & (S_IRWXG | S_IRWXO)) != 0;
    return rc;
}

int access_required(const access_ctl *a) { return a->required; }

int access_ntokens(const access_ctl *a) {
    int n = 0;
    for (int i = 0; i < a->ntok; i++) n += !a->tok[i].withdrawn;
    return n;
}

/* The first query argument named key ("auth" matches "auth=..." only),
 * or NULL. */
static const char *query_arg(const access_request *r, const char *key) {
    size_t kl = strlen(key);
    for (int i = 0; i < r->nargs; i++)
        if (r->args[i] && strncmp(r->args[i], key, kl) == 0 && r->args[i][kl] == '=') return r->args[i] + kl + 1;
    return NULL;
}

/* The token part of a verdict: the credential presented (the first of
 * Authorization: Bearer, kyutai-api-key, auth=, auth_id=; the Kyutai
 * servers take their header over their query parameter too) against every
 * token. Fills v->status/reason/why on a refusal, v->name/token on a
 * match; returns the matching token or NULL. */
static const access_tok *judge_token(const access_ctl *a, const access_request *r, access_verdict *v) {
    const char *cred = NULL;
    int header = 1;   /* from a header: blanks after it are not part of it (RFC 9110 5.5) */
    const char *au = r->authorization ? r->authorization : "";
    if (au[0]) {
        if (strncasecmp(au, "Bearer ", 7) != 0) {
            v->status = 401;
            v->reason = ACCESS_R_missing_token;
            snprintf(v->why, sizeof v->why,
                     "authentication required: only \"Authorization: Bearer TOKEN\" is accepted");
            return NULL;
        }
        cred = au + 7;
        while (*cred == ' ') cred++;
    } else if (r->api_key && r->api_key[0]) {
        cred = r->api_key;
    } else if (r->nargs > 0) {
        header = 0;
        cred = query_arg(r, "auth");
        if (!cred) cred = query_arg(r, "auth_id");
    }
    if (!cred || !cred[0]) {
        v->status = 401;
        v->reason = ACCESS_R_missing_token;
        snprintf(v->why, sizeof v->why,
                 "authentication required: send a token (Authorization: Bearer, or the auth query parameter)");
        return NULL;
    }
    /* The whole credential, up to a bound well past the longest token:
     * one cut at ACCESS_TOKEN_MAX + 1 bytes would let "TOKEN junk" (a
     * 256-byte token, a blank, anything) pass as TOKEN once the blank
     * after the cut is trimmed. A credential still longer after the trim
     * can match nothing; it is hashed all the same (the work does not
     * depend on the tokens). */
    uint8_t d[DIGEST_BYTES];
    size_t cl = strnlen(cred, ACCESS_CRED_SCAN);
    while (header && cl && (cred[cl - 1] == ' ' || cred[cl - 1] == '\t')) cl--;
    int too_long = cl > ACCESS_TOKEN_MAX;
    access_sha256(cred, too_long ? ACCESS_TOKEN_MAX + 1 : cl, d);
    /* every presentable token is compared, none skipped at a match */
    int found = -1;
    for (int i = 0; i < a->ntok; i++) {
        int m = -(int)(digest_eq(d, a->tok[i].digest) & (unsigned)!a->tok[i].withdrawn & (unsigned)!too_long);
        found = (found & ~m) | (i & m);
    }
    memset(d, 0, sizeof d);
    if (found < 0) {
        v->status = 401;
        v->reason = ACCESS_R_unknown_token;
        snprintf(v->why, sizeof v->why, "authentication failed: unknown token");
        return NULL;
    }
    const access_tok *t = &a->tok[found];
    snprintf(v->name, sizeof v->name, "%s", t->name);
    v->token = t->id;
    return t;
}

void access_admit(access_ctl *a, const access_request *r, access_verdict *v) {
    memset(v, 0, sizeof *v);
    int st = judge_origin(a, r, v->why, sizeof v->why);
    if (st) {
        v->status = st;
        v->reason = ACCESS_R_origin;
        return;
    }
    if (!a->required) return;
    const access_tok *t = judge_token(a, r, v);
    if (t && t->max_sessions && t->open >= t->max_sessions) {
        v->status = 429;
        v->reason = ACCESS_R_token_limit;
        snprintf(v->why, sizeof v->why, "this token's session limit is reached: %d sessions open; try again later",
                 t->open);
    }
}

void access_authenticate(const access_ctl *a, const access_request *r, access_verdict *v) {
    memset(v, 0, sizeof *v);
    if (a->required) judge_token(a, r, v);
}

static access_tok *find(const access_ctl *a, uint64_t id) {
    for (int i = 0; i < a->ntok; i++)
        if (a->tok[i].id == id) return &a->tok[i];
    return NULL;
}

int access_acquire(access_ctl *a, uint64_t id, ms_error *err) {
    if (id == 0) return MS_OK;
    access_tok *t = find(a, id);
    if (!t || t->withdrawn) return ms_err_set(err, MS_ERR_NOTFOUND, "authentication failed: the token was withdrawn");
    if (t->max_sessions && t->open >= t->max_sessions)
        return ms_err_set(err, MS_ERR_LIMIT, "this token's session limit is reached: %d sessions open; try again later",
                          t->open);
    t->open++;
    return MS_OK;
}

void access_release(access_ctl *a, uint64_t id) {
    if (id == 0) return;
    access_tok *t = find(a, id);
    if (!t || t->open <= 0) return;   /* a programming error; never below zero */
    if (--t->open == 0 && t->withdrawn) { /* the last session of a withdrawn token: forget it */
        int i = (int)(t - a->tok);
        a->tok[i] = a->tok[--a->ntok];
    }
}

int access_open(const access_ctl *a, uint64_t id) {
    const access_tok *t = find(a, id);
    return t ? t->open : 0;
}

const char *access_name(const access_ctl *a, uint64_t id) {
    const access_tok *t = id ? find(a, id) : NULL;
    return t ? t->name : "";
}
