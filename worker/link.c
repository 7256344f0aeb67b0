#include "worker/link.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"

struct link_conn {
    void *zctx;
    void *dealer;    /* the I/O thread's only */
    void *pipe_main; /* the main thread's only */
    void *pipe_io;   /* the I/O thread's only */
    pthread_t thread;
    bool started;
    char *heartbeat; /* encoded heartbeat body */
    size_t heartbeat_len;
    _Atomic uint32_t heartbeat_ms;
    _Atomic int64_t last_heard; /* monotonic ms */
};

/* ---- the I/O thread ------------------------------------------------------------ */

/* Broker -> pipe: every waiting message, its body frame moved as is. */
static void pump_in(link_conn *l)
{
    for (;;) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, l->dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f);
            return;
        }
        atomic_store(&l->last_heard, clock_mono_ms());
        /* The body is the last frame; a broker sends one, but envelopes are
         * legal on the wire and carry nothing for a worker. */
        if (zmq_msg_more(&f) || zmq_msg_size(&f) == 0 ||
            zmq_msg_send(&f, l->pipe_io, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&f);
    }
}

static void to_broker(link_conn *l, zmq_msg_t *f)
{
    if (zmq_msg_send(f, l->dealer, ZMQ_DONTWAIT) < 0) {
        log_line("llmq-worker", NULL, "a message to the broker was dropped: %s",
                 zmq_strerror(errno));
        zmq_msg_close(f);
    }
}

/* Pipe -> broker.  Returns false on the stop request (an empty frame: no
 * body is empty). */
static bool pump_out(link_conn *l, int64_t *last_sent, bool *talking)
{
    for (;;) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, l->pipe_io, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f);
            return true;
        }
        if (zmq_msg_size(&f) == 0) {
            zmq_msg_close(&f);
            return false;
        }
        to_broker(l, &f);
        *last_sent = clock_mono_ms();
        *talking = true;
    }
}

static void beat(link_conn *l, int64_t *last_sent)
{
    zmq_msg_t f;
    zmq_msg_init_size(&f, l->heartbeat_len);
    memcpy(zmq_msg_data(&f), l->heartbeat, l->heartbeat_len);
    to_broker(l, &f);
    *last_sent = clock_mono_ms();
}

static void *io_main(void *arg)
{
    link_conn *l = arg;
    int64_t last_sent = clock_mono_ms();
    bool talking = false; /* the hello went out */
    for (;;) {
        int64_t period = atomic_load(&l->heartbeat_ms);
        long timeout = -1;
        if (talking) {
            int64_t due = last_sent + period - clock_mono_ms();
            timeout = due > 0 ? (long)due : 0;
        }
        zmq_pollitem_t items[2] = {{l->dealer, 0, ZMQ_POLLIN, 0},
                                   {l->pipe_io, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, timeout) < 0 && errno != EINTR) {
            log_line("llmq-worker", NULL, "link thread: zmq_poll: %s", zmq_strerror(errno));
            return NULL;
        }
        if (items[0].revents & ZMQ_POLLIN)
            pump_in(l);
        if ((items[1].revents & ZMQ_POLLIN) && !pump_out(l, &last_sent, &talking))
            return NULL;
        if (talking && clock_mono_ms() - last_sent >= period)
            beat(l, &last_sent);
    }
}

/* ---- opening and closing ----------------------------------------------------------- */

static int sockopt(void *s, int opt, int value, llmq_err *err)
{
    if (zmq_setsockopt(s, opt, &value, sizeof value) != 0)
        return llmq_errf(err, "zmq_setsockopt(%d): %s", opt, zmq_strerror(errno));
    return 0;
}

static int open_pipe(link_conn *l, llmq_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "inproc://llmq-link-%p", (void *)l);
    l->pipe_io = zmq_socket(l->zctx, ZMQ_PAIR);
    l->pipe_main = zmq_socket(l->zctx, ZMQ_PAIR);
    if (!l->pipe_io || !l->pipe_main)
        return llmq_errf(err, "zmq_socket: %s", zmq_strerror(errno));
    /* Jobs are bounded by credits and results by slots: never block or drop. */
    if (sockopt(l->pipe_io, ZMQ_SNDHWM, 0, err) || sockopt(l->pipe_io, ZMQ_RCVHWM, 0, err) ||
        sockopt(l->pipe_main, ZMQ_SNDHWM, 0, err) || sockopt(l->pipe_main, ZMQ_RCVHWM, 0, err))
        return -1;
    if (zmq_bind(l->pipe_io, name) != 0 || zmq_connect(l->pipe_main, name) != 0)
        return llmq_errf(err, "%s: %s", name, zmq_strerror(errno));
    return 0;
}

static int open_dealer(link_conn *l, const char *endpoint, const curve_keys *keys,
                       llmq_err *err)
{
    int64_t maxmsg = WIRE_MAX_BODY_BYTES;
    l->dealer = zmq_socket(l->zctx, ZMQ_DEALER);
    if (!l->dealer)
        return llmq_errf(err, "zmq_socket: %s", zmq_strerror(errno));
    if (sockopt(l->dealer, ZMQ_LINGER, LINK_LINGER_MS, err) ||
        sockopt(l->dealer, ZMQ_RCVHWM, 0, err))
        return -1;
    if (zmq_setsockopt(l->dealer, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
        return llmq_errf(err, "zmq_setsockopt(MAXMSGSIZE): %s", zmq_strerror(errno));
    if (keys && curve_connect_as(l->dealer, keys, err))
        return -1;
    if (zmq_connect(l->dealer, endpoint) != 0)
        return llmq_errf(err, "--broker %s: %s", endpoint, zmq_strerror(errno));
    return 0;
}

static int encode_heartbeat(link_conn *l, llmq_err *err)
{
    wire_msg m;
    wire_error we;
    wire_msg_init(&m, WIRE_T_HEARTBEAT);
    if (wire_encode(&m, &l->heartbeat, &l->heartbeat_len, &we) != 0)
        return llmq_errf(err, "heartbeat: %s", we.err.msg);
    return 0;
}

int link_open(link_conn **out, const char *endpoint, uint32_t heartbeat_ms,
              const curve_keys *keys, llmq_err *err)
{
    *out = NULL;
    link_conn *l = calloc(1, sizeof *l);
    if (!l)
        return llmq_errf(err, "out of memory");
    atomic_init(&l->heartbeat_ms, heartbeat_ms);
    atomic_init(&l->last_heard, clock_mono_ms());
    l->zctx = zmq_ctx_new();
    int rc = l->zctx ? 0 : llmq_errf(err, "zmq_ctx_new: %s", zmq_strerror(errno));
    if (rc == 0)
        rc = encode_heartbeat(l, err) || open_pipe(l, err) || open_dealer(l, endpoint, keys, err);
    if (rc == 0 && (errno = pthread_create(&l->thread, NULL, io_main, l)) != 0)
        rc = llmq_errf(err, "cannot start the link thread: %s", strerror(errno));
    l->started = rc == 0;
    if (rc) {
        link_close(l);
        return -1;
    }
    *out = l;
    return 0;
}

void link_close(link_conn *l)
{
    if (!l)
        return;
    if (l->started) {
        /* The stop request queues behind everything sent before it. */
        zmq_send(l->pipe_main, "", 0, 0);
        pthread_join(l->thread, NULL);
    }
    void *socks[3] = {l->pipe_main, l->pipe_io, l->dealer};
    for (int i = 0; i < 3; i++)
        if (socks[i])
            zmq_close(socks[i]);
    if (l->zctx)
        zmq_ctx_term(l->zctx); /* waits up to LINK_LINGER_MS for the DEALER's queue */
    free(l->heartbeat);
    free(l);
}

/* ---- the main thread's side ------------------------------------------------------------ */

void *link_socket(link_conn *l)
{
    return l->pipe_main;
}

int link_send(link_conn *l, const wire_msg *m, llmq_err *err)
{
    char *body;
    size_t len;
    wire_error we;
    if (wire_encode(m, &body, &len, &we) != 0)
        return llmq_errf(err, "%s: %s", wire_type_name(m->type), we.err.msg);
    int rc = zmq_send(l->pipe_main, body, len, 0) < 0 ? -1 : 0;
    free(body);
    if (rc)
        return llmq_errf(err, "link pipe: %s", zmq_strerror(errno));
    return 0;
}

int link_recv(link_conn *l, wire_msg *m, llmq_err *err)
{
    zmq_msg_t f;
    zmq_msg_init(&f);
    if (zmq_msg_recv(&f, l->pipe_main, ZMQ_DONTWAIT) < 0) {
        int e = errno;
        zmq_msg_close(&f);
        if (e == EAGAIN || e == EINTR)
            return 0;
        return llmq_errf(err, "link pipe: %s", zmq_strerror(e));
    }
    wire_error we;
    memset(&we, 0, sizeof we);
    if (wire_decode(zmq_msg_data(&f), zmq_msg_size(&f), WIRE_DIR_BROKER_TO_WORKER, m, &we) != 0) {
        memset(m, 0, sizeof *m);
        llmq_errf(err, "an undecodable message from the broker (%s): %s",
                  wire_code_name(we.code), we.err.msg);
    }
    zmq_msg_close(&f);
    return 1;
}

void link_set_heartbeat(link_conn *l, uint32_t heartbeat_ms)
{
    atomic_store(&l->heartbeat_ms, heartbeat_ms);
}

int64_t link_silent_ms(const link_conn *l)
{
    return clock_mono_ms() - atomic_load(&l->last_heard);
}
