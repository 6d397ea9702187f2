/* selfsign.h - `moshid --self-signed DIR`: a self-signed certificate and its
 * private key for serving https/wss on a LAN (browsers give the microphone
 * only to secure pages off localhost).
 *
 * Writes DIR/moshid.crt and DIR/moshid.key (PEM): an ECDSA P-256 key
 * (PKCS#8, mode 0600) and an X.509 v3 certificate signed with it
 * (SHA-256), valid from an hour ago for SELFSIGN_DAYS days, a leaf
 * (basicConstraints CA:FALSE, extendedKeyUsage serverAuth) naming
 * localhost, 127.0.0.1, ::1, this host's name (and NAME.local for mDNS) and
 * the host's non-loopback IPv4/IPv6 addresses, so that a browser on the LAN
 * told to trust it accepts it under any of the names clients use. Never
 * overwrites: an existing file of either name is an error.
 *
 * Kyutai's Rust backend (rust/moshi-backend, standalone mode) does the same
 * job differently: when cert.pem or key.pem is missing from its cert_dir at
 * start-up it generates a pair with rcgen's generate_simple_self_signed for
 * the single name "localhost" (rcgen's defaults: ECDSA P-256, a validity far
 * in the future) and writes both files with the default mode. Here the pair
 * is made on request only, for the LAN names, with a one-year validity and
 * a private key readable by its owner alone.
 */
#ifndef MOSHID_SELFSIGN_H
#define MOSHID_SELFSIGN_H

#include <limits.h>
#include <stdio.h>

#include "err.h"

/* Validity of the certificate, days (from an hour before it was made, so a
 * client whose clock is a little behind accepts it at once). A year: well
 * inside the 398/825 days browsers and Apple platforms cap server
 * certificates at. */
#define SELFSIGN_DAYS 365
/* File names written in DIR. */
#define SELFSIGN_CERT_NAME "moshid.crt"
#define SELFSIGN_KEY_NAME "moshid.key"
/* Most subjectAltName entries (fixed names + host name + addresses); the
 * addresses past it are left out and counted. */
#define SELFSIGN_MAX_NAMES 32
/* Longest name kept, bytes (a DNS name is at most 253; an IPv6 address in
 * text at most 45). */
#define SELFSIGN_NAME_MAX 256

typedef struct selfsign_result {
    char cert_path[PATH_MAX];   /* absolute paths of the files written */
    char key_path[PATH_MAX];
    char fingerprint[3 * 32];   /* SHA-256 of the DER certificate, "AB:CD:..." */
    char not_after[32];         /* end of validity, "YYYY-MM-DD HH:MM UTC" */
    int n_names;
    char names[SELFSIGN_MAX_NAMES][SELFSIGN_NAME_MAX]; /* the subjectAltNames, in order */
    int n_dropped;              /* addresses left out (over SELFSIGN_MAX_NAMES) */
    char skipped_host[SELFSIGN_NAME_MAX]; /* the host name when it is not a valid DNS name ("" otherwise) */
} selfsign_result;

/* selfsign_write: make the key and certificate and write them into dir
 * (created, mode 0700, when it does not exist; its parent must). Each file
 * is written to a temporary name in dir, flushed, then linked to its final
 * name, which fails when that name exists: a file is never overwritten
 * and never seen half written. Refuses (MS_ERR_STATE, the message names the
 * file) when either file already exists, before making anything. On error
 * nothing it created is left behind. Fills *out. Main thread; not
 * reentrant (OpenSSL's default library context). */
int selfsign_write(const char *dir, selfsign_result *out, ms_error *err);

/* selfsign_print: tell the user what was written: the files, the names, the
 * validity, the SHA-256 fingerprint (to compare on a client before
 * trusting the certificate) and the configuration lines that use the
 * pair. Borrows res. */
void selfsign_print(FILE *f, const selfsign_result *res);

#endif
