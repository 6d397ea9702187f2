# engine/core.mk - engine core shared by everything: errors, logging, JSON,
# safetensors. No external libraries.
ENGINE_SRCS += engine/err.c engine/log.c engine/json.c engine/st.c engine/plugin.c
