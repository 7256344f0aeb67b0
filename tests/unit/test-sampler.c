/* test-sampler: the sampling chain against hand-computed sets and exact
 * softmax distributions, its random stream, its independence from the
 * other sequences that share a sampler, and the same tokens from a row's
 * best logits as from the whole row. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/topk.h"
#include "tests/unit/check.h"

enum { MAX_V = 1024, MAX_SIZES = 16 };

/* A sampler is sized for one vocabulary; the tests use rows of a few sizes
 * and keep one sampler per size, reused across checks like an engine's. */
typedef struct samplers {
    sampler *s[MAX_SIZES];
    int32_t n_vocab[MAX_SIZES];
    int count;
} samplers;

static sampler *samplers_get(samplers *ss, int32_t n_vocab)
{
    for (int i = 0; i < ss->count; i++)
        if (ss->n_vocab[i] == n_vocab)
            return ss->s[i];
    llmq_err err;
    if (ss->count == MAX_SIZES || sampler_create(&ss->s[ss->count], n_vocab, &err) != 0) {
        printf("FAIL - no sampler for a vocabulary of %d\n", (int)n_vocab);
        exit(1);
    }
    ss->n_vocab[ss->count] = n_vocab;
    return ss->s[ss->count++];
}

static void samplers_free(samplers *ss)
{
    for (int i = 0; i < ss->count; i++)
        sampler_free(ss->s[i]);
}

/* Samples one step from a private copy of `logits` (penalties write into it). */
static int32_t sample_copy(samplers *ss, const sampler_params *p, const float *logits,
                           int32_t n, const int32_t *history, int64_t n_history, uint64_t step)
{
    float buf[MAX_V];
    memcpy(buf, logits, (size_t)n * sizeof *buf);
    return sampler_sample(samplers_get(ss, n), p, buf, history, n_history, step);
}

/* Counts how often each token is drawn over steps 0..n_steps-1. */
static void histogram(samplers *s, const sampler_params *p, const float *logits, int32_t n,
                      int n_steps, long *hist)
{
    memset(hist, 0, (size_t)n * sizeof *hist);
    for (int i = 0; i < n_steps; i++) {
        int32_t t = sample_copy(s, p, logits, n, NULL, 0, (uint64_t)i);
        if (t >= 0 && t < n)
            hist[t]++;
    }
}

/* Pearson's statistic of `hist` against the probabilities want[]; bins with
 * want 0 must be empty (any hit there returns infinity). */
static double chi_square(const long *hist, const double *want, int32_t n, long total)
{
    double chi = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double e = want[i] * (double)total;
        if (e == 0.0) {
            if (hist[i])
                return INFINITY;
            continue;
        }
        chi += ((double)hist[i] - e) * ((double)hist[i] - e) / e;
    }
    return chi;
}

/* Exact softmax of logits/t over the tokens in keep[] (all if NULL). */
static void softmax_ref(const float *logits, int32_t n, double t, const bool *keep, double *out)
{
    double max = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if ((!keep || keep[i]) && logits[i] / t > max)
            max = logits[i] / t;
    for (int32_t i = 0; i < n; i++) {
        out[i] = (!keep || keep[i]) ? exp(logits[i] / t - max) : 0.0;
        sum += out[i];
    }
    for (int32_t i = 0; i < n; i++)
        out[i] /= sum;
}

/* Whether the tokens drawn over steps 0..n_steps-1 are exactly ids[]: each
 * kept token must come up at least once, the others never. */
static bool draws_exactly(samplers *s, const sampler_params *p, const float *logits, int32_t n,
                          int n_steps, const int32_t *ids, int32_t n_ids)
{
    long hist[MAX_V];
    bool want[MAX_V] = {false};
    histogram(s, p, logits, n, n_steps, hist);
    for (int32_t i = 0; i < n_ids; i++)
        want[ids[i]] = true;
    for (int32_t i = 0; i < n; i++)
        if ((hist[i] > 0) != want[i])
            return false;
    return true;
}

static sampler_params at_temperature(float t)
{
    sampler_params p = sampler_default_params();
    p.temperature = t;
    return p;
}

/* Deterministic pseudo-random logits in [-scale, scale) (a 64-bit LCG). */
static void fill_logits(float *l, int32_t n, uint64_t key, float scale)
{
    uint64_t x = key * UINT64_C(0x9e3779b97f4a7c15) + 1;
    for (int32_t i = 0; i < n; i++) {
        x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        l[i] = ((float)(x >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
    }
}

static void test_params(void)
{
    llmq_err err = {0};
    sampler_params d = sampler_default_params();
    CHECK(sampler_check_params(&d, &err) == 0 && d.temperature == 0.0f && d.top_k == 0 &&
              d.top_p == 1.0f && d.min_p == 0.0f && d.repeat_penalty == 1.0f &&
              d.repeat_last_n == 64 && d.seed == 0,
          "defaults are valid and off: greedy, no truncation, no penalties, last_n 64");

    struct {
        const char *field;
        sampler_params p;
    } bad[] = {
        {"temperature", d},
        {"temperature", d},
        {"temperature", d},
        {"top_p", d},
        {"top_p", d},
        {"top_p", d},
        {"min_p", d},
        {"min_p", d},
        {"repeat_penalty", d},
        {"repeat_penalty", d},
        {"presence_penalty", d},
        {"frequency_penalty", d},
        {"repeat_last_n", d},
    };
    bad[0].p.temperature = NAN;
    bad[1].p.temperature = -0.5f;
    bad[2].p.temperature = INFINITY;
    bad[3].p.top_p = 0.0f;
    bad[4].p.top_p = 1.5f;
    bad[5].p.top_p = NAN;
    bad[6].p.min_p = -0.1f;
    bad[7].p.min_p = 1.01f;
    bad[8].p.repeat_penalty = 0.0f;
    bad[9].p.repeat_penalty = NAN;
    bad[10].p.presence_penalty = INFINITY;
    bad[11].p.frequency_penalty = NAN;
    bad[12].p.repeat_last_n = -2;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        int rc = sampler_check_params(&bad[i].p, &err);
        CHECK(rc == -1 && strstr(err.msg, bad[i].field), "bad %s refused: \"%s\"",
              bad[i].field, err.msg);
    }

    sampler_params edge = d;
    edge.top_p = 1.0f;
    edge.min_p = 1.0f;
    edge.repeat_last_n = -1;
    edge.top_k = -5;
    edge.presence_penalty = -1.0f;
    CHECK(sampler_check_params(&edge, &err) == 0,
          "range ends accepted: top_p 1, min_p 1, repeat_last_n -1, top_k < 0, negative presence");

    sampler *s = NULL;
    CHECK(sampler_create(&s, 0, &err) == -1 && s == NULL && strstr(err.msg, "vocabulary"),
          "an empty vocabulary is refused: \"%s\"", err.msg);
}

static void test_greedy(samplers *s)
{
    sampler_params p = sampler_default_params();
    const float ties[8] = {1, 3, 3, 2, 0, 3, -1, 0};
    CHECK(sample_copy(s, &p, ties, 8, NULL, 0, 0) == 1,
          "greedy: tie at the max goes to the lower id");
    const float first[8] = {5, 5, 1, 1, 1, 1, 1, 5};
    CHECK(sample_copy(s, &p, first, 8, NULL, 0, 0) == 0, "greedy: tie including id 0 picks 0");
    const float last[8] = {-1, -1, -1, -1, -1, -1, -1, 0};
    CHECK(sample_copy(s, &p, last, 8, NULL, 0, 0) == 7, "greedy: max at the last id");
    const float odd[13] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK(sample_copy(s, &p, odd, 13, NULL, 0, 0) == 12,
          "greedy: max at the last id of a row that is not a multiple of 8 long");

    /* Greedy still runs the penalties first: 3 / 1.1 falls below 2.9. */
    const float pen[8] = {3.0f, 2.9f, 0, 0, 0, 0, 0, 0};
    const int32_t hist[1] = {0};
    p.repeat_penalty = 1.1f;
    CHECK(sample_copy(s, &p, pen, 8, hist, 1, 0) == 1, "greedy picks the argmax after penalties");

    /* top_k = 1 at any temperature is greedy, ties included. */
    sampler_params k1 = at_temperature(1.5f);
    k1.top_k = 1;
    int agree = 0, n = 200;
    for (int i = 0; i < n; i++) {
        float l[MAX_V];
        fill_logits(l, 1000, (uint64_t)i, 4.0f);
        if (i % 4 == 0)
            l[900] = l[17] = 10.0f; /* a tie at the top */
        int32_t want = 0;
        for (int32_t j = 1; j < 1000; j++)
            if (l[j] > l[want])
                want = j;
        agree += sample_copy(s, &k1, l, 1000, NULL, 0, (uint64_t)i) == want;
    }
    CHECK(agree == n, "top_k 1 equals greedy on %d/%d random rows (with ties)", agree, n);
}

static void test_temperature(samplers *s)
{
    const float l[8] = {0.3f, -1.2f, 1.5f, 0.0f, 2.1f, -0.4f, 0.9f, -2.5f};
    const float temps[2] = {0.7f, 2.0f};
    const int n_steps = 40000;
    for (int k = 0; k < 2; k++) {
        sampler_params p = at_temperature(temps[k]);
        p.seed = 1234;
        long hist[8];
        double want[8];
        histogram(s, &p, l, 8, n_steps, hist);
        softmax_ref(l, 8, temps[k], NULL, want);
        double chi = chi_square(hist, want, 8, n_steps);
        /* 24.32: the 0.999 quantile of chi-square with 7 degrees of freedom. */
        CHECK(chi < 24.32, "temperature %.1f: draws follow softmax(l/T), chi2 = %.2f (df 7)",
              (double)temps[k], chi);
    }

    /* top-k keeps the 3 best and renormalizes over them. */
    sampler_params p = at_temperature(1.0f);
    p.top_k = 3;
    p.seed = 99;
    long hist[8];
    double want[8];
    bool keep[8] = {false, false, true, false, true, false, true, false};
    histogram(s, &p, l, 8, n_steps, hist);
    softmax_ref(l, 8, 1.0, keep, want);
    double chi = chi_square(hist, want, 8, n_steps);
    CHECK(chi < 13.82, "top_k 3: only ids {2,4,6}, renormalized softmax, chi2 = %.2f (df 2)", chi);

    /* Masked tokens never come out. */
    float masked[8];
    memcpy(masked, l, sizeof masked);
    masked[4] = masked[2] = -INFINITY;
    p = at_temperature(1.0f);
    const int32_t unmasked[6] = {0, 1, 3, 5, 6, 7};
    CHECK(draws_exactly(s, &p, masked, 8, 4000, unmasked, 6), "-inf logits are never drawn");
}

/* Probabilities {0.1, 0.5, 0.15, 0.25} at ids 0..3, as logits. */
static void four_tokens(float *l)
{
    const double pr[4] = {0.1, 0.5, 0.15, 0.25};
    for (int i = 0; i < 4; i++)
        l[i] = (float)log(pr[i]);
}

static void test_top_p(samplers *s)
{
    float l[4];
    four_tokens(l);
    struct {
        float top_p;
        float temperature;
        int32_t ids[4];
        int32_t n;
        const char *why;
    } cases[] = {
        {0.3f, 1.0f, {1}, 1, "0.5 alone reaches 0.3"},
        {0.7f, 1.0f, {1, 3}, 2, "0.5+0.25 reaches 0.7"},
        {0.8f, 1.0f, {1, 3, 2}, 3, "0.5+0.25+0.15 reaches 0.8"},
        {0.95f, 1.0f, {0, 1, 2, 3}, 4, "0.95 needs all four"},
        {1.0f, 1.0f, {0, 1, 2, 3}, 4, "1 is off"},
        {0.7f, 10.0f, {1, 3}, 2, "temperature 10 comes after top-p"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sampler_params p = at_temperature(cases[i].temperature);
        p.top_p = cases[i].top_p;
        p.seed = 7;
        CHECK(draws_exactly(s, &p, l, 4, 3000, cases[i].ids, cases[i].n),
              "top_p %.2f keeps %d tokens (%s)", (double)cases[i].top_p, (int)cases[i].n,
              cases[i].why);
    }

    /* Top-k first, then top-p over the renormalized top k. */
    const float o[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    sampler_params p = at_temperature(1.0f);
    p.top_p = 0.5f;
    const int32_t two[2] = {0, 1};
    CHECK(draws_exactly(s, &p, o, 4, 3000, two, 2), "top_p 0.5 alone keeps {0.4, 0.3}");
    p.top_k = 2;
    const int32_t one[1] = {0};
    CHECK(draws_exactly(s, &p, o, 4, 3000, one, 1),
          "top_k 2 then top_p 0.5 keeps {0.4} (4/7 >= 0.5)");

    /* Exactly reaching p is enough (llama.cpp's cum >= p): four equal
     * tokens, the first two hold exactly half the mass. */
    const float flat[4] = {0, 0, 0, 0};
    p = at_temperature(1.0f);
    p.top_p = 0.5f;
    CHECK(draws_exactly(s, &p, flat, 4, 3000, two, 2),
          "top_p 0.5 over 4 equal tokens keeps exactly ids {0, 1}");

    /* A nucleus cut inside a crowd of ties: 200 equal tokens at ids 0, 5,
     * 10, ...; 0.503 of their mass needs 101 of them, the lowest ids. */
    float big[1000];
    for (int32_t i = 0; i < 1000; i++)
        big[i] = i % 5 == 0 ? 0.0f : -30.0f;
    p = at_temperature(1.0f);
    p.top_p = 0.503f;
    int32_t ids[101];
    for (int32_t i = 0; i < 101; i++)
        ids[i] = 5 * i;
    CHECK(draws_exactly(s, &p, big, 1000, 30000, ids, 101),
          "top_p over a flat 200-token head keeps the 101 lowest ids");
}

static void test_min_p(samplers *s)
{
    /* Ids 0..3 as in four_tokens, plus a negligible id 4 so that top_k 4
     * truncates and min-p runs on the sorted candidates too. */
    float l[5];
    four_tokens(l);
    l[4] = -20.0f;
    struct {
        float min_p;
        int32_t ids[4];
        int32_t n;
    } cases[] = {
        {0.25f, {1, 2, 3}, 3}, /* p >= 0.125 */
        {0.4f, {1, 3}, 2},     /* p >= 0.2 */
        {0.6f, {1}, 1},        /* p >= 0.3 */
        {1.0f, {1}, 1},        /* only the max */
        {0.19f, {0, 1, 2, 3}, 4}, /* p >= 0.095 */
    };
    for (int sorted = 0; sorted < 2; sorted++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            sampler_params p = at_temperature(1.0f);
            p.min_p = cases[i].min_p;
            p.top_k = sorted ? 4 : 0;
            CHECK(draws_exactly(s, &p, l, 5, 3000, cases[i].ids, cases[i].n),
                  "min_p %.2f keeps %d tokens (%s)", (double)cases[i].min_p, (int)cases[i].n,
                  sorted ? "after top_k" : "whole vocabulary");
        }
    }

    /* The bound is inclusive: p exactly min_p * p_max stays. */
    const float half[5] = {0.0f, logf(0.5f), -1.0f, -5.0f, -5.0f};
    const int32_t both[2] = {0, 1};
    for (int32_t top_k = 0; top_k <= 3; top_k += 3) {
        sampler_params h = at_temperature(1.0f);
        h.min_p = 0.5f;
        h.top_k = top_k;
        CHECK(draws_exactly(s, &h, half, 5, 3000, both, 2),
              "min_p 0.5 keeps a token at exactly half the max (top_k %d)", (int)top_k);
    }

    /* The chain's order: top-p before min-p. min_p 0.25 alone keeps 3, top_p
     * 0.7 first keeps {0.5, 0.25} which min-p leaves alone. */
    sampler_params p = at_temperature(1.0f);
    p.min_p = 0.25f;
    p.top_p = 0.7f;
    const int32_t two[2] = {1, 3};
    CHECK(draws_exactly(s, &p, l, 5, 3000, two, 2), "top_p 0.7 then min_p 0.25 keeps {0.5, 0.25}");

    /* Min-p after top-p over the whole vocabulary, whose survivors come in
     * id order: the cut is against the row's max (0.5 at id 1), not against
     * the lowest surviving id (0.3 at id 0): 0.2 < 0.5 * 0.5 goes. */
    const float lead_later[3] = {logf(0.3f), logf(0.5f), logf(0.2f)};
    sampler_params q = at_temperature(1.0f);
    q.top_p = 0.99f;
    q.min_p = 0.5f;
    const int32_t first_two[2] = {0, 1};
    CHECK(draws_exactly(s, &q, lead_later, 3, 3000, first_two, 2),
          "top_p 0.99 then min_p 0.5 cuts against the max, not the lowest id kept");
}

static void test_penalties(samplers *ss)
{
    sampler *s = samplers_get(ss, 8);
    const float base[8] = {2.0f, -1.0f, 0.0f, 3.0f, 4.0f, -2.0f, 1.0f, 0.0f};
    /* Out-of-vocabulary entries (9999, -5) are skipped. */
    const int32_t hist[10] = {7, 0, 3, 0, 1, 0, 9999, -5, 2, 3};
    sampler_params p = sampler_default_params();
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.repeat_last_n = 8;

    /* Window = last 8: counts 0:2, 1:1, 2:1, 3:2; id 7 and the first 0 fall out.
     * 0: 2/2 - (2*.5+.25); 1: -1*2 - .75; 2: 0*2 - .75; 3: 3/2 - 1.25. */
    const float want8[8] = {-0.25f, -2.75f, -0.75f, 0.25f, 4.0f, -2.0f, 1.0f, 0.0f};
    float l[8];
    for (int round = 0; round < 2; round++) {
        memcpy(l, base, sizeof l);
        int32_t t = sampler_sample(s, &p, l, hist, 10, 0);
        CHECK(memcmp(l, want8, sizeof l) == 0 && t == 4,
              "penalties over the last 8 give exactly the expected logits (call %d)", round + 1);
    }

    /* -1: the whole history; id 0 counted 3 times, id 7 once. */
    p.repeat_last_n = -1;
    const float wall[8] = {-0.75f, -2.75f, -0.75f, 0.25f, 4.0f, -2.0f, 1.0f, -0.75f};
    memcpy(l, base, sizeof l);
    sampler_sample(s, &p, l, hist, 10, 0);
    CHECK(memcmp(l, wall, sizeof l) == 0, "repeat_last_n -1 covers the whole history");
    p.repeat_last_n = 1000;
    memcpy(l, base, sizeof l);
    sampler_sample(s, &p, l, hist, 10, 0);
    CHECK(memcmp(l, wall, sizeof l) == 0, "a window longer than the history covers all of it");

    p.repeat_last_n = 0;
    memcpy(l, base, sizeof l);
    sampler_sample(s, &p, l, hist, 10, 0);
    CHECK(memcmp(l, base, sizeof l) == 0, "repeat_last_n 0 leaves the logits alone");

    /* Repetition alone: positive logits divided, the rest multiplied. */
    p = sampler_default_params();
    p.repeat_penalty = 1.25f;
    const float wrep[8] = {2.0f / 1.25f, -1.25f, 0.0f, 3.0f / 1.25f, 4.0f, -2.0f, 1.0f, 0.0f};
    memcpy(l, base, sizeof l);
    sampler_sample(s, &p, l, hist, 10, 0);
    CHECK(memcmp(l, wrep, sizeof l) == 0,
          "repeat_penalty 1.25 alone: 2 -> 2/1.25, -1 -> -1.25, 0 stays 0");
}

/* The window as (token, count) pairs, the device's view of the penalties:
 * the counts sampler_sample applies, first appearance first, nothing when
 * the penalties are off, -1 past the cap, and the sampler's counts left
 * clear (the next row sees none of them). */
static void test_penalty_window(samplers *ss)
{
    sampler *s = samplers_get(ss, 8);
    const int32_t hist[10] = {7, 0, 3, 0, 1, 0, 9999, -5, 2, 3};
    sampler_params p = sampler_default_params();
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 8;
    int32_t pairs[16];
    const int32_t want[8] = {3, 2, 0, 2, 1, 1, 2, 1};
    int32_t n = sampler_penalty_window(s, &p, hist, 10, pairs, 8);
    CHECK(n == 4 && memcmp(pairs, want, sizeof want) == 0,
          "the last 8 tokens as pairs: 3x2, 0x2, 1x1, 2x1 (got %d)", (int)n);
    CHECK(sampler_penalty_window(s, &p, hist, 10, pairs, 3) == -1,
          "four distinct tokens refused under a cap of 3");
    n = sampler_penalty_window(s, &p, hist, 10, pairs, 8);
    CHECK(n == 4 && memcmp(pairs, want, sizeof want) == 0,
          "the same pairs after a refusal (counts were cleared)");
    p.repeat_last_n = -1;
    n = sampler_penalty_window(s, &p, hist, 10, pairs, 8);
    CHECK(n == 5 && pairs[0] == 7 && pairs[1] == 1 && pairs[2] == 0 && pairs[3] == 3,
          "repeat_last_n -1: the whole history, 7 first, 0 three times");
    p.repeat_penalty = 1.0f;
    CHECK(sampler_penalty_window(s, &p, hist, 10, pairs, 8) == 0, "penalties off: no pairs");
}

static void test_uniform(void)
{
    /* Seed 0 is splitmix64 from state 0, whose published first outputs are
     * 0xe220a8397b1dcdaf and 0x6e789e6aa1b965f4. */
    double u0 = (double)(UINT64_C(0xe220a8397b1dcdaf) >> 11) * 0x1.0p-53;
    double u1 = (double)(UINT64_C(0x6e789e6aa1b965f4) >> 11) * 0x1.0p-53;
    CHECK(sampler_uniform(0, 0) == u0 && sampler_uniform(0, 1) == u1,
          "seed 0 reproduces splitmix64's reference stream");

    long bins[16] = {0};
    int n = 160000, odd = 0, in_range = 1, whole = 1;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double u = sampler_uniform(UINT64_C(0xfeedface), (uint64_t)i);
        in_range &= u >= 0.0 && u < 1.0;
        double scaled = u * 0x1.0p53;
        whole &= scaled == floor(scaled);
        odd += fmod(scaled, 2.0) == 1.0;
        sum += u;
        bins[(int)(u * 16.0)]++;
    }
    double want[16], chi;
    for (int i = 0; i < 16; i++)
        want[i] = 1.0 / 16.0;
    chi = chi_square(bins, want, 16, n);
    CHECK(in_range && whole, "uniform: in [0,1), multiples of 2^-53");
    CHECK(odd > n / 2 - 1000 && odd < n / 2 + 1000,
          "uniform: the 53rd bit is random (%d of %d odd)", odd, n);
    /* 37.70: the 0.999 quantile of chi-square with 15 degrees of freedom. */
    CHECK(chi < 37.70 && fabs(sum / n - 0.5) < 0.005, "uniform: flat, chi2 = %.2f, mean %.4f",
          chi, sum / n);
    CHECK(sampler_uniform(1, 0) != sampler_uniform(0, 0) &&
              sampler_uniform(1, 0) != sampler_uniform(0, 1),
          "nearby seeds give unrelated streams");
}

static void test_determinism(samplers *s)
{
    float l[64];
    fill_logits(l, 64, 5, 1.0f);
    sampler_params p = at_temperature(1.0f);
    p.seed = 42;
    int32_t a[200], b[200], shifted[200], other[200];
    for (int i = 0; i < 200; i++) {
        a[i] = sample_copy(s, &p, l, 64, NULL, 0, (uint64_t)i);
        b[i] = sample_copy(s, &p, l, 64, NULL, 0, (uint64_t)i);
        shifted[i] = sample_copy(s, &p, l, 64, NULL, 0, (uint64_t)i + 1000);
    }
    p.seed = 43;
    for (int i = 0; i < 200; i++)
        other[i] = sample_copy(s, &p, l, 64, NULL, 0, (uint64_t)i);
    int same_shift = 0, same_seed = 0;
    for (int i = 0; i < 200; i++) {
        same_shift += a[i] == shifted[i];
        same_seed += a[i] == other[i];
    }
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed and step give the same token");
    /* Over 64 near-flat tokens, chance agreement is a few percent. */
    CHECK(same_shift < 40, "other steps give another stream (%d/200 agree)", same_shift);
    CHECK(same_seed < 40, "another seed gives another stream (%d/200 agree)", same_seed);
}

/* The draw walks the survivors in id order, whatever truncated them: top-k
 * draws exactly what masking the other tokens to -inf draws, step by step. */
static void test_draw_order(samplers *ss)
{
    float l[64], masked[64];
    fill_logits(l, 64, 11, 2.0f);
    sampler_params k = at_temperature(0.8f);
    k.top_k = 16;
    k.seed = 5;
    /* The 16 best, found by a plain count of who beats whom. */
    for (int32_t i = 0; i < 64; i++) {
        int beaten_by = 0;
        for (int32_t j = 0; j < 64; j++)
            beaten_by += l[j] > l[i];
        masked[i] = beaten_by < 16 ? l[i] : -INFINITY;
    }
    sampler_params all = k;
    all.top_k = 0;
    int same = 0;
    for (int i = 0; i < 500; i++)
        same += sample_copy(ss, &k, l, 64, NULL, 0, (uint64_t)i) ==
                sample_copy(ss, &all, masked, 64, NULL, 0, (uint64_t)i);
    CHECK(same == 500, "top_k 16 draws the same token as masking the rest (%d/500 steps)", same);
}

/* The kept set of the chain, computed the slow, obvious way: sort
 * everything, then cut with double-precision probabilities. */
typedef struct ranked {
    float logit;
    int32_t id;
} ranked;

static int by_rank(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void reference_mask(const float *l, int32_t n, const sampler_params *p, float *masked)
{
    ranked r[MAX_V];
    for (int32_t i = 0; i < n; i++)
        r[i] = (ranked){l[i], i};
    qsort(r, (size_t)n, sizeof *r, by_rank);
    int32_t keep = n;
    if (p->top_k > 0 && p->top_k < keep)
        keep = p->top_k;
    if (p->top_p < 1.0f) {
        double sum = 0.0, cum = 0.0;
        for (int32_t i = 0; i < keep; i++)
            sum += exp((double)r[i].logit - r[0].logit);
        for (int32_t i = 0; i < keep; i++) {
            cum += exp((double)r[i].logit - r[0].logit);
            if (cum >= p->top_p * sum) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f)
        for (int32_t i = 1; i < keep; i++)
            if (exp((double)r[i].logit - r[0].logit) < p->min_p) {
                keep = i;
                break;
            }
    for (int32_t i = 0; i < n; i++)
        masked[r[i].id] = i < keep ? r[i].logit : -INFINITY;
}

/* Truncation over random rows agrees with the reference: the sampler given
 * the row draws what it draws from the row with the rest masked to -inf. */
static void test_against_reference(samplers *ss)
{
    struct {
        int32_t top_k;
        float top_p, min_p;
    } chains[] = {
        {0, 0.9f, 0.0f}, {0, 0.5f, 0.0f},   {0, 0.99f, 0.0f},  {50, 0.8f, 0.0f},
        {0, 1.0f, 0.1f}, {0, 0.95f, 0.02f}, {200, 1.0f, 0.0f}, {30, 0.9f, 0.05f},
    };
    const float spreads[3] = {0.5f, 3.0f, 12.0f};
    int rows = 0, agree = 0;
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        sampler_params p = at_temperature(0.9f);
        p.top_k = chains[c].top_k;
        p.top_p = chains[c].top_p;
        p.min_p = chains[c].min_p;
        sampler_params plain = at_temperature(p.temperature);
        for (int r = 0; r < 9; r++) {
            float l[1000], masked[1000];
            fill_logits(l, 1000, (uint64_t)(100 + r), spreads[r % 3]);
            reference_mask(l, 1000, &p, masked);
            bool same = true;
            for (int step = 0; step < 40; step++) {
                p.seed = plain.seed = (uint64_t)(r * 40 + step);
                same = same && sample_copy(ss, &p, l, 1000, NULL, 0, (uint64_t)step) ==
                                   sample_copy(ss, &plain, masked, 1000, NULL, 0, (uint64_t)step);
            }
            rows++;
            agree += same;
        }
    }
    CHECK(agree == rows, "top-k/top-p/min-p chains match a sort-everything reference (%d/%d rows)",
          agree, rows);
}

/* From the row's best logits (sampler_sample_top, the path a GPU's top_k
 * candidates take) the same token as from the whole row, over top-k with
 * and without top-p, min-p, lowering penalties whose window holds tokens
 * inside and outside the candidates, ties at the cut, and rows given with
 * exactly sampler_top_needed candidates in shuffled order. */
static void test_from_top(samplers *ss)
{
    enum { V = 1000 };
    struct {
        int32_t top_k;
        float top_p, min_p, repeat, presence, frequency;
        int32_t last_n;
    } cases[] = {
        {40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64},    {1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64},
        {40, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 64},    {40, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 64},
        {40, 0.95f, 0.02f, 1.3f, 0.0f, 0.0f, 64},  {10, 1.0f, 0.0f, 1.1f, 0.5f, 0.2f, 32},
        {100, 0.8f, 0.0f, 1.0f, 1.0f, 0.0f, -1},   {5, 1.0f, 0.0f, 2.0f, 0.0f, 1.0f, 16},
    };
    const int32_t max_k = 256;
    int rows = 0, agree = 0, exact_n = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampler_params p = at_temperature(0.8f);
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.repeat_penalty = cases[c].repeat;
        p.presence_penalty = cases[c].presence;
        p.frequency_penalty = cases[c].frequency;
        p.repeat_last_n = cases[c].last_n;
        for (int r = 0; r < 12; r++) {
            float l[V];
            fill_logits(l, V, (uint64_t)(700 + 13 * c + r), r % 3 == 0 ? 1.0f : 6.0f);
            if (r % 4 == 1) /* ties across the cut: the lower id must win */
                for (int32_t i = 0; i < V; i += 7)
                    l[i] = l[3];
            /* A history of the row's 48 best tokens (on every other row
             * every other one random): penalties push them out of the top
             * k, so the candidates past top_k decide the token. */
            topk_entry best48[48];
            topk_select(best48, l, NULL, V, 48);
            int32_t history[48];
            for (int i = 0; i < 48; i++)
                history[i] = r % 2 && i % 2 ? (int32_t)((uint64_t)(i * 7919 + r * 104729) % V)
                                            : best48[(i * 5) % 48].id;
            const int32_t need = sampler_top_needed(&p, 48, V, max_k);
            if (need <= 0)
                continue;
            topk_entry top[V];
            topk_select(top, l, NULL, V, need);
            int32_t ids[V];
            float vals[V];
            for (int32_t i = 0; i < need; i++) { /* handed over reversed and rotated */
                const int32_t j = (need - 1 - i + r) % need;
                ids[i] = top[j].id;
                vals[i] = top[j].value;
            }
            bool same = true;
            for (int step = 0; step < 30; step++) {
                p.seed = (uint64_t)(c * 1000 + r * 30 + step);
                const int32_t want = sample_copy(ss, &p, l, V, history, 48, (uint64_t)step);
                const int32_t got = sampler_sample_top(samplers_get(ss, V), &p, ids, vals, need,
                                                       history, 48, (uint64_t)step);
                same = same && got == want;
            }
            rows++;
            agree += same;
            const bool penalties = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f ||
                                   p.frequency_penalty != 0.0f;
            const int32_t window = p.repeat_last_n < 0 || p.repeat_last_n > 48 ? 48
                                                                               : p.repeat_last_n;
            exact_n += need == p.top_k + (penalties ? window : 0);
        }
    }
    CHECK(rows == 96 && agree == rows, "from the row's best logits, the whole row's token (%d/%d "
          "rows x 30 steps)", agree, rows);
    CHECK(exact_n == rows, "sampler_top_needed asks top_k + the penalty window (%d/%d)", exact_n,
          rows);
    sampler_params p = at_temperature(0.8f);
    p.top_k = 40;
    CHECK(sampler_top_needed(&p, 10, V, max_k) == 40, "no penalties: top_k candidates");
    p.repeat_penalty = 0.9f;
    CHECK(sampler_top_needed(&p, 10, V, max_k) == 0, "a repeat penalty < 1 needs the whole row");
    p.repeat_penalty = 1.1f;
    p.presence_penalty = -0.5f;
    CHECK(sampler_top_needed(&p, 10, V, max_k) == 0, "a negative presence penalty needs the whole row");
    p.presence_penalty = 0.0f;
    p.repeat_last_n = -1;
    CHECK(sampler_top_needed(&p, 1000, V, max_k) == 0,
          "a window past max_k candidates needs the whole row");
    p = at_temperature(0.0f);
    p.top_k = 40;
    CHECK(sampler_top_needed(&p, 10, V, max_k) == 0, "greedy is not a candidate row");
    p = at_temperature(0.8f);
    CHECK(sampler_top_needed(&p, 10, V, max_k) == 0, "no top_k: the whole row");
}

/* One sequence of the independence test: its parameters, history, and the
 * logits it would get at each step (a function of its own key and step). */
typedef struct seq {
    sampler_params p;
    uint64_t key;
    int32_t history[256];
    int64_t n;
    int32_t out[100];
} seq;

static void seq_step(sampler *s, seq *q, int32_t step)
{
    float l[500];
    fill_logits(l, 500, q->key * 1000 + (uint64_t)step, 3.0f);
    int32_t t = sampler_sample(s, &q->p, l, q->history, q->n, (uint64_t)step);
    q->out[step] = t;
    q->history[q->n++] = t;
}

static void seq_init(seq *q, int which)
{
    memset(q, 0, sizeof *q);
    q->p = sampler_default_params();
    q->key = (uint64_t)which + 1;
    for (int i = 0; i < 20; i++)
        q->history[q->n++] = (which * 37 + i * 11) % 500; /* the prompt */
    if (which == 0) {
        q->p.temperature = 0.9f;
        q->p.top_k = 20;
        q->p.top_p = 0.9f;
        q->p.repeat_penalty = 1.3f;
        q->p.seed = 1;
    } else {
        q->p.temperature = 1.3f;
        q->p.min_p = 0.05f;
        q->p.frequency_penalty = 0.4f;
        q->p.presence_penalty = 0.2f;
        q->p.repeat_last_n = -1;
        q->p.seed = 2;
    }
}

static void test_independence(samplers *ss)
{
    seq alone[2], mixed[2];
    for (int w = 0; w < 2; w++) {
        sampler *own = NULL;
        llmq_err err;
        if (sampler_create(&own, 500, &err) != 0) {
            CHECK(0, "sampler_create: %s", err.msg);
            return;
        }
        seq_init(&alone[w], w);
        for (int32_t i = 0; i < 100; i++)
            seq_step(own, &alone[w], i);
        sampler_free(own);
    }
    /* One shared sampler; sequence 1 joins when sequence 0 is at step 30,
     * as in an engine's continuous batch. */
    sampler *s = samplers_get(ss, 500);
    seq_init(&mixed[0], 0);
    seq_init(&mixed[1], 1);
    for (int32_t i = 0; i < 130; i++) {
        if (i < 100)
            seq_step(s, &mixed[0], i);
        if (i >= 30)
            seq_step(s, &mixed[1], i - 30);
    }
    int distinct = 0;
    for (int i = 0; i < 100; i++)
        distinct += alone[0].out[i] != alone[1].out[i];
    CHECK(memcmp(alone[0].out, mixed[0].out, sizeof alone[0].out) == 0 &&
              memcmp(alone[1].out, mixed[1].out, sizeof alone[1].out) == 0 && distinct > 50,
          "two sequences interleaved on one sampler get the tokens they get alone");
}

static void test_robustness(samplers *ss)
{
    sampler *s = samplers_get(ss, 8);
    float l[8];
    sampler_params p = at_temperature(1.0f);
    p.top_p = 0.9f;
    p.min_p = 0.1f;
    bool in_range = true;
    for (int i = 0; i < 8; i++)
        l[i] = -INFINITY;
    int32_t t = sampler_sample(s, &p, l, NULL, 0, 0);
    in_range = in_range && t >= 0 && t < 8;
    for (int i = 0; i < 8; i++)
        l[i] = NAN;
    t = sampler_sample(s, &p, l, NULL, 0, 0);
    in_range = in_range && t >= 0 && t < 8;
    CHECK(in_range, "all -inf or all NaN logits still give a token in range");

    const float mixed[8] = {1.0f, NAN, 2.0f, -INFINITY, 0.5f, NAN, 1.5f, 0.0f};
    bool fine = true;
    for (int step = 0; step < 50; step++) {
        t = sample_copy(ss, &p, mixed, 8, NULL, 0, (uint64_t)step);
        fine = fine && t >= 0 && t < 8;
    }
    const float inf[8] = {1.0f, INFINITY, 2.0f, INFINITY, 0, 0, 0, 0};
    CHECK(fine && sample_copy(ss, &p, inf, 8, NULL, 0, 0) == 1,
          "stray NaN logits keep tokens in range; a +inf logit wins outright");
}

int main(void)
{
    samplers ss = {{NULL}, {0}, 0};
    test_params();
    test_uniform();
    test_greedy(&ss);
    test_temperature(&ss);
    test_top_p(&ss);
    test_min_p(&ss);
    test_penalties(&ss);
    test_penalty_window(&ss);
    test_determinism(&ss);
    test_draw_order(&ss);
    test_against_reference(&ss);
    test_from_top(&ss);
    test_independence(&ss);
    test_robustness(&ss);
    samplers_free(&ss);
    return check_done();
}
