#include "broker/checkpointer.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdlib.h>

struct ckpt {
    sqlite3 *db;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool wanted, stop;
};

static void *run(void *arg)
{
    ckpt *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->wanted && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        c->wanted = false;
        pthread_mutex_unlock(&c->mu);
        /* A failure (busy, I/O) is retried at the next poke: the WAL only
         * grows meanwhile, nothing is lost. */
        sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                  NULL, NULL);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int ckpt_start(ckpt **out, const char *path, llmq_err *err)
{
    *out = NULL;
    ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return llmq_errf(err, "out of memory starting the checkpointer");
    /* A connection learns the file is in WAL mode only by reading it; until
     * then a checkpoint quietly does nothing. */
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(c->db, 1000) != SQLITE_OK ||
        sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_master", NULL, NULL,
                     NULL) != SQLITE_OK) {
        llmq_errf(err, "checkpointer: %s: %s", path,
                  c->db ? sqlite3_errmsg(c->db) : "out of memory");
        sqlite3_close(c->db);
        free(c);
        return -1;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->thread, NULL, run, c) != 0) {
        sqlite3_close(c->db);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return llmq_errf(err, "checkpointer: cannot start its thread");
    }
    *out = c;
    return 0;
}

void ckpt_poke(ckpt *c)
{
    pthread_mutex_lock(&c->mu);
    c->wanted = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void ckpt_stop(ckpt *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    sqlite3_close(c->db);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
