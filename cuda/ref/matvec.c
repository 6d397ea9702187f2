/* matvec.c - C twin of cu_matvec_bf16 (cuda/cu_matvec.cu). */
#include "ref/ref.h"

#include <stddef.h>

void ref_matvec_bf16(float *y, const float *x, const uint16_t *w, int B, int N, int K) {
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * K;   /* (K) */
        for (int n = 0; n < N; n++) {
            const uint16_t *wn = w + (size_t)n * K;   /* (K) */
            float part[8] = {0};
            for (int k = 0; k < K; k++) part[k & 7] += ref_bf16_to_f32(wn[k]) * xb[k];
            float s = 0.0f;
            for (int j = 0; j < 8; j++) s += part[j];
            y[(size_t)b * N + n] = s;
        }
    }
}
