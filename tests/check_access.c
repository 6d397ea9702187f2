/* check_access.c - the access policy (daemon/net/access.h): origins, the
 * tokens file, token checks, per-token session limits, reload. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "check_main.h"

#define TOK_A "alice-0123456789abcdef"
#define TOK_B "bob-0123456789abcdef-b"
#define TOK_C "carol-0123456789abcdefc"

static access_ctl *with_tokens(const char *text) {
    access_ctl *a = access_create();
    ck_assert_ptr_nonnull(a);
    ms_error e = {0};
    ck_assert_msg(access_parse_tokens(a, text, strlen(text), "tokens", &e) == MS_OK, "%s", e.msg);
    return a;
}

/* access_admit on a request with the given headers and query arguments
 * (NULL-terminated), no Origin. */
static access_verdict admit_q(access_ctl *a, const char *authz, const char *api_key, const char *const *args) {
    int n = 0;
    while (args && args[n]) n++;
    access_request r = {.host = "127.0.0.1:8998", .origin = "", .authorization = authz ? authz : "",
                        .api_key = api_key ? api_key : "", .args = args, .nargs = n, .tls = 0};
    access_verdict v;
    access_admit(a, &r, &v);
    return v;
}

static access_verdict admit_origin(access_ctl *a, const char *origin, const char *host, int tls) {
    access_request r = {.host = host, .origin = origin, .authorization = "", .api_key = "", .args = NULL,
                        .nargs = 0, .tls = tls};
    access_verdict v;
    access_admit(a, &r, &v);
    return v;
}

START_TEST(test_sha256) {
    /* FIPS 180-2 examples */
    static const uint8_t abc[32] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
                                    0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
                                    0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    static const uint8_t empty[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                      0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                      0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};
    uint8_t d[32];
    access_sha256("abc", 3, d);
    ck_assert_mem_eq(d, abc, 32);
    access_sha256("", 0, d);
    ck_assert_mem_eq(d, empty, 32);
}
END_TEST

START_TEST(test_origin_entries) {
    static const char *const good[] = {"*", "same-origin", "localhost", "https://voice.example",
                                       "http://voice.example:8998", "https://[::1]:8443", "http://10.0.0.5",
                                       "HTTPS://Voice.Example:443", NULL};
    static const char *const bad[] = {"", "same_origin", "null", "voice.example", "ftp://voice.example",
                                      "https://voice.example/", "https://voice.example:0", "https://voice.example:65536",
                                      "https://voice.example:80a", "https://", "https://[zz]:1", "https://-a.example",
                                      "https://a b", NULL};
    char why[256];
    for (int i = 0; good[i]; i++) ck_assert_msg(access_origin_entry_ok(good[i], why, sizeof why) == 0, "%s", good[i]);
    for (int i = 0; bad[i]; i++) {
        why[0] = '\0';
        ck_assert_msg(access_origin_entry_ok(bad[i], why, sizeof why) != 0, "accepted %s", bad[i]);
        ck_assert_msg(strstr(why, "is not"), "reason for %s: %s", bad[i], why);
    }
    access_ctl *a = access_create();
    ms_error e = {0};
    const char *const list[] = {"localhost", "bad entry"};
    ck_assert_int_ne(access_set_origins(a, list, 2, &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "allowed_origins[1]"));
    /* the failed call changed nothing: the default still holds */
    ck_assert_int_eq(admit_origin(a, "http://localhost:3000", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "http://evil.example", "127.0.0.1:8998", 0).status, 403);
    access_free(a);
}
END_TEST

START_TEST(test_default_origins) {
    access_ctl *a = access_create();
    access_verdict v;
    /* no Origin: a program, not judged by origin */
    ck_assert_int_eq(admit_origin(a, "", "127.0.0.1:8998", 0).status, 0);
    v = admit_origin(a, "http://evil.example", "127.0.0.1:8998", 0);
    ck_assert_int_eq(v.status, 403);
    ck_assert_int_eq(v.reason, ACCESS_R_origin);
    ck_assert_str_eq(access_reason_name(v.reason), "origin");
    ck_assert_ptr_nonnull(strstr(v.why, "http://evil.example"));
    ck_assert_ptr_nonnull(strstr(v.why, "server.allowed_origins"));
    /* localhost pages, any port, either scheme */
    ck_assert_int_eq(admit_origin(a, "http://localhost:5173", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "https://127.0.0.1:1", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "http://[::1]:8080", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "http://LOCALHOST", "127.0.0.1:8998", 0).status, 0);
    /* look-alikes are not localhost */
    ck_assert_int_eq(admit_origin(a, "http://localhost.evil.example", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://127.0.0.2", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "null", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://localhost:8998/x", "127.0.0.1:8998", 0).status, 403);
    /* same-origin by IP literal: the page came from this listener */
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.5:8998", "192.168.1.5:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "https://192.168.1.5:8998", "192.168.1.5:8998", 1).status, 0);
    ck_assert_int_eq(admit_origin(a, "https://[fe80::1]", "[FE80::1]:443", 1).status, 0);
    /* default ports on either side */
    ck_assert_int_eq(admit_origin(a, "http://10.0.0.5", "10.0.0.5:80", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "https://10.0.0.5:443", "10.0.0.5", 1).status, 0);
    /* scheme must be the listener's, port and host the Host header's */
    ck_assert_int_eq(admit_origin(a, "https://192.168.1.5:8998", "192.168.1.5:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.5:8998", "192.168.1.5:8998", 1).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.5:8999", "192.168.1.5:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.6:8998", "192.168.1.5:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.5:8998", "", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://192.168.1.5:8998", "192.168.1.5:8998:1", 0).status, 403);
    /* same-origin by host name: without tokens a rebound name would pass */
    v = admit_origin(a, "http://voice.example:8998", "voice.example:8998", 0);
    ck_assert_int_eq(v.status, 403);
    ck_assert_ptr_nonnull(strstr(v.why, "DNS rebinding"));
    access_free(a);
    a = with_tokens("u:" TOK_A "\n");
    ck_assert_int_eq(admit_origin(a, "http://Voice.Example:8998", "voice.example:8998", 0).status, 401); /* origin ok */
    ck_assert_int_eq(admit_origin(a, "http://evil.example:8998", "voice.example:8998", 0).status, 403);
    access_free(a);
}
END_TEST

START_TEST(test_listed_origins) {
    access_ctl *a = access_create();
    ms_error e = {0};
    const char *const list[] = {"https://voice.example", "http://app.example:8080"};
    ck_assert_int_eq(access_set_origins(a, list, 2, &e), MS_OK);
    ck_assert_int_eq(admit_origin(a, "https://voice.example:443", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "HTTPS://VOICE.EXAMPLE", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "http://app.example:8080", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "http://voice.example", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://app.example", "127.0.0.1:8998", 0).status, 403);
    /* the list replaces the default: no keyword, no localhost, no same-origin */
    ck_assert_int_eq(admit_origin(a, "http://localhost:3000", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "http://127.0.0.1:8998", "127.0.0.1:8998", 0).status, 403);
    const char *const any[] = {"*"};
    ck_assert_int_eq(access_set_origins(a, any, 1, &e), MS_OK);
    ck_assert_int_eq(admit_origin(a, "http://evil.example", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(admit_origin(a, "null", "127.0.0.1:8998", 0).status, 0);
    ck_assert_int_eq(access_set_origins(a, NULL, 0, &e), MS_OK); /* [] = programs only */
    ck_assert_int_eq(admit_origin(a, "http://localhost", "127.0.0.1:8998", 0).status, 403);
    ck_assert_int_eq(admit_origin(a, "", "127.0.0.1:8998", 0).status, 0);
    access_free(a);
}
END_TEST

START_TEST(test_parse_tokens) {
    access_ctl *a = with_tokens("# moshid tokens\n"
                                "\n"
                                "  alice:" TOK_A ":2  \r\n"
                                "\t# indented comment\n"
                                "bob.b-1_x:" TOK_B "\n"
                                "carol:" TOK_C ":65535");
    ck_assert_int_eq(access_required(a), 1);
    ck_assert_int_eq(access_ntokens(a), 3);
    const char *args[] = {"auth=" TOK_B, NULL};
    access_verdict v = admit_q(a, NULL, NULL, args);
    ck_assert_int_eq(v.status, 0);
    ck_assert_str_eq(v.name, "bob.b-1_x");
    ck_assert_str_eq(access_name(a, v.token), "bob.b-1_x");
    access_free(a);
}
END_TEST

/* Each bad file: refused, nothing changed, the message names the line
 * (when given) and never holds the token text. */
START_TEST(test_bad_token_files) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "no token"},
        {"# only a comment\n\n", "no token"},
        {"alice\n", ":1: expected NAME:TOKEN"},
        {"alice:short-token\n", ":1: token of alice: 11 bytes, must be 16 to 256"},
        {"alice:" TOK_A "!\n", ":1: token of alice: only letters"},
        {"alice:" TOK_A " x\n", ":1: token of alice: only letters"},
        {":" TOK_A "\n", ":1: the name must hold"},
        {"al ice:" TOK_A "\n", ":1: the name may hold only"},
        {"alice:" TOK_A ":0\n", ":1: MAX_SESSIONS must be 1 to 65535"},
        {"alice:" TOK_A ":65536\n", ":1: MAX_SESSIONS"},
        {"alice:" TOK_A ":\n", ":1: MAX_SESSIONS"},
        {"alice:" TOK_A ":2:3\n", ":1: MAX_SESSIONS"},
        {"alice:" TOK_A ":-1\n", ":1: MAX_SESSIONS"},
        {"alice:" TOK_A "\nalice:" TOK_B "\n", ":2: name alice given twice"},
        {"alice:" TOK_A "\nbob:" TOK_A "\n", ":2: the token of bob is also that of alice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        access_ctl *a = with_tokens("keep:" TOK_C "\n");
        ms_error e = {0};
        int rc = access_parse_tokens(a, cases[i].text, strlen(cases[i].text), "t.txt", &e);
        ck_assert_msg(rc != MS_OK, "case %zu accepted", i);
        ck_assert_msg(strstr(e.msg, cases[i].want), "case %zu: %s", i, e.msg);
        ck_assert_msg(!strstr(e.msg, "0123456789abcdef"), "case %zu shows the token: %s", i, e.msg);
        /* the old set is in force */
        const char *args[] = {"auth=" TOK_C, NULL};
        ck_assert_int_eq(admit_q(a, NULL, NULL, args).status, 0);
        ck_assert_int_eq(access_ntokens(a), 1);
        access_free(a);
    }
    /* a line over ACCESS_LINE_MAX, a NUL byte, more than ACCESS_MAX_TOKENS */
    access_ctl *a = access_create();
    ms_error e = {0};
    char line[ACCESS_LINE_MAX + 16];
    memset(line, 'x', sizeof line);
    memcpy(line, "n:", 2);
    ck_assert_int_ne(access_parse_tokens(a, line, sizeof line, "t", &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "line longer than"));
    static const char nul[] = "alice:" TOK_A "\0x\n";
    ck_assert_int_ne(access_parse_tokens(a, nul, sizeof nul - 1, "t", &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "NUL"));
    static char many[(ACCESS_MAX_TOKENS + 1) * 40];
    size_t used = 0;
    for (int i = 0; i <= ACCESS_MAX_TOKENS; i++)
        used += (size_t)snprintf(many + used, sizeof many - used, "n%d:token-%020d\n", i, i);
    ck_assert_int_ne(access_parse_tokens(a, many, used, "t", &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "more than 1024 tokens"));
    /* exactly ACCESS_MAX_TOKENS is fine */
    size_t last = used;
    while (last > 0 && many[last - 1] == '\n') last--;
    while (last > 0 && many[last - 1] != '\n') last--;
    ck_assert_int_eq(access_parse_tokens(a, many, last, "t", &e), MS_OK);
    ck_assert_int_eq(access_ntokens(a), ACCESS_MAX_TOKENS);
    ck_assert_int_eq(access_required(a), 1);
    access_free(a);
}
END_TEST

START_TEST(test_credentials) {
    access_ctl *a = with_tokens("alice:" TOK_A "\nbob:" TOK_B "\n");
    access_verdict v = admit_q(a, NULL, NULL, NULL);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_missing_token);
    ck_assert_ptr_nonnull(strstr(v.why, "authentication required"));
    const char *wrong[] = {"auth=" TOK_A "x", NULL};
    v = admit_q(a, NULL, NULL, wrong);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_unknown_token);
    ck_assert_str_eq(v.why, "authentication failed: unknown token");
    ck_assert_str_eq(v.name, "");
    /* a prefix of a token, and a token with a suffix, are other tokens */
    const char *prefix[] = {"auth=alice-0123456789abcde", NULL};
    ck_assert_int_eq(admit_q(a, NULL, NULL, prefix).status, 401);
    const char *spaced[] = {"auth=" TOK_A " ", NULL};   /* in a query a blank is part of the value */
    ck_assert_int_eq(admit_q(a, NULL, NULL, spaced).status, 401);
    ck_assert_str_eq(admit_q(a, "Bearer " TOK_A " \t", NULL, NULL).name, "alice");   /* a header's OWS is not */
    /* each way of presenting it */
    ck_assert_str_eq(admit_q(a, "Bearer " TOK_A, NULL, NULL).name, "alice");
    ck_assert_str_eq(admit_q(a, "bearer   " TOK_B, NULL, NULL).name, "bob");
    ck_assert_str_eq(admit_q(a, NULL, TOK_A, NULL).name, "alice");
    const char *q1[] = {"text_topk=5", "auth=" TOK_B, NULL};
    ck_assert_str_eq(admit_q(a, NULL, NULL, q1).name, "bob");
    const char *q2[] = {"auth_id=" TOK_A, NULL};
    ck_assert_str_eq(admit_q(a, NULL, NULL, q2).name, "alice");
    const char *q3[] = {"authx=" TOK_A, "auth", NULL};  /* neither is the auth parameter */
    ck_assert_int_eq(admit_q(a, NULL, NULL, q3).reason, ACCESS_R_missing_token);
    /* other schemes are refused, and said so */
    v = admit_q(a, "Basic YWxpY2U6eA==", NULL, q1);
    ck_assert_int_eq(v.status, 401);
    ck_assert_ptr_nonnull(strstr(v.why, "Bearer"));
    /* precedence: Authorization, kyutai-api-key, auth, auth_id (the first
     * present decides, a wrong one is not rescued by a later right one) */
    ck_assert_int_eq(admit_q(a, "Bearer wrong-token-0000000000", TOK_A, q1).status, 401);
    ck_assert_int_eq(admit_q(a, NULL, "wrong-token-0000000000", q1).status, 401);
    const char *q4[] = {"auth=wrong-token-0000000000", "auth_id=" TOK_A, NULL};
    ck_assert_int_eq(admit_q(a, NULL, NULL, q4).status, 401);
    ck_assert_str_eq(admit_q(a, "Bearer " TOK_B, "wrong-token-0000000000", NULL).name, "bob");
    /* over the query limits: no query token */
    access_request r = {.host = "", .origin = "", .authorization = "", .api_key = "", .args = q1, .nargs = -1};
    access_admit(a, &r, &v);
    ck_assert_int_eq(v.reason, ACCESS_R_missing_token);
    /* the origin is judged first */
    r = (access_request){.host = "127.0.0.1:1", .origin = "http://evil.example", .authorization = "Bearer " TOK_A,
                         .api_key = "", .args = NULL, .nargs = 0};
    access_admit(a, &r, &v);
    ck_assert_int_eq(v.status, 403);
    access_free(a);
    /* no tokens file: credentials are not looked at */
    a = access_create();
    ck_assert_int_eq(access_required(a), 0);
    v = admit_q(a, "Bearer nonsense", NULL, wrong);
    ck_assert_int_eq(v.status, 0);
    ck_assert_uint_eq(v.token, 0);
    ck_assert_int_eq(access_acquire(a, 0, NULL), MS_OK);
    access_free(a);
}
END_TEST

START_TEST(test_session_limits) {
    access_ctl *a = with_tokens("alice:" TOK_A ":2\nbob:" TOK_B "\n");
    const char *qa[] = {"auth=" TOK_A, NULL}, *qb[] = {"auth=" TOK_B, NULL};
    access_verdict v = admit_q(a, NULL, NULL, qa);
    uint64_t ta = v.token;
    ck_assert_uint_ne(ta, 0);
    ms_error e = {0};
    ck_assert_int_eq(access_acquire(a, ta, &e), MS_OK);
    ck_assert_int_eq(admit_q(a, NULL, NULL, qa).status, 0);
    ck_assert_int_eq(access_acquire(a, ta, &e), MS_OK);
    ck_assert_int_eq(access_open(a, ta), 2);
    v = admit_q(a, NULL, NULL, qa);
    ck_assert_int_eq(v.status, 429);
    ck_assert_int_eq(v.reason, ACCESS_R_token_limit);
    ck_assert_str_eq(v.name, "alice");
    ck_assert_ptr_nonnull(strstr(v.why, "session limit"));
    /* a session that got past the admission before the count rose */
    ck_assert_int_eq(access_acquire(a, ta, &e), MS_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(e.msg, "session limit"));
    ck_assert_int_eq(access_open(a, ta), 2);
    /* another token still gets in (no limit of its own) */
    v = admit_q(a, NULL, NULL, qb);
    ck_assert_int_eq(v.status, 0);
    for (int i = 0; i < 50; i++) ck_assert_int_eq(access_acquire(a, v.token, &e), MS_OK);
    /* a release frees one place */
    access_release(a, ta);
    ck_assert_int_eq(access_open(a, ta), 1);
    ck_assert_int_eq(admit_q(a, NULL, NULL, qa).status, 0);
    access_release(a, ta);
    access_release(a, ta);   /* one too many: ignored, never below zero */
    ck_assert_int_eq(access_open(a, ta), 0);
    access_free(a);
}
END_TEST

START_TEST(test_reload) {
    access_ctl *a = with_tokens("alice:" TOK_A ":1\nbob:" TOK_B "\n");
    const char *qa[] = {"auth=" TOK_A, NULL}, *qb[] = {"auth=" TOK_B, NULL}, *qc[] = {"auth=" TOK_C, NULL};
    uint64_t ta = admit_q(a, NULL, NULL, qa).token, tb = admit_q(a, NULL, NULL, qb).token;
    ms_error e = {0};
    ck_assert_int_eq(access_acquire(a, ta, &e), MS_OK);
    ck_assert_int_eq(access_acquire(a, tb, &e), MS_OK);
    ck_assert_int_eq(access_acquire(a, tb, &e), MS_OK);
    /* bob removed, alice kept (renamed, limit raised), carol added */
    static const char next[] = "alice2:" TOK_A ":3\ncarol:" TOK_C "\n";
    ck_assert_int_eq(access_parse_tokens(a, next, strlen(next), "t", &e), MS_OK);
    ck_assert_int_eq(access_ntokens(a), 2);
    access_verdict v = admit_q(a, NULL, NULL, qa);
    ck_assert_int_eq(v.status, 0);
    ck_assert_uint_eq(v.token, ta);          /* same token: same id, its count kept */
    ck_assert_str_eq(v.name, "alice2");
    ck_assert_int_eq(access_open(a, ta), 1);
    ck_assert_int_eq(admit_q(a, NULL, NULL, qc).status, 0);
    /* bob: refused for new sessions; his two open sessions keep their count */
    v = admit_q(a, NULL, NULL, qb);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_unknown_token);
    ck_assert_int_eq(access_acquire(a, tb, &e), MS_ERR_NOTFOUND);
    ck_assert_int_eq(access_open(a, tb), 2);
    ck_assert_str_eq(access_name(a, tb), "bob");
    access_release(a, tb);
    access_release(a, tb);
    ck_assert_int_eq(access_open(a, tb), 0);
    ck_assert_str_eq(access_name(a, tb), "");   /* forgotten with its last session */
    /* bob back: a new id, nothing carried over */
    static const char again[] = "alice:" TOK_A ":3\nbob:" TOK_B "\n";
    ck_assert_int_eq(access_parse_tokens(a, again, strlen(again), "t", &e), MS_OK);
    v = admit_q(a, NULL, NULL, qb);
    ck_assert_int_eq(v.status, 0);
    ck_assert_uint_ne(v.token, tb);
    /* a token withdrawn while held, then given back: the same id and count */
    uint64_t tb2 = v.token;
    ck_assert_int_eq(access_acquire(a, tb2, &e), MS_OK);
    static const char nobob[] = "alice:" TOK_A ":3\n";
    ck_assert_int_eq(access_parse_tokens(a, nobob, strlen(nobob), "t", &e), MS_OK);
    ck_assert_int_eq(admit_q(a, NULL, NULL, qb).status, 401);
    ck_assert_int_eq(access_parse_tokens(a, again, strlen(again), "t", &e), MS_OK);
    v = admit_q(a, NULL, NULL, qb);
    ck_assert_int_eq(v.status, 0);
    ck_assert_uint_eq(v.token, tb2);
    ck_assert_int_eq(access_open(a, tb2), 1);
    ck_assert_int_eq(access_ntokens(a), 2);
    access_release(a, tb2);
    /* authentication off: every token withdrawn, held counts kept until released */
    ck_assert_int_eq(access_load_tokens(a, "", NULL, &e), MS_OK);
    ck_assert_int_eq(access_required(a), 0);
    ck_assert_int_eq(access_ntokens(a), 0);
    ck_assert_uint_eq(admit_q(a, NULL, NULL, qa).token, 0);
    ck_assert_int_eq(access_open(a, ta), 1);
    access_release(a, ta);
    ck_assert_str_eq(access_name(a, ta), "");
    access_free(a);
}
END_TEST

START_TEST(test_load_file) {
    char dir[] = "/tmp/check_access_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/tokens", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "alice:%s\n", TOK_A);
    fclose(f);
    access_ctl *a = access_create();
    ms_error e = {0};
    int loose = -1;
    chmod(path, 0600);
    ck_assert_msg(access_load_tokens(a, path, &loose, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(loose, 0);
    chmod(path, 0644);
    ck_assert_int_eq(access_load_tokens(a, path, &loose, &e), MS_OK);
    ck_assert_int_eq(loose, 1);
    /* a directory, a missing file, a file over ACCESS_FILE_MAX */
    ck_assert_int_ne(access_load_tokens(a, dir, NULL, &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "not a regular file"));
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", dir);
    ck_assert_int_ne(access_load_tokens(a, missing, NULL, &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "cannot open"));
    f = fopen(path, "w");
    for (int i = 0; i <= ACCESS_FILE_MAX / 32; i++) fprintf(f, "# %060d\n", i);
    fclose(f);
    ck_assert_int_ne(access_load_tokens(a, path, NULL, &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "larger than"));
    /* the set of the last good load is still in force */
    const char *qa[] = {"auth=" TOK_A, NULL};
    ck_assert_str_eq(admit_q(a, NULL, NULL, qa).name, "alice");
    unlink(path);
    rmdir(dir);
    access_free(a);
}
END_TEST

/* A token of the largest length: a credential of that token, a blank and
 * more bytes is not that token (a cut of the credential at
 * ACCESS_TOKEN_MAX + 1 bytes, then the trim of trailing blanks, once let
 * it through), in a header and in the query alike; trailing blanks of a
 * header alone are still dropped. */
START_TEST(test_longest_token_and_junk) {
    char tok[ACCESS_TOKEN_MAX + 1], line[ACCESS_TOKEN_MAX + 16], cred[ACCESS_TOKEN_MAX + 64];
    memset(tok, 'k', ACCESS_TOKEN_MAX);
    tok[ACCESS_TOKEN_MAX] = '\0';
    snprintf(line, sizeof line, "big:%s\n", tok);
    access_ctl *a = with_tokens(line);
    snprintf(cred, sizeof cred, "Bearer %s", tok);
    ck_assert_int_eq(admit_q(a, cred, NULL, NULL).status, 0);
    snprintf(cred, sizeof cred, "Bearer %s   ", tok);
    ck_assert_int_eq(admit_q(a, cred, NULL, NULL).status, 0);
    snprintf(cred, sizeof cred, "Bearer %s junk", tok);
    access_verdict v = admit_q(a, cred, NULL, NULL);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_unknown_token);
    snprintf(cred, sizeof cred, "%s x", tok);
    ck_assert_int_eq(admit_q(a, NULL, cred, NULL).status, 401);
    snprintf(cred, sizeof cred, "auth=%s x", tok);
    const char *q[] = {cred, NULL};
    ck_assert_int_eq(admit_q(a, NULL, NULL, q).status, 401);
    /* one byte more than the token, no blank: not it either */
    snprintf(cred, sizeof cred, "Bearer %sk", tok);
    ck_assert_int_eq(admit_q(a, cred, NULL, NULL).status, 401);
    access_free(a);
}
END_TEST

/* access_authenticate: the token alone, for plain HTTP requests: no
 * origin check, no session limit; open without a tokens file. */
START_TEST(test_authenticate) {
    access_ctl *open_ = access_create();
    access_request r = {.host = "h", .origin = "http://evil.example", .authorization = "", .api_key = "",
                        .args = NULL, .nargs = 0};
    access_verdict v;
    access_authenticate(open_, &r, &v);
    ck_assert_int_eq(v.status, 0);
    access_free(open_);

    access_ctl *a = with_tokens("lim:" TOK_A ":1\n");
    access_authenticate(a, &r, &v);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_missing_token);
    ck_assert_ptr_nonnull(strstr(v.why, "authentication required"));
    r.authorization = "Bearer " TOK_B;
    access_authenticate(a, &r, &v);
    ck_assert_int_eq(v.status, 401);
    ck_assert_int_eq(v.reason, ACCESS_R_unknown_token);
    /* the origin is not judged, and a token at its session limit still
     * authenticates (a request is no session) */
    ms_error e = {0};
    access_verdict adm = admit_q(a, NULL, TOK_A, NULL);
    ck_assert_int_eq(adm.status, 0);
    ck_assert_int_eq(access_acquire(a, adm.token, &e), MS_OK);
    r.authorization = "";
    r.api_key = TOK_A;
    access_authenticate(a, &r, &v);
    ck_assert_int_eq(v.status, 0);
    ck_assert_str_eq(v.name, "lim");
    ck_assert_int_eq(admit_q(a, NULL, TOK_A, NULL).status, 429);
    const char *q[] = {"auth_id=" TOK_A, NULL};
    r.api_key = "";
    r.args = q;
    r.nargs = 1;
    access_authenticate(a, &r, &v);
    ck_assert_int_eq(v.status, 0);
    access_release(a, adm.token);
    access_free(a);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("access");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_sha256);
    tcase_add_test(tc, test_origin_entries);
    tcase_add_test(tc, test_default_origins);
    tcase_add_test(tc, test_listed_origins);
    tcase_add_test(tc, test_parse_tokens);
    tcase_add_test(tc, test_bad_token_files);
    tcase_add_test(tc, test_credentials);
    tcase_add_test(tc, test_session_limits);
    tcase_add_test(tc, test_reload);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_longest_token_and_junk);
    tcase_add_test(tc, test_authenticate);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
