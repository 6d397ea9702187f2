/* library_types.h (emulator) - the data types cuBLAS calls name. */
#ifndef MOSHID_EMU_LIBRARY_TYPES_H
#define MOSHID_EMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif
