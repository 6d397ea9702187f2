/* selfsign.c - the self-signed certificate of `moshid --self-signed DIR`
 * (OpenSSL's libcrypto). See selfsign.h.
 */
#include "selfsign.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* Serial number length, bytes: random (RFC 5280 4.1.2.2: positive, at most
 * 20 octets; browsers reject a reused issuer + serial pair, and every run
 * here is its own issuer, so randomness is what keeps them apart). */
#define SELFSIGN_SERIAL_BYTES 16
/* The certificate starts this long before it is made, seconds (clock skew
 * of the clients). */
#define SELFSIGN_BACKDATE_S 3600
/* Longest common name, bytes (X.520 ub-common-name). */
#define SELFSIGN_CN_MAX 64

/* One subjectAltName: a DNS name, or an IP address (4 or 16 bytes). */
typedef struct ss_name {
    int is_ip;
    int ip_len;
    unsigned char ip[16];
} ss_name;

typedef struct ss_names {
    int n;
    ss_name v[SELFSIGN_MAX_NAMES];
} ss_names;

/* err <- "what: <the first queued OpenSSL error>" (and the queue cleared).
 * Returns MS_ERR_IO. */
static int ssl_fail(ms_error *err, const char *what) {
    unsigned long e = ERR_get_error();
    char buf[256] = "no detail";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return ms_err_set(err, MS_ERR_IO, "%s: %s", what, buf);
}

/* 1 when s is a host name a certificate can carry as a dNSName: labels of
 * letters, digits and '-' (not at either end), 1..63 bytes, at most 253 in
 * all (RFC 1123). The host's name comes from the system, but an odd one
 * (an underscore, a space) would make a name no browser matches. */
static int dns_name_ok(const char *s) {
    size_t n = strlen(s), label = 0;
    if (n == 0 || n > 253) return 0;
    for (size_t i = 0; i <= n; i++) {
        char c = s[i];
        if (c == '.' || c == '\0') {
            if (label == 0 || label > 63 || s[i - 1] == '-') return 0;
            label = 0;
            continue;
        }
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
        if (!ok || (label == 0 && c == '-')) return 0;
        label++;
    }
    return 1;
}

/* Add one name (text as the certificate will show it; ip/ip_len for an
 * address, NULL for a DNS name) unless it is already there. Over
 * SELFSIGN_MAX_NAMES it is counted in res->n_dropped instead. */
static void add_name(ss_names *ns, selfsign_result *res, const char *text, const void *ip, int ip_len) {
    for (int i = 0; i < res->n_names; i++)
        if (strcasecmp(res->names[i], text) == 0) return;
    if (res->n_names == SELFSIGN_MAX_NAMES) {
        res->n_dropped++;
        return;
    }
    ss_name *n = &ns->v[ns->n++];
    *n = (ss_name){.is_ip = ip != NULL, .ip_len = ip_len};
    if (ip) memcpy(n->ip, ip, (size_t)ip_len);
    snprintf(res->names[res->n_names++], SELFSIGN_NAME_MAX, "%s", text);
}

/* The names clients may use: the loopback ones, the host's name (and the
 * .local name mDNS gives it on a LAN), every address of an interface that
 * is up, but loopback and IPv6 link-local ones (fe80::/10: a URL cannot
 * carry one without a zone index, which browsers do not accept). host gets
 * the name for the common name ("localhost" when there is none usable). */
static void collect_names(ss_names *ns, selfsign_result *res, char *host, size_t host_cap) {
    static const unsigned char v4_loop[4] = {127, 0, 0, 1};
    static const unsigned char v6_loop[16] = {[15] = 1};
    add_name(ns, res, "localhost", NULL, 0);
    add_name(ns, res, "127.0.0.1", v4_loop, 4);
    add_name(ns, res, "::1", v6_loop, 16);

    char hn[SELFSIGN_NAME_MAX] = "";
    snprintf(host, host_cap, "localhost");
    if (gethostname(hn, sizeof hn - 1) == 0 && hn[0]) {
        hn[sizeof hn - 1] = '\0';
        if (dns_name_ok(hn)) {
            add_name(ns, res, hn, NULL, 0);
            snprintf(host, host_cap, "%s", hn);
            char local[SELFSIGN_NAME_MAX + 8];
            snprintf(local, sizeof local, "%s.local", hn);
            /* a bare name only: "host.example.com.local" is no mDNS name,
             * and "localhost" is no host's name on the LAN */
            if (!strchr(hn, '.') && strcasecmp(hn, "localhost") != 0 && dns_name_ok(local))
                add_name(ns, res, local, NULL, 0);
        } else {
            snprintf(res->skipped_host, sizeof res->skipped_host, "%s", hn);
        }
    }

    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return; /* the loopback names and the host's name still serve */
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        char text[INET6_ADDRSTRLEN];
        if (i->ifa_addr->sa_family == AF_INET) {
            const struct in_addr *a = &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr;
            const unsigned char *b = (const unsigned char *)a;
            if (b[0] == 127) continue;
            if (!inet_ntop(AF_INET, a, text, sizeof text)) continue;
            add_name(ns, res, text, a, 4);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr;
            if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a)) continue;
            if (!inet_ntop(AF_INET6, a, text, sizeof text)) continue;
            add_name(ns, res, text, a, 16);
        }
    }
    freeifaddrs(ifs);
}

/* The subjectAltName extension of ns, added to x. */
static int add_sans(X509 *x, const ss_names *ns, const selfsign_result *res, ms_error *err) {
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    if (!gens) return ssl_fail(err, "subjectAltName");
    for (int i = 0; i < ns->n; i++) {
        GENERAL_NAME *g = GENERAL_NAME_new();
        ASN1_STRING *s = ns->v[i].is_ip ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
        int ok = g && s;
        if (ok && ns->v[i].is_ip) ok = ASN1_OCTET_STRING_set(s, ns->v[i].ip, ns->v[i].ip_len);
        else if (ok) ok = ASN1_STRING_set(s, res->names[i], (int)strlen(res->names[i]));
        if (ok) {
            GENERAL_NAME_set0_value(g, ns->v[i].is_ip ? GEN_IPADD : GEN_DNS, s);
            s = NULL; /* g owns it */
            ok = sk_GENERAL_NAME_push(gens, g) > 0;
            if (ok) g = NULL;
        }
        ASN1_STRING_free(s);
        GENERAL_NAME_free(g);
        if (!ok) {
            GENERAL_NAMES_free(gens);
            return ssl_fail(err, "subjectAltName");
        }
    }
    int ok = X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) == 1;
    GENERAL_NAMES_free(gens);
    return ok ? MS_OK : ssl_fail(err, "subjectAltName");
}

/* One extension from its configuration text (OpenSSL's x509v3_config
 * syntax), issuer and subject x itself. */
static int add_ext(X509 *x, int nid, const char *value, ms_error *err) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
    int ok = e && X509_add_ext(x, e, -1) == 1;
    X509_EXTENSION_free(e);
    if (!ok) {
        char what[96];
        snprintf(what, sizeof what, "certificate extension %s", OBJ_nid2sn(nid));
        return ssl_fail(err, what);
    }
    return MS_OK;
}

/* Build the certificate for key and ns; *out on success (caller frees). */
static int make_cert(EVP_PKEY *key, const ss_names *ns, selfsign_result *res, const char *host, X509 **out,
                     ms_error *err) {
    X509 *x = X509_new();
    if (!x) return ssl_fail(err, "certificate");
    int rc = MS_ERR_IO;
    unsigned char serial[SELFSIGN_SERIAL_BYTES];
    BIGNUM *bn = NULL;
    if (RAND_bytes(serial, sizeof serial) != 1) {
        rc = ssl_fail(err, "random serial number");
        goto done;
    }
    serial[0] = (unsigned char)((serial[0] & 0x7f) | 0x01); /* positive, and 16 bytes long */
    bn = BN_bin2bn(serial, sizeof serial, NULL);
    char cn[SELFSIGN_CN_MAX + 1];
    snprintf(cn, sizeof cn, "%s", host);
    X509_NAME *name = X509_get_subject_name(x);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || X509_set_version(x, X509_VERSION_3) != 1 ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -SELFSIGN_BACKDATE_S) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), SELFSIGN_DAYS, -SELFSIGN_BACKDATE_S, NULL) ||
        X509_set_pubkey(x, key) != 1 ||
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"moshid (self-signed)", -1, -1,
                                   0) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) != 1 ||
        X509_set_issuer_name(x, name) != 1) {
        rc = ssl_fail(err, "certificate fields");
        goto done;
    }
    /* A leaf, not a CA: trusting it on a client lets it vouch for this
     * server only, so a copied key cannot mint certificates for other
     * sites. The key identifiers let strict verifiers (X509_STRICT) chain
     * it to itself. */
    if ((rc = add_ext(x, NID_basic_constraints, "critical,CA:FALSE", err)) != MS_OK ||
        (rc = add_ext(x, NID_key_usage, "critical,digitalSignature", err)) != MS_OK ||
        (rc = add_ext(x, NID_ext_key_usage, "serverAuth", err)) != MS_OK ||
        (rc = add_ext(x, NID_subject_key_identifier, "hash", err)) != MS_OK ||
        (rc = add_ext(x, NID_authority_key_identifier, "keyid:always", err)) != MS_OK ||
        (rc = add_sans(x, ns, res, err)) != MS_OK)
        goto done;
    if (X509_sign(x, key, EVP_sha256()) <= 0) {
        rc = ssl_fail(err, "signing the certificate");
        goto done;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (X509_digest(x, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32) {
        rc = ssl_fail(err, "certificate fingerprint");
        goto done;
    }
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(res->fingerprint + 3 * i, sizeof res->fingerprint - 3 * i, i + 1 < mdlen ? "%02X:" : "%02X", md[i]);
    struct tm tm;
    if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
        strftime(res->not_after, sizeof res->not_after, "%Y-%m-%d %H:%M UTC", &tm);
    *out = x;
    x = NULL;
    rc = MS_OK;
done:
    BN_free(bn);
    X509_free(x);
    return rc;
}

typedef int (*pem_writer)(FILE *f, const void *obj);
static int write_key_pem(FILE *f, const void *k) {
    return PEM_write_PrivateKey(f, (EVP_PKEY *)k, NULL, NULL, 0, NULL, NULL);
}
static int write_cert_pem(FILE *f, const void *x) {
    return PEM_write_X509(f, (X509 *)x);
}

/* Write obj to path with mode, never replacing a file: a temporary file in
 * the same directory (mkstemp: mode 0600 from the start), written, flushed
 * to disk, then hard-linked to path (link fails with EEXIST when path
 * exists) and unlinked. */
static int write_new_file(const char *dir, const char *path, mode_t mode, pem_writer w, const void *obj,
                          ms_error *err) {
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.moshid-selfsign.XXXXXX", dir) >= sizeof tmp)
        return ms_err_set(err, MS_ERR_RANGE, "%s: path too long", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) return ms_err_set(err, MS_ERR_IO, "%s: cannot create a file: %s", dir, strerror(errno));
    FILE *f = NULL;
    int rc = MS_OK;
    if (fchmod(fd, mode) != 0 || !(f = fdopen(fd, "w"))) {
        rc = ms_err_set(err, MS_ERR_IO, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (w(f, obj) != 1) rc = ssl_fail(err, path);
    else if (fflush(f) != 0 || fsync(fileno(f)) != 0) rc = ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    if (fclose(f) != 0 && rc == MS_OK) rc = ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    if (rc == MS_OK && link(tmp, path) != 0)
        rc = errno == EEXIST ? ms_err_set(err, MS_ERR_STATE, "%s already exists: not overwritten", path)
                             : ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    unlink(tmp);
    return rc;
}

/* dir made absolute into abs (created, mode 0700, when missing). */
static int prepare_dir(const char *dir, char *abs, ms_error *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT) return ms_err_set(err, MS_ERR_IO, "%s: %s", dir, strerror(errno));
        if (mkdir(dir, 0700) != 0) return ms_err_set(err, MS_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return ms_err_set(err, MS_ERR_ARG, "%s is not a directory", dir);
    }
    if (!realpath(dir, abs)) return ms_err_set(err, MS_ERR_IO, "%s: %s", dir, strerror(errno));
    return MS_OK;
}

int selfsign_write(const char *dir, selfsign_result *res, ms_error *err) {
    memset(res, 0, sizeof *res);
    if (!dir || !dir[0]) return ms_err_set(err, MS_ERR_ARG, "--self-signed: no directory given");
    char abs[PATH_MAX];
    int rc = prepare_dir(dir, abs, err);
    if (rc != MS_OK) return rc;
    if ((size_t)snprintf(res->cert_path, sizeof res->cert_path, "%s/%s", abs, SELFSIGN_CERT_NAME) >=
            sizeof res->cert_path ||
        (size_t)snprintf(res->key_path, sizeof res->key_path, "%s/%s", abs, SELFSIGN_KEY_NAME) >= sizeof res->key_path)
        return ms_err_set(err, MS_ERR_RANGE, "%s: path too long", abs);
    /* Refuse before making anything (write_new_file refuses again, at the
     * link, should a file appear meanwhile). */
    const char *paths[2] = {res->key_path, res->cert_path};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (lstat(paths[i], &st) == 0)
            return ms_err_set(err, MS_ERR_STATE,
                              "%s already exists: not overwritten (remove %s and %s to make a new pair, or "
                              "name another directory)",
                              paths[i], SELFSIGN_CERT_NAME, SELFSIGN_KEY_NAME);
    }

    ss_names ns = {0};
    char host[SELFSIGN_NAME_MAX];
    collect_names(&ns, res, host, sizeof host);

    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!key) return ssl_fail(err, "ECDSA P-256 key");
    X509 *x = NULL;
    rc = make_cert(key, &ns, res, host, &x, err);
    if (rc == MS_OK) rc = write_new_file(abs, res->key_path, 0600, write_key_pem, key, err);
    if (rc == MS_OK) {
        rc = write_new_file(abs, res->cert_path, 0644, write_cert_pem, x, err);
        if (rc != MS_OK) unlink(res->key_path); /* ours: linked above; a key without its certificate is no use */
    }
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

/* s as a JSON string body (quotes, backslashes and control bytes escaped). */
static void put_json(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

/* s as one shell word: bare when it holds only safe bytes, else in single
 * quotes; a quote inside becomes '\'' (close, escaped quote, reopen). */
static void put_shell(FILE *f, const char *s) {
    if (strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+=,:@") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    }
    fputc('\'', f);
}

void selfsign_print(FILE *f, const selfsign_result *res) {
    fprintf(f, "moshid: wrote %s (certificate) and %s (private key, mode 0600)\n", res->cert_path, res->key_path);
    fprintf(f, "  ECDSA P-256, self-signed, valid until %s\n", res->not_after[0] ? res->not_after : "(unknown)");
    fprintf(f, "  names:");
    for (int i = 0; i < res->n_names; i++) fprintf(f, "%s %s", i ? "," : "", res->names[i]);
    fputc('\n', f);
    if (res->n_dropped)
        fprintf(f, "  (%d more addresses left out: at most %d names)\n", res->n_dropped, SELFSIGN_MAX_NAMES);
    if (res->skipped_host[0])
        fprintf(f, "  (host name \"%s\" left out: not a valid DNS name)\n", res->skipped_host);
    fprintf(f, "  SHA-256 fingerprint: %s\n", res->fingerprint);
    fputs("\nIn the configuration file:\n  \"server\": {\"tls_cert\": \"", f);
    put_json(f, res->cert_path);
    fputs("\", \"tls_key\": \"", f);
    put_json(f, res->key_path);
    fputs("\"}\nor on the command line:\n  --set ", f);
    char opt[PATH_MAX + 32];
    snprintf(opt, sizeof opt, "server.tls_cert=%s", res->cert_path);
    put_shell(f, opt);
    fputs(" --set ", f);
    snprintf(opt, sizeof opt, "server.tls_key=%s", res->key_path);
    put_shell(f, opt);
    fputc('\n', f);
    fprintf(f, "\nBrowsers warn once for a self-signed certificate: accept it after comparing the fingerprint,\n"
               "or import %s as trusted on each client (docs/operations.md, TLS).\n",
            SELFSIGN_CERT_NAME);
}
