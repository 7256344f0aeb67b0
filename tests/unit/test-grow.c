/* test-grow: grow_reserve, the one growth rule of every growable array.
 *
 * Pins: a first reservation starts at GROW_MIN_CAP; appends double the
 * capacity (a thousand appends, a handful of reallocations) and keep every
 * element; a reservation within the capacity leaves array and capacity as
 * they are; one far beyond it goes there in one step; a size that overflows
 * size_t is refused before any allocation, leaving the array, its
 * capacity and its contents as they were. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/grow.h"
#include "tests/unit/check.h"

static void test_first_reservation(void)
{
    int64_t *v = NULL;
    size_t cap = 0;
    CHECK(grow_reserve(&v, &cap, 1, sizeof *v) == 0 && v && cap == GROW_MIN_CAP,
          "the first reservation of 1 allocates GROW_MIN_CAP (%zu)", cap);
    free(v);
}

static void test_appends_double(void)
{
    int32_t *v = NULL;
    size_t cap = 0, n = 0;
    int grows = 0, failed = 0;
    for (int32_t i = 0; i < 1000; i++) {
        const size_t before = cap;
        failed |= grow_reserve(&v, &cap, n + 1, sizeof *v);
        grows += cap != before;
        v[n++] = i;
    }
    bool kept = !failed;
    for (int32_t i = 0; kept && i < 1000; i++)
        kept = v[i] == i;
    CHECK(kept, "1000 appends keep every element in order");
    CHECK(cap == 1024 && grows == 7, "the capacity doubles from 16 to 1024: %d reallocations",
          grows);
    free(v);
}

static void test_within_and_beyond(void)
{
    char *v = NULL;
    size_t cap = 0;
    grow_reserve(&v, &cap, 20, 1);
    char *const at = v;
    const size_t cap_at = cap;
    CHECK(grow_reserve(&v, &cap, cap_at, 1) == 0 && v == at && cap == cap_at,
          "a reservation within the capacity changes nothing");
    CHECK(grow_reserve(&v, &cap, 5000, 1) == 0 && cap == 8192,
          "one far beyond it doubles there in one call (32 -> %zu)", cap);
    free(v);
}

static void test_overflow_refused(void)
{
    uint64_t *v = NULL;
    size_t cap = 0;
    grow_reserve(&v, &cap, 3, sizeof *v);
    v[0] = 7, v[1] = 8, v[2] = 9;
    uint64_t *const at = v;
    const size_t cap_at = cap;
    CHECK(grow_reserve(&v, &cap, SIZE_MAX / sizeof *v + 1, sizeof *v) == -1 && v == at &&
              cap == cap_at && v[0] == 7 && v[1] == 8 && v[2] == 9,
          "a count whose byte size overflows is refused; array, capacity and contents stay");
    CHECK(grow_reserve(&v, &cap, SIZE_MAX, 2) == -1 && v == at && cap == cap_at,
          "so is SIZE_MAX elements of 2 bytes");
    free(v);
}

int main(void)
{
    test_first_reservation();
    test_appends_double();
    test_within_and_beyond();
    test_overflow_refused();
    return check_done();
}
