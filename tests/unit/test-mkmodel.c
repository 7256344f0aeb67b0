/* test-mkmodel: llmq-mkmodel writes what llama.cpp would, and it reads back.
 *
 * Runs the built tool on small shapes with the stories260K vocab (512
 * tokens), then reads each file with our GGUF reader: metadata keys, order
 * and values, the tokenizer copied from the vocab file, tensor names, shapes
 * and per-mix types, the weights' statistics (row std, centred q4_K and q5_K
 * sub-blocks), determinism across runs and thread counts, layout equality
 * with llama.cpp-loaded synth fixtures, each --arch's tensors (Llama 3.1's
 * rope_freqs, Qwen2's biases and tied output, Phi-3's fused attn_qkv and
 * gate/up), keys and determinism, the command-line errors, and that an
 * interrupted run leaves no file behind. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "tests/unit/check.h"
#include "model/gguf.h"

typedef struct env {
    char exe[512];
    char vocab[512];
    char dir[256];
} env;

typedef struct shape {
    const char *dim, *layers, *heads, *kv, *ff, *ctx;
} shape;

static const shape SMALL = {"256", "2", "4", "2", "512", "256"};

/* ---- running the tool ---- */

/* Runs argv with stdout and stderr into log; returns the exit status, or
 * 128 + signal.  pid_out (may be NULL) lets the caller signal it instead of
 * waiting: then the return value is 0 and the caller waits. */
static int spawn(char *const argv[], const char *log, pid_t *pid_out)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid_out) {
        *pid_out = pid;
        return 0;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    while (n > 0 && buf[n - 1] == '\n') /* messages are quoted inside CHECK lines */
        n--;
    buf[n] = '\0';
    fclose(f);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void path_in(const env *e, char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", e->dir, name);
}

/* llmq-mkmodel with a shape, mix, seed and thread count, and optionally an
 * --arch (NULL: none) and --tied; the log is kept in log (may be NULL).
 * Returns the exit status. */
static int mkmodel_arch(const env *e, const char *vocab, const shape *s, const char *mix,
                        const char *seed, const char *threads, const char *out, const char *arch,
                        bool tied, char *log, size_t cap)
{
    char *argv[] = {(char *)e->exe,
                    "--vocab",
                    (char *)vocab,
                    "--dim",
                    (char *)s->dim,
                    "--layers",
                    (char *)s->layers,
                    "--heads",
                    (char *)s->heads,
                    "--kv-heads",
                    (char *)s->kv,
                    "--ff",
                    (char *)s->ff,
                    "--ctx",
                    (char *)s->ctx,
                    "--mix",
                    (char *)mix,
                    "--seed",
                    (char *)seed,
                    "--threads",
                    (char *)threads,
                    "-o",
                    (char *)out,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    int n = 23; /* the first NULL */
    if (arch) {
        argv[n++] = "--arch";
        argv[n++] = (char *)arch;
    }
    if (tied)
        argv[n++] = "--tied";
    char logpath[300];
    path_in(e, logpath, sizeof logpath, "log.txt");
    int rc = spawn(argv, logpath, NULL);
    if (log)
        slurp(logpath, log, cap);
    return rc;
}

static int mkmodel(const env *e, const char *vocab, const shape *s, const char *mix,
                   const char *seed, const char *threads, const char *out, char *log, size_t cap)
{
    return mkmodel_arch(e, vocab, s, mix, seed, threads, out, NULL, false, log, cap);
}

/* ---- what a file must hold ---- */

typedef struct expect {
    const char *mix;
    uint32_t file_type;
    quant_type base;
    bool k_m; /* llama.cpp's _K_M choice per tensor */
} expect;

static const expect MIXES[] = {
    {"q4_k_m", 15, QUANT_Q4_K, true}, {"q4_k", 14, QUANT_Q4_K, false},
    {"q5_k_m", 17, QUANT_Q5_K, true}, {"q5_k", 16, QUANT_Q5_K, false},
    {"q6_k", 18, QUANT_Q6_K, false},  {"q8_0", 7, QUANT_Q8_0, false},
    {"f16", 1, QUANT_F16, false},     {"f32", 0, QUANT_F32, false},
};

/* Matrix type under a mix.  For q4_k_m and q5_k_m with 2 layers, llama.cpp's
 * use_more_bits(i, 2) (i < 0 || i >= 1 || (i - 0) % 3 == 2) picks layer 1
 * for q6_K attn_v and ffn_down. */
static quant_type want_type(const expect *x, const char *role, int layer)
{
    if (!x->k_m)
        return x->base;
    if (!strcmp(role, "output") ||
        ((!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) && layer == 1))
        return QUANT_Q6_K;
    return x->base;
}

static void check_metadata(const gguf_file *f, const gguf_file *vocab, const expect *x)
{
    static const char *const keys[] = {
        "general.architecture", "general.name", "llama.context_length",
        "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
        "llama.rope.dimension_count", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon",
        "llama.rope.freq_base", "general.file_type", "llama.vocab_size",
        "general.quantization_version"};
    const size_t nk = sizeof keys / sizeof keys[0];
    int order = 0;
    for (size_t i = 0; i < nk; i++)
        order += !gguf_str_eq(gguf_kv_key(f, i), keys[i]);
    CHECK(order == 0, "%s: the 14 model keys come first, in llama.cpp's order", x->mix);

    llmq_err err;
    gguf_str arch = {0}, name = {0};
    uint32_t ctx = 0, emb = 0, blocks = 0, ff = 0, rope = 0, heads = 0, kv = 0, ft = 99, nv = 0,
             qv = 0;
    float eps = 0, base = 0;
    bool ok = !gguf_get_str(f, "general.architecture", &arch, &err) &&
              !gguf_get_str(f, "general.name", &name, &err) &&
              !gguf_get_u32(f, "llama.context_length", &ctx, &err) &&
              !gguf_get_u32(f, "llama.embedding_length", &emb, &err) &&
              !gguf_get_u32(f, "llama.block_count", &blocks, &err) &&
              !gguf_get_u32(f, "llama.feed_forward_length", &ff, &err) &&
              !gguf_get_u32(f, "llama.rope.dimension_count", &rope, &err) &&
              !gguf_get_u32(f, "llama.attention.head_count", &heads, &err) &&
              !gguf_get_u32(f, "llama.attention.head_count_kv", &kv, &err) &&
              !gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err) &&
              !gguf_get_f32(f, "llama.rope.freq_base", &base, &err) &&
              !gguf_get_u32(f, "general.file_type", &ft, &err) &&
              !gguf_get_u32(f, "llama.vocab_size", &nv, &err) &&
              !gguf_get_u32(f, "general.quantization_version", &qv, &err);
    CHECK(ok && gguf_str_eq(arch, "llama") && gguf_str_eq(name, "synthetic-llama-2L-256") &&
              ctx == 256 && emb == 256 && blocks == 2 && ff == 512 && rope == 64 && heads == 4 &&
              kv == 2 && eps == 1e-5f && base == 10000.0f && nv == 512 && qv == 2,
          "%s: model metadata matches the command line (dim 256, 2 layers, 4/2 heads, ff 512, "
          "ctx 256, vocab 512)", x->mix);
    CHECK(ft == x->file_type, "%s: general.file_type is %u (got %u)", x->mix, x->file_type, ft);

    /* Every tokenizer.ggml.* key of the vocab file, same order, type, value. */
    uint64_t at = nk, copied = 0;
    int bad = 0;
    for (uint64_t i = 0; i < gguf_kv_count(vocab); i++) {
        gguf_str k = gguf_kv_key(vocab, i);
        if (k.len < 15 || memcmp(k.ptr, "tokenizer.ggml.", 15))
            continue;
        copied++;
        gguf_str mine = gguf_kv_key(f, at);
        if (mine.len != k.len || memcmp(mine.ptr, k.ptr, k.len) ||
            gguf_kv_type(f, at) != gguf_kv_type(vocab, i)) {
            bad++;
            continue;
        }
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        gguf_vtype t = gguf_kv_type(vocab, i);
        if (t == GGUF_ARRAY) {
            gguf_vtype e1, e2;
            const void *d1, *d2;
            uint64_t n1, n2;
            gguf_get_array(vocab, key, &e1, &d1, &n1, &err);
            gguf_get_array(f, key, &e2, &d2, &n2, &err);
            if (e1 != e2 || n1 != n2)
                bad++;
            else if (e1 != GGUF_STRING)
                bad += memcmp(d1, d2, n1 * gguf_vtype_size(e1)) != 0;
            else {
                const gguf_str *s1, *s2;
                gguf_get_str_array(vocab, key, &s1, &n1, &err);
                gguf_get_str_array(f, key, &s2, &n2, &err);
                for (uint64_t j = 0; j < n1; j++)
                    bad += s1[j].len != s2[j].len || memcmp(s1[j].ptr, s2[j].ptr, s1[j].len);
            }
        } else if (t == GGUF_STRING) {
            gguf_str s1, s2;
            gguf_get_str(vocab, key, &s1, &err);
            gguf_get_str(f, key, &s2, &err);
            bad += s1.len != s2.len || memcmp(s1.ptr, s2.ptr, s1.len);
        } else {
            uint64_t v1 = 1, v2 = 2;
            gguf_get_u64(vocab, key, &v1, &err);
            gguf_get_u64(f, key, &v2, &err);
            bad += v1 != v2;
        }
        at++;
    }
    CHECK(copied >= 8 && bad == 0 && at == gguf_kv_count(f),
          "%s: all %" PRIu64 " tokenizer.ggml.* keys are copied with their types and values, "
          "arrays element for element, and nothing else follows", x->mix, copied);
}

/* One row's mean and standard deviation. */
static void row_stats(const float *w, uint64_t n, double *mean, double *std)
{
    double s = 0, s2 = 0;
    for (uint64_t i = 0; i < n; i++)
        s += w[i];
    *mean = s / (double)n;
    for (uint64_t i = 0; i < n; i++)
        s2 += (w[i] - *mean) * (w[i] - *mean);
    *std = sqrt(s2 / (double)n);
}

/* q4_K and q5_K rows, whose q run over 0..2*centre (centre 7.5 and 15.5):
 * min = dmin*m must be centre*d*sc (up to the f16 rounding of dmin), so every
 * sub-block is d*sc*(q - centre); and the sub-block means, in units of d*sc,
 * must look like those of 32 uniform q (std `spread`: 0.82 for q4_K, 1.63
 * for q5_K), not of an uncentred block (centre). */
typedef struct centring {
    quant_type type;
    double centre, spread;
    uint64_t subblocks, off_centre, far;
    double sum_sq, negative, total;
} centring;

static centring centring_for(quant_type type)
{
    double centre = type == QUANT_Q5_K ? 15.5 : 7.5, levels = 2 * centre + 1;
    return (centring){.type = type, .centre = centre,
                      .spread = sqrt((levels * levels - 1) / 12 / 32)};
}

static void k4_centring(quant_f16 d16, quant_f16 dmin16, const uint8_t *scales, const float *w,
                        centring *c)
{
    float d = quant_f16_to_f32(d16), dmin = quant_f16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        quant_get_scale_min_k4(j, scales, &sc, &m);
        double unit = (double)d * sc, min = (double)dmin * m;
        c->off_centre += fabs(min - c->centre * unit) > c->centre * unit * 0x1p-10;
        double mean = 0;
        for (int l = 0; l < 32; l++) {
            mean += w[32 * j + l];
            c->negative += w[32 * j + l] < 0;
        }
        mean /= 32 * unit; /* in units of d*sc */
        c->far += fabs(mean) > 5.5 * c->spread;
        c->sum_sq += mean * mean;
        c->subblocks++;
        c->total += 32;
    }
}

/* One row of n weights w, dequantized from src. */
static void row_centring(quant_type type, const uint8_t *src, const float *w, uint64_t n,
                         centring *c)
{
    for (uint64_t b = 0; b < n / QK_K; b++, w += QK_K)
        if (type == QUANT_Q4_K) {
            const block_q4_K *k = (const block_q4_K *)src + b;
            k4_centring(k->d, k->dmin, k->scales, w, c);
        } else {
            const block_q5_K *k = (const block_q5_K *)src + b;
            k4_centring(k->d, k->dmin, k->scales, w, c);
        }
}

static void check_tensor_weights(const gguf_tensor *t, const expect *x, int *bad_rows,
                                 int *bad_norms, centring *c)
{
    uint64_t n = t->ne[0], rows = t->ne[1], row_bytes = 0;
    llmq_err err;
    float *w = malloc(n * sizeof *w);
    if (!w || quant_row_bytes(t->type, n, &row_bytes, &err)) {
        (*bad_rows)++;
        free(w);
        return;
    }
    bool norm = t->n_dims == 1;
    double target = 1.0 / sqrt((double)n);
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)t->data + r * row_bytes;
        quant_dequantize_row(t->type, src, w, (int64_t)n);
        if (norm) {
            for (uint64_t i = 0; i < n; i++)
                *bad_norms += w[i] != 1.0f;
            continue;
        }
        double mean, std;
        row_stats(w, n, &mean, &std);
        if (fabs(std - target) > 0.2 * target) {
            if (*bad_rows < 3)
                printf("# %s %s row %" PRIu64 ": std %g, want %g\n", x->mix, t->name, r, std,
                       target);
            (*bad_rows)++;
        }
        if (t->type == c->type)
            row_centring(t->type, src, w, n, c);
    }
    free(w);
}

static void check_tensors(const gguf_file *f, const expect *x)
{
    static const char *const roles[] = {"attn_norm", "attn_q", "attn_k", "attn_v",
                                        "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                                        "ffn_down"};
    /* [ne0, ne1] with dim 256, kv_dim 2 * 64 = 128, ff 512; ne1 0 = 1-D. */
    static const uint64_t dims[][2] = {{256, 0}, {256, 256}, {256, 128}, {256, 128}, {256, 256},
                                       {256, 0}, {256, 512}, {256, 512}, {512, 256}};
    int bad = 0;
    uint64_t i = 0;
    char name[64];
    for (int pos = 0; pos < 21; pos++) {
        const char *role;
        uint64_t ne0, ne1;
        int layer = -1;
        if (pos == 0) {
            role = "token_embd", ne0 = 256, ne1 = 512;
            snprintf(name, sizeof name, "token_embd.weight");
        } else if (pos < 19) {
            layer = (pos - 1) / 9;
            int r = (pos - 1) % 9;
            role = roles[r], ne0 = dims[r][0], ne1 = dims[r][1];
            snprintf(name, sizeof name, "blk.%d.%s.weight", layer, role);
        } else if (pos == 19) {
            role = "output_norm", ne0 = 256, ne1 = 0;
            snprintf(name, sizeof name, "output_norm.weight");
        } else {
            role = "output", ne0 = 256, ne1 = 512;
            snprintf(name, sizeof name, "output.weight");
        }
        const gguf_tensor *t = gguf_tensor_at(f, i++);
        quant_type want = ne1 == 0 ? QUANT_F32 : want_type(x, role, layer);
        if (!t || strcmp(t->name, name) || t->n_dims != (ne1 ? 2u : 1u) || t->ne[0] != ne0 ||
            (ne1 && t->ne[1] != ne1) || t->type != want) {
            printf("# %s: tensor %d: got %s (%s), want %s (%s)\n", x->mix, pos,
                   t ? t->name : "-", t ? quant_type_name(t->type) : "-", name,
                   quant_type_name(want));
            bad++;
        }
    }
    CHECK(bad == 0 && gguf_tensor_count(f) == 21,
          "%s: 21 tensors with llama.cpp's names, shapes and the mix's types, in order", x->mix);

    int bad_rows = 0, bad_norms = 0;
    centring c = centring_for(x->base);
    for (uint64_t k = 0; k < gguf_tensor_count(f); k++)
        check_tensor_weights(gguf_tensor_at(f, k), x, &bad_rows, &bad_norms, &c);
    CHECK(bad_rows == 0 && bad_norms == 0,
          "%s: every matrix row has std within 20%% of 1/sqrt(fan_in) (%d off); norms are 1.0 "
          "(%d not)", x->mix, bad_rows, bad_norms);
    if (x->base == QUANT_Q4_K || x->base == QUANT_Q5_K) {
        double rms = sqrt(c.sum_sq / (double)c.subblocks), neg = c.negative / c.total;
        CHECK(c.subblocks > 1000 && c.off_centre == 0 && c.far == 0 && rms < 1.25 * c.spread &&
                  neg > 0.45 && neg < 0.55,
              "%s: all %" PRIu64 " %s sub-blocks are centred: min = %.1f*d*sc (%" PRIu64
              " not), |mean| < %.1f d*sc (%" PRIu64 " not), rms mean %.3f d*sc (uniform q: "
              "%.3f), %.1f%% negative", x->mix, c.subblocks, quant_type_name(x->base), c.centre,
              c.off_centre, 5.5 * c.spread, c.far, rms, c.spread, 100 * neg);
    }
}

static void test_mixes(const env *e, const gguf_file *vocab)
{
    for (size_t i = 0; i < sizeof MIXES / sizeof MIXES[0]; i++) {
        const expect *x = &MIXES[i];
        char out[300], log[4096];
        path_in(e, out, sizeof out, "mix.gguf");
        int rc = mkmodel(e, e->vocab, &SMALL, x->mix, "1", "2", out, log, sizeof log);
        llmq_err err = {0};
        gguf_file *f = NULL;
        int open_rc = rc == 0 ? gguf_open(&f, out, &err) : -1;
        CHECK(rc == 0 && open_rc == 0, "%s: written and read back (rc %d) %s", x->mix, rc, err.msg);
        if (!f) {
            printf("# %s", log);
            continue;
        }
        check_metadata(f, vocab, x);
        check_tensors(f, x);
        gguf_close(f);
        unlink(out);
    }
}

/* ---- layout equality with the llama.cpp-loaded synth fixtures ---- */

static void compare_synth(const env *e, const char *fixture, const shape *s, const char *mix)
{
    char want_path[512], out[300];
    check_data_path(want_path, sizeof want_path, fixture);
    path_in(e, out, sizeof out, "synth.gguf");
    int rc = mkmodel(e, e->vocab, s, mix, "3", "2", out, NULL, 0);
    llmq_err err = {0};
    gguf_file *want = NULL, *got = NULL;
    if (rc || gguf_open(&want, want_path, &err) || gguf_open(&got, out, &err)) {
        CHECK(0, "%s: shape written and both files open (rc %d) %s", fixture, rc, err.msg);
        gguf_close(want);
        return;
    }
    int bad = gguf_tensor_count(want) != gguf_tensor_count(got);
    for (uint64_t i = 0; !bad && i < gguf_tensor_count(want); i++) {
        const gguf_tensor *a = gguf_tensor_at(want, i), *b = gguf_tensor_at(got, i);
        bad += strcmp(a->name, b->name) || a->n_dims != b->n_dims || a->type != b->type ||
               memcmp(a->ne, b->ne, sizeof a->ne) || a->offset != b->offset ||
               a->nbytes != b->nbytes;
    }
    CHECK(bad == 0, "%s: same tensors as the fixture: names, order, shapes, types, data offsets "
          "(%" PRIu64 " tensors)", fixture, gguf_tensor_count(want));
    /* The fixture's keys (bar general.alignment, ours is the default) all
     * appear with the same value. */
    int missing = 0;
    for (uint64_t i = 0; i < gguf_kv_count(want); i++) {
        gguf_str k = gguf_kv_key(want, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        if (!strcmp(key, "general.alignment") || !strncmp(key, "tokenizer.", 10))
            continue;
        int64_t j = gguf_find_key(got, key);
        gguf_vtype t = gguf_kv_type(want, i);
        if (j < 0 || gguf_kv_type(got, (uint64_t)j) != t) {
            printf("# %s: key %s missing or retyped\n", fixture, key);
            missing++;
            continue;
        }
        if (t == GGUF_STRING) {
            gguf_str a, b;
            gguf_get_str(want, key, &a, &err);
            gguf_get_str(got, key, &b, &err);
            missing += a.len != b.len || memcmp(a.ptr, b.ptr, a.len);
        } else if (t == GGUF_FLOAT32) {
            float a = 0, b = 1;
            gguf_get_f32(want, key, &a, &err);
            gguf_get_f32(got, key, &b, &err);
            missing += a != b;
        } else {
            uint64_t a = 0, b = 1;
            gguf_get_u64(want, key, &a, &err);
            gguf_get_u64(got, key, &b, &err);
            missing += a != b;
        }
    }
    CHECK(missing == 0, "%s: every model key of the fixture is there with its value", fixture);
    gguf_close(want);
    gguf_close(got);
    unlink(out);
}

/* ---- determinism ---- */

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = getc(fa), cb = getc(fb);
        same = ca == cb;
        if (ca == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static void test_determinism(const env *e)
{
    char a[300], b[300], c[300], d[300];
    path_in(e, a, sizeof a, "seed1-t1.gguf");
    path_in(e, b, sizeof b, "seed1-t3.gguf");
    path_in(e, c, sizeof c, "seed1-t2.gguf");
    path_in(e, d, sizeof d, "seed2-t2.gguf");
    int rc = mkmodel(e, e->vocab, &SMALL, "q4_k_m", "1", "1", a, NULL, 0) |
             mkmodel(e, e->vocab, &SMALL, "q4_k_m", "1", "3", b, NULL, 0) |
             mkmodel(e, e->vocab, &SMALL, "q4_k_m", "1", "2", c, NULL, 0) |
             mkmodel(e, e->vocab, &SMALL, "q4_k_m", "2", "2", d, NULL, 0);
    CHECK(rc == 0, "four q4_k_m models written");
    CHECK(same_file(a, b) && same_file(a, c),
          "same seed, 1, 2 and 3 threads: byte-identical files");
    CHECK(!same_file(a, d), "another seed: different weights");
    unlink(a);
    unlink(b);
    unlink(c);
    unlink(d);
}

/* ---- the other architectures ---- */

/* A tensor of each block: its name after "blk.N.", [ne0, ne1] (ne1 0: 1-D)
 * and its type in block 0 and block 1 under q4_k_m with 2 layers. */
typedef struct block_tensor {
    const char *suffix;
    uint64_t ne0, ne1;
    quant_type t0, t1;
} block_tensor;

typedef struct arch_expect {
    const char *arch, *gguf_arch;
    bool tied;
    const char *first; /* a tensor before token_embd, or NULL */
    quant_type embd_type;
    const block_tensor *block;
    size_t n_block;
    const char *const *keys; /* model keys present */
    const char *const *absent;
} arch_expect;

#define Q4 QUANT_Q4_K
#define Q6 QUANT_Q6_K
#define F32 QUANT_F32

/* SMALL: dim 256, 4 heads of 64, 2 kv heads (kv_dim 128), ff 512. */
static const block_tensor LLAMA_BLOCK[] = {
    {"attn_norm.weight", 256, 0, F32, F32},   {"attn_q.weight", 256, 256, Q4, Q4},
    {"attn_k.weight", 256, 128, Q4, Q4},      {"attn_v.weight", 256, 128, Q4, Q6},
    {"attn_output.weight", 256, 256, Q4, Q4}, {"ffn_norm.weight", 256, 0, F32, F32},
    {"ffn_gate.weight", 256, 512, Q4, Q4},    {"ffn_up.weight", 256, 512, Q4, Q4},
    {"ffn_down.weight", 512, 256, Q4, Q6},
};
static const block_tensor QWEN2_BLOCK[] = {
    {"attn_norm.weight", 256, 0, F32, F32}, {"attn_q.weight", 256, 256, Q4, Q4},
    {"attn_q.bias", 256, 0, F32, F32},      {"attn_k.weight", 256, 128, Q4, Q4},
    {"attn_k.bias", 128, 0, F32, F32},      {"attn_v.weight", 256, 128, Q4, Q6},
    {"attn_v.bias", 128, 0, F32, F32},      {"attn_output.weight", 256, 256, Q4, Q4},
    {"ffn_norm.weight", 256, 0, F32, F32},  {"ffn_gate.weight", 256, 512, Q4, Q4},
    {"ffn_up.weight", 256, 512, Q4, Q4},    {"ffn_down.weight", 512, 256, Q4, Q6},
};
/* attn_qkv: q, k and v rows (256 + 128 + 128), quantized as attn_v is;
 * ffn_up: the gate rows, then the up rows. */
static const block_tensor PHI3_BLOCK[] = {
    {"attn_norm.weight", 256, 0, F32, F32},   {"attn_qkv.weight", 256, 512, Q4, Q6},
    {"attn_output.weight", 256, 256, Q4, Q4}, {"ffn_norm.weight", 256, 0, F32, F32},
    {"ffn_up.weight", 256, 1024, Q4, Q4},     {"ffn_down.weight", 512, 256, Q4, Q6},
};

static const char *const LLAMA3_KEYS[] = {"llama.rope.dimension_count", "llama.vocab_size", NULL};
static const char *const QWEN2_KEYS[] = {"qwen2.context_length", "qwen2.rope.freq_base", NULL};
static const char *const QWEN2_ABSENT[] = {"qwen2.rope.dimension_count", "qwen2.vocab_size", NULL};
static const char *const PHI3_KEYS[] = {"phi3.rope.dimension_count",
                                        "phi3.rope.scaling.original_context_length",
                                        "phi3.attention.sliding_window", NULL};
static const char *const PHI3_ABSENT[] = {"phi3.vocab_size", NULL};
static const char *const NONE[] = {NULL};

static const arch_expect ARCH_EXPECT[] = {
    {"llama3", "llama", false, "rope_freqs.weight", Q4, LLAMA_BLOCK, 9, LLAMA3_KEYS, NONE},
    {"qwen2", "qwen2", true, NULL, Q6, QWEN2_BLOCK, 12, QWEN2_KEYS, QWEN2_ABSENT},
    {"phi3", "phi3", false, NULL, Q4, PHI3_BLOCK, 6, PHI3_KEYS, PHI3_ABSENT},
};

/* Names, shapes and types of every tensor, in order. */
static int arch_tensors_off(const gguf_file *f, const arch_expect *x)
{
    int bad = 0;
    uint64_t i = 0;
    const gguf_tensor *t;
    if (x->first) {
        t = gguf_tensor_at(f, i++);
        bad += !t || strcmp(t->name, x->first) || t->type != F32 || t->ne[0] != 32;
    }
    t = gguf_tensor_at(f, i++);
    bad += !t || strcmp(t->name, "token_embd.weight") || t->type != x->embd_type;
    for (int layer = 0; layer < 2; layer++)
        for (size_t k = 0; k < x->n_block; k++) {
            const block_tensor *b = &x->block[k];
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", layer, b->suffix);
            t = gguf_tensor_at(f, i++);
            if (!t || strcmp(t->name, name) || t->n_dims != (b->ne1 ? 2u : 1u) ||
                t->ne[0] != b->ne0 || (b->ne1 && t->ne[1] != b->ne1) ||
                t->type != (layer ? b->t1 : b->t0)) {
                printf("# %s: got %s, want %s\n", x->arch, t ? t->name : "-", name);
                bad++;
            }
        }
    t = gguf_tensor_at(f, i++);
    bad += !t || strcmp(t->name, "output_norm.weight");
    if (!x->tied) {
        t = gguf_tensor_at(f, i++);
        bad += !t || strcmp(t->name, "output.weight") || t->type != Q6;
    }
    return bad + (i != gguf_tensor_count(f));
}

/* Llama 3.1's divisors: 1 for the fast frequencies, 8 for the slow, a
 * smooth ramp between. */
static bool llama3_factors_ok(const gguf_file *f)
{
    const gguf_tensor *t = gguf_find_tensor(f, "rope_freqs.weight");
    if (!t)
        return false;
    const float *v = t->data;
    bool ok = v[0] == 1.0f && v[t->ne[0] - 1] == 8.0f;
    for (uint64_t i = 1; i < t->ne[0]; i++)
        ok = ok && v[i] >= v[i - 1] && v[i] <= 8.0f;
    return ok;
}

static int keys_off(const gguf_file *f, const arch_expect *x)
{
    int bad = 0;
    gguf_str arch;
    llmq_err err;
    bad += gguf_get_str(f, "general.architecture", &arch, &err) != 0 ||
           !gguf_str_eq(arch, x->gguf_arch);
    for (const char *const *k = x->keys; *k; k++)
        bad += gguf_find_key(f, *k) < 0;
    for (const char *const *k = x->absent; *k; k++)
        bad += gguf_find_key(f, *k) >= 0;
    return bad;
}

static void test_archs(const env *e)
{
    for (size_t i = 0; i < sizeof ARCH_EXPECT / sizeof ARCH_EXPECT[0]; i++) {
        const arch_expect *x = &ARCH_EXPECT[i];
        char a[300], b[300], log[4096];
        path_in(e, a, sizeof a, "arch-t1.gguf");
        path_in(e, b, sizeof b, "arch-t2.gguf");
        int rc = mkmodel_arch(e, e->vocab, &SMALL, "q4_k_m", "1", "1", a, x->arch, x->tied, log,
                              sizeof log) |
                 mkmodel_arch(e, e->vocab, &SMALL, "q4_k_m", "1", "2", b, x->arch, x->tied, NULL,
                              0);
        gguf_file *f = NULL;
        llmq_err err = {0};
        if (rc || gguf_open(&f, a, &err)) {
            CHECK(0, "--arch %s: written and read back (rc %d) %s %s", x->arch, rc, err.msg, log);
            continue;
        }
        CHECK(keys_off(f, x) == 0, "--arch %s: general.architecture %s and the converter's keys",
              x->arch, x->gguf_arch);
        CHECK(arch_tensors_off(f, x) == 0,
              "--arch %s%s: %" PRIu64 " tensors with llama.cpp's names, shapes and Q4_K_M types",
              x->arch, x->tied ? " --tied" : "", gguf_tensor_count(f));
        if (x->first)
            CHECK(llama3_factors_ok(f),
                  "--arch %s: rope_freqs.weight holds Llama 3.1's "
                  "divisors, 1 rising to 8",
                  x->arch);
        CHECK(same_file(a, b), "--arch %s: 1 and 2 threads write the same bytes", x->arch);
        gguf_close(f);
        unlink(a);
        unlink(b);
    }
}

/* ---- command line ---- */

static void expect_usage_error(const env *e, char *const argv[], const char *what,
                               const char *needle, int want_rc)
{
    char logpath[300], log[4096], out[300];
    path_in(e, logpath, sizeof logpath, "log.txt");
    path_in(e, out, sizeof out, "bad.gguf");
    int rc = spawn(argv, logpath, NULL);
    slurp(logpath, log, sizeof log);
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CHECK(rc == want_rc && strstr(log, needle) && !exists(out) && !exists(tmp),
          "%s: exit %d, says '%s', no file (rc %d: %.200s)", what, want_rc, needle, rc, log);
}

/* Runs with the small shape but one flag off: all refused before any file. */
static void test_bad_values(const env *e)
{
    static const struct {
        const char *dim, *heads, *kv, *mix, *threads, *what, *says;
    } cases[] = {
        {"300", "4", "2", "q4_k_m", "1", "dim 300 for q4_k_m", "--dim 300 is not a multiple of 256"},
        {"288", "4", "2", "q4_k", "1", "dim 288 for q4_k",
         "--dim 288 is not a multiple of 256 (the q4_K block size, mix q4_k)"},
        {"256", "3", "1", "f32", "1", "heads not dividing dim", "--heads 3 does not divide --dim 256"},
        {"256", "4", "3", "f32", "1", "kv-heads not dividing heads",
         "--kv-heads 3 does not divide --heads 4"},
        {"256", "4", "2", "q3_k_m", "1", "unknown mix",
         "--mix 'q3_k_m' is not one of q4_k_m, q4_k, q5_k_m, q5_k, q6_k, q8_0, f16, f32"},
        {"25x", "4", "2", "f32", "1", "non-numeric dim", "--dim: '25x' is not a whole number"},
        {"256", "4", "2", "f32", "0", "zero threads", "--threads: 0 is out of range"},
    };
    char out[300];
    path_in(e, out, sizeof out, "bad.gguf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {(char *)e->exe, "--vocab", (char *)e->vocab, "--dim", (char *)cases[i].dim,
                        "--layers", "2", "--heads", (char *)cases[i].heads, "--kv-heads",
                        (char *)cases[i].kv, "--ff", "512", "--ctx", "256", "--mix",
                        (char *)cases[i].mix, "--seed", "1", "--threads",
                        (char *)cases[i].threads, "-o", out, NULL};
        expect_usage_error(e, argv, cases[i].what, cases[i].says, 2);
    }
}

static void test_command_line(const env *e)
{
    char noexist[300], text[512];
    path_in(e, noexist, sizeof noexist, "no/such/dir/x.gguf");
    check_data_path(text, sizeof text, "vocab/ggml-vocab-llama-spm.gguf.inp");
    char *X = (char *)e->exe;
    expect_usage_error(e, (char *[]){X, NULL}, "no arguments", "missing required option", 2);
    expect_usage_error(e, (char *[]){X, "--dim", "256", "--mix", "q4_k", NULL}, "missing flags",
                       "-o --vocab --layers --heads --kv-heads --ff --ctx --seed", 2);
    expect_usage_error(e, (char *[]){X, "--bogus", NULL}, "unknown flag",
                       "unknown option '--bogus'", 2);
    char out_arch[300];
    path_in(e, out_arch, sizeof out_arch, "bad.gguf");
    expect_usage_error(e,
                       (char *[]){X,
                                  "--vocab",
                                  (char *)e->vocab,
                                  "--dim",
                                  "256",
                                  "--layers",
                                  "2",
                                  "--heads",
                                  "4",
                                  "--kv-heads",
                                  "2",
                                  "--ff",
                                  "512",
                                  "--ctx",
                                  "256",
                                  "--mix",
                                  "f32",
                                  "--seed",
                                  "1",
                                  "-o",
                                  out_arch,
                                  "--arch",
                                  "gemma",
                                  NULL},
                       "unknown architecture",
                       "--arch 'gemma' is not one of llama, llama3, qwen2, "
                       "phi3",
                       2);
    test_bad_values(e);
    char out[300], log[4096], logpath[300];
    path_in(e, out, sizeof out, "bad.gguf");
    int rc = mkmodel(e, text, &SMALL, "f32", "1", "1", out, log, sizeof log);
    CHECK(rc == 1 && strstr(log, "not a GGUF") && !exists(out),
          "a vocab that is not GGUF: exit 1, the reader's error, no file (rc %d: %.200s)", rc, log);
    rc = mkmodel(e, e->vocab, &SMALL, "f32", "1", "1", noexist, log, sizeof log);
    CHECK(rc == 1 && strstr(log, "cannot create"), "an unwritable output: exit 1 (rc %d: %.200s)",
          rc, log);
    path_in(e, logpath, sizeof logpath, "log.txt");
    rc = spawn((char *[]){X, "--help", NULL}, logpath, NULL);
    slurp(logpath, log, sizeof log);
    CHECK(rc == 0 && strstr(log, "usage: llmq-mkmodel --vocab VOCAB.gguf"), "--help prints usage");
}

/* A run stopped by SIGINT removes its partial file.  The 7B shape keeps it
 * busy for seconds, and its plan line states the 7B Q4_K_M weight bytes. */
static void test_interrupt(const env *e)
{
    char out[300], tmp[320], logpath[300], log[4096], vocab[512];
    path_in(e, out, sizeof out, "7b.gguf");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    path_in(e, logpath, sizeof logpath, "log.txt");
    check_data_path(vocab, sizeof vocab, "vocab/ggml-vocab-llama-spm.gguf");
    char *argv[] = {(char *)e->exe, "--vocab", vocab, "--dim", "4096", "--layers", "32",
                    "--heads", "32", "--kv-heads", "32", "--ff", "11008", "--ctx", "4096",
                    "--mix", "q4_k_m", "--seed", "1", "--threads", "2", "-o", out, NULL};
    pid_t pid;
    if (spawn(argv, logpath, &pid)) {
        CHECK(0, "start the 7B run");
        return;
    }
    /* Until the header is written, the signal would only be left pending. */
    for (int i = 0; i < 200 && !exists(tmp); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    bool started = exists(tmp);
    kill(pid, SIGINT);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    slurp(logpath, log, sizeof log);
    CHECK(started && WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(log, "interrupted") &&
              !exists(out) && !exists(tmp),
          "SIGINT mid-run: exit 1, 'interrupted', neither OUT nor OUT.tmp left");
    CHECK(strstr(log, "291 tensors, 4080263168 bytes of weights") != NULL,
          "the 7B Q4_K_M plan holds 291 tensors and 4,080,263,168 bytes of weights "
          "(llama-bench's model size)");
}

int main(void)
{
    env e;
    const char *build = getenv("LLMQ_BUILDDIR");
    if (!build) {
        fprintf(stderr, "LLMQ_BUILDDIR is not set: run through `make check`\n");
        return 77;
    }
    snprintf(e.exe, sizeof e.exe, "%s/tools/llmq-mkmodel", build);
    check_data_path(e.vocab, sizeof e.vocab, "models/stories260K.gguf");
    const char *tmpdir = getenv("TMPDIR");
    snprintf(e.dir, sizeof e.dir, "%s/llmq-test-mkmodel-XXXXXX", tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(e.dir)) {
        perror("mkdtemp");
        return 1;
    }
    llmq_err err = {0};
    gguf_file *vocab = NULL;
    if (gguf_open(&vocab, e.vocab, &err)) {
        CHECK(0, "open the vocab: %s", err.msg);
        return check_done();
    }
    test_mixes(&e, vocab);
    shape gqa = {"512", "4", "8", "2", "1536", "1024"}, mha = {"256", "2", "4", "4", "768", "512"};
    compare_synth(&e, "models/synth-q4km-gqa.gguf", &gqa, "q4_k_m");
    compare_synth(&e, "models/synth-q6k-mha.gguf", &mha, "q6_k");
    test_determinism(&e);
    test_archs(&e);
    test_command_line(&e);
    test_interrupt(&e);
    gguf_close(vocab);
    char logpath[300];
    path_in(&e, logpath, sizeof logpath, "log.txt");
    unlink(logpath);
    rmdir(e.dir);
    return check_done();
}
