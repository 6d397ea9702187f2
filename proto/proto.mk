# proto/proto.mk - the wire format (message kinds, Ogg pages, query
# parameters; pure, no I/O), the Opus stream wrappers of the daemon and the
# SentencePiece model reader of the engine.

PROTO_SRCS += proto/msg.c proto/ogg.c proto/ogg_opus.c proto/query.c
# /v1/realtime (docs/realtime.md): its client events, a JSON writer, base64, G.711.
PROTO_SRCS += proto/rt_event.c proto/jw.c proto/b64.c proto/g711.c

CHECK_SUITES += proto_msg
CHECK_proto_msg_DEPS = $(LIBPROTO) $(LIBENGINE)

CHECK_SUITES += ogg
CHECK_ogg_DEPS = $(LIBPROTO) $(LIBENGINE)
CHECK_ogg_CFLAGS = $(call pc_cflags,ogg)
CHECK_ogg_LIBS = $(call pc_libs,ogg)

CHECK_SUITES += query
CHECK_query_DEPS = $(LIBPROTO) $(LIBENGINE)

# /v1/realtime's events, base64, G.711, the JSON writer, and the daemon's
# audio formats over them (rt_audio.c, libsoxr).
CHECK_SUITES += rt_event
CHECK_rt_event_DEPS = $(BUILD)/obj/daemon/session/rt_audio.o $(LIBPROTO) $(LIBENGINE)
CHECK_rt_event_CFLAGS = $(call pc_cflags,soxr)
CHECK_rt_event_LIBS = $(call pc_libs,soxr) -lm

# libFuzzer targets (built and run by tests/fuzz/fuzz.mk): source
# tests/fuzz/fuzz_<name>.c, seeds in tests/fuzz/corpus/<name>/.
FUZZ_TARGETS += ogg msg query
FUZZ_ogg_SRCS := proto/ogg.c proto/ogg_opus.c daemon/session/audio_opus.c engine/base/err.c
FUZZ_ogg_LIBS := -lopus
FUZZ_msg_SRCS := proto/msg.c engine/base/text.c engine/base/err.c
FUZZ_msg_LIBS :=
FUZZ_query_SRCS := proto/query.c engine/base/text.c engine/base/err.c
FUZZ_query_LIBS := -lm

# Opus stream wrappers of the daemon (linked by daemon/daemon.mk).
DAEMON_AUDIO_SRCS += daemon/session/audio_opus.c
$(DAEMON_AUDIO_SRCS:%.c=$(BUILD)/obj/%.o): CPPFLAGS_ALL += $(call pc_cflags,opus)

CHECK_SUITES += audio_opus
CHECK_audio_opus_DEPS = $(DAEMON_AUDIO_SRCS:%.c=$(BUILD)/obj/%.o) $(LIBPROTO) $(LIBENGINE)
CHECK_audio_opus_CFLAGS = $(call pc_cflags,opus)
CHECK_audio_opus_LIBS = $(call pc_libs,opus)

