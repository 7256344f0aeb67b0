#include "engine/kvpool.h"

#include <stdlib.h>

#include "common/check.h"

struct kvpool {
    int32_t n_blocks;
    int32_t block_size;
    int32_t n_free;
    int32_t *free_ids; /* stack of free block ids */
};

int kvpool_create(kvpool **out, int32_t n_blocks, int32_t block_size, llmq_err *err)
{
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return llmq_errf(err, "kv pool: %d blocks of %d tokens", n_blocks, block_size);
    kvpool *p = calloc(1, sizeof *p);
    if (!p || !(p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids))) {
        free(p);
        return llmq_errf(err, "kv pool: out of memory");
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Lowest ids on top, so a fresh engine fills the cache from its start. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return 0;
}

void kvpool_free(kvpool *p)
{
    if (p)
        free(p->free_ids);
    free(p);
}

int32_t kvpool_block_size(const kvpool *p)
{
    return p->block_size;
}
int32_t kvpool_n_blocks(const kvpool *p)
{
    return p->n_blocks;
}
int32_t kvpool_n_free(const kvpool *p)
{
    return p->n_free;
}

int32_t kvpool_blocks_for(const kvpool *p, int64_t n_tokens)
{
    return (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

bool kvpool_reserve(kvpool *p, int32_t *table, int32_t *n_table, int64_t n_tokens)
{
    int32_t need = kvpool_blocks_for(p, n_tokens) - *n_table;
    if (need <= 0)
        return true;
    if (need > p->n_free)
        return false;
    while (need-- > 0)
        table[(*n_table)++] = p->free_ids[--p->n_free];
    return true;
}

void kvpool_release(kvpool *p, const int32_t *table, int32_t *n_table)
{
    LLMQ_ASSERT(p->n_free + *n_table <= p->n_blocks, "%d blocks back with %d of %d free", *n_table,
                p->n_free, p->n_blocks);
    for (int32_t i = *n_table - 1; i >= 0; i--) {
        LLMQ_ASSERT(table[i] >= 0 && table[i] < p->n_blocks, "block id %d of %d", table[i],
                    p->n_blocks);
        p->free_ids[p->n_free++] = table[i];
    }
    *n_table = 0;
}
