/* test-gguf: the GGUF reader on every real file in tests/data, and on a
 * corpus of corrupted files made here from those files.
 *
 * Real files: the facts listed in tests/data (models/README.txt of the shared
 * fixtures): versions, counts, data offsets, key values, tensor shapes, types.
 * Corruptions: truncation at every byte of the header and at a stride through
 * the data, then one edit per field (counts, lengths, types, dims, offsets,
 * alignment, duplicates, magic, version).  Each must be refused with a message
 * naming what is wrong and where.  Field offsets come from a small walker
 * below that trusts its input (it only ever reads the real files). */
#include "model/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

#define MAXE 64 /* entries recorded by the walker: the fixtures have at most 48 */

/* ---- a trusting walker that records where each field of a file is ---- */

typedef struct walk {
    uint64_t n_kv, n_t;
    uint64_t kv_off[MAXE], kv_type_off[MAXE], kv_val_off[MAXE];
    char key[MAXE][96];
    uint64_t t_off[MAXE], t_ndims_off[MAXE], t_type_off[MAXE], t_offset_off[MAXE];
    char tname[MAXE][96];
    uint64_t infos_end;
} walk;

static uint32_t rd32(const uint8_t *b, uint64_t off)
{
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}

static uint64_t rd64(const uint8_t *b, uint64_t off)
{
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

static void put32(uint8_t *b, uint64_t off, uint32_t v)
{
    memcpy(b + off, &v, 4);
}

static void put64(uint8_t *b, uint64_t off, uint64_t v)
{
    memcpy(b + off, &v, 8);
}

static uint64_t skip_value(const uint8_t *b, uint64_t pos, uint32_t type)
{
    if (type == GGUF_STRING)
        return pos + 8 + rd64(b, pos);
    if (type != GGUF_ARRAY)
        return pos + gguf_vtype_size(type);
    uint32_t et = rd32(b, pos);
    uint64_t n = rd64(b, pos + 4);
    pos += 12;
    for (uint64_t i = 0; i < n; i++)
        pos = skip_value(b, pos, et);
    return pos;
}

static uint64_t read_name(const uint8_t *b, uint64_t pos, char out[96])
{
    uint64_t len = rd64(b, pos);
    snprintf(out, 96, "%.*s", (int)len, (const char *)b + pos + 8);
    return pos + 8 + len;
}

static void walk_file(const uint8_t *b, walk *w)
{
    memset(w, 0, sizeof *w);
    w->n_t = rd64(b, 8);
    w->n_kv = rd64(b, 16);
    uint64_t pos = 24;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        w->kv_off[i] = pos;
        pos = read_name(b, pos, w->key[i]);
        w->kv_type_off[i] = pos;
        w->kv_val_off[i] = pos + 4;
        pos = skip_value(b, pos + 4, rd32(b, pos));
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t_off[i] = pos;
        pos = read_name(b, pos, w->tname[i]);
        w->t_ndims_off[i] = pos;
        pos += 4 + 8 * (uint64_t)rd32(b, pos);
        w->t_type_off[i] = pos;
        w->t_offset_off[i] = pos + 4;
        pos += 12;
    }
    w->infos_end = pos;
}

static uint64_t kv_index(const walk *w, const char *key)
{
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->key[i], key) == 0)
            return i;
    fprintf(stderr, "fixture has no key %s\n", key);
    exit(99);
}

static uint64_t t_index(const walk *w, const char *name)
{
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->tname[i], name) == 0)
            return i;
    fprintf(stderr, "fixture has no tensor %s\n", name);
    exit(99);
}

/* ---- fixtures ---- */

typedef struct blob {
    uint8_t *data;
    size_t size;
} blob;

static blob load(const char *rel)
{
    char path[4096];
    check_data_path(path, sizeof path, rel);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(99);
    }
    fseek(fp, 0, SEEK_END);
    blob b = {malloc((size_t)ftell(fp)), (size_t)ftell(fp)};
    fseek(fp, 0, SEEK_SET);
    if (!b.data || fread(b.data, 1, b.size, fp) != b.size) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(99);
    }
    fclose(fp);
    return b;
}

static gguf_file *open_fixture(const char *rel)
{
    char path[4096];
    llmq_err err = {0};
    gguf_file *f = NULL;
    int rc = gguf_open(&f, check_data_path(path, sizeof path, rel), &err);
    CHECK(rc == 0 && f, "%s opens%s%s", rel, rc ? ": " : "", rc ? err.msg : "");
    return f;
}

/* ---- real files ---- */

static bool shape_is(const gguf_tensor *t, quant_type type, uint32_t n_dims, uint64_t ne0,
                     uint64_t ne1)
{
    return t && t->type == type && t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1 &&
           t->ne[2] == 1 && t->ne[3] == 1;
}

static uint32_t u32_of(const gguf_file *f, const char *key)
{
    uint32_t v = 0xdeadbeef;
    llmq_err err;
    gguf_get_u32(f, key, &v, &err);
    return v;
}

/* Every tensor lies in the file, after the data section start, in order. */
static void check_tensors_in_file(const gguf_file *f, const char *what)
{
    bool ok = true;
    uint64_t end = 0;
    const uint8_t *base = NULL;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (i == 0)
            base = (const uint8_t *)t->data - t->offset;
        ok = ok && (const uint8_t *)t->data == base + t->offset &&
             gguf_data_offset(f) + t->offset + t->nbytes <= gguf_file_size(f) &&
             gguf_find_tensor(f, t->name) == t;
        if (t->offset + t->nbytes > end)
            end = t->offset + t->nbytes;
    }
    CHECK(ok && gguf_tensor_at(f, gguf_tensor_count(f)) == NULL,
          "%s: every tensor is found by name and lies inside the file", what);
    CHECK(gguf_data_offset(f) + end == gguf_file_size(f),
          "%s: the last tensor ends at the end of the file (%" PRIu64 ")", what, gguf_file_size(f));
}

static void test_stories260k(void)
{
    gguf_file *f = open_fixture("models/stories260K.gguf");
    if (!f)
        return;
    CHECK(gguf_version(f) == 3 && gguf_kv_count(f) == 19 && gguf_tensor_count(f) == 48,
          "stories260K: version 3, 19 keys, 48 tensors");
    CHECK(gguf_alignment(f) == 32 && gguf_data_offset(f) == 14176,
          "stories260K: default alignment 32, data at offset 14176");
    CHECK(u32_of(f, "llama.embedding_length") == 64 && u32_of(f, "llama.block_count") == 5 &&
              u32_of(f, "llama.attention.head_count") == 8 &&
              u32_of(f, "llama.attention.head_count_kv") == 4 &&
              u32_of(f, "llama.feed_forward_length") == 172 &&
              u32_of(f, "llama.context_length") == 2048 &&
              u32_of(f, "llama.rope.dimension_count") == 8,
          "stories260K: dim 64, 5 layers, 8 heads, 4 kv heads, ffn 172, ctx 2048, rope dims 8");
    float eps = 0;
    llmq_err err;
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err) == 0 &&
              eps == 1e-5f,
          "stories260K: rms epsilon is 1e-5");
    gguf_str s = {0};
    CHECK(gguf_get_str(f, "general.architecture", &s, &err) == 0 && gguf_str_eq(s, "llama"),
          "stories260K: general.architecture is 'llama'");
    const gguf_str *toks = NULL;
    uint64_t n = 0;
    CHECK(gguf_get_str_array(f, "tokenizer.ggml.tokens", &toks, &n, &err) == 0 && n == 512 &&
              gguf_str_eq(toks[0], "<unk>") && gguf_str_eq(toks[1], "<s>") &&
              gguf_str_eq(toks[2], "</s>") && gguf_str_eq(toks[3], "<0x00>"),
          "stories260K: 512 token strings, <unk> <s> </s> <0x00> first");
    gguf_vtype et = GGUF_UINT8;
    const void *data = NULL;
    float score = 1;
    CHECK(gguf_get_array(f, "tokenizer.ggml.scores", &et, &data, &n, &err) == 0 &&
              et == GGUF_FLOAT32 && n == 512 && (memcpy(&score, data, 4), score == 0.0f),
          "stories260K: 512 float32 scores, the first 0");
    CHECK(u32_of(f, "tokenizer.ggml.bos_token_id") == 1 &&
              u32_of(f, "tokenizer.ggml.eos_token_id") == 2 &&
              u32_of(f, "tokenizer.ggml.seperator_token_id") == 4294967295u,
          "stories260K: bos 1, eos 2, separator 4294967295");
    CHECK(shape_is(gguf_find_tensor(f, "token_embd.weight"), QUANT_F32, 2, 64, 512) &&
              shape_is(gguf_find_tensor(f, "output_norm.weight"), QUANT_F32, 1, 64, 1) &&
              shape_is(gguf_find_tensor(f, "blk.0.attn_k.weight"), QUANT_F32, 2, 64, 32) &&
              shape_is(gguf_find_tensor(f, "blk.4.ffn_down.weight"), QUANT_F32, 2, 172, 64) &&
              shape_is(gguf_find_tensor(f, "blk.2.ffn_up.weight"), QUANT_F32, 2, 64, 172),
          "stories260K: token_embd [64,512], output_norm [64], attn_k [64,32], ffn_down [172,64], "
          "ffn_up [64,172], all f32");
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    const gguf_tensor *out = gguf_find_tensor(f, "output.weight");
    CHECK(emb && out && emb->nbytes == 64 * 512 * 4 && out->nbytes == emb->nbytes &&
              memcmp(emb->data, out->data, emb->nbytes) == 0,
          "stories260K: output.weight bytes equal token_embd.weight bytes (tied weights)");
    CHECK(gguf_find_tensor(f, "blk.5.attn_q.weight") == NULL && gguf_find_key(f, "llama.vocab_size") < 0,
          "stories260K: absent tensor and key are not found");
    check_tensors_in_file(f, "stories260K");
    gguf_close(f);
}

static void test_getters(void)
{
    gguf_file *f = open_fixture("models/stories260K.gguf");
    if (!f)
        return;
    llmq_err err = {0};
    uint32_t u = 7;
    CHECK(gguf_get_u32(f, "llama.rope.freq_base", &u, &err) == 1 && u == 7,
          "absent key: getter returns 1 and leaves the default alone");
    gguf_str s = {0};
    CHECK(gguf_get_str(f, "llama.block_count", &s, &err) == -1 &&
              strstr(err.msg, "key 'llama.block_count' has type uint32, expected string"),
          "wrong type names the key and both types: %s", err.msg);
    int32_t i = 0;
    CHECK(gguf_get_i32(f, "llama.block_count", &i, &err) == 0 && i == 5,
          "int32 getter reads a uint32 value that fits");
    uint64_t u64 = 0;
    CHECK(gguf_get_u64(f, "tokenizer.ggml.padding_token_id", &u64, &err) == 0 &&
              u64 == 4294967295u,
          "uint64 getter reads a uint32 value");
    CHECK(gguf_get_i32(f, "tokenizer.ggml.padding_token_id", &i, &err) == -1 &&
              strstr(err.msg, "4294967295 does not fit in int32"),
          "int32 getter refuses 4294967295: %s", err.msg);
    float x = 0;
    CHECK(gguf_get_f32(f, "llama.block_count", &x, &err) == -1 &&
              strstr(err.msg, "has type uint32, expected float32"),
          "float getter refuses an integer: %s", err.msg);
    bool b = false;
    CHECK(gguf_get_bool(f, "general.name", &b, &err) == -1 &&
              strstr(err.msg, "has type string, expected bool"),
          "bool getter refuses a string: %s", err.msg);
    const gguf_str *items = NULL;
    uint64_t n = 0;
    CHECK(gguf_get_str_array(f, "tokenizer.ggml.scores", &items, &n, &err) == -1 &&
              strstr(err.msg, "has type array of float32, expected array of string"),
          "string-array getter refuses a float array: %s", err.msg);
    const void *data = NULL;
    gguf_vtype et;
    CHECK(gguf_get_array(f, "general.name", &et, &data, &n, &err) == -1 &&
              strstr(err.msg, "has type string, expected array"),
          "array getter refuses a string: %s", err.msg);
    gguf_close(f);
}

/* Integer getters go by value, not by stored type: retype a key in a copy. */
static void test_integer_types(void)
{
    blob b = load("models/stories260K.gguf");
    walk w;
    walk_file(b.data, &w);
    uint64_t k = kv_index(&w, "llama.embedding_length");
    put32(b.data, w.kv_type_off[k], GGUF_INT32);
    llmq_err err = {0};
    gguf_file *f = NULL;
    uint32_t u = 0;
    int32_t i = 0;
    bool ok = gguf_open_buffer(&f, b.data, b.size, "retyped", &err) == 0 &&
              gguf_get_u32(f, "llama.embedding_length", &u, &err) == 0 && u == 64;
    CHECK(ok, "uint32 getter reads an int32 value 64");
    gguf_close(f);
    put32(b.data, w.kv_val_off[k], (uint32_t)-3);
    ok = gguf_open_buffer(&f, b.data, b.size, "retyped", &err) == 0 &&
         gguf_get_u32(f, "llama.embedding_length", &u, &err) == -1 &&
         strstr(err.msg, "int32 value -3 does not fit in uint32") &&
         gguf_get_i32(f, "llama.embedding_length", &i, &err) == 0 && i == -3;
    CHECK(ok, "int32 -3: refused as uint32, read as int32");
    gguf_close(f);
    free(b.data);
}

static void test_q8_0_and_f16(void)
{
    gguf_file *f = open_fixture("models/tinystories-656k-q8_0.gguf");
    if (f) {
        bool bos = false, eos = true;
        llmq_err err;
        float base = 0;
        CHECK(gguf_version(f) == 3 && gguf_kv_count(f) == 25 && gguf_tensor_count(f) == 20 &&
                  gguf_data_offset(f) == 50336,
              "tinystories-656k-q8_0: version 3, 25 keys, 20 tensors, data at 50336");
        CHECK(u32_of(f, "llama.vocab_size") == 2048 && u32_of(f, "general.file_type") == 7 &&
                  gguf_get_f32(f, "llama.rope.freq_base", &base, &err) == 0 && base == 10000.0f,
              "tinystories-656k-q8_0: vocab 2048, file type 7, freq_base 10000");
        CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &bos, &err) == 0 && bos &&
                  gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &eos, &err) == 0 && !eos,
              "tinystories-656k-q8_0: add_bos_token true, add_eos_token false");
        const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
        CHECK(shape_is(emb, QUANT_Q8_0, 2, 128, 2048) && emb->nbytes == 2048 * 4 * 34 &&
                  shape_is(gguf_find_tensor(f, "blk.1.ffn_down.weight"), QUANT_Q8_0, 2, 384, 128) &&
                  shape_is(gguf_find_tensor(f, "blk.1.ffn_norm.weight"), QUANT_F32, 1, 128, 1) &&
                  gguf_find_tensor(f, "output.weight") == NULL,
              "tinystories-656k-q8_0: q8_0 token_embd [128,2048] of 34-byte blocks, no output.weight");
        check_tensors_in_file(f, "tinystories-656k-q8_0");
        gguf_close(f);
    }
    f = open_fixture("models/TinyStories-656K.f16.gguf");
    if (f) {
        CHECK(gguf_kv_count(f) == 32 && gguf_tensor_count(f) == 20 && gguf_data_offset(f) == 50784 &&
                  u32_of(f, "general.file_type") == 1,
              "TinyStories-656K.f16: 32 keys, 20 tensors, data at 50784, file type 1");
        CHECK(shape_is(gguf_find_tensor(f, "blk.0.attn_k.weight"), QUANT_F16, 2, 128, 64) &&
                  gguf_find_tensor(f, "blk.0.attn_k.weight")->nbytes == 128 * 64 * 2,
              "TinyStories-656K.f16: attn_k [128,64] f16, 2 bytes an element");
        check_tensors_in_file(f, "TinyStories-656K.f16");
        gguf_close(f);
    }
}

static void test_synth(void)
{
    gguf_file *f = open_fixture("models/synth-q4km-gqa.gguf");
    if (f) {
        CHECK(gguf_tensor_count(f) == 39 && gguf_alignment(f) == 32 &&
                  u32_of(f, "llama.embedding_length") == 512 &&
                  u32_of(f, "llama.attention.head_count_kv") == 2,
              "synth-q4km-gqa: 39 tensors, general.alignment 32, dim 512, 2 kv heads");
        CHECK(shape_is(gguf_find_tensor(f, "output.weight"), QUANT_Q6_K, 2, 512, 512) &&
                  shape_is(gguf_find_tensor(f, "blk.1.attn_v.weight"), QUANT_Q4_K, 2, 512, 128) &&
                  shape_is(gguf_find_tensor(f, "blk.2.attn_v.weight"), QUANT_Q6_K, 2, 512, 128) &&
                  shape_is(gguf_find_tensor(f, "blk.3.ffn_down.weight"), QUANT_Q6_K, 2, 1536, 512) &&
                  shape_is(gguf_find_tensor(f, "blk.0.ffn_down.weight"), QUANT_Q4_K, 2, 1536, 512) &&
                  gguf_find_tensor(f, "blk.0.ffn_down.weight")->nbytes == 512 * 6 * 144,
              "synth-q4km-gqa: Q4_K_M mix (q6_K output, attn_v/ffn_down of layers 2-3; q4_K else)");
        check_tensors_in_file(f, "synth-q4km-gqa");
        gguf_close(f);
    }
    f = open_fixture("models/synth-q6k-mha.gguf");
    if (f) {
        CHECK(gguf_tensor_count(f) == 21 &&
                  shape_is(gguf_find_tensor(f, "blk.1.ffn_gate.weight"), QUANT_Q6_K, 2, 256, 768) &&
                  gguf_find_tensor(f, "blk.1.ffn_gate.weight")->nbytes == 768 * 210,
              "synth-q6k-mha: 21 tensors, ffn_gate [256,768] q6_K of 210-byte blocks");
        check_tensors_in_file(f, "synth-q6k-mha");
        gguf_close(f);
    }
}

static void test_vocab(const char *rel, uint64_t n_tokens, const char *model, bool merges)
{
    gguf_file *f = open_fixture(rel);
    if (!f)
        return;
    const gguf_str *toks = NULL, *m = NULL;
    uint64_t n = 0, nm = 0;
    gguf_str s = {0};
    llmq_err err;
    CHECK(gguf_tensor_count(f) == 0 && gguf_get_str_array(f, "tokenizer.ggml.tokens", &toks, &n, &err) == 0 &&
              n == n_tokens && gguf_get_str(f, "tokenizer.ggml.model", &s, &err) == 0 &&
              gguf_str_eq(s, model),
          "%s: no tensors, %" PRIu64 " tokens, tokenizer model '%s'", rel, n_tokens, model);
    int rc = gguf_get_str_array(f, "tokenizer.ggml.merges", &m, &nm, &err);
    CHECK(merges ? rc == 0 && nm > 0 : rc == 1, "%s: merges %s", rel, merges ? "present" : "absent");
    gguf_close(f);
}

/* ---- corrupted files ---- */

/* Open a private copy of the first `size` bytes (so a sanitizer sees any read
 * past them); true when refused with every word in the message. */
static bool refused(const uint8_t *data, size_t size, char *msg, size_t cap, ...)
{
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    llmq_err err = {0};
    gguf_file *f = (gguf_file *)&err; /* must be reset to NULL on failure */
    int rc = gguf_open_buffer(&f, copy, size, "bad.gguf", &err);
    bool ok = rc == -1 && f == NULL && strncmp(err.msg, "bad.gguf: ", 10) == 0;
    if (rc == 0)
        gguf_close(f);
    free(copy);
    va_list ap;
    va_start(ap, cap);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
        ok = ok && strstr(err.msg, w) != NULL;
    va_end(ap);
    snprintf(msg, cap, "%s", rc == 0 ? "(accepted)" : err.msg);
    return ok;
}

#define REFUSED(buf, size, what, ...)                                                      \
    do {                                                                                   \
        char msg_[LLMQ_ERR_MAX];                                                           \
        bool ok_ = refused(buf, size, msg_, sizeof msg_, __VA_ARGS__, (const char *)NULL); \
        CHECK(ok_, "%s: %s", what, msg_);                                                  \
    } while (0)

static bool truncation_refused(const uint8_t *data, size_t size)
{
    char msg[LLMQ_ERR_MAX];
    return refused(data, size, msg, sizeof msg, "offset ", (const char *)NULL) &&
           (strstr(msg, "truncated") || strstr(msg, "past the end") || strstr(msg, "cannot fit"));
}

static void test_truncations(const blob *b, const walk *w, uint64_t data_offset)
{
    uint64_t bad = UINT64_MAX, n = 0;
    for (uint64_t size = 0; size < data_offset; size++, n++)
        if (!truncation_refused(b->data, size) && bad == UINT64_MAX)
            bad = size;
    CHECK(bad == UINT64_MAX, "all %" PRIu64 " truncations inside the header are refused with a "
          "message saying where%s", n, bad == UINT64_MAX ? "" : " (not at the first size below)");
    if (bad != UINT64_MAX)
        printf("# first size accepted or badly refused: %" PRIu64 "\n", bad);
    n = 0;
    bad = UINT64_MAX;
    for (uint64_t size = data_offset; size < b->size; size += 4099, n++)
        if (!truncation_refused(b->data, size) && bad == UINT64_MAX)
            bad = size;
    CHECK(bad == UINT64_MAX, "%" PRIu64 " truncations in the data section are refused", n);
    if (bad != UINT64_MAX)
        printf("# first size accepted or badly refused: %" PRIu64 "\n", bad);
    char want[128];
    REFUSED(b->data, 0, "empty file", "offset 0: magic needs 4 bytes, only 0 left");
    REFUSED(b->data, 20, "cut inside the key-value count", "offset 16: key-value count needs 8 bytes");
    snprintf(want, sizeof want, "offset %" PRIu64 ": key 'general.name': value type needs 4 bytes",
             w->kv_type_off[kv_index(w, "general.name")]);
    REFUSED(b->data, w->kv_type_off[kv_index(w, "general.name")], "cut before a value type", want);
    uint64_t last = w->n_t - 1;
    snprintf(want, sizeof want, "offset %" PRIu64 ": tensor '%s': data offset needs 8 bytes",
             w->t_offset_off[last], w->tname[last]);
    REFUSED(b->data, w->t_offset_off[last] + 3, "cut inside the last data offset", want);
    REFUSED(b->data, w->infos_end, "cut after the tensor infos", "data section", "past the end");
    const uint64_t t = t_index(w, "blk.3.ffn_up.weight");
    snprintf(want, sizeof want, "offset %" PRIu64 ": tensor 'blk.3.ffn_up.weight': data at offset",
             w->t_offset_off[t]);
    REFUSED(b->data, data_offset + rd64(b->data, w->t_offset_off[t]) + 100,
            "cut inside a tensor's data", want, "runs past the end");
}

/* One edit of a copy of the file per case: the message must say what and where. */
typedef struct mutant {
    blob *b;
    uint8_t *buf;
} mutant;

static uint8_t *fresh(mutant *m)
{
    memcpy(m->buf, m->b->data, m->b->size);
    return m->buf;
}

static void test_header_edits(mutant *m)
{
    uint8_t *buf = fresh(m);
    buf[0] = 'X';
    REFUSED(buf, m->b->size, "bad magic", "offset 0: bad magic 58 47 55 46");
    put32(fresh(m), 4, 1);
    REFUSED(m->buf, m->b->size, "version 1", "offset 4: GGUF version 1 is not supported");
    put32(fresh(m), 4, 4);
    REFUSED(m->buf, m->b->size, "version 4", "offset 4: unsupported GGUF version 4");
    put32(fresh(m), 4, 0x03000000);
    REFUSED(m->buf, m->b->size, "big-endian version", "big-endian");
    put64(fresh(m), 16, UINT64_MAX);
    REFUSED(m->buf, m->b->size, "key-value count 2^64-1",
            "offset 16: key-value count 18446744073709551615 cannot fit");
    put64(fresh(m), 8, (uint64_t)1 << 40);
    REFUSED(m->buf, m->b->size, "tensor count 2^40", "offset 8: tensor count 1099511627776 cannot fit");
    put64(fresh(m), 8, m->b->size / 40);
    put64(m->buf, 16, m->b->size / 20);
    REFUSED(m->buf, m->b->size, "counts that fit alone but not together", "cannot fit");
    /* one key more than there is: the first tensor info is read as a key, the
     * next record starts inside its dims */
    put64(fresh(m), 16, 20);
    REFUSED(m->buf, m->b->size, "key-value count one too many", "tensor #0: tensor name length",
            "past the end");
}

static void test_kv_edits(mutant *m, const walk *w)
{
    char want[256];
    uint64_t k = kv_index(w, "general.architecture");
    put64(fresh(m), w->kv_off[k], UINT64_MAX - 3);
    snprintf(want, sizeof want, "offset %" PRIu64 ": key-value #%" PRIu64 ": key length", w->kv_off[k], k);
    REFUSED(m->buf, m->b->size, "key length past the end", want, "runs past the end");
    put64(fresh(m), w->kv_val_off[k], (uint64_t)1 << 62);
    snprintf(want, sizeof want, "offset %" PRIu64 ": key 'general.architecture': string value length",
             w->kv_val_off[k]);
    REFUSED(m->buf, m->b->size, "string length past the end", want, "past the end");
    put64(fresh(m), w->kv_off[k], 0);
    REFUSED(m->buf, m->b->size, "empty key", "empty key");
    fresh(m)[w->kv_off[k] + 8 + 3] = '\0';
    REFUSED(m->buf, m->b->size, "NUL inside a key", "key contains a NUL byte");
    put32(fresh(m), w->kv_type_off[k], 13);
    snprintf(want, sizeof want, "offset %" PRIu64 ": key 'general.architecture': unknown value type 13",
             w->kv_type_off[k]);
    REFUSED(m->buf, m->b->size, "unknown value type", want);

    uint64_t tk = kv_index(w, "tokenizer.ggml.tokens");
    put64(fresh(m), w->kv_val_off[tk] + 4, (uint64_t)1 << 60);
    REFUSED(m->buf, m->b->size, "string array count 2^60", "key 'tokenizer.ggml.tokens'",
            "array string", "left");
    put32(fresh(m), w->kv_val_off[tk], GGUF_ARRAY);
    REFUSED(m->buf, m->b->size, "array of arrays", "key 'tokenizer.ggml.tokens'",
            "arrays of arrays are not supported");
    put32(fresh(m), w->kv_val_off[tk], 99);
    REFUSED(m->buf, m->b->size, "unknown array element type", "unknown array element type 99");
    uint64_t sk = kv_index(w, "tokenizer.ggml.scores");
    put64(fresh(m), w->kv_val_off[sk] + 4, (uint64_t)1 << 62);
    REFUSED(m->buf, m->b->size, "float array count 2^62", "key 'tokenizer.ggml.scores'",
            "4611686018427387904 values of type float32 run past the end");

    /* bos and eos ids have keys of the same length: make them equal */
    uint64_t e = kv_index(w, "tokenizer.ggml.eos_token_id"), bo = kv_index(w, "tokenizer.ggml.bos_token_id");
    fresh(m)[w->kv_off[e] + 8 + strlen("tokenizer.ggml.")] = 'b';
    snprintf(want, sizeof want, "offset %" PRIu64 ": key 'tokenizer.ggml.bos_token_id': duplicate key "
             "(first at offset %" PRIu64 ")", w->kv_off[e], w->kv_off[bo]);
    REFUSED(m->buf, m->b->size, "duplicate key", want);
}

/* Relay the file out with general.alignment = align (renaming key k to it):
 * the data section moves to the next multiple, the tensors' bytes with it. */
static void test_realign(mutant *m, const walk *w, uint64_t k, uint32_t align)
{
    const blob *b = m->b;
    uint64_t old_start = 14176, new_start = (w->infos_end + align - 1) / align * align;
    size_t size = new_start + (b->size - old_start);
    uint8_t *buf = calloc(1, size);
    memcpy(buf, b->data, w->infos_end);
    memcpy(buf + new_start, b->data + old_start, b->size - old_start);
    memcpy(buf + w->kv_off[k] + 8, "general.alignment", 17);
    put32(buf, w->kv_val_off[k], align);
    llmq_err err = {0};
    gguf_file *f = NULL;
    bool ok = gguf_open_buffer(&f, buf, size, "realigned", &err) == 0;
    const gguf_tensor *t = ok ? gguf_find_tensor(f, "blk.4.ffn_down.weight") : NULL;
    ok = ok && gguf_alignment(f) == align && gguf_data_offset(f) == new_start && t &&
         memcmp(t->data, b->data + old_start + t->offset, t->nbytes) == 0;
    CHECK(ok, "general.alignment %u moves the data section to %" PRIu64 " and the tensors with it%s%s",
          align, new_start, ok ? "" : ": ", ok ? "" : err.msg);
    gguf_close(f);
    free(buf);
}

/* llama.block_count has the length of general.alignment: rename it to test alignment. */
static void test_alignment_edits(mutant *m, const walk *w)
{
    uint64_t k = kv_index(w, "llama.block_count");
    const char *name = "general.alignment";
    uint32_t bad[] = {0, 3, 48};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(fresh(m) + w->kv_off[k] + 8, name, strlen(name));
        put32(m->buf, w->kv_val_off[k], bad[i]);
        char what[64], want[128];
        snprintf(what, sizeof what, "general.alignment %u", bad[i]);
        snprintf(want, sizeof want, "offset %" PRIu64 ": key 'general.alignment': alignment %u is "
                 "not a power of two", w->kv_val_off[k], bad[i]);
        REFUSED(m->buf, m->b->size, what, want);
    }
    memcpy(fresh(m) + w->kv_off[k] + 8, name, strlen(name));
    put32(m->buf, w->kv_type_off[k], GGUF_INT32);
    REFUSED(m->buf, m->b->size, "general.alignment of type int32", "type is int32, expected uint32");
    /* only the first tensor (at data offset 0) is read: it is aligned, the data section is not there */
    memcpy(fresh(m) + w->kv_off[k] + 8, name, strlen(name));
    put32(m->buf, w->kv_val_off[k], 1u << 31);
    put64(m->buf, 8, 1);
    REFUSED(m->buf, m->b->size, "alignment 2^31: data section past the end",
            "data section (at offset 2147483648) starts past the end");
    memcpy(fresh(m) + w->kv_off[k] + 8, name, strlen(name));
    put32(m->buf, w->kv_val_off[k], 1024);
    REFUSED(m->buf, m->b->size, "alignment 1024: tensor offsets misaligned",
            "tensor 'output.weight'", "data offset 131328", "not a multiple of the alignment 1024");
    test_realign(m, w, k, 256);
}

static void test_tensor_edits(mutant *m, const walk *w)
{
    char want[256];
    uint64_t q = t_index(w, "blk.0.attn_q.weight");
    uint64_t nd = w->t_ndims_off[q];
    const char *tq = "tensor 'blk.0.attn_q.weight'";
    put32(fresh(m), nd, 0);
    snprintf(want, sizeof want, "offset %" PRIu64 ": %s: n_dims is 0, expected 1 to 4", nd, tq);
    REFUSED(m->buf, m->b->size, "n_dims 0", want);
    put32(fresh(m), nd, 5);
    REFUSED(m->buf, m->b->size, "n_dims 5", tq, "n_dims is 5, expected 1 to 4");
    put64(fresh(m), nd + 4 + 8, 0);
    snprintf(want, sizeof want, "offset %" PRIu64 ": %s: dim 1 is 0", nd + 12, tq);
    REFUSED(m->buf, m->b->size, "dim 1 is 0", want);
    put64(fresh(m), nd + 4, (uint64_t)1 << 32);
    put64(m->buf, nd + 12, (uint64_t)1 << 31);
    REFUSED(m->buf, m->b->size, "dims 2^32 x 2^31 overflow int64", tq,
            "dim 1 (2147483648) makes the element count overflow");
    put64(fresh(m), nd + 4, (uint64_t)1 << 40);
    REFUSED(m->buf, m->b->size, "dims 2^40 x 64: fits int64 elements, not the file", tq,
            "past the end");
    put32(fresh(m), w->t_type_off[q], 99);
    snprintf(want, sizeof want, "offset %" PRIu64 ": %s: unknown type id 99", w->t_type_off[q], tq);
    REFUSED(m->buf, m->b->size, "unknown type id 99", want);
    put32(fresh(m), w->t_type_off[q], QUANT_Q4_0);
    REFUSED(m->buf, m->b->size, "q4_0 (known, unsupported)", tq, "type q4_0 is not supported");
    put32(fresh(m), w->t_type_off[q], QUANT_Q4_K);
    REFUSED(m->buf, m->b->size, "q4_K rows of 64", tq, "dim 0 (64) is not a multiple of the q4_K block size 256");

    uint64_t oo = w->t_offset_off[q];
    uint64_t off = rd64(m->b->data, oo);
    put64(fresh(m), oo, off + 4);
    snprintf(want, sizeof want, "offset %" PRIu64 ": %s: data offset %" PRIu64 " is not a multiple of "
             "the alignment 32", oo, tq, off + 4);
    REFUSED(m->buf, m->b->size, "misaligned data offset", want);
    put64(fresh(m), oo, (uint64_t)1 << 40);
    REFUSED(m->buf, m->b->size, "data offset 2^40", tq, "data at offset 1099511627776", "past the end");
    put64(fresh(m), oo, UINT64_MAX - 31);
    REFUSED(m->buf, m->b->size, "data offset 2^64-32 (offset + size overflows)", tq, "past the end");
    put64(fresh(m), w->t_off[q], UINT64_MAX);
    REFUSED(m->buf, m->b->size, "tensor name length 2^64-1", "tensor name length", "past the end");

    /* attn_q and attn_k names differ by one byte */
    uint64_t k = t_index(w, "blk.0.attn_k.weight");
    fresh(m)[w->t_off[k] + 8 + strlen("blk.0.attn_")] = 'q';
    snprintf(want, sizeof want, "offset %" PRIu64 ": %s: duplicate tensor name (first at offset %" PRIu64
             ")", w->t_off[k], tq, w->t_off[q]);
    REFUSED(m->buf, m->b->size, "duplicate tensor name", want);
}

static void test_bool_value(void)
{
    blob b = load("models/tinystories-656k-q8_0.gguf");
    walk w;
    walk_file(b.data, &w);
    uint64_t k = kv_index(&w, "tokenizer.ggml.add_bos_token");
    b.data[w.kv_val_off[k]] = 2;
    char want[128];
    snprintf(want, sizeof want, "offset %" PRIu64 ": key 'tokenizer.ggml.add_bos_token': bool value 2",
             w.kv_val_off[k]);
    REFUSED(b.data, b.size, "bool value 2", want);
    free(b.data);
}

static void test_corrupted(void)
{
    blob b = load("models/stories260K.gguf");
    walk w;
    walk_file(b.data, &w);
    mutant m = {&b, malloc(b.size)};
    test_truncations(&b, &w, 14176);
    test_header_edits(&m);
    test_kv_edits(&m, &w);
    test_alignment_edits(&m, &w);
    test_tensor_edits(&m, &w);
    free(m.buf);
    free(b.data);
    test_bool_value();
}

static void test_open_errors(void)
{
    llmq_err err = {0};
    gguf_file *f = NULL;
    char dir[4096];
    bool ok = gguf_open(&f, "/nonexistent/model.gguf", &err) == -1 && f == NULL &&
              strstr(err.msg, "/nonexistent/model.gguf: cannot open");
    CHECK(ok, "missing file: %s", err.msg);
    ok = gguf_open(&f, check_data_path(dir, sizeof dir, "models"), &err) == -1 && f == NULL &&
         strstr(err.msg, "models: not a regular file");
    CHECK(ok, "directory: %s", err.msg);
}

int main(void)
{
    test_stories260k();
    test_getters();
    test_integer_types();
    test_q8_0_and_f16();
    test_synth();
    test_vocab("vocab/ggml-vocab-llama-spm.gguf", 32000, "llama", false);
    test_vocab("vocab/ggml-vocab-phi-3.gguf", 32064, "llama", false);
    test_vocab("vocab/ggml-vocab-gpt-2.gguf", 50257, "gpt2", true);
    test_corrupted();
    test_open_errors();
    return check_done();
}
