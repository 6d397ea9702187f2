/* json.h - a small bounded JSON reader for the engine.
 *
 * The engine (safetensors headers, model config.json) must build with
 * nothing but a C compiler and the CUDA toolkit, so it cannot depend on
 * cJSON; the daemon's own configuration uses cJSON. This reader builds a
 * read-only tree, refuses anything not RFC 8259 JSON, and enforces limits on
 * input size and nesting depth. Strings are decoded (escapes, \u with
 * surrogate pairs, to UTF-8) and NUL-terminated; a string holding a NUL
 * escape is refused.
 */
#ifndef MOSHID_JSON_H
#define MOSHID_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Deepest nesting of arrays and objects accepted. */
#define JS_MAX_DEPTH 64

typedef enum { JS_NULL, JS_BOOL, JS_NUMBER, JS_STRING, JS_ARRAY, JS_OBJECT } js_type;

typedef struct js_value js_value;
struct js_value {
    js_type type;
    bool boolean;       /* JS_BOOL */
    bool is_int;        /* JS_NUMBER written as an integer that fits int64 */
    int64_t i;          /* JS_NUMBER when is_int */
    double num;         /* JS_NUMBER, always */
    char *str;          /* JS_STRING: decoded, NUL-terminated */
    size_t len;         /* JS_STRING: bytes; JS_ARRAY/JS_OBJECT: children */
    char *key;          /* member name when the parent is an object */
    js_value *child;    /* first child (array element or object member) */
    js_value *next;     /* next sibling */
};

/* js_parse: parse exactly one JSON value from text[0..len) (trailing white
 * space allowed). Returns a tree owned by the caller (js_free), or NULL with
 * err set (MS_ERR_FORMAT with the byte offset, MS_ERR_LIMIT, MS_ERR_NOMEM). */
js_value *js_parse(const char *text, size_t len, ms_error *err);

void js_free(js_value *v);

/* js_get: member `key` of object v, or NULL (also when v is not an object).
 * When a key occurs twice, the first wins (js_has_duplicate_keys finds them). */
const js_value *js_get(const js_value *v, const char *key);

/* js_at: element i of array v, or NULL. */
const js_value *js_at(const js_value *v, size_t i);

/* js_has_duplicate_keys: true when some object in the tree repeats a key;
 * *key (if not NULL) is set to the first repeated one (borrowed). */
bool js_has_duplicate_keys(const js_value *v, const char **key);

/* js_type_name: "null", "boolean", "number", "string", "array", "object". */
const char *js_type_name(js_type t);

#endif
