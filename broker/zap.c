#include "broker/zap.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "broker/broker.h"
#include "common/grow.h"
#include "proto/curve.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7 /* version, id, domain, address, identity, mechanism, key */
#define MONITOR_EVENTS                                                       \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)

/* ---- allow-lists ------------------------------------------------------------ */

static int list_push(zap_list *l, const unsigned char key[32], llmq_err *err)
{
    if (grow_reserve(&l->keys, &l->cap, l->n + 1, sizeof *l->keys))
        return llmq_errf(err, "out of memory");
    memcpy(l->keys[l->n++], key, 32);
    return 0;
}

/* The key on one line, comment and surrounding blanks dropped; "" if none.
 * '#' is a Z85 digit: a comment starts a line or follows a blank. */
static char *line_key(char *line)
{
    line[strcspn(line, "\r\n")] = '\0';
    line += strspn(line, " \t");
    char *hash = line[0] == '#' ? line : strstr(line, " #");
    if (!hash)
        hash = strstr(line, "\t#");
    if (hash)
        *hash = '\0';
    size_t n = strlen(line);
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = '\0';
    return line;
}

static int read_lines(zap_list *l, FILE *f, const char *path, llmq_err *err)
{
    char line[512], where[4200];
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        char *key = line_key(line);
        unsigned char raw[32];
        if (!key[0])
            continue;
        snprintf(where, sizeof where, "%s:%d", path, no);
        if (curve_check(key, raw, where, err) || list_push(l, raw, err))
            return -1;
    }
    return 0;
}

int zap_list_load(zap_list *l, const char *path, llmq_err *err)
{
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "r");
    if (!f)
        return llmq_errf(err, "%s: %s", path, strerror(errno));
    int rc = read_lines(l, f, path, err);
    fclose(f);
    if (rc) {
        zap_list_free(l);
        return -1;
    }
    l->set = true;
    return 0;
}

void zap_list_free(zap_list *l)
{
    free(l->keys);
    memset(l, 0, sizeof *l);
}

int zap_list_merge(zap_list *dst, const zap_list *src, llmq_err *err)
{
    for (size_t i = 0; dst->set && i < src->n; i++)
        if (list_push(dst, src->keys[i], err))
            return -1;
    return 0;
}

static bool list_admits(const zap_list *l, const unsigned char *key, size_t len)
{
    if (len != 32)
        return false;
    if (!l->set)
        return true;
    for (size_t i = 0; i < l->n; i++)
        if (memcmp(l->keys[i], key, 32) == 0)
            return true;
    return false;
}

bool zap_list_admits(const zap_list *l, const char *z85_key)
{
    unsigned char raw[32];
    return strlen(z85_key) == CURVE_Z85_LEN && zmq_z85_decode(raw, z85_key) &&
           list_admits(l, raw, sizeof raw);
}

/* ---- the handler ---------------------------------------------------------------- */

struct zap {
    pthread_t thread;
    void *rep, *mon_workers, *mon_clients;
    const zap_list *workers, *clients;
};

/* Frame i of a request as a NUL-terminated string (truncated). */
static void frame_str(zmq_msg_t *f, char *out, size_t cap)
{
    size_t n = zmq_msg_size(f) < cap - 1 ? zmq_msg_size(f) : cap - 1;
    memcpy(out, zmq_msg_data(f), n);
    out[n] = '\0';
}

/* An admitted connection's User-Id is its key (user_id, Z85). */
static void reply(void *rep, zmq_msg_t *id, const char *user_id)
{
    zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_msg_send(id, rep, ZMQ_SNDMORE);
    zmq_send(rep, user_id ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(rep, user_id ? "OK" : "key not allowed", user_id ? 2 : 15,
             ZMQ_SNDMORE);
    zmq_send(rep, user_id ? user_id : "", user_id ? strlen(user_id) : 0,
             ZMQ_SNDMORE);
    zmq_send(rep, "", 0, 0);
}

/* True when the peer is admitted; key gets its Z85 public key ("?" when it
 * has none). */
static bool decide(const zap *z, zmq_msg_t *f, int nf,
                   char key[CURVE_Z85_LEN + 1])
{
    char domain[32], addr[64], mech[16];
    strcpy(key, "?");
    if (nf < ZAP_FRAMES) {
        broker_log("refused a connection: ZAP request of %d frames", nf);
        return false;
    }
    frame_str(&f[2], domain, sizeof domain);
    frame_str(&f[3], addr, sizeof addr);
    frame_str(&f[5], mech, sizeof mech);
    const zap_list *l = strcmp(domain, ZAP_DOMAIN_WORKERS) == 0   ? z->workers
                        : strcmp(domain, ZAP_DOMAIN_CLIENTS) == 0 ? z->clients
                                                                  : NULL;
    bool curve = strcmp(mech, "CURVE") == 0 && zmq_msg_size(&f[6]) == 32;
    if (curve)
        zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
    if (l && curve && list_admits(l, zmq_msg_data(&f[6]), 32))
        return true;
    broker_log("refused a %s connection from %s: %s key %s is not allowed",
               l ? domain : "(unknown side)", addr[0] ? addr : "?", mech, key);
    return false;
}

/* One request: read all its frames, answer it. */
static void serve_request(zap *z)
{
    zmq_msg_t f[ZAP_FRAMES + 1];
    int nf = 0, more = 1;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, z->rep, 0) < 0) {
            zmq_msg_close(&part);
            break;
        }
        more = zmq_msg_more(&part);
        if (nf < ZAP_FRAMES + 1) {
            zmq_msg_init(&f[nf]);
            zmq_msg_move(&f[nf++], &part);
        }
        zmq_msg_close(&part);
    }
    char key[CURVE_Z85_LEN + 1];
    if (nf >= 2)
        reply(z->rep, &f[1], decide(z, f, nf, key) ? key : NULL);
    for (int i = 0; i < nf; i++)
        zmq_msg_close(&f[i]);
}

/* A monitor event: [u16 event, u32 value][endpoint]. */
static void serve_monitor(void *mon, const char *side)
{
    zmq_msg_t ev, ep;
    zmq_msg_init(&ev);
    zmq_msg_init(&ep);
    if (zmq_msg_recv(&ev, mon, 0) >= 0 && zmq_msg_more(&ev) &&
        zmq_msg_recv(&ep, mon, 0) >= 0 && zmq_msg_size(&ev) >= 6) {
        uint32_t value;
        memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
        char where[128];
        frame_str(&ep, where, sizeof where);
        broker_log("refused a %s connection on %s: CURVE handshake failed"
                   " (ZMTP error 0x%x): a peer without CURVE, with the wrong"
                   " broker key, or with a key refused above",
                   side, where, value);
    }
    zmq_msg_close(&ev);
    zmq_msg_close(&ep);
}

static void *zap_main(void *arg)
{
    zap *z = arg;
    for (;;) {
        zmq_pollitem_t items[3] = {{z->rep, 0, ZMQ_POLLIN, 0},
                                   {z->mon_workers, 0, ZMQ_POLLIN, 0},
                                   {z->mon_clients, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break; /* ETERM: the context is shutting down */
        }
        if (items[0].revents & ZMQ_POLLIN)
            serve_request(z);
        if (items[1].revents & ZMQ_POLLIN)
            serve_monitor(z->mon_workers, ZAP_DOMAIN_WORKERS);
        if (items[2].revents & ZMQ_POLLIN)
            serve_monitor(z->mon_clients, ZAP_DOMAIN_CLIENTS);
    }
    zmq_close(z->rep);
    zmq_close(z->mon_workers);
    zmq_close(z->mon_clients);
    return NULL;
}

static void *monitor(void *zctx, void *router, const char *side, llmq_err *err)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://llmq-monitor-%s", side);
    if (zmq_socket_monitor(router, ep, MONITOR_EVENTS) != 0) {
        llmq_errf(err, "zmq_socket_monitor(%s): %s", side, zmq_strerror(errno));
        return NULL;
    }
    void *s = zmq_socket(zctx, ZMQ_PAIR);
    if (s && zmq_connect(s, ep) == 0)
        return s;
    llmq_errf(err, "monitor of the %s socket: %s", side, zmq_strerror(errno));
    if (s)
        zmq_close(s);
    return NULL;
}

static int open_sockets(zap *z, void *zctx, void *workers, void *clients,
                        llmq_err *err)
{
    z->rep = zmq_socket(zctx, ZMQ_REP);
    if (!z->rep || zmq_bind(z->rep, ZAP_ENDPOINT) != 0)
        return llmq_errf(err, "ZAP handler %s: %s", ZAP_ENDPOINT,
                         zmq_strerror(errno));
    z->mon_workers = monitor(zctx, workers, ZAP_DOMAIN_WORKERS, err);
    if (!z->mon_workers)
        return -1;
    z->mon_clients = monitor(zctx, clients, ZAP_DOMAIN_CLIENTS, err);
    return z->mon_clients ? 0 : -1;
}

int zap_start(zap **out, void *zctx, void *workers, void *clients,
              const zap_list *allow_workers, const zap_list *allow_clients,
              llmq_err *err)
{
    *out = NULL;
    zap *z = calloc(1, sizeof *z);
    if (!z)
        return llmq_errf(err, "out of memory");
    z->workers = allow_workers;
    z->clients = allow_clients;
    int rc = open_sockets(z, zctx, workers, clients, err);
    if (rc == 0 && pthread_create(&z->thread, NULL, zap_main, z) != 0)
        rc = llmq_errf(err, "cannot start the ZAP thread");
    if (rc) {
        void *socks[3] = {z->rep, z->mon_workers, z->mon_clients};
        for (int i = 0; i < 3; i++)
            if (socks[i])
                zmq_close(socks[i]);
        free(z);
        return -1;
    }
    *out = z;
    return 0;
}

void zap_stop(zap *z)
{
    if (!z)
        return;
    pthread_join(z->thread, NULL);
    free(z);
}

/* ---- endpoints ------------------------------------------------------------------- */

bool zap_endpoint_local(const char *endpoint)
{
    if (!strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9))
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *host = endpoint + 6;
    return !strncmp(host, "127.", 4) || !strncmp(host, "localhost:", 10) ||
           !strncmp(host, "[::1]:", 6);
}
