/* cfg_dump.c - the configuration as JSON text: the whole of it
 * (--dump-config) and one option's value (the lines of a reload report).
 * Loading, compare and copy are in cfg.c; reload in cfg_reload.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cfg_int.h"

/* The value of o in c as a new cJSON item (NULL when out of memory). */
static cJSON *value_json(const cfg *c, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return cJSON_CreateNumber((double)*CFG_CFIELD(c, o, int64_t));
    case CFG_DOUBLE: return cfg__double_json(*CFG_CFIELD(c, o, double));
    case CFG_BOOL: return cJSON_CreateBool(*CFG_CFIELD(c, o, bool));
    case CFG_ENUM: return cJSON_CreateString(o->names[*CFG_CFIELD(c, o, int)]);
    case CFG_STRING: return cJSON_CreateString(*CFG_CFIELD(c, o, char *));
    case CFG_STRLIST: {
        const cfg_strlist *l = CFG_CFIELD(c, o, cfg_strlist);
        return cJSON_CreateStringArray((const char *const *)l->v, l->n);
    }
    case CFG_CUSTOM: return o->custom->to_json(CFG_CFIELD(c, o, void));
    }
    return NULL;
}

char *cfg_dump(const cfg *c) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        char sec[64];
        snprintf(sec, sizeof sec, "%.*s", cfg__section_len(o), o->path);
        cJSON *s = cJSON_GetObjectItemCaseSensitive(root, sec);
        if (!s && !(s = cJSON_AddObjectToObject(root, sec))) goto fail;
        cJSON *v = value_json(c, o);
        if (!v) goto fail;
        cJSON_AddItemToObject(s, o->path + cfg__section_len(o) + 1, v);
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

void cfg__format_value(const cfg *c, const cfg_option *o, char *buf, size_t len) {
    cJSON *v = value_json(c, o);
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, len, "%s", t ? t : "?");
    cJSON_free(t);
    cJSON_Delete(v);
}
