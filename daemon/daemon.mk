# daemon/daemon.mk - moshid: configuration (cJSON), the command line, the
# HTTP/WebSocket front end (libwebsockets on libuv), sessions, the engine
# thread, the model adapter; the demo model; `make run`.

MOSHID_VERSION := 0.1.0-dev

# Daemon modules (everything but main.c), archived so that tests link them.
# cJSON is included as <cjson/cJSON.h> (Debian's layout), so no -I is needed.
DAEMON_SRCS += daemon/config/cfg.c daemon/config/cfg_dump.c daemon/config/cfg_reload.c daemon/config/cfg_table.c daemon/config/cfg_doc.c daemon/config/cfg_persona.c daemon/config/cfg_util.c \
	daemon/config/cfg_app.c
# The server: front end, metrics, engine thread, sessions, model adapter.
# srv_*.c: the HTTP/WebSocket front end (daemon/net/srv_int.h lists its files).
SRV_SRCS := daemon/net/srv.c daemon/net/srv_conn.c daemon/net/srv_req.c daemon/net/srv_limit.c daemon/net/srv_tls.c daemon/net/srv_rx.c daemon/net/srv_wire.c \
	daemon/net/srv_listen.c daemon/net/srv_proxy.c
SERVER_SRCS := $(SRV_SRCS) daemon/service/metrics.c daemon/session/scheduler.c daemon/session/sess.c daemon/app.c daemon/session/model.c
# /v1/realtime: the OpenAI Realtime dialect of a session and its audio formats (libsoxr).
SERVER_SRCS += daemon/session/rt.c daemon/session/rt_out.c daemon/session/rt_audio.c
# Access control: origins, bearer tokens (SHA-256 from libcrypto).
SERVER_SRCS += daemon/net/access.c
# Personas: configured and on-demand primes, the snapshot cache, prompt rules.
PERSONA_SRCS := daemon/persona/persona.c daemon/persona/persona_prime.c daemon/persona/persona_conf.c daemon/persona/persona_util.c
DAEMON_SRCS += daemon/persona/prompt.c daemon/persona/pcache.c $(PERSONA_SRCS)
DAEMON_SRCS += $(SERVER_SRCS) $(DAEMON_AUDIO_SRCS)
# The service manager: sd_notify readiness, status, watchdog (systemd/systemd.mk
# holds its flags and its Check suite).
DAEMON_SRCS += daemon/service/notify.c
LIBDAEMON := $(BUILD)/libdaemon.a
LIBDAEMON_OBJS = $(DAEMON_SRCS:%.c=$(BUILD)/obj/%.o)
DAEMON_LIBS = $(call pc_libs,libcjson libwebsockets libuv opus libsystemd libssl libcrypto)
$(SERVER_SRCS:%.c=$(BUILD)/obj/%.o) $(PERSONA_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/daemon/config/cfg_table.o: CPPFLAGS_ALL += $(call pc_cflags,libwebsockets libuv opus soxr)

$(LIBDAEMON): $(LIBDAEMON_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# Build identification, rewritten only when it changes (so main.o is
# recompiled only then).
BUILDINFO := $(BUILD)/gen/buildinfo.h
$(BUILDINFO): FORCE
	@mkdir -p $(@D)
	$(Q){ printf '#define MOSHID_VERSION "%s"\n' '$(MOSHID_VERSION)'; \
	  printf '#define MOSHID_GIT "%s"\n' "$$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"; \
	  printf '#define MOSHID_CFLAGS "%s"\n' '$(OPT) $(ARCH)$(if $(filter 1,$(SAN)), -fsanitize=address$(,)undefined)'; \
	} > $@.tmp && { cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@; }
$(BUILD)/obj/daemon/main.o: $(BUILDINFO)
$(BUILD)/obj/daemon/main.o: CPPFLAGS_ALL += -I$(BUILD)/gen $(call pc_cflags,libwebsockets libuv) \
	-DMOSHID_WEB_SRC_DIR='"$(abspath daemon/web)"'
, := ,
.PHONY: FORCE
FORCE:

# `moshid --self-signed DIR` (daemon/net/selfsign.c): OpenSSL's libcrypto, in
# moshid alone (the suites that link libdaemon.a do not need it).
SELFSIGN_LIBS = $(call pc_libs,libcrypto)
$(BUILD)/obj/daemon/net/selfsign.o: CPPFLAGS_ALL += $(call pc_cflags,libcrypto)

PROGRAMS += $(BUILD)/moshid
$(BUILD)/moshid: $(BUILD)/obj/daemon/main.o $(BUILD)/obj/daemon/net/selfsign.o $(LIBDAEMON) $(LIBPROTO) $(LIBENGINE_IO) $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(DAEMON_LIBS) $(SELFSIGN_LIBS) $(SPM_ENC_LIBS) $(VOICE_LIBS) $(LDLIBS_ALL)

# Unit tests and command-line tests.
CHECK_SUITES += cfg
CHECK_cfg_DEPS = $(LIBDAEMON) $(LIBENGINE)
CHECK_cfg_LIBS = $(DAEMON_LIBS)
CHECK_cfg_CFLAGS = $(call pc_cflags,libwebsockets libuv opus)
TEST_SCRIPTS += tests/cli/moshid_flags.sh tests/cli/moshid_configs.sh tests/cli/moshid_plugins.sh \
	tests/cli/config_doc.sh tests/cli/systemd_unit.sh

# docs/configuration.md: regenerate the option reference from the table.
config-doc: $(BUILD)/moshid
	$(Q)BUILD=$(BUILD) bash tests/cli/config_doc.sh --write
.PHONY: config-doc

# Optional components the daemon uses (printed by `make`).
LWS_EVLIB_UV := $(firstword $(wildcard $(shell pkg-config --variable=libdir libwebsockets 2>/dev/null)/libwebsockets-evlib_uv.so /usr/lib/*/libwebsockets-evlib_uv.so))
OPTIONAL_LINES += $(if $(LWS_EVLIB_UV),"✓ libwebsockets libuv event plugin ($(LWS_EVLIB_UV))","✗ libwebsockets libuv event plugin: libwebsockets-evlib_uv.so not found (Debian: libwebsockets-evlib-uv)")
OPTIONAL_LINES += $(if $(shell command -v spm_train 2>/dev/null),"✓ spm_train (demo tokenizer)","✗ spm_train: not found; the demo model's tokenizer cannot be trained (Debian: sentencepiece)")

# The server's own tests: the front end alone (an echo program), metrics,
# the engine thread with a stand-in model, and the daemon end to end.
PROGRAMS += $(BUILD)/tests/srv_echo
$(BUILD)/obj/tests/tools/srv_echo.o: CPPFLAGS_ALL += $(call pc_cflags,libwebsockets libuv)
$(BUILD)/tests/srv_echo: $(BUILD)/obj/tests/tools/srv_echo.o $(SRV_SRCS:%.c=$(BUILD)/obj/%.o) $(LIBPROTO) $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(call pc_libs,libwebsockets libuv libssl libcrypto) $(LDLIBS_ALL)
CHECK_SUITES += metrics scheduler access srv_limit srv_proxy
CHECK_srv_proxy_DEPS = $(BUILD)/obj/daemon/net/srv_proxy.o $(LIBENGINE)
CHECK_srv_limit_DEPS = $(BUILD)/obj/daemon/net/srv_limit.o $(BUILD)/obj/daemon/net/srv_listen.o $(BUILD)/obj/daemon/net/srv_proxy.o $(LIBENGINE)
CHECK_srv_limit_CFLAGS = $(call pc_cflags,libwebsockets libuv)
CHECK_srv_limit_LIBS = $(call pc_libs,libwebsockets libuv)
CHECK_SUITES += srv_listen
CHECK_srv_listen_DEPS = $(CHECK_srv_limit_DEPS)
CHECK_srv_listen_CFLAGS = $(CHECK_srv_limit_CFLAGS)
CHECK_srv_listen_LIBS = $(CHECK_srv_limit_LIBS)
CHECK_access_DEPS = $(BUILD)/obj/daemon/net/access.o $(LIBENGINE)
CHECK_access_LIBS = $(call pc_libs,libcrypto)
CHECK_metrics_DEPS = $(BUILD)/obj/daemon/service/metrics.o $(LIBENGINE)
CHECK_scheduler_DEPS = $(BUILD)/obj/daemon/session/scheduler.o $(BUILD)/obj/daemon/service/metrics.o $(LIBENGINE)
CHECK_scheduler_LIBS = $(call pc_libs,libuv)
CHECK_scheduler_CFLAGS = $(call pc_cflags,libuv)
PYTEST_DIRS += tests/integration

# The demo model: a small deterministic random-weight model in the official
# layout (engine/cli/mkmodel.c: PersonaPlex-shaped in $(DEMO_DIR), a
# Kyutai-shaped LM in $(DEMO_DIR)/kyutai) and a SentencePiece tokenizer
# trained on config/demo/corpus.txt; generated once.
DEMO_DIR := $(BUILD)/demo
SPM_TRAIN_FLAGS := --vocab_size=400 --model_type=unigram --character_coverage=1.0 --hard_vocab_limit=false \
	--unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --num_threads=1 --minloglevel=2
$(DEMO_DIR)/.ok: $(BUILD)/moshid-mkmodel config/demo/corpus.txt
	@echo "  DEMO    $(DEMO_DIR)"
	$(Q)mkdir -p $(DEMO_DIR)
	$(Q)spm_train --input=config/demo/corpus.txt --model_prefix=$(DEMO_DIR)/tokenizer $(SPM_TRAIN_FLAGS) >/dev/null 2>&1
	$(Q)n=$$(spm_export_vocab --model=$(DEMO_DIR)/tokenizer.model | wc -l) && \
	  $(BUILD)/moshid-mkmodel --out $(DEMO_DIR) --text-card $$n && \
	  $(BUILD)/moshid-mkmodel --out $(DEMO_DIR)/kyutai --dep-q 8 --lm-only --text-card $$n
	$(Q)touch $@
demo-model: $(DEMO_DIR)/.ok
EXTRA_ALL += $(DEMO_DIR)/.ok

# make run: the daemon on the demo model, CPU backend, in the foreground
# (PORT=8998 by default).
PORT ?= 8998
run: $(BUILD)/moshid $(DEMO_DIR)/.ok
	$(Q)$(BUILD)/moshid --config config/demo/moshid-demo.json --set server.port=$(PORT) \
	  --set model.lm_dir=$(abspath $(DEMO_DIR))/lm --set model.mimi=$(abspath $(DEMO_DIR))/mimi.safetensors \
	  --set model.mimi_config=$(abspath $(DEMO_DIR))/mimi.json --set model.tokenizer=$(abspath $(DEMO_DIR))/tokenizer.model

# Benchmark of the daemon (make bench-daemon, outside CI: about 15 minutes):
# clients streaming in real time, doubling until a level fails, then halving
# the gap; once with engine.pipeline off (the synchronous engine) and once
# on, same commit, same run. Every client comes from 127.0.0.1: the per-address
# connection limits are raised above sessions.max.
bench-daemon: $(BUILD)/moshid $(DEMO_DIR)/.ok build/venv/.ok
	$(Q)build/venv/bin/python tests/bench/loadgen.py --moshid $(BUILD)/moshid --config-args \
	  "--config config/demo/moshid-demo.json --set model.lm_dir=$(abspath $(DEMO_DIR))/lm --set model.mimi=$(abspath $(DEMO_DIR))/mimi.safetensors --set model.mimi_config=$(abspath $(DEMO_DIR))/mimi.json --set model.tokenizer=$(abspath $(DEMO_DIR))/tokenizer.model --set server.port=0 --set sessions.max=64 --set log.level=warn --set server.max_connections_per_ip=128 --set server.max_pending_per_ip=128" \
	  --seconds $(or $(BENCH_SECONDS),60) --start-n $(or $(BENCH_START_N),4) --max-n 64 --compare-pipeline
.PHONY: run demo-model bench-daemon

# Personas: the snapshot cache and the prompt rules (pure, tested alone).
CHECK_SUITES += prompt pcache
CHECK_prompt_DEPS = $(BUILD)/obj/daemon/persona/prompt.o $(LIBENGINE)
CHECK_pcache_DEPS = $(BUILD)/obj/daemon/persona/pcache.o $(LIBENGINE)
# The persona manager's answers (linked as moshid is).
CHECK_SUITES += persona
CHECK_persona_DEPS = $(LIBDAEMON) $(LIBPROTO) $(LIBENGINE_IO) $(LIBENGINE)
CHECK_persona_CFLAGS = $(call pc_cflags,libwebsockets libuv opus)
CHECK_persona_LIBS = $(DAEMON_LIBS) $(SPM_ENC_LIBS) $(VOICE_LIBS)
# A session's query, sampling and metadata (daemon/session/sess.c), linked
# as moshid is.
CHECK_SUITES += sess
CHECK_sess_DEPS = $(CHECK_persona_DEPS)
CHECK_sess_CFLAGS = $(CHECK_persona_CFLAGS)
CHECK_sess_LIBS = $(CHECK_persona_LIBS)

# The model front: begin, job, a batch of slots against the engine run
# directly, end, a failed begin (linked as moshid is; the demo model).
CHECK_SUITES += model
CHECK_model_DEPS = $(LIBDAEMON) $(LIBPROTO) $(LIBENGINE_IO) $(LIBENGINE)
CHECK_model_CFLAGS = $(call pc_cflags,libwebsockets libuv opus)
CHECK_model_LIBS = $(DAEMON_LIBS) $(SPM_ENC_LIBS) $(VOICE_LIBS)
$(BUILD)/tests/check_model: $(DEMO_DIR)/.ok

# daemon/web/wire_gen.js: the wire's facts for the page (close statuses,
# limits), printed from the C headers by moshid-web-gen; `make web-gen`
# rewrites it, tests/cli/web_gen.sh checks it is current.
PROGRAMS += $(BUILD)/moshid-web-gen
$(BUILD)/moshid-web-gen: $(BUILD)/obj/daemon/web_gen.o
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)
TEST_SCRIPTS += tests/cli/web_gen.sh
web-gen: $(BUILD)/moshid-web-gen
	$(Q)BUILD=$(BUILD) bash tests/cli/web_gen.sh --write
.PHONY: web-gen
