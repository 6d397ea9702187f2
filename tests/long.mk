# tests/long.mk - the long proofs: bounded-time targets outside
# `make test`, whose last results are recorded by hand in docs/benchmarks.md
# ("Long proofs").
#
#   make fuzz-long   every fuzz target, FUZZ_LONG_S seconds in all (default
#                    3600, split evenly across the targets), corpus kept in
#                    $(BUILD)/fuzz-corpus/NAME, reproducers of a crash in
#                    $(BUILD)/fuzz-artifacts/ (tests/tools/fuzz_long.sh)
#   make soak        SOAK_N sessions (default 8) streaming for SOAK_S seconds
#                    (default 3600) on the demo model, back to back sessions of
#                    at most SOAK_SESSION_S (default 600); memory sampled every
#                    minute; summary in $(BUILD)/soak/soak.{json,md}
#                    (tests/tools/soak.py)
#   make hostile     tests/tools/hostile.py (HOSTILE_ARGS) for HOSTILE_S
#                    seconds (default 600) against a demo daemon holding
#                    HOSTILE_N streaming sessions (default 4), which must
#                    stay real time and get every frame; summary in
#                    $(BUILD)/hostile/hostile.{json,md}
#   make test-fresh  the README's `make test` in a fresh minimal Debian 12 root
#                    (debootstrap minbase + git, make, ca-certificates, cached
#                    in FRESH_CACHE, default /var/cache/moshid-fresh; a clone
#                    of HEAD copied in; needs root); about as long as make test
#                    plus the package installs (tests/tools/test_fresh.sh)
#   make run-fresh   the same root, `make run`: /healthz and / fetched from the
#                    host, then moshid stopped with SIGTERM
# Each exits non-zero when its checks fail. The venv is named literally:
# tests/tests.mk, which defines VENV, is read after this file, and a
# prerequisite is expanded when its rule is read.

FUZZ_LONG_S ?= 3600
fuzz-long: $(if $(FUZZ_OK),$(FUZZ_BINS))
	$(Q)BUILD=$(BUILD) FUZZ_LONG_S=$(FUZZ_LONG_S) bash tests/tools/fuzz_long.sh

SOAK_N ?= 8
SOAK_S ?= 3600
SOAK_SESSION_S ?= 600
soak: $(BUILD)/moshid $(DEMO_DIR)/.ok build/venv/.ok
	$(Q)build/venv/bin/python tests/tools/soak.py --moshid $(BUILD)/moshid --demo $(DEMO_DIR) \
	  -n $(SOAK_N) --seconds $(SOAK_S) --session-s $(SOAK_SESSION_S) --out $(BUILD)/soak

# hostile.py's loops: idle connections, slowloris
# (headers a byte at a time), upgrade floods and connect-drop, by default the
# sizes of item 1's test.
HOSTILE_N ?= 4
HOSTILE_S ?= 600
HOSTILE_ARGS ?= --idle 500 --slowloris 100 --flood-rate 20 --drop-rate 20
hostile: $(BUILD)/moshid $(DEMO_DIR)/.ok build/venv/.ok
	$(Q)test -f tests/tools/hostile.py || { echo "hostile: tests/tools/hostile.py is missing"; exit 1; }
	$(Q)build/venv/bin/python tests/tools/soak.py --moshid $(BUILD)/moshid --demo $(DEMO_DIR) \
	  -n $(HOSTILE_N) --seconds $(HOSTILE_S) --sample-s 30 --out $(BUILD)/hostile --hostile "$(HOSTILE_ARGS)"

test-fresh:
	$(Q)bash tests/tools/test_fresh.sh
run-fresh:
	$(Q)bash tests/tools/test_fresh.sh --run

.PHONY: fuzz-long soak hostile test-fresh run-fresh
