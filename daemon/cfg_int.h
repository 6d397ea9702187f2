/* cfg_int.h - the option table's shape, shared by cfg.c (the walker) and
 * cfg_table.c (the table). Not for other modules.
 */
#ifndef MOSHID_CFG_INT_H
#define MOSHID_CFG_INT_H

#include <stddef.h>
#include <stdint.h>

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

/* Helpers shared by cfg.c and cfg_dump.c: strdup and a list copy that
 * assert on out-of-memory (a few bytes at start-up or reload). */
char *cfg__strdup(const char *s);
void cfg__list_copy(cfg_strlist *dst, const char *const *src, int n);

#endif
