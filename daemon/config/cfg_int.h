/* cfg_int.h - the option table's shape, shared by the table (cfg_table.c)
 * and the modules that walk it (cfg.c, cfg_dump.c, cfg_reload.c,
 * cfg_doc.c). Not for other modules.
 */
#ifndef MOSHID_CFG_INT_H
#define MOSHID_CFG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cfg.h"
#include "text.h"

typedef enum { CFG_INT, CFG_DOUBLE, CFG_BOOL, CFG_STRING, CFG_ENUM, CFG_STRLIST, CFG_CUSTOM } cfg_type;

enum {
    CFG_F_RELOAD = 1u << 0,   /* applied by reload (SIGHUP) */
    CFG_F_PATH = 1u << 1,     /* a file system path: relative -> config dir */
    CFG_F_REQUIRED = 1u << 2, /* must be set before serving (cfg_check_files) */
    CFG_F_FILE = 1u << 3,     /* cfg_check_files: a readable regular file */
    CFG_F_DIR = 1u << 4,      /* cfg_check_files: a directory */
    CFG_F_ONE = 1u << 5,      /* a list that also takes a string (a list of one) */
};

/* check: validate one string (a CFG_STRING value or one CFG_STRLIST item);
 * return 0, or non-zero with the reason in why[0..len). */
typedef int (*cfg_check_fn)(const char *s, char *why, size_t len);

struct cJSON;

/* A value type with its own parser (a list of objects such as
 * personas.list): every walker calls these for a CFG_CUSTOM option. The
 * field is the option's member of struct cfg. */
typedef struct cfg_custom_ops {
    const char *type_name;     /* docs: "list of personas" */
    const char *default_doc;   /* docs: "`[]`" */
    const char *allowed_doc;   /* docs: the bounds */
    void (*init)(void *f);     /* the default value */
    void (*close)(void *f);    /* free what f owns; f is then closed (init again to reuse) */
    void (*copy)(void *dst, const void *src);   /* dst: closed or initialised (freed first) */
    bool (*equal)(const void *a, const void *b);
    /* load: replace f by the JSON value v; relative paths from base_dir
     * (may be NULL); on error f is unchanged and err names path and key. */
    int (*load)(void *f, const struct cJSON *v, const char *path, const char *base_dir, ms_error *err);
    struct cJSON *(*to_json)(const void *f);     /* NULL when out of memory */
    int (*check_files)(const void *f, const char *path, ms_error *err);   /* cfg_check_files */
} cfg_custom_ops;

/* How the table walker (cfg_to_app, cfg_app.c) writes an option's value
 * into app_opts (daemon/app.h): the C type of the field there. */
typedef enum {
    CFG_TO_NONE,        /* not in app_opts: read from the cfg (log.level: ms_log_level) */
    CFG_TO_INT,         /* int (integers, booleans, enums: the index, or values[index]) */
    CFG_TO_UNSIGNED,    /* unsigned */
    CFG_TO_SIZE,        /* size_t */
    CFG_TO_I64,         /* int64_t */
    CFG_TO_DOUBLE,      /* double (from a number or an integer) */
    CFG_TO_STR,         /* const char *, borrowed from the cfg ("" kept) */
    CFG_TO_STR_OR_NULL, /* const char *, borrowed; "" written as NULL */
    CFG_TO_NAME,        /* const char *: an enum's value name (names[index]) */
    CFG_TO_LIST,        /* const char *const * at to[0], its int count at to[1] (borrowed) */
    CFG_TO_PTR,         /* const void *: the address of the option's field in the cfg */
} cfg_to;

typedef struct cfg_option {
    const char *path;          /* "section.name" */
    cfg_type type;
    size_t offset;             /* of the field in struct cfg */
    cfg_to to;                 /* the type of its field(s) in app_opts */
    /* offsetof(app_opts, field) + 1 of the fields written (0: none); a
     * second field gets the same value (CFG_TO_LIST: the count) */
    size_t at[2];
    const int *values;         /* CFG_ENUM, CFG_BOOL: the value written for each index (a
                                  boolean's: false, true), or NULL (the index itself) */
    unsigned flags;            /* CFG_F_* */
    int64_t idef, imin, imax;  /* CFG_INT; idef also CFG_BOOL and CFG_ENUM */
    double ddef, dmin, dmax;   /* CFG_DOUBLE */
    const char *sdef;          /* CFG_STRING default ("" = unset) */
    const char *const *names;  /* CFG_ENUM: NULL-terminated value names */
    const char *const *ldef;   /* CFG_STRLIST default, NULL-terminated */
    size_t max_len;            /* CFG_STRING / item: longest, bytes */
    cfg_check_fn check;        /* CFG_STRING / item validator, or NULL */
    const cfg_custom_ops *custom;  /* CFG_CUSTOM */
    const char *doc;           /* one line */
} cfg_option;

extern const cfg_option cfg_options[];
extern const size_t cfg_noptions;

/* cfg_cross_check: rules between options (both TLS files or neither, ...);
 * MS_OK or an error naming the options. */
int cfg_cross_check(const cfg *c, ms_error *err);

/* The field of option o in configuration c, as a T. */
#define CFG_FIELD(c, o, T) ((T *)((char *)(c) + (o)->offset))
#define CFG_CFIELD(c, o, T) ((const T *)((const char *)(c) + (o)->offset))

/* cfg__section_len: bytes of o's section name ("limits" of
 * "limits.max_steps"). */
static inline int cfg__section_len(const cfg_option *o) { return (int)(strchr(o->path, '.') - o->path); }

/* The walkers' shared pieces. Module dependencies run one way:
 * cfg_util.c (strings, messages, JSON numbers, paths) <- cfg_persona.c
 * (the personas.list type) <- cfg_table.c (the options) <- cfg.c
 * (defaults, values, copy, compare, load) <- cfg_dump.c (JSON text) <-
 * cfg_reload.c (reload and its report); cfg_doc.c and cfg_app.c (the
 * values into app_opts) read the table only. */

/* Longest key from a file quoted in a message, bytes (text_shown). */
#define CFG_KEY_SHOWN_MAX 64

/* cfg_util.c: strdup that asserts on out-of-memory (a few bytes at
 * start-up or reload). */
char *cfg__strdup(const char *s);

/* cfg.c: a list copy (asserts on out-of-memory); one option's value
 * compared, and copied from src to dst (dst's old value freed). */
void cfg__list_copy(cfg_strlist *dst, const char *const *src, int n);
bool cfg__value_equal(const cfg *a, const cfg *b, const cfg_option *o);
void cfg__copy_value(cfg *dst, const cfg *src, const cfg_option *o);

/* cfg_dump.c: the value of o in c as compact JSON text in buf[0..len),
 * cut to fit ("?" when out of memory). */
void cfg__format_value(const cfg *c, const cfg_option *o, char *buf, size_t len);

/* cfg_util.c, for the walkers and the custom types: what kind of JSON value
 * v is ("a string", ...); the edit distance of two names (cut at 64 bytes);
 * a relative path made relative to base_dir (owned result); d as the
 * shortest JSON number that reads back to d. Keys are shown in messages
 * with text_shown(key, CFG_KEY_SHOWN_MAX, ...). */
const char *cfg__json_kind(const struct cJSON *v);
int cfg__distance(const char *a, const char *b);
char *cfg__resolve(const char *s, const char *base_dir);
struct cJSON *cfg__double_json(double d);

/* cfg_persona.c: the type of personas.list. */
extern const cfg_custom_ops cfg_personas_ops;

#endif
