/* cfg_util.c - the small pieces every walker of the option table and the
 * custom value types (cfg_persona.c) share: strings, messages about keys
 * from a file, JSON kinds and numbers, paths. It calls nothing else of
 * cfg, so that the table, the walkers and the types all sit above it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cfg_int.h"

char *cfg__strdup(const char *s) {
    char *d = strdup(s);
    MS_ASSERT(d != NULL); /* a few bytes at start-up: out of memory is fatal */
    return d;
}

/* Relative path s made relative to base_dir (when both are set). Returns an
 * owned string. */
char *cfg__resolve(const char *s, const char *base_dir) {
    if (!s[0] || s[0] == '/' || !base_dir || !base_dir[0]) return cfg__strdup(s);
    size_t lb = strlen(base_dir), ls = strlen(s);
    char *r = malloc(lb + 1 + ls + 1);
    MS_ASSERT(r != NULL);
    memcpy(r, base_dir, lb);
    r[lb] = '/';
    memcpy(r + lb + 1, s, ls + 1);
    return r;
}

const char *cfg__json_kind(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* Edit distance of a and b (each cut at 64 bytes), for suggestions. */
int cfg__distance(const char *a, const char *b) {
    size_t la = strnlen(a, 64), lb = strnlen(b, 64);
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

cJSON *cfg__double_json(double d) { /* shortest text that reads back to the same double */
    char buf[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return cJSON_CreateRaw(buf);
}
