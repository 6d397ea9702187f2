# daemon/server.mk - the HTTP/WebSocket front end, metrics, the engine
# scheduler, and their tests.
SERVER_SRCS := daemon/srv.c daemon/metrics.c daemon/scheduler.c
SERVER_OBJS = $(SERVER_SRCS:%.c=$(BUILD)/obj/%.o)
SERVER_LIBS = $(call pc_libs,libwebsockets libuv)
EXTRA_CFLAGS_daemon_ = $(call pc_cflags,libwebsockets libuv libcjson opus ogg)
EXTRA_CFLAGS_tests_tools_ = $(call pc_cflags,libwebsockets libuv)

PROGRAMS += $(BUILD)/tests/srv_echo
$(BUILD)/tests/srv_echo: $(BUILD)/obj/tests/tools/srv_echo.o $(SERVER_OBJS) $(LIBENGINE)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(SERVER_LIBS) $(LDLIBS_ALL)

CHECK_SUITES += metrics
CHECK_metrics_DEPS = $(BUILD)/obj/daemon/metrics.o $(LIBENGINE)

PYTEST_DIRS += tests/integration

CHECK_SUITES += scheduler
CHECK_scheduler_DEPS = $(BUILD)/obj/daemon/scheduler.o $(BUILD)/obj/daemon/metrics.o $(LIBENGINE)
CHECK_scheduler_LIBS = $(call pc_libs,libuv)
CHECK_scheduler_CFLAGS = $(call pc_cflags,libuv)

# The demo model: a small deterministic random-weight model in the official
# layout (engine/cli/mkmodel.c) and a SentencePiece tokenizer trained on
# config/demo/corpus.txt, generated once under $(BUILD)/demo.
PROGRAMS += $(BUILD)/moshid-mkmodel
$(BUILD)/moshid-mkmodel: $(BUILD)/obj/engine/cli/mkmodel.o $(LIBENGINE)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

DEMO_DIR := $(BUILD)/demo
SPM_TRAIN_FLAGS := --vocab_size=400 --model_type=unigram --character_coverage=1.0 --hard_vocab_limit=false \
	--unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --num_threads=1 --minloglevel=2
$(DEMO_DIR)/.ok: $(BUILD)/moshid-mkmodel config/demo/corpus.txt
	@echo "  DEMO    $(DEMO_DIR)"
	$(Q)mkdir -p $(DEMO_DIR)
	$(Q)spm_train --input=config/demo/corpus.txt --model_prefix=$(DEMO_DIR)/tokenizer $(SPM_TRAIN_FLAGS) >/dev/null 2>&1
	$(Q)$(BUILD)/moshid-mkmodel --out $(DEMO_DIR) --text-card $$(spm_export_vocab --model=$(DEMO_DIR)/tokenizer.model | wc -l)
	$(Q)$(BUILD)/moshid-mkmodel --out $(DEMO_DIR)/kyutai --dep-q 8 --lm-only \
		--text-card $$(spm_export_vocab --model=$(DEMO_DIR)/tokenizer.model | wc -l)
	$(Q)touch $@
demo-model: $(DEMO_DIR)/.ok
