/* cfg_persona.c - the value type of personas.list: a JSON array of persona
 * objects, each with its own keys (name, description, voice, text or
 * text_ids, sampling overrides), parsed with the same rules as the rest of
 * the configuration: unknown keys and duplicates refused with the key path
 * (personas.list[2].voise: unknown key (did you mean voice?)), types and
 * bounds checked, relative voice paths taken from the file's directory.
 * Walked through cfg_custom_ops by load, dump, reload and the docs.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cfg_int.h"
#include "query.h"
#include "text.h"

#define STR(x) #x
#define XSTR(x) STR(x)

/* Longest voice path, bytes (as the path options). */
#define PERSONA_PATH_MAX 4095
/* Sampling override bounds (those of sampling.*). */

enum { K_NAME, K_DESCRIPTION, K_VOICE, K_TEXT, K_TEXT_IDS, K_TEXT_TEMP, K_TEXT_TOPK, K_AUDIO_TEMP, K_AUDIO_TOPK, K__N };
static const char *const key_names[K__N] = {"name", "description", "voice", "text", "text_ids",
                                            "text_temperature", "text_topk", "audio_temperature", "audio_topk"};

static void persona_init(cfg_persona *p) {
    memset(p, 0, sizeof *p);
    p->name = cfg__strdup("");
    p->description = cfg__strdup("");
    p->voice = cfg__strdup("");
    p->text = cfg__strdup("");
    p->text_temperature = p->audio_temperature = -1;
    p->text_topk = p->audio_topk = -1;
}

static void persona_close(cfg_persona *p) {
    free(p->name);
    free(p->description);
    free(p->voice);
    free(p->text);
    free(p->text_ids);
    memset(p, 0, sizeof *p);
}

static void list_close(void *f) {
    cfg_personas *l = f;
    for (int i = 0; i < l->n; i++) persona_close(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void list_init(void *f) {
    cfg_personas *l = f;
    l->v = NULL;
    l->n = 0;
}

static void persona_copy(cfg_persona *d, const cfg_persona *s) {
    *d = *s;
    d->name = cfg__strdup(s->name);
    d->description = cfg__strdup(s->description);
    d->voice = cfg__strdup(s->voice);
    d->text = cfg__strdup(s->text);
    d->text_ids = NULL;
    if (s->n_text_ids > 0) {
        d->text_ids = malloc(sizeof(int) * (size_t)s->n_text_ids);
        MS_ASSERT(d->text_ids != NULL);
        memcpy(d->text_ids, s->text_ids, sizeof(int) * (size_t)s->n_text_ids);
    }
}

static void list_copy(void *dst, const void *src) {
    cfg_personas *d = dst;
    const cfg_personas *s = src;
    list_close(d);
    if (s->n == 0) return;
    d->v = calloc((size_t)s->n, sizeof *d->v);
    MS_ASSERT(d->v != NULL);
    for (int i = 0; i < s->n; i++) persona_copy(&d->v[i], &s->v[i]);
    d->n = s->n;
}

static bool persona_equal(const cfg_persona *a, const cfg_persona *b) {
    return strcmp(a->name, b->name) == 0 && strcmp(a->description, b->description) == 0 &&
           strcmp(a->voice, b->voice) == 0 && strcmp(a->text, b->text) == 0 && a->n_text_ids == b->n_text_ids &&
           (a->n_text_ids == 0 || memcmp(a->text_ids, b->text_ids, sizeof(int) * (size_t)a->n_text_ids) == 0) &&
           a->text_temperature == b->text_temperature && a->audio_temperature == b->audio_temperature &&
           a->text_topk == b->text_topk && a->audio_topk == b->audio_topk;
}

static bool list_equal(const void *x, const void *y) {
    const cfg_personas *a = x, *b = y;
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (!persona_equal(&a->v[i], &b->v[i])) return false;
    return true;
}

/* ---- loading ------------------------------------------------------------ */

/* Valid UTF-8 (text_utf8_len) without control characters other than
 * those in `allowed`; else the offset of the first bad byte. */
static long bad_text_at(const char *s, const char *allowed) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c < 0x80) {
            if ((c < 0x20 || c == 0x7f) && !strchr(allowed, (int)c)) return (long)i;
            i++;
            continue;
        }
        size_t l = text_utf8_len(u + i, n - i);
        if (l == 0) return (long)i;
        i += l;
    }
    return -1;
}

/* A persona name: what the query's `persona` parameter can name. */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > CFG_PERSONA_NAME_MAX || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

static int get_string(const cJSON *v, const char *what, size_t max, const char *ctl_ok, char **out, ms_error *err) {
    if (!cJSON_IsString(v))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a string, got %s", what, cfg__json_kind(v));
    size_t n = strlen(v->valuestring);
    if (n > max) return ms_err_set(err, MS_ERR_RANGE, "%s: %zu bytes, longer than the limit of %zu", what, n, max);
    long bad = bad_text_at(v->valuestring, ctl_ok);
    if (bad >= 0)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: control character or invalid UTF-8 at byte %ld", what, bad);
    free(*out);
    *out = cfg__strdup(v->valuestring);
    return MS_OK;
}

static int get_number(const cJSON *v, const char *what, double lo, double hi, bool integer, double *out,
                      ms_error *err) {
    if (!cJSON_IsNumber(v))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: expected %s, got %s", what, integer ? "an integer" : "a number",
                          cfg__json_kind(v));
    double d = v->valuedouble;
    if (!isfinite(d)) return ms_err_set(err, MS_ERR_RANGE, "%s: not a finite number", what);
    if (integer && d != trunc(d)) return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an integer, got %.15g", what, d);
    if (d < lo || d > hi) return ms_err_set(err, MS_ERR_RANGE, "%s: %.15g is out of range [%g, %g]", what, d, lo, hi);
    *out = d;
    return MS_OK;
}

static int get_ids(const cJSON *v, const char *what, cfg_persona *p, ms_error *err) {
    if (!cJSON_IsArray(v))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an array of integers, got %s", what, cfg__json_kind(v));
    int n = cJSON_GetArraySize(v);
    if (n > CFG_PERSONA_IDS_MAX)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: %d entries, more than the limit of %d", what, n, CFG_PERSONA_IDS_MAX);
    int *ids = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    MS_ASSERT(ids != NULL);
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        char w[160];
        double d;
        snprintf(w, sizeof w, "%s[%d]", what, i);
        int rc = get_number(it, w, 0, CFG_PERSONA_ID_MAX, true, &d, err);
        if (rc != MS_OK) {
            free(ids);
            return rc;
        }
        ids[i] = (int)d;
    }
    free(p->text_ids);
    p->text_ids = n > 0 ? ids : NULL;
    if (n == 0) free(ids);
    p->n_text_ids = n;
    return MS_OK;
}

/* The key closest to k, or NULL when none is close. */
static const char *suggest_key(const char *k) {
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < K__N; i++) {
        int d = cfg__distance(k, key_names[i]);
        if (d < bestd) {
            bestd = d;
            best = key_names[i];
        }
    }
    return best;
}

/* One persona object into p (initialised); at is its path
 * ("personas.list[2]"). */
static int load_one(cfg_persona *p, const cJSON *o, const char *at, const char *base_dir, ms_error *err) {
    if (!cJSON_IsObject(o))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: expected a persona object, got %s", at, cfg__json_kind(o));
    bool seen[K__N] = {0};
    char kb[80], what[192];
    for (const cJSON *m = o->child; m; m = m->next) {
        int k = 0;
        while (k < K__N && strcmp(m->string, key_names[k]) != 0) k++;
        snprintf(what, sizeof what, "%s.%s", at, text_shown(m->string, CFG_KEY_SHOWN_MAX, kb, sizeof kb));
        if (k == K__N) {
            const char *s = suggest_key(m->string);
            if (s) return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown key (did you mean %s?)", what, s);
            return ms_err_set(err, MS_ERR_NOTFOUND, "%s: unknown key (a persona takes name, description, voice, "
                                                    "text or text_ids, and sampling overrides)", what);
        }
        if (seen[k]) return ms_err_set(err, MS_ERR_FORMAT, "%s: duplicate key", what);
        seen[k] = true;
        int rc = MS_OK;
        double d = 0;
        switch (k) {
        case K_NAME:
            rc = get_string(m, what, CFG_PERSONA_NAME_MAX, "", &p->name, err);
            if (rc == MS_OK && !name_ok(p->name))
                rc = ms_err_set(err, MS_ERR_ARG, "%s: \"%s\" is not a persona name ([A-Za-z0-9_.-], 1..%d bytes, "
                                                 "not starting with '.')",
                                what, text_shown(p->name, CFG_KEY_SHOWN_MAX, kb, sizeof kb), CFG_PERSONA_NAME_MAX);
            break;
        case K_DESCRIPTION: rc = get_string(m, what, CFG_PERSONA_DESC_MAX, "", &p->description, err); break;
        case K_VOICE: {
            char *v = NULL;
            rc = get_string(m, what, PERSONA_PATH_MAX, "", &v, err);
            if (rc == MS_OK) {
                free(p->voice);
                p->voice = cfg__resolve(v, base_dir);
                free(v);
                if (strlen(p->voice) > PERSONA_PATH_MAX)
                    rc = ms_err_set(err, MS_ERR_RANGE, "%s: longer than %d bytes once resolved", what, PERSONA_PATH_MAX);
            }
            break;
        }
        case K_TEXT: rc = get_string(m, what, CFG_PERSONA_TEXT_MAX, "\t\n\r", &p->text, err); break;
        case K_TEXT_IDS: rc = get_ids(m, what, p, err); break;
        case K_TEXT_TEMP:
            rc = get_number(m, what, 0, PROTO_TEMPERATURE_MAX, false, &d, err);
            p->text_temperature = d;
            break;
        case K_AUDIO_TEMP:
            rc = get_number(m, what, 0, PROTO_TEMPERATURE_MAX, false, &d, err);
            p->audio_temperature = d;
            break;
        case K_TEXT_TOPK:
            rc = get_number(m, what, 0, PROTO_TOPK_MAX, true, &d, err);
            p->text_topk = (int64_t)d;
            break;
        case K_AUDIO_TOPK:
            rc = get_number(m, what, 0, PROTO_TOPK_MAX, true, &d, err);
            p->audio_topk = (int64_t)d;
            break;
        }
        if (rc != MS_OK) return rc;
    }
    if (!seen[K_NAME]) return ms_err_set(err, MS_ERR_ARG, "%s: a persona needs a name", at);
    if (p->text[0] && p->n_text_ids > 0)
        return ms_err_set(err, MS_ERR_ARG, "%s: give text or text_ids, not both", at);
    return MS_OK;
}

static int list_load(void *f, const cJSON *v, const char *path, const char *base_dir, ms_error *err) {
    if (!cJSON_IsArray(v))
        return ms_err_set(err, MS_ERR_FORMAT, "%s: expected an array of persona objects, got %s", path,
                          cfg__json_kind(v));
    int n = cJSON_GetArraySize(v);
    if (n > CFG_MAX_PERSONAS)
        return ms_err_set(err, MS_ERR_LIMIT, "%s: %d personas, more than the limit of %d", path, n, CFG_MAX_PERSONAS);
    cfg_personas l = {calloc((size_t)(n > 0 ? n : 1), sizeof(cfg_persona)), 0};
    MS_ASSERT(l.v != NULL);
    int rc = MS_OK;
    for (const cJSON *it = v->child; it && rc == MS_OK; it = it->next) {
        char at[96];
        snprintf(at, sizeof at, "%s[%d]", path, l.n);
        persona_init(&l.v[l.n]);
        l.n++;
        rc = load_one(&l.v[l.n - 1], it, at, base_dir, err);
        for (int j = 0; rc == MS_OK && j < l.n - 1; j++)
            if (strcmp(l.v[j].name, l.v[l.n - 1].name) == 0)
                rc = ms_err_set(err, MS_ERR_ARG, "%s.name: \"%s\" is already the name of %s[%d]", at,
                                l.v[l.n - 1].name, path, j);
    }
    if (rc != MS_OK) {
        list_close(&l);
        return rc;
    }
    list_close(f);
    if (l.n == 0) {
        free(l.v);
        l.v = NULL;
    }
    *(cfg_personas *)f = l;
    return MS_OK;
}

/* ---- dump and files ----------------------------------------------------- */

static cJSON *list_json(const void *f) {
    const cfg_personas *l = f;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < l->n; i++) {
        const cfg_persona *p = &l->v[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) goto fail;
        cJSON_AddItemToArray(a, o);
        if (!cJSON_AddStringToObject(o, "name", p->name)) goto fail;
        if (p->description[0] && !cJSON_AddStringToObject(o, "description", p->description)) goto fail;
        if (p->voice[0] && !cJSON_AddStringToObject(o, "voice", p->voice)) goto fail;
        if (p->text[0] && !cJSON_AddStringToObject(o, "text", p->text)) goto fail;
        if (p->n_text_ids > 0) {
            cJSON *ids = cJSON_CreateIntArray(p->text_ids, p->n_text_ids);
            if (!ids) goto fail;
            cJSON_AddItemToObject(o, "text_ids", ids);
        }
        if (p->text_temperature >= 0) cJSON_AddItemToObject(o, "text_temperature", cfg__double_json(p->text_temperature));
        if (p->text_topk >= 0) cJSON_AddNumberToObject(o, "text_topk", (double)p->text_topk);
        if (p->audio_temperature >= 0)
            cJSON_AddItemToObject(o, "audio_temperature", cfg__double_json(p->audio_temperature));
        if (p->audio_topk >= 0) cJSON_AddNumberToObject(o, "audio_topk", (double)p->audio_topk);
    }
    return a;
fail:
    cJSON_Delete(a);
    return NULL;
}

static int list_check_files(const void *f, const char *path, ms_error *err) {
    const cfg_personas *l = f;
    for (int i = 0; i < l->n; i++) {
        const char *v = l->v[i].voice;
        if (!v[0]) continue;
        struct stat st;
        if (stat(v, &st) != 0)
            return ms_err_set(err, MS_ERR_IO, "%s[%d].voice: %s: %s", path, i, v, strerror(errno));
        if (!S_ISREG(st.st_mode)) return ms_err_set(err, MS_ERR_ARG, "%s[%d].voice: %s: not a regular file", path, i, v);
        if (access(v, R_OK) != 0)
            return ms_err_set(err, MS_ERR_IO, "%s[%d].voice: %s: %s", path, i, v, strerror(errno));
    }
    return MS_OK;
}

const cfg_custom_ops cfg_personas_ops = {
    .type_name = "list of personas",
    .default_doc = "`[]`",
    .allowed_doc = "at most " XSTR(CFG_MAX_PERSONAS) " objects (see \"Personas\" below)",
    .init = list_init,
    .close = list_close,
    .copy = list_copy,
    .equal = list_equal,
    .load = list_load,
    .to_json = list_json,
    .check_files = list_check_files,
};
