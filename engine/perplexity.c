#include "engine/perplexity.h"

#include <math.h>
#include <stdlib.h>

#include "engine/engine.h"

/* -log p(target) from one row of logits, in double as llama.cpp does. */
static double nll_of(const float *logits, int32_t n_vocab, int32_t target)
{
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)(logits[i] - mx));
    return -((double)(logits[target] - mx) - log(sum));
}

typedef struct ppl_run {
    int32_t n_ctx, first, n_scored_per_chunk;
    be_kv *kv;
    model_state *st;
    int32_t *pos, *slot, *row_seq, *table, *logit_rows;
    float *logits;
} ppl_run;

static void run_free(backend *be, ppl_run *r)
{
    if (r->kv)
        be->ops->kv_destroy(be, r->kv);
    model_state_free(r->st);
    free(r->pos);
    free(r->slot);
    free(r->row_seq);
    free(r->table);
    free(r->logit_rows);
    free(r->logits);
}

enum { PPL_BLOCK = 16 };

static int run_init(model *m, int32_t n_ctx, be_kv_type kv_type, ppl_run *r, llmq_err *err)
{
    const model_config *c = model_get_config(m);
    backend *be = model_backend(m);
    const int32_t n_blocks = (n_ctx + PPL_BLOCK - 1) / PPL_BLOCK;
    r->n_ctx = n_ctx;
    r->first = n_ctx / 2;
    r->n_scored_per_chunk = n_ctx - 1 - r->first;
    r->pos = malloc((size_t)n_ctx * sizeof(int32_t));
    r->slot = malloc((size_t)n_ctx * sizeof(int32_t));
    r->row_seq = calloc((size_t)n_ctx, sizeof(int32_t));
    r->table = malloc((size_t)n_blocks * sizeof(int32_t));
    r->logit_rows = malloc((size_t)n_ctx * sizeof(int32_t));
    r->logits = malloc((size_t)r->n_scored_per_chunk * c->n_vocab * sizeof(float));
    if (!r->pos || !r->slot || !r->row_seq || !r->table || !r->logit_rows || !r->logits)
        return llmq_errf(err, "perplexity: out of memory");
    for (int32_t i = 0; i < n_ctx; i++)
        r->pos[i] = r->slot[i] = i;
    for (int32_t b = 0; b < n_blocks; b++)
        r->table[b] = b;
    for (int32_t j = 0; j < r->n_scored_per_chunk; j++)
        r->logit_rows[j] = r->first + j;
    const int32_t kv_dim = c->n_head_kv * c->head_dim;
    if (be->ops->kv_create(be, c->n_layers, n_blocks, PPL_BLOCK, kv_dim,
                           engine_kv_type(kv_type, kv_dim), &r->kv, err) != 0 ||
        model_state_create(&r->st, m, n_ctx, 1, n_blocks, r->n_scored_per_chunk, err) != 0)
        return -1;
    return 0;
}

static int score_chunk(model *m, ppl_run *r, int32_t *chunk, double *nll, llmq_err *err)
{
    const int32_t n_vocab = model_get_config(m)->n_vocab;
    const int32_t n_blocks = (r->n_ctx + PPL_BLOCK - 1) / PPL_BLOCK;
    const model_batch b = {.n_rows = r->n_ctx,
                           .tokens = chunk,
                           .pos = r->pos,
                           .slot = r->slot,
                           .row_seq = r->row_seq,
                           .n_seqs = 1,
                           .block_table = r->table,
                           .seq_len = &r->n_ctx,
                           .max_blocks = n_blocks,
                           .n_logits = r->n_scored_per_chunk,
                           .logit_rows = r->logit_rows};
    if (model_forward(m, r->st, r->kv, &b, r->logits, err) != 0)
        return -1;
    for (int32_t j = 0; j < r->n_scored_per_chunk; j++)
        *nll += nll_of(r->logits + (size_t)j * n_vocab, n_vocab, chunk[r->first + j + 1]);
    return 0;
}

int ppl_compute(model *m, const tok_vocab *vocab, const char *text, size_t len, int32_t n_ctx,
                be_kv_type kv_type, ppl_progress_fn progress, void *progress_ctx, ppl_result *out,
                llmq_err *err)
{
    const model_config *c = model_get_config(m);
    if (n_ctx < 4 || n_ctx > c->n_ctx_train)
        return llmq_errf(err, "perplexity: context %d out of range [4, %d]", n_ctx, c->n_ctx_train);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (tok_encode(vocab, text, len, tok_add_bos(vocab), false, &ids, &n_ids, err) != 0)
        return llmq_err_prefix(err, "perplexity: tokenizing");
    const int32_t n_chunks = (int32_t)(n_ids / (size_t)n_ctx);
    if (n_chunks < 1) {
        free(ids);
        return llmq_errf(err, "perplexity: %zu tokens make no whole chunk of %d", n_ids, n_ctx);
    }
    ppl_run r = {0};
    backend *be = model_backend(m);
    double nll = 0.0;
    int rc = run_init(m, n_ctx, kv_type, &r, err);
    for (int32_t ch = 0; rc == 0 && ch < n_chunks; ch++) {
        int32_t *chunk = ids + (size_t)ch * n_ctx;
        if (tok_add_bos(vocab))
            chunk[0] = tok_bos(vocab);
        rc = score_chunk(m, &r, chunk, &nll, err);
        if (rc == 0 && progress)
            progress(progress_ctx, ch + 1, n_chunks,
                     exp(nll / ((double)(ch + 1) * r.n_scored_per_chunk)));
    }
    if (rc == 0)
        *out = (ppl_result){.ppl = exp(nll / ((double)n_chunks * r.n_scored_per_chunk)),
                            .n_chunks = n_chunks,
                            .n_scored = (int64_t)n_chunks * r.n_scored_per_chunk,
                            .n_tokens = (int64_t)n_ids};
    run_free(be, &r);
    free(ids);
    return rc;
}
