#include "tests/integration/harness.h"
#include "tests/unit/sql_read.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/file.h"

void h_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void h_init(harness *h, const char *name, unsigned alarm_s)
{
    memset(h, 0, sizeof *h);
    const char *build = getenv("LLMQ_BUILDDIR");
    if (!build) {
        fprintf(stderr, "LLMQ_BUILDDIR is not set: run through `make check`\n");
        exit(77);
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(h->dir, sizeof h->dir, "%s/%s-XXXXXX", tmp ? tmp : "/tmp", name);
    if (!mkdtemp(h->dir)) {
        perror("mkdtemp");
        exit(99);
    }
    snprintf(h->exe, sizeof h->exe, "%s/broker/llmq-broker", build);
    snprintf(h->db, sizeof h->db, "%s/llmq.db", h->dir);
    snprintf(h->log, sizeof h->log, "%s/broker.log", h->dir);
    snprintf(h->clients, sizeof h->clients, "ipc://%s/clients", h->dir);
    snprintf(h->workers, sizeof h->workers, "ipc://%s/workers", h->dir);
    h->zctx = zmq_ctx_new();
    alarm(alarm_s);
}

void h_start(harness *h, const char *const *extra)
{
    const char *argv[32] = {h->exe, "--db", h->db, "--clients", h->clients,
                            "--workers", h->workers};
    int n = 7;
    for (; extra && *extra && n < 31; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    fflush(NULL);
    h->broker = fork();
    if (h->broker == 0) {
        if (!freopen(h->log, "a", stderr))
            _exit(98);
        execv(h->exe, (char *const *)argv);
        _exit(97);
    }
}

int h_reap(pid_t pid, int wait_ms)
{
    int status = -1;
    const int64_t end = clock_mono_ms() + wait_ms;
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        if (clock_mono_ms() >= end)
            break;
        h_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int h_stop(harness *h, int wait_ms)
{
    if (h->broker <= 0)
        return -1;
    kill(h->broker, SIGTERM);
    const int status = h_reap(h->broker, wait_ms);
    h->broker = 0;
    return status;
}

void h_kill9(harness *h)
{
    if (h->broker <= 0)
        return;
    kill(h->broker, SIGKILL);
    h_reap(h->broker, 0);
    h->broker = 0;
}

void h_done(harness *h, bool keep)
{
    if (h->broker > 0)
        h_stop(h, 5000);
    zmq_ctx_term(h->zctx);
    if (keep) {
        fprintf(stderr, "kept %s (broker log: %s)\n", h->dir, h->log);
        return;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", h->dir);
}

void *h_peer(harness *h, const char *endpoint)
{
    void *s = zmq_socket(h->zctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(s, endpoint) != 0) {
        fprintf(stderr, "connect %s: %s\n", endpoint, zmq_strerror(errno));
        exit(99);
    }
    return s;
}

void h_close(void *sock)
{
    zmq_close(sock);
}

int h_send_raw(void *sock, const void *body, size_t len)
{
    return zmq_send(sock, body, len, 0) < 0 ? -1 : 0;
}

msgpack_packer *h_body_start(h_body *b)
{
    msgpack_sbuffer_init(&b->buf);
    msgpack_packer_init(&b->pk, &b->buf, msgpack_sbuffer_write);
    return &b->pk;
}

void h_pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

int h_body_send(void *sock, h_body *b)
{
    int rc = h_send_raw(sock, b->buf.data, b->buf.size);
    msgpack_sbuffer_destroy(&b->buf);
    return rc;
}

int h_send(void *sock, const wire_msg *m)
{
    char *body;
    size_t len;
    wire_error we;
    if (wire_encode(m, &body, &len, &we) != 0) {
        fprintf(stderr, "h_send: %s\n", we.err.msg);
        return -1;
    }
    int rc = h_send_raw(sock, body, len);
    free(body);
    return rc;
}

int h_recv(void *sock, int timeout_ms, wire_msg *m)
{
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return -1;
    zmq_msg_t f;
    zmq_msg_init(&f);
    if (zmq_msg_recv(&f, sock, 0) < 0) {
        zmq_msg_close(&f);
        return -1;
    }
    wire_error we;
    int rc = wire_decode(zmq_msg_data(&f), zmq_msg_size(&f), WIRE_DIR_ANY, m, &we);
    zmq_msg_close(&f);
    if (rc != 0)
        fprintf(stderr, "h_recv: undecodable reply: %s\n", we.err.msg);
    return rc;
}

int h_recv_type(void *sock, int timeout_ms, wire_type t, wire_msg *m)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - clock_mono_ms();
        if (left <= 0 || h_recv(sock, (int)left, m) != 0)
            return -1;
        if (m->type == t)
            return 0;
        wire_msg_free(m);
    }
}

void h_job(wire_job *j, const char *key, const char *prompt)
{
    memset(j, 0, sizeof *j);
    j->key = key;
    j->prompt = prompt;
    j->params = job_params_default();
}

int64_t h_sql(const harness *h, const char *sql) { return sql_first_int(h->db, sql); }

bool h_file_has(const char *path, const char *text)
{
    char *buf;
    size_t len;
    llmq_err err;
    if (file_read_all(path, &buf, &len, &err) != 0)
        return false;
    bool found = strstr(buf, text) != NULL;
    free(buf);
    return found;
}
