/* fuzz-tokenizer: libFuzzer target for tokenization and detokenization.
 *
 * The first input byte picks a vocabulary (SentencePiece with byte fallback,
 * byte-level BPE, SentencePiece without byte tokens) and the flags (BOS,
 * special parsing); the rest is the text.  Besides running under ASan and
 * UBSan, each input checks three properties: every id is in the vocabulary;
 * streaming the ids gives the same bytes as detokenizing them at once; and
 * where the vocabulary can represent the text (valid UTF-8, no literal U+2581,
 * no special parsing), detokenize(tokenize(text)) == text.  With bit 0x40
 * of the first byte the text is also cut into segments (lengths read from
 * its own bytes): tok_encode_segments with every segment parsing special
 * tokens as the input says must give tok_encode's ids (text merges across
 * segments as one string), and alternating segments must give valid ids.
 * The vocabularies come from $LLMQ_TEST_DATA (default tests/data).
 * A first byte of 0xFF instead makes the rest a GGUF file: its vocabulary,
 * however malformed, is loaded and, when accepted, used on a fixed text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_VOCABS 3

static const char *const k_files[N_VOCABS] = {
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "models/tinystories-656k-q8_0.gguf",
};

/* Loaded once for the process: libFuzzer calls the target many times. */
static const tok_vocab *vocab(size_t i)
{
    static tok_vocab *v[N_VOCABS];
    if (!v[i]) {
        const char *dir = getenv("LLMQ_TEST_DATA");
        char path[1024];
        llmq_err err;
        gguf_file *f = NULL;
        snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/data", k_files[i]);
        if (gguf_open(&f, path, &err) < 0 || tok_load(&v[i], f, &err) < 0) {
            fprintf(stderr, "fuzz-tokenizer: %s\n", err.msg);
            abort();
        }
        gguf_close(f);
    }
    return v[i];
}

/* The stream's output for ids equals the one-shot detokenization. */
static void check_stream(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags,
                         const char *whole, size_t whole_len)
{
    tok_stream *s;
    llmq_err err;
    if (tok_stream_new(&s, v, flags, &err) < 0)
        abort();
    size_t at = 0;
    const char *t;
    size_t tl;
    for (size_t i = 0; i < n; i++) {
        if (tok_stream_push(s, ids[i], &t, &tl, &err) < 0 || at + tl > whole_len ||
            memcmp(whole + at, t, tl) != 0)
            abort();
        at += tl;
    }
    tok_stream_flush(s, &t, &tl);
    if (at + tl != whole_len || memcmp(whole + at, t, tl) != 0)
        abort();
    tok_stream_free(s);
}

static void fuzz_metadata(const uint8_t *data, size_t size)
{
    static const char text[] = "Hello <s> w\xc3\xb6rld \xf0\x9f\xa6\x99\n\t 123 it's";
    uint8_t *copy = malloc(size ? size : 1); /* exact size, so ASan sees overreads */
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    llmq_err err;
    memcpy(copy, data, size);
    if (gguf_open_buffer(&f, copy, size, "fuzz.gguf", &err) == 0 && tok_load(&v, f, &err) == 0) {
        gguf_close(f);
        f = NULL;
        int32_t *ids;
        size_t n, len;
        char *out;
        bool bos = tok_bos(v) != TOK_NONE;
        if (tok_encode(v, text, sizeof text - 1, bos, true, &ids, &n, &err) == 0) {
            if (tok_detokenize(v, ids, n, TOK_SPECIAL, &out, &len, &err) < 0)
                abort();
            check_stream(v, ids, n, TOK_SPECIAL, out, len);
            free(out);
            free(ids);
        }
        tok_free(v);
    }
    gguf_close(f);
    free(copy);
}

/* Cuts text into segments of 1..8 bytes (the length read from the text),
 * parse_special all `special` or, when alternate, every other one. */
static size_t cut_segments(const char *text, size_t len, bool special, bool alternate,
                           tok_segment *segs, size_t cap)
{
    size_t n = 0;
    for (size_t at = 0; at < len && n < cap; n++) {
        size_t k = 1 + (unsigned char)text[at] % 8;
        k = n + 1 == cap || k > len - at ? len - at : k;
        segs[n] = (tok_segment){k, alternate ? (n % 2 == 0) == special : special};
        at += k;
    }
    return n;
}

/* Segmented tokenization: uniform segments give tok_encode's ids. */
static void check_segments(const tok_vocab *v, const char *text, size_t len, bool bos, bool special,
                           const int32_t *want, size_t n_want)
{
    tok_segment segs[256];
    int32_t *ids;
    size_t n;
    llmq_err err;
    size_t n_segs = cut_segments(text, len, special, false, segs, 256);
    if (tok_encode_segments(v, text, len, segs, n_segs, bos, &ids, &n, &err) < 0 || n != n_want ||
        (n && memcmp(ids, want, n * sizeof *ids) != 0))
        abort();
    free(ids);
    n_segs = cut_segments(text, len, special, true, segs, 256);
    if (tok_encode_segments(v, text, len, segs, n_segs, bos, &ids, &n, &err) < 0) {
        if (err.code == LLMQ_ERR_INVALID) /* the segments were refused: a bug */
            abort();
        return; /* a token's text taken as text may hold what the vocabulary cannot write */
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= tok_n_vocab(v))
            abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] == 0xFF) {
        fuzz_metadata(data + 1, size - 1);
        return 0;
    }
    size_t which = data[0] % N_VOCABS;
    bool bos = data[0] & 0x10, special = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const tok_vocab *v = vocab(which);
    int32_t *ids;
    size_t n, out_len;
    char *out;
    llmq_err err;
    if (tok_encode(v, text, len, bos, special, &ids, &n, &err) < 0)
        return 0; /* e.g. a character the byte-less vocabulary cannot write */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= tok_n_vocab(v))
            abort();
    if (data[0] & 0x40)
        check_segments(v, text, len, bos, special, ids, n);
    if (tok_detokenize(v, ids, n, TOK_STRIP_SPACE, &out, &out_len, &err) < 0)
        abort();
    check_stream(v, ids, n, TOK_STRIP_SPACE, out, out_len);
    bool representable = which != 2 && !bos && !special && utf8_valid_prefix(text, len) == len &&
                         !memmem(text, len, "\xe2\x96\x81", 3);
    if (representable && (out_len != len || memcmp(out, text, len) != 0))
        abort();
    free(out);
    free(ids);
    return 0;
}
