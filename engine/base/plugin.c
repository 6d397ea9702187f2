/* plugin.c - dlopen loader for optional backends. See plugin.h. */
#include "plugin.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MOSHID_PLUGIN_LIBDIR
#define MOSHID_PLUGIN_LIBDIR "/usr/local/lib/moshid"
#endif

/* Try one path; on failure append the reason to why. */
static const moshid_plugin *try_path(const char *path, char *why, size_t wlen) {
    size_t used = strlen(why);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why + used, wlen - used, "%s%s", used ? "; " : "", e ? e : path);
        return NULL;
    }
    moshid_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, MOSHID_PLUGIN_SYMBOL);
    const moshid_plugin *p = entry ? entry() : NULL;
    if (!p) {
        snprintf(why + used, wlen - used, "%s%s: no %s", used ? "; " : "", path, MOSHID_PLUGIN_SYMBOL);
        dlclose(h);
        return NULL;
    }
    if (p->abi != MOSHID_PLUGIN_ABI) {
        snprintf(why + used, wlen - used, "%s%s: plugin ABI %d, moshid expects %d", used ? "; " : "", path,
                 p->abi, MOSHID_PLUGIN_ABI);
        dlclose(h);
        return NULL;
    }
    return p;
}

const moshid_plugin *plugin_load(const char *name, ms_error *err) {
    char file[128];
    snprintf(file, sizeof file, "libmoshid-%s.so", name);
    char dirs[4][PATH_MAX];
    int nd = 0;
    const char *env = getenv("MOSHID_PLUGIN_DIR");
    if (env && env[0]) snprintf(dirs[nd++], PATH_MAX, "%s", env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        snprintf(dirs[nd++], PATH_MAX, "%s", dir);
        /* installed as PREFIX/bin/moshid: PREFIX/lib/moshid (make install) */
        size_t dl = strlen(dir);
        if (dl >= 4 && strcmp(dir + dl - 4, "/bin") == 0)
            snprintf(dirs[nd++], PATH_MAX, "%.*s/lib/moshid", (int)(dl - 4), dir);
    }
    snprintf(dirs[nd++], PATH_MAX, "%s", MOSHID_PLUGIN_LIBDIR);
    char why[MS_ERR_MSG_MAX] = "";
    for (int i = 0; i < nd; i++) {
        char path[PATH_MAX + 160];
        snprintf(path, sizeof path, "%s/%s", dirs[i], file);
        if (access(path, F_OK) != 0) continue;
        const moshid_plugin *p = try_path(path, why, sizeof why);
        if (p) return p;
    }
    if (!why[0]) snprintf(why, sizeof why, "%s not found (built without nvcc?)", file);
    ms_err_set(err, MS_ERR_NOTFOUND, "backend %s unavailable: %s", name, why);
    return NULL;
}
