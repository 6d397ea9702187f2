/* cfg.c - the configuration walker, values side: defaults, compare, copy,
 * the cJSON loader, --set, the file-system checks. The JSON dump is in
 * cfg_dump.c, reload in cfg_reload.c, the options themselves in
 * cfg_table.c; this file uses neither dump nor reload.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cfg_int.h"

/* Most options the walker handles (the size of its "seen" table). */
#define CFG_MAX_OPTIONS 128

static void list_free(cfg_strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

void cfg__list_copy(cfg_strlist *dst, const char *const *src, int n) {
    list_free(dst);
    dst->v = calloc((size_t)(n > 0 ? n : 1), sizeof *dst->v);
    MS_ASSERT(dst->v != NULL);
    for (int i = 0; i < n; i++) dst->v[i] = cfg__strdup(src[i]);
    dst->n = n;
}

static void set_default(cfg *c, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: *CFG_FIELD(c, o, int64_t) = o->idef; break;
    case CFG_DOUBLE: *CFG_FIELD(c, o, double) = o->ddef; break;
    case CFG_BOOL: *CFG_FIELD(c, o, bool) = o->idef != 0; break;
    case CFG_ENUM: *CFG_FIELD(c, o, int) = (int)o->idef; break;
    case CFG_STRING: *CFG_FIELD(c, o, char *) = cfg__strdup(o->sdef); break;
    case CFG_STRLIST: {
        int n = 0;
        while (o->ldef && o->ldef[n]) n++;
        cfg__list_copy(CFG_FIELD(c, o, cfg_strlist), o->ldef, n);
        break;
    }
    case CFG_CUSTOM: o->custom->init(CFG_FIELD(c, o, void)); break;
    }
}

void cfg_init(cfg *c) {
    MS_ASSERT(cfg_noptions <= CFG_MAX_OPTIONS);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < cfg_noptions; i++) set_default(c, &cfg_options[i]);
}

void cfg_close(cfg *c) {
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (o->type == CFG_STRING) {
            free(*CFG_FIELD(c, o, char *));
            *CFG_FIELD(c, o, char *) = NULL;
        } else if (o->type == CFG_STRLIST) {
            list_free(CFG_FIELD(c, o, cfg_strlist));
        } else if (o->type == CFG_CUSTOM) {
            o->custom->close(CFG_FIELD(c, o, void));
        }
    }
}

/* ---- compare and copy -------------------------------------------------- */

bool cfg__value_equal(const cfg *a, const cfg *b, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return *CFG_CFIELD(a, o, int64_t) == *CFG_CFIELD(b, o, int64_t);
    case CFG_DOUBLE: return *CFG_CFIELD(a, o, double) == *CFG_CFIELD(b, o, double);
    case CFG_BOOL: return *CFG_CFIELD(a, o, bool) == *CFG_CFIELD(b, o, bool);
    case CFG_ENUM: return *CFG_CFIELD(a, o, int) == *CFG_CFIELD(b, o, int);
    case CFG_STRING: return strcmp(*CFG_CFIELD(a, o, char *), *CFG_CFIELD(b, o, char *)) == 0;
    case CFG_STRLIST: {
        const cfg_strlist *x = CFG_CFIELD(a, o, cfg_strlist), *y = CFG_CFIELD(b, o, cfg_strlist);
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (strcmp(x->v[i], y->v[i]) != 0) return false;
        return true;
    }
    case CFG_CUSTOM: return o->custom->equal(CFG_CFIELD(a, o, void), CFG_CFIELD(b, o, void));
    }
    return false;
}

bool cfg_equal(const cfg *a, const cfg *b) {
    for (size_t i = 0; i < cfg_noptions; i++)
        if (!cfg__value_equal(a, b, &cfg_options[i])) return false;
    return true;
}

void cfg__copy_value(cfg *dst, const cfg *src, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: *CFG_FIELD(dst, o, int64_t) = *CFG_CFIELD(src, o, int64_t); break;
    case CFG_DOUBLE: *CFG_FIELD(dst, o, double) = *CFG_CFIELD(src, o, double); break;
    case CFG_BOOL: *CFG_FIELD(dst, o, bool) = *CFG_CFIELD(src, o, bool); break;
    case CFG_ENUM: *CFG_FIELD(dst, o, int) = *CFG_CFIELD(src, o, int); break;
    case CFG_STRING: {
        char **f = CFG_FIELD(dst, o, char *);
        char *s = cfg__strdup(*CFG_CFIELD(src, o, char *));
        free(*f);
        *f = s;
        break;
    }
    case CFG_STRLIST: {
        const cfg_strlist *l = CFG_CFIELD(src, o, cfg_strlist);
        cfg__list_copy(CFG_FIELD(dst, o, cfg_strlist), (const char *const *)l->v, l->n);
        break;
    }
    case CFG_CUSTOM: o->custom->copy(CFG_FIELD(dst, o, void), CFG_CFIELD(src, o, void)); break;
    }
}

void cfg_copy(cfg *dst, const cfg *src) {
    cfg_init(dst);
    for (size_t i = 0; i < cfg_noptions; i++) cfg__copy_value(dst, src, &cfg_options[i]);
}

/* ---- messages --------------------------------------------------------- */

/* The option path closest to key (a full "section.name" path, or a bare
 * name met at the top level), or NULL when nothing is close. */
static const char *suggest(const char *key) {
    const char *best = NULL;
    int bestd = 3;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const char *p = cfg_options[i].path;
        const char *leaf = strchr(p, '.') + 1;
        int d = cfg__distance(key, p);
        if (strcmp(key, leaf) == 0) d = 0; /* "port" at the top level */
        if (d < bestd) {
            bestd = d;
            best = p;
        }
    }
    return best;
}

static bool is_section(const char *key) {
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if ((int)strlen(key) == cfg__section_len(o) && strncmp(key, o->path, (size_t)cfg__section_len(o)) == 0)
            return true;
    }
    return false;
}

/* ---- loading ------------------------------------------------------------ */

/* Check a string value or list item: length, control characters, the
 * option's validator. what is the key path for messages. */
static int check_string(const cfg_option *o, const char *s, const char *what, ms_error *err) {
    size_t n = strlen(s);
    if (n > o->max_len)
        return ms_err_set(err, MS_ERR_RANGE, "%s: %zu bytes, longer than the limit of %zu", what, n, o->max_len);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: control character at byte %zu", what, i);
    char why[256];
    if (o->check && o->check(s, why, sizeof why) != 0)
        return ms_err_set(err, MS_ERR_ARG, "%s: %s", what, why);
    return MS_OK;
}

static int set_value(cfg *c, const cfg_option *o, const cJSON *v, const char *base_dir, ms_error *err) {
    const char *p = o->path;
    switch (o->type) {
    case CFG_INT: {
        if (!cJSON_IsNumber(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an integer, got %s", p, cfg__json_kind(v));
        double d = v->valuedouble;
        if (!isfinite(d) || d != trunc(d))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an integer, got %.15g", p, d);
        if (d < (double)o->imin || d > (double)o->imax)
            return ms_err_set(err, MS_ERR_RANGE, "%s: %.15g is out of range [%lld, %lld]", p, d,
                              (long long)o->imin, (long long)o->imax);
        *CFG_FIELD(c, o, int64_t) = (int64_t)d;
        return MS_OK;
    }
    case CFG_DOUBLE: {
        if (!cJSON_IsNumber(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a number, got %s", p, cfg__json_kind(v));
        double d = v->valuedouble;
        if (!isfinite(d)) return ms_err_set(err, MS_ERR_RANGE, "%s: not a finite number", p);
        if (d < o->dmin || d > o->dmax)
            return ms_err_set(err, MS_ERR_RANGE, "%s: %.15g is out of range [%g, %g]", p, d, o->dmin, o->dmax);
        *CFG_FIELD(c, o, double) = d;
        return MS_OK;
    }
    case CFG_BOOL:
        if (!cJSON_IsBool(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected true or false, got %s", p, cfg__json_kind(v));
        *CFG_FIELD(c, o, bool) = cJSON_IsTrue(v);
        return MS_OK;
    case CFG_ENUM: {
        if (!cJSON_IsString(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a string, got %s", p, cfg__json_kind(v));
        for (int i = 0; o->names[i]; i++)
            if (strcmp(v->valuestring, o->names[i]) == 0) {
                *CFG_FIELD(c, o, int) = i;
                return MS_OK;
            }
        char list[256] = "", kb[CFG_KEY_SHOWN_MAX + 8];
        for (int i = 0; o->names[i]; i++) {
            size_t u = strlen(list);
            snprintf(list + u, sizeof list - u, "%s%s", i ? ", " : "", o->names[i]);
        }
        return ms_err_set(err, MS_ERR_ARG, "%s: \"%s\" is not one of %s", p, text_shown(v->valuestring, CFG_KEY_SHOWN_MAX, kb, sizeof kb),
                          list);
    }
    case CFG_STRING: {
        if (!cJSON_IsString(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a string, got %s", p, cfg__json_kind(v));
        char *s = (o->flags & CFG_F_PATH) ? cfg__resolve(v->valuestring, base_dir) : cfg__strdup(v->valuestring);
        int rc = check_string(o, s, p, err);
        if (rc != MS_OK) {
            free(s);
            return rc;
        }
        char **f = CFG_FIELD(c, o, char *);
        free(*f);
        *f = s;
        return MS_OK;
    }
    case CFG_STRLIST: {
        if ((o->flags & CFG_F_ONE) && cJSON_IsString(v)) { /* a string is a list of one */
            int rc = check_string(o, v->valuestring, p, err);
            if (rc != MS_OK) return rc;
            const char *one[1] = {v->valuestring};
            cfg__list_copy(CFG_FIELD(c, o, cfg_strlist), one, 1);
            return MS_OK;
        }
        if (!cJSON_IsArray(v))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an array of strings%s, got %s", p,
                              (o->flags & CFG_F_ONE) ? " or a string" : "", cfg__json_kind(v));
        int n = cJSON_GetArraySize(v);
        if (n > CFG_MAX_LIST)
            return ms_err_set(err, MS_ERR_LIMIT, "%s: %d entries, more than the limit of %d", p, n, CFG_MAX_LIST);
        const char *items[CFG_MAX_LIST];
        int i = 0;
        for (const cJSON *it = v->child; it; it = it->next, i++) {
            char what[128];
            snprintf(what, sizeof what, "%s[%d]", p, i);
            if (!cJSON_IsString(it))
                return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a string, got %s", what, cfg__json_kind(it));
            int rc = check_string(o, it->valuestring, what, err);
            if (rc != MS_OK) return rc;
            items[i] = it->valuestring;
        }
        cfg__list_copy(CFG_FIELD(c, o, cfg_strlist), items, n);
        return MS_OK;
    }
    case CFG_CUSTOM: return o->custom->load(CFG_FIELD(c, o, void), v, p, base_dir, err);
    }
    MS_ASSERT(0 && "unknown option type");
    return MS_ERR_ARG;
}

/* A JSON string escape "\u0000" would be cut short by cJSON; refuse it
 * before parsing. Scans strings only (tracks quotes and escapes). */
static long find_nul_escape(const char *t, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            if (t[i] == '"') in_str = true;
        } else if (t[i] == '"') {
            in_str = false;
        } else if (t[i] == '\\' && i + 1 < len) {
            if (t[i + 1] == 'u' && i + 5 < len && strncmp(t + i + 2, "0000", 4) == 0) return (long)i;
            i++; /* skip the escaped byte */
        }
    }
    return -1;
}

static void line_col(const char *t, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (t[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Apply the members of one section object. seen[] marks options given. */
static int load_section(cfg *c, const cJSON *sec, const char *base_dir, bool *seen, ms_error *err) {
    char kb[CFG_KEY_SHOWN_MAX + 8], path[2 * CFG_KEY_SHOWN_MAX + 20];
    size_t sl = strlen(sec->string);
    for (const cJSON *m = sec->child; m; m = m->next) {
        const cfg_option *o = NULL;
        size_t idx = 0;
        for (; idx < cfg_noptions; idx++) {
            const cfg_option *q = &cfg_options[idx];
            if ((size_t)cfg__section_len(q) == sl && strncmp(q->path, sec->string, sl) == 0 &&
                strcmp(q->path + sl + 1, m->string) == 0) {
                o = q;
                break;
            }
        }
        snprintf(path, sizeof path, "%s.%s", sec->string, text_shown(m->string, CFG_KEY_SHOWN_MAX, kb, sizeof kb));
        if (!o) {
            const char *s = suggest(path);
            if (s) return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown option (did you mean %s?)", path, s);
            return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown option", path);
        }
        if (seen[idx]) return ms_err_set(err, MS_ERR_FORMAT, "%s: duplicate key", path);
        seen[idx] = true;
        int rc = set_value(c, o, m, base_dir, err);
        if (rc != MS_OK) return rc;
    }
    return MS_OK;
}

static int load_tree(cfg *c, const cJSON *root, const char *base_dir, ms_error *err) {
    if (!cJSON_IsObject(root))
        return ms_err_set(err, MS_ERR_FORMAT, "expected a JSON object at the top, got %s", cfg__json_kind(root));
    bool seen[CFG_MAX_OPTIONS] = {0};
    char kb[CFG_KEY_SHOWN_MAX + 8];
    /* Sections seen, by name; there are few, so a short list. */
    const char *sections[CFG_MAX_OPTIONS];
    int nsec = 0;
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        if (!is_section(sec->string)) {
            const char *s = suggest(sec->string);
            text_shown(sec->string, CFG_KEY_SHOWN_MAX, kb, sizeof kb);
            if (s) return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown section (did you mean %s?)", kb, s);
            return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown section", kb);
        }
        for (int i = 0; i < nsec; i++)
            if (strcmp(sections[i], sec->string) == 0)
                return ms_err_set(err, MS_ERR_FORMAT, "%s: duplicate key", sec->string);
        sections[nsec++] = sec->string;
        if (!cJSON_IsObject(sec))
            return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an object of options, got %s", sec->string,
                              cfg__json_kind(sec));
        int rc = load_section(c, sec, base_dir, seen, err);
        if (rc != MS_OK) return rc;
    }
    return cfg_cross_check(c, err);
}

int cfg_load_buf(cfg *out, const char *text, size_t len, const char *name, const char *base_dir, ms_error *err) {
    cfg_init(out);
    int rc;
    cJSON *root = NULL;
    char *buf = NULL;
    if (len > CFG_MAX_FILE_BYTES) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%zu bytes, larger than the limit of %d", len, CFG_MAX_FILE_BYTES);
        goto fail;
    }
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "NUL byte at offset %zu", (size_t)(nul - text));
        goto fail;
    }
    long esc = find_nul_escape(text, len);
    if (esc >= 0) {
        int line, col;
        line_col(text, (size_t)esc, &line, &col);
        rc = ms_err_set(err, MS_ERR_FORMAT, "%d:%d: \\u0000 in a string is not accepted", line, col);
        goto fail;
    }
    buf = malloc(len + 1);
    if (!buf) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    const char *end = NULL;
    /* len + 1: cJSON wants the terminating NUL inside the length when it
     * is asked to refuse trailing bytes. */
    root = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
    if (!root) {
        size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
        int line, col;
        line_col(buf, off, &line, &col);
        rc = ms_err_set(err, MS_ERR_FORMAT, "%d:%d: malformed JSON", line, col);
        goto fail;
    }
    rc = load_tree(out, root, base_dir, err);
    if (rc != MS_OK) goto fail;
    cJSON_Delete(root);
    free(buf);
    return MS_OK;
fail:
    ms_err_prefix(err, "%s", name ? name : "config");
    cJSON_Delete(root);
    free(buf);
    cfg_close(out);
    return rc;
}

int cfg_load_file(cfg *out, const char *path, ms_error *err) {
    cfg_init(out);
    cfg_close(out); /* *out is valid (closed) on every failure below */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ms_err_set(err, MS_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > CFG_MAX_FILE_BYTES) {
        close(fd);
        return ms_err_set(err, MS_ERR_LIMIT, "%s: %lld bytes, larger than the limit of %d", path,
                          (long long)st.st_size, CFG_MAX_FILE_BYTES);
    }
    char *text = malloc(CFG_MAX_FILE_BYTES + 1);
    if (!text) {
        close(fd);
        return ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t len = 0;
    for (;;) { /* read until EOF; the file may have grown since fstat */
        ssize_t r = read(fd, text + len, CFG_MAX_FILE_BYTES + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(text);
            close(fd);
            return ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(e));
        }
        if (r == 0 || (len += (size_t)r) > CFG_MAX_FILE_BYTES) break;
    }
    close(fd);
    /* The directory of the file, absolute when it can be resolved. */
    char dir[PATH_MAX], abs[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) + (slash == path), path);
    else snprintf(dir, sizeof dir, ".");
    const char *base = realpath(dir, abs) ? abs : dir;
    int rc = cfg_load_buf(out, text, len, path, base, err);
    free(text);
    return rc;
}

/* ---- checks that need the file system ---------------------------------- */

int cfg_check_files(const cfg *c, ms_error *err) {
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (o->type == CFG_CUSTOM && o->custom->check_files) {
            int rc = o->custom->check_files(CFG_CFIELD(c, o, void), o->path, err);
            if (rc != MS_OK) return rc;
            continue;
        }
        if (o->type != CFG_STRING) continue;
        const char *s = *CFG_CFIELD(c, o, char *);
        if (!s[0]) {
            if (o->flags & CFG_F_REQUIRED)
                return ms_err_set(err, MS_ERR_ARG, "%s: required (%s)", o->path, o->doc);
            continue;
        }
        if (!(o->flags & (CFG_F_FILE | CFG_F_DIR))) continue;
        struct stat st;
        if (stat(s, &st) != 0) return ms_err_set(err, MS_ERR_IO, "%s: %s: %s", o->path, s, strerror(errno));
        if ((o->flags & CFG_F_DIR) && !S_ISDIR(st.st_mode))
            return ms_err_set(err, MS_ERR_ARG, "%s: %s: not a directory", o->path, s);
        if ((o->flags & CFG_F_FILE) && !S_ISREG(st.st_mode))
            return ms_err_set(err, MS_ERR_ARG, "%s: %s: not a regular file", o->path, s);
        if (access(s, (o->flags & CFG_F_DIR) ? R_OK | X_OK : R_OK) != 0)
            return ms_err_set(err, MS_ERR_IO, "%s: %s: %s", o->path, s, strerror(errno));
    }
    return MS_OK;
}

/* Longest --set assignment accepted, bytes. */
#define CFG_SET_MAX 8192

int cfg_set(cfg *c, const char *assignment, ms_error *err) {
    const char *eq = strchr(assignment, '=');
    size_t alen = strnlen(assignment, CFG_SET_MAX + 1);
    if (alen > CFG_SET_MAX) return ms_err_set(err, MS_ERR_LIMIT, "--set: longer than %d bytes", CFG_SET_MAX);
    if (!eq) return ms_err_set(err, MS_ERR_ARG, "--set %s: expected section.name=VALUE", assignment);
    char path[128], kb[CFG_KEY_SHOWN_MAX + 8];
    size_t plen = (size_t)(eq - assignment);
    snprintf(path, sizeof path, "%.*s", (int)(plen < sizeof path ? plen : sizeof path - 1), assignment);
    const cfg_option *o = NULL;
    for (size_t i = 0; i < cfg_noptions && !o; i++)
        if (strlen(cfg_options[i].path) == plen && strncmp(cfg_options[i].path, assignment, plen) == 0)
            o = &cfg_options[i];
    if (!o) {
        const char *s = suggest(path);
        text_shown(path, CFG_KEY_SHOWN_MAX, kb, sizeof kb);
        if (s) return ms_err_set(err, MS_ERR_NOTFOUND, "--set: %s: unknown option (did you mean %s?)", kb, s);
        return ms_err_set(err, MS_ERR_NOTFOUND, "--set: %s: unknown option", kb);
    }
    const char *val = eq + 1;
    size_t vlen = strlen(val);
    cJSON *v;
    if ((o->type == CFG_STRING || o->type == CFG_ENUM || (o->type == CFG_STRLIST && (o->flags & CFG_F_ONE) && val[0] != '[')) &&
        val[0] != '"') {
        v = cJSON_CreateString(val);
    } else {
        if (find_nul_escape(val, vlen) >= 0)
            return ms_err_set(err, MS_ERR_FORMAT, "--set: %s: \\u0000 in a string is not accepted", o->path);
        v = cJSON_ParseWithLengthOpts(val, vlen + 1, NULL, 1);
        if (!v) return ms_err_set(err, MS_ERR_FORMAT, "--set: %s: the value is not JSON", o->path);
    }
    if (!v) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    char cwd[PATH_MAX];
    cfg tmp;
    cfg_copy(&tmp, c);
    int rc = set_value(&tmp, o, v, getcwd(cwd, sizeof cwd), err);
    cJSON_Delete(v);
    if (rc != MS_OK) {
        ms_err_prefix(err, "--set");
        cfg_close(&tmp);
        return rc;
    }
    cfg_close(c);
    *c = tmp;
    return MS_OK;
}

int cfg_validate(const cfg *c, ms_error *err) { return cfg_cross_check(c, err); }
