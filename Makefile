# moshid - top-level Makefile.
#
#   make            build everything (CUDA backend plugin too when nvcc exists)
#   make run        install what is missing, build, start the daemon on the demo model
#   make test       build and run every test (unit, parity, integration, fuzz smoke)
#   make asan       AddressSanitizer + UBSan build, unit and integration tests
#   make bench      benchmarks (results go to docs/benchmarks.md by hand)
#   make engine-only  engine core + CUDA backend with only a C compiler and the CUDA toolkit
#   make test-emu   the CUDA kernels on the host emulator (C and C++ compilers only)
#   make test-fresh make test in a fresh minimal Debian 12 root (root only;
#                   tests/tools/test_fresh.sh); make run-fresh: make run there
#   make gpu-model  the H200 performance model of the LM step, from the emulator (predictions)
#   make install    PREFIX=/usr/local DESTDIR=: binaries, plugin, units, man page, docs
#                   (systemd/systemd.mk)
#   make clean
#
# Each area declares its sources, programs and test suites in its own
# fragment (engine/*/*.mk, proto/proto.mk, daemon/daemon.mk, cuda/cuda.mk,
# systemd/systemd.mk, tests/tests.mk); this file holds the flags and the generic rules.
# Missing Debian packages are installed first (tests/deps.sh, list in
# tests/deps.txt), then the real work runs in a sub-make so that pkg-config
# sees the installed libraries.

SHELL := /bin/bash
.DEFAULT_GOAL := all
BUILD ?= build
V ?= 0
ifeq ($(V),1)
Q :=
else
Q := @
endif

# Targets that need the Debian packages; each first runs the dependency check.
DEP_GOALS := all run test test-unit test-integration asan bench bench-personas bench-7b fuzz parity-big demo-model config-doc bench-daemon parity-big-voice install test-browser soak fuzz-long hostile web-gen

ifeq ($(MOSHID_DEPS_OK),)
# ---- outer make: install what is missing, then re-enter ------------------
$(DEP_GOALS):
	$(Q)bash tests/deps.sh ensure $(if $(filter all install,$@),build,$(if $(filter run,$@),run,test))
	$(Q)$(MAKE) --no-print-directory MOSHID_DEPS_OK=1 $@

engine-only:
	$(Q)$(MAKE) --no-print-directory MOSHID_DEPS_OK=1 MOSHID_ENGINE_ONLY=1 BUILD=$(BUILD)/engine-only engine-only-build

test-emu gpu-model fetch-wheels test-fresh run-fresh:
	$(Q)$(MAKE) --no-print-directory MOSHID_DEPS_OK=1 $@

clean:
	rm -rf $(BUILD)

.PHONY: $(DEP_GOALS) engine-only test-emu gpu-model fetch-wheels test-fresh run-fresh clean
else
# ---- inner make: the real rules -----------------------------------------
CC ?= cc
# CXX (make's default g++) compiles the one C++ file of the engine I/O
# library, the SentencePiece encoder shim (engine/lm/spm_enc.cc).
# -march=native: each machine builds its own binaries (CI builds on the
# machine it tests on); override with ARCH= for a portable build.
ARCH ?= -march=native
OPT ?= -O2
CSTD := -std=gnu11
WARN := -Wall -Wextra -Werror -Wno-format-truncation -Wno-format-zero-length
# The engine's concept folders (engine/*/): each holds its public headers.
ENGINE_DIRS := base lm mimi cpu persona
ENGINE_INC := $(ENGINE_DIRS:%=-Iengine/%)
# The daemon's folders (daemon/*/, docs/architecture.md): each holds its headers.
DAEMON_DIRS := config net session persona service
DAEMON_INC := -Idaemon $(DAEMON_DIRS:%=-Idaemon/%)
CPPFLAGS_ALL := -D_GNU_SOURCE $(ENGINE_INC) -Iproto $(DAEMON_INC) -Icuda
CFLAGS_ALL := $(CSTD) $(OPT) $(ARCH) -g -fPIC -pthread $(WARN) -MMD -MP
LDFLAGS_ALL := -pthread
LDLIBS_ALL := -lm -ldl

SAN ?= 0
ifeq ($(SAN),1)
CFLAGS_ALL += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_ALL += -fsanitize=address,undefined
endif
# C++ (the shims over C++ libraries): the C flags, sanitizers included, with
# the C++ standard instead of the C one.
CXXSTD := -std=gnu++17
CXXFLAGS_ALL = $(CXXSTD) $(filter-out $(CSTD),$(CFLAGS_ALL))

# pkg-config helpers: pc_cflags / pc_libs, called with module names
pc_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pc_libs = $(shell pkg-config --libs $(1) 2>/dev/null)

# Every pkg-config module the build uses; tests/check_deps.sh checks that each
# is mapped to a Debian package in tests/deps.txt.
PKG_MODULES := libuv libwebsockets opus ogg check libcjson sndfile soxr openblas sentencepiece libebur128 libsystemd libssl libcrypto

# Archives the fragments link against (defined before they are included).
LIBENGINE := $(BUILD)/libengine.a
LIBENGINE_IO := $(BUILD)/libengine_io.a
LIBPROTO := $(BUILD)/libproto.a

# Accumulated by the fragments.
ENGINE_SRCS :=      # engine core: C compiler only (no external libraries)
ENGINE_IO_SRCS :=   # engine parts that need libraries (audio files; the SentencePiece encoder, C++)
PROTO_SRCS :=
DAEMON_SRCS :=
PROGRAMS :=         # $(BUILD)/<name> for each program
CHECK_SUITES :=     # tests/check_<suite>.c -> $(BUILD)/tests/check_<suite>
OPTIONAL_LINES :=   # lines printed by `make` about optional components
BENCHES :=          # commands run by `make bench`

include engine/base/base.mk
include engine/lm/lm.mk
include engine/mimi/mimi.mk
include engine/cpu/cpu.mk
include engine/persona/persona.mk
include engine/cli/cli.mk
-include proto/proto.mk
-include daemon/daemon.mk
-include tests/browser/browser.mk
-include cuda/cuda.mk
-include cuda/plan.mk
-include tests/gpu/bench.mk
-include tests/fuzz/fuzz.mk
-include tests/long.mk
include systemd/systemd.mk
include tests/tests.mk

ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(BUILD)/obj/%.o)
ENGINE_IO_OBJS := $(patsubst %,$(BUILD)/obj/%.o,$(basename $(ENGINE_IO_SRCS)))
PROTO_OBJS := $(PROTO_SRCS:%.c=$(BUILD)/obj/%.o)
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(BUILD)/obj/%.o)


$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(EXTRA_CFLAGS_$(subst /,_,$(dir $<))) -c $< -o $@

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(@D)
	@echo "  CXX     $<"
	$(Q)$(CXX) $(CPPFLAGS_ALL) $(CXXFLAGS_ALL) -c $< -o $@

$(LIBENGINE): $(ENGINE_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBENGINE_IO): $(ENGINE_IO_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $(if $^,$^,)
$(LIBPROTO): $(PROTO_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

all: $(PROGRAMS) $(EXTRA_ALL)
	@printf '%b\n' $(OPTIONAL_LINES)

.PHONY: all run test test-unit test-integration asan bench bench-7b fuzz parity-big demo-model engine-only-build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
endif
