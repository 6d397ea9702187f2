/* srv_tls.c - the listener's certificate pair (srv.h: srv_reload_tls):
 * the pair in use is kept as read, so that a reload of unchanged files is
 * a no-op, and a new pair is parsed and checked whole before it replaces
 * the old one in the vhost's SSL_CTX. Loop thread.
 */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "srv_int.h"

/* TLS files read for a reload, at most (bytes). */
#define SRV_TLS_FILE_MAX (1 << 20)

/* Free a file read here, wiped first (the key's copy is a secret). */
static void free_pem(char *p, size_t n) {
    if (!p) return;
    OPENSSL_cleanse(p, n);
    free(p);
}

/* Read a whole file (at most SRV_TLS_FILE_MAX bytes) into a NUL-terminated
 * malloc'd buffer. */
static char *read_file(const char *path, size_t *len, ms_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { ms_err_set(err, MS_ERR_IO, "cannot open %s", path); return NULL; }
    char *buf = malloc(SRV_TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, SRV_TLS_FILE_MAX + 1, f) : 0;
    int bad = ferror(f), nomem = !buf;
    fclose(f);
    if (nomem || bad || n > SRV_TLS_FILE_MAX) {
        free_pem(buf, n);
        ms_err_set(err, nomem ? MS_ERR_NOMEM : MS_ERR_IO, "%s: %s", path,
                   nomem ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

void srv_tls_remember(srv *s) {
    ms_error e = {0};
    s->tls_cert_pem = read_file(s->cfg.tls_cert, &s->tls_cert_len, &e);
    s->tls_key_pem = read_file(s->cfg.tls_key, &s->tls_key_len, &e);
}

void srv_tls_free(srv *s) {
    free_pem(s->tls_cert_pem, s->tls_cert_len);
    free_pem(s->tls_key_pem, s->tls_key_len);
    s->tls_cert_pem = s->tls_key_pem = NULL;
}

/* OpenSSL's first queued error as text (the queue is cleared). */
static const char *ssl_error(char *buf, size_t len) {
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, buf, len);
    else snprintf(buf, len, "no detail");
    ERR_clear_error();
    return buf;
}

int srv_reload_tls(srv *s, const char *cert, const char *key, ms_error *err) {
    if (!s->tls || !s->ssl_ctx)
        return ms_err_set(err, MS_ERR_STATE, "TLS: the listener was started without TLS; turning it on needs a restart");
    if (!cert || !cert[0] || !key || !key[0])
        return ms_err_set(err, MS_ERR_STATE, "TLS: turning TLS off needs a restart; keeping the certificate in use");
    size_t cl = 0, kl = 0;
    char *cp = read_file(cert, &cl, err);
    if (!cp) return err->code;
    char *kp = read_file(key, &kl, err);
    if (!kp) { free_pem(cp, cl); return err->code; }
    if (s->tls_cert_pem && cl == s->tls_cert_len && kl == s->tls_key_len && memcmp(cp, s->tls_cert_pem, cl) == 0 &&
        memcmp(kp, s->tls_key_pem, kl) == 0) {
        free_pem(cp, cl);
        free_pem(kp, kl);
        return MS_OK; /* unchanged */
    }
    /* Parse and check the whole pair before touching the context: the
     * leaf certificate, the rest of the chain, the key, and that the key
     * is the certificate's. SSL_CTX_use_cert_and_key then swaps all three
     * at once; SSL_new copies the context's pair, so connections open now
     * keep theirs. */
    char eb[256];
    int rc = MS_ERR_FORMAT;
    X509 *leaf = NULL;
    EVP_PKEY *pkey = NULL;
    STACK_OF(X509) *chain = sk_X509_new_null();
    BIO *bc = BIO_new_mem_buf(cp, (int)cl), *bk = BIO_new_mem_buf(kp, (int)kl);
    ERR_clear_error();
    if (!chain || !bc || !bk) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "TLS: out of memory");
        goto out;
    }
    if (!(leaf = PEM_read_bio_X509_AUX(bc, NULL, NULL, NULL))) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s: no PEM certificate (%s)", cert, ssl_error(eb, sizeof eb));
        goto out;
    }
    for (X509 *x; (x = PEM_read_bio_X509(bc, NULL, NULL, NULL)) != NULL;)
        if (!sk_X509_push(chain, x)) {
            X509_free(x);
            rc = ms_err_set(err, MS_ERR_NOMEM, "TLS: out of memory");
            goto out;
        }
    ERR_clear_error(); /* the end of the chain reads as an error */
    if (!(pkey = PEM_read_bio_PrivateKey(bk, NULL, NULL, NULL))) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s: no PEM private key (%s)", key, ssl_error(eb, sizeof eb));
        goto out;
    }
    if (X509_check_private_key(leaf, pkey) != 1) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: %s is not the key of %s (%s)", key, cert, ssl_error(eb, sizeof eb));
        goto out;
    }
    if (SSL_CTX_use_cert_and_key(s->ssl_ctx, leaf, pkey, chain, 1) != 1) {
        ms_err_set(err, MS_ERR_FORMAT, "TLS: the pair was refused (%s)", ssl_error(eb, sizeof eb));
        goto out;
    }
    srv_tls_free(s);
    s->tls_cert_pem = cp;
    s->tls_key_pem = kp;
    s->tls_cert_len = cl;
    s->tls_key_len = kl;
    cp = kp = NULL;
    rc = MS_OK;
    LOGI("tls_reloaded", "cert=%s key=%s chain=%d", cert, key, sk_X509_num(chain));
out:
    if (rc != MS_OK) ERR_clear_error();
    sk_X509_pop_free(chain, X509_free);
    X509_free(leaf);
    EVP_PKEY_free(pkey);
    BIO_free(bc);
    BIO_free(bk);
    free_pem(cp, cl);
    free_pem(kp, kl);
    return rc;
}
