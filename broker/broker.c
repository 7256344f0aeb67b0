#include "broker/broker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/broker_priv.h"
#include "common/clock.h"

/* Messages read from one socket per iteration: enough for large group
 * commits under load, few enough that timers and the other socket are not
 * starved. */
#define READ_BUDGET 2048
/* Replies waiting for a client that does not read, before it is dropped. */
#define CLIENT_SNDHWM 200000
/* Final replies get this long to leave after the loop ends. */
#define LINGER_MS 1000

/* ---- replies ------------------------------------------------------------------- */

int broker_reply(broker *b, void *sock, const net_peer *to, const wire_msg *m,
                 llmq_err *err)
{
    return net_send_later(&b->out, sock, to, m, err);
}

int broker_refuse(broker *b, void *sock, const net_peer *to, uint64_t req,
                  wire_code code, const char *field, const char *fmt, ...)
{
    char text[LLMQ_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    wire_error we;
    memset(&we, 0, sizeof we);
    wire_fail(&we, code, field, "%s", text);
    we.req = req;
    wire_msg m;
    wire_error_reply(&m, &we);
    if (b->cfg.verbose)
        broker_log("refused request %" PRIu64 ": %s: %s", req,
                   wire_code_name(code), we.err.msg);
    return broker_reply(b, sock, to, &m, NULL);
}

bool broker_decode(const broker *b, void *sock, const void *body, size_t len,
                   wire_msg *m, wire_error *we)
{
    return wire_decode(body, len,
                       sock == b->workers ? WIRE_DIR_WORKER_TO_BROKER
                                          : WIRE_DIR_CLIENT_TO_BROKER,
                       m, we) == 0;
}

/* Bad client requests are the clients' business (logged when verbose); a
 * bad worker message is a bug worth a line. */
int broker_undecoded(broker *b, void *sock, const net_peer *to,
                     const wire_error *we, llmq_err *err)
{
    bool worker = sock == b->workers;
    if (worker || b->cfg.verbose)
        broker_log("bad %s message: %s: %s", worker ? "worker" : "client",
                   wire_code_name(we->code), we->err.msg);
    wire_msg r;
    wire_error_reply(&r, we);
    return broker_reply(b, sock, to, &r, err);
}

wire_state broker_wire_state(store_state s)
{
    static const wire_state map[STORE_N_STATES] = {
        [STORE_QUEUED] = WIRE_STATE_QUEUED,
        [STORE_RUNNING] = WIRE_STATE_RUNNING,
        [STORE_DONE] = WIRE_STATE_DONE,
        [STORE_FAILED] = WIRE_STATE_FAILED,
        [STORE_CANCELLED] = WIRE_STATE_CANCELLED,
    };
    return (unsigned)s < STORE_N_STATES ? map[s] : WIRE_STATE_NONE;
}

int broker_job_final(broker *b, int64_t job_id, llmq_err *err)
{
    return waiters_final(&b->waiters, job_id, on_client_waiter, b, err);
}

/* A client that is gone loses its waits; a worker that is gone is found
 * dead by the heartbeat timer. */
static void undelivered(void *ctx, void *sock, const net_peer *to, int errnum)
{
    broker *b = ctx;
    b->undelivered++;
    if (sock == b->clients && errnum == EHOSTUNREACH)
        waiters_drop_peer(&b->waiters, to);
}

/* ---- room for new jobs ---------------------------------------------- */

/* The space left is read at most this often: a statvfs and three pragmas. */
#define ROOM_EVERY_MS 100
#define MIB (1024.0 * 1024.0)

/* Why there is no room for new jobs ("" when there is). */
static void room_verdict(const broker *b, int64_t used, int64_t free_bytes,
                         char *why, size_t size)
{
    const broker_config *c = &b->cfg;
    why[0] = 0;
    if (c->max_db_mb > 0 && used >= c->max_db_mb << 20)
        snprintf(why, size,
                 "the database holds %.1f MiB, at its --max-db-mb limit of"
                 " %" PRId64 " MiB",
                 (double)used / MIB, c->max_db_mb);
    else if (c->min_free_mb > 0 && free_bytes < c->min_free_mb << 20)
        snprintf(why, size,
                 "the file system holding %s has %.1f MiB free, less than"
                 " --min-free-mb %" PRId64,
                 c->db_path, (double)free_bytes / MIB, c->min_free_mb);
}

/* Held past the end of the WAL (store_reserve), so that the results of
 * running jobs are committed even when another program takes the last
 * free byte: a few thousand results' pages, within the WAL's usual size. */
#define WAL_RESERVE (32 << 20)

static int hold_reserve(broker *b, llmq_err *err)
{
    bool held = true;
    if (b->cfg.min_free_mb > 0 && store_reserve(b->st, WAL_RESERVE, &held, err))
        return -1;
    if (held == b->reserve_lost)
        broker_log(held ? "database %s: %d MiB held past the WAL's end again"
                        : "database %s: cannot keep %d MiB allocated past the"
                          " WAL's end (the file system is full, or cannot"
                          " allocate ahead): what is left of it and"
                          " --min-free-mb are the room for running jobs",
                   b->cfg.db_path, WAL_RESERVE >> 20);
    b->reserve_lost = !held;
    return 0;
}

/* Without room, submits are refused and no job starts; what runs goes on,
 * its results stored in the room the limits keep.  Said once each way. */
static int check_room(broker *b, llmq_err *err)
{
    if (b->room_at && b->now - b->room_at < ROOM_EVERY_MS)
        return 0;
    b->room_at = b->now;
    int64_t used, free_bytes;
    if (store_space(b->st, &used, &free_bytes, err) || hold_reserve(b, err))
        return llmq_err_prefix(err, "%s", b->cfg.db_path);
    char why[sizeof b->no_room];
    room_verdict(b, used, free_bytes, why, sizeof why);
    if (why[0] && !b->no_room[0])
        broker_log("database full: %s: refusing submits (unavailable) and"
                   " starting no job until there is room; %" PRId64
                   " running jobs go on",
                   why, store_running(b->st));
    else if (!why[0] && b->no_room[0])
        broker_log("database has room again: accepting submits");
    memcpy(b->no_room, why, sizeof why);
    return 0;
}

/* ---- opening --------------------------------------------------------------------- */

static int set_int(void *sock, int opt, int value, llmq_err *err)
{
    if (zmq_setsockopt(sock, opt, &value, sizeof value) != 0)
        return llmq_errf(err, "zmq_setsockopt(%d): %s", opt,
                         zmq_strerror(errno));
    return 0;
}

/* ROUTER_MANDATORY makes a send to a vanished peer fail instead of
 * vanishing silently, so the broker can forget that peer's waits.  Workers
 * get no send limit: credits already bound what they are sent.  With CURVE
 * the socket is a CURVE server whose handshakes the ZAP handler judges
 * under `domain`. */
static int make_router(broker *b, void **sock, int sndhwm, const char *domain,
                       llmq_err *err)
{
    int64_t maxmsg = WIRE_MAX_BODY_BYTES;
    *sock = zmq_socket(b->zctx, ZMQ_ROUTER);
    if (!*sock)
        return llmq_errf(err, "zmq_socket: %s", zmq_strerror(errno));
    if (set_int(*sock, ZMQ_ROUTER_MANDATORY, 1, err) ||
        set_int(*sock, ZMQ_SNDHWM, sndhwm, err) ||
        set_int(*sock, ZMQ_RCVHWM, 0, err) ||
        set_int(*sock, ZMQ_LINGER, LINGER_MS, err))
        return -1;
    if (zmq_setsockopt(*sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        return llmq_errf(err, "zmq_setsockopt(MAXMSGSIZE): %s",
                         zmq_strerror(errno));
    if (!b->curve)
        return 0;
    if (zmq_setsockopt(*sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) != 0)
        return llmq_errf(err, "zmq_setsockopt(ZAP_DOMAIN): %s",
                         zmq_strerror(errno));
    return curve_serve(*sock, &b->keys, err);
}

static int bind_router(void *sock, const char *endpoint, llmq_err *err)
{
    if (zmq_bind(sock, endpoint) != 0)
        return llmq_errf(err, "cannot bind %s: %s", endpoint,
                         zmq_strerror(errno));
    return 0;
}

/* Without keys, no endpoint other hosts can reach, unless the operator
 * said --insecure. */
static int check_plain(const broker_config *c, llmq_err *err)
{
    const char *open_ep = !zap_endpoint_local(c->clients_endpoint)
                              ? c->clients_endpoint
                          : !zap_endpoint_local(c->workers_endpoint)
                              ? c->workers_endpoint
                              : NULL;
    if (open_ep && !c->insecure)
        return llmq_errf(err,
                         "%s can be reached from other hosts: give"
                         " --curve-secret (and --allow-workers,"
                         " --allow-clients), or --insecure to run"
                         " without authentication",
                         open_ep);
    return 0;
}

/* A side's allow-list, or nothing (any key) when the operator said so:
 * admitting any key is never a default, since any key would then receive
 * prompts (workers) or submit work (clients). */
static int load_side(zap_list *l, const char *path, bool any, bool has_admins,
                     const char *side, llmq_err *err)
{
    if (path)
        return zap_list_load(l, path, err);
    if (any)
        return 0;
    if (has_admins) { /* admins only */
        l->set = true;
        return 0;
    }
    return llmq_errf(err,
                     "with --curve-secret, say which %s keys are admitted:"
                     " --allow-%s FILE, or --allow-any-%s to admit any"
                     " key",
                     side, side, side);
}

static int load_security(broker *b, llmq_err *err)
{
    const broker_config *c = &b->cfg;
    b->curve = c->curve_secret != NULL;
    if (!b->curve)
        return check_plain(c, err);
    if (curve_load_secret(&b->keys, c->curve_secret, err) ||
        (c->admin_clients &&
         zap_list_load(&b->admin_clients, c->admin_clients, err)) ||
        load_side(&b->allow_workers, c->allow_workers, c->any_workers, false,
                  "workers", err) ||
        load_side(&b->allow_clients, c->allow_clients, c->any_clients,
                  c->admin_clients != NULL, "clients", err))
        return -1;
    return zap_list_merge(&b->allow_clients, &b->admin_clients, err);
}

static int open_sockets(broker *b, llmq_err *err)
{
    if (make_router(b, &b->clients, CLIENT_SNDHWM, ZAP_DOMAIN_CLIENTS, err))
        return llmq_err_prefix(err, "clients socket");
    if (make_router(b, &b->workers, 0, ZAP_DOMAIN_WORKERS, err))
        return llmq_err_prefix(err, "workers socket");
    if (b->curve && zap_start(&b->zap, b->zctx, b->workers, b->clients,
                              &b->allow_workers, &b->allow_clients, err))
        return -1;
    if (bind_router(b->clients, b->cfg.clients_endpoint, err))
        return llmq_err_prefix(err, "clients socket");
    if (bind_router(b->workers, b->cfg.workers_endpoint, err))
        return llmq_err_prefix(err, "workers socket");
    return 0;
}

/* Files past this size get a line before their check, which takes a
 * while (docs/OPERATIONS.md gives the figure). */
#define CHECK_NOTICE_BYTES (64 << 20)

static void log_check_start(const broker *b)
{
    struct stat sb;
    if (b->cfg.skip_check || stat(b->cfg.db_path, &sb) != 0 ||
        sb.st_size < CHECK_NOTICE_BYTES)
        return;
    broker_log("database %s (%.2f GB): PRAGMA quick_check before serving"
               " (--skip-check skips it)",
               b->cfg.db_path, (double)sb.st_size / 1e9);
}

static void log_opened(const broker *b)
{
    const store_open_info in = store_opened(b->st);
    if (in.created)
        broker_log("database %s: created%s", b->cfg.db_path,
                   in.bytes == 0  ? " in the empty file (--init)"
                   : in.bytes > 0 ? " in the SQLite file (--init)"
                                  : "");
    else if (in.check_ms >= 0)
        broker_log("database %s (%.1f MB): quick_check ok in %.1f s",
                   b->cfg.db_path, (double)in.bytes / 1e6, in.check_ms / 1e3);
    else
        broker_log("database %s: not checked (--skip-check)", b->cfg.db_path);
    if (!in.created && in.from_version < STORE_SCHEMA_VERSION)
        broker_log("database %s: migrated from schema version %" PRId64
                   " to %d in %.1f s",
                   b->cfg.db_path, in.from_version, STORE_SCHEMA_VERSION,
                   in.migrate_ms / 1e3);
}

static int open_parts(broker *b, llmq_err *err)
{
    if (load_security(b, err))
        return -1;
    store_opts so = {.max_attempts = b->cfg.max_attempts,
                     .sync = b->cfg.sync,
                     .init = b->cfg.init,
                     .skip_check = b->cfg.skip_check};
    log_check_start(b);
    if (store_open(&b->st, b->cfg.db_path, &so, clock_wall_ms(), err))
        return -1;
    log_opened(b);
    b->zctx = zmq_ctx_new();
    if (!b->zctx)
        return llmq_errf(err, "zmq_ctx_new: %s", zmq_strerror(errno));
    return open_sockets(b, err);
}

/* "FILE (N keys)" or "any key (--allow-any-SIDE)"; n: the file's keys. */
static void describe_side(char *out, size_t size, const zap_list *l, size_t n,
                          const char *path, const char *side)
{
    if (!l->set)
        snprintf(out, size, "any key (--allow-any-%s)", side);
    else
        snprintf(out, size, "%s (%zu key%s)", path ? path : "admins only", n,
                 n == 1 ? "" : "s");
}

static void log_security(const broker *b)
{
    if (!b->curve) {
        broker_log("security: none (no CURVE key)%s; every client sees every"
                   " job",
                   b->cfg.insecure ? "; --insecure given" : "");
        return;
    }
    char workers[300], clients[300];
    describe_side(workers, sizeof workers, &b->allow_workers,
                  b->allow_workers.n, b->cfg.allow_workers, "workers");
    /* The admins were added to the clients' list. */
    size_t n_clients = b->allow_clients.set
                           ? b->allow_clients.n - b->admin_clients.n
                           : 0;
    describe_side(clients, sizeof clients, &b->allow_clients, n_clients,
                  b->cfg.allow_clients, "clients");
    broker_log("security: CURVE, broker public key %s; workers: %s;"
               " clients: %s; admins: %zu key%s%s%s; a client sees only the"
               " jobs its key submitted",
               b->keys.public_key, workers, clients, b->admin_clients.n,
               b->admin_clients.n == 1 ? "" : "s",
               b->cfg.admin_clients ? " from " : "",
               b->cfg.admin_clients ? b->cfg.admin_clients : "");
}

/* A start that failed after the database was opened (an endpoint that
 * cannot be bound, no room): a database this start created is not left
 * behind, empty, for the next one to mistake for a queue. */
static int fail_open(broker *b)
{
    if (b->st && store_remove_if_new(b->st))
        broker_log("database %s: removed, as this start made it and failed",
                   b->cfg.db_path);
    broker_close(b);
    return -1;
}

int broker_open(broker **out, const broker_config *cfg, llmq_err *err)
{
    *out = NULL;
    broker *b = calloc(1, sizeof *b);
    if (!b)
        return llmq_errf(err, "out of memory");
    b->cfg = *cfg;
    if (open_parts(b, err))
        return fail_open(b);
    log_security(b);
    b->now = clock_mono_ms();
    if (check_room(b, err))
        return fail_open(b);
    int64_t counts[STORE_N_STATES];
    store_counts_all(b->st, counts);
    broker_log("listening: clients %s, workers %s; database %s"
               " (synchronous=%s): %" PRId64 " queued, %" PRId64
               " done, %" PRId64 " failed",
               cfg->clients_endpoint, cfg->workers_endpoint, cfg->db_path,
               cfg->sync == STORE_SYNC_NORMAL ? "NORMAL" : "FULL",
               counts[STORE_QUEUED], counts[STORE_DONE], counts[STORE_FAILED]);
    *out = b;
    return 0;
}

void broker_close(broker *b)
{
    if (!b)
        return;
    net_outbox_free(&b->out);
    waiters_free(&b->waiters);
    pool_free(&b->pool);
    if (b->clients)
        zmq_close(b->clients);
    if (b->workers)
        zmq_close(b->workers);
    if (b->zctx && b->zap) {
        zmq_ctx_shutdown(b->zctx); /* ends the ZAP thread's wait */
        zap_stop(b->zap);
    }
    if (b->zctx)
        zmq_ctx_term(b->zctx);
    zap_list_free(&b->allow_workers);
    zap_list_free(&b->allow_clients);
    zap_list_free(&b->admin_clients);
    store_close(b->st);
    free(b);
}

/* ---- reading ---------------------------------------------------------------------- */

typedef int (*handler_fn)(broker *b, const net_peer *from, const void *body,
                          size_t len, llmq_err *err);

/* *more: the budget ran out with messages still waiting. */
static int read_socket(broker *b, void *sock, handler_fn handle, bool *more,
                       llmq_err *err)
{
    *more = true;
    for (int i = 0; i < READ_BUDGET; i++) {
        net_peer from;
        zmq_msg_t body;
        net_status st;
        if (net_recv(sock, &from, &body, &st, err))
            return -1;
        if (st == NET_NONE) {
            *more = false;
            return 0;
        }
        int rc = 0;
        if (st == NET_MALFORMED) {
            rc = broker_refuse(b, sock, &from, 0, WIRE_E_MALFORMED, NULL,
                               "envelope: more than %d frames before the body,"
                               " a frame over %d bytes, or no body",
                               NET_MAX_ENVELOPE, NET_MAX_FRAME_BYTES);
        } else {
            rc = handle(b, &from, zmq_msg_data(&body), zmq_msg_size(&body), err);
            zmq_msg_close(&body);
        }
        net_peer_close(&from);
        if (rc)
            return -1;
    }
    return 0;
}

static void read_stops(broker *b)
{
    char buf[128];
    ssize_t n = read(b->cfg.stop_fd, buf, sizeof buf);
    if (n > 0)
        b->stops++;
}

/* ---- timers --------------------------------------------------------------------------- */

static int send_heartbeat(broker *b, pool_worker *w, llmq_err *err)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HEARTBEAT);
    w->last_sent = b->now;
    return broker_reply(b, b->workers, &w->peer, &m, err);
}

/* A worker's heartbeat may be among the worker messages not read yet
 * (workers_backlog): no one is declared dead before they are all read. */
static int check_workers(broker *b, bool workers_backlog, llmq_err *err)
{
    for (size_t i = 0; i < b->pool.n;) {
        pool_worker *w = b->pool.v[i];
        if (!workers_backlog &&
            b->now - w->last_heard > b->cfg.dead_after_ms) {
            char why[96];
            snprintf(why, sizeof why, "no message for %" PRId64 " ms",
                     b->now - w->last_heard);
            if (on_worker_end(b, w, SESSION_LOST, why, err))
                return -1;
            continue; /* w was removed; another one is at i now */
        }
        if (b->now - w->last_sent >= b->cfg.heartbeat_ms &&
            send_heartbeat(b, w, err))
            return -1;
        i++;
    }
    return 0;
}

static int start_drain(broker *b, llmq_err *err)
{
    b->draining = true;
    b->drain_deadline = b->now + b->cfg.grace_ms;
    broker_log("stopping: refusing new submits; %" PRId64 " jobs running on %zu"
               " workers get %u ms to finish",
               store_running(b->st), b->pool.n, b->cfg.grace_ms);
    for (size_t i = 0; i < b->pool.n; i++) {
        pool_worker *w = b->pool.v[i];
        wire_msg m;
        wire_msg_init(&m, WIRE_T_SHUTDOWN);
        m.grace_ms = b->cfg.grace_ms;
        w->draining = true;
        w->last_sent = b->now;
        if (broker_reply(b, b->workers, &w->peer, &m, err))
            return -1;
    }
    return 0;
}

/* Whatever still runs goes back to the queue for the next broker. */
static int finish_drain(broker *b, llmq_err *err)
{
    int64_t left = store_running(b->st);
    while (b->pool.n)
        if (on_worker_end(b, b->pool.v[0], SESSION_GONE, "broker stopped", err))
            return -1;
    if (waiters_end_all(&b->waiters, on_client_waiter, b, err))
        return -1;
    broker_log("stopped: %" PRId64 " unfinished jobs back in the queue", left);
    b->done = true;
    return 0;
}

static int check_drain(broker *b, llmq_err *err)
{
    if (b->stops > 0 && !b->draining && start_drain(b, err))
        return -1;
    if (!b->draining)
        return 0;
    if (b->stops > 1 || store_running(b->st) == 0 || b->pool.n == 0 ||
        b->now >= b->drain_deadline)
        return finish_drain(b, err);
    return 0;
}

static void log_undelivered(broker *b)
{
    if (!b->undelivered)
        return;
    broker_log("%" PRIu64 " messages could not be delivered (peer gone or not"
               " reading)",
               b->undelivered);
    b->undelivered = 0;
}

static int timers(broker *b, bool workers_backlog, llmq_err *err)
{
    if (check_workers(b, workers_backlog, err) ||
        waiters_expire(&b->waiters, b->now, on_client_waiter, b, err) ||
        waiters_beat(&b->waiters, b->now, on_client_waiter, b, err))
        return -1;
    log_undelivered(b);
    return check_drain(b, err);
}

/* ---- dispatch ---------------------------------------------------------------------------- */

/* One job at a time to the worker with the most free credits: jobs spread
 * over workers, by priority then submission order (the store's order). */
static int dispatch(broker *b, llmq_err *err)
{
    if (b->draining || b->no_room[0])
        return 0;
    pool_round(&b->pool);
    while (store_queued(b->st) > 0) {
        pool_worker *w = pool_pick(&b->pool);
        if (!w)
            return 0;
        dispatch_ctx ctx = {b, w};
        int got = 0;
        if (store_claim(b->st, w->id, w->model, 1, b->wall, on_worker_send_job,
                        &ctx, &got, err))
            return -1;
        if (got)
            pool_sent(&b->pool, w);
        else
            pool_skip(&b->pool, w);
    }
    return 0;
}

/* ---- the loop -------------------------------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Sleep until the next timer: a heartbeat or death due, a wait deadline or
 * heartbeat, the end of the grace period; never longer than one heartbeat. */
static long poll_timeout(const broker *b)
{
    int64_t next = b->now + b->cfg.heartbeat_ms;
    for (size_t i = 0; i < b->pool.n; i++) {
        const pool_worker *w = b->pool.v[i];
        next = min64(next, w->last_sent + b->cfg.heartbeat_ms);
        next = min64(next, w->last_heard + b->cfg.dead_after_ms + 1);
    }
    next = min64(next, waiters_next_due(&b->waiters));
    if (b->draining)
        next = min64(next, b->drain_deadline);
    return next > b->now ? (long)(next - b->now) : 0;
}

static int wait_for_input(broker *b, llmq_err *err)
{
    zmq_pollitem_t items[3] = {
        {b->clients, 0, ZMQ_POLLIN, 0},
        {b->workers, 0, ZMQ_POLLIN, 0},
        {NULL, b->cfg.stop_fd, ZMQ_POLLIN, 0},
    };
    int n_items = b->cfg.stop_fd >= 0 ? 3 : 2;
    if (zmq_poll(items, n_items, poll_timeout(b)) < 0 && errno != EINTR)
        return llmq_errf(err, "zmq_poll: %s", zmq_strerror(errno));
    if (n_items == 3 && (items[2].revents & ZMQ_POLLIN))
        read_stops(b);
    return 0;
}

static int iterate(broker *b, llmq_err *err)
{
    b->now = clock_mono_ms();
    b->wall = clock_wall_ms();
    if (store_begin(b->st, err) || check_room(b, err))
        return -1;
    bool backlog; /* after the second read: worker messages left unread */
    if (read_socket(b, b->clients, on_client, &backlog, err) ||
        read_socket(b, b->workers, on_worker, &backlog, err) ||
        timers(b, backlog, err) || dispatch(b, err))
        return -1;
    /* Everything the iteration produced goes out only once it is durable. */
    if (store_commit(b->st, err))
        return -1;
    net_flush(&b->out, undelivered, b);
    return 0;
}

int broker_run(broker *b, llmq_err *err)
{
    b->now = clock_mono_ms();
    while (!b->done) {
        if (wait_for_input(b, err) || iterate(b, err)) {
            net_outbox_clear(&b->out);
            if (store_in_transaction(b->st))
                store_rollback(b->st);
            return -1;
        }
    }
    return 0;
}
