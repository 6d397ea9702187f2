/* cublas_v2.h (emulator) - see cublas_api.h. */
#ifndef MOSHID_EMU_CUBLAS_V2_H
#define MOSHID_EMU_CUBLAS_V2_H
#include <cublas_api.h>
#endif
