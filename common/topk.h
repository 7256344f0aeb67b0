/* topk: the k best entries of a row of floats under one total order --
 * larger value first, ties to the lower id -- which the sampler's truncation
 * and the backends' top_k op share, so that a candidate set chosen by a
 * backend is exactly the one the sampler would choose from the whole row.
 * NaN is not ordered by it: callers keep rows that hold one away. */
#ifndef LLMQ_COMMON_TOPK_H
#define LLMQ_COMMON_TOPK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct topk_entry {
    float value;
    int32_t id;
} topk_entry;

static inline bool topk_better(topk_entry a, topk_entry b)
{
    return a.value > b.value || (a.value == b.value && a.id < b.id);
}

/* The k best of x[0..n) (entry i has id ids[i], or i when ids is NULL)
 * into out[0..k), best first; 1 <= k <= n.  One pass with a size-k heap
 * (most entries cost one comparison with its root), then a heapsort of the
 * k survivors. */
void topk_select(topk_entry *out, const float *x, const int32_t *ids, int32_t n, int32_t k);

/* qsort comparator for the order above (best first). */
int topk_cmp(const void *a, const void *b);

#endif
