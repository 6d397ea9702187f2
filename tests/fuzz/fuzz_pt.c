/* fuzz_pt.c - libFuzzer target: torch.save files (pt_open_mem,
 * engine/base/pt.c): the zip reader and the pickle interpreter on hostile
 * bytes. Beyond no out-of-bounds access (ASan) and no undefined behaviour
 * (UBSan): every tensor handed out lies inside the input and holds what its
 * shape and dtype say. Seeds: the voice files torch wrote
 * (tests/fixtures/voice_pt). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ms_error e = {0};
    pt_file *f = pt_open_mem(data, size, "fuzz.pt", &e);
    if (!f) {
        if (!e.msg[0]) abort(); /* every refusal says why */
        return 0;
    }
    for (size_t i = 0; i < pt_count(f); i++) {
        const st_tensor *t = pt_at(f, i);
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size) abort();
        if (t->nbytes != t->nel * st_dtype_size(t->dtype)) abort();
        if (pt_find(f, t->name) != t) abort();
        volatile uint8_t sum = 0;
        for (size_t j = 0; j < t->nbytes; j++) sum += p[j];
        (void)sum;
    }
    pt_close(f);
    return 0;
}
