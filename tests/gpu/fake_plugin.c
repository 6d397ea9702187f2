/* fake_plugin.c - stand-in plugins for the loader's and the daemon's tests.
 *
 * Built with -DFAKE_ABI=N it reports that ABI number (check_plugin: a wrong
 * one); with -DFAKE_NOSYM it exports no entry point at all. With
 * -DFAKE_ABI=MOSHID_PLUGIN_ABI it is a well-formed plugin named "cuda" whose
 * probe reports MOSHID_FAKE_DEVICES devices (default 1) and that carries
 * no backend table; adding -DFAKE_BACKEND gives it one (cuda/plan.mk):
 * the CPU backend linked into the plugin, renamed "fakecuda", so that the
 * daemon's choice of a plugin backend is tested without a GPU. On request
 * (environment variables, read when the table is opened) it misbehaves as
 * a GPU can:
 *   MOSHID_FAKE_OPEN_FAIL=1       open fails: MS_ERR_NOMEM, "not enough
 *                                 device memory" (as the CUDA backend's
 *                                 open does when the plan does not fit)
 *   MOSHID_FAKE_STEP_FAIL_AFTER=N the LM steps after the first N fail with
 *                                 MS_ERR_DEVICE, every one of them (sticky)
 *   MOSHID_FAKE_RESET_FAIL=1      every slot reset fails with MS_ERR_DEVICE
 *                                 (a device error seen by a session's start)
 * Its open writes the GPU choices it was handed (lm_backend_opts.gpu, the
 * cuda.* options, with the environment's overrides: lm_gpu_opts_get) to
 * stderr, one "fakecuda_open gpu: ..." line, for the daemon's tests.
 * Test code only: never installed.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "plugin.h"

#ifdef FAKE_NOSYM
int moshid_fake_plugin_placeholder(void);
int moshid_fake_plugin_placeholder(void) {
    return 0;
}
#else
/* an environment variable as a count (absent or malformed: dflt) */
static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    if (!v || !v[0]) return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    return *end ? dflt : n;
}

static int fake_probe(char *what, size_t len) {
    long n = env_long("MOSHID_FAKE_DEVICES", 1);
    if (n <= 0) snprintf(what, len, "fake: no CUDA device (MOSHID_FAKE_DEVICES=%ld)", n);
    else snprintf(what, len, "fake: %ld device(s), 0: Fake GPU sm_90 80.0 GiB", n);
    return n > 0 ? (int)n : 0;
}

#ifdef FAKE_BACKEND
#include "backend.h"

/* The engine thread is the only caller (backend.h), so plain statics do. */
static long step_fail_after = -1;   /* < 0: never */
static long steps_done;
static int reset_fail;

static int fake_open(void **ctx, const char *model_dir, const lm_backend_opts *opts, ms_error *err) {
    if (env_long("MOSHID_FAKE_OPEN_FAIL", 0))
        return ms_err_set(err, MS_ERR_NOMEM, "fakecuda: not enough device memory for %d slots (MOSHID_FAKE_OPEN_FAIL)",
                          opts->max_slots);
    lm_gpu_opts go;
    lm_gpu_opts_get(opts->gpu, &go);
    fprintf(stderr, "fakecuda_open gpu: codec_host=%d gemm_min_rows=%d graphs_off=%d codec_graphs_off=%d\n",
            go.codec_host, go.gemm_min_rows, go.graphs_off, go.codec_graphs_off);
    step_fail_after = env_long("MOSHID_FAKE_STEP_FAIL_AFTER", -1);
    reset_fail = env_long("MOSHID_FAKE_RESET_FAIL", 0) != 0;
    steps_done = 0;
    return lm_cpu_backend.open(ctx, model_dir, opts, err);
}

static int fake_step(void *ctx, lm_step_slot *slots, int n, ms_error *err) {
    if (step_fail_after >= 0 && steps_done >= step_fail_after)
        return ms_err_set(err, MS_ERR_DEVICE,
                          "fakecuda: cudaGraphLaunch failed at fake_plugin.c: cudaErrorIllegalAddress "
                          "(an illegal memory access was encountered) after %ld steps",
                          steps_done);
    steps_done++;
    return lm_cpu_backend.step(ctx, slots, n, err);
}

static int fake_reset_slot(void *ctx, int slot, ms_error *err) {
    if (reset_fail)
        return ms_err_set(err, MS_ERR_DEVICE, "fakecuda: cudaMemsetAsync failed at fake_plugin.c: "
                                              "cudaErrorLaunchFailure (MOSHID_FAKE_RESET_FAIL)");
    return lm_cpu_backend.reset_slot(ctx, slot, err);
}

/* Frames are stepped by the dispatcher (lm_frame_submit runs the frame
 * stages itself, through step), so every LM step goes through fake_step:
 * no frame entries, no pipeline. */
static int fake_stats(void *ctx, lm_backend_stats *st) {
    int rc = lm_cpu_backend.stats(ctx, st);
    st->pipeline = 0;
    return rc;
}

static lm_backend_ops fake_ops;

static const void *fake_table(void) {
    fake_ops = lm_cpu_backend;
    fake_ops.name = "fakecuda";
    fake_ops.open = fake_open;
    fake_ops.step = fake_step;
    fake_ops.reset_slot = fake_reset_slot;
    fake_ops.frame_stages = NULL;
    fake_ops.frame_submit = NULL;
    fake_ops.frame_wait = NULL;
    fake_ops.stats = fake_stats;
    return &fake_ops;
}
#endif

static moshid_plugin fake = {
    .abi = FAKE_ABI,
    .name = "fake",
    .build = "fake",
    .probe = fake_probe,
    .backend = NULL,
};

const moshid_plugin *moshid_plugin_entry(void);
const moshid_plugin *moshid_plugin_entry(void) {
#ifdef FAKE_BACKEND
    fake.name = "cuda";
    fake.build = "fake build with a backend table (CPU backend inside)";
    fake.backend = fake_table();
#elif defined(FAKE_NOTABLE)
    fake.name = "cuda";
    fake.build = "fake build without a backend table";
#endif
    return &fake;
}
#endif
