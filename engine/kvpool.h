/* kvpool: the bookkeeping of the paged KV cache.
 *
 * The cache is one pool of fixed-size blocks (block_size token slots each)
 * created once at start-up; the backend holds the memory, this module hands
 * out block ids.  A sequence owns a block table (its blocks in position
 * order); its token at position p lives in slot
 * table[p / block_size] * block_size + p % block_size.  Blocks return to the
 * pool when a sequence finishes or is preempted.  Host-only, no locking: the
 * engine is its single owner. */
#ifndef LLMQ_ENGINE_KVPOOL_H
#define LLMQ_ENGINE_KVPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

typedef struct kvpool kvpool;

int kvpool_create(kvpool **out, int32_t n_blocks, int32_t block_size, llmq_err *err);
void kvpool_free(kvpool *p);

int32_t kvpool_block_size(const kvpool *p);
int32_t kvpool_n_blocks(const kvpool *p);
int32_t kvpool_n_free(const kvpool *p);

/* Blocks needed to hold n tokens. */
int32_t kvpool_blocks_for(const kvpool *p, int64_t n_tokens);

/* Grows `table` (holding *n_table blocks, with room for
 * kvpool_blocks_for(n_tokens)) to cover n_tokens tokens; false, with
 * nothing taken, when the pool has too few free blocks. */
bool kvpool_reserve(kvpool *p, int32_t *table, int32_t *n_table, int64_t n_tokens);

/* Returns all of a table's blocks to the pool; *n_table becomes 0. */
void kvpool_release(kvpool *p, const int32_t *table, int32_t *n_table);

#endif
