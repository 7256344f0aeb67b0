/* fuzz-gguf: libFuzzer target for the GGUF reader.
 *
 * Every input goes through gguf_open_buffer over an exact-size heap copy (so
 * ASan sees any read past the end).  When a file is accepted, every key is
 * read through every getter and every tensor is looked up by name and has its
 * data touched, so that what the reader exposes is checked too, not only its
 * parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read bytes so that a pointer out of bounds is caught by ASan. */
static uint8_t touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    return n ? (uint8_t)(b[0] ^ b[n - 1]) : 0;
}

static uint8_t exercise_key(const gguf_file *f, uint64_t i)
{
    gguf_str k = gguf_kv_key(f, i);
    char key[256];
    if (k.len >= sizeof key)
        return touch(k.ptr, k.len);
    memcpy(key, k.ptr, k.len);
    key[k.len] = '\0';
    if (gguf_find_key(f, key) != (int64_t)i)
        abort(); /* keys are unique and NUL-free, so lookup finds this one */
    llmq_err err;
    uint32_t u32;
    uint64_t u64, n;
    int32_t i32;
    float x;
    bool b;
    gguf_str s;
    const gguf_str *items;
    const void *arr;
    gguf_vtype et;
    uint8_t acc = 0;
    gguf_get_u32(f, key, &u32, &err);
    gguf_get_u64(f, key, &u64, &err);
    gguf_get_i32(f, key, &i32, &err);
    gguf_get_f32(f, key, &x, &err);
    gguf_get_bool(f, key, &b, &err);
    if (gguf_get_str(f, key, &s, &err) == 0)
        acc ^= touch(s.ptr, s.len);
    if (gguf_get_array(f, key, &et, &arr, &n, &err) == 0 && et != GGUF_STRING)
        acc ^= touch(arr, n * gguf_vtype_size(et));
    if (gguf_get_str_array(f, key, &items, &n, &err) == 0)
        for (uint64_t j = 0; j < n; j++)
            acc ^= touch(items[j].ptr, items[j].len);
    return acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    gguf_file *f = NULL;
    llmq_err err;
    if (gguf_open_buffer(&f, copy, size, "fuzz", &err) == 0) {
        volatile uint8_t acc = 0;
        for (uint64_t i = 0; i < gguf_kv_count(f); i++)
            acc ^= exercise_key(f, i);
        for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            if (gguf_find_tensor(f, t->name) != t)
                abort();
            acc ^= touch(t->data, t->nbytes);
        }
        (void)acc;
        gguf_close(f);
    }
    free(copy);
    return 0;
}
