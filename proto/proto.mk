# proto/proto.mk - the wire format (message kinds, Ogg pages, query
# parameters; pure, no I/O), the Opus stream wrappers of the daemon and the
# SentencePiece model reader of the engine.

PROTO_SRCS += proto/utf8.c proto/msg.c proto/ogg.c proto/ogg_opus.c

CHECK_SUITES += proto_msg
CHECK_proto_msg_DEPS = $(LIBPROTO) $(LIBENGINE)

CHECK_SUITES += ogg
CHECK_ogg_DEPS = $(LIBPROTO) $(LIBENGINE)
CHECK_ogg_CFLAGS = $(call pc_cflags,ogg)
CHECK_ogg_LIBS = $(call pc_libs,ogg)

# libFuzzer targets (built by tests/fuzz/fuzz.mk).
FUZZ_TARGETS += msg
FUZZ_msg_SRCS := proto/msg.c proto/utf8.c engine/err.c
FUZZ_msg_LIBS :=
