# tests/gpu/emu/emu.mk - the CUDA emulator: every kernel file of the plugin
# ($(CU_SRCS)) compiled for the host and run one fiber per GPU thread, so
# that engine-test's cases run in `make test` without a device, and the
# emulator's own detectors are proven by deliberately faulty kernels
# (docs/cuda.md, "The emulator"). Needs a C and a C++ compiler, no CUDA
# toolkit.
#
#   $(BUILD)/engine-test-emu   tests/gpu/engine_test.c on the emulator (the
#                              same source as engine-test, the other executor)
#   $(BUILD)/backend-test-emu  tests/gpu/backend_test.c on the emulator: the
#                              CUDA backend table (cuda/cu_backend.c, compiled
#                              against the emulator's runtime and cuBLAS)
#                              against the CPU backend
#   $(BUILD)/emu-test          the detectors against faulty kernels, the
#                              emulated semantics, graphs, asynchronous
#                              streams and copies, the cuBLAS stand-in
#   make test-emu              build both and run them
#   make gpu-model             the H200 performance model of the LM step
#                              (tests/gpu/gpu_model.c; predictions, docs/cuda.md)
#
# Kernel files go through cu2emu (launch syntax, __shared__), then the C++
# compiler with emu_device.h force-included and -fsanitize=kernel-address in
# call mode: every load and store calls emu_mem.c's hooks (no sanitizer
# runtime is linked). Left out of sanitizer builds (fibers and ASan do not
# mix; the hooks would clash).

ifneq ($(SAN),1)
EMU_DIR := tests/gpu/emu
EMU_OUT := $(BUILD)/emu
EMU_CU2EMU := $(EMU_OUT)/cu2emu
EMU_RT_OBJS := $(patsubst %,$(EMU_OUT)/$(EMU_DIR)/%.o,emu_fiber emu_mem emu_race emu_rt emu_stream emu_blas emu_traffic)
EMU_KERNEL_OBJS := $(CU_SRCS:%.cu=$(EMU_OUT)/%.o)
EMU_TEST := $(BUILD)/emu-test
EMU_ENGINE_TEST := $(BUILD)/engine-test-emu
# engine-bench against the emulator's headers: built (the shim must cover
# its API: events, cuBLAS), never run (its shapes are for a GPU).
EMU_BENCH := $(EMU_OUT)/engine-bench-emu
EMU_BACKEND_TEST := $(BUILD)/backend-test-emu
EMU_MIMI_TEST := $(BUILD)/mimi-test-emu
EMU_BINS := $(EMU_TEST) $(EMU_ENGINE_TEST) $(EMU_BENCH) $(EMU_BACKEND_TEST) $(EMU_MIMI_TEST)

# The toolkit's headers are replaced by the emulator's (include/), first.
EMU_CPPFLAGS := -D_GNU_SOURCE -I$(EMU_DIR)/include -I$(EMU_DIR) $(ENGINE_INC) -Icuda -Itests/gpu
EMU_CFLAGS := $(CSTD) $(OPT) $(ARCH) -g $(WARN) -MMD -MP
# The runtime switches fibers with _setjmp/_longjmp, which _FORTIFY_SOURCE's
# longjmp check refuses between stacks.
EMU_RT_CFLAGS := $(EMU_CFLAGS) -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0
EMU_HOOKS := -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
	--param asan-stack=0 --param asan-globals=0 -fno-sanitize-address-use-after-scope
EMU_KFLAGS := -std=gnu++17 $(OPT) $(ARCH) -g -fno-exceptions -fno-rtti $(WARN) -Wno-unknown-pragmas \
	-MMD -MP -D__CUDACC__ -include emu_device.h $(EMU_HOOKS)

$(EMU_CU2EMU): $(EMU_DIR)/cu2emu.c
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CSTD) -O2 -g $(WARN) $< -o $@

# .cu -> .cc (kept, for reading what the compiler saw) -> .o
.PRECIOUS: $(EMU_OUT)/%.cc
$(EMU_OUT)/%.cc: %.cu $(EMU_CU2EMU)
	@mkdir -p $(@D)
	@echo "  CU2EMU  $<"
	$(Q)$(EMU_CU2EMU) $< $@
$(EMU_OUT)/%.o: $(EMU_OUT)/%.cc $(EMU_DIR)/emu_device.h
	@echo "  EMUCXX  $<"
	$(Q)$(CXX) $(EMU_CPPFLAGS) $(EMU_KFLAGS) -c $< -o $@
$(EMU_OUT)/$(EMU_DIR)/%.o: $(EMU_DIR)/%.c
	@mkdir -p $(@D)
	@echo "  EMUCC   $<"
	$(Q)$(CC) $(EMU_CPPFLAGS) $(EMU_RT_CFLAGS) -c $< -o $@
# Host code of the plugin (the backend table) against the emulator.
$(EMU_OUT)/host/cuda/%.o: cuda/%.c
	@mkdir -p $(@D)
	@echo "  EMUCC   $<"
	$(Q)$(CC) $(EMU_CPPFLAGS) $(EMU_CFLAGS) -c $< -o $@
$(EMU_OUT)/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(@D)
	@echo "  EMUCC   $<"
	$(Q)$(CC) $(EMU_CPPFLAGS) $(EMU_CFLAGS) -c $< -o $@

# -rdynamic: faults name the kernel function a code address lies in.
$(EMU_ENGINE_TEST): $(EMU_OUT)/tests/gpu/engine_test.o $(EMU_OUT)/tests/gpu/gpu_util.o $(EMU_KERNEL_OBJS) \
		$(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl
$(EMU_BENCH): $(EMU_OUT)/tests/gpu/engine_bench.o $(EMU_OUT)/tests/gpu/gpu_util.o $(EMU_KERNEL_OBJS) \
		$(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl
$(EMU_BACKEND_TEST): $(EMU_OUT)/tests/gpu/backend_test.o $(EMU_OUT)/tests/gpu/gpu_util.o \
		$(EMU_OUT)/host/cuda/cu_backend.o $(EMU_OUT)/host/cuda/cu_mimi.o $(EMU_KERNEL_OBJS) $(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl -lpthread
$(EMU_MIMI_TEST): $(EMU_OUT)/tests/gpu/mimi_test.o $(EMU_OUT)/tests/gpu/gpu_util.o \
		$(EMU_OUT)/host/cuda/cu_backend.o $(EMU_OUT)/host/cuda/cu_mimi.o $(EMU_KERNEL_OBJS) $(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl -lpthread
$(EMU_TEST): $(EMU_OUT)/$(EMU_DIR)/emu_test.o $(EMU_OUT)/$(EMU_DIR)/emu_faults.o $(EMU_OUT)/tests/gpu/gpu_util.o \
		$(EMU_KERNEL_OBJS) $(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl -lpthread

# The H200 performance model of the LM step (tests/gpu/gpu_model.c): the
# CUDA backend's own steps (cuda/cu_backend.c) at the 7B's geometry with the
# emulator's traffic accounting; prints per-kernel lines and the predicted
# step times.
EMU_MODEL := $(BUILD)/gpu-model
$(EMU_MODEL): $(EMU_OUT)/tests/gpu/gpu_model.o $(EMU_OUT)/host/cuda/cu_backend.o $(EMU_OUT)/host/cuda/cu_mimi.o \
		$(EMU_KERNEL_OBJS) $(EMU_RT_OBJS) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CXX) -rdynamic -o $@ $^ -lm -ldl -lpthread
gpu-model: $(EMU_MODEL)
	$(Q)$(EMU_MODEL)
.PHONY: gpu-model

EMU_SCRIPTS := $(EMU_DIR)/emu_test.sh $(EMU_DIR)/engine_test_emu.sh $(EMU_DIR)/backend_test_emu.sh \
	$(EMU_DIR)/mimi_test_emu.sh
TEST_SCRIPTS += $(EMU_SCRIPTS)
test test-unit: $(EMU_BINS) $(BUILD)/moshid-mkmodel

# backend-test's codec case writes its Mimi model with moshid-mkmodel.
test-emu: $(EMU_BINS) $(BUILD)/moshid-mkmodel
	$(Q)for s in $(EMU_SCRIPTS); do BUILD=$(BUILD) bash $$s || exit 1; done

-include $(shell find $(EMU_OUT) -name '*.d' 2>/dev/null)
else
test-emu gpu-model:
	@echo "the CUDA emulator is not built with sanitizers (SAN=1)"
endif
.PHONY: test-emu gpu-model
