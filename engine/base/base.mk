# engine/base/base.mk - what every part of the engine stands on: errors,
# logging, the bounded JSON reader, safetensors, plugin loading, the
# counter-based RNG (header only), and audio files (libsndfile + libsoxr,
# in the I/O archive). The core archive needs no external library.
ENGINE_SRCS += engine/base/text.c engine/base/err.c engine/base/log.c engine/base/json.c engine/base/st.c engine/base/pt.c engine/base/plugin.c
ENGINE_IO_SRCS += engine/base/audio_file.c
# only the I/O objects see libsndfile/libsoxr (the engine core stays library-free)
$(BUILD)/obj/engine/base/audio_file.o: CPPFLAGS_ALL += $(call pc_cflags,sndfile soxr)
AUDIO_LIBS = $(call pc_libs,sndfile soxr)

CHECK_SUITES += json st pt log err audio_file
CHECK_pt_DEPS = $(LIBENGINE)
CHECK_json_DEPS = $(LIBENGINE)
CHECK_st_DEPS = $(LIBENGINE)
CHECK_log_DEPS = $(LIBENGINE)
CHECK_err_DEPS = $(LIBENGINE)
CHECK_audio_file_DEPS = $(LIBENGINE_IO) $(LIBENGINE)
CHECK_audio_file_LIBS = $(AUDIO_LIBS)
