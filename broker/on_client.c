/* on_client: the client requests of docs/PROTOCOL.md §5 (submit, status,
 * cancel, wait, stats) and the results pushed to waiting clients. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker_priv.h"
#include "common/grow.h"
#include "broker/lpblob.h"
#include "common/utf8.h"

/* Job ids all waits together may hold, so that waits cannot exhaust memory. */
#define MAX_WAITED_IDS 10000000u

/* ---- who sees what ------------------------------------------------------- */

/* Under CURVE a job belongs to the client key that submitted it, and any
 * other key cannot tell it from a job that does not exist; admin keys see
 * every job.  Without CURVE there are no identities (one machine's users,
 * docs/PROTOCOL.md §1): every client sees every job. */
static bool sees_all(const broker *b, const net_peer *p)
{
    return !b->curve ||
           (b->admin_clients.set && zap_list_admits(&b->admin_clients, p->key));
}

static bool owns(const net_peer *p, const char *owner)
{
    return owner && p->key[0] && strcmp(owner, p->key) == 0;
}

/* ---- submit ------------------------------------------------------------- */

static store_job job_from_wire(const wire_job *j, const char *owner,
                               const char *batch, int64_t submit_id)
{
    return (store_job){
        .client_key = j->key,
        .owner = owner,
        .batch_id = batch,
        .model = j->model,
        .submit_id = submit_id,
        .priority = j->priority,
        .prompt = j->prompt,
        .prompt_ids = j->tokens,
        .n_prompt_ids = j->tokens ? j->n_tokens : 0,
        .messages = j->messages,
        .n_messages = j->messages ? j->n_messages : 0,
        .params = j->params,
    };
}

/* A job's key that names a job of another batch: jobs[at], job id. */
typedef struct key_clash {
    int64_t at, id;
} key_clash;

/* Why a submit stored nothing: the queue is full, a key names another
 * client's job, or one of this client's of another batch. */
typedef struct submit_stop {
    bool full;
    int64_t taken;   /* the job whose key is another client's, or -1 */
    key_clash clash; /* at: the job whose key is of another batch, or -1 */
} submit_stop;

static bool stopped(const submit_stop *stop)
{
    return stop->full || stop->taken >= 0 || stop->clash.at >= 0;
}

/* Another owner's job is as good as one's own to who sees every job. */
static store_submit_outcome as_seen(const broker *b, const net_peer *from,
                                    store_submit_outcome o)
{
    if (!sees_all(b, from))
        return o;
    return o == STORE_OTHER_OWNER         ? STORE_DUPLICATE
           : o == STORE_OTHER_OWNER_BATCH ? STORE_OTHER_BATCH
                                          : o;
}

/* Stores the jobs in order; at the first one that cannot be, stops (and
 * says why in *stop). */
static int submit_jobs(broker *b, const net_peer *from, const wire_submit *s,
                       uint64_t *ids, bool *existing, submit_stop *stop,
                       llmq_err *err)
{
    int64_t submit_id = 0;
    const char *owner = b->curve ? from->key : NULL;
    if (s->meta &&
        store_submit_meta(b->st, s->batch, s->meta, b->wall, &submit_id, err))
        return -1;
    for (uint32_t i = 0; i < s->n_jobs; i++) {
        store_job j = job_from_wire(&s->jobs[i], owner, s->batch, submit_id);
        int64_t id = 0;
        store_submit_outcome o;
        if (store_submit(b->st, &j, b->cfg.max_queued, b->wall, &id, &o, err))
            return -1;
        o = as_seen(b, from, o);
        stop->full = o == STORE_FULL;
        if (o == STORE_OTHER_OWNER || o == STORE_OTHER_OWNER_BATCH)
            stop->taken = i;
        if (o == STORE_OTHER_BATCH)
            stop->clash = (key_clash){i, id};
        if (stopped(stop))
            return 0;
        ids[i] = (uint64_t)id;
        existing[i] = o == STORE_DUPLICATE;
    }
    return 0;
}

/* A submit refused for field `name` of its job i: bad_value, naming it. */
static int refuse_job_field(broker *b, const net_peer *from, const wire_msg *m,
                            int64_t i, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static int refuse_job_field(broker *b, const net_peer *from, const wire_msg *m,
                            int64_t i, const char *name, const char *fmt, ...)
{
    char field[48], why[LLMQ_ERR_MAX];
    snprintf(field, sizeof field, "jobs[%" PRId64 "].%s", i, name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return broker_refuse(b, b->clients, from, m->req, WIRE_E_BAD_VALUE, field,
                         "%s: none of the %u jobs was stored", why,
                         m->submit.n_jobs);
}

/* Keys are global (docs/PROTOCOL.md §4): another client's key is refused
 * rather than answered with a job this client may not see. */
static int refuse_taken_key(broker *b, const net_peer *from, const wire_msg *m,
                            int64_t i)
{
    return refuse_job_field(b, from, m, i, "key",
                            "key '%s' names another client's job; use other"
                            " keys (llmq-submit: another --batch)",
                            m->submit.jobs[i].key);
}

static int reply_submit_ok(broker *b, const net_peer *from, uint64_t req,
                           const uint64_t *ids, const bool *existing,
                           uint32_t n, llmq_err *err)
{
    wire_msg r;
    wire_msg_init(&r, WIRE_T_SUBMIT_OK);
    r.req = req;
    r.submit_ok = (wire_submit_ok){.ids = ids, .existing = existing, .n = n};
    return broker_reply(b, b->clients, from, &r, err);
}

/* Model routing: a job for a model no worker serves now or served in the
 * window would wait for nobody; the client hears so at once, with nothing
 * stored (unless the operator chose to queue such jobs).  A broker that has
 * heard from no worker at all in the window knows no models to judge by (a
 * fresh start, before its workers are in): it queues them.  *bad: the index
 * of the first such job, or -1. */
static int unserved_model(broker *b, const wire_submit *s, int64_t *bad,
                          llmq_err *err)
{
    *bad = -1;
    if (b->cfg.queue_unknown_models)
        return 0;
    bool heard = b->pool.n > 0;
    if (!heard && store_worker_heard(b->st, b->wall - b->cfg.model_window_ms,
                                     &heard, err))
        return -1;
    if (!heard)
        return 0;
    for (uint32_t i = 0; i < s->n_jobs && *bad < 0; i++) {
        const char *model = s->jobs[i].model;
        bool seen = !model || pool_serves(&b->pool, model);
        if (!seen && store_model_seen(b->st, model,
                                      b->wall - b->cfg.model_window_ms, &seen,
                                      err))
            return -1;
        if (!seen)
            *bad = i;
    }
    return 0;
}

static int refuse_model(broker *b, const net_peer *from, const wire_msg *m,
                        int64_t i)
{
    return refuse_job_field(b, from, m, i, "model",
                            "no worker serves model '%s' nor served it in the"
                            " last %" PRId64 " ms",
                            m->submit.jobs[i].model, b->cfg.model_window_ms);
}

/* What would succeed: the room left now, and the limit, which no one
 * submit of new jobs can exceed. */
static int refuse_full(broker *b, const net_peer *from, const wire_msg *m)
{
    const int64_t queued = store_queued(b->st), limit = b->cfg.max_queued;
    return broker_refuse(
        b, b->clients, from, m->req, WIRE_E_QUEUE_FULL, NULL,
        "queue is full (%" PRId64 " jobs queued, limit %" PRId64
        "): none of the %u jobs was stored; %" PRId64
        " new jobs fit now and no submit of more than %" PRId64
        " ever does: send the rest in parts as the queue drains",
        queued, limit, m->submit.n_jobs, queued < limit ? limit - queued : 0,
        limit);
}

static int copy_batch(void *ctx, const store_outcome *o, llmq_err *err)
{
    (void)err;
    char *out = ctx;
    if (o->batch_id)
        snprintf(out, WIRE_MAX_NAME_BYTES + 16, "batch '%s'", o->batch_id);
    return 0;
}

/* A key names one job of one batch: a resubmission under another batch
 * would leave the job out of the batch the client waits on. */
static int refuse_clash(broker *b, const net_peer *from, const wire_msg *m,
                        const key_clash *k, llmq_err *err)
{
    const wire_submit *s = &m->submit;
    char theirs[WIRE_MAX_NAME_BYTES + 16] = "no batch", ours[sizeof theirs];
    bool found;
    if (store_outcome_get(b->st, k->id, copy_batch, theirs, &found, err))
        return -1;
    snprintf(ours, sizeof ours, s->batch ? "batch '%s'" : "no batch", s->batch);
    char field[48];
    snprintf(field, sizeof field, "jobs[%" PRId64 "].key", k->at);
    return broker_refuse(b, b->clients, from, m->req, WIRE_E_BAD_VALUE, field,
                         "'%s' already names job %" PRId64 " of %s, and this"
                         " submit is for %s: a key names one job of one batch;"
                         " none of the %u jobs was stored",
                         s->jobs[k->at].key, k->id, theirs, ours, s->n_jobs);
}

/* All or nothing: a savepoint undoes the jobs stored before the limit hit. */
static int on_submit(broker *b, const net_peer *from, const wire_msg *m,
                     llmq_err *err)
{
    const wire_submit *s = &m->submit;
    if (b->draining)
        return broker_refuse(b, b->clients, from, m->req, WIRE_E_SHUTTING_DOWN,
                             NULL, "the broker is stopping: nothing stored");
    if (b->no_room[0])
        return broker_refuse(b, b->clients, from, m->req, WIRE_E_UNAVAILABLE,
                             NULL,
                             "database full: %s: none of the %u jobs was"
                             " stored; retry later",
                             b->no_room, s->n_jobs);
    int64_t bad;
    if (unserved_model(b, s, &bad, err))
        return -1;
    if (bad >= 0)
        return refuse_model(b, from, m, bad);
    uint64_t *ids = malloc(s->n_jobs * sizeof *ids);
    bool *existing = malloc(s->n_jobs * sizeof *existing);
    submit_stop stop = {.taken = -1, .clash = {.at = -1}};
    int rc = ids && existing ? store_mark(b->st, err)
                             : llmq_errf(err, "out of memory for a submit");
    if (rc == 0)
        rc = submit_jobs(b, from, s, ids, existing, &stop, err);
    if (rc == 0 && stopped(&stop))
        store_mark_undo(b->st);
    else if (rc == 0)
        rc = store_mark_release(b->st, err);
    if (rc == 0 && stop.taken >= 0)
        rc = refuse_taken_key(b, from, m, stop.taken);
    else if (rc == 0 && stop.clash.at >= 0)
        rc = refuse_clash(b, from, m, &stop.clash, err);
    else if (rc == 0 && stop.full)
        rc = refuse_full(b, from, m);
    else if (rc == 0)
        rc = reply_submit_ok(b, from, m->req, ids, existing, s->n_jobs, err);
    free(ids);
    free(existing);
    return rc;
}

/* ---- selections: ids or a batch ------------------------------------------------ */

typedef struct idlist {
    int64_t *v;
    size_t n, cap;
} idlist;

static int idlist_push(idlist *l, int64_t id, llmq_err *err)
{
    if (grow_reserve(&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return llmq_errf(err, "out of memory selecting %zu jobs", l->n + 1);
    l->v[l->n++] = id;
    return 0;
}

/* The jobs of a selection that its sender may see. */
typedef struct visible {
    const net_peer *from;
    bool all; /* sees_all, asked once per selection */
    idlist *ids;
    bool seen; /* the last brief was visible */
} visible;

static visible visible_to(const broker *b, const net_peer *from, idlist *ids)
{
    return (visible){.from = from, .all = sees_all(b, from), .ids = ids};
}

static int collect_visible(void *ctx, const store_brief *br, llmq_err *err)
{
    visible *v = ctx;
    v->seen = v->all || owns(v->from, br->owner);
    return v->seen ? idlist_push(v->ids, br->id, err) : 0;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_unique(idlist *l)
{
    qsort(l->v, l->n, sizeof *l->v, cmp_id);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        if (k == 0 || l->v[k - 1] != l->v[i])
            l->v[k++] = l->v[i];
    l->n = k;
}

/* A job the sender may not see is answered as one that does not exist. */
static int resolve_ids(broker *b, const net_peer *from, uint64_t req,
                       const wire_select *sel, idlist *out, bool *refused,
                       llmq_err *err)
{
    visible v = visible_to(b, from, out);
    for (uint32_t i = 0; i < sel->n_ids; i++) {
        bool found;
        v.seen = false;
        if (store_brief_get(b->st, (int64_t)sel->ids[i], collect_visible, &v,
                            &found, err))
            return -1;
        if (!found || !v.seen) {
            char field[32];
            snprintf(field, sizeof field, "ids[%u]", i);
            *refused = true;
            return broker_refuse(b, b->clients, from, req, WIRE_E_UNKNOWN_JOB,
                                 field, "no job %" PRIu64, sel->ids[i]);
        }
    }
    sort_unique(out);
    return 0;
}

/* The sorted distinct ids a selection names, among the jobs its sender may
 * see; unknown ids or a batch with none of them are refused (*refused, the
 * error sent). */
static int resolve(broker *b, const net_peer *from, uint64_t req,
                   const wire_select *sel, idlist *out, bool *refused,
                   llmq_err *err)
{
    *refused = false;
    if (!sel->batch)
        return resolve_ids(b, from, req, sel, out, refused, err);
    int64_t n;
    visible v = visible_to(b, from, out);
    if (store_batch_briefs(b->st, sel->batch, collect_visible, &v, &n, err))
        return -1;
    if (out->n == 0) {
        *refused = true;
        return broker_refuse(b, b->clients, from, req, WIRE_E_UNKNOWN_BATCH,
                             "batch", "no job in batch '%s'", sel->batch);
    }
    return 0;
}

/* resolve, and refuse selections over `limit` jobs up front (replies list
 * at most WIRE_MAX_IDS jobs) with a useful message rather than a reply that
 * fails to encode. */
static int select_jobs(broker *b, const net_peer *from, uint64_t req,
                       const wire_select *sel, size_t limit, idlist *out,
                       bool *refused, llmq_err *err)
{
    int rc = resolve(b, from, req, sel, out, refused, err);
    if (rc || *refused)
        return rc;
    *refused = out->n > limit;
    if (!*refused)
        return 0;
    return broker_refuse(b, b->clients, from, req, WIRE_E_TOO_LARGE,
                         sel->batch ? "batch" : "ids",
                         "%zu jobs selected, at most %zu here", out->n, limit);
}

/* ---- status and cancel ------------------------------------------------------------ */

typedef struct states {
    wire_job_state *v;
    size_t n, cap;
    wire_counts counts;
} states;

static void count_state(wire_counts *c, store_state s)
{
    uint64_t *slot[STORE_N_STATES] = {
        [STORE_QUEUED] = &c->queued,       [STORE_RUNNING] = &c->running,
        [STORE_DONE] = &c->done,           [STORE_FAILED] = &c->failed,
        [STORE_CANCELLED] = &c->cancelled,
    };
    if ((unsigned)s < STORE_N_STATES)
        (*slot[s])++;
}

static int add_state(void *ctx, const store_brief *br, llmq_err *err)
{
    states *s = ctx;
    if (grow_reserve(&s->v, &s->cap, s->n + 1, sizeof *s->v))
        return llmq_errf(err, "out of memory listing %zu jobs", s->n + 1);
    char *worker = br->worker ? strdup(br->worker) : NULL;
    if (br->worker && !worker)
        return llmq_errf(err, "out of memory listing jobs");
    s->v[s->n++] = (wire_job_state){.id = (uint64_t)br->id,
                                    .state = broker_wire_state(br->state),
                                    .attempts = (uint32_t)br->attempts,
                                    .worker = worker};
    count_state(&s->counts, br->state);
    return 0;
}

static void states_free(states *s)
{
    for (size_t i = 0; i < s->n; i++)
        free((char *)s->v[i].worker);
    free(s->v);
}

static int reply_states(broker *b, const net_peer *from, uint64_t req,
                        wire_type type, const idlist *ids, llmq_err *err)
{
    states s = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ids->n; i++) {
        bool found;
        rc = store_brief_get(b->st, ids->v[i], add_state, &s, &found, err);
    }
    if (rc == 0) {
        wire_msg r;
        wire_msg_init(&r, type);
        r.req = req;
        r.jobs_reply = (wire_jobs_reply){.jobs = s.v, .n_jobs = (uint32_t)s.n,
                                         .counts = s.counts};
        rc = broker_reply(b, b->clients, from, &r, err);
    }
    states_free(&s);
    return rc;
}

static int on_status(broker *b, const net_peer *from, const wire_msg *m,
                     llmq_err *err)
{
    idlist ids = {0};
    bool refused;
    int rc = select_jobs(b, from, m->req, &m->select, WIRE_MAX_IDS, &ids,
                         &refused, err);
    if (rc == 0 && !refused)
        rc = reply_states(b, from, m->req, WIRE_T_STATUS_OK, &ids, err);
    free(ids.v);
    return rc;
}

/* A running job is also stopped on its worker, whose slot comes back with
 * the worker's next credit. */
static int cancel_one(broker *b, int64_t id, llmq_err *err)
{
    store_change ch;
    store_state was;
    int64_t worker_id;
    if (store_cancel(b->st, id, b->wall, &ch, &was, &worker_id, err))
        return -1;
    if (ch != STORE_APPLIED)
        return 0;
    pool_worker *w = was == STORE_RUNNING ? pool_by_id(&b->pool, worker_id)
                                          : NULL;
    if (w) {
        wire_msg c;
        wire_msg_init(&c, WIRE_T_JOB_CANCEL);
        c.cancel_id = (uint64_t)id;
        if (w->busy)
            w->busy--;
        w->last_sent = b->now;
        if (broker_reply(b, b->workers, &w->peer, &c, err))
            return -1;
    }
    if (b->cfg.verbose)
        broker_log("job %" PRId64 " cancelled (was %s)", id,
                   store_state_name(was));
    return broker_job_final(b, id, err);
}

static int on_cancel(broker *b, const net_peer *from, const wire_msg *m,
                     llmq_err *err)
{
    idlist ids = {0};
    bool refused;
    int rc = select_jobs(b, from, m->req, &m->select, WIRE_MAX_IDS, &ids,
                         &refused, err);
    for (size_t i = 0; rc == 0 && !refused && i < ids.n; i++)
        rc = cancel_one(b, ids.v[i], err);
    if (rc == 0 && !refused)
        rc = reply_states(b, from, m->req, WIRE_T_CANCEL_OK, &ids, err);
    free(ids.v);
    return rc;
}

/* ---- results and waits -------------------------------------------------------------- */

/* Failure reasons of many attempts can exceed what a message carries: cut
 * at a character boundary. */
static const char *fit_message(const char *s, char *buf, size_t size)
{
    if (!s || strlen(s) < size)
        return s;
    size_t n = utf8_valid_prefix(s, size - 1);
    memcpy(buf, s, n);
    buf[n] = 0;
    return buf;
}

static void result_from_outcome(const store_outcome *o, wire_result *r,
                                char *errbuf, size_t errsize)
{
    memset(r, 0, sizeof *r);
    r->id = (uint64_t)o->job_id;
    r->attempt = (uint32_t)o->attempts;
    r->state = broker_wire_state(o->state);
    r->key = o->client_key;
    r->batch = o->batch_id;
    r->worker = o->worker;
    r->error = o->state == STORE_DONE
                   ? NULL
                   : fit_message(o->error ? o->error : store_state_name(o->state),
                                 errbuf, errsize);
    if (!o->res)
        return;
    r->model = o->model;
    r->text = o->res->text;
    r->tokens = o->res->token_ids;
    r->n_tokens = (uint32_t)o->res->n_token_ids;
    r->logprobs = o->res->logprobs;
    r->n_logprobs = o->res->n_logprobs;
    r->finish = wire_finish_from_name(o->res->finish_reason);
    r->prompt_tokens = (uint32_t)o->res->prompt_tokens;
    r->gen_tokens = (uint32_t)o->res->generated_tokens;
    r->timings = (wire_timings){.queue_wait_ms = o->queue_wait_ms,
                                .prefill_ms = o->res->prefill_ms,
                                .prefill_tok_s = o->prefill_tok_s,
                                .decode_ms = o->res->decode_ms,
                                .decode_tok_s = o->decode_tok_s,
                                .total_ms = o->total_ms};
}

typedef struct push_ctx {
    broker *b;
    const net_peer *to;
    uint64_t req;
} push_ctx;

static int push_outcome(void *ctx, const store_outcome *o, llmq_err *err)
{
    push_ctx *p = ctx;
    char errbuf[WIRE_MAX_MESSAGE_BYTES + 1];
    wire_msg m;
    wire_msg_init(&m, WIRE_T_RESULT);
    m.req = p->req;
    result_from_outcome(o, &m.result, errbuf, sizeof errbuf);
    return broker_reply(p->b, p->b->clients, p->to, &m, err);
}

static int push_result(broker *b, const net_peer *to, uint64_t req,
                       int64_t job_id, llmq_err *err)
{
    push_ctx p = {b, to, req};
    bool found;
    return store_outcome_get(b->st, job_id, push_outcome, &p, &found, err);
}

/* Results gathered for a non-streaming wait_end: copies, since the store's
 * strings live only during its callback. */
typedef struct result_set {
    wire_result *v;
    size_t n;
    bool oom;
} result_set;

static char *dup_or_null(const char *s, bool *oom)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *oom = true;
    return d;
}

static int keep_outcome(void *ctx, const store_outcome *o, llmq_err *err)
{
    result_set *rs = ctx;
    char errbuf[WIRE_MAX_MESSAGE_BYTES + 1];
    wire_result *r = &rs->v[rs->n++];
    result_from_outcome(o, r, errbuf, sizeof errbuf);
    r->key = dup_or_null(r->key, &rs->oom);
    r->batch = dup_or_null(r->batch, &rs->oom);
    r->worker = dup_or_null(r->worker, &rs->oom);
    r->model = dup_or_null(r->model, &rs->oom);
    r->error = dup_or_null(r->error, &rs->oom);
    r->text = dup_or_null(r->text, &rs->oom);
    uint32_t *tokens = r->n_tokens ? malloc(r->n_tokens * sizeof *tokens) : NULL;
    if (r->n_tokens && tokens)
        memcpy(tokens, r->tokens, r->n_tokens * sizeof *tokens);
    rs->oom |= r->n_tokens && !tokens;
    r->tokens = tokens;
    wire_token_logprobs *lp = NULL;
    if (r->logprobs && lpblob_dup(r->logprobs, r->n_logprobs, &lp, err) != 0)
        rs->oom = true;
    r->logprobs = lp;
    return rs->oom ? llmq_errf(err, "out of memory collecting results") : 0;
}

static void result_set_free(result_set *rs)
{
    for (size_t i = 0; i < rs->n; i++) {
        wire_result *r = &rs->v[i];
        free((char *)r->key);
        free((char *)r->batch);
        free((char *)r->worker);
        free((char *)r->model);
        free((char *)r->error);
        free((char *)r->text);
        free((uint32_t *)r->tokens);
        free((wire_token_logprobs *)r->logprobs);
    }
    free(rs->v);
}

static int collect_results(broker *b, const waiter *w, result_set *rs,
                           llmq_err *err)
{
    rs->v = calloc(w->n ? w->n : 1, sizeof *rs->v);
    if (!rs->v)
        return llmq_errf(err, "out of memory collecting %zu results", w->n);
    for (size_t i = 0; i < w->n; i++) {
        bool found;
        if (w->final[i] &&
            store_outcome_get(b->st, w->ids[i], keep_outcome, rs, &found, err))
            return -1;
    }
    return 0;
}

static int send_wait_end(broker *b, const waiter *w, bool timed_out,
                         llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT_END);
    m.req = w->req;
    m.wait_end.done = (uint32_t)(w->n - w->pending);
    m.wait_end.pending = (uint32_t)w->pending;
    m.wait_end.timed_out = timed_out;
    result_set rs = {0};
    int rc = w->stream ? 0 : collect_results(b, w, &rs, err);
    if (rc == 0) {
        m.wait_end.results = rs.v;
        m.wait_end.n_results = (uint32_t)rs.n;
        rc = broker_reply(b, b->clients, &w->peer, &m, err);
    }
    result_set_free(&rs);
    return rc;
}

static int send_wait_alive(broker *b, const waiter *w, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT_ALIVE);
    m.req = w->req;
    return broker_reply(b, b->clients, &w->peer, &m, err);
}

int on_client_waiter(void *ctx, const waiter *w, waiter_event ev,
                     int64_t job_id, bool timed_out, llmq_err *err)
{
    broker *b = ctx;
    switch (ev) {
    case WAITER_RESULT:
        return w->stream ? push_result(b, &w->peer, w->req, job_id, err) : 0;
    case WAITER_ALIVE: return send_wait_alive(b, w, err);
    case WAITER_END: break;
    }
    return send_wait_end(b, w, timed_out, err);
}

static bool is_final(store_state s)
{
    return s == STORE_DONE || s == STORE_FAILED || s == STORE_CANCELLED;
}

static int note_final(void *ctx, const store_brief *br, llmq_err *err)
{
    (void)err;
    *(bool *)ctx = is_final(br->state);
    return 0;
}

/* Marks the final ones (pushing them when streaming); returns pending. */
static int sort_out(broker *b, const net_peer *from, const wire_msg *m,
                    const idlist *ids, bool *final, size_t *pending,
                    llmq_err *err)
{
    *pending = 0;
    for (size_t i = 0; i < ids->n; i++) {
        bool found;
        if (store_brief_get(b->st, ids->v[i], note_final, &final[i], &found,
                            err))
            return -1;
        if (!final[i])
            (*pending)++;
        else if (m->wait.stream &&
                 push_result(b, from, m->req, ids->v[i], err))
            return -1;
    }
    return 0;
}

/* The wait is answered at once when nothing is pending or it may not wait;
 * otherwise it is registered, owning ids and final. */
static int start_wait(broker *b, const net_peer *from, const wire_msg *m,
                      idlist *ids, llmq_err *err)
{
    bool *final = calloc(ids->n ? ids->n : 1, sizeof *final);
    size_t pending = 0;
    if (!final)
        return llmq_errf(err, "out of memory waiting on %zu jobs", ids->n);
    if (sort_out(b, from, m, ids, final, &pending, err)) {
        free(final);
        return -1;
    }
    if (pending && m->wait.timeout_ms) {
        waiter_spec spec = {.peer = from,
                            .req = m->req,
                            .stream = m->wait.stream,
                            .now = b->now,
                            .deadline = b->now + m->wait.timeout_ms,
                            .beat_ms = m->wait.heartbeat_ms};
        int rc = waiters_add(&b->waiters, &spec, ids->v, final, ids->n, pending,
                             err);
        ids->v = NULL; /* the waiter owns it now */
        return rc;
    }
    waiter w = {.req = m->req, .stream = m->wait.stream, .ids = ids->v,
                .final = final, .n = ids->n, .pending = pending};
    net_peer_copy(&w.peer, from);
    int rc = send_wait_end(b, &w, pending > 0, err);
    net_peer_close(&w.peer);
    free(final);
    return rc;
}

static int on_wait(broker *b, const net_peer *from, const wire_msg *m,
                   llmq_err *err)
{
    idlist ids = {0};
    bool refused;
    size_t limit = m->wait.stream ? WIRE_MAX_IDS : WIRE_MAX_RESULTS;
    int rc = select_jobs(b, from, m->req, &m->wait.sel, limit, &ids, &refused,
                         err);
    if (rc == 0 && !refused && b->waiters.total_ids + ids.n > MAX_WAITED_IDS) {
        refused = true;
        rc = broker_refuse(b, b->clients, from, m->req, WIRE_E_TOO_LARGE, NULL,
                           "waits in progress already hold %zu job ids;"
                           " wait on fewer jobs", b->waiters.total_ids);
    }
    if (rc == 0 && !refused)
        rc = start_wait(b, from, m, &ids, err);
    free(ids.v);
    return rc;
}

/* ---- stats ------------------------------------------------------------------------------- */

static int on_stats(broker *b, const net_peer *from, const wire_msg *m,
                    llmq_err *err)
{
    int64_t n[STORE_N_STATES];
    store_counts_all(b->st, n);
    size_t nw = b->pool.n < WIRE_MAX_WORKERS ? b->pool.n : WIRE_MAX_WORKERS;
    wire_worker_stat *ws = calloc(nw ? nw : 1, sizeof *ws);
    if (!ws)
        return llmq_errf(err, "out of memory for stats");
    for (size_t i = 0; i < nw; i++) {
        const pool_worker *w = b->pool.v[i];
        ws[i] = (wire_worker_stat){
            .worker = w->name, .host = w->host, .gpu_index = w->gpu_index,
            .gpu_name = w->gpu_name, .engine = w->engine, .slots = w->slots,
            .busy = w->busy, .jobs_done = w->jobs_done,
            .tokens_done = w->tokens_done};
    }
    wire_msg r;
    wire_msg_init(&r, WIRE_T_STATS_OK);
    r.req = m->req;
    r.stats_ok.counts = (wire_counts){
        (uint64_t)n[STORE_QUEUED], (uint64_t)n[STORE_RUNNING],
        (uint64_t)n[STORE_DONE], (uint64_t)n[STORE_FAILED],
        (uint64_t)n[STORE_CANCELLED]};
    r.stats_ok.workers = ws;
    r.stats_ok.n_workers = (uint32_t)nw;
    int rc = broker_reply(b, b->clients, from, &r, err);
    free(ws);
    return rc;
}

/* ---- entry ------------------------------------------------------------------------------- */

static int handle(broker *b, const net_peer *from, const wire_msg *m,
                  llmq_err *err)
{
    switch (m->type) {
    case WIRE_T_SUBMIT: return on_submit(b, from, m, err);
    case WIRE_T_STATUS: return on_status(b, from, m, err);
    case WIRE_T_CANCEL: return on_cancel(b, from, m, err);
    case WIRE_T_WAIT: return on_wait(b, from, m, err);
    case WIRE_T_STATS: return on_stats(b, from, m, err);
    default:
        return broker_refuse(b, b->clients, from, m->req, WIRE_E_UNKNOWN_TYPE,
                             "type", "'%s' is not a client request",
                             wire_type_name(m->type));
    }
}

int on_client(broker *b, const net_peer *from, const void *body, size_t len,
              llmq_err *err)
{
    wire_msg m;
    wire_error we;
    if (!broker_decode(b, b->clients, body, len, &m, &we))
        return broker_undecoded(b, b->clients, from, &we, err);
    int rc = handle(b, from, &m, err);
    wire_msg_free(&m);
    return rc;
}
