/* idset: a set of job ids (>= 1), for a client to hand out each job's
 * result once although the broker may send it again (a wait sent again
 * after a broker restart is answered with every job already final).
 *
 * Open addressing over a power-of-two table kept at most half full, so a
 * look-up or an insertion costs O(1) on average.  Zero is the empty slot,
 * which is why 0 is not an id (the wire refuses job id 0, so no result
 * carries one); the set never holds it.  A zeroed idset is an empty set. */
#ifndef LLMQ_PROTO_IDSET_H
#define LLMQ_PROTO_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct idset {
    uint64_t *slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
} idset;

bool idset_has(const idset *s, uint64_t id);
/* 1 when id (>= 1) was added, 0 when it was there already, -1 when memory
 * ran out (the set unchanged). */
int idset_add(idset *s, uint64_t id);
void idset_free(idset *s);

#endif
