# engine/lm/lm.mk - the Moshi LM, independent of any backend: config and
# weights, sampling, the tokenizer, Kyutai's LMGen and PersonaPlex's step
# (host bookkeeping shared by every backend), the backend interface and its
# dispatcher, the frame step (codec + LM + codec) over it.
ENGINE_SRCS += engine/lm/lm_config.c engine/lm/lm.c engine/lm/samp.c engine/lm/spm.c \
	engine/lm/lmgen.c engine/lm/lmgen_pp.c engine/lm/backend.c engine/lm/frame.c

CHECK_SUITES += lm samp lmgen spm
CHECK_lm_DEPS = $(LIBENGINE)
CHECK_samp_DEPS = $(LIBENGINE)
CHECK_lmgen_DEPS = $(LIBENGINE)
CHECK_spm_DEPS = $(LIBENGINE)
