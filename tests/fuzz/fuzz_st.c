/* fuzz_st.c - the safetensors reader on arbitrary file images. Whatever it
 * accepts must be self-consistent: every tensor inside the image, sizes
 * matching shapes, lookups by name finding it, conversions in bounds. */
#include <stdint.h>
#include <string.h>

#include "err.h"
#include "st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ms_error e = {0};
    st_file *f = st_open_mem(data, size, "fuzz.safetensors", &e);
    if (!f) {
        MS_ASSERT(e.code != MS_OK && e.msg[0] != '\0');
        return 0;
    }
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const uint8_t *p = t->data;
        MS_ASSERT(t->nbytes == 0 || (p >= data && p + t->nbytes <= data + size));
        MS_ASSERT(t->nbytes == t->nel * st_dtype_size(t->dtype));
        MS_ASSERT(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        uint64_t nel = 1;
        for (int d = 0; d < t->ndim; d++) nel *= (uint64_t)t->shape[d];
        MS_ASSERT(nel == t->nel);
        MS_ASSERT(st_find(f, t->name) == t);
        if (t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) {
            float buf[64];
            size_t n = t->nel < 64 ? (size_t)t->nel : 64;
            MS_ASSERT(st_to_f32(t, 0, n, buf) == MS_OK);
            MS_ASSERT(st_to_f32(t, t->nel, 1, buf) != MS_OK); /* one past the end */
        }
    }
    st_close(f);
    return 0;
}
