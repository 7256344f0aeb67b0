/* test-model: what model_load takes and what it refuses.
 *
 * Pins: the synthetic model of each architecture (tests/synth, written by
 * make check with llmq-mkmodel) loads with the configuration its metadata
 * says: llama with Llama 3.1's rope_freqs.weight, qwen2 with tied output,
 * phi3 with its sliding window read (and, as in llama.cpp, not applied).
 * A copy of one with a metadata key or a tensor added, changed or left out
 * is refused with an error that names it: rope scaling (YaRN, linear,
 * Phi-3 128k's attention factor and LongRoPE factors), a key the engine
 * does not read, another head size, experts, a vocab_size that disagrees
 * with token_embd, an output bias, a missing tensor, an unknown
 * architecture.  Keys real files carry with values run as they are (Llama
 * 3.2's key_length, rope scaling "none" or a factor of 1, expert_count 0) are
 * taken.  Nothing is silently ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "tests/unit/check.h"

static const char *synth_path(char *buf, size_t cap, const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tests/synth/%s.gguf", name);
    return check_build_path(buf, cap, rel);
}

/* One change to a synthetic model: a key or tensor left out, a key added
 * (a string, u32 or f32), an f32 vector tensor added. */
typedef struct edit {
    const char *what;
    const char *base;
    const char *drop;
    const char *key;
    gguf_vtype type;
    const char *str;
    uint32_t u32;
    float f32;
    const char *tensor;
    uint64_t n;
    const char *want; /* in the error */
} edit;

static int add_key(gw_writer *w, const edit *e, llmq_err *err)
{
    switch (e->type) {
    case GGUF_STRING: return gw_kv_str(w, e->key, e->str, strlen(e->str), err);
    case GGUF_UINT32: return gw_kv_u32(w, e->key, e->u32, err);
    default: return gw_kv_f32(w, e->key, e->f32, err);
    }
}

static int copy_tensors(gw_writer *w, const gguf_file *f, const edit *e, uint64_t *extra,
                        llmq_err *err)
{
    uint64_t index;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if ((!e->drop || strcmp(t->name, e->drop) != 0) &&
            gw_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &index, err))
            return -1;
    }
    const uint64_t ne[1] = {e->n};
    return e->tensor ? gw_add_tensor(w, e->tensor, 1, ne, QUANT_F32, extra, err) : 0;
}

/* The tensors' bytes, in the order copy_tensors added them; the extra
 * vector is ones. */
static int write_tensors(gw_writer *w, const gguf_file *f, const edit *e, uint64_t extra,
                         llmq_err *err)
{
    uint64_t index = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (e->drop && strcmp(t->name, e->drop) == 0)
            continue;
        if (gw_write(w, index++, 0, t->data, (size_t)t->nbytes, err))
            return -1;
    }
    if (!e->tensor)
        return 0;
    float *ones = malloc(e->n * sizeof *ones);
    for (uint64_t i = 0; ones && i < e->n; i++)
        ones[i] = 1.0f;
    int rc = ones ? gw_write(w, extra, 0, ones, e->n * sizeof *ones, err)
                  : llmq_errf(err, "out of memory");
    free(ones);
    return rc;
}

static int write_edited(const gguf_file *f, const edit *e, const char *out, llmq_err *err)
{
    gw_writer *w = NULL;
    uint64_t extra = 0;
    int rc = gw_new(&w, out, err);
    for (uint64_t i = 0; rc == 0 && i < gguf_kv_count(f); i++)
        if (!e->drop || !gguf_str_eq(gguf_kv_key(f, i), e->drop))
            rc = gw_kv_copy(w, f, i, err);
    if (rc == 0 && e->key)
        rc = add_key(w, e, err);
    if (rc == 0)
        rc = copy_tensors(w, f, e, &extra, err) || gw_begin(w, err) ||
             write_tensors(w, f, e, extra, err) || gw_commit(w, err);
    gw_free(w);
    return rc;
}

/* Writes the edited copy and loads it: model_load's status (-2 when the
 * copy could not be written), its message in err. */
static int load_edited(backend *be, const edit *e, const char *dir, llmq_err *err)
{
    char base[512], out[512];
    snprintf(out, sizeof out, "%s/edited.gguf", dir);
    gguf_file *f = NULL;
    if (gguf_open(&f, synth_path(base, sizeof base, e->base), err) != 0 ||
        write_edited(f, e, out, err) != 0) {
        CHECK(0, "%s: the edited copy of %s is written (%s)", e->what, e->base, err->msg);
        gguf_close(f);
        return -2;
    }
    gguf_close(f);
    model *m = NULL;
    const int rc = model_load(&m, out, be, err);
    model_free(m);
    unlink(out);
    return rc;
}

static void check_refused(backend *be, const edit *e, const char *dir)
{
    llmq_err err = {0};
    const int rc = load_edited(be, e, dir, &err);
    if (rc != -2)
        CHECK(rc != 0 && strstr(err.msg, e->want) != NULL, "%s: refused, naming %s (%s)", e->what,
              e->want, rc ? err.msg : "loaded");
}

/* Keys real files carry, with values this engine runs as they are. */
static void check_accepted(backend *be, const edit *e, const char *dir)
{
    llmq_err err = {0};
    const int rc = load_edited(be, e, dir, &err);
    if (rc != -2)
        CHECK(rc == 0, "%s: loads (%s)", e->what, rc ? err.msg : "ok");
}

static const edit k_accepted[] = {
    {.what = "Llama 3.2's key_length, the head size",
     .base = "synth-llama3-q4km",
     .key = "llama.attention.key_length",
     .type = GGUF_UINT32,
     .u32 = 64},
    {.what = "rope scaling type none",
     .base = "synth-qwen2-q4km",
     .key = "qwen2.rope.scaling.type",
     .type = GGUF_STRING,
     .str = "none"},
    {.what = "a linear rope scaling factor of 1",
     .base = "synth-llama3-q4km",
     .key = "llama.rope.scaling.factor",
     .type = GGUF_FLOAT32,
     .f32 = 1.0f},
    {.what = "expert_count 0",
     .base = "synth-phi3-q4km",
     .key = "phi3.expert_count",
     .type = GGUF_UINT32,
     .u32 = 0},
};

static const edit k_refused[] = {
    {.what = "YaRN rope scaling",
     .base = "synth-qwen2-q4km",
     .key = "qwen2.rope.scaling.type",
     .type = GGUF_STRING,
     .str = "yarn",
     .want = "qwen2.rope.scaling.type"},
    {.what = "linear rope scaling by 8",
     .base = "synth-llama3-q4km",
     .key = "llama.rope.scaling.factor",
     .type = GGUF_FLOAT32,
     .f32 = 8.0f,
     .want = "llama.rope.scaling.factor"},
    {.what = "Phi-3 128k's rope attention factor",
     .base = "synth-phi3-q4km",
     .key = "phi3.rope.scaling.attn_factor",
     .type = GGUF_FLOAT32,
     .f32 = 1.19f,
     .want = "phi3.rope.scaling.attn_factor"},
    {.what = "Phi-3 128k's LongRoPE factors",
     .base = "synth-phi3-q4km",
     .tensor = "rope_factors_long.weight",
     .n = 32,
     .want = "'rope_factors_long.weight'"},
    {.what = "rope_freqs.weight outside the llama architecture",
     .base = "synth-qwen2-q4km",
     .tensor = "rope_freqs.weight",
     .n = 32,
     .want = "'rope_freqs.weight'"},
    {.what = "an output bias",
     .base = "synth-qwen2-q4km",
     .tensor = "output.bias",
     .n = 512,
     .want = "'output.bias'"},
    {.what = "a sliding window outside phi3",
     .base = "synth-llama3-q4km",
     .key = "llama.attention.sliding_window",
     .type = GGUF_UINT32,
     .u32 = 4096,
     .want = "llama.attention.sliding_window"},
    {.what = "a logit scale",
     .base = "synth-llama3-q4km",
     .key = "llama.logit_scale",
     .type = GGUF_FLOAT32,
     .f32 = 0.5f,
     .want = "llama.logit_scale"},
    {.what = "a key length other than the head size",
     .base = "synth-llama3-q4km",
     .key = "llama.attention.key_length",
     .type = GGUF_UINT32,
     .u32 = 128,
     .want = "llama.attention.key_length"},
    {.what = "experts",
     .base = "synth-qwen2-q4km",
     .key = "qwen2.expert_count",
     .type = GGUF_UINT32,
     .u32 = 8,
     .want = "qwen2.expert_count"},
    {.what = "a vocab_size token_embd disagrees with",
     .base = "synth-llama3-q4km",
     .drop = "llama.vocab_size",
     .key = "llama.vocab_size",
     .type = GGUF_UINT32,
     .u32 = 513,
     .want = "llama.vocab_size = 513"},
    {.what = "a missing matrix",
     .base = "synth-qwen2-q4km",
     .drop = "blk.1.attn_q.weight",
     .want = "'blk.1.attn_q.weight' is missing"},
    {.what = "an unknown architecture",
     .base = "synth-llama3-q4km",
     .drop = "general.architecture",
     .key = "general.architecture",
     .type = GGUF_STRING,
     .str = "gemma",
     .want = "architecture 'gemma'"},
};

static void check_loads(backend *be)
{
    static const struct {
        const char *name, *arch;
        bool rope_freqs, tied;
        int32_t sliding_window, rope_dim;
    } want[] = {
        {"synth-llama3-q4km", "llama", true, false, 0, 64},
        {"synth-qwen2-q4km", "qwen2", false, true, 0, 64},
        {"synth-phi3-q4km", "phi3", false, false, 2047, 64},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[512];
        model *m = NULL;
        llmq_err err = {0};
        if (model_load(&m, synth_path(path, sizeof path, want[i].name), be, &err) != 0) {
            CHECK(0, "%s loads (%s)", want[i].name, err.msg);
            continue;
        }
        const model_config *c = model_get_config(m);
        CHECK(strcmp(c->arch, want[i].arch) == 0 && c->rope_freqs == want[i].rope_freqs &&
                  c->tied_output == want[i].tied && c->sliding_window == want[i].sliding_window &&
                  c->rope_dim == want[i].rope_dim && c->n_vocab == 512,
              "%s loads as %s: rope_freqs %d, tied %d, sliding window %d (read, not applied)",
              want[i].name, c->arch, c->rope_freqs, c->tied_output, c->sliding_window);
        model_free(m);
    }
}

int main(void)
{
    backend *be;
    llmq_err err;
    if (backend_cpu_create(&be, 1, &err) != 0) {
        printf("backend: %s\n", err.msg);
        return 1;
    }
    char dir[] = "/tmp/llmq-test-model-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("mkdtemp failed\n");
        return 1;
    }
    check_loads(be);
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
        check_refused(be, &k_refused[i], dir);
    for (size_t i = 0; i < sizeof k_accepted / sizeof k_accepted[0]; i++)
        check_accepted(be, &k_accepted[i], dir);
    rmdir(dir);
    backend_destroy(be);
    return check_done();
}
