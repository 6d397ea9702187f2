# engine/lm.mk - the Moshi LM on the CPU: config, weights, kernels, sampling,
# LMGen bookkeeping, the backend interface and its CPU table, moshi-run.
ENGINE_SRCS += engine/lm_config.c engine/lm.c engine/kern_cpu.c engine/kern_pool.c engine/samp.c \
	engine/lmgen.c engine/backend.c engine/cpu_backend.c

# The tokenizer (engine/spm.h, another area) is optional for this fragment:
# moshi-run prints text pieces only when it is there.
ifneq ($(wildcard engine/spm.h),)
EXTRA_CFLAGS_engine_cli_ += -DMOSHID_HAVE_SPM
OPTIONAL_LINES += "✓ moshi-run: text pieces (engine/spm.h)"
else
OPTIONAL_LINES += "✗ moshi-run: no text pieces (engine/spm.h not present in this tree)"
endif

# rebuild when engine/spm.h appears (merge), not only when it changes
$(BUILD)/obj/engine/cli/moshi_run.o $(BUILD)/tests/check_lm_run: $(wildcard engine/spm.h)

PROGRAMS += $(BUILD)/moshi-run
$(BUILD)/moshi-run: $(BUILD)/obj/engine/cli/moshi_run.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

CHECK_SUITES += lm samp
CHECK_samp_DEPS = $(LIBENGINE)
CHECK_SUITES += lmgen
CHECK_lmgen_DEPS = $(LIBENGINE)
# drives build/moshi-run (built by make test before the suites run)
CHECK_SUITES += lm_run
CHECK_lm_run_DEPS = $(LIBENGINE)
ifneq ($(wildcard engine/spm.h),)
CHECK_lm_run_CFLAGS = -DMOSHID_HAVE_SPM
endif
CHECK_lm_DEPS = $(LIBENGINE)

# Benchmarks (make bench): matvec bandwidth vs read references, one 7B layer.
$(BUILD)/bench_lm: tests/bench/bench_lm.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench_lm
BENCHES += '$(BUILD)/bench_lm'

# make bench-7b (outside CI): a 7B-shaped bf16 checkpoint from a seed
# (15 GB in BENCH_7B_DIR), then load time, resident memory and one step.
BENCH_7B_DIR ?= $(BUILD)/bench-7b
$(BUILD)/bench_7b: tests/bench/bench_lm_7b.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
bench-7b: $(BUILD)/bench_7b
	$(Q)$(BUILD)/bench_7b $(BENCH_7B_DIR)
