/* access.h - who may open a session: the Origin policy and bearer tokens
 * with per-token session limits (docs/security.md). The decision logic and
 * the token file's parser; no sockets, no logging, no metrics (the caller,
 * app.c's ws_admit, logs and counts what it decides).
 *
 * Origins: server.allowed_origins holds keywords and origins:
 *   "same-origin"  the Origin's scheme://host:port is the listener's own:
 *                  scheme https on a TLS listener (http otherwise), host
 *                  and port those of the Host header (ports defaulted by
 *                  scheme). While no token is required, a host *name*
 *                  (not an IP literal, not "localhost") is not enough:
 *                  a page that rebinds its own DNS name to this address
 *                  would pass (DNS rebinding); such origins need a token
 *                  or an explicit entry.
 *   "localhost"    http(s)://localhost, 127.0.0.1 or [::1], any port;
 *   "*"            any origin;
 *   an origin      scheme://host[:port], matched after normalisation
 *                  (lower-case scheme and host, default port made
 *                  explicit).
 * An upgrade without an Origin header (a program, not a browser) is not
 * judged by origin. An Origin that matches no entry is refused (403).
 *
 * Tokens (auth.tokens_file; "" = no authentication): one per line,
 *   NAME:TOKEN[:MAX_SESSIONS]
 * NAME [A-Za-z0-9_.-]{1,64}, unique; TOKEN ACCESS_TOKEN_MIN..MAX bytes of
 * [A-Za-z0-9._~-] (characters that travel unchanged in a URL, a header
 * and a file), unique; MAX_SESSIONS 1..ACCESS_MAX_SESSIONS sessions open
 * at once with this token (absent = only sessions.max bounds it). Blank
 * lines and lines whose first non-blank character is '#' are ignored;
 * blanks around a line and a final '\r' are dropped; anything else is an
 * error naming the line. A token is presented as "Authorization: Bearer
 * TOKEN", the "kyutai-api-key" header, or the "auth" or "auth_id" query
 * parameter (the first present of those, in that order). Tokens are kept
 * only as SHA-256 digests, and a presented one is compared with every
 * digest without stopping at a match (time independent of which token,
 * if any, matches, and of the tokens' lengths).
 *
 * Threading: one thread (the loop thread).
 */
#ifndef MOSHID_ACCESS_H
#define MOSHID_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ACCESS_TOKEN_MIN 16            /* bytes of a token */
#define ACCESS_TOKEN_MAX 256
#define ACCESS_NAME_MAX 64             /* bytes of a token's name */
#define ACCESS_MAX_TOKENS 1024         /* tokens in one file */
#define ACCESS_MAX_SESSIONS 65535      /* largest per-token session limit */
#define ACCESS_FILE_MAX (256 * 1024)   /* bytes of the tokens file */
#define ACCESS_LINE_MAX 512            /* bytes of one line of it */
#define ACCESS_MAX_ORIGINS 64          /* entries of server.allowed_origins (CFG_MAX_LIST) */
#define ACCESS_ORIGIN_MAX 1024         /* bytes of one entry or Origin header */
#define ACCESS_REASON_MAX 200          /* bytes of a refusal's reason, NUL included */

/* Why an upgrade was refused: the labels of moshid_auth_refused_total. */
#define ACCESS_REFUSALS(X) X(origin) X(missing_token) X(unknown_token) X(token_limit)
enum {
    ACCESS_OK = 0,
#define ACCESS_R(k) ACCESS_R_##k,
    ACCESS_REFUSALS(ACCESS_R)
#undef ACCESS_R
    ACCESS_R__COUNT
};
/* access_reason_name: "origin", ... ("ok" for ACCESS_OK). */
const char *access_reason_name(int reason);

typedef struct access_ctl access_ctl;

/* What the policy sees of an upgrade (or, for access_authenticate, a
 * plain HTTP) request (borrowed; absent headers are ""). args: the
 * decoded query arguments, "name=value". */
typedef struct access_request {
    const char *host;              /* Host header */
    const char *origin;            /* Origin header */
    const char *authorization;     /* Authorization header */
    const char *api_key;           /* kyutai-api-key header */
    const char *const *args;
    int nargs;                     /* < 0: over the query limits (no query token then) */
    int tls;                       /* 1 on an https/wss listener */
} access_request;

/* What access_admit decided. */
typedef struct access_verdict {
    int status;                    /* 0 = admitted, else the HTTP status (401, 403, 429) */
    int reason;                    /* ACCESS_OK or ACCESS_R_* */
    uint64_t token;                /* the token's id (access_acquire), 0 when none is required */
    char name[ACCESS_NAME_MAX + 1];    /* its name ("" when none): for logs, never the token */
    char why[ACCESS_REASON_MAX];   /* one line for the client ("" when admitted) */
} access_verdict;

/* access_create: no token required, origins "same-origin" + "localhost"
 * (the configuration's default). NULL when out of memory. */
access_ctl *access_create(void);
/* access_free: a may be NULL. Tokens still held by sessions are freed too
 * (the caller closes its sessions first). */
void access_free(access_ctl *a);

/* access_set_origins: replace the origin list by list[0..n) (the
 * configuration's validator accepted them: see access_origin_entry_ok).
 * On error (a bad entry, more than ACCESS_MAX_ORIGINS) nothing changes. */
int access_set_origins(access_ctl *a, const char *const *list, int n, ms_error *err);
/* access_origin_entry_ok: whether s is a valid server.allowed_origins
 * entry (a keyword, "*", or scheme://host[:port]); why[0..len) says why not. */
int access_origin_entry_ok(const char *s, char *why, size_t len);

/* access_parse_tokens: check and load the tokens of a file's text[0..len)
 * (name names it in messages) into a; on error nothing changes and err
 * names the line. A token kept by the new text (the same token) keeps its
 * id and its open sessions (its name and limit may change); a token not in
 * it can no longer be presented, and the sessions that hold it keep
 * running (its count lives until the last is released, and comes back
 * with the token if a later text gives it back meanwhile). */
int access_parse_tokens(access_ctl *a, const char *text, size_t len, const char *name, ms_error *err);
/* access_load_tokens: access_parse_tokens on the file at path (a regular
 * file of at most ACCESS_FILE_MAX bytes); path "" turns authentication
 * off (every token is withdrawn as above). *loose (may be NULL) is set to
 * 1 when the file can be read by group or others (the caller warns). */
int access_load_tokens(access_ctl *a, const char *path, int *loose, ms_error *err);
/* access_required: 1 when a token is required (a tokens file is loaded). */
int access_required(const access_ctl *a);
/* access_ntokens: tokens that can be presented now. */
int access_ntokens(const access_ctl *a);

/* access_admit: judge an upgrade: the origin (403), then, when tokens are
 * required, the token (401) and its session limit (429). Fills *v. */
void access_admit(access_ctl *a, const access_request *r, access_verdict *v);

/* access_authenticate: the token alone (no origin, no session limit: a
 * plain HTTP request such as /metrics under auth.protect_http). status 0
 * when no token is required or a valid one is presented (v->name, token
 * set); else 401 with v->reason (missing_token, unknown_token) and
 * v->why. */
void access_authenticate(const access_ctl *a, const access_request *r, access_verdict *v);

/* access_acquire: a session of token id opens (the id from an admitted
 * verdict; 0 = none required: nothing to count, MS_OK). MS_OK (counted:
 * access_release it once), MS_ERR_NOTFOUND when the token was withdrawn
 * since, MS_ERR_LIMIT when its limit is reached (err says so, for the
 * client). */
int access_acquire(access_ctl *a, uint64_t id, ms_error *err);
/* access_release: the session of an access_acquire that succeeded ends
 * (once per acquire). */
void access_release(access_ctl *a, uint64_t id);
/* access_open: sessions counted for token id now (0 for an unknown id). */
int access_open(const access_ctl *a, uint64_t id);
/* access_name: the name of token id ("" for 0 or an unknown id): what
 * logs show, never the token. */
const char *access_name(const access_ctl *a, uint64_t id);

/* access_sha256: SHA-256 of data[0..len) into out (exposed for the tests). */
void access_sha256(const void *data, size_t len, uint8_t out[32]);

#endif
