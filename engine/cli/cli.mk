# engine/cli/cli.mk - the engine's command-line tools: moshi-run (the LM
# offline, JSON Lines), mimi-codec (audio files <-> codes), moshid-mkmodel
# (the demo model generator).
PROGRAMS += $(BUILD)/moshi-run $(BUILD)/mimi-codec $(BUILD)/moshid-mkmodel
$(BUILD)/moshi-run: $(BUILD)/obj/engine/cli/moshi_run.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/obj/engine/cli/mimi_codec.o: CPPFLAGS_ALL += $(call pc_cflags,sndfile soxr)
$(BUILD)/mimi-codec: $(BUILD)/obj/engine/cli/mimi_codec.o $(LIBENGINE_IO) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(AUDIO_LIBS) $(LDLIBS_ALL)
$(BUILD)/moshid-mkmodel: $(BUILD)/obj/engine/cli/mkmodel.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

# drive build/moshi-run (built by make test before the suites run)
CHECK_SUITES += lm_run pp_run
CHECK_lm_run_DEPS = $(LIBENGINE)
CHECK_pp_run_DEPS = $(LIBENGINE)
# (not linked: the suites run it, so building one rebuilds it)
$(BUILD)/tests/check_lm_run $(BUILD)/tests/check_pp_run: $(BUILD)/moshi-run

# lm-quality: the 8-bit schemes' teacher-forced logit error against the
# unquantized model on the CPU (tests/tools/lm_quality.c; docs/lm.md,
# "8-bit quality"). Not installed, not in make test: a measurement.
$(BUILD)/lm-quality: $(BUILD)/obj/tests/tools/lm_quality.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)
