#include "broker/pool.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

static void worker_free(pool_worker *w)
{
    if (!w)
        return;
    net_peer_close(&w->peer);
    free(w->name);
    free(w->host);
    free(w->model);
    for (uint32_t i = 0; i < w->n_aliases; i++)
        free(w->aliases[i]);
    free(w->aliases);
    free(w->gpu_name);
    free(w->engine);
    free(w);
}

/* NULL stays NULL; otherwise a copy, *ok cleared when memory runs out. */
static char *dup_opt(const char *s, bool *ok)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *ok = false;
    return d;
}

static void copy_aliases(pool_worker *w, const wire_hello *h, bool *ok)
{
    if (h->n_aliases == 0)
        return;
    w->aliases = calloc(h->n_aliases, sizeof *w->aliases);
    if (!w->aliases) {
        *ok = false;
        return;
    }
    w->n_aliases = h->n_aliases;
    for (uint32_t i = 0; i < h->n_aliases; i++)
        w->aliases[i] = dup_opt(h->aliases[i], ok);
}

static pool_worker *worker_new(const wire_hello *h, const net_peer *peer,
                               int64_t id, int64_t now)
{
    pool_worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    bool ok = true;
    w->name = dup_opt(h->worker, &ok);
    w->host = dup_opt(h->host, &ok);
    w->model = dup_opt(h->model, &ok);
    copy_aliases(w, h, &ok);
    w->gpu_name = dup_opt(h->gpu_name, &ok);
    w->engine = dup_opt(h->engine, &ok);
    net_peer_copy(&w->peer, peer);
    if (!ok) {
        worker_free(w);
        return NULL;
    }
    w->id = id;
    w->pid = h->pid;
    w->gpu_index = h->gpu_index;
    w->slots = h->slots;
    w->n_ctx = h->n_ctx;
    w->since = w->last_heard = w->last_sent = now;
    return w;
}

int pool_add(pool *p, const wire_hello *h, const net_peer *peer, int64_t id,
             int64_t now, pool_worker **out, llmq_err *err)
{
    if (grow_reserve(&p->v, &p->cap, p->n + 1, sizeof *p->v))
        return llmq_errf(err, "out of memory adding worker %s", h->worker);
    pool_worker *w = worker_new(h, peer, id, now);
    if (!w)
        return llmq_errf(err, "out of memory adding worker %s", h->worker);
    p->v[p->n++] = w;
    *out = w;
    return 0;
}

pool_worker *pool_by_peer(const pool *p, const net_peer *peer)
{
    for (size_t i = 0; i < p->n; i++)
        if (net_peer_same(&p->v[i]->peer, peer))
            return p->v[i];
    return NULL;
}

pool_worker *pool_by_name(const pool *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i]->name, name) == 0)
            return p->v[i];
    return NULL;
}

pool_worker *pool_by_id(const pool *p, int64_t id)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i]->id == id)
            return p->v[i];
    return NULL;
}

static bool answers_to(const pool_worker *w, const char *model)
{
    if (w->model && strcmp(w->model, model) == 0)
        return true;
    for (uint32_t i = 0; i < w->n_aliases; i++)
        if (w->aliases[i] && strcmp(w->aliases[i], model) == 0)
            return true;
    return false;
}

bool pool_serves(const pool *p, const char *model)
{
    for (size_t i = 0; i < p->n; i++)
        if (answers_to(p->v[i], model))
            return true;
    return false;
}

void pool_remove(pool *p, pool_worker *w)
{
    for (size_t i = 0; i < p->n; i++) {
        if (p->v[i] == w) {
            p->v[i] = p->v[--p->n];
            worker_free(w);
            return;
        }
    }
}

void pool_free(pool *p)
{
    for (size_t i = 0; i < p->n; i++)
        worker_free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}

uint32_t pool_credit(pool_worker *w, uint32_t n)
{
    uint64_t room = w->slots > (uint64_t)w->credits + w->busy
                        ? w->slots - (uint64_t)w->credits - w->busy
                        : 0;
    uint32_t take = n < room ? n : (uint32_t)room;
    w->credits += take;
    return n - take;
}

void pool_round(pool *p)
{
    p->round++;
}

static bool better(const pool_worker *a, const pool_worker *b)
{
    if (!b)
        return true;
    if (a->credits != b->credits)
        return a->credits > b->credits;
    return a->last_job < b->last_job;
}

pool_worker *pool_pick(const pool *p)
{
    pool_worker *best = NULL;
    for (size_t i = 0; i < p->n; i++) {
        pool_worker *w = p->v[i];
        if (w->credits && !w->draining && !w->distrusted &&
            w->skip_round != p->round && better(w, best))
            best = w;
    }
    return best;
}

void pool_sent(pool *p, pool_worker *w)
{
    w->credits--;
    w->busy++;
    w->last_job = ++p->seq;
}

void pool_skip(const pool *p, pool_worker *w)
{
    w->skip_round = p->round;
}
