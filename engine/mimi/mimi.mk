# engine/mimi/mimi.mk - the Mimi codec (engine core: C compiler only), its
# tests, the benchmark and the real-dimension parity check.
#
#   make parity-big   real-dimension random-weight parity (needs /work/fixvenv
#                     or FIXVENV=...: torch + moshi; about 400 MB in build/)
ENGINE_SRCS += engine/mimi/mimi_config.c engine/mimi/mimi_model.c engine/mimi/mimi_gemm.c \
               engine/mimi/mimi_layers.c engine/mimi/mimi.c

CHECK_SUITES += mimi mimi_config
CHECK_mimi_config_DEPS = $(LIBENGINE)
CHECK_mimi_DEPS = $(LIBENGINE)
TEST_SCRIPTS += tests/check_mimi_manifest.sh tests/check_mimi_codec.sh

# Benchmark: real dimensions, random weights, one thread; OpenBLAS sgemm as
# the ceiling measured in the same run.
$(BUILD)/bench/bench_mimi: tests/bench/bench_mimi.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(call pc_cflags,openblas) $< $(LIBENGINE) -o $@ \
		$(LDFLAGS_ALL) $(call pc_libs,openblas) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench/bench_mimi
BENCHES += $(BUILD)/bench/bench_mimi

FIXVENV ?= /work/fixvenv
parity-big: $(BUILD)/tests/check_mimi
	$(Q)test -x $(FIXVENV)/bin/python || { echo "parity-big: needs FIXVENV=<venv with tests/fixtures/requirements-fixtures.txt>"; exit 2; }
	$(Q)mkdir -p $(BUILD)/parity-big
	$(Q)$(FIXVENV)/bin/python tests/fixtures/gen_mimi.py --big --out $(BUILD)/parity-big
	$(Q)MIMI_FIXTURES=$(BUILD)/parity-big MIMI_MODELS=big CK_RUN_CASE=parity CK_TIMEOUT_MULTIPLIER=30 $(BUILD)/tests/check_mimi
