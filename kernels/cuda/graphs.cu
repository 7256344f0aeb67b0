/* graphs: decode steps replayed as CUDA graphs.
 *
 * A decode step launches ~15 kernels per layer (~480 at 7B), most of them a
 * few microseconds long; recorded once as a graph, the step is one launch
 * and the GPU runs its kernels back to back without the host in between.
 * The model brackets a decode step's kernels with graph_begin / graph_end
 * under a key (be_graph_key): the batch arrays live at fixed addresses and
 * are uploaded before the step, so steps of one key launch the same
 * kernels with the same arguments.  Here the key becomes what the launches
 * depend on: rows, logit rows, and the split-KV grid (max_seq_len in
 * 128-key splits).  Head dims other than 64 and 128 are not recorded: the
 * plain attention kernel sizes its shared memory by the exact length.
 *
 * A key seen the first time runs eagerly: that run grows the scratch to
 * what the step needs, since nothing may allocate or synchronize while a
 * stream records.  The second time it is recorded, instantiated and
 * launched; later ones replay.  Recorded steps point into device memory,
 * so every free (and the scratch growing, which frees the old buffer) drops
 * them all; the key's owner keeps two model states apart.  At most
 * GRAPH_SLOTS keys are kept, the least recently used replaced.
 * LLMQ_CUDA_GRAPHS=0 in the environment turns recording off. */
#include "kernels/cuda/cuda_internal.h"

/* The split-KV grid of the decode attention kernel (attention.cu). */
#define GRAPH_KEYS_PER_SPLIT 128

enum { SLOT_EMPTY = 0, SLOT_SEEN, SLOT_READY };

void cuda_graphs_init(cuda_backend *cb)
{
    cb->graphs_on = cuda_env_allows("LLMQ_CUDA_GRAPHS");
}

void cuda_graphs_drop(cuda_backend *cb)
{
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        if (cb->graphs[i].exec)
            cudaGraphExecDestroy(cb->graphs[i].exec);
        cb->graphs[i] = cuda_graph_slot{};
    }
}

/* The slot recorded under key, or a fresh one in place of an empty or the
 * least recently used slot. */
static cuda_graph_slot *find_or_claim(cuda_backend *cb, const cuda_graph_slot &key)
{
    cuda_graph_slot *victim = NULL;
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        cuda_graph_slot *g = &cb->graphs[i];
        if (g->state != SLOT_EMPTY && g->owner == key.owner && g->rows == key.rows &&
            g->logits == key.logits && g->splits == key.splits)
            return g;
        if (!victim || (victim->state != SLOT_EMPTY &&
                        (g->state == SLOT_EMPTY || g->last_use < victim->last_use)))
            victim = g;
    }
    if (victim->exec)
        cudaGraphExecDestroy(victim->exec);
    *victim = key;
    return victim;
}

int cu_graph_begin(backend *be, const be_graph_key *k)
{
    cuda_backend *cb = (cuda_backend *)be->impl;
    if (!cb->graphs_on || cb->failed || (k->head_dim != 64 && k->head_dim != 128))
        return 0;
    cuda_graph_slot key = {};
    key.owner = k->owner;
    key.rows = k->n_rows;
    key.logits = k->n_logits;
    key.splits = (k->max_seq_len + GRAPH_KEYS_PER_SPLIT - 1) / GRAPH_KEYS_PER_SPLIT;
    cuda_graph_slot *g = find_or_claim(cb, key);
    g->last_use = ++cb->graph_clock;
    switch (g->state) {
    case SLOT_READY: {
        const cudaError_t e = cudaGraphLaunch(g->exec, cb->stream);
        if (e == cudaSuccess)
            return 1;
        cuda_fail(cb, "decode step graph (%d rows): %s", g->rows, cudaGetErrorString(e));
        return 0;
    }
    case SLOT_SEEN:
        if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess)
            cb->recording = g;
        return 0;
    default:
        g->state = SLOT_SEEN; /* this time eagerly */
        return 0;
    }
}

int cu_graph_end(backend *be)
{
    cuda_backend *cb = (cuda_backend *)be->impl;
    cuda_graph_slot *g = cb->recording;
    if (!g)
        return BE_GRAPH_DONE;
    cb->recording = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->stream, &graph);
    if (e == cudaSuccess && !cb->record_broken)
        e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    const bool whole = !cb->record_broken;
    cb->record_broken = false;
    if (e == cudaSuccess && whole)
        e = cudaGraphLaunch(g->exec, cb->stream);
    if (e == cudaSuccess && whole) {
        g->state = SLOT_READY;
        return BE_GRAPH_DONE;
    }
    /* Nothing of the step ran: the caller issues it again, eagerly.  A
     * step cut short by a scratch that had to grow is recorded next time;
     * a recording CUDA refused turns recording off for good. */
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    g->state = SLOT_SEEN;
    if (e != cudaSuccess) {
        cb->graphs_on = false;
        cudaGetLastError(); /* a refused recording leaves its error behind */
    }
    return BE_GRAPH_REDO;
}
