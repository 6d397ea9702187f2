/* rmsnorm.c - C twin of cu_rmsnorm (cuda/cu_rmsnorm.cu). */
#include "ref/ref.h"

#include <math.h>
#include <stddef.h>

void ref_rmsnorm(float *y, const float *x, const float *alpha, int B, int C, float eps) {
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * C;   /* (C) */
        float *yb = y + (size_t)b * C;         /* (C) */
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xb[c] * xb[c];
        float inv = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int c = 0; c < C; c++) yb[c] = xb[c] * inv * alpha[c];
    }
}
