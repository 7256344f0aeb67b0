/* kvpool: the bookkeeping of the paged KV cache, and the prefix cache in it.
 *
 * The cache is one pool of fixed-size blocks (block_size token slots each)
 * created once at start-up; the backend holds the memory, this module hands
 * out block ids.  A sequence owns a block table (its blocks in position
 * order); its token at position p lives in slot
 * table[p / block_size] * block_size + p % block_size.
 *
 * Prefix cache: a full block whose keys and values are computed can be
 * published, under what it holds: its block_size tokens and the block before
 * it in the table (the whole prefix, by induction).  A sequence that starts
 * with the same tokens then takes the published blocks into its own table
 * (kvpool_match) instead of computing them: a block is shared by every table
 * that holds it and counted by references.  Sharing is exact because a
 * block's contents are a function of its prefix alone (the batch-invariance
 * rule of kernels/backend.h: a prompt gives the same KV however it was
 * prefilled), and safe without copy-on-write because only full blocks are
 * shared and a sequence writes only at positions past the ones it matched.
 * A published block that no table holds stays in the cache, in
 * least-recently-released order, until a reservation needs its memory
 * (eviction).  Matches compare the tokens and the parent block's identity,
 * not a hash, so a match is never wrong.
 *
 * Host-only, no locking: the engine is its single owner. */
#ifndef LLMQ_ENGINE_KVPOOL_H
#define LLMQ_ENGINE_KVPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

typedef struct kvpool kvpool;

/* Where a table's publishing stands: how many of its leading blocks are
 * published (or found already published by another table), and the
 * published block the next one follows.  Zeroed (kvpool_chain_reset) for an
 * empty table. */
typedef struct kvpool_chain {
    int32_t n_done;
    int32_t parent;      /* block id, -1 before the first block */
    uint32_t parent_gen; /* its generation when recorded: a reused block is a new one */
    bool broken;         /* the parent was evicted: nothing more of this table is published */
} kvpool_chain;

int kvpool_create(kvpool **out, int32_t n_blocks, int32_t block_size, llmq_err *err);
void kvpool_free(kvpool *p);

int32_t kvpool_block_size(const kvpool *p);
int32_t kvpool_n_blocks(const kvpool *p);
/* Blocks a reservation can take: unused ones and cached ones no table holds. */
int32_t kvpool_n_free(const kvpool *p);
/* Of those, the cached ones (their contents kept until evicted). */
int32_t kvpool_n_cached_idle(const kvpool *p);
/* Table entries outstanding: the sum of every table's blocks. */
int64_t kvpool_n_refs(const kvpool *p);

/* Blocks needed to hold n tokens. */
int32_t kvpool_blocks_for(const kvpool *p, int64_t n_tokens);

/* Grows `table` (holding *n_table blocks, with room for
 * kvpool_blocks_for(n_tokens)) to cover n_tokens tokens, taking unused
 * blocks first and then evicting the least recently released cached ones;
 * false, with nothing taken, when the pool has too few free blocks. */
bool kvpool_reserve(kvpool *p, int32_t *table, int32_t *n_table, int64_t n_tokens);

/* Drops a table's references (*n_table becomes 0).  A block no table holds
 * any more returns to the pool: published ones into the cache, the table's
 * first block last (so a prefix outlives its continuations), others unused. */
void kvpool_release(kvpool *p, const int32_t *table, int32_t *n_table);

/* Fills an empty table with the published blocks that hold tokens[0..n),
 * block by block while they match (n rounded down to whole blocks), and sets
 * *chain to continue publishing after them.  Returns the blocks matched. */
int32_t kvpool_match(kvpool *p, const int32_t *tokens, int64_t n, int32_t *table, int32_t *n_table,
                     kvpool_chain *chain);

/* Publishes the table's blocks chain->n_done .. n_full-1, which must be
 * full and computed (holding tokens[i * block_size ..]).  A block whose
 * contents are already published under another id is left unpublished (it
 * returns unused when released) and the chain goes on from the published
 * one. */
void kvpool_publish(kvpool *p, const int32_t *table, const int32_t *tokens, int32_t n_full,
                    kvpool_chain *chain);

void kvpool_chain_reset(kvpool_chain *chain);

/* Checks the pool's counts against its blocks (LLMQ_ASSERT): every block is
 * held, idle in the cache or unused, and the lists and index agree. */
void kvpool_assert_consistent(const kvpool *p);

#endif
