/* cuda_runtime.h (emulator) - the runtime API (cuda_runtime_api.h); the
 * device-side language is emu_device.h, force-included into kernel files. */
#ifndef MOSHID_EMU_CUDA_RUNTIME_H
#define MOSHID_EMU_CUDA_RUNTIME_H
#include <cuda_runtime_api.h>
#endif
