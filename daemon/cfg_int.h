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

typedef enum { CFG_INT, CFG_DOUBLE, CFG_BOOL, CFG_STRING, CFG_ENUM, CFG_STRLIST } cfg_type;

enum {
    CFG_F_RELOAD = 1u << 0,   /* applied by reload (SIGHUP) */
    CFG_F_PATH = 1u << 1,     /* a file system path: relative -> config dir */
    CFG_F_REQUIRED = 1u << 2, /* must be set before serving (cfg_check_files) */
    CFG_F_FILE = 1u << 3,     /* cfg_check_files: a readable regular file */
    CFG_F_DIR = 1u << 4,      /* cfg_check_files: a directory */
};

/* check: validate one string (a CFG_STRING value or one CFG_STRLIST item);
 * return 0, or non-zero with the reason in why[0..len). */
typedef int (*cfg_check_fn)(const char *s, char *why, size_t len);

typedef struct cfg_option {
    const char *path;          /* "section.name" */
    cfg_type type;
    size_t offset;             /* of the field in struct cfg */
    unsigned flags;            /* CFG_F_* */
    int64_t idef, imin, imax;  /* CFG_INT; idef also CFG_BOOL and CFG_ENUM */
    double ddef, dmin, dmax;   /* CFG_DOUBLE */
    const char *sdef;          /* CFG_STRING default ("" = unset) */
    const char *const *names;  /* CFG_ENUM: NULL-terminated value names */
    const char *const *ldef;   /* CFG_STRLIST default, NULL-terminated */
    size_t max_len;            /* CFG_STRING / item: longest, bytes */
    cfg_check_fn check;        /* CFG_STRING / item validator, or NULL */
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
 * cfg.c (defaults, values, copy, compare, load) <- cfg_dump.c (JSON text)
 * <- cfg_reload.c (reload and its report); cfg_doc.c reads the table only. */

/* cfg.c: strdup and a list copy that assert on out-of-memory (a few bytes
 * at start-up or reload); one option's value compared, and copied from src
 * to dst (dst's old value freed). */
char *cfg__strdup(const char *s);
void cfg__list_copy(cfg_strlist *dst, const char *const *src, int n);
bool cfg__value_equal(const cfg *a, const cfg *b, const cfg_option *o);
void cfg__copy_value(cfg *dst, const cfg *src, const cfg_option *o);

/* cfg_dump.c: the value of o in c as compact JSON text in buf[0..len),
 * cut to fit ("?" when out of memory). */
void cfg__format_value(const cfg *c, const cfg_option *o, char *buf, size_t len);

#endif
