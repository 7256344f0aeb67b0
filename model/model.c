#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_weights {
    float *attn_norm, *ffn_norm; /* backend memory */
    be_weight *wq, *wk, *wv, *wo, *wg, *wu, *wd;
} layer_weights;

struct model {
    model_config cfg;
    gguf_file *gguf;
    backend *be;
    be_weight *tok_embd;
    be_weight *output; /* == tok_embd when tied */
    float *output_norm;
    layer_weights *layers;
};

struct model_state {
    backend *be;
    int32_t max_rows, max_seqs, max_blocks, max_logits;
    float *x, *q, *k, *v, *g, *u, *xg, *logits; /* backend memory */
    be_act act_dim, act_ffn;
    int32_t *tokens, *pos, *slot, *row_seq, *block_table, *seq_len, *logit_rows, *greedy;
    int32_t *first_gen, *decode_rows; /* be_attn_batch's */
    int32_t *top_ids; /* max_logits x BE_TOP_K_MAX (backends with top_k) */
    float *top_vals;
    int32_t *decode_host; /* host copy of decode_rows */
    int32_t n_logits;    /* logit rows of the last forward pass */
};

/* ---- configuration ---- */

static int get_u32_key(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out,
                       bool required, llmq_err *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = gguf_get_u32(f, key, out, err);
    if (rc < 0)
        return -1;
    if (rc > 0 && required)
        return llmq_errf(err, "missing metadata key '%s'", key);
    return 0;
}

/* Options llama.cpp knows that this engine does not implement: refusing them
 * beats producing plausible garbage. */
static int refuse_unsupported(const gguf_file *f, const char *arch, llmq_err *err)
{
    char key[160];
    gguf_str s;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int rc = gguf_get_str(f, key, &s, err);
    if (rc < 0)
        return -1;
    if (rc == 0 && !gguf_str_eq(s, "none"))
        return llmq_errf(err, "rope scaling type '%.*s' (%s) is not supported", (int)s.len, s.ptr,
                         key);
    uint32_t experts = 0;
    if (get_u32_key(f, arch, "expert_count", &experts, false, err) != 0)
        return -1;
    if (experts > 0)
        return llmq_errf(err, "mixture-of-experts models (%s.expert_count = %u) are not supported",
                         arch, experts);
    float factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scale_linear", arch);
    if (gguf_get_f32(f, key, &factor, err) < 0)
        return -1;
    if (factor != 1.0f)
        return llmq_errf(err, "linear rope scaling (%s = %g) is not supported", key, factor);
    return 0;
}

static int read_config(const gguf_file *f, model_config *c, llmq_err *err)
{
    gguf_str arch_s;
    int rc = gguf_get_str(f, "general.architecture", &arch_s, err);
    if (rc != 0)
        return rc < 0 ? -1 : llmq_errf(err, "missing metadata key 'general.architecture'");
    if (!gguf_str_eq(arch_s, "llama"))
        return llmq_errf(err, "architecture '%.*s' is not supported (supported: llama)",
                         (int)arch_s.len, arch_s.ptr);
    const char *arch = "llama";
    if (refuse_unsupported(f, arch, err) != 0)
        return -1;
    memset(c, 0, sizeof *c);
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name, err) == 0)
        snprintf(c->name, sizeof c->name, "%.*s", (int)(name.len < 127 ? name.len : 127), name.ptr);
    uint32_t dim, layers, heads, heads_kv = 0, ffn, ctx = 2048, rope_dim = 0;
    if (get_u32_key(f, arch, "embedding_length", &dim, true, err) ||
        get_u32_key(f, arch, "block_count", &layers, true, err) ||
        get_u32_key(f, arch, "attention.head_count", &heads, true, err) ||
        get_u32_key(f, arch, "attention.head_count_kv", &heads_kv, false, err) ||
        get_u32_key(f, arch, "feed_forward_length", &ffn, true, err) ||
        get_u32_key(f, arch, "context_length", &ctx, false, err) ||
        get_u32_key(f, arch, "rope.dimension_count", &rope_dim, false, err))
        return -1;
    if (heads_kv == 0)
        heads_kv = heads;
    if (dim == 0 || heads == 0 || dim % heads != 0 || dim > 65536 || layers == 0 || layers > 1024 ||
        ffn == 0 || ffn > 262144)
        return llmq_errf(err, "implausible shape: dim %u, %u layers, %u heads, ffn %u", dim, layers,
                         heads, ffn);
    if (heads % heads_kv != 0)
        return llmq_errf(err, "head_count %u is not a multiple of head_count_kv %u", heads,
                         heads_kv);
    c->dim = (int32_t)dim;
    c->n_layers = (int32_t)layers;
    c->n_head = (int32_t)heads;
    c->n_head_kv = (int32_t)heads_kv;
    c->head_dim = (int32_t)(dim / heads);
    c->ffn_dim = (int32_t)ffn;
    c->n_ctx_train = (int32_t)ctx;
    c->rope_dim = rope_dim ? (int32_t)rope_dim : c->head_dim;
    if (c->rope_dim > c->head_dim || c->rope_dim % 2 != 0)
        return llmq_errf(err, "rope.dimension_count %d does not fit head dim %d", c->rope_dim,
                         c->head_dim);
    c->rope_freq_base = 10000.0f;
    c->norm_eps = 1e-5f;
    if (gguf_get_f32(f, "llama.rope.freq_base", &c->rope_freq_base, err) < 0 ||
        gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &c->norm_eps, err) < 0)
        return -1;
    if (!(c->rope_freq_base > 0.0f) || !(c->norm_eps >= 0.0f))
        return llmq_errf(err, "bad rope.freq_base %g or rms epsilon %g", c->rope_freq_base,
                         c->norm_eps);
    return 0;
}

/* ---- weights ---- */

static const gguf_tensor *find_shaped(const gguf_file *f, const char *name, int64_t ne0,
                                      int64_t ne1, llmq_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        llmq_errf(err, "tensor '%s' is missing", name);
        return NULL;
    }
    if ((int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        llmq_errf(err, "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]", name,
                  (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                  (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)ne0,
                  (long long)ne1);
        return NULL;
    }
    return t;
}

static int load_matrix(model *m, const char *name, int64_t cols, int64_t rows, be_weight **out,
                       llmq_err *err)
{
    const gguf_tensor *t = find_shaped(m->gguf, name, cols, rows, err);
    if (!t)
        return -1;
    if (m->be->ops->weight_load(m->be, t->type, rows, cols, t->data, out, err) != 0)
        return llmq_err_prefix(err, "tensor '%s'", name);
    return 0;
}

/* Norm weights go to the backend as f32 whatever their stored type. */
static int load_vector(model *m, const char *name, int64_t n, float **out, llmq_err *err)
{
    const gguf_tensor *t = find_shaped(m->gguf, name, n, 1, err);
    if (!t)
        return -1;
    if (t->type != QUANT_F32 && t->type != QUANT_F16 && t->type != QUANT_BF16)
        return llmq_errf(err, "tensor '%s' has type %s, expected a float type", name,
                         quant_type_name(t->type));
    float *host = malloc((size_t)n * sizeof(float));
    if (!host)
        return llmq_errf(err, "out of memory loading '%s'", name);
    quant_dequantize_row(t->type, t->data, host, n);
    *out = m->be->ops->alloc(m->be, (size_t)n * sizeof(float), err);
    int rc = *out ? m->be->ops->upload(m->be, *out, host, (size_t)n * sizeof(float), err) : -1;
    free(host);
    return rc == 0 ? 0 : llmq_err_prefix(err, "tensor '%s'", name);
}

static int load_layer(model *m, int32_t i, llmq_err *err)
{
    const model_config *c = &m->cfg;
    layer_weights *l = &m->layers[i];
    const int64_t kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    char name[96];
#define LAYER_TENSOR(suffix) (snprintf(name, sizeof name, "blk.%d.%s.weight", i, suffix), name)
    if (load_vector(m, LAYER_TENSOR("attn_norm"), c->dim, &l->attn_norm, err) ||
        load_vector(m, LAYER_TENSOR("ffn_norm"), c->dim, &l->ffn_norm, err) ||
        load_matrix(m, LAYER_TENSOR("attn_q"), c->dim, c->dim, &l->wq, err) ||
        load_matrix(m, LAYER_TENSOR("attn_k"), c->dim, kv_dim, &l->wk, err) ||
        load_matrix(m, LAYER_TENSOR("attn_v"), c->dim, kv_dim, &l->wv, err) ||
        load_matrix(m, LAYER_TENSOR("attn_output"), c->dim, c->dim, &l->wo, err) ||
        load_matrix(m, LAYER_TENSOR("ffn_gate"), c->dim, c->ffn_dim, &l->wg, err) ||
        load_matrix(m, LAYER_TENSOR("ffn_up"), c->dim, c->ffn_dim, &l->wu, err) ||
        load_matrix(m, LAYER_TENSOR("ffn_down"), c->ffn_dim, c->dim, &l->wd, err))
        return -1;
#undef LAYER_TENSOR
    return 0;
}

static void summarize_types(model *m)
{
    uint64_t by_type[QUANT_TYPE_LIMIT] = {0};
    for (uint64_t i = 0; i < gguf_tensor_count(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        by_type[t->type] += t->nbytes;
        m->cfg.weight_bytes += t->nbytes;
    }
    int best = 0;
    for (int t = 1; t < QUANT_TYPE_LIMIT; t++)
        if (by_type[t] > by_type[best])
            best = t;
    m->cfg.weight_type = (quant_type)best;
}

int model_load(model **out, const char *path, backend *be, llmq_err *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m)
        return llmq_errf(err, "%s: out of memory", path);
    m->be = be;
    if (gguf_open(&m->gguf, path, err) != 0) {
        free(m);
        return -1;
    }
    if (read_config(m->gguf, &m->cfg, err) != 0)
        goto fail;
    const gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) {
        llmq_errf(err, "tensor 'token_embd.weight' is missing");
        goto fail;
    }
    m->cfg.n_vocab = (int32_t)emb->ne[1];
    summarize_types(m);
    m->cfg.tied_output = gguf_find_tensor(m->gguf, "output.weight") == NULL;
    m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    if (!m->layers) {
        llmq_errf(err, "out of memory");
        goto fail;
    }
    if (load_matrix(m, "token_embd.weight", m->cfg.dim, m->cfg.n_vocab, &m->tok_embd, err) ||
        load_vector(m, "output_norm.weight", m->cfg.dim, &m->output_norm, err))
        goto fail;
    if (m->cfg.tied_output)
        m->output = m->tok_embd;
    else if (load_matrix(m, "output.weight", m->cfg.dim, m->cfg.n_vocab, &m->output, err))
        goto fail;
    for (int32_t i = 0; i < m->cfg.n_layers; i++)
        if (load_layer(m, i, err) != 0)
            goto fail;
    *out = m;
    return 0;
fail:
    llmq_err_prefix(err, "%s", path);
    model_free(m);
    return -1;
}

void model_free(model *m)
{
    if (!m)
        return;
    const backend_ops *ops = m->be->ops;
    for (int32_t i = 0; m->layers && i < m->cfg.n_layers; i++) {
        layer_weights *l = &m->layers[i];
        be_weight *ws[] = {l->wq, l->wk, l->wv, l->wo, l->wg, l->wu, l->wd};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
            if (ws[k])
                ops->weight_free(m->be, ws[k]);
        ops->free(m->be, l->attn_norm);
        ops->free(m->be, l->ffn_norm);
    }
    if (m->output && m->output != m->tok_embd)
        ops->weight_free(m->be, m->output);
    if (m->tok_embd)
        ops->weight_free(m->be, m->tok_embd);
    ops->free(m->be, m->output_norm);
    free(m->layers);
    gguf_close(m->gguf);
    free(m);
}

const model_config *model_get_config(const model *m) { return &m->cfg; }
const gguf_file *model_gguf(const model *m) { return m->gguf; }
backend *model_backend(const model *m) { return m->be; }

/* ---- scratch ---- */

int model_state_create(model_state **out, const model *m, int32_t max_rows, int32_t max_seqs,
                       int32_t max_blocks, int32_t max_logits, llmq_err *err)
{
    *out = NULL;
    const model_config *c = &m->cfg;
    backend *be = m->be;
    model_state *st = calloc(1, sizeof *st);
    if (!st)
        return llmq_errf(err, "out of memory");
    *st = (model_state){.be = be, .max_rows = max_rows, .max_seqs = max_seqs, .max_blocks = max_blocks,
                        .max_logits = max_logits};
    const size_t rows = (size_t)max_rows, kv_dim = (size_t)c->n_head_kv * c->head_dim;
    const size_t top_bytes = (size_t)max_logits * BE_TOP_K_MAX * sizeof(int32_t);
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&st->x, rows * c->dim * sizeof(float)},
        {(void **)&st->q, rows * c->dim * sizeof(float)},
        {(void **)&st->k, rows * kv_dim * sizeof(float)},
        {(void **)&st->v, rows * kv_dim * sizeof(float)},
        {(void **)&st->g, rows * c->ffn_dim * sizeof(float)},
        {(void **)&st->u, rows * c->ffn_dim * sizeof(float)},
        {(void **)&st->xg, (size_t)max_logits * c->dim * sizeof(float)},
        {(void **)&st->logits, (size_t)max_logits * c->n_vocab * sizeof(float)},
        {(void **)&st->tokens, rows * sizeof(int32_t)},
        {(void **)&st->pos, rows * sizeof(int32_t)},
        {(void **)&st->slot, rows * sizeof(int32_t)},
        {(void **)&st->row_seq, rows * sizeof(int32_t)},
        {(void **)&st->block_table, (size_t)max_seqs * max_blocks * sizeof(int32_t)},
        {(void **)&st->seq_len, (size_t)max_seqs * sizeof(int32_t)},
        {(void **)&st->logit_rows, (size_t)max_logits * sizeof(int32_t)},
        {(void **)&st->greedy, (size_t)max_logits * sizeof(int32_t)},
        {(void **)&st->first_gen, (size_t)max_seqs * sizeof(int32_t)},
        {(void **)&st->decode_rows, rows * sizeof(int32_t)},
        {(void **)&st->top_ids, be->ops->top_k ? top_bytes : 0},
        {(void **)&st->top_vals, be->ops->top_k ? top_bytes : 0},
    };
    if (!(st->decode_host = malloc(rows * sizeof(int32_t)))) {
        llmq_errf(err, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (bufs[i].bytes == 0) /* a buffer this backend has no use for */
            continue;
        *bufs[i].p = be->ops->alloc(be, bufs[i].bytes, err);
        if (!*bufs[i].p)
            goto fail;
    }
    int32_t act_rows = max_rows > max_logits ? max_rows : max_logits;
    if (be->ops->act_create(be, act_rows, c->dim, &st->act_dim, err) ||
        be->ops->act_create(be, max_rows, c->ffn_dim, &st->act_ffn, err))
        goto fail;
    *out = st;
    return 0;
fail:
    llmq_err_prefix(err, "forward-pass scratch for %d rows", max_rows);
    model_state_free(st);
    return -1;
}

void model_state_free(model_state *st)
{
    if (!st)
        return;
    backend *be = st->be;
    void *bufs[] = {st->x, st->q, st->k, st->v, st->g, st->u, st->xg, st->logits, st->tokens,
                    st->pos, st->slot, st->row_seq, st->block_table, st->seq_len,
                    st->logit_rows, st->greedy, st->first_gen, st->decode_rows, st->top_ids,
                    st->top_vals};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    if (st->act_dim.x)
        be->ops->act_destroy(be, &st->act_dim);
    if (st->act_ffn.x)
        be->ops->act_destroy(be, &st->act_ffn);
    free(st->decode_host);
    free(st);
}

/* ---- forward ---- */

static int check_batch(const model_state *st, const model_batch *b, llmq_err *err)
{
    if (b->n_rows < 1 || b->n_rows > st->max_rows)
        return llmq_errf(err, "batch of %d rows (scratch holds %d)", b->n_rows, st->max_rows);
    if (b->n_seqs < 1 || b->n_seqs > st->max_seqs || b->max_blocks > st->max_blocks)
        return llmq_errf(err, "batch of %d sequences x %d blocks (scratch holds %d x %d)",
                         b->n_seqs, b->max_blocks, st->max_seqs, st->max_blocks);
    if (b->n_logits < 0 || b->n_logits > st->max_logits)
        return llmq_errf(err, "%d logit rows wanted (scratch holds %d)", b->n_logits,
                         st->max_logits);
    return 0;
}

/* Returns the number of decode rows (listed in st->decode_rows), or -1. */
static int32_t upload_batch(backend *be, model_state *st, const model_batch *b, llmq_err *err)
{
    const size_t rows = (size_t)b->n_rows * sizeof(int32_t), seqs = (size_t)b->n_seqs * sizeof(int32_t);
    const backend_ops *o = be->ops;
    if (o->upload(be, st->tokens, b->tokens, rows, err) ||
        o->upload(be, st->pos, b->pos, rows, err) || o->upload(be, st->slot, b->slot, rows, err) ||
        o->upload(be, st->row_seq, b->row_seq, rows, err) ||
        o->upload(be, st->block_table, b->block_table,
                  (size_t)b->n_seqs * b->max_blocks * sizeof(int32_t), err) ||
        o->upload(be, st->seq_len, b->seq_len, seqs, err) ||
        (b->first_generated && o->upload(be, st->first_gen, b->first_generated, seqs, err)) ||
        (b->n_logits > 0 &&
         o->upload(be, st->logit_rows, b->logit_rows, (size_t)b->n_logits * sizeof(int32_t), err)))
        return -1;
    const int32_t n_decode =
        be_attn_decode_rows(b->row_seq, b->pos, b->first_generated, b->n_rows, st->decode_host);
    if (n_decode > 0 && o->upload(be, st->decode_rows, st->decode_host,
                                  (size_t)n_decode * sizeof(int32_t), err) != 0)
        return -1;
    return n_decode;
}

static void forward_layer(model *m, model_state *st, be_kv *kv, int32_t il,
                          const be_attn_batch *ab, const be_attn_shape *shape, int32_t rows)
{
    const model_config *c = &m->cfg;
    const backend_ops *o = m->be->ops;
    backend *be = m->be;
    const layer_weights *l = &m->layers[il];

    o->rmsnorm(be, st->x, l->attn_norm, c->norm_eps, rows, c->dim, &st->act_dim);
    const be_weight *qkv[] = {l->wq, l->wk, l->wv};
    float *const qkv_out[] = {st->q, st->k, st->v};
    o->matmul_many(be, 3, qkv, &st->act_dim, qkv_out);
    o->rope(be, st->q, st->k, st->pos, rows, shape, c->rope_dim, c->rope_freq_base);
    o->kv_write(be, kv, il, st->k, st->v, st->slot, rows);
    o->attention(be, kv, il, st->q, ab, shape, &st->act_dim);
    o->matmul(be, l->wo, &st->act_dim, st->x, true);

    o->rmsnorm(be, st->x, l->ffn_norm, c->norm_eps, rows, c->dim, &st->act_dim);
    const be_weight *gate_up[] = {l->wg, l->wu};
    float *const gate_up_out[] = {st->g, st->u};
    o->matmul_many(be, 2, gate_up, &st->act_dim, gate_up_out);
    o->swiglu(be, st->g, st->u, rows, c->ffn_dim, &st->act_ffn);
    o->matmul(be, l->wd, &st->act_ffn, st->x, true);
}

/* Every kernel of a step: the layers, then the logits of the rows that
 * want them. */
static void issue_step(model *m, model_state *st, be_kv *kv, const model_batch *b,
                       const be_attn_batch *ab, const be_attn_shape *shape)
{
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *o = be->ops;
    o->embed(be, m->tok_embd, st->tokens, b->n_rows, st->x);
    for (int32_t il = 0; il < c->n_layers; il++)
        forward_layer(m, st, kv, il, ab, shape, b->n_rows);
    if (b->n_logits == 0)
        return;
    o->gather_rows(be, st->x, st->logit_rows, b->n_logits, c->dim, st->xg);
    o->rmsnorm(be, st->xg, m->output_norm, c->norm_eps, b->n_logits, c->dim, &st->act_dim);
    o->matmul(be, m->output, &st->act_dim, st->logits, false);
}

int model_forward(model *m, model_state *st, be_kv *kv, const model_batch *b, float *logits,
                  llmq_err *err)
{
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *o = be->ops;
    st->n_logits = 0;
    int32_t n_decode;
    if (check_batch(st, b, err) != 0 || (n_decode = upload_batch(be, st, b, err)) < 0)
        return -1;
    int32_t max_len = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        max_len = b->seq_len[s] > max_len ? b->seq_len[s] : max_len;
    const be_attn_batch ab = {.n_rows = b->n_rows, .n_seqs = b->n_seqs, .row_seq_dev = st->row_seq,
                              .row_pos_dev = st->pos, .block_table_dev = st->block_table,
                              .seq_len_dev = st->seq_len, .max_blocks = b->max_blocks,
                              .max_seq_len = max_len,
                              .first_generated_dev = b->first_generated ? st->first_gen : NULL,
                              .decode_rows_dev = st->decode_rows, .n_decode = n_decode};
    const be_attn_shape shape = {.n_head = c->n_head, .n_head_kv = c->n_head_kv,
                                 .head_dim = c->head_dim};

    /* A decode step (one row per sequence, all with logits) may be recorded
     * and replayed by the backend: the same kernels for the same key. */
    const bool decode_step = o->graph_begin && n_decode == b->n_rows && b->n_logits == b->n_rows;
    const be_graph_key key = {.owner = (uint64_t)(uintptr_t)st, .n_rows = b->n_rows,
                              .n_logits = b->n_logits,
                              .max_seq_len = max_len, .head_dim = c->head_dim};
    if (!decode_step || o->graph_begin(be, &key) != 1) {
        issue_step(m, st, kv, b, &ab, &shape);
        if (decode_step && o->graph_end(be) == BE_GRAPH_REDO)
            issue_step(m, st, kv, b, &ab, &shape);
    }
    if (b->n_logits == 0)
        return o->sync(be, err);
    st->n_logits = b->n_logits;
    return logits ? model_read_logits(m, st, 0, b->n_logits, logits, err) : 0;
}

int model_read_logits(model *m, model_state *st, int32_t first, int32_t n, float *logits,
                      llmq_err *err)
{
    if (first < 0 || n < 0 || first + n > st->n_logits)
        return llmq_errf(err, "logit rows %d..%d asked of the %d the last forward pass made",
                         first, first + n - 1, st->n_logits);
    const size_t row = (size_t)m->cfg.n_vocab;
    return m->be->ops->download(m->be, logits, st->logits + first * row,
                                (size_t)n * row * sizeof(float), err);
}

bool model_can_read_top(const model *m) { return m->be->ops->top_k != NULL; }

int model_read_top(model *m, model_state *st, int32_t k, int32_t *ids, float *logits,
                   llmq_err *err)
{
    backend *be = m->be;
    if (!be->ops->top_k || k < 1 || k > BE_TOP_K_MAX || k > m->cfg.n_vocab)
        return llmq_errf(err, "top %d logits asked of a %s backend (it gives 1 to %d)", k,
                         be->name, be->ops->top_k ? BE_TOP_K_MAX : 0);
    if (st->n_logits == 0)
        return 0;
    const size_t n = (size_t)st->n_logits * k;
    be->ops->top_k(be, st->logits, st->n_logits, m->cfg.n_vocab, k, st->top_ids, st->top_vals);
    if (be->ops->download(be, ids, st->top_ids, n * sizeof(int32_t), err) != 0)
        return -1;
    return be->ops->download(be, logits, st->top_vals, n * sizeof(float), err);
}

int model_read_greedy(model *m, model_state *st, int32_t *tokens, llmq_err *err)
{
    backend *be = m->be;
    if (st->n_logits == 0)
        return 0;
    be->ops->argmax(be, st->logits, st->n_logits, m->cfg.n_vocab, st->greedy);
    return be->ops->download(be, tokens, st->greedy, (size_t)st->n_logits * sizeof(int32_t), err);
}
