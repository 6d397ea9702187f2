# engine/cpu/cpu.mk - the CPU reference backend: its kernels (the C twins of
# the CUDA kernels), the thread pool, and the backend table.
ENGINE_SRCS += engine/cpu/kern_cpu.c engine/cpu/kern_q8.c engine/cpu/kern_pool.c engine/cpu/cpu_backend.c

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

# make bench: int8 against bf16 side by side (matvec on one matrix; a
# 7B-shaped layer with int8 weights and K/V against bf16 + float32 K/V)
$(BUILD)/bench_q8: tests/bench/bench_q8.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench_q8
BENCHES += '$(BUILD)/bench_q8'

# The CPU backend through the dispatcher: slot and codec resets, statistics.
CHECK_SUITES += cpu_backend
CHECK_cpu_backend_DEPS = $(LIBENGINE)
