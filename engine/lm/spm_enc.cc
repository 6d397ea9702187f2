/* spm_enc.cc - SentencePiece encoding over Debian's libsentencepiece (C++),
 * behind the C API of spm_enc.h. The only C++ file of the engine: nothing
 * C++ crosses the boundary, every exception is caught here. */
#include "spm_enc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

extern "C" {
#include "spm.h" /* SPM_MAX_FILE_BYTES: both sides refuse the same files */
}

struct spm_enc {
    sentencepiece::SentencePieceProcessor sp;
    int size;
};

/* Read path whole into *buf (at most SPM_MAX_FILE_BYTES). May throw
 * std::bad_alloc (caught by the caller). */
static int read_model(const char *path, std::string *buf, ms_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = MS_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ms_err_set(err, MS_ERR_IO, "%s: not a regular file", path);
    } else if ((uint64_t)st.st_size > SPM_MAX_FILE_BYTES) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %lld bytes (max %u)", path, (long long)st.st_size,
                        SPM_MAX_FILE_BYTES);
    } else {
        buf->resize((size_t)st.st_size);
        size_t got = 0;
        while (got < buf->size()) {
            ssize_t r = read(fd, &(*buf)[got], buf->size() - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                rc = ms_err_set(err, MS_ERR_IO, "%s: read failed: %s", path, r ? strerror(errno) : "file shrank");
                break;
            }
            got += (size_t)r;
        }
    }
    close(fd);
    return rc;
}

extern "C" spm_enc *spm_enc_load(const char *path, ms_error *err) {
    MS_ASSERT(path != NULL);
    spm_enc *e = NULL;
    try {
        std::string buf;
        if (read_model(path, &buf, err)) return NULL;
        e = new spm_enc();
        sentencepiece::util::Status s = e->sp.LoadFromSerializedProto(buf);
        if (!s.ok()) {
            ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model: %s", path, s.ToString().c_str());
            delete e;
            return NULL;
        }
        e->size = e->sp.GetPieceSize();
        if (e->size <= 0) {
            ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model: no pieces", path);
            delete e;
            return NULL;
        }
        return e;
    } catch (const std::bad_alloc &) {
        ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory loading the model", path);
    } catch (const std::exception &x) {
        ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model: %s", path, x.what());
    } catch (...) {
        ms_err_set(err, MS_ERR_FORMAT, "%s: not a SentencePiece model (unknown exception)", path);
    }
    delete e;
    return NULL;
}

/* Offset of the first byte of s[0..n) that does not start a well-formed
 * UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, nothing past
 * U+10FFFF), or n when all of it is well formed. NUL is a character. */
static size_t utf8_bad(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t l;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            l = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            l = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            l = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return i;
        }
        if (n - i < l || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += l;
    }
    return n;
}

extern "C" int spm_encode(const spm_enc *e, const char *text, size_t len, int *ids, size_t cap, size_t *n,
                          ms_error *err) {
    MS_ASSERT(e != NULL && n != NULL);
    MS_ASSERT(ids != NULL || cap == 0);
    *n = 0;
    if (len > SPM_ENC_MAX_TEXT_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "text of %zu bytes (max %u)", len, SPM_ENC_MAX_TEXT_BYTES);
    if (len == 0) return MS_OK; /* "" -> no ids, as the library says; text may be NULL */
    if (!text) return ms_err_set(err, MS_ERR_ARG, "text is NULL with length %zu", len);
    size_t bad = utf8_bad((const uint8_t *)text, len);
    if (bad < len)
        return ms_err_set(err, MS_ERR_FORMAT, "text is not UTF-8: byte 0x%02X at offset %zu", (uint8_t)text[bad],
                          bad);
    try {
        std::vector<int> v;
        sentencepiece::util::Status s = e->sp.Encode(absl::string_view(text, len), &v);
        if (!s.ok()) return ms_err_set(err, MS_ERR_STATE, "sentencepiece: %s", s.ToString().c_str());
        for (int id : v)
            if (id < 0 || id >= e->size)
                return ms_err_set(err, MS_ERR_STATE, "sentencepiece returned id %d (pieces: %d)", id, e->size);
        *n = v.size();
        size_t k = v.size() < cap ? v.size() : cap;
        if (k) memcpy(ids, v.data(), k * sizeof *ids);
        if (v.size() > cap)
            return ms_err_set(err, MS_ERR_LIMIT, "text encodes to %zu ids (room for %zu)", v.size(), cap);
        return MS_OK;
    } catch (const std::bad_alloc &) {
        return ms_err_set(err, MS_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    } catch (const std::exception &x) {
        return ms_err_set(err, MS_ERR_STATE, "sentencepiece: %s", x.what());
    } catch (...) {
        return ms_err_set(err, MS_ERR_STATE, "sentencepiece: unknown exception");
    }
}

extern "C" int spm_enc_size(const spm_enc *e) { return e ? e->size : 0; }

extern "C" void spm_enc_free(spm_enc *e) { delete e; }
