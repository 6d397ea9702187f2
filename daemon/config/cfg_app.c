/* cfg_app.c - the configuration into the daemon's options (app_opts,
 * daemon/app.h): one walk over the table, each row writing its value into
 * the app_opts field(s) it names (cfg_option.to, .at). Reads the table
 * only.
 */
#include "cfg_int.h"

/* The option's value as an integer (integers, booleans, enums). */
static int64_t int_value(const cfg *c, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return *CFG_CFIELD(c, o, int64_t);
    case CFG_BOOL:
    case CFG_ENUM: {
        int i = o->type == CFG_BOOL ? *CFG_CFIELD(c, o, bool) : *CFG_CFIELD(c, o, int);
        return o->values ? o->values[i] : i;
    }
    default: MS_ASSERT(!"an integer option"); return 0;
    }
}

/* Write o's value into the field at offset at - 1 of the target. */
static void put(const cfg *c, const cfg_option *o, char *t, size_t at) {
    void *f = t + at - 1;
    switch (o->to) {
    case CFG_TO_NONE: break;
    case CFG_TO_INT: *(int *)f = (int)int_value(c, o); break;
    case CFG_TO_UNSIGNED: *(unsigned *)f = (unsigned)int_value(c, o); break;
    case CFG_TO_SIZE: *(size_t *)f = (size_t)int_value(c, o); break;
    case CFG_TO_I64: *(int64_t *)f = int_value(c, o); break;
    case CFG_TO_DOUBLE:
        *(double *)f = o->type == CFG_DOUBLE ? *CFG_CFIELD(c, o, double) : (double)int_value(c, o);
        break;
    case CFG_TO_STR: *(const char **)f = *CFG_CFIELD(c, o, char *); break;
    case CFG_TO_STR_OR_NULL: {
        const char *s = *CFG_CFIELD(c, o, char *);
        *(const char **)f = s[0] ? s : NULL;
        break;
    }
    case CFG_TO_NAME: *(const char **)f = o->names[*CFG_CFIELD(c, o, int)]; break;
    case CFG_TO_LIST: *(const char *const **)f = (const char *const *)CFG_CFIELD(c, o, cfg_strlist)->v; break;
    case CFG_TO_PTR: *(const void **)f = CFG_CFIELD(c, o, void); break;
    }
}

void cfg_to_app(const cfg *c, struct app_opts *o, bool reload_only) {
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *opt = &cfg_options[i];
        if (reload_only && !(opt->flags & CFG_F_RELOAD)) continue;
        if (opt->at[0]) put(c, opt, (char *)o, opt->at[0]);
        if (!opt->at[1]) continue;
        if (opt->to == CFG_TO_LIST) *(int *)((char *)o + opt->at[1] - 1) = CFG_CFIELD(c, opt, cfg_strlist)->n;
        else put(c, opt, (char *)o, opt->at[1]);
    }
}
