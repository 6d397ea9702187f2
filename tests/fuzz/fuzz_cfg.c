/* fuzz_cfg.c - the configuration loader and --set on arbitrary text. A
 * refused text must come with a message (and change nothing); an accepted
 * one must survive dump -> load unchanged, and a reload from it must
 * account for every option. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_int.h"
#include "err.h"

/* Inputs starting with "set:" exercise --set: the rest of the first line
 * is one assignment applied to the defaults. */
static int fuzz_set(const uint8_t *data, size_t size) {
    size_t n = 0;
    while (4 + n < size && data[4 + n] != '\n' && data[4 + n] != '\0') n++;
    char *line = malloc(n + 1);
    memcpy(line, data + 4, n);
    line[n] = '\0';
    ms_error e = {0};
    cfg c, before;
    cfg_init(&c);
    cfg_copy(&before, &c);
    if (cfg_set(&c, line, &e) != MS_OK) {
        MS_ASSERT(e.code != MS_OK && e.msg[0] != '\0');
        MS_ASSERT(cfg_equal(&c, &before)); /* a refused --set changes nothing */
    } else if (cfg_validate(&c, &e) == MS_OK) {
        char *txt = cfg_dump(&c);
        cfg b;
        MS_ASSERT(cfg_load_buf(&b, txt, strlen(txt), "dump.json", NULL, &e) == MS_OK);
        MS_ASSERT(cfg_equal(&b, &c));
        cfg_close(&b);
        free(txt);
    }
    cfg_close(&before);
    cfg_close(&c);
    free(line);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 4 && memcmp(data, "set:", 4) == 0) return fuzz_set(data, size);
    ms_error e = {0};
    cfg a;
    if (cfg_load_buf(&a, (const char *)data, size, "fuzz.json", "/base", &e) != MS_OK) {
        MS_ASSERT(e.code != MS_OK && e.msg[0] != '\0');
        cfg_close(&a);
        return 0;
    }
    char *txt = cfg_dump(&a);
    MS_ASSERT(txt != NULL);
    cfg b;
    int rc = cfg_load_buf(&b, txt, strlen(txt), "dump.json", "/other", &e);
    MS_ASSERT(rc == MS_OK);
    MS_ASSERT(cfg_equal(&a, &b));
    free(txt);

    cfg d;
    cfg_reload_report rep;
    cfg_init(&d);
    int refused = cfg_apply_reload(&d, &a, &rep);
    MS_ASSERT(refused == rep.n_refused && rep.n_changed + rep.n_refused <= (int)cfg_noptions);
    cfg_apply_reload(&d, &a, &rep); /* applying twice changes nothing more */
    MS_ASSERT(rep.n_changed == 0 && rep.n_refused == refused);
    cfg_close(&d);
    cfg_close(&b);
    cfg_close(&a);
    return 0;
}
