# cuda/plan.mk - the CUDA backend's memory planner (cuda/cu_plan.c: plain C,
# in the engine core so that the plugin, the daemon and moshid-plan share
# one copy), its Check suite, and the fake CUDA plugins the backend
# selection tests load (tests/gpu/fake_plugin.c).
ENGINE_SRCS += cuda/cu_plan.c

# moshid-plan: the memory plan from the command line (cuda/cli/plan.c).
PROGRAMS += $(BUILD)/moshid-plan
$(BUILD)/moshid-plan: $(BUILD)/obj/cuda/cli/plan.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

CHECK_SUITES += plan
CHECK_plan_DEPS = $(LIBENGINE)

# Fake libmoshid-cuda.so plugins, each in its own directory (the tests point
# MOSHID_PLUGIN_DIR at one): "fakecuda" carries a backend table that runs the
# CPU backend (its copy of the engine linked in; only the entry point is
# exported, as for the real plugin) and misbehaves on request (environment
# variables, tests/gpu/fake_plugin.c); "fakecuda-notable" carries no table.
FAKE_CUDA_PLUGINS := $(BUILD)/tests/plugins/fakecuda/libmoshid-cuda.so \
	$(BUILD)/tests/plugins/fakecuda-notable/libmoshid-cuda.so
$(BUILD)/tests/plugins/fakecuda/libmoshid-cuda.so: FAKE_CUDA_DEFS := -DFAKE_BACKEND
$(BUILD)/tests/plugins/fakecuda-notable/libmoshid-cuda.so: FAKE_CUDA_DEFS := -DFAKE_NOTABLE
$(FAKE_CUDA_PLUGINS): tests/gpu/fake_plugin.c engine/base/plugin.h engine/lm/backend.h $(LIBENGINE) cuda/plugin.map
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -DFAKE_ABI=MOSHID_PLUGIN_ABI $(FAKE_CUDA_DEFS) -shared $< \
		$(LIBENGINE) -Wl,--version-script=cuda/plugin.map -Wl,--exclude-libs,ALL -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
# built with everything, so that the integration tests find them
EXTRA_ALL += $(FAKE_CUDA_PLUGINS)
