#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

typedef struct layer_weights {
    float *attn_norm, *ffn_norm; /* backend memory */
    float *bq, *bk, *bv;         /* biases of q, k, v (qwen2), or NULL */
    be_weight *wq, *wk, *wv, *wo, *wg, *wu, *wd;
} layer_weights;

/* ---- architectures ---- */

/* What sets an architecture apart, as llama.cpp c2b1518 defines it
 * (src/models/{llama,qwen2,phi3}.cpp, llama_model_rope_type).  Everything
 * else is common: q, k and v come as three matrices or as one fused
 * attn_qkv, each with an optional bias (llama.cpp's create_tensor_qkv); the
 * output matrix is token_embd when output.weight is absent. */
typedef struct arch_traits {
    const char *name; /* general.architecture */
    be_rope_mode rope;
    bool fused_gate_up;   /* ffn_up holds the gate rows, then the up rows */
    bool rope_whole_head; /* rope.dimension_count must be the head size */
    bool rope_freqs;      /* rope_freqs.weight may divide the frequencies (Llama 3.1+) */
    /* attention.sliding_window is read and switched off, as llama.cpp does
     * for Phi-3 ("Phi SWA is currently disabled"): attention is full. */
    bool sliding_window_off;
} arch_traits;

static const arch_traits k_archs[] = {
    {.name = "llama", .rope = BE_ROPE_PAIRS, .rope_whole_head = true, .rope_freqs = true},
    {.name = "qwen2", .rope = BE_ROPE_HALVES, .rope_whole_head = true},
    {.name = "phi3", .rope = BE_ROPE_HALVES, .fused_gate_up = true, .sliding_window_off = true},
};

#define N_ARCHS (sizeof k_archs / sizeof k_archs[0])

struct model {
    model_config cfg;
    const arch_traits *arch;
    gguf_file *gguf;
    backend *be;
    be_weight *tok_embd;
    be_weight *output; /* == tok_embd when tied */
    float *output_norm;
    float *rope_factors; /* rope_freqs.weight, or NULL */
    be_rope rope;
    layer_weights *layers;
    bool *used; /* while loading: the file's tensors a weight took */
};

struct model_state {
    backend *be;
    int32_t max_rows, max_seqs, max_blocks, max_logits;
    float *x, *q, *k, *v, *g, *u, *xg, *logits; /* backend memory */
    be_act act_dim, act_ffn;
    int32_t *tokens, *pos, *slot, *row_seq, *block_table, *seq_len, *logit_rows, *greedy;
    int32_t *first_gen, *decode_rows; /* be_attn_batch's */
    int32_t *top_ids;                 /* max_logits x BE_TOP_K_MAX (backends with top_k) */
    float *top_vals;
    /* model_read_sampled's (backends with sample): its rows, penalty pairs
     * (max_logits x MODEL_SAMPLE_PEN_MAX), their saved logits, its choices;
     * model_read_log_norm's two doubles per logit row. */
    be_sample_row *samp_rows;
    int32_t *samp_pen;
    uint64_t *samp_mask; /* max_logits x ceil(n_vocab / 64): grammar masks */
    float *samp_save;
    be_sample_out *samp_out;
    double *log_norm;
    int32_t *decode_host; /* host copy of decode_rows */
    int32_t n_logits;     /* logit rows of the last forward pass */
};

/* ---- configuration ---- */

static const arch_traits *find_arch(gguf_str name)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (gguf_str_eq(name, k_archs[i].name))
            return &k_archs[i];
    return NULL;
}

/* The {arch}.* keys read below, and two that matter only to the YaRN and
 * LongRoPE scaling refused below (rope.scaling.original_context_length,
 * .finetuned).  Any other key of the architecture may ask for what this
 * engine does not implement (YaRN's factors, logit scales, soft-capping,
 * ...), so it is refused by name rather than ignored. */
static const char *const k_known_keys[] = {
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.layer_norm_rms_epsilon",
    "attention.key_length",
    "attention.value_length",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "rope.scaling.attn_factor",
    "rope.scaling.original_context_length",
    "rope.scaling.finetuned",
    "vocab_size",
    "expert_count",
    "expert_used_count",
};

static bool suffix_is(const char *suffix, size_t len, const char *key)
{
    return strlen(key) == len && memcmp(key, suffix, len) == 0;
}

static bool known_key(const arch_traits *a, const char *suffix, size_t len)
{
    for (size_t i = 0; i < sizeof k_known_keys / sizeof k_known_keys[0]; i++)
        if (suffix_is(suffix, len, k_known_keys[i]))
            return true;
    return a->sliding_window_off && suffix_is(suffix, len, "attention.sliding_window");
}

static int refuse_unknown_keys(const gguf_file *f, const arch_traits *a, llmq_err *err)
{
    const size_t n = strlen(a->name);
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (k.len > n + 1 && memcmp(k.ptr, a->name, n) == 0 && k.ptr[n] == '.' &&
            !known_key(a, k.ptr + n + 1, (size_t)k.len - n - 1))
            return llmq_errf(err,
                             "metadata key '%.*s' is not supported (refused rather than "
                             "ignored)",
                             (int)k.len, k.ptr);
    }
    return 0;
}

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

static int get_f32_key(const gguf_file *f, const char *arch, const char *suffix, float *out,
                       llmq_err *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(f, key, out, err) < 0 ? -1 : 0;
}

/* RoPE scaling as llama.cpp reads it: no type means "linear", a factor of 0
 * or 1 means none; this engine runs only unscaled rope (Llama 3's own
 * scaling is the rope_freqs.weight tensor, not a key). */
static int refuse_rope_scaling(const gguf_file *f, const char *arch, llmq_err *err)
{
    char key[160];
    gguf_str type = {"linear", 6};
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(f, key, &type, err) < 0)
        return -1;
    if (!gguf_str_eq(type, "none") && !gguf_str_eq(type, "linear"))
        return llmq_errf(err, "rope scaling type '%.*s' (%s) is not supported", (int)type.len,
                         type.ptr, key);
    float factor = 0.0f, attn_factor = 1.0f;
    if (get_f32_key(f, arch, "rope.scale_linear", &factor, err) ||
        get_f32_key(f, arch, "rope.scaling.factor", &factor, err) ||
        get_f32_key(f, arch, "rope.scaling.attn_factor", &attn_factor, err))
        return -1;
    if (!gguf_str_eq(type, "none") && factor != 0.0f && factor != 1.0f)
        return llmq_errf(err,
                         "linear rope scaling by %g (%s.rope.scaling.factor or "
                         ".rope.scale_linear) is not supported",
                         factor, arch);
    if (attn_factor != 1.0f)
        return llmq_errf(err,
                         "rope attention factor %g (%s.rope.scaling.attn_factor, LongRoPE or "
                         "YaRN) is not supported",
                         attn_factor, arch);
    return 0;
}

static int refuse_experts(const gguf_file *f, const char *arch, llmq_err *err)
{
    uint32_t experts = 0, used = 0;
    if (get_u32_key(f, arch, "expert_count", &experts, false, err) ||
        get_u32_key(f, arch, "expert_used_count", &used, false, err))
        return -1;
    if (experts > 0 || used > 0)
        return llmq_errf(err, "mixture-of-experts models (%s.expert_count = %u) are not supported",
                         arch, experts);
    return 0;
}

/* attention.key_length / value_length, where a converter writes them, must
 * be the head size dim / heads: other head sizes are not implemented. */
static int check_head_lengths(const gguf_file *f, const model_config *c, llmq_err *err)
{
    static const char *const keys[] = {"attention.key_length", "attention.value_length"};
    for (size_t i = 0; i < 2; i++) {
        uint32_t len = (uint32_t)c->head_dim;
        if (get_u32_key(f, c->arch, keys[i], &len, false, err) != 0)
            return -1;
        if (len != (uint32_t)c->head_dim)
            return llmq_errf(err,
                             "%s.%s = %u differs from the head size %d (embedding_length / "
                             "head_count): not supported",
                             c->arch, keys[i], len, c->head_dim);
    }
    return 0;
}

static int read_shape(const gguf_file *f, const arch_traits *a, model_config *c, llmq_err *err)
{
    const char *arch = a->name;
    uint32_t dim, layers, heads, heads_kv = 0, ffn, ctx = 2048, rope_dim = 0, swa = 0;
    if (get_u32_key(f, arch, "embedding_length", &dim, true, err) ||
        get_u32_key(f, arch, "block_count", &layers, true, err) ||
        get_u32_key(f, arch, "attention.head_count", &heads, true, err) ||
        get_u32_key(f, arch, "attention.head_count_kv", &heads_kv, false, err) ||
        get_u32_key(f, arch, "feed_forward_length", &ffn, true, err) ||
        get_u32_key(f, arch, "context_length", &ctx, false, err) ||
        get_u32_key(f, arch, "rope.dimension_count", &rope_dim, false, err) ||
        get_u32_key(f, arch, "attention.sliding_window", &swa, false, err))
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
    c->sliding_window = (int32_t)swa;
    c->rope_dim = rope_dim ? (int32_t)rope_dim : c->head_dim;
    if (c->rope_dim > c->head_dim || c->rope_dim % 2 != 0 || c->rope_dim == 0 ||
        (a->rope_whole_head && c->rope_dim != c->head_dim))
        return llmq_errf(err, "%s.rope.dimension_count %d does not fit head size %d", arch,
                         c->rope_dim, c->head_dim);
    return 0;
}

static int read_config(const gguf_file *f, const arch_traits **arch_out, model_config *c,
                       llmq_err *err)
{
    gguf_str arch_s;
    int rc = gguf_get_str(f, "general.architecture", &arch_s, err);
    if (rc != 0)
        return rc < 0 ? -1 : llmq_errf(err, "missing metadata key 'general.architecture'");
    const arch_traits *a = find_arch(arch_s);
    if (!a)
        return llmq_errf(err,
                         "architecture '%.*s' is not supported (supported: llama, qwen2, "
                         "phi3)",
                         (int)arch_s.len, arch_s.ptr);
    *arch_out = a;
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%s", a->name);
    if (refuse_unknown_keys(f, a, err) || refuse_rope_scaling(f, a->name, err) ||
        refuse_experts(f, a->name, err) || read_shape(f, a, c, err) ||
        check_head_lengths(f, c, err))
        return -1;
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name, err) == 0)
        snprintf(c->name, sizeof c->name, "%.*s", (int)(name.len < 127 ? name.len : 127), name.ptr);
    c->rope_freq_base = 10000.0f;
    c->norm_eps = 1e-5f;
    if (get_f32_key(f, a->name, "rope.freq_base", &c->rope_freq_base, err) ||
        get_f32_key(f, a->name, "attention.layer_norm_rms_epsilon", &c->norm_eps, err))
        return -1;
    if (!(c->rope_freq_base > 0.0f) || !(c->norm_eps >= 0.0f))
        return llmq_errf(err, "bad rope.freq_base %g or rms epsilon %g", c->rope_freq_base,
                         c->norm_eps);
    return 0;
}

/* ---- weights ---- */

/* The tensor `name` if its shape is [ne0, ne1], marked used: 0; absent: 1;
 * any other shape: -1. */
static int take_tensor(model *m, const char *name, int64_t ne0, int64_t ne1,
                       const gguf_tensor **out, llmq_err *err)
{
    const int64_t i = gguf_find_tensor_index(m->gguf, name);
    if (i < 0)
        return 1;
    const gguf_tensor *t = gguf_tensor_at(m->gguf, (uint64_t)i);
    if ((int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return llmq_errf(err,
                         "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
                         name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                         (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)ne0,
                         (long long)ne1);
    m->used[i] = true;
    *out = t;
    return 0;
}

static int take_required(model *m, const char *name, int64_t ne0, int64_t ne1,
                         const gguf_tensor **out, llmq_err *err)
{
    int rc = take_tensor(m, name, ne0, ne1, out, err);
    return rc > 0 ? llmq_errf(err, "tensor '%s' is missing", name) : rc;
}

/* Rows [row0, row0 + rows) of matrix t as one backend weight: a fused
 * tensor's parts are separate weights, each row's dot product unchanged. */
static int load_rows(model *m, const gguf_tensor *t, int64_t row0, int64_t rows, be_weight **out,
                     llmq_err *err)
{
    uint64_t row_bytes;
    if (quant_row_bytes(t->type, t->ne[0], &row_bytes, err) != 0 ||
        m->be->ops->weight_load(m->be, t->type, rows, (int64_t)t->ne[0],
                                (const uint8_t *)t->data + (uint64_t)row0 * row_bytes, out, err))
        return llmq_err_prefix(err, "tensor '%s'", t->name);
    return 0;
}

/* Values [first, first + n) of vector t, as f32 in backend memory, whatever
 * float type it is stored in. */
static int load_values(model *m, const gguf_tensor *t, int64_t first, int64_t n, float **out,
                       llmq_err *err)
{
    if (t->type != QUANT_F32 && t->type != QUANT_F16 && t->type != QUANT_BF16)
        return llmq_errf(err, "tensor '%s' has type %s, expected a float type", t->name,
                         quant_type_name(t->type));
    float *host = malloc((size_t)n * sizeof(float));
    if (!host)
        return llmq_errf(err, "out of memory loading '%s'", t->name);
    uint64_t skip;
    quant_row_bytes(t->type, (uint64_t)first, &skip, NULL); /* a float type: cannot fail */
    quant_dequantize_row(t->type, (const uint8_t *)t->data + skip, host, n);
    *out = m->be->ops->alloc(m->be, (size_t)n * sizeof(float), err);
    int rc = *out ? m->be->ops->upload(m->be, *out, host, (size_t)n * sizeof(float), err) : -1;
    free(host);
    return rc == 0 ? 0 : llmq_err_prefix(err, "tensor '%s'", t->name);
}

static int load_matrix(model *m, const char *name, int64_t cols, int64_t rows, be_weight **out,
                       llmq_err *err)
{
    const gguf_tensor *t;
    return take_required(m, name, cols, rows, &t, err) ? -1 : load_rows(m, t, 0, rows, out, err);
}

static int load_vector(model *m, const char *name, int64_t n, float **out, llmq_err *err)
{
    const gguf_tensor *t;
    return take_required(m, name, n, 1, &t, err) ? -1 : load_values(m, t, 0, n, out, err);
}

/* An optional vector: absent leaves *out NULL. */
static int load_optional_vector(model *m, const char *name, int64_t n, float **out, llmq_err *err)
{
    const gguf_tensor *t;
    int rc = take_tensor(m, name, n, 1, &t, err);
    return rc != 0 ? (rc < 0 ? -1 : 0) : load_values(m, t, 0, n, out, err);
}

static const char *layer_name(char *buf, size_t cap, int32_t il, const char *suffix)
{
    snprintf(buf, cap, "blk.%d.%s", il, suffix);
    return buf;
}

/* q, k and v with their optional biases: three tensors, or llama.cpp's
 * fused attn_qkv (rows q, then k, then v) cut into its three parts. */
static int load_qkv(model *m, int32_t il, layer_weights *l, llmq_err *err)
{
    const model_config *c = &m->cfg;
    const int64_t kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    const int64_t rows[3] = {c->dim, kv_dim, kv_dim}, all = c->dim + 2 * kv_dim;
    be_weight **w[3] = {&l->wq, &l->wk, &l->wv};
    float **b[3] = {&l->bq, &l->bk, &l->bv};
    char name[96];
    const gguf_tensor *fused, *bias = NULL;
    int rc = take_tensor(m, layer_name(name, sizeof name, il, "attn_qkv.weight"), c->dim, all,
                         &fused, err);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        if (take_tensor(m, layer_name(name, sizeof name, il, "attn_qkv.bias"), all, 1, &bias, err) <
            0)
            return -1;
        int64_t row0 = 0;
        for (int i = 0; i < 3; row0 += rows[i++])
            if (load_rows(m, fused, row0, rows[i], w[i], err) ||
                (bias && load_values(m, bias, row0, rows[i], b[i], err)))
                return -1;
        return 0;
    }
    static const char *const parts[3] = {"attn_q", "attn_k", "attn_v"};
    for (int i = 0; i < 3; i++) {
        char suffix[32];
        snprintf(suffix, sizeof suffix, "%s.weight", parts[i]);
        if (load_matrix(m, layer_name(name, sizeof name, il, suffix), c->dim, rows[i], w[i], err))
            return -1;
        snprintf(suffix, sizeof suffix, "%s.bias", parts[i]);
        if (load_optional_vector(m, layer_name(name, sizeof name, il, suffix), rows[i], b[i], err))
            return -1;
    }
    return 0;
}

/* Gate and up: two tensors, or Phi-3's ffn_up of 2 x ffn rows (gate first,
 * as ggml_swiglu takes its halves). */
static int load_gate_up(model *m, int32_t il, layer_weights *l, llmq_err *err)
{
    const model_config *c = &m->cfg;
    char name[96];
    if (!m->arch->fused_gate_up)
        return load_matrix(m, layer_name(name, sizeof name, il, "ffn_gate.weight"), c->dim,
                           c->ffn_dim, &l->wg, err) ||
                       load_matrix(m, layer_name(name, sizeof name, il, "ffn_up.weight"), c->dim,
                                   c->ffn_dim, &l->wu, err)
                   ? -1
                   : 0;
    const gguf_tensor *t;
    if (take_required(m, layer_name(name, sizeof name, il, "ffn_up.weight"), c->dim,
                      2 * (int64_t)c->ffn_dim, &t, err))
        return -1;
    return load_rows(m, t, 0, c->ffn_dim, &l->wg, err) ||
                   load_rows(m, t, c->ffn_dim, c->ffn_dim, &l->wu, err)
               ? -1
               : 0;
}

static int load_layer(model *m, int32_t il, llmq_err *err)
{
    const model_config *c = &m->cfg;
    layer_weights *l = &m->layers[il];
    char name[96];
    return load_vector(m, layer_name(name, sizeof name, il, "attn_norm.weight"), c->dim,
                       &l->attn_norm, err) ||
                   load_qkv(m, il, l, err) ||
                   load_matrix(m, layer_name(name, sizeof name, il, "attn_output.weight"), c->dim,
                               c->dim, &l->wo, err) ||
                   load_vector(m, layer_name(name, sizeof name, il, "ffn_norm.weight"), c->dim,
                               &l->ffn_norm, err) ||
                   load_gate_up(m, il, l, err) ||
                   load_matrix(m, layer_name(name, sizeof name, il, "ffn_down.weight"), c->ffn_dim,
                               c->dim, &l->wd, err)
               ? -1
               : 0;
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

static int check_vocab_size(const model *m, llmq_err *err)
{
    uint32_t n = (uint32_t)m->cfg.n_vocab;
    if (get_u32_key(m->gguf, m->cfg.arch, "vocab_size", &n, false, err) != 0)
        return -1;
    if (n != (uint32_t)m->cfg.n_vocab)
        return llmq_errf(err, "%s.vocab_size = %u but token_embd.weight has %d rows", m->cfg.arch,
                         n, m->cfg.n_vocab);
    return 0;
}

/* The embeddings, output head, rope factors and layers. */
static int load_weights(model *m, llmq_err *err)
{
    model_config *c = &m->cfg;
    const gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb)
        return llmq_errf(err, "tensor 'token_embd.weight' is missing");
    c->n_vocab = (int32_t)emb->ne[1];
    c->tied_output = gguf_find_tensor(m->gguf, "output.weight") == NULL;
    if (check_vocab_size(m, err) ||
        load_matrix(m, "token_embd.weight", c->dim, c->n_vocab, &m->tok_embd, err) ||
        load_vector(m, "output_norm.weight", c->dim, &m->output_norm, err) ||
        (!c->tied_output && load_matrix(m, "output.weight", c->dim, c->n_vocab, &m->output, err)) ||
        (m->arch->rope_freqs &&
         load_optional_vector(m, "rope_freqs.weight", c->rope_dim / 2, &m->rope_factors, err)))
        return -1;
    if (c->tied_output)
        m->output = m->tok_embd;
    c->rope_freqs = m->rope_factors != NULL;
    m->rope = (be_rope){.mode = m->arch->rope,
                        .n_dims = c->rope_dim,
                        .freq_base = c->rope_freq_base,
                        .factors_dev = m->rope_factors};
    if (!(m->layers = calloc((size_t)c->n_layers, sizeof *m->layers)))
        return llmq_errf(err, "out of memory");
    for (int32_t i = 0; i < c->n_layers; i++)
        if (load_layer(m, i, err) != 0)
            return -1;
    return 0;
}

/* A tensor nothing took would be silently ignored (an output bias, LongRoPE
 * factors, an expert...): llama.cpp refuses such a file too. */
static int refuse_unused(const model *m, llmq_err *err)
{
    for (uint64_t i = 0; i < gguf_tensor_count(m->gguf); i++)
        if (!m->used[i])
            return llmq_errf(err,
                             "tensor '%s' is not used by the %s architecture as implemented "
                             "here (refused rather than ignored)",
                             gguf_tensor_at(m->gguf, i)->name, m->cfg.arch);
    return 0;
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
    if (!(m->used = calloc(gguf_tensor_count(m->gguf) + 1, sizeof *m->used)))
        llmq_errf(err, "out of memory");
    if (!m->used || read_config(m->gguf, &m->arch, &m->cfg, err) != 0 || load_weights(m, err) ||
        refuse_unused(m, err)) {
        llmq_err_prefix(err, "%s", path);
        model_free(m);
        return -1;
    }
    summarize_types(m);
    free(m->used);
    m->used = NULL;
    *out = m;
    return 0;
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
        float *vs[] = {l->attn_norm, l->ffn_norm, l->bq, l->bk, l->bv};
        for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
            ops->free(m->be, vs[k]);
    }
    if (m->output && m->output != m->tok_embd)
        ops->weight_free(m->be, m->output);
    if (m->tok_embd)
        ops->weight_free(m->be, m->tok_embd);
    ops->free(m->be, m->output_norm);
    ops->free(m->be, m->rope_factors);
    free(m->layers);
    free(m->used);
    gguf_close(m->gguf);
    free(m);
}

const model_config *model_get_config(const model *m)
{
    return &m->cfg;
}
const gguf_file *model_gguf(const model *m)
{
    return m->gguf;
}
backend *model_backend(const model *m)
{
    return m->be;
}

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
    *st = (model_state){.be = be,
                        .max_rows = max_rows,
                        .max_seqs = max_seqs,
                        .max_blocks = max_blocks,
                        .max_logits = max_logits};
    const size_t rows = (size_t)max_rows, kv_dim = (size_t)c->n_head_kv * c->head_dim;
    const size_t top_bytes = (size_t)max_logits * BE_TOP_K_MAX * sizeof(int32_t);
    const size_t samp = be->ops->sample ? (size_t)max_logits : 0;
    const size_t norm = be->ops->log_norm ? (size_t)max_logits : 0;
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
        {(void **)&st->samp_rows, samp * sizeof(be_sample_row)},
        {(void **)&st->samp_pen, samp * MODEL_SAMPLE_PEN_MAX * 2 * sizeof(int32_t)},
        {(void **)&st->samp_save, samp * MODEL_SAMPLE_PEN_MAX * sizeof(float)},
        {(void **)&st->samp_out, samp * sizeof(be_sample_out)},
        {(void **)&st->samp_mask, samp * model_mask_words(m) * sizeof(uint64_t)},
        {(void **)&st->log_norm, norm * 2 * sizeof(double)},
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
    void *bufs[] = {st->x,         st->q,         st->k,           st->v,        st->g,
                    st->u,         st->xg,        st->logits,      st->tokens,   st->pos,
                    st->slot,      st->row_seq,   st->block_table, st->seq_len,  st->logit_rows,
                    st->greedy,    st->first_gen, st->decode_rows, st->top_ids,  st->top_vals,
                    st->samp_rows, st->samp_pen,  st->samp_save,   st->samp_out, st->log_norm,
                    st->samp_mask};
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

/* What a model_batch promises (model.h), which attention relies on: a
 * sequence's rows in position order, each inside its sequence's cached
 * length; logit rows ascending. */
static void assert_batch_order(const model_batch *b)
{
    for (int32_t r = 0; r < b->n_rows; r++) {
        const int32_t s = b->row_seq[r];
        LLMQ_ASSERT(s >= 0 && s < b->n_seqs, "row %d: sequence %d of %d", r, s, b->n_seqs);
        LLMQ_ASSERT(b->pos[r] >= 0 && b->pos[r] < b->seq_len[s],
                    "row %d: position %d, its sequence caches %d tokens", r, b->pos[r],
                    b->seq_len[s]);
        LLMQ_ASSERT(r == 0 || b->row_seq[r - 1] != s || b->pos[r - 1] < b->pos[r],
                    "rows %d and %d of sequence %d: positions %d, %d", r - 1, r, s, b->pos[r - 1],
                    b->pos[r]);
    }
    for (int32_t i = 0; i < b->n_logits; i++)
        LLMQ_ASSERT(b->logit_rows[i] >= 0 && b->logit_rows[i] < b->n_rows &&
                        (i == 0 || b->logit_rows[i - 1] < b->logit_rows[i]),
                    "logit row %d is row %d of %d", i, b->logit_rows[i], b->n_rows);
}

/* Returns the number of decode rows (listed in st->decode_rows), or -1. */
static int32_t upload_batch(backend *be, model_state *st, const model_batch *b, llmq_err *err)
{
    const size_t rows = (size_t)b->n_rows * sizeof(int32_t),
                 seqs = (size_t)b->n_seqs * sizeof(int32_t);
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
    const int32_t n_decode = be_attn_decode_rows(b->row_seq, b->pos, b->first_generated, b->n_rows,
                                                 st->decode_host);
    if (n_decode > 0 && o->upload(be, st->decode_rows, st->decode_host,
                                  (size_t)n_decode * sizeof(int32_t), err) != 0)
        return -1;
    return n_decode;
}

static void forward_layer(model *m, model_state *st, be_kv *kv, int32_t il, const be_attn_batch *ab,
                          const be_attn_shape *shape, int32_t rows)
{
    const model_config *c = &m->cfg;
    const backend_ops *o = m->be->ops;
    backend *be = m->be;
    const layer_weights *l = &m->layers[il];

    o->rmsnorm(be, st->x, l->attn_norm, c->norm_eps, rows, c->dim, &st->act_dim);
    const be_weight *qkv[] = {l->wq, l->wk, l->wv};
    float *const qkv_out[] = {st->q, st->k, st->v};
    const float *const qkv_bias[] = {l->bq, l->bk, l->bv};
    o->matmul_many(be, 3, qkv, &st->act_dim, qkv_out, qkv_bias);
    o->rope(be, st->q, st->k, st->pos, rows, shape, &m->rope);
    o->kv_write(be, kv, il, st->k, st->v, st->slot, rows);
    o->attention(be, kv, il, st->q, ab, shape, &st->act_dim);
    o->matmul(be, l->wo, &st->act_dim, st->x, true);

    o->rmsnorm(be, st->x, l->ffn_norm, c->norm_eps, rows, c->dim, &st->act_dim);
    const be_weight *gate_up[] = {l->wg, l->wu};
    float *const gate_up_out[] = {st->g, st->u};
    o->matmul_many(be, 2, gate_up, &st->act_dim, gate_up_out, NULL);
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
    if (check_batch(st, b, err) != 0)
        return -1;
    if (LLMQ_ASSERTS_ON)
        assert_batch_order(b);
    if ((n_decode = upload_batch(be, st, b, err)) < 0)
        return -1;
    int32_t max_len = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        max_len = b->seq_len[s] > max_len ? b->seq_len[s] : max_len;
    const be_attn_batch ab = {.n_rows = b->n_rows,
                              .n_seqs = b->n_seqs,
                              .row_seq_dev = st->row_seq,
                              .row_pos_dev = st->pos,
                              .block_table_dev = st->block_table,
                              .seq_len_dev = st->seq_len,
                              .max_blocks = b->max_blocks,
                              .max_seq_len = max_len,
                              .first_generated_dev = b->first_generated ? st->first_gen : NULL,
                              .decode_rows_dev = st->decode_rows,
                              .n_decode = n_decode};
    const be_attn_shape shape = {
        .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim};

    /* A decode step (one row per sequence, all with logits) may be recorded
     * and replayed by the backend: the same kernels for the same key. */
    const bool decode_step = o->graph_begin && n_decode == b->n_rows && b->n_logits == b->n_rows;
    const be_graph_key key = {.owner = (uint64_t)(uintptr_t)st,
                              .n_rows = b->n_rows,
                              .n_logits = b->n_logits,
                              .max_seq_len = max_len,
                              .head_dim = c->head_dim};
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
        return llmq_errf(err, "logit rows %d..%d asked of the %d the last forward pass made", first,
                         first + n - 1, st->n_logits);
    const size_t row = (size_t)m->cfg.n_vocab;
    return m->be->ops->download(m->be, logits, st->logits + first * row,
                                (size_t)n * row * sizeof(float), err);
}

bool model_can_read_top(const model *m)
{
    return m->be->ops->top_k != NULL;
}

int model_read_top(model *m, model_state *st, int32_t k, int32_t *ids, float *logits, llmq_err *err)
{
    backend *be = m->be;
    if (!be->ops->top_k || k < 1 || k > BE_TOP_K_MAX || k > m->cfg.n_vocab)
        return llmq_errf(err, "top %d logits asked of a %s backend (it gives 1 to %d)", k, be->name,
                         be->ops->top_k ? BE_TOP_K_MAX : 0);
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

bool model_can_sample(const model *m)
{
    return m->be->ops->sample != NULL && m->be->ops->log_norm != NULL;
}

int32_t model_mask_words(const model *m)
{
    return (m->cfg.n_vocab + 63) / 64;
}

/* Refuses what would make the kernel read or write outside the logits:
 * a row past the last pass's, a penalty span past the pairs, a token
 * outside the vocabulary, a mask past the masks given. */
static int check_sampled(const model *m, const model_state *st, const be_sample_row *rows,
                         int32_t n, const int32_t *pen, int32_t n_pen, int32_t n_masks,
                         llmq_err *err)
{
    if (n_masks < 0 || n_masks > st->max_logits)
        return llmq_errc(err, LLMQ_ERR_INVALID, "sampling with %d masks (at most %d)", n_masks,
                         st->max_logits);
    if (n < 0 || n > st->n_logits || n_pen < 0 || n_pen > st->max_logits * MODEL_SAMPLE_PEN_MAX)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "sampling %d rows with %d penalty pairs (at most %d rows, %d pairs)", n,
                         n_pen, st->n_logits, st->max_logits * MODEL_SAMPLE_PEN_MAX);
    for (int32_t i = 0; i < n; i++) {
        const be_sample_row *r = &rows[i];
        /* A top-k the device's sort has no room for (greedy ignores it). */
        const bool wide_k = r->temperature > 0.0f && r->top_k > BE_SAMPLE_TOP_K_MAX &&
                            r->top_k < m->cfg.n_vocab;
        if (r->row < 0 || r->row >= st->n_logits || r->pen_first < 0 || r->n_pen < 0 ||
            r->n_pen > n_pen - r->pen_first || r->mask < -1 || r->mask >= n_masks || wide_k)
            return llmq_errc(err, LLMQ_ERR_INVALID,
                             "sampled row %d: logit row %d (of %d), penalty pairs %d..%d (of %d), "
                             "mask %d (of %d), top_k %d (at most %d)",
                             i, r->row, st->n_logits, r->pen_first, r->pen_first + r->n_pen - 1,
                             n_pen, r->mask, n_masks, r->top_k, BE_SAMPLE_TOP_K_MAX);
    }
    for (int32_t j = 0; j < n_pen; j++)
        if (pen[2 * j] < 0 || pen[2 * j] >= m->cfg.n_vocab)
            return llmq_errc(err, LLMQ_ERR_INVALID, "penalty pair %d: token %d outside [0, %d)", j,
                             pen[2 * j], m->cfg.n_vocab);
    return 0;
}

int model_read_sampled(model *m, model_state *st, const be_sample_row *rows, int32_t n,
                       const int32_t *pen, int32_t n_pen, const uint64_t *masks, int32_t n_masks,
                       be_sample_out *out, llmq_err *err)
{
    backend *be = m->be;
    if (!be->ops->sample)
        return llmq_errf(err, "sampling asked of a %s backend, which has no sample op", be->name);
    if (check_sampled(m, st, rows, n, pen, n_pen, n_masks, err) != 0)
        return -1;
    if (n == 0)
        return 0;
    const size_t mask_bytes = (size_t)n_masks * model_mask_words(m) * sizeof *masks;
    if (be->ops->upload(be, st->samp_rows, rows, (size_t)n * sizeof *rows, err) != 0 ||
        be->ops->upload(be, st->samp_pen, pen, (size_t)n_pen * 2 * sizeof *pen, err) != 0 ||
        be->ops->upload(be, st->samp_mask, masks, mask_bytes, err) != 0)
        return -1;
    be->ops->sample(be, st->logits, m->cfg.n_vocab, st->samp_rows, n, st->samp_pen, st->samp_save,
                    st->samp_mask, st->samp_out);
    return be->ops->download(be, out, st->samp_out, (size_t)n * sizeof *out, err);
}

int model_read_log_norm(model *m, model_state *st, double *out, llmq_err *err)
{
    backend *be = m->be;
    if (!be->ops->log_norm)
        return llmq_errf(err, "log-softmax normalizers asked of a %s backend, which has none",
                         be->name);
    if (st->n_logits == 0)
        return 0;
    be->ops->log_norm(be, st->logits, st->n_logits, m->cfg.n_vocab, st->log_norm);
    return be->ops->download(be, out, st->log_norm, (size_t)st->n_logits * 2 * sizeof *out, err);
}
