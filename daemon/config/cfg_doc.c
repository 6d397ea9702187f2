/* cfg_doc.c - the option reference in Markdown, generated from the table
 * (moshid --help-config; make config-doc puts it into
 * docs/configuration.md, and a test checks that the committed file matches).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cfg_int.h"

static const char *type_name(const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: return "integer";
    case CFG_DOUBLE: return "number";
    case CFG_BOOL: return "boolean";
    case CFG_ENUM: return "string (one of)";
    case CFG_STRING: return (o->flags & CFG_F_DIR) ? "path (directory)" : (o->flags & CFG_F_PATH) ? "path (file)" : "string";
    case CFG_STRLIST: return "list of strings";
    case CFG_CUSTOM: return o->custom->type_name;
    }
    return "?";
}

/* Cell text with '|' escaped. */
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static void write_default(FILE *f, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: fprintf(f, "`%" PRId64 "`", o->idef); break;
    case CFG_DOUBLE: fprintf(f, "`%g`", o->ddef); break;
    case CFG_BOOL: fprintf(f, "`%s`", o->idef ? "true" : "false"); break;
    case CFG_ENUM: fprintf(f, "`\"%s\"`", o->names[o->idef]); break;
    case CFG_STRING:
        if (o->sdef[0]) fprintf(f, "`\"%s\"`", o->sdef);
        else fputs((o->flags & CFG_F_REQUIRED) ? "required" : "unset", f);
        break;
    case CFG_STRLIST:
        fputs("`[", f);
        for (int i = 0; o->ldef && o->ldef[i]; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", o->ldef[i]);
        fputs("]`", f);
        break;
    case CFG_CUSTOM: fputs(o->custom->default_doc, f); break;
    }
}

static void write_allowed(FILE *f, const cfg_option *o) {
    switch (o->type) {
    case CFG_INT: fprintf(f, "%" PRId64 " .. %" PRId64, o->imin, o->imax); break;
    case CFG_DOUBLE: fprintf(f, "%g .. %g", o->dmin, o->dmax); break;
    case CFG_BOOL: fputs("true, false", f); break;
    case CFG_ENUM:
        for (int i = 0; o->names[i]; i++) fprintf(f, "%s`%s`", i ? ", " : "", o->names[i]);
        break;
    case CFG_STRING: fprintf(f, "at most %zu bytes", o->max_len); break;
    case CFG_STRLIST: fprintf(f, "at most %d entries of at most %zu bytes", CFG_MAX_LIST, o->max_len); break;
    case CFG_CUSTOM: cell(f, o->custom->allowed_doc); break;
    }
}

void cfg_write_doc(FILE *f) {
    char section[64] = "";
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        int sl = (int)(strchr(o->path, '.') - o->path);
        if ((int)strlen(section) != sl || strncmp(section, o->path, (size_t)sl) != 0) {
            snprintf(section, sizeof section, "%.*s", sl, o->path);
            fprintf(f, "%s### `%s`\n\n", i ? "\n" : "", section);
            fputs("| option | type | default | allowed | reload | description |\n", f);
            fputs("|---|---|---|---|---|---|\n", f);
        }
        fprintf(f, "| `%s` | %s | ", o->path, type_name(o));
        write_default(f, o);
        fputs(" | ", f);
        write_allowed(f, o);
        fprintf(f, " | %s | ", (o->flags & CFG_F_RELOAD) ? "yes" : "restart");
        cell(f, o->doc);
        fputs(" |\n", f);
    }
}
