# engine/persona/persona.mk - personas: priming by steps or by prefill,
# voice-embedding replay, persona snapshots and their files; parity
# fixtures in tests/fixtures/pp (gen_pp.py). Voice prompt audio -> Mimi
# codes and the codec's SILENCE/SINE (voice.c, core; voice_io.c, I/O);
# fixtures in tests/fixtures/voice (gen_voice.py).
ENGINE_SRCS += engine/persona/prime.c engine/persona/prime_io.c engine/persona/job.c engine/persona/voice.c
# The prime job of a persona on a backend slot (pjob.c, which the daemon's
# engine thread steps).
ENGINE_SRCS += engine/persona/pjob.c

# Voice prompt files -> codes (I/O archive: libsndfile, libsoxr, libebur128);
# a program that calls voice_io.h links $(LIBENGINE_IO) $(LIBENGINE) $(VOICE_LIBS).
ENGINE_IO_SRCS += engine/persona/voice_io.c
$(BUILD)/obj/engine/persona/voice_io.o: CPPFLAGS_ALL += $(call pc_cflags,sndfile soxr libebur128)
VOICE_LIBS = $(call pc_libs,sndfile soxr libebur128)

# check_voice: tests/fixtures/voice (gen_voice.py) on the tiny Mimi of tests/fixtures/mimi.
CHECK_SUITES += voice
CHECK_voice_DEPS = $(LIBENGINE_IO) $(LIBENGINE)
CHECK_voice_CFLAGS = $(call pc_cflags,libebur128)
CHECK_voice_LIBS = $(VOICE_LIBS)

CHECK_SUITES += pp
CHECK_pp_DEPS = $(LIBENGINE)
# The prime job on the PersonaPlex fixtures of tests/fixtures/pp.
CHECK_SUITES += pjob
CHECK_pjob_DEPS = $(LIBENGINE)

# make bench: a 300-position prime by prefill vs by single steps, and its
# persona snapshot saved and restored (pp_persona_load, the chunked job) (CPU).
$(BUILD)/bench_prime: tests/bench/bench_prime.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench_prime
BENCHES += '$(BUILD)/bench_prime'

# make parity-big-voice: the reference tests of check_voice on a real-dimension
# random-weight Mimi (gen_mimi.py --big, then gen_voice.py --ref-out; needs
# FIXVENV, about 400 MB in build/parity-big).
parity-big-voice: $(BUILD)/tests/check_voice
	$(Q)test -x $(FIXVENV)/bin/python || { echo "parity-big-voice: needs FIXVENV=<venv with tests/fixtures/requirements-fixtures.txt>"; exit 2; }
	$(Q)mkdir -p $(BUILD)/parity-big
	$(Q)test -f $(BUILD)/parity-big/big.safetensors || $(FIXVENV)/bin/python tests/fixtures/gen_mimi.py --big --out $(BUILD)/parity-big
	$(Q)$(FIXVENV)/bin/python tests/fixtures/gen_voice.py --mimi $(BUILD)/parity-big/big --ref-out $(BUILD)/parity-big/voice_big_ref.safetensors
	$(Q)VOICE_BIG_MIMI=$(BUILD)/parity-big/big VOICE_BIG_REF=$(BUILD)/parity-big/voice_big_ref.safetensors CK_RUN_CASE=reference \
		CK_TIMEOUT_MULTIPLIER=30 $(BUILD)/tests/check_voice
.PHONY: parity-big-voice
