#include "worker/jobs.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

int jobs_init(jobs *t, uint32_t cap, llmq_err *err)
{
    memset(t, 0, sizeof *t);
    t->v = calloc(cap ? cap : 1, sizeof *t->v);
    if (!t->v)
        return llmq_errf(err, "out of memory for a job table of %u slots", cap);
    t->cap = cap;
    return 0;
}

void jobs_free(jobs *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

jobs_entry *jobs_find(jobs *t, uint64_t id)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (t->v[i].id == id)
            return &t->v[i];
    return NULL;
}

jobs_entry *jobs_add(jobs *t, uint64_t id, uint32_t attempt)
{
    if (t->n == t->cap)
        return NULL;
    jobs_entry *e = &t->v[t->n++];
    *e = (jobs_entry){.id = id, .attempt = attempt};
    LLMQ_ASSERT(t->n + (uint64_t)t->credits <= t->cap, "%u jobs held and %u credits of %u slots",
                t->n, t->credits, t->cap);
    return e;
}

void jobs_remove(jobs *t, jobs_entry *e)
{
    *e = t->v[--t->n];
    t->withheld = 0;
}

uint32_t jobs_grantable(const jobs *t)
{
    uint64_t used = (uint64_t)t->n + t->credits + t->withheld;
    return used < t->cap ? t->cap - (uint32_t)used : 0;
}

void jobs_granted(jobs *t, uint32_t n)
{
    LLMQ_ASSERT(n <= jobs_grantable(t), "%u credits granted, %u grantable", n, jobs_grantable(t));
    t->credits += n;
}

void jobs_arrived(jobs *t)
{
    if (t->credits)
        t->credits--;
}

void jobs_new_session(jobs *t)
{
    t->credits = 0;
    t->withheld = 0;
}

void jobs_withhold(jobs *t)
{
    if (t->n > 0 && t->withheld < t->cap)
        t->withheld++;
}

uint32_t jobs_mark_stale(jobs *t)
{
    for (uint32_t i = 0; i < t->n; i++)
        t->v[i].stale = true;
    return t->n;
}

uint32_t jobs_n_stale(const jobs *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        n += t->v[i].stale;
    return n;
}
