#include "broker/net.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

void net_peer_close(net_peer *p)
{
    for (int i = 0; i < p->n; i++)
        zmq_msg_close(&p->frames[i]);
    p->n = 0;
}

void net_peer_copy(net_peer *dst, const net_peer *src)
{
    dst->n = 0;
    memcpy(dst->key, src->key, sizeof dst->key);
    for (int i = 0; i < src->n; i++) {
        zmq_msg_init(&dst->frames[i]);
        zmq_msg_copy(&dst->frames[i], (zmq_msg_t *)&src->frames[i]);
        dst->n++;
    }
}

bool net_peer_same(const net_peer *a, const net_peer *b)
{
    if (a->n == 0 || b->n == 0)
        return false;
    zmq_msg_t *fa = (zmq_msg_t *)&a->frames[0], *fb = (zmq_msg_t *)&b->frames[0];
    size_t la = zmq_msg_size(fa);
    return la == zmq_msg_size(fb) &&
           memcmp(zmq_msg_data(fa), zmq_msg_data(fb), la) == 0;
}

static bool more_frames(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
    return more != 0;
}

/* Reads and discards the rest of a multipart message. */
static void skip_rest(void *sock)
{
    while (more_frames(sock)) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        zmq_msg_recv(&f, sock, 0);
        zmq_msg_close(&f);
    }
}

static int recv_frame(void *sock, zmq_msg_t *f, int flags, llmq_err *err)
{
    zmq_msg_init(f);
    if (zmq_msg_recv(f, sock, flags) >= 0)
        return 0;
    zmq_msg_close(f);
    if (errno == EAGAIN)
        return 1;
    return llmq_errf(err, "zmq_msg_recv: %s", zmq_strerror(errno));
}

/* The key ZAP admitted the sender's connection with ("" without CURVE).
 * The property is read off the body: every frame the peer sent carries its
 * connection's metadata. */
static void peer_key(net_peer *from, zmq_msg_t *body)
{
    const char *uid = zmq_msg_gets(body, "User-Id");
    size_t n = uid ? strlen(uid) : 0;
    if (n != CURVE_Z85_LEN)
        n = 0; /* not a key of ours: no ZAP, or no CURVE */
    memcpy(from->key, uid ? uid : "", n);
    from->key[n] = '\0';
}

/* After the routing id: envelope frames until the last one, the body. */
static net_status recv_rest(void *sock, net_peer *from, zmq_msg_t *body)
{
    zmq_msg_t f;
    while (more_frames(sock)) {
        if (recv_frame(sock, &f, 0, NULL) != 0)
            return NET_MALFORMED;
        if (!more_frames(sock)) {
            if (zmq_msg_size(&f) == 0) {
                zmq_msg_close(&f);
                return NET_MALFORMED;
            }
            zmq_msg_init(body);
            zmq_msg_move(body, &f);
            zmq_msg_close(&f);
            peer_key(from, body);
            return NET_OK;
        }
        if (from->n == 1 + NET_MAX_ENVELOPE ||
            zmq_msg_size(&f) > NET_MAX_FRAME_BYTES) {
            zmq_msg_close(&f);
            skip_rest(sock);
            return NET_MALFORMED;
        }
        zmq_msg_init(&from->frames[from->n]);
        zmq_msg_move(&from->frames[from->n++], &f);
        zmq_msg_close(&f);
    }
    return NET_MALFORMED; /* a routing id alone: no body */
}

int net_recv(void *sock, net_peer *from, zmq_msg_t *body, net_status *st,
             llmq_err *err)
{
    from->n = 0;
    from->key[0] = '\0';
    *st = NET_NONE;
    int rc = recv_frame(sock, &from->frames[0], ZMQ_DONTWAIT, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    from->n = 1;
    *st = recv_rest(sock, from, body);
    if (*st == NET_MALFORMED) {
        /* The envelope cannot be trusted: replies go to the routing id only. */
        for (int i = 1; i < from->n; i++)
            zmq_msg_close(&from->frames[i]);
        from->n = 1;
    }
    return 0;
}

/* ---- outbox ---------------------------------------------------------------- */

/* The encoder's buffer is sized for any message (8 KiB and up); the body
 * travels in a message of its own size instead, and the buffer is freed
 * here, in this thread, rather than by ZeroMQ's I/O thread after sending. */
static int push(net_outbox *ob, void *sock, const net_peer *to, char *body,
                size_t len, llmq_err *err)
{
    if (grow_reserve(&ob->v, &ob->cap, ob->n + 1, sizeof *ob->v)) {
        free(body);
        return llmq_errf(err, "out of memory queueing a reply");
    }
    net_out *o = &ob->v[ob->n];
    if (zmq_msg_init_size(&o->body, len) != 0) {
        free(body);
        return llmq_errf(err, "out of memory for a reply of %zu bytes", len);
    }
    memcpy(zmq_msg_data(&o->body), body, len);
    free(body);
    o->sock = sock;
    net_peer_copy(&o->to, to);
    ob->n++;
    return 0;
}

int net_send_later(net_outbox *ob, void *sock, const net_peer *to,
                   const wire_msg *m, llmq_err *err)
{
    char *body = NULL;
    size_t len = 0;
    wire_error we;
    memset(&we, 0, sizeof we);
    if (wire_encode(m, &body, &len, &we) != 0) {
        wire_msg reply;
        wire_error_reply(&reply, &we);
        reply.req = m->req;
        if (wire_encode(&reply, &body, &len, &we) != 0)
            return llmq_errf(err, "encoding an error reply: %s", we.err.msg);
    }
    return push(ob, sock, to, body, len, err);
}

/* The body passes to ZeroMQ when sent (it stays ours when not). */
static int send_one(net_out *o)
{
    int flags = ZMQ_SNDMORE | ZMQ_DONTWAIT;
    for (int i = 0; i < o->to.n; i++) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        zmq_msg_copy(&f, &o->to.frames[i]);
        if (zmq_msg_send(&f, o->sock, flags) < 0) {
            zmq_msg_close(&f);
            return errno;
        }
    }
    return zmq_msg_send(&o->body, o->sock, ZMQ_DONTWAIT) < 0 ? errno : 0;
}

void net_flush(net_outbox *ob, net_undelivered_fn fn, void *ctx)
{
    for (size_t i = 0; i < ob->n; i++) {
        int e = send_one(&ob->v[i]);
        if (e && fn)
            fn(ctx, ob->v[i].sock, &ob->v[i].to, e);
    }
    net_outbox_clear(ob);
}

void net_outbox_clear(net_outbox *ob)
{
    /* A sent body is an empty message now; closing it is harmless. */
    for (size_t i = 0; i < ob->n; i++) {
        net_peer_close(&ob->v[i].to);
        zmq_msg_close(&ob->v[i].body);
    }
    ob->n = 0;
}

void net_outbox_free(net_outbox *ob)
{
    net_outbox_clear(ob);
    free(ob->v);
    memset(ob, 0, sizeof *ob);
}
