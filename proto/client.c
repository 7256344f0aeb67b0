/* client: the C client library (proto/llmq.h) over one ZeroMQ DEALER socket.
 *
 * Requests are synchronous (send, then read until the reply with the same
 * req arrives), but waits are long-lived: messages for an open wait that
 * arrive while another request is being answered are kept in a stash and
 * handed to the wait later; messages for no open request (late replies to a
 * request that timed out) are dropped.
 *
 * A wait holds a lease on the broker: it asks for a wait_alive every
 * heartbeat, and a wait that hears nothing for its patience (the broker was
 * killed, restarted, or stopped) replaces the socket -- what was queued on
 * the old one dies with it, so waits sent again never pile up -- and sends
 * itself again with the jobs not yet reported.  The broker answers a wait
 * with every job already final, so each result is handed out once, by id. */
#include "proto/llmq.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "proto/curve.h"
#include "proto/idset.h"
#include "proto/wire.h"

_Static_assert((int)LLMQ_E_BAD_RESULT == (int)WIRE_E_BAD_RESULT &&
                   (int)LLMQ_E_INTERNAL == (int)WIRE_E_INTERNAL &&
                   (int)LLMQ_E_UNAVAILABLE == (int)WIRE_E_UNAVAILABLE &&
                   (int)LLMQ_E_QUEUE_FULL == (int)WIRE_E_QUEUE_FULL &&
                   (int)LLMQ_E_MALFORMED == (int)WIRE_E_MALFORMED,
               "llmq_code mirrors wire_code");
_Static_assert((int)LLMQ_STATE_CANCELLED == (int)WIRE_STATE_CANCELLED &&
                   (int)LLMQ_STATE_QUEUED == (int)WIRE_STATE_QUEUED,
               "llmq_state mirrors wire_state");

/* Submits are cut so that one message stays well under WIRE_MAX_BODY_BYTES. */
#define CHUNK_BYTES (8u << 20)
/* A wait asked of the broker with a timeout gets this much longer locally
 * before the broker is presumed gone. */
#define WAIT_GRACE_MS 10000
/* A wait whose broker stays silent is sent again after its patience, which
 * doubles at each silent try up to this. */
#define MAX_PATIENCE_MS 30000
/* ZeroMQ's reconnects to a vanished broker back off from 100 ms to this. */
#define RECONNECT_MAX_MS 1000

typedef struct stash {
    wire_msg m;
    struct stash *next;
} stash;

struct llmq_client {
    void *ctx;
    void *sock;
    uint64_t next_req;
    int timeout_ms;
    stash *stash;     /* FIFO of messages kept for open waits */
    llmq_wait *waits; /* open waits */
    char *endpoint;   /* with keys, what a new socket needs */
    llmq_curve keys;
    bool curve;
    uint64_t gen;         /* +1 each time the socket is replaced */
    int beat_ms, dead_ms; /* waits' leases; beat_ms 0: none */
    bool no_leases;       /* the broker refused heartbeat_ms: an older one */
};

/* One wait request: a chunk of at most WIRE_MAX_IDS of the ids, or the batch. */
typedef struct wait_req {
    uint64_t req;
    bool ended;
    bool lease;   /* sent with heartbeat_ms */
    bool dropped; /* the broker ended it while stopping */
    double heard; /* monotonic ms: its last message, or when it was sent */
} wait_req;

struct llmq_wait {
    llmq_client *c;
    uint64_t *ids; /* the selection, kept to send it again; NULL: a batch */
    size_t n_ids;
    char *batch;
    wait_req *reqs;
    size_t n_reqs, n_ended;
    uint64_t gen;   /* the socket its requests went on */
    idset reported; /* jobs whose result was handed out */
    size_t pending;
    bool timed_out;
    double end_ms;      /* monotonic: the wait's own timeout; 0: none */
    double deadline;    /* end_ms + WAIT_GRACE_MS; 0: none */
    double heard_ms;    /* monotonic: the broker's last message for it */
    double patience_ms; /* silence tolerated before it is sent again */
    bool lost;          /* its patience ran out: waiting for a broker */
    bool stopping;      /* lost because the broker said it was stopping */
    uint32_t rewaits;
    wire_msg cur;            /* backs the last result handed out, */
    llmq_token_logprobs *lp; /* with its logprobs in the public types */
    llmq_logprob *lp_top;
    llmq_wait *next;
};

/* ---- errors --------------------------------------------------------------------- */

static int fail(llmq_error *err, llmq_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(llmq_error *err, llmq_code code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    err->field[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int from_wire_error(llmq_error *err, const wire_error *we)
{
    if (!err)
        return -1;
    err->code = (llmq_code)we->code;
    snprintf(err->field, sizeof err->field, "%s", we->field);
    snprintf(err->message, sizeof err->message, "%s", we->err.msg);
    return -1;
}

/* The broker's "error" reply. */
static int from_error_msg(llmq_error *err, const wire_msg *m)
{
    if (!err)
        return -1;
    err->code = (llmq_code)m->error.code;
    snprintf(err->field, sizeof err->field, "%s", m->error.field ? m->error.field : "");
    snprintf(err->message, sizeof err->message, "broker: %s", m->error.message);
    return -1;
}

const char *llmq_code_name(llmq_code code)
{
    switch (code) {
    case LLMQ_E_TIMEOUT: return "timeout";
    case LLMQ_E_TRANSPORT: return "transport";
    case LLMQ_E_PROTOCOL: return "protocol";
    case LLMQ_E_USAGE: return "usage";
    default: {
        const char *n = wire_code_name((wire_code)code);
        return n ? n : "?";
    }
    }
}

const char *llmq_state_name(llmq_state state)
{
    const char *n = wire_state_name((wire_state)state);
    return n ? n : "?";
}

/* ---- connection ------------------------------------------------------------------ */

int llmq_curve_load(llmq_curve *keys, const char *broker_key_file,
                    const char *secret_file, llmq_error *err)
{
    curve_keys k;
    llmq_err e;
    if (!broker_key_file || !secret_file)
        return fail(err, LLMQ_E_USAGE, "CURVE needs the broker's public key file"
                                       " and a secret key file");
    if (curve_load_client(&k, broker_key_file, secret_file, &e) != 0)
        return fail(err, LLMQ_E_USAGE, "%s", e.msg);
    memcpy(keys->broker_public, k.server_public, sizeof keys->broker_public);
    memcpy(keys->public_key, k.public_key, sizeof keys->public_key);
    memcpy(keys->secret_key, k.secret_key, sizeof keys->secret_key);
    return 0;
}

/* The keys go on the socket before it connects. */
static int use_curve(void *sock, const llmq_curve *keys, llmq_error *err)
{
    curve_keys k;
    llmq_err e;
    memcpy(k.server_public, keys->broker_public, sizeof k.server_public);
    memcpy(k.public_key, keys->public_key, sizeof k.public_key);
    memcpy(k.secret_key, keys->secret_key, sizeof k.secret_key);
    k.server_public[CURVE_Z85_LEN] = k.public_key[CURVE_Z85_LEN] =
        k.secret_key[CURVE_Z85_LEN] = '\0';
    if (curve_check(k.server_public, NULL, "broker_public", &e) ||
        curve_check(k.public_key, NULL, "public_key", &e) ||
        curve_check(k.secret_key, NULL, "secret_key", &e) ||
        curve_connect_as(sock, &k, &e))
        return fail(err, LLMQ_E_USAGE, "CURVE keys: %s", e.msg);
    return 0;
}

int llmq_connect(llmq_client **out, const char *endpoint, llmq_error *err)
{
    return llmq_connect_curve(out, endpoint, NULL, err);
}

/* A DEALER connected to c's broker, with c's keys. */
static int open_socket(llmq_client *c, void **out, llmq_error *err)
{
    void *sock = zmq_socket(c->ctx, ZMQ_DEALER);
    int zero = 0, ivl_max = RECONNECT_MAX_MS;
    int64_t max = WIRE_MAX_BODY_BYTES;
    if (!sock || zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero) < 0 ||
        zmq_setsockopt(sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) < 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) < 0) {
        fail(err, LLMQ_E_TRANSPORT, "socket: %s", zmq_strerror(zmq_errno()));
    } else if (c->curve && use_curve(sock, &c->keys, err) != 0) {
        /* err says why */
    } else if (zmq_connect(sock, c->endpoint) < 0) {
        fail(err, LLMQ_E_TRANSPORT, "connecting to %s: %s", c->endpoint, zmq_strerror(zmq_errno()));
    } else {
        *out = sock;
        return 0;
    }
    if (sock)
        zmq_close(sock);
    return -1;
}

int llmq_connect_curve(llmq_client **out, const char *endpoint,
                       const llmq_curve *keys, llmq_error *err)
{
    *out = NULL;
    if (!endpoint || !*endpoint)
        return fail(err, LLMQ_E_USAGE, "no broker endpoint given");
    llmq_client *c = calloc(1, sizeof *c);
    if (!c)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    c->next_req = 1;
    c->timeout_ms = LLMQ_DEFAULT_TIMEOUT_MS;
    c->beat_ms = WIRE_HEARTBEAT_MS;
    c->dead_ms = WIRE_DEAD_AFTER_MS;
    c->curve = keys != NULL;
    if (keys)
        c->keys = *keys;
    c->endpoint = strdup(endpoint);
    c->ctx = zmq_ctx_new();
    if (!c->endpoint || !c->ctx) {
        fail(err, LLMQ_E_INTERNAL, "out of memory");
        llmq_close(c);
        return -1;
    }
    if (open_socket(c, &c->sock, err) < 0) {
        llmq_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

/* A fresh socket: whatever was queued on the old one (requests to a broker
 * that is gone) is dropped with it; open waits send themselves again. */
static int reconnect(llmq_client *c, llmq_error *err)
{
    void *sock;
    if (open_socket(c, &sock, err) < 0)
        return -1;
    zmq_close(c->sock);
    c->sock = sock;
    c->gen++;
    return 0;
}

void llmq_set_timeout(llmq_client *c, int timeout_ms)
{
    c->timeout_ms = timeout_ms;
}

int llmq_set_wait_lease(llmq_client *c, int heartbeat_ms, int dead_after_ms, llmq_error *err)
{
    if (heartbeat_ms != 0 && (heartbeat_ms < (int)WIRE_MIN_WAIT_HEARTBEAT_MS ||
                              heartbeat_ms > (int)WIRE_MAX_WAIT_HEARTBEAT_MS))
        return fail(err, LLMQ_E_USAGE, "heartbeat_ms: %d is out of range (0, or %u..%u)",
                    heartbeat_ms, WIRE_MIN_WAIT_HEARTBEAT_MS, WIRE_MAX_WAIT_HEARTBEAT_MS);
    if (heartbeat_ms != 0 && dead_after_ms <= heartbeat_ms)
        return fail(err, LLMQ_E_USAGE, "dead_after_ms: %d must exceed heartbeat_ms (%d)",
                    dead_after_ms, heartbeat_ms);
    c->beat_ms = heartbeat_ms;
    c->dead_ms = dead_after_ms;
    return 0;
}

void llmq_close(llmq_client *c)
{
    if (!c)
        return;
    while (c->stash) {
        stash *s = c->stash;
        c->stash = s->next;
        wire_msg_free(&s->m);
        free(s);
    }
    while (c->waits)
        llmq_wait_free(c->waits);
    if (c->sock)
        zmq_close(c->sock);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    free(c->endpoint);
    free(c);
}

/* ---- messages ----------------------------------------------------------------------- */

static int send_msg(llmq_client *c, const wire_msg *m, llmq_error *err)
{
    char *buf;
    size_t len;
    wire_error we;
    if (wire_encode(m, &buf, &len, &we) < 0)
        return from_wire_error(err, &we);
    int rc = zmq_send(c->sock, buf, len, 0);
    free(buf);
    if (rc < 0)
        return fail(err, LLMQ_E_TRANSPORT, "sending: %s", zmq_strerror(zmq_errno()));
    return 0;
}

/* One message from the broker within wait_ms (< 0: forever): 1, 0 on
 * timeout, -1 on error.  The body is the last frame. */
static int recv_msg(llmq_client *c, int wait_ms, wire_msg *m, llmq_error *err)
{
    zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};
    int n = zmq_poll(&item, 1, wait_ms);
    if (n < 0)
        return errno == EINTR ? 0 : fail(err, LLMQ_E_TRANSPORT, "poll: %s",
                                         zmq_strerror(zmq_errno()));
    if (n == 0)
        return 0;
    zmq_msg_t part;
    zmq_msg_init(&part);
    for (;;) {
        if (zmq_msg_recv(&part, c->sock, 0) < 0) {
            zmq_msg_close(&part);
            return fail(err, LLMQ_E_TRANSPORT, "receiving: %s", zmq_strerror(zmq_errno()));
        }
        if (!zmq_msg_more(&part))
            break;
    }
    wire_error we;
    int rc = wire_decode(zmq_msg_data(&part), zmq_msg_size(&part), WIRE_DIR_BROKER_TO_CLIENT,
                         m, &we);
    zmq_msg_close(&part);
    if (rc < 0) {
        from_wire_error(err, &we);
        err->code = LLMQ_E_PROTOCOL;
        return -1;
    }
    return 1;
}

static wait_req *req_of(const llmq_wait *w, uint64_t req)
{
    for (size_t i = 0; i < w->n_reqs; i++)
        if (w->reqs[i].req == req && !w->reqs[i].ended)
            return &w->reqs[i];
    return NULL;
}

static bool wait_owns(const llmq_wait *w, uint64_t req)
{
    return req_of(w, req) != NULL;
}

static bool any_wait_owns(const llmq_client *c, uint64_t req)
{
    for (const llmq_wait *w = c->waits; w; w = w->next)
        if (wait_owns(w, req))
            return true;
    return false;
}

/* Who a message is for: the request `req`, or (req 0) the wait w. */
typedef struct target {
    uint64_t req;
    const llmq_wait *w;
} target;

static bool is_for(const target *t, const wire_msg *m)
{
    return t->w ? wait_owns(t->w, m->req) : m->req == t->req;
}

static bool from_stash(llmq_client *c, const target *t, wire_msg *out)
{
    for (stash **p = &c->stash; *p; p = &(*p)->next) {
        if (is_for(t, &(*p)->m)) {
            stash *s = *p;
            *p = s->next;
            *out = s->m;
            free(s);
            return true;
        }
    }
    return false;
}

static int keep(llmq_client *c, wire_msg *m, llmq_error *err)
{
    stash *s = malloc(sizeof *s);
    if (!s) {
        wire_msg_free(m);
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    }
    s->m = *m;
    s->next = NULL;
    stash **p = &c->stash;
    while (*p)
        p = &(*p)->next;
    *p = s;
    return 0;
}

/* The next message for t within wait_ms (< 0: forever): 1, 0, -1. */
static int take(llmq_client *c, const target *t, int wait_ms, wire_msg *out, llmq_error *err)
{
    if (from_stash(c, t, out))
        return 1;
    double end = clock_mono_ms_f() + wait_ms;
    for (;;) {
        int left = wait_ms < 0 ? -1 : (int)(end - clock_mono_ms_f());
        if (wait_ms >= 0 && left < 0)
            left = 0;
        int rc = recv_msg(c, left, out, err);
        if (rc < 0)
            return -1;
        if (rc == 0) {   /* timed out, or a signal cut the poll short */
            if (wait_ms >= 0 && clock_mono_ms_f() >= end)
                return 0;
            continue;
        }
        if (is_for(t, out))
            return 1;
        if (any_wait_owns(c, out->req)) {
            if (keep(c, out, err) < 0)
                return -1;
        } else {
            wire_msg_free(out);   /* a late reply to a request given up on */
        }
        if (wait_ms >= 0 && clock_mono_ms_f() >= end)
            return 0;
    }
}

/* Sends m (its req assigned here) and reads the reply of type `expect`. */
static int rpc(llmq_client *c, wire_msg *m, wire_type expect, wire_msg *reply, llmq_error *err)
{
    m->req = c->next_req++;
    if (send_msg(c, m, err) < 0)
        return -1;
    target t = {.req = m->req};
    int rc = take(c, &t, c->timeout_ms, reply, err);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        /* The request dies with the socket: a copy still queued for a broker
         * that is down would otherwise reach it with the caller's retry. */
        reconnect(c, NULL);
        return fail(err, LLMQ_E_TIMEOUT, "no reply to %s from the broker within %d ms",
                    wire_type_name(m->type), c->timeout_ms);
    }
    if (reply->type == WIRE_T_ERROR) {
        from_error_msg(err, reply);
        wire_msg_free(reply);
        return -1;
    }
    if (reply->type != expect) {
        fail(err, LLMQ_E_PROTOCOL, "expected %s, the broker sent %s", wire_type_name(expect),
             wire_type_name(reply->type));
        wire_msg_free(reply);
        return -1;
    }
    return 0;
}

/* ---- submit -------------------------------------------------------------------------- */

/* llmq_job spells out the parameters of proto/job_params.h for the public
 * header; each must be there, with the table's C type. */
#define CHECK_PUBLIC_TYPE(name, kind, lo, hi, lo_open, dflt, engine)                        \
    _Static_assert(_Generic(((llmq_job *)0)->name, JOB_PARAM_TYPE_##kind : 1, default : 0), \
                   "llmq_job." #name " has another type than proto/job_params.h says");
JOB_PARAMS(CHECK_PUBLIC_TYPE)

#define COPY_PARAM(name, kind, lo, hi, lo_open, dflt, engine) to->name = from->name;

void llmq_job_init(llmq_job *job)
{
    *job = (llmq_job){0};
    const job_params d = job_params_default(), *from = &d;
    llmq_job *to = job;
    JOB_PARAMS(COPY_PARAM)
}

/* A chat job's messages as the wire holds them, into msgs (room for
 * j->n_messages). */
static int to_wire_messages(const llmq_job *j, size_t index, wire_message *msgs, llmq_error *err)
{
    for (size_t i = 0; i < j->n_messages; i++) {
        if (!j->messages[i].role || !j->messages[i].content) {
            const char *what = j->messages[i].role ? "content" : "role";
            fail(err, LLMQ_E_MISSING_FIELD, "jobs[%zu].messages[%zu].%s: NULL", index, i, what);
            if (err)
                snprintf(err->field, sizeof err->field, "jobs[%zu].messages[%zu].%s", index, i,
                         what);
            return -1;
        }
        msgs[i] = (wire_message){j->messages[i].role, j->messages[i].content};
    }
    return 0;
}

static int to_wire_job(const llmq_job *j, size_t index, wire_job *w, wire_message *msgs,
                       llmq_error *err)
{
    if (j->n_tokens > UINT32_MAX || j->n_stop > UINT32_MAX || j->n_messages > UINT32_MAX)
        return fail(err, LLMQ_E_TOO_LARGE, "jobs[%zu]: too many tokens, messages or stop strings",
                    index);
    if (j->messages && to_wire_messages(j, index, msgs, err) < 0)
        return -1;
    *w = (wire_job){
        .key = j->key,
        .prompt = j->prompt,
        .tokens = j->tokens,
        .n_tokens = (uint32_t)j->n_tokens,
        .messages = j->messages ? msgs : NULL,
        .n_messages = j->messages ? (uint32_t)j->n_messages : 0,
        .priority = j->priority,
        .model = j->model,
        .params = {.stop = j->stop, .n_stop = (uint32_t)j->n_stop, .json_schema = j->json_schema},
    };
    const llmq_job *from = j;
    job_params *to = &w->params;
    JOB_PARAMS(COPY_PARAM)
    return 0;
}

/* One job, as the wire holds it, through the broker's own decoder: the one
 * judge of what is valid. */
static int check_wire_job(const wire_job *wj, llmq_error *err)
{
    wire_msg m, back;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.submit = (wire_submit){.jobs = wj, .n_jobs = 1};
    char *buf;
    size_t len;
    wire_error we;
    if (wire_encode(&m, &buf, &len, &we) < 0)
        return from_wire_error(err, &we);
    int rc = wire_decode(buf, len, WIRE_DIR_CLIENT_TO_BROKER, &back, &we);
    free(buf);
    if (rc < 0) {
        static const char PREFIX[] = "jobs[0]";
        if (strncmp(we.field, PREFIX, sizeof PREFIX - 1) == 0) {
            const char *rest = we.field + sizeof PREFIX - 1;
            rest += *rest == '.';
            memmove(we.field, rest, strlen(rest) + 1);
            const char *msg = we.err.msg + (strncmp(we.err.msg, PREFIX, sizeof PREFIX - 1) == 0
                                                ? sizeof PREFIX - 1 : 0);
            msg += *msg == '.' ? 1 : *msg == ':' ? 2 : 0;
            memmove(we.err.msg, msg, strlen(msg) + 1);
        }
        return from_wire_error(err, &we);
    }
    wire_msg_free(&back);
    return 0;
}

int llmq_job_check(const llmq_job *job, llmq_error *err)
{
    wire_job wj;
    wire_message *msgs = malloc((job->n_messages ? job->n_messages : 1) * sizeof *msgs);
    if (!msgs)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    int rc = to_wire_job(job, 0, &wj, msgs, err);
    if (rc == 0)
        rc = check_wire_job(&wj, err);
    free(msgs);
    return rc;
}

/* A generous estimate of a job's encoded size, to cut submits in chunks. */
static size_t job_bytes(const llmq_job *j)
{
    size_t n = 256 + (j->prompt ? strlen(j->prompt) : 0) + 5 * j->n_tokens +
               (j->key ? strlen(j->key) : 0) + (j->model ? strlen(j->model) : 0) +
               (j->json_schema ? strlen(j->json_schema) : 0);
    for (size_t i = 0; i < j->n_stop; i++)
        n += 8 + (j->stop[i] ? strlen(j->stop[i]) : 0);
    for (size_t i = 0; j->messages && i < j->n_messages; i++)
        n += 32 + (j->messages[i].role ? strlen(j->messages[i].role) : 0) +
             (j->messages[i].content ? strlen(j->messages[i].content) : 0);
    return n;
}

static size_t chunk_end(const llmq_job *jobs, size_t start, size_t n)
{
    size_t bytes = 0, end = start;
    while (end < n && end - start < WIRE_MAX_JOBS_PER_SUBMIT) {
        bytes += job_bytes(&jobs[end]);
        if (bytes > CHUNK_BYTES && end > start)
            break;
        end++;
    }
    return end;
}

static int submit_chunk(llmq_client *c, const char *batch, const char *meta, const llmq_job *jobs,
                        size_t start, size_t end, uint64_t *ids, bool *existing, llmq_error *err)
{
    size_t n_messages = 0;
    for (size_t i = start; i < end; i++)
        n_messages += jobs[i].messages ? jobs[i].n_messages : 0;
    wire_job *wj = calloc(end - start, sizeof *wj);
    wire_message *msgs = calloc(n_messages ? n_messages : 1, sizeof *msgs);
    if (!wj || !msgs) {
        free(wj);
        free(msgs);
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    }
    for (size_t i = start, at = 0; i < end; i++) {
        if (to_wire_job(&jobs[i], i, &wj[i - start], msgs + at, err) < 0) {
            free(wj);
            free(msgs);
            return -1;
        }
        at += jobs[i].messages ? jobs[i].n_messages : 0;
    }
    wire_msg m, reply;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.submit = (wire_submit){.batch = batch, .meta = meta, .jobs = wj,
                             .n_jobs = (uint32_t)(end - start)};
    int rc = rpc(c, &m, WIRE_T_SUBMIT_OK, &reply, err);
    free(wj);
    free(msgs);
    if (rc < 0) {
        if (err && err->field[0] && strncmp(err->field, "jobs[", 5) == 0 && start > 0) {
            /* Chunk-relative job indexes are renumbered to the caller's. */
            size_t k = strtoul(err->field + 5, NULL, 10) + start;
            const char *rest = strchr(err->field, ']');
            char field[sizeof err->field];
            snprintf(field, sizeof field, "jobs[%zu%s", k, rest ? rest : "]");
            memcpy(err->field, field, sizeof field);
        }
        return -1;
    }
    if (reply.submit_ok.n != end - start) {
        wire_msg_free(&reply);
        return fail(err, LLMQ_E_PROTOCOL, "submit of %zu jobs acknowledged with %u ids",
                    end - start, reply.submit_ok.n);
    }
    for (size_t i = start; i < end; i++) {
        ids[i] = reply.submit_ok.ids[i - start];
        if (existing)
            existing[i] = reply.submit_ok.existing[i - start];
    }
    wire_msg_free(&reply);
    return 0;
}

int llmq_submit(llmq_client *c, const char *batch, const char *meta, const llmq_job *jobs,
                size_t n, uint64_t *ids, bool *existing, llmq_error *err)
{
    if (n == 0)
        return fail(err, LLMQ_E_USAGE, "no jobs to submit");
    for (size_t start = 0; start < n;) {
        size_t end = chunk_end(jobs, start, n);
        if (submit_chunk(c, batch, meta, jobs, start, end, ids, existing, err) < 0)
            return -1;
        start = end;
    }
    return 0;
}

/* ---- wait ------------------------------------------------------------------------------ */

/* How long a wait request may still wait at the broker (rounded up: a
 * wait of 1 ms is not one that answers at once). */
static uint32_t time_left(const llmq_wait *w)
{
    if (w->end_ms == 0)
        return UINT32_MAX;
    double left = w->end_ms - clock_mono_ms_f();
    if (left >= UINT32_MAX)
        return UINT32_MAX;
    uint32_t ms = left <= 0 ? 0 : (uint32_t)left;
    return ms + (ms < left);
}

/* The ids of chunk i not reported yet (a sent-again wait asks for those
 * only), in *out (malloc'd) and *n. */
static int chunk_ids(const llmq_wait *w, size_t i, uint64_t **out, uint32_t *n, llmq_error *err)
{
    size_t first = i * WIRE_MAX_IDS, count = w->n_ids - first;
    if (count > WIRE_MAX_IDS)
        count = WIRE_MAX_IDS;
    *n = 0;
    *out = malloc(count * sizeof **out);
    if (!*out)
        return fail(err, LLMQ_E_INTERNAL, "out of memory for a wait on %zu jobs", count);
    for (size_t k = first; k < first + count; k++)
        if (!idset_has(&w->reported, w->ids[k]))
            (*out)[(*n)++] = w->ids[k];
    return 0;
}

static void end_req(llmq_wait *w, wait_req *r)
{
    if (!r->ended) {
        r->ended = true;
        w->n_ended++;
    }
}

/* Sends request i of w (again) under a new req. */
static int send_req(llmq_wait *w, size_t i, llmq_error *err)
{
    llmq_client *c = w->c;
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT);
    m.wait.timeout_ms = time_left(w);
    m.wait.stream = true;
    m.wait.heartbeat_ms = c->no_leases ? 0 : (uint32_t)c->beat_ms;
    uint64_t *ids = NULL;
    if (w->ids) {
        if (chunk_ids(w, i, &ids, &m.wait.sel.n_ids, err) < 0)
            return -1;
        if (m.wait.sel.n_ids == 0) { /* every one reported already */
            free(ids);
            end_req(w, &w->reqs[i]);
            return 0;
        }
        m.wait.sel.ids = ids;
    } else {
        m.wait.sel.batch = w->batch;
    }
    m.req = c->next_req++;
    w->reqs[i] = (wait_req){
        .req = m.req, .lease = m.wait.heartbeat_ms > 0, .heard = clock_mono_ms_f()};
    int rc = send_msg(c, &m, err);
    free(ids);
    return rc;
}

static int send_all(llmq_wait *w, llmq_error *err)
{
    w->gen = w->c->gen;
    for (size_t i = 0; i < w->n_reqs; i++)
        if (!w->reqs[i].ended && send_req(w, i, err) < 0)
            return -1;
    return 0;
}

/* Keeps what sel names, so that the wait can be sent again. */
static int copy_selection(llmq_wait *w, const llmq_select *sel, llmq_error *err)
{
    if (sel->ids) {
        w->ids = malloc(sel->n_ids * sizeof *w->ids);
        if (w->ids)
            memcpy(w->ids, sel->ids, sel->n_ids * sizeof *w->ids);
        w->n_ids = sel->n_ids;
    } else {
        w->batch = strdup(sel->batch);
    }
    w->n_reqs = sel->ids ? (sel->n_ids + WIRE_MAX_IDS - 1) / WIRE_MAX_IDS : 1;
    w->reqs = calloc(w->n_reqs, sizeof *w->reqs);
    if ((sel->ids && !w->ids) || (!sel->ids && !w->batch) || !w->reqs)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    return 0;
}

int llmq_wait_begin(llmq_client *c, const llmq_select *sel, int timeout_ms, llmq_wait **out,
                    llmq_error *err)
{
    *out = NULL;
    if (!sel || (!sel->ids && !sel->batch) || (sel->ids && sel->n_ids == 0))
        return fail(err, LLMQ_E_USAGE, "nothing selected to wait for");
    llmq_wait *w = calloc(1, sizeof *w);
    if (!w)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    w->c = c;
    w->next = c->waits;
    c->waits = w;
    if (copy_selection(w, sel, err) < 0) {
        llmq_wait_free(w);
        return -1;
    }
    if (timeout_ms >= 0) {
        w->end_ms = clock_mono_ms_f() + timeout_ms;
        w->deadline = w->end_ms + WAIT_GRACE_MS;
    }
    w->patience_ms = c->dead_ms;
    w->heard_ms = clock_mono_ms_f();
    if (send_all(w, err) < 0) {
        llmq_wait_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

static llmq_logprob public_logprob(const wire_logprob *p)
{
    return (llmq_logprob){
        .token = p->token, .logprob = p->logprob, .bytes = p->bytes, .n_bytes = p->n_bytes};
}

/* The result's logprobs as llmq.h has them, owned by w until the next call. */
static int to_logprobs(llmq_wait *w, const wire_result *r, llmq_result *out, llmq_error *err)
{
    if (!r->logprobs)
        return 0;
    size_t n_top = 0;
    for (uint32_t i = 0; i < r->n_logprobs; i++)
        n_top += r->logprobs[i].n_top;
    w->lp = malloc((r->n_logprobs ? r->n_logprobs : 1) * sizeof *w->lp);
    w->lp_top = malloc((n_top ? n_top : 1) * sizeof *w->lp_top);
    if (!w->lp || !w->lp_top)
        return fail(err, LLMQ_E_INTERNAL, "out of memory for %u logprobs", r->n_logprobs);
    llmq_logprob *top = w->lp_top;
    for (uint32_t i = 0; i < r->n_logprobs; i++) {
        const wire_token_logprobs *t = &r->logprobs[i];
        w->lp[i] = (llmq_token_logprobs){
            .chosen = public_logprob(&t->chosen), .top = top, .n_top = t->n_top};
        for (uint32_t k = 0; k < t->n_top; k++)
            *top++ = public_logprob(&t->top[k]);
    }
    out->logprobs = w->lp;
    out->n_logprobs = r->n_logprobs;
    return 0;
}

static void release_current(llmq_wait *w)
{
    wire_msg_free(&w->cur);
    free(w->lp);
    free(w->lp_top);
    w->lp = NULL;
    w->lp_top = NULL;
}

static void to_result(const wire_result *r, llmq_result *out)
{
    *out = (llmq_result){
        .id = r->id, .state = (llmq_state)r->state, .attempt = r->attempt, .key = r->key,
        .batch = r->batch, .text = r->text, .tokens = r->tokens, .n_tokens = r->n_tokens,
        .finish = wire_finish_name(r->finish), .prompt_tokens = r->prompt_tokens,
        .gen_tokens = r->gen_tokens, .queue_wait_ms = r->timings.queue_wait_ms,
        .prefill_ms = r->timings.prefill_ms, .prefill_tok_s = r->timings.prefill_tok_s,
        .decode_ms = r->timings.decode_ms, .decode_tok_s = r->timings.decode_tok_s,
        .total_ms = r->timings.total_ms, .worker = r->worker, .error = r->error,
    };
    out->model = r->model;
}

/* ---- the lease ---- */

static double min_ms(double a, double b)
{
    return a < b ? a : b;
}

static bool stash_holds(const llmq_client *c, const llmq_wait *w)
{
    for (const stash *s = c->stash; s; s = s->next)
        if (wait_owns(w, s->m.req))
            return true;
    return false;
}

/* A request sent with a lease has not been heard from for the patience, or
 * the broker dropped it. */
static bool lease_broken(const llmq_wait *w, double now)
{
    for (size_t i = 0; i < w->n_reqs; i++) {
        const wait_req *r = &w->reqs[i];
        if (!r->ended && r->lease && (r->dropped || now - r->heard > w->patience_ms))
            return true;
    }
    return false;
}

/* When the next request's patience runs out (INFINITY: none has a lease). */
static double lease_due(const llmq_wait *w)
{
    double due = INFINITY;
    for (size_t i = 0; i < w->n_reqs; i++) {
        const wait_req *r = &w->reqs[i];
        if (!r->ended && r->lease)
            due = min_ms(due, r->dropped ? 0 : r->heard + w->patience_ms);
    }
    return due;
}

/* A socket replaced (by this wait or another of the client) means the
 * requests on the old one are gone: once the results kept from it are
 * handed out, w sends itself again. */
static int renew(llmq_wait *w, llmq_error *err)
{
    if (w->gen == w->c->gen || stash_holds(w->c, w))
        return 0;
    w->rewaits++;
    return send_all(w, err);
}

/* Nothing came within the wait's patience: its broker is presumed gone.
 * A fresh socket, and the wait again; the patience doubles until the broker
 * answers, so a broker that stays down is not asked too often. */
static int check_lease(llmq_wait *w, llmq_error *err)
{
    if (!lease_broken(w, clock_mono_ms_f()))
        return 0;
    w->lost = true;
    w->stopping = false;
    for (size_t i = 0; i < w->n_reqs; i++)
        w->stopping |= !w->reqs[i].ended && w->reqs[i].dropped;
    double most = w->c->dead_ms > MAX_PATIENCE_MS ? w->c->dead_ms : MAX_PATIENCE_MS;
    w->patience_ms = min_ms(w->patience_ms * 2, most);
    return reconnect(w->c, err) < 0 ? -1 : renew(w, err);
}

/* ---- the next event ---- */

static int on_wait_end(llmq_wait *w, wait_req *r)
{
    const wire_wait_end *e = &w->cur.wait_end;
    if (r->lease && e->pending > 0 && !e->timed_out) {
        /* Only a stopping broker ends a wait with jobs pending before its
         * timeout: the next broker on the database gets the wait. */
        r->dropped = true;
        return 0;
    }
    end_req(w, r);
    w->pending += e->pending;
    w->timed_out |= e->timed_out;
    return 0;
}

static int on_wait_error(llmq_wait *w, wait_req *r, llmq_error *err)
{
    const wire_error_msg *e = &w->cur.error;
    if (r->lease && e->code == WIRE_E_UNKNOWN_FIELD && e->field &&
        strcmp(e->field, "heartbeat_ms") == 0) {
        /* A broker older than leases: wait as before, without them. */
        w->c->no_leases = true;
        return send_req(w, (size_t)(r - w->reqs), err);
    }
    end_req(w, r); /* that request will send nothing more */
    return from_error_msg(err, &w->cur);
}

/* What w->cur means: LLMQ_WAIT_RESULT (*out filled), 0 (nothing for the
 * caller: a heartbeat, a result handed out before, a request's end) or -1. */
static int on_wait_msg(llmq_wait *w, llmq_result *out, llmq_error *err)
{
    wait_req *r = req_of(w, w->cur.req); /* take returns only w's messages */
    r->heard = w->heard_ms = clock_mono_ms_f();
    w->lost = false;
    w->patience_ms = w->c->dead_ms;
    switch (w->cur.type) {
    case WIRE_T_RESULT: {
        int added = idset_add(&w->reported, w->cur.result.id);
        if (added <= 0) /* delivered twice (a wait sent again): handed out once */
            return added < 0 ? fail(err, LLMQ_E_INTERNAL, "out of memory") : 0;
        to_result(&w->cur.result, out);
        return to_logprobs(w, &w->cur.result, out, err) < 0 ? -1 : LLMQ_WAIT_RESULT;
    }
    case WIRE_T_WAIT_ALIVE: return 0;
    case WIRE_T_WAIT_END: return on_wait_end(w, r);
    case WIRE_T_ERROR: return on_wait_error(w, r, err);
    default:
        return fail(err, LLMQ_E_PROTOCOL, "unexpected %s during a wait",
                    wire_type_name(w->cur.type));
    }
}

/* How long the next read may block: until the step ends, the wait's
 * deadline passes or a lease runs out. */
static int next_read_ms(const llmq_wait *w, double step_end, double now)
{
    double until = min_ms(step_end, lease_due(w) + 1);
    if (w->deadline > 0)
        until = min_ms(until, w->deadline);
    return until == INFINITY ? -1 : until <= now ? 0 : (int)min_ms(until - now + 1, INT32_MAX);
}

int llmq_wait_next(llmq_wait *w, int step_ms, llmq_result *out, llmq_error *err)
{
    double step_end = step_ms < 0 ? INFINITY : clock_mono_ms_f() + step_ms;
    for (;;) {
        release_current(w);
        if (w->n_ended == w->n_reqs)
            return LLMQ_WAIT_END;
        if (renew(w, err) < 0)
            return -1;
        double now = clock_mono_ms_f();
        if (w->deadline > 0 && now >= w->deadline)
            return fail(err, LLMQ_E_TIMEOUT, "the broker did not end the wait in time%s",
                        w->lost ? " (no word from it since it was lost)" : "");
        target t = {.w = w};
        int rc = take(w->c, &t, next_read_ms(w, step_end, now), &w->cur, err);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            int ev = on_wait_msg(w, out, err);
            if (ev != 0)
                return ev;
            continue;
        }
        /* Nothing is left to read: only now may silence mean a lost broker,
         * which is news for the caller's progress output. */
        bool was_lost = w->lost;
        if (check_lease(w, err) < 0)
            return -1;
        if ((w->lost && !was_lost) || clock_mono_ms_f() >= step_end)
            return LLMQ_WAIT_IDLE;
    }
}

void llmq_wait_summary(const llmq_wait *w, size_t *done, size_t *pending, bool *timed_out)
{
    if (done)
        *done = w->reported.n;
    if (pending)
        *pending = w->pending;
    if (timed_out)
        *timed_out = w->timed_out;
}

void llmq_wait_get_health(const llmq_wait *w, llmq_wait_health *out)
{
    *out = (llmq_wait_health){
        .broker_lost = w->lost,
        .broker_stopping = w->lost && w->stopping,
        .silent_ms = clock_mono_ms_f() - w->heard_ms,
        .rewaits = w->rewaits,
    };
}

void llmq_wait_free(llmq_wait *w)
{
    if (!w)
        return;
    for (llmq_wait **p = &w->c->waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    /* Stashed messages for this wait would never be claimed. */
    for (stash **p = &w->c->stash; *p;) {
        if (wait_owns(w, (*p)->m.req)) {
            stash *s = *p;
            *p = s->next;
            wire_msg_free(&s->m);
            free(s);
        } else {
            p = &(*p)->next;
        }
    }
    release_current(w);
    idset_free(&w->reported);
    free(w->ids);
    free(w->batch);
    free(w->reqs);
    free(w);
}

/* ---- status, cancel, stats ------------------------------------------------------------- */

typedef struct status_owned {
    llmq_status pub;         /* first: llmq_status_free casts back */
    wire_msg msg;
    llmq_job_status *jobs;
} status_owned;

static void to_counts(const wire_counts *w, llmq_counts *c)
{
    *c = (llmq_counts){.queued = w->queued, .running = w->running, .done = w->done,
                       .failed = w->failed, .cancelled = w->cancelled};
}

static int jobs_request(llmq_client *c, wire_type type, wire_type expect, const llmq_select *sel,
                        llmq_status **out, llmq_error *err)
{
    *out = NULL;
    if (!sel || (!sel->ids && !sel->batch))
        return fail(err, LLMQ_E_USAGE, "no jobs selected");
    if (sel->n_ids > WIRE_MAX_IDS)
        return fail(err, LLMQ_E_TOO_LARGE, "%zu ids, at most %u per request", sel->n_ids,
                    WIRE_MAX_IDS);
    status_owned *s = calloc(1, sizeof *s);
    if (!s)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    wire_msg m;
    wire_msg_init(&m, type);
    m.select = (wire_select){.ids = sel->ids, .n_ids = (uint32_t)sel->n_ids,
                             .batch = sel->ids ? NULL : sel->batch};
    if (rpc(c, &m, expect, &s->msg, err) < 0) {
        free(s);
        return -1;
    }
    const wire_jobs_reply *r = &s->msg.jobs_reply;
    s->jobs = calloc(r->n_jobs ? r->n_jobs : 1, sizeof *s->jobs);
    if (!s->jobs) {
        wire_msg_free(&s->msg);
        free(s);
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    }
    for (uint32_t i = 0; i < r->n_jobs; i++)
        s->jobs[i] = (llmq_job_status){.id = r->jobs[i].id, .state = (llmq_state)r->jobs[i].state,
                                       .attempts = r->jobs[i].attempts,
                                       .worker = r->jobs[i].worker};
    to_counts(&r->counts, &s->pub.counts);
    s->pub.jobs = s->jobs;
    s->pub.n_jobs = r->n_jobs;
    *out = &s->pub;
    return 0;
}

int llmq_get_status(llmq_client *c, const llmq_select *sel, llmq_status **out, llmq_error *err)
{
    return jobs_request(c, WIRE_T_STATUS, WIRE_T_STATUS_OK, sel, out, err);
}

int llmq_cancel(llmq_client *c, const llmq_select *sel, llmq_status **out, llmq_error *err)
{
    return jobs_request(c, WIRE_T_CANCEL, WIRE_T_CANCEL_OK, sel, out, err);
}

void llmq_status_free(llmq_status *s)
{
    if (!s)
        return;
    status_owned *o = (status_owned *)s;
    wire_msg_free(&o->msg);
    free(o->jobs);
    free(o);
}

typedef struct stats_owned {
    llmq_stats pub;          /* first: llmq_stats_free casts back */
    wire_msg msg;
    llmq_worker_stat *workers;
} stats_owned;

int llmq_get_stats(llmq_client *c, llmq_stats **out, llmq_error *err)
{
    *out = NULL;
    stats_owned *s = calloc(1, sizeof *s);
    if (!s)
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    wire_msg m;
    wire_msg_init(&m, WIRE_T_STATS);
    if (rpc(c, &m, WIRE_T_STATS_OK, &s->msg, err) < 0) {
        free(s);
        return -1;
    }
    const wire_stats_ok *r = &s->msg.stats_ok;
    s->workers = calloc(r->n_workers ? r->n_workers : 1, sizeof *s->workers);
    if (!s->workers) {
        wire_msg_free(&s->msg);
        free(s);
        return fail(err, LLMQ_E_INTERNAL, "out of memory");
    }
    for (uint32_t i = 0; i < r->n_workers; i++) {
        const wire_worker_stat *w = &r->workers[i];
        s->workers[i] = (llmq_worker_stat){
            .worker = w->worker, .host = w->host, .gpu_name = w->gpu_name, .engine = w->engine,
            .gpu_index = w->gpu_index, .slots = w->slots, .busy = w->busy,
            .jobs_done = w->jobs_done, .tokens_done = w->tokens_done};
    }
    to_counts(&r->counts, &s->pub.counts);
    s->pub.workers = s->workers;
    s->pub.n_workers = r->n_workers;
    *out = &s->pub;
    return 0;
}

void llmq_stats_free(llmq_stats *s)
{
    if (!s)
        return;
    stats_owned *o = (stats_owned *)s;
    wire_msg_free(&o->msg);
    free(o->workers);
    free(o);
}
