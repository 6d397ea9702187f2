/* cfg_dump.c - walking the option table to dump, compare, copy and reload
 * configurations. Loading is in cfg.c; the table in cfg_table.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cfg_int.h"

#define FIELD(c, o, T) ((T *)((char *)(c) + (o)->offset))
#define CFIELD(c, o, T) ((const T *)((const char *)(c) + (o)->offset))

static int section_len(const cfg_option *o) { return (int)(strchr(o->path, '.') - o->path); }

static cJSON *value_json(const cfg *c, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return cJSON_CreateNumber((double)*CFIELD(c, o, int64_t));
    case CFG_DOUBLE: { /* shortest text that reads back to the same double */
        double d = *CFIELD(c, o, double);
        char buf[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, d);
            if (strtod(buf, NULL) == d) break;
        }
        return cJSON_CreateRaw(buf);
    }
    case CFG_BOOL: return cJSON_CreateBool(*CFIELD(c, o, bool));
    case CFG_ENUM: return cJSON_CreateString(o->names[*CFIELD(c, o, int)]);
    case CFG_STRING: return cJSON_CreateString(*CFIELD(c, o, char *));
    case CFG_STRLIST: {
        const cfg_strlist *l = CFIELD(c, o, cfg_strlist);
        return cJSON_CreateStringArray((const char *const *)l->v, l->n);
    }
    }
    return NULL;
}

char *cfg_dump(const cfg *c) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        char sec[64];
        snprintf(sec, sizeof sec, "%.*s", section_len(o), o->path);
        cJSON *s = cJSON_GetObjectItemCaseSensitive(root, sec);
        if (!s && !(s = cJSON_AddObjectToObject(root, sec))) goto fail;
        cJSON *v = value_json(c, o);
        if (!v) goto fail;
        cJSON_AddItemToObject(s, o->path + section_len(o) + 1, v);
    }
    char *txt = cJSON_Print(root);
    if (!txt) goto fail;
    char *out = cfg__strdup(txt);
    cJSON_free(txt);
    cJSON_Delete(root);
    return out;
fail:
    cJSON_Delete(root);
    return NULL;
}

static bool value_equal(const cfg *a, const cfg *b, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return *CFIELD(a, o, int64_t) == *CFIELD(b, o, int64_t);
    case CFG_DOUBLE: return *CFIELD(a, o, double) == *CFIELD(b, o, double);
    case CFG_BOOL: return *CFIELD(a, o, bool) == *CFIELD(b, o, bool);
    case CFG_ENUM: return *CFIELD(a, o, int) == *CFIELD(b, o, int);
    case CFG_STRING: return strcmp(*CFIELD(a, o, char *), *CFIELD(b, o, char *)) == 0;
    case CFG_STRLIST: {
        const cfg_strlist *x = CFIELD(a, o, cfg_strlist), *y = CFIELD(b, o, cfg_strlist);
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (strcmp(x->v[i], y->v[i]) != 0) return false;
        return true;
    }
    }
    return false;
}

bool cfg_equal(const cfg *a, const cfg *b) {
    for (size_t i = 0; i < cfg_noptions; i++)
        if (!value_equal(a, b, &cfg_options[i])) return false;
    return true;
}

/* The value of o in c as compact JSON text in buf (cut to len). */
static void format_value(const cfg *c, const cfg_option *o, char *buf, size_t len) {
    cJSON *v = value_json(c, o);
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, len, "%s", t ? t : "?");
    cJSON_free(t);
    cJSON_Delete(v);
}

/* Append one line to a report buffer; a full buffer ends in "...". */
static void append_line(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 5 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - used) memcpy(buf + size - 5, "...\n", 5);
}

static void copy_value(cfg *dst, const cfg *src, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: *FIELD(dst, o, int64_t) = *CFIELD(src, o, int64_t); break;
    case CFG_DOUBLE: *FIELD(dst, o, double) = *CFIELD(src, o, double); break;
    case CFG_BOOL: *FIELD(dst, o, bool) = *CFIELD(src, o, bool); break;
    case CFG_ENUM: *FIELD(dst, o, int) = *CFIELD(src, o, int); break;
    case CFG_STRING: {
        char **f = FIELD(dst, o, char *);
        char *s = cfg__strdup(*CFIELD(src, o, char *));
        free(*f);
        *f = s;
        break;
    }
    case CFG_STRLIST: {
        const cfg_strlist *l = CFIELD(src, o, cfg_strlist);
        cfg__list_copy(FIELD(dst, o, cfg_strlist), (const char *const *)l->v, l->n);
        break;
    }
    }
}

int cfg_apply_reload(cfg *cur, const cfg *next, cfg_reload_report *rep) {
    memset(rep, 0, sizeof *rep);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (value_equal(cur, next, o)) continue;
        char a[256], b[256];
        format_value(cur, o, a, sizeof a);
        format_value(next, o, b, sizeof b);
        if (o->flags & CFG_F_RELOAD) {
            append_line(rep->changed, sizeof rep->changed, "%s: %s -> %s\n", o->path, a, b);
            copy_value(cur, next, o);
            rep->n_changed++;
        } else {
            append_line(rep->refused, sizeof rep->refused, "%s: %s -> %s (needs a restart; keeping %s)\n", o->path,
                        a, b, a);
            rep->n_refused++;
        }
    }
    return rep->n_refused;
}

int cfg_reload_file(cfg *cur, const char *path, cfg_reload_report *rep, ms_error *err) {
    memset(rep, 0, sizeof *rep);
    cfg next;
    int rc = cfg_load_file(&next, path, err);
    if (rc != MS_OK) return rc;
    cfg_apply_reload(cur, &next, rep);
    cfg_close(&next);
    return MS_OK;
}

void cfg_copy(cfg *dst, const cfg *src) {
    cfg_init(dst);
    for (size_t i = 0; i < cfg_noptions; i++) copy_value(dst, src, &cfg_options[i]);
}

