#include "proto/idset.h"

#include <stdlib.h>

#define MIN_CAP 64

/* Fibonacci hashing: consecutive ids, the common case, spread evenly. */
static size_t slot_of(const idset *s, uint64_t id)
{
    return (size_t)((id * UINT64_C(0x9E3779B97F4A7C15)) >> 7) & (s->cap - 1);
}

static uint64_t *find(const idset *s, uint64_t id)
{
    size_t i = slot_of(s, id);
    while (s->slots[i] != 0 && s->slots[i] != id)
        i = (i + 1) & (s->cap - 1);
    return &s->slots[i];
}

bool idset_has(const idset *s, uint64_t id)
{
    return s->cap && *find(s, id) == id;
}

static int rehash(idset *s, size_t cap)
{
    idset bigger = {.slots = calloc(cap, sizeof *s->slots), .cap = cap, .n = s->n};
    if (!bigger.slots)
        return -1;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i])
            *find(&bigger, s->slots[i]) = s->slots[i];
    free(s->slots);
    *s = bigger;
    return 0;
}

int idset_add(idset *s, uint64_t id)
{
    if (idset_has(s, id))
        return 0;
    if ((s->n + 1) * 2 > s->cap && rehash(s, s->cap ? s->cap * 2 : MIN_CAP) < 0)
        return -1;
    *find(s, id) = id;
    s->n++;
    return 1;
}

void idset_free(idset *s)
{
    free(s->slots);
    *s = (idset){0};
}
