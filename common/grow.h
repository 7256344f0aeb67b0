/* grow: room in a growable array.
 *
 * A growable array is the caller's pointer, the caller's count and a
 * capacity that grow_reserve keeps: it makes room for a count, doubling the
 * capacity so that n appends cost O(n) element copies in all.  A request
 * whose byte size does not fit in size_t is refused like a failed
 * allocation, before anything is allocated.  On either failure the array
 * and its capacity are left as they were -- still valid, still the caller's
 * to free -- and the caller, who knows what was growing, says so. */
#ifndef LLMQ_COMMON_GROW_H
#define LLMQ_COMMON_GROW_H

#include <stddef.h>

/* The capacity a first reservation starts from, unless it needs more. */
#define GROW_MIN_CAP 16

/* Makes the array at *array (elem_size bytes an element, room for *cap;
 * NULL with *cap 0 before the first call) hold at least need elements.
 * array is the address of the caller's pointer, a T ** for any T.  0 on
 * success; -1 when need elements do not fit in memory or in size_t, with
 * *array and *cap unchanged. */
int grow_reserve(void *array, size_t *cap, size_t need, size_t elem_size);

#endif
