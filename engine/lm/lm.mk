# engine/lm/lm.mk - the Moshi LM, independent of any backend: config and
# weights, sampling, the tokenizer, Kyutai's LMGen and PersonaPlex's step
# (host bookkeeping shared by every backend), the backend interface and its
# dispatcher, the frame step (codec + LM + codec) over it.
ENGINE_SRCS += engine/lm/lm_config.c engine/lm/lm.c engine/lm/samp.c engine/lm/spm.c \
	engine/lm/lmgen.c engine/lm/lmgen_pp.c engine/lm/backend.c engine/lm/frame.c

# The SentencePiece encoder (text -> ids): a C++ shim over Debian's
# libsentencepiece, in the I/O archive so that the engine core stays C only.
# A program that calls spm_encode links $(LIBENGINE_IO) $(LIBENGINE) and
# $(SPM_ENC_LIBS) (the trainer library the .pc file also names is left out).
ENGINE_IO_SRCS += engine/lm/spm_enc.cc
$(BUILD)/obj/engine/lm/spm_enc.o: CPPFLAGS_ALL += $(call pc_cflags,sentencepiece)
SPM_ENC_LIBS = $(filter-out -lsentencepiece_train,$(call pc_libs,sentencepiece)) -lstdc++

CHECK_SUITES += lm samp lmgen spm
CHECK_lm_DEPS = $(LIBENGINE)
CHECK_samp_DEPS = $(LIBENGINE)
CHECK_lmgen_DEPS = $(LIBENGINE)
CHECK_spm_DEPS = $(LIBENGINE_IO) $(LIBENGINE)
CHECK_spm_LIBS = $(SPM_ENC_LIBS)

# make bench: the frame step of the demo model split into its parts, and
# synchronous against pipelined.
$(BUILD)/bench_frame: tests/bench/bench_frame.c $(LIBENGINE) $(BUILD)/demo/.ok
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench_frame
BENCHES += '$(BUILD)/bench_frame'

# check_lmgen's frame-step tests run on the demo model (codec + Kyutai LM)
$(BUILD)/tests/check_lmgen: $(BUILD)/demo/.ok

# the 8-bit schemes (issue 26): quantizers, int8 kernels, parity with the
# official package on fake-quantized weights and K/V (tests/fixtures/lm_q8)
CHECK_SUITES += lm_q8
CHECK_lm_q8_DEPS = $(LIBENGINE)

# The frame step: the dispatcher's checks, the LMGen lag, a slot reset
# replayed, no allocation in steady frames (the allocator wrapped to count).
CHECK_SUITES += frame
CHECK_frame_DEPS = $(LIBENGINE)
CHECK_frame_LIBS = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign
