#include "broker/waiters.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

static void waiter_free(waiter *w)
{
    net_peer_close(&w->peer);
    free(w->ids);
    free(w->final);
    free(w);
}

int waiters_add(waiters *ws, const waiter_spec *spec, int64_t *ids, bool *final,
                size_t n, size_t pending, llmq_err *err)
{
    waiter *w = NULL;
    if (grow_reserve(&ws->v, &ws->cap, ws->n + 1, sizeof *ws->v))
        goto oom;
    w = calloc(1, sizeof *w);
    if (!w)
        goto oom;
    net_peer_copy(&w->peer, spec->peer);
    w->req = spec->req;
    w->stream = spec->stream;
    w->deadline = spec->deadline;
    w->beat_ms = spec->beat_ms;
    w->next_beat = spec->now + spec->beat_ms;
    w->ids = ids;
    w->final = final;
    w->n = n;
    w->pending = pending;
    ws->v[ws->n++] = w;
    ws->total_ids += n;
    return 0;
oom:
    free(ids);
    free(final);
    return llmq_errf(err, "out of memory registering a wait on %zu jobs", n);
}

static void remove_at(waiters *ws, size_t i)
{
    ws->total_ids -= ws->v[i]->n;
    waiter_free(ws->v[i]);
    ws->v[i] = ws->v[--ws->n];
}

static long find_id(const waiter *w, int64_t id)
{
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->n && w->ids[lo] == id ? (long)lo : -1;
}

/* Marks job_id in w; 1 if it was pending there, 0 if not selected or
 * already final. */
static int mark(waiter *w, int64_t job_id)
{
    long i = find_id(w, job_id);
    if (i < 0 || w->final[i])
        return 0;
    w->final[i] = true;
    w->pending--;
    return 1;
}

int waiters_final(waiters *ws, int64_t job_id, waiter_fn fn, void *ctx,
                  llmq_err *err)
{
    for (size_t i = 0; i < ws->n;) {
        waiter *w = ws->v[i];
        if (!mark(w, job_id)) {
            i++;
            continue;
        }
        if (fn(ctx, w, WAITER_RESULT, job_id, false, err))
            return -1;
        if (w->pending) {
            i++;
            continue;
        }
        if (fn(ctx, w, WAITER_END, 0, false, err))
            return -1;
        remove_at(ws, i); /* swaps the last one into i: look at i again */
    }
    return 0;
}

int waiters_expire(waiters *ws, int64_t now, waiter_fn fn, void *ctx,
                   llmq_err *err)
{
    for (size_t i = 0; i < ws->n;) {
        if (ws->v[i]->deadline > now) {
            i++;
            continue;
        }
        if (fn(ctx, ws->v[i], WAITER_END, 0, true, err))
            return -1;
        remove_at(ws, i);
    }
    return 0;
}

int waiters_beat(waiters *ws, int64_t now, waiter_fn fn, void *ctx,
                 llmq_err *err)
{
    for (size_t i = 0; i < ws->n; i++) {
        waiter *w = ws->v[i];
        if (!w->beat_ms || w->next_beat > now)
            continue;
        w->next_beat = now + w->beat_ms;
        if (fn(ctx, w, WAITER_ALIVE, 0, false, err))
            return -1;
    }
    return 0;
}

int waiters_end_all(waiters *ws, waiter_fn fn, void *ctx, llmq_err *err)
{
    while (ws->n) {
        if (fn(ctx, ws->v[ws->n - 1], WAITER_END, 0, false, err))
            return -1;
        remove_at(ws, ws->n - 1);
    }
    return 0;
}

void waiters_drop_peer(waiters *ws, const net_peer *peer)
{
    for (size_t i = 0; i < ws->n;) {
        if (net_peer_same(&ws->v[i]->peer, peer))
            remove_at(ws, i);
        else
            i++;
    }
}

int64_t waiters_next_due(const waiters *ws)
{
    int64_t next = INT64_MAX;
    for (size_t i = 0; i < ws->n; i++) {
        const waiter *w = ws->v[i];
        if (w->deadline < next)
            next = w->deadline;
        if (w->beat_ms && w->next_beat < next)
            next = w->next_beat;
    }
    return next;
}

void waiters_free(waiters *ws)
{
    while (ws->n)
        remove_at(ws, ws->n - 1);
    free(ws->v);
    memset(ws, 0, sizeof *ws);
}
