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
