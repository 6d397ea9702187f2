/* plugin.h - optional backends built as shared objects and loaded at run
 * time with dlopen, so that one moshid binary starts on a host without the
 * CUDA libraries and loads the CUDA backend only when it is asked for.
 *
 * A plugin `libmoshid-NAME.so` exports MOSHID_PLUGIN_SYMBOL, a function
 * returning its descriptor. The loader checks the ABI number before using
 * anything else in it.
 */
#ifndef MOSHID_PLUGIN_H
#define MOSHID_PLUGIN_H

#include <stddef.h>

#include "err.h"

/* Bumped whenever moshid_plugin or the backend table changes shape. */
#define MOSHID_PLUGIN_ABI 7   /* 2: backend interface v2 (backend.h LM_BACKEND_VERSION); 3: lm_config.window, dep_window;
                                 4: lm_backend_opts.random_weights; 5: interface v3 (frame_stages); 6: lm_backend_opts.gpu;
                                 7: lm_gpu_opts.dep_chain_off */
#define MOSHID_PLUGIN_SYMBOL "moshid_plugin_entry"

typedef struct moshid_plugin {
    int abi;               /* MOSHID_PLUGIN_ABI of the plugin's build */
    const char *name;      /* "cuda" */
    const char *build;     /* what it was built with, e.g. "CUDA 13.0; sm_80 sm_89 sm_90 + PTX" */
    /* probe: describe the usable devices in what[0..len) and return their
     * number; 0 when none, negative on error (reason in what). Any thread. */
    int (*probe)(char *what, size_t len);
    /* The backend table (engine/backend.h) this plugin provides; NULL while
     * the plugin carries no backend yet. */
    const void *backend;
} moshid_plugin;

typedef const moshid_plugin *(*moshid_plugin_entry_fn)(void);

/* plugin_load: find and load libmoshid-NAME.so and return its descriptor
 * (valid until exit; plugins are never unloaded). Search order: the
 * directory in $MOSHID_PLUGIN_DIR, the directory of the running executable,
 * PREFIX/lib/moshid when that is PREFIX/bin (where `make install` puts
 * both, for any PREFIX), then the compiled-in MOSHID_PLUGIN_LIBDIR. NULL
 * with err set (which files were tried and why each failed, e.g. a missing
 * libcudart) otherwise. */
const moshid_plugin *plugin_load(const char *name, ms_error *err);

#endif
