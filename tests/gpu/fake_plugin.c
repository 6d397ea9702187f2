/* fake_plugin.c - broken plugins for the loader's tests (check_plugin):
 * built with -DFAKE_ABI=N it reports that ABI number; with -DFAKE_NOSYM it
 * exports no entry point at all. */
#include <stddef.h>

#include "plugin.h"

#ifdef FAKE_NOSYM
int moshid_fake_plugin_placeholder(void);
int moshid_fake_plugin_placeholder(void) {
    return 0;
}
#else
static int fake_probe(char *what, size_t len) {
    (void)what;
    (void)len;
    return 0;
}

static const moshid_plugin fake = {
    .abi = FAKE_ABI,
    .name = "fake",
    .build = "fake",
    .probe = fake_probe,
    .backend = NULL,
};

const moshid_plugin *moshid_plugin_entry(void);
const moshid_plugin *moshid_plugin_entry(void) {
    return &fake;
}
#endif
