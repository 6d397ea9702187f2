# tests/fuzz/fuzz.mk - libFuzzer targets (clang), `make fuzz`, and the
# short smoke pass over the committed corpora that `make test` runs.
#
# A fragment adds a target with
#   FUZZ_TARGETS += foo
#   FUZZ_foo_SRCS := proto/foo.c engine/base/err.c ...   # compiled with the harness
#   FUZZ_foo_LIBS := $(call pc_libs,ogg)            # extra libraries (optional)
#   FUZZ_foo_CFLAGS := ...                          # extra flags (optional)
# and writes tests/fuzz/fuzz_foo.c (LLVMFuzzerTestOneInput) plus seed inputs
# in tests/fuzz/corpus/foo/ (and optionally a dictionary tests/fuzz/foo.dict).
# Everything is built with clang -fsanitize=fuzzer,address,undefined into
# $(BUILD)/fuzz/fuzz_foo.

FUZZ_TARGETS += st cfg
FUZZ_st_SRCS := engine/base/st.c engine/base/json.c engine/base/err.c engine/base/log.c
FUZZ_cfg_SRCS := daemon/net/srv_proxy.c daemon/config/cfg.c daemon/config/cfg_dump.c daemon/config/cfg_reload.c daemon/config/cfg_table.c daemon/config/cfg_doc.c daemon/config/cfg_persona.c daemon/config/cfg_util.c engine/base/text.c engine/base/err.c engine/base/log.c
FUZZ_cfg_LIBS = $(call pc_libs,libcjson)
# The server's receive path (srv_rx_feed, daemon/net/srv_rx.c: pure, no
# libwebsockets).
FUZZ_TARGETS += srv
FUZZ_srv_SRCS := daemon/net/srv_rx.c
# The wire guard's parser (srv_wg_feed, daemon/net/srv_rx.c): headers to
# frames, the MASK bit libwebsockets 4.1 does not check.
FUZZ_TARGETS += wg
FUZZ_wg_SRCS := daemon/net/srv_rx.c
# The PROXY protocol header of trusted proxies (srv_proxy_parse,
# daemon/net/srv_proxy.c: pure) and the trusted prefixes.
FUZZ_TARGETS += proxy
FUZZ_proxy_SRCS := daemon/net/srv_proxy.c
# torch.save files (PersonaPlex voices as published): the zip reader and
# the pickle interpreter (engine/base/pt.c).
FUZZ_TARGETS += pt
FUZZ_pt_SRCS := engine/base/pt.c engine/base/st.c engine/base/json.c engine/base/err.c engine/base/log.c

# /v1/realtime's client events (proto/rt_event.c), base64 and the JSON
# writer's escaping (docs/realtime.md).
FUZZ_TARGETS += rt
FUZZ_rt_SRCS := proto/rt_event.c proto/b64.c proto/jw.c engine/base/text.c engine/base/json.c engine/base/err.c engine/base/log.c

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -Wall -Wextra -Werror $(CPPFLAGS_ALL)
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_HDRS := $(wildcard engine/*/*.h proto/*.h daemon/*.h daemon/*/*.h)

# clang and its libFuzzer runtime present? (Debian: clang, libclang-rt-14-dev)
FUZZ_RT := $(shell $(FUZZ_CC) -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
FUZZ_OK := $(if $(and $(shell command -v $(FUZZ_CC) 2>/dev/null),$(wildcard $(FUZZ_RT))),1,)
OPTIONAL_LINES += $(if $(FUZZ_OK),"✓ clang + libFuzzer (make fuzz; fuzz smoke in make test)","✗ clang/libFuzzer: not found; no fuzz targets (Debian: clang libclang-rt-14-dev)")

define fuzz_rule
$(FUZZ_BUILD)/fuzz_$(1): tests/fuzz/fuzz_$(1).c $$(FUZZ_$(1)_SRCS) $(FUZZ_HDRS)
	@mkdir -p $$(@D)
	@echo "  FUZZ    $$@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $$(FUZZ_$(1)_CFLAGS) $$< $$(FUZZ_$(1)_SRCS) -o $$@ $$(FUZZ_$(1)_LIBS) -lm -ldl -pthread
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_rule,$(t))))

# The smoke pass: every target over its committed corpus plus a few
# hundred mutations (tests/fuzz/smoke.sh). The sanitizer build skips it:
# the fuzz targets are ASan/UBSan builds already.
export MOSHID_FUZZ_TARGETS = $(FUZZ_TARGETS)
export MOSHID_FUZZ_OK = $(FUZZ_OK)
ifeq ($(MOSHID_ASAN),)
TEST_SCRIPTS += tests/fuzz/smoke.sh
ifneq ($(FUZZ_OK),)
test test-unit: $(FUZZ_BINS)
endif
endif

# make fuzz: each target for FUZZ_SECONDS on a working corpus under
# $(BUILD)/fuzz/corpus/NAME seeded from tests/fuzz/corpus/NAME (new inputs
# stay out of git); crashes go to $(BUILD)/fuzz/artifacts/.
fuzz: $(if $(FUZZ_OK),$(FUZZ_BINS))
	$(Q)$(if $(FUZZ_OK),,echo "fuzz: clang/libFuzzer not available (Debian: clang libclang-rt-14-dev)"; exit 1;) \
	set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts; \
	    dict=; [ -f tests/fuzz/$$t.dict ] && dict=-dict=tests/fuzz/$$t.dict; \
	    echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	    $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	        -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- $$dict \
	        $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t 2>&1 | grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)' ; \
	    [ $${PIPESTATUS[0]} -eq 0 ] || { echo "fuzz_$$t failed: see $(FUZZ_BUILD)/artifacts/"; exit 1; }; \
	done
.PHONY: fuzz

# The committed corpora grew by merging what `make fuzz` found:
#   $(BUILD)/fuzz/fuzz_NAME -merge=1 tests/fuzz/corpus/NAME $(BUILD)/fuzz/corpus/NAME
# (adds only inputs that reach new coverage; keep each corpus small).
