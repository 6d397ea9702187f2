/* cu2emu.c - rewrites a CUDA source file into C++ that the host compiler
 * builds against the emulator (emu_device.h), touching only the two
 * constructs C++ has no way to express:
 *
 *   kernel<<<grid, block, shmem, stream>>>(args)
 *       -> emu::launch<kernel>(EMU_SITE, grid, block, shmem, stream)(args)
 *   __shared__ T a[N], b;            (at function scope; static/volatile ok)
 *       -> auto &a = emu::shared<T[N]>(EMU_SHKEY, "a", EMU_SITE);
 *          auto &b = emu::shared<T>(EMU_SHKEY, "b", EMU_SITE);
 *   extern __shared__ T s[];
 *       -> T *const s = emu::dyn_shared<T>(EMU_SITE);
 *
 * Everything else is copied byte for byte, comments, strings and
 * preprocessor lines included, and every line keeps its number (the output
 * starts with #line), so compiler messages and the emulator's file:line
 * point into the .cu file. A construct it cannot rewrite (a __shared__ at
 * file scope or with an initialiser, a launch without >>>) is an error
 * naming the line.
 *
 *   cu2emu IN.cu OUT.cc
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static const char *in_path;
static const char *src;   /* the input, NUL-terminated */
static size_t src_n;

static void die(size_t at, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(size_t at, const char *fmt, ...) {
    int line = 1;
    for (size_t i = 0; i < at && i < src_n; i++) line += src[i] == '\n';
    fprintf(stderr, "%s:%d: cu2emu: ", in_path, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { perror("cu2emu"); exit(1); }
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void putc_(buf *b, char c) { put(b, &c, 1); }

static int idch(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Skip a comment, string or char literal starting at i (copying it to out
 * when out is set); returns the index after it, or i when there is none. */
static size_t skip_literal(size_t i, buf *out) {
    size_t j = i;
    if (src[i] == '/' && src[i + 1] == '/') {
        while (j < src_n && src[j] != '\n') j++;
    } else if (src[i] == '/' && src[i + 1] == '*') {
        const char *e = strstr(src + i + 2, "*/");
        if (!e) die(i, "unterminated comment");
        j = (size_t)(e - src) + 2;
    } else if (src[i] == '"' || src[i] == '\'') {
        char q = src[i];
        for (j = i + 1; j < src_n && src[j] != q; j++)
            if (src[j] == '\\') j++;
        if (j >= src_n) die(i, "unterminated literal");
        j++;
    } else {
        return i;
    }
    if (out) put(out, src + i, j - i);
    return j;
}

/* ---- launches ------------------------------------------------------------------ */

/* At "<<<" (src[i]): the kernel expression is the end of out; wrap it. */
static size_t rewrite_launch(size_t i, buf *out) {
    size_t end = out->n;
    while (end > 0 && isspace((unsigned char)out->p[end - 1])) end--;
    size_t s = end;
    if (s > 0 && out->p[s - 1] == '>') {   /* template arguments */
        int depth = 0;
        do {
            s--;
            if (out->p[s] == '>') depth++;
            else if (out->p[s] == '<') depth--;
        } while (s > 0 && depth > 0);
        if (depth) die(i, "cannot find the kernel's template arguments before <<<");
    }
    while (s > 0 && (idch(out->p[s - 1]) || (out->p[s - 1] == ':' && s > 1 && out->p[s - 2] == ':'))) s--;
    if (s == end || isdigit((unsigned char)out->p[s])) die(i, "no kernel name before <<<");
    char *name = strndup(out->p + s, end - s);
    out->n = s;
    puts_(out, "emu::launch<");
    puts_(out, name);
    puts_(out, ">(EMU_SITE, ");
    free(name);
    size_t j = i + 3;
    for (;;) {
        if (j >= src_n || src[j] == ';') die(i, "launch without >>>");
        size_t k = skip_literal(j, out);
        if (k != j) { j = k; continue; }
        if (strncmp(src + j, ">>>", 3) == 0) break;
        putc_(out, src[j++]);
    }
    putc_(out, ')');
    return j + 3;
}

/* ---- __shared__ declarations ------------------------------------------------------ */

/* Trim spaces at both ends of s[0..n) in place; returns the new length and
 * moves *s. */
static size_t trim(const char **s, size_t n) {
    while (n && isspace((unsigned char)**s)) { (*s)++; n--; }
    while (n && isspace((unsigned char)(*s)[n - 1])) n--;
    return n;
}

/* Remove `__align__(...)` and `alignas(...)` from d (in place), keeping the
 * last one's argument in *align ("" when none). */
static void take_align(char *d, char *align, size_t alen) {
    static const char *kw[] = {"__align__", "alignas"};
    align[0] = '\0';
    for (int k = 0; k < 2; k++) {
        char *p;
        while ((p = strstr(d, kw[k])) != NULL) {
            char *q = p + strlen(kw[k]);
            while (isspace((unsigned char)*q)) q++;
            if (*q != '(') break;
            int depth = 0;
            char *a = q + 1, *e = q;
            do {
                if (*e == '(') depth++;
                else if (*e == ')') depth--;
                e++;
            } while (*e && depth);
            snprintf(align, alen, "%.*s", (int)(e - 1 - a), a);
            memmove(p, e, strlen(e) + 1);
        }
    }
}

/* One declarator: "*name[a][b]" -> stars "*", name, suffix "[a][b]". */
typedef struct decl {
    char stars[32], name[128], suffix[512];
} decl;

/* Parse the declarator at the end of s[0..n); returns the length of what
 * precedes it (the type, for the first declarator). */
static size_t parse_declarator(const char *s, size_t n, decl *d, size_t at) {
    const char *orig = s;
    n = trim(&s, n);
    size_t e = n;
    while (e && s[e - 1] == ']') {   /* array dimensions, from the end */
        int depth = 0;
        size_t k = e;
        do {
            k--;
            if (s[k] == ']') depth++;
            else if (s[k] == '[') depth--;
        } while (k && depth);
        e = k;
        while (e && isspace((unsigned char)s[e - 1])) e--;
    }
    snprintf(d->suffix, sizeof d->suffix, "%.*s", (int)(n - e), s + e);
    size_t ne = e;
    while (e && idch(s[e - 1])) e--;
    if (e == ne) die(at, "cannot find the name of a __shared__ variable");
    snprintf(d->name, sizeof d->name, "%.*s", (int)(ne - e), s + e);
    size_t st = e;
    while (st && (isspace((unsigned char)s[st - 1]) || s[st - 1] == '*')) st--;
    size_t o = 0;
    for (size_t k = st; k < e && o + 1 < sizeof d->stars; k++)
        if (s[k] == '*') d->stars[o++] = '*';
    d->stars[o] = '\0';
    return (size_t)(s - orig) + st;
}

/* At "__shared__" (src[i], depth = brace depth): rewrite the declaration. */
static size_t rewrite_shared(size_t i, buf *out, int depth) {
    if (depth == 0) die(i, "__shared__ at file scope is not supported by the emulator");
    /* qualifiers already copied before it: static, extern, volatile */
    int is_extern = 0, is_volatile = 0, nl = 0;
    size_t s = out->n;
    for (;;) {
        size_t e = s;
        while (e > 0 && isspace((unsigned char)out->p[e - 1])) e--;
        size_t b = e;
        while (b > 0 && idch(out->p[b - 1])) b--;
        if (b == e) break;
        size_t len = e - b;
        if (len == 6 && !strncmp(out->p + b, "extern", 6)) is_extern = 1;
        else if (len == 8 && !strncmp(out->p + b, "volatile", 8)) is_volatile = 1;
        else if (!(len == 6 && !strncmp(out->p + b, "static", 6))) break;
        s = b;
    }
    for (size_t k = s; k < out->n; k++) nl += out->p[k] == '\n';
    out->n = s;
    /* the declaration, up to its ';' (comments dropped, newlines counted) */
    buf d = {0};
    size_t j = i + strlen("__shared__");
    int par = 0;
    for (;; j++) {
        if (j >= src_n) die(i, "__shared__ declaration without ';'");
        if ((src[j] == '/' && (src[j + 1] == '/' || src[j + 1] == '*'))) {
            size_t k = skip_literal(j, NULL);
            for (size_t m = j; m < k; m++) nl += src[m] == '\n';
            j = k - 1;
            continue;
        }
        char c = src[j];
        if (c == '(' || c == '[') par++;
        if (c == ')' || c == ']') par--;
        if (par == 0 && c == ';') break;
        if (par == 0 && (c == '=' || c == '{')) die(i, "__shared__ variables cannot have initialisers");
        if (c == '\n') { nl++; c = ' '; }
        putc_(&d, c);
    }
    j++;
    char align[64];
    take_align(d.p, align, sizeof align);
    /* split at top-level commas */
    const char *pieces[16];
    size_t plen[16];
    int np = 0, dep = 0;
    size_t st = 0;
    for (size_t k = 0; k <= d.n; k++) {
        char c = k < d.n ? d.p[k] : ',';
        if (c == '(' || c == '[' || c == '<') dep++;
        if (c == ')' || c == ']' || c == '>') dep--;
        if (c == ',' && dep == 0) {
            if (np == 16) die(i, "too many declarators");
            pieces[np] = d.p + st;
            plen[np++] = k - st;
            st = k + 1;
        }
    }
    decl dl;
    size_t tlen = parse_declarator(pieces[0], plen[0], &dl, i);
    const char *tp = pieces[0];
    tlen = trim(&tp, tlen);
    char type[512];
    snprintf(type, sizeof type, "%s%.*s", is_volatile ? "volatile " : "", (int)tlen, tp);
    if (!type[0]) die(i, "__shared__ declaration without a type");
    char alignarg[80] = "";
    if (align[0]) snprintf(alignarg, sizeof alignarg, ", %s", align);
    for (int p = 0; p < np; p++) {
        if (p > 0) parse_declarator(pieces[p], plen[p], &dl, i);
        char line[1400];
        if (is_extern) {
            if (np != 1 || strcmp(dl.suffix, "[]") != 0) die(i, "extern __shared__ must be one array of unknown size");
            snprintf(line, sizeof line, "%s%s *const %s = emu::dyn_shared<%s%s>(EMU_SITE);", type, dl.stars, dl.name,
                     type, dl.stars);
        } else {
            snprintf(line, sizeof line, "%sauto &%s = emu::shared<%s%s%s%s>(EMU_SHKEY, \"%s\", EMU_SITE);",
                     p ? " " : "", dl.name, type, dl.stars, dl.suffix, alignarg, dl.name);
        }
        puts_(out, line);
    }
    for (int k = 0; k < nl; k++) putc_(out, '\n');
    free(d.p);
    return j;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cu2emu IN.cu OUT.cc\n");
        return 2;
    }
    in_path = argv[1];
    FILE *f = fopen(in_path, "rb");
    if (!f) { perror(in_path); return 1; }
    buf in = {0};
    char tmp[65536];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) put(&in, tmp, r);
    fclose(f);
    if (!in.p) put(&in, "", 0);
    src = in.p;
    src_n = in.n;

    buf out = {0};
    char head[1200];
    snprintf(head, sizeof head, "#line 1 \"%s\"\n", in_path);
    puts_(&out, head);
    /* brace depth; at the beginning of a line; inside a preprocessor line
     * (where launches are rewritten, in macro bodies too, but braces and
     * __shared__ are left alone) */
    int depth = 0, bol = 1, pp = 0;
    size_t i = 0;
    while (i < src_n) {
        char c = src[i];
        if (bol) {
            size_t k = i;
            while (k < src_n && (src[k] == ' ' || src[k] == '\t')) k++;
            pp = k < src_n && src[k] == '#';
        }
        if (pp && c == '\n' && (i == 0 || src[i - 1] != '\\')) pp = 0;
        size_t k = skip_literal(i, &out);
        if (k != i) { i = k; bol = 0; continue; }
        bol = c == '\n' ? 1 : (isspace((unsigned char)c) ? bol : 0);
        if (!pp && c == '{') depth++;
        if (!pp && c == '}') depth--;
        if (c == '<' && strncmp(src + i, "<<<", 3) == 0) {
            i = rewrite_launch(i, &out);
            continue;
        }
        if ((c == '_' || isalpha((unsigned char)c)) && (i == 0 || !idch(src[i - 1]))) {
            size_t e = i;
            while (e < src_n && idch(src[e])) e++;
            if (!pp && e - i == 10 && strncmp(src + i, "__shared__", 10) == 0) {
                i = rewrite_shared(i, &out, depth);
                continue;
            }
            put(&out, src + i, e - i);
            i = e;
            continue;
        }
        putc_(&out, c);
        i++;
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(out.p, 1, out.n, f) != out.n || fclose(f) != 0) {
        perror(argv[2]);
        return 1;
    }
    free(in.p);
    free(out.p);
    return 0;
}
