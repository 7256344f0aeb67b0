#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The doubled capacity, or just need when doubling would not fit. */
static size_t next_cap(size_t cap, size_t need, size_t elem_size)
{
    size_t c = cap > GROW_MIN_CAP ? cap : GROW_MIN_CAP;
    while (c < need && c <= SIZE_MAX / 2)
        c *= 2;
    return c >= need && c <= SIZE_MAX / elem_size ? c : need;
}

int grow_reserve(void *array, size_t *cap, size_t need, size_t elem_size)
{
    if (need <= *cap)
        return 0;
    if (elem_size == 0 || need > SIZE_MAX / elem_size)
        return -1;
    const size_t new_cap = next_cap(*cap, need, elem_size);
    /* The caller's pointer is a T *, read and written as bytes: no T **
     * to void ** cast, which would access a T * through another type. */
    void *old;
    memcpy(&old, array, sizeof old);
    void *grown = realloc(old, new_cap * elem_size);
    if (!grown)
        return -1;
    memcpy(array, &grown, sizeof grown);
    *cap = new_cap;
    return 0;
}
