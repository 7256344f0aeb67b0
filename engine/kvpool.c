#include "engine/kvpool.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

/* A block is in one of three states: held (refs > 0; published or not),
 * idle (no references, published: on the LRU list, in the index) or unused
 * (no references, not published: on the unused stack). */
struct kvpool {
    int32_t n_blocks;
    int32_t block_size;
    int32_t *refs;
    int64_t n_refs;
    int32_t *unused; /* stack of unused block ids */
    int32_t n_unused;
    /* Published blocks: what each holds, and the index that finds them. */
    uint8_t *published;
    int32_t *parent;      /* the published block before it, -1 for a first block */
    uint32_t *parent_gen; /* that block's generation then */
    uint32_t *gen;        /* bumped when a block is evicted: its old identity is gone */
    int32_t *tokens;      /* n_blocks x block_size */
    uint64_t *key;
    int32_t *bucket; /* heads of the index's chains, by key & bucket_mask */
    int32_t *next_in_bucket;
    uint64_t bucket_mask;
    /* Idle blocks, least recently released first. */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail, n_idle;
};

int kvpool_create(kvpool **out, int32_t n_blocks, int32_t block_size, llmq_err *err)
{
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return llmq_errf(err, "kv pool: %d blocks of %d tokens", n_blocks, block_size);
    kvpool *p = calloc(1, sizeof *p);
    if (!p)
        return llmq_errf(err, "kv pool: out of memory");
    uint64_t buckets = 1;
    while (buckets < (uint64_t)n_blocks)
        buckets <<= 1;
    const size_t n = (size_t)n_blocks;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->bucket_mask = buckets - 1;
    p->refs = calloc(n, sizeof *p->refs);
    p->unused = malloc(n * sizeof *p->unused);
    p->published = calloc(n, 1);
    p->parent = malloc(n * sizeof *p->parent);
    p->parent_gen = malloc(n * sizeof *p->parent_gen);
    p->gen = calloc(n, sizeof *p->gen);
    p->tokens = malloc(n * (size_t)block_size * sizeof *p->tokens);
    p->key = malloc(n * sizeof *p->key);
    p->bucket = malloc((size_t)buckets * sizeof *p->bucket);
    p->next_in_bucket = malloc(n * sizeof *p->next_in_bucket);
    p->lru_prev = malloc(n * sizeof *p->lru_prev);
    p->lru_next = malloc(n * sizeof *p->lru_next);
    if (!p->refs || !p->unused || !p->published || !p->parent || !p->parent_gen || !p->gen ||
        !p->tokens || !p->key || !p->bucket || !p->next_in_bucket || !p->lru_prev || !p->lru_next) {
        kvpool_free(p);
        return llmq_errf(err, "kv pool: out of memory for %d blocks", n_blocks);
    }
    /* Lowest ids on top, so a fresh engine fills the cache from its start. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->unused[i] = n_blocks - 1 - i;
    p->n_unused = n_blocks;
    for (uint64_t i = 0; i < buckets; i++)
        p->bucket[i] = -1;
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return 0;
}

void kvpool_free(kvpool *p)
{
    if (!p)
        return;
    free(p->refs);
    free(p->unused);
    free(p->published);
    free(p->parent);
    free(p->parent_gen);
    free(p->gen);
    free(p->tokens);
    free(p->key);
    free(p->bucket);
    free(p->next_in_bucket);
    free(p->lru_prev);
    free(p->lru_next);
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
    return p->n_unused + p->n_idle;
}
int32_t kvpool_n_cached_idle(const kvpool *p)
{
    return p->n_idle;
}
int64_t kvpool_n_refs(const kvpool *p)
{
    return p->n_refs;
}

int32_t kvpool_blocks_for(const kvpool *p, int64_t n_tokens)
{
    return (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

void kvpool_chain_reset(kvpool_chain *chain)
{
    *chain = (kvpool_chain){.parent = -1};
}

/* ---- the LRU list of idle blocks ---- */

static void lru_push_newest(kvpool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->n_idle++;
}

static void lru_remove(kvpool *p, int32_t b)
{
    const int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next >= 0)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->n_idle--;
}

/* ---- the index of published blocks ---- */

/* FNV-1a over the parent's identity and the tokens: only to pick a chain;
 * index_find compares the real thing. */
static uint64_t block_key(const kvpool *p, int32_t parent, uint32_t parent_gen,
                          const int32_t *tokens)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const uint32_t words[2] = {(uint32_t)parent, parent_gen};
    for (int i = 0; i < 2 + p->block_size; i++) {
        h ^= i < 2 ? words[i] : (uint32_t)tokens[i - 2];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int32_t index_find(const kvpool *p, uint64_t key, int32_t parent, uint32_t parent_gen,
                          const int32_t *tokens)
{
    for (int32_t b = p->bucket[key & p->bucket_mask]; b >= 0; b = p->next_in_bucket[b])
        if (p->key[b] == key && p->parent[b] == parent && p->parent_gen[b] == parent_gen &&
            memcmp(p->tokens + (size_t)b * p->block_size, tokens,
                   (size_t)p->block_size * sizeof *tokens) == 0)
            return b;
    return -1;
}

static void index_remove(kvpool *p, int32_t b)
{
    int32_t *link = &p->bucket[p->key[b] & p->bucket_mask];
    while (*link != b) {
        LLMQ_ASSERT(*link >= 0, "published block %d is not in its index chain", b);
        link = &p->next_in_bucket[*link];
    }
    *link = p->next_in_bucket[b];
}

static void publish_block(kvpool *p, int32_t b, uint64_t key, const kvpool_chain *chain,
                          const int32_t *tokens)
{
    p->published[b] = 1;
    p->parent[b] = chain->parent;
    p->parent_gen[b] = chain->parent_gen;
    p->key[b] = key;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    int32_t *head = &p->bucket[key & p->bucket_mask];
    p->next_in_bucket[b] = *head;
    *head = b;
}

/* ---- tables ---- */

/* An unused block, else the least recently released idle one, forgotten. */
static int32_t take_block(kvpool *p)
{
    int32_t b;
    if (p->n_unused > 0) {
        b = p->unused[--p->n_unused];
    } else {
        b = p->lru_head;
        lru_remove(p, b);
        index_remove(p, b);
        p->published[b] = 0;
        p->gen[b]++;
    }
    p->refs[b] = 1;
    p->n_refs++;
    return b;
}

bool kvpool_reserve(kvpool *p, int32_t *table, int32_t *n_table, int64_t n_tokens)
{
    int32_t need = kvpool_blocks_for(p, n_tokens) - *n_table;
    if (need <= 0)
        return true;
    if (need > kvpool_n_free(p))
        return false;
    while (need-- > 0)
        table[(*n_table)++] = take_block(p);
    return true;
}

void kvpool_release(kvpool *p, const int32_t *table, int32_t *n_table)
{
    for (int32_t i = *n_table - 1; i >= 0; i--) {
        const int32_t b = table[i];
        LLMQ_ASSERT(b >= 0 && b < p->n_blocks && p->refs[b] > 0,
                    "block id %d of %d released with %d references", b, p->n_blocks,
                    b >= 0 && b < p->n_blocks ? p->refs[b] : 0);
        if (--p->refs[b] > 0)
            continue;
        if (p->published[b])
            lru_push_newest(p, b);
        else
            p->unused[p->n_unused++] = b;
    }
    p->n_refs -= *n_table;
    *n_table = 0;
}

int32_t kvpool_match(kvpool *p, const int32_t *tokens, int64_t n, int32_t *table, int32_t *n_table,
                     kvpool_chain *chain)
{
    LLMQ_ASSERT(*n_table == 0, "matching into a table of %d blocks", *n_table);
    kvpool_chain_reset(chain);
    const int64_t bs = p->block_size;
    for (int64_t i = 0; (i + 1) * bs <= n; i++) {
        const int32_t *t = tokens + i * bs;
        const int32_t b = index_find(p, block_key(p, chain->parent, chain->parent_gen, t),
                                     chain->parent, chain->parent_gen, t);
        if (b < 0)
            break;
        if (p->refs[b]++ == 0)
            lru_remove(p, b);
        p->n_refs++;
        table[(*n_table)++] = b;
        *chain = (kvpool_chain){.n_done = *n_table, .parent = b, .parent_gen = p->gen[b]};
    }
    return *n_table;
}

void kvpool_publish(kvpool *p, const int32_t *table, const int32_t *tokens, int32_t n_full,
                    kvpool_chain *chain)
{
    for (int32_t i = chain->n_done; i < n_full && !chain->broken; i++) {
        if (chain->parent >= 0 && p->gen[chain->parent] != chain->parent_gen) {
            chain->broken = true;
            break;
        }
        const int32_t b = table[i], *t = tokens + (size_t)i * p->block_size;
        LLMQ_ASSERT(!p->published[b] && p->refs[b] > 0,
                    "publishing block %d (published %d, %d references)", b, p->published[b],
                    p->refs[b]);
        const uint64_t key = block_key(p, chain->parent, chain->parent_gen, t);
        int32_t c = index_find(p, key, chain->parent, chain->parent_gen, t);
        if (c < 0) {
            publish_block(p, b, key, chain, t);
            c = b;
        }
        *chain = (kvpool_chain){.n_done = i + 1, .parent = c, .parent_gen = p->gen[c]};
    }
}

void kvpool_assert_consistent(const kvpool *p)
{
    int64_t refs = 0;
    int32_t held = 0, idle = 0, unused = 0, listed = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) {
        refs += p->refs[b];
        if (p->refs[b] > 0)
            held++;
        else if (p->published[b])
            idle++;
        else
            unused++;
        if (p->published[b])
            LLMQ_ASSERT(index_find(p, p->key[b], p->parent[b], p->parent_gen[b],
                                   p->tokens + (size_t)b * p->block_size) == b,
                        "published block %d is not what the index finds for its contents", b);
    }
    for (int32_t b = p->lru_head; b >= 0; b = p->lru_next[b])
        listed++;
    LLMQ_ASSERT(refs == p->n_refs && idle == p->n_idle && listed == idle && unused == p->n_unused &&
                    held + idle + unused == p->n_blocks,
                "kv pool: %lld references (counted %lld), %d held, %d idle (counted %d, listed "
                "%d), %d unused (counted %d), of %d blocks",
                (long long)refs, (long long)p->n_refs, held, idle, p->n_idle, listed, unused,
                p->n_unused, p->n_blocks);
}
