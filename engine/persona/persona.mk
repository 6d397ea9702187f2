# engine/persona/persona.mk - personas: priming by steps or by prefill,
# voice-embedding replay, persona snapshots and their files; parity
# fixtures in tests/fixtures/pp (gen_pp.py).
ENGINE_SRCS += engine/persona/prime.c engine/persona/prime_io.c engine/persona/job.c

CHECK_SUITES += pp
CHECK_pp_DEPS = $(LIBENGINE)

# make bench: a 300-position prime by prefill vs by single steps (CPU).
$(BUILD)/bench_prime: tests/bench/bench_prime.c $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $< $(LIBENGINE) -o $@ $(LDFLAGS_ALL) $(LDLIBS_ALL)
BENCH_DEPS += $(BUILD)/bench_prime
BENCHES += '$(BUILD)/bench_prime'
