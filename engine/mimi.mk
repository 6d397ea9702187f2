# engine/mimi.mk - the Mimi codec (engine core: C compiler only), audio files
# (libsndfile + libsoxr, in the I/O archive), the mimi-codec program, tests,
# the benchmark and the real-dimension parity check.
#
#   make parity-big   real-dimension random-weight parity (needs /work/fixvenv
#                     or FIXVENV=...: torch + moshi; about 400 MB in build/)
ENGINE_SRCS += engine/mimi_config.c engine/mimi_model.c engine/mimi_gemm.c \
               engine/mimi_layers.c engine/mimi.c
ENGINE_IO_SRCS += engine/audio_file.c
# only the I/O objects see libsndfile/libsoxr (the engine core stays library-free)
$(ENGINE_IO_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/engine/cli/mimi_codec.o: CPPFLAGS_ALL += $(call pc_cflags,sndfile soxr)

AUDIO_LIBS = $(call pc_libs,sndfile soxr)

PROGRAMS += $(BUILD)/mimi-codec
$(BUILD)/mimi-codec: $(BUILD)/obj/engine/cli/mimi_codec.o $(LIBENGINE_IO) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(AUDIO_LIBS) $(LDLIBS_ALL)

CHECK_SUITES += mimi mimi_config audio_file
CHECK_mimi_config_DEPS = $(LIBENGINE)
CHECK_audio_file_DEPS = $(LIBENGINE_IO) $(LIBENGINE)
CHECK_audio_file_LIBS = $(AUDIO_LIBS)
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
