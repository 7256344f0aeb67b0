/* test-kvpool: the KV block pool and its prefix cache (engine/kvpool.h).
 *
 * Pins: reservations take whole blocks and fail, taking nothing, when the
 * pool is short; a published prefix is matched block by block by a table
 * with the same leading tokens, never past the first differing block, never
 * a partial block, and never by the same tokens behind another prefix; a
 * shared block is counted once per table and stays held until the last
 * table lets it go; released published blocks stay cached and are evicted
 * least recently released first, the first block of a prefix last; an
 * evicted block's continuations are matched no more, and a table whose
 * parent was evicted stops publishing; contents published twice (two
 * tables computing one prefix) are kept once, and the chain continues from
 * the copy kept.  The pool's counts are checked after every operation. */
#include <string.h>

#include "check.h"
#include "engine/kvpool.h"

#define BS 4
#define N_BLOCKS 8

typedef struct table {
    int32_t ids[N_BLOCKS];
    int32_t n;
    kvpool_chain chain;
} table;

static kvpool *new_pool(void)
{
    kvpool *p;
    llmq_err err = {0};
    if (kvpool_create(&p, N_BLOCKS, BS, &err) != 0) {
        printf("FAIL - kvpool_create: %s\n", err.msg);
        exit(1);
    }
    return p;
}

/* A table that computed tokens[0..n) (whole blocks) and published them. */
static void compute(kvpool *p, table *t, const int32_t *tokens, int32_t n)
{
    *t = (table){.n = 0};
    kvpool_chain_reset(&t->chain);
    kvpool_reserve(p, t->ids, &t->n, n);
    kvpool_publish(p, t->ids, tokens, n / BS, &t->chain);
    kvpool_assert_consistent(p);
}

static int32_t match(kvpool *p, table *t, const int32_t *tokens, int32_t n)
{
    *t = (table){.n = 0};
    const int32_t got = kvpool_match(p, tokens, n, t->ids, &t->n, &t->chain);
    kvpool_assert_consistent(p);
    return got;
}

static void release(kvpool *p, table *t)
{
    kvpool_release(p, t->ids, &t->n);
    kvpool_assert_consistent(p);
}

static void test_reserve(void)
{
    kvpool *p = new_pool();
    table a = {.n = 0}, b = {.n = 0};
    CHECK(kvpool_reserve(p, a.ids, &a.n, 9) && a.n == 3 && kvpool_n_free(p) == N_BLOCKS - 3,
          "9 tokens take 3 blocks of 4");
    CHECK(kvpool_reserve(p, a.ids, &a.n, 12) && a.n == 3,
          "growing within the last block takes none");
    CHECK(!kvpool_reserve(p, b.ids, &b.n, 6 * BS) && b.n == 0 && kvpool_n_free(p) == N_BLOCKS - 3,
          "a reservation the pool cannot meet takes nothing");
    release(p, &a);
    CHECK(a.n == 0 && kvpool_n_free(p) == N_BLOCKS && kvpool_n_refs(p) == 0,
          "released blocks are free again");
    kvpool_free(p);
}

static void test_match(void)
{
    kvpool *p = new_pool();
    const int32_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    table a, b;
    compute(p, &a, x, 12);
    int32_t y[12];
    memcpy(y, x, sizeof y);
    CHECK(match(p, &b, y, 12) == 3 && memcmp(a.ids, b.ids, sizeof(int32_t) * 3) == 0,
          "the same 12 tokens match the 3 published blocks");
    CHECK(kvpool_n_refs(p) == 6 && kvpool_n_free(p) == N_BLOCKS - 3,
          "a shared block is one block with two references");
    release(p, &b);
    CHECK(match(p, &b, y, 11) == 2, "11 tokens match 2 whole blocks, not the partial third");
    release(p, &b);
    y[6] = 99;
    CHECK(match(p, &b, y, 12) == 1, "a token differing in block 2 stops the match after block 1");
    release(p, &b);
    const int32_t shifted[8] = {5, 6, 7, 8, 1, 2, 3, 4};
    CHECK(match(p, &b, shifted, 8) == 0,
          "block 2's tokens as a first block do not match: a block is its whole prefix");
    release(p, &b);
    release(p, &a);
    CHECK(kvpool_n_free(p) == N_BLOCKS && kvpool_n_cached_idle(p) == 3,
          "released published blocks stay cached, and count as free");
    CHECK(match(p, &b, x, 12) == 3 && kvpool_n_cached_idle(p) == 0,
          "idle cached blocks are matched again, and held");
    release(p, &b);
    kvpool_free(p);
}

static void test_eviction(void)
{
    kvpool *p = new_pool();
    const int32_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    table a, b, c = {.n = 0};
    compute(p, &a, x, 12);
    release(p, &a);
    /* 5 unused + 3 idle: a 6-block reservation evicts one, the prefix's last. */
    CHECK(kvpool_reserve(p, c.ids, &c.n, 6 * BS) && kvpool_n_cached_idle(p) == 2,
          "a reservation takes the unused blocks first, then evicts");
    CHECK(match(p, &b, x, 12) == 2, "the last block of the prefix was evicted first");
    release(p, &b);
    release(p, &c);
    /* Evict the rest: the first block goes last. */
    CHECK(kvpool_reserve(p, c.ids, &c.n, 7 * BS) && kvpool_n_cached_idle(p) == 1 &&
              match(p, &b, x, 12) == 1,
          "the first block of a prefix outlives its continuations");
    release(p, &b);
    release(p, &c);
    kvpool_free(p);
}

static void test_broken_chain(void)
{
    kvpool *p = new_pool();
    const int32_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    table a, b, c;
    /* a computes block 0 and publishes it; b matches it; a lets go. */
    compute(p, &a, x, 4);
    match(p, &b, x, 4);
    release(p, &a);
    /* b grows by two blocks but publishes them later; meanwhile its parent
     * is held by b, so it cannot be evicted: the chain stays whole. */
    kvpool_reserve(p, b.ids, &b.n, 12);
    kvpool_publish(p, b.ids, x, 3, &b.chain);
    kvpool_assert_consistent(p);
    CHECK(b.chain.n_done == 3 && !b.chain.broken, "a table publishes after the blocks it matched");
    release(p, &b);
    /* A duplicate: c computes the same 12 tokens while they are cached. */
    compute(p, &c, x, 12);
    CHECK(c.chain.n_done == 3 && kvpool_n_cached_idle(p) == 3,
          "contents published twice are kept once; the chain continues from the kept copy");
    release(p, &c);
    CHECK(kvpool_n_cached_idle(p) == 3 && kvpool_n_free(p) == N_BLOCKS,
          "the duplicates return unused");
    /* Break a chain: d is admitted (2 blocks) before e computes and
     * publishes the same first block and lets it go; d's copy is then a
     * duplicate, its chain goes on from e's idle block, which a reservation
     * evicts before d publishes its second block. */
    const int32_t y[8] = {7, 7, 7, 7, 8, 8, 8, 8};
    table d = {.n = 0}, e, hog = {.n = 0};
    kvpool_chain_reset(&d.chain);
    kvpool_reserve(p, d.ids, &d.n, 8);
    compute(p, &e, y, 4);
    const int32_t published = e.ids[0];
    release(p, &e);
    kvpool_publish(p, d.ids, y, 1, &d.chain);
    CHECK(d.chain.parent == published && d.chain.n_done == 1,
          "a duplicate first block: the chain goes on from the published copy");
    kvpool_reserve(p, hog.ids, &hog.n, (int64_t)kvpool_n_free(p) * BS);
    kvpool_publish(p, d.ids, y, 2, &d.chain);
    kvpool_assert_consistent(p);
    CHECK(d.chain.broken && d.chain.n_done == 1,
          "a table whose chain's parent was evicted stops publishing");
    release(p, &d);
    release(p, &hog);
    CHECK(kvpool_n_free(p) == N_BLOCKS && kvpool_n_refs(p) == 0, "everything comes back");
    kvpool_free(p);
}

int main(void)
{
    test_reserve();
    test_match();
    test_eviction();
    test_broken_chain();
    return check_done();
}
