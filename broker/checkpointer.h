/* checkpointer: WAL checkpoints on a thread of their own.
 *
 * SQLite's automatic checkpoint runs inside the commit that crosses the
 * threshold, copying the WAL into the database file and fsyncing it: under
 * load that stalled one commit (and every ack waiting on it) for a few
 * hundred ms.  Here the committing connection only pokes; this thread, with
 * its own connection, runs PASSIVE checkpoints, which never block the
 * writer.  It syncs the database file before the WAL can be reused (SQLite
 * does so at synchronous NORMAL and FULL alike), so durability is unchanged.
 *
 * The checkpointer owns its thread and connection; ckpt_stop joins and
 * closes them.  Poking is cheap and may come from the writer's WAL hook. */
#ifndef LLMQ_BROKER_CHECKPOINTER_H
#define LLMQ_BROKER_CHECKPOINTER_H

#include "common/err.h"

typedef struct ckpt ckpt;

/* Opens a second connection to path and starts the thread. */
int ckpt_start(ckpt **out, const char *path, llmq_err *err);
/* Asks for a checkpoint soon; returns at once. */
void ckpt_poke(ckpt *c);
/* Stops and joins the thread, closes its connection.  NULL is fine. */
void ckpt_stop(ckpt *c);

#endif
