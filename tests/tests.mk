# tests/tests.mk - unit test suites (Check), the test runner, the Python venv.
#
# A fragment adds a suite with
#   CHECK_SUITES += foo
#   CHECK_foo_DEPS := $(LIBENGINE)            # objects/archives linked in
#   CHECK_foo_LIBS := $(call pc_libs,ogg)     # extra libraries
# and writes tests/check_foo.c (one Check suite, see tests/check_main.h).


CHECK_CFLAGS := $(call pc_cflags,check)
CHECK_LIBS := $(call pc_libs,check)

define check_suite_rule
$(BUILD)/tests/check_$(1): tests/check_$(1).c tests/check_main.h $$(CHECK_$(1)_DEPS)
	@mkdir -p $$(@D)
	@echo "  CCLD    $$@"
	$(Q)$$(CC) $$(CPPFLAGS_ALL) -Itests $$(CFLAGS_ALL) $$(CHECK_CFLAGS) $$(CHECK_$(1)_CFLAGS) $$< \
		$$(CHECK_$(1)_DEPS) -o $$@ $$(LDFLAGS_ALL) $$(CHECK_$(1)_LIBS) $$(CHECK_LIBS) $$(LDLIBS_ALL)
endef
$(foreach s,$(CHECK_SUITES),$(eval $(call check_suite_rule,$(s))))

CHECK_BINS := $(CHECK_SUITES:%=$(BUILD)/tests/check_%)

# Python tools for the tests (pytest, ...), pinned in tests/requirements.txt.
VENV := build/venv
$(VENV)/.ok: tests/requirements.txt tests/requirements-nodeps.txt
	@echo "  VENV    $(VENV)"
	$(Q)python3 -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check -r $< && \
	  $(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r tests/requirements-nodeps.txt && touch $@

# The agent frameworks' realtime clients (LiveKit, Pipecat) for
# test_realtime_agents.py, in a venv of their own: their pins clash with
# build/venv's.
VENV_AGENTS := build/venv-agents
$(VENV_AGENTS)/.ok: tests/requirements-agents.txt
	@echo "  VENV    $(VENV_AGENTS)"
	$(Q)python3 -m venv $(VENV_AGENTS) && $(VENV_AGENTS)/bin/pip install -q --disable-pip-version-check -r $< && touch $@

# Suites and scripts run by `make test`; fragments may add to these.
TEST_SCRIPTS += tests/check_deps.sh
# The file graph: no circles, engine/ below cuda/ and daemon/ (docs/architecture.md).
TEST_SCRIPTS += tests/tools/check_layers.sh
PYTEST_DIRS ?=

test-unit: $(CHECK_BINS) $(PROGRAMS)
	$(Q)BUILD=$(BUILD) bash tests/run-tests.sh unit $(CHECK_BINS) -- $(TEST_SCRIPTS)

test-integration: $(PROGRAMS) $(VENV)/.ok $(VENV_AGENTS)/.ok $(EXTRA_ALL)
	$(Q)BUILD=$(BUILD) bash tests/run-tests.sh pytest $(PYTEST_DIRS)

test: $(CHECK_BINS) $(PROGRAMS) $(VENV)/.ok $(VENV_AGENTS)/.ok $(EXTRA_ALL)
	$(Q)BUILD=$(BUILD) bash tests/run-tests.sh all $(CHECK_BINS) -- $(TEST_SCRIPTS) -- $(PYTEST_DIRS)

# Sanitizer build in its own tree; correctness only (no real-time pace).
asan:
	$(Q)$(MAKE) --no-print-directory MOSHID_DEPS_OK=1 BUILD=build/asan SAN=1 OPT=-O1 MOSHID_ASAN=1 test-unit
	$(Q)$(MAKE) --no-print-directory MOSHID_DEPS_OK=1 BUILD=build/asan SAN=1 OPT=-O1 MOSHID_ASAN=1 test-integration

OPTIONAL_LINES += $(if $(shell pkg-config --exists openblas 2>/dev/null && echo 1),"✓ OpenBLAS (benchmark ceilings)","✗ OpenBLAS: not found; benchmarks cannot measure the BLAS ceiling (Debian: libopenblas-dev)")

bench: $(PROGRAMS) $(BENCH_DEPS)
	$(Q)set -e; $(if $(BENCHES),$(foreach b,$(BENCHES),echo "== $(b)"; $(b);),echo "no benchmarks yet")

# Personas: WebSocket open -> handshake without a persona, restored from a
# snapshot and primed on demand, on the demo model (make bench-personas).
bench-personas: $(BUILD)/moshid $(BUILD)/demo/.ok build/venv/.ok
	$(Q)build/venv/bin/python tests/bench/bench_handshake.py --moshid $(BUILD)/moshid --demo $(BUILD)/demo -n $(or $(BENCH_N),20)
.PHONY: bench-personas
