# tests/gpu/bench.mk - the LM benchmark of the CUDA backend and the device
# check's dry run (issue 12, items 7-8).
#
#   $(BUILD)/lm-bench       tests/gpu/lm_bench.c against the toolkit (with
#                           nvcc): loads libmoshid-cuda.so beside it, steps
#                           the backend at the 7B shape with random weights;
#                           part of `make engine-only` (what the device check
#                           builds on a GPU machine)
#   $(BUILD)/lm-bench-emu   the same source on the CUDA emulator, the
#                           plugin's objects linked in (the emulator has no
#                           loadable plugin): the dry run's `--shape tiny`
#                           (and `--shape tiny --e2e`)
#   tests/gpu/mimi_rand.c   linked into both: the random-weight Mimi
#                           checkpoint `lm-bench --e2e` writes (no CUDA in it)
#   make fetch-wheels       (MOSHID_DEPS_OK=1; or bash tests/gpu/fetch_wheels.sh)
#                           tests/gpu/wheels/: the official moshi wheel and
#                           the pure-Python wheels it imports, for
#                           tests/gpu/bench_official.py on a machine with no
#                           package registry (needs PyPI here; run it before
#                           the device check, and carry the folder)
#   tests/cli/device_check_dry.sh   `device_check.sh --dry-run` in `make test`
#
# lm-bench links its own copy of the memory planner (cuda/cu_plan.c, in the
# engine core archive; the plugin's copy is hidden by cuda/plugin.map) to say
# how many slots fit beside what the backend accepts; without the file it
# builds and says "no plan".

LM_BENCH := $(BUILD)/lm-bench
LMB_PLAN_SRC := $(wildcard cuda/cu_plan.c)
LMB_DEFS := -DLMB_HAVE_PLAN=$(if $(LMB_PLAN_SRC),1,0)

ifneq ($(CU_NVCC),)
# (cu_plan.c's object is linked from the archive, or here when no fragment
# puts it there)
LMB_OBJS := $(BUILD)/obj/tests/gpu/lm_bench.o $(BUILD)/obj/tests/gpu/gpu_util.o $(BUILD)/obj/tests/gpu/mimi_rand.o \
	$(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(ENGINE_SRCS),$(LMB_PLAN_SRC)))
$(BUILD)/obj/tests/gpu/lm_bench.o: CPPFLAGS_ALL += $(LMB_DEFS)
# (the plugin is dlopened, not linked: -ldl for engine/base/plugin.c)
$(LM_BENCH): $(LMB_OBJS) $(LIBENGINE)
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) --cudart static -o $@ $^ -lm -ldl -lpthread
engine-only-build: $(LM_BENCH)
EXTRA_ALL += $(LM_BENCH)
endif

fetch-wheels:
	$(Q)bash tests/gpu/fetch_wheels.sh
.PHONY: fetch-wheels

ifeq ($(MOSHID_ENGINE_ONLY),)
# The dry run: every stage of device_check.sh on the CPU, tiny shapes, the
# emulator builds (it skips, 77, where they are not built: sanitizer builds).
TEST_SCRIPTS += tests/cli/device_check_dry.sh

ifneq ($(SAN),1)
ifneq ($(EMU_OUT),)
LMB_EMU := $(BUILD)/lm-bench-emu
# Every host C file of the plugin (cu_plugin.c, the backend table) that is
# not in the engine core archive, compiled against the emulator's headers by
# emu.mk's rule (as backend-test-emu's cu_backend.o).
LMB_EMU_PLUGIN_OBJS := $(patsubst %.c,$(EMU_OUT)/host/%.o,$(filter-out $(ENGINE_SRCS),$(wildcard cuda/*.c)))
$(EMU_OUT)/lmb/tests/gpu/lm_bench.o: tests/gpu/lm_bench.c
	@mkdir -p $(@D)
	@echo "  EMUCC   $<"
	$(Q)$(CC) $(EMU_CPPFLAGS) $(EMU_CFLAGS) $(LMB_DEFS) -DLMB_LINKED_PLUGIN -c $< -o $@
$(LMB_EMU): $(EMU_OUT)/lmb/tests/gpu/lm_bench.o $(EMU_OUT)/tests/gpu/gpu_util.o $(EMU_OUT)/tests/gpu/mimi_rand.o \
		$(LMB_EMU_PLUGIN_OBJS) \
		$(EMU_KERNEL_OBJS) $(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl -lpthread
test test-unit: $(LMB_EMU)
endif
endif
endif
