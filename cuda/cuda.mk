# cuda/cuda.mk - the CUDA backend plugin and the engine-only test and
# benchmark runners.
#
#   $(BUILD)/libmoshid-cuda.so   dlopened by moshid (engine/plugin.h) when the
#                                CUDA backend is asked for; cudart is linked
#                                statically, so the plugin needs only the
#                                driver (libcuda.so.1) at run time
#   $(BUILD)/engine-test         each CUDA kernel against its C twin, the
#                                CPU backend's own kernel or sampler (kern_*,
#                                samp_* in $(LIBENGINE))
#   $(BUILD)/engine-bench        matvec bandwidth vs cudaMemcpy D2D, sampler time
#   $(BUILD)/backend-test        the CUDA backend table against the CPU backend
#                                on tiny models (tests/gpu/backend_test.c)
#   make cu-ptxas                ptxas -v resource report of the kernels
#                                (registers, spills) -> docs/cuda-ptxas.txt
#   tests/gpu/emu/emu.mk         the same kernels and engine-test's cases on
#                                the host emulator, in `make test` (needs no
#                                toolkit: built whether or not nvcc exists)
#
# nvcc: NVCC= as given, else $(CUDA_HOME)/bin/nvcc when CUDA_HOME is set,
# else the one on PATH, else /usr/local/cuda/bin/nvcc; `make CUDA=0` turns
# the plugin off. The toolkit (CU_HOME: headers, libraries) is where nvcc
# really lives, symlinks resolved; `make cu-config` prints what was found.
# Device code: SASS for sm_80 (A100), sm_89 (L4, L40S), sm_90 (H100, H200)
# plus compute_90 PTX that newer drivers JIT-compile.

# Sanitizer builds (make asan) leave the plugin out: nvcc's objects and the
# static cudart are not instrumented.
CUDA ?= 1
ifneq ($(CUDA),1)
NVCC :=
CU_OFF_WHY := disabled: CUDA=$(CUDA)
else ifeq ($(SAN),1)
NVCC :=
CU_OFF_WHY := not built with sanitizers
else
NVCC ?= $(shell { test -n "$(CUDA_HOME)" && test -x "$(CUDA_HOME)/bin/nvcc" && echo "$(CUDA_HOME)/bin/nvcc"; } || \
	command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CU_OFF_WHY := nvcc not found
endif

# CU_HOME: the toolkit nvcc belongs to, from nvcc's real path, so that a
# symlinked nvcc (/usr/bin/nvcc -> /usr/local/cuda-13.0/bin/nvcc) or a bare
# NVCC=nvcc finds its own headers; nvcc's own answer (TOP in -dryrun) where
# that directory has no headers (a distribution's wrapper script). CU_NVCC:
# the nvcc the rules run, empty when there is no usable toolkit.
CU_NVCC :=
ifneq ($(NVCC),)
CU_NVCC_REAL := $(realpath $(shell command -v $(NVCC) 2>/dev/null))
CU_HOME := $(patsubst %/bin/,%,$(dir $(CU_NVCC_REAL)))
ifeq ($(wildcard $(CU_HOME)/include/cuda_runtime_api.h),)
CU_HOME := $(realpath $(shell $(NVCC) -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$$ TOP=//p'))
endif
ifeq ($(CU_NVCC_REAL),)
CU_OFF_WHY := nvcc not found ($(NVCC))
else ifeq ($(wildcard $(CU_HOME)/include/cuda_runtime_api.h),)
CU_OFF_WHY := nvcc at $(CU_NVCC_REAL) but no cuda_runtime_api.h under $(or $(CU_HOME),its toolkit)/include
else
CU_NVCC := $(CU_NVCC_REAL)
endif
endif

cu-config:
	@echo "NVCC=$(NVCC)"
	@echo "CU_NVCC=$(CU_NVCC)"
	@echo "CU_HOME=$(CU_HOME)"
	@echo "NVCC_VERSION=$(NVCC_VERSION)"
	@echo "CU_LIBDIR=$(CU_LIBDIR)"
	@echo "NVCCFLAGS=$(NVCCFLAGS)"
	@printf 'CU_LINE=%b\n' $(CU_LINE)
.PHONY: cu-config

# The kernel files: the plugin's, and the emulator's (tests/gpu/emu/emu.mk),
# which runs each of them on the host without a device.
CU_SRCS := cuda/cu_matvec.cu cuda/cu_rmsnorm.cu cuda/cu_sample.cu cuda/cu_lm.cu cuda/cu_mimi_kern.cu

CU_PLUGIN := $(BUILD)/libmoshid-cuda.so
CU_TEST := $(BUILD)/engine-test
CU_BENCH := $(BUILD)/engine-bench
CU_BACKEND_TEST := $(BUILD)/backend-test
CU_MIMI_TEST := $(BUILD)/mimi-test

ifneq ($(CU_NVCC),)
NVCC_VERSION := $(shell $(CU_NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
CU_ARCHS := sm_80 sm_89 sm_90
CU_PTX := compute_90
CU_GENCODE := $(foreach a,$(CU_ARCHS),-gencode arch=compute_$(a:sm_%=%),code=$(a)) \
	-gencode arch=$(CU_PTX),code=$(CU_PTX)
CU_BUILD_STR := CUDA $(NVCC_VERSION); $(CU_ARCHS) + PTX $(CU_PTX); cudart static
# No --use_fast_math: the sampler relies on IEEE division and the library
# log to draw the same token as the C twin (docs/cuda.md).
NVCCFLAGS := -std=c++17 -O2 -lineinfo $(CU_GENCODE) -Werror all-warnings \
	-Xcompiler -fPIC,-Wall,-Wextra,-Werror -D_GNU_SOURCE $(ENGINE_INC) -Icuda
CU_LIBDIR := $(firstword $(wildcard $(CU_HOME)/lib64 $(CU_HOME)/lib))

# Kernels (nvcc), the plugin entry and the backend table (plain C against
# the runtime API and cuBLAS).
CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
CU_PLUGIN_OBJS := $(BUILD)/obj/cuda/cu_plugin.o $(BUILD)/obj/cuda/cu_backend.o $(BUILD)/obj/cuda/cu_mimi.o $(CU_OBJS)
# (-isystem: the toolkit's headers are not held to -Werror)
EXTRA_CFLAGS_cuda_ := -isystem $(CU_HOME)/include -DCU_BUILD_STR='"$(CU_BUILD_STR)"'
EXTRA_CFLAGS_tests_gpu_ := -isystem $(CU_HOME)/include -Itests/gpu
# The plugin carries its own copy of the engine parts it uses, linked from
# the engine core archive (built -fPIC): errors, logging, JSON, safetensors,
# the LM configuration and loader, the memory plan (cuda/cu_plan.c) and the
# CPU Mimi the codec entries run; the version script keeps them local.
# cuBLAS is a shared library of the toolkit, found through an rpath.
CU_BLAS_LIBS := -L$(CU_LIBDIR) -lcublas -Xlinker -rpath=$(CU_LIBDIR)

$(BUILD)/obj/cuda/%.o: cuda/%.cu
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	$(Q)$(CU_NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# Only moshid_plugin_entry is exported (cuda/plugin.map).
$(CU_PLUGIN): $(CU_PLUGIN_OBJS) $(LIBENGINE) cuda/plugin.map
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) -shared --cudart static -Xlinker --version-script=cuda/plugin.map \
		-Xlinker --exclude-libs,ALL -o $@ $(CU_PLUGIN_OBJS) $(LIBENGINE) $(CU_BLAS_LIBS) -lpthread -lm

# The runners link the kernels directly (no dlopen) and the engine core,
# which holds the C twins.

CU_TEST_OBJS := $(BUILD)/obj/tests/gpu/engine_test.o $(BUILD)/obj/tests/gpu/gpu_util.o
CU_BENCH_OBJS := $(BUILD)/obj/tests/gpu/engine_bench.o $(BUILD)/obj/tests/gpu/gpu_util.o

$(CU_TEST): $(CU_TEST_OBJS) $(CU_OBJS) $(LIBENGINE)
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) --cudart static -o $@ $^ -lm
$(CU_BENCH): $(CU_BENCH_OBJS) $(CU_OBJS) $(LIBENGINE)
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) --cudart static -o $@ $^ -L$(CU_LIBDIR) -lcublas -Xlinker -rpath=$(CU_LIBDIR) -lm

# backend-test links the backend table directly (no dlopen), beside the
# CPU backend it is compared with.
CU_BACKEND_TEST_OBJS := $(BUILD)/obj/tests/gpu/backend_test.o $(BUILD)/obj/tests/gpu/gpu_util.o \
	$(BUILD)/obj/cuda/cu_backend.o $(BUILD)/obj/cuda/cu_mimi.o
$(CU_BACKEND_TEST): $(CU_BACKEND_TEST_OBJS) $(CU_OBJS) $(LIBENGINE)
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) --cudart static -o $@ $^ $(CU_BLAS_LIBS) -lpthread -lm

# mimi-test: the device Mimi (cuda/cu_mimi.c) against the CPU codec on the
# committed tiny fixture (tests/gpu/mimi_test.c).
CU_MIMI_TEST_OBJS := $(BUILD)/obj/tests/gpu/mimi_test.o $(BUILD)/obj/tests/gpu/gpu_util.o \
	$(BUILD)/obj/cuda/cu_backend.o $(BUILD)/obj/cuda/cu_mimi.o
$(CU_MIMI_TEST): $(CU_MIMI_TEST_OBJS) $(CU_OBJS) $(LIBENGINE)
	@echo "  NVLD    $@"
	$(Q)$(CU_NVCC) --cudart static -o $@ $^ $(CU_BLAS_LIBS) -lpthread -lm

# The ptxas resource report of every kernel for each SASS target (registers,
# spills, shared memory), kept in docs/ (docs/cuda.md says how to read it).
CU_PTXAS_DOC := docs/cuda-ptxas.txt
cu-ptxas:
	$(Q){ echo "# ptxas -v of the CUDA kernels (make cu-ptxas; nvcc $(NVCC_VERSION); -O2, sm_80 sm_89 sm_90)"; \
	  echo "# Per kernel and target: its stack frame and spill stores/loads, then registers, barriers,"; \
	  echo "# shared memory (smem) and constant bank (cmem) use. Regenerate after changing a kernel."; \
	  for f in $(CU_SRCS); do for a in $(CU_ARCHS); do echo; echo "## $$f $$a"; \
	    $(CU_NVCC) -std=c++17 -O2 -gencode arch=compute_$${a#sm_},code=$$a -Xptxas -v -D_GNU_SOURCE \
	      $(ENGINE_INC) -Icuda -c $$f -o /dev/null 2>&1 | \
	      sed -e 's/^ptxas info *: //' -e 's/^ *//' | \
	      grep -E '^(Function properties for|Used [0-9]+ registers|[0-9]+ bytes stack frame)' | \
	      sed -e 's/^Function properties for /kernel /' | c++filt || exit 1; \
	    done; done; } > $(CU_PTXAS_DOC).tmp && mv $(CU_PTXAS_DOC).tmp $(CU_PTXAS_DOC)
	@echo "  wrote $(CU_PTXAS_DOC)"
.PHONY: cu-ptxas

CU_TARGETS := $(CU_PLUGIN) $(CU_TEST) $(CU_BENCH) $(CU_BACKEND_TEST) $(CU_MIMI_TEST)
CU_LINE := "✓ CUDA backend plugin (nvcc $(NVCC_VERSION) in $(CU_HOME), $(CU_ARCHS) + PTX)"
BENCHES += '$(CU_BENCH)'
BENCH_DEPS += $(CU_BENCH)
else
CU_TARGETS :=
CU_LINE := "✗ CUDA backend plugin ($(CU_OFF_WHY))"
endif

OPTIONAL_LINES += $(CU_LINE)
EXTRA_ALL += $(CU_TARGETS)

# make engine-only: the engine core (with the C twins) and (with nvcc) the
# plugin and its runners, with nothing but a C compiler and the CUDA toolkit.
engine-only-build: $(LIBENGINE) $(CU_TARGETS)
	@printf '%b\n' $(CU_LINE)
	$(if $(CU_TARGETS),@echo "  run: $(CU_TEST) && $(CU_BENCH)")

ifeq ($(MOSHID_ENGINE_ONLY),)
# make test: the plugin loader and the C twins against obvious references
# (tests/check_plugin.c; the CPU sampler against the kernel's logic replayed
# on the host is tests/check_samp.c), the kernels against the twins where
# a device exists (tests/gpu/engine_test.sh; skipped otherwise) and always
# on the emulator (emu.mk), and the toolkit lookup (tests/gpu/cuda_home.sh).
CHECK_SUITES += plugin
CHECK_plugin_DEPS = $(LIBENGINE)
CHECK_plugin_CFLAGS = -DCU_PLUGIN_BUILT=$(if $(CU_TARGETS),1,0)
# Broken plugins the loader must refuse: a wrong ABI number, no entry point.
FAKE_PLUGINS := $(BUILD)/tests/plugins/libmoshid-badabi.so $(BUILD)/tests/plugins/libmoshid-nosym.so
$(BUILD)/tests/plugins/libmoshid-badabi.so: FAKE_DEFS := -DFAKE_ABI=999
$(BUILD)/tests/plugins/libmoshid-nosym.so: FAKE_DEFS := -DFAKE_NOSYM
$(FAKE_PLUGINS): tests/gpu/fake_plugin.c engine/base/plugin.h
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(FAKE_DEFS) -shared $< -o $@
$(BUILD)/tests/check_plugin: $(if $(CU_TARGETS),$(CU_PLUGIN)) $(FAKE_PLUGINS)
TEST_SCRIPTS += tests/gpu/engine_test.sh tests/gpu/backend_test.sh tests/gpu/mimi_test.sh tests/gpu/cuda_home.sh
# The same kernels and engine-test's cases on the host emulator (no device).
include tests/gpu/emu/emu.mk
endif
