#include "engine/sampler.h"

#include "common/topk.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* A surviving token with its (penalized, unscaled) logit as value. */
typedef topk_entry cand;

/* Which tokens survive truncation, and in what order s->cand holds them. */
typedef enum kept_order {
    KEPT_ALL,      /* no truncation ran: the whole vocabulary, s->cand unused */
    KEPT_BY_LOGIT, /* s->cand[0..n) best first (logit desc, id asc) */
    KEPT_BY_ID,    /* s->cand[0..n) in increasing id */
} kept_order;

typedef struct kept {
    int32_t n;
    kept_order order;
} kept;

struct sampler {
    int32_t n_vocab;
    cand *cand;     /* n_vocab: truncation workspace */
    float *weight;  /* n_vocab: unnormalized probabilities of the draw */
    int32_t *count; /* n_vocab, all zero between calls: penalty counts */
    int32_t *seen;  /* n_vocab: distinct tokens of the penalty window */
};

/* Top-p without top-k buckets the vocabulary by distance to the max logit,
 * TOP_P_BUCKETS buckets over TOP_P_SPAN nats (the last takes everything
 * further), so that only the buckets holding the nucleus get sorted. */
#define TOP_P_BUCKETS 512
#define TOP_P_SPAN 32.0f

sampler_params sampler_default_params(void)
{
    return (sampler_params){
        .temperature = 0.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repeat_penalty = 1.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .repeat_last_n = 64,
        .seed = 0,
    };
}

int sampler_check_params(const sampler_params *p, llmq_err *err)
{
    const llmq_err_code bad = LLMQ_ERR_INVALID;
    /* Written as "accept if" so that NaN, which fails every comparison, is
     * refused by each test. */
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return llmq_errc(err, bad, "sampler: temperature must be finite and >= 0, got %g",
                         (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return llmq_errc(err, bad, "sampler: top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return llmq_errc(err, bad, "sampler: min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0.0f))
        return llmq_errc(err, bad, "sampler: repeat_penalty must be finite and > 0, got %g",
                         (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty))
        return llmq_errc(err, bad, "sampler: presence_penalty must be finite, got %g",
                         (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return llmq_errc(err, bad, "sampler: frequency_penalty must be finite, got %g",
                         (double)p->frequency_penalty);
    if (p->repeat_last_n < -1)
        return llmq_errc(err, bad, "sampler: repeat_last_n must be >= -1, got %d",
                         (int)p->repeat_last_n);
    return 0;
}

int sampler_create(sampler **out, int32_t n_vocab, llmq_err *err)
{
    *out = NULL;
    if (n_vocab <= 0)
        return llmq_errf(err, "sampler: vocabulary size must be > 0, got %d", (int)n_vocab);
    sampler *s = calloc(1, sizeof *s);
    if (!s)
        return llmq_errf(err, "sampler: out of memory");
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->weight = malloc((size_t)n_vocab * sizeof *s->weight);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->seen = malloc((size_t)n_vocab * sizeof *s->seen);
    if (!s->cand || !s->weight || !s->count || !s->seen) {
        sampler_free(s);
        return llmq_errf(err, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
    }
    *out = s;
    return 0;
}

void sampler_free(sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->weight);
    free(s->count);
    free(s->seen);
    free(s);
}

/* ---- random stream ------------------------------------------------------ */

/* splitmix64's output function (Steele, Lea, Flood 2014). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The value splitmix64 seeded with mix64(seed) outputs as its (step+1)-th
 * number, computed directly from the counter: hashing the seed first keeps
 * nearby seeds (0, 1, 2, ...) from being shifted copies of one stream. */
double sampler_uniform(uint64_t seed, uint64_t step)
{
    const uint64_t golden = UINT64_C(0x9e3779b97f4a7c15);
    uint64_t z = mix64(mix64(seed) + golden * (step + 1));
    return (double)(z >> 11) * 0x1.0p-53;
}

/* ---- penalties ---------------------------------------------------------- */

static bool penalties_off(const sampler_params *p)
{
    return p->repeat_last_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
                                     p->presence_penalty == 0.0f);
}

bool sampler_is_greedy(const sampler_params *p)
{
    return !(p->temperature > 0.0f) && penalties_off(p);
}

/* How many of the last tokens the penalties look at. */
static int64_t window_len(const sampler_params *p, int64_t n_history)
{
    return p->repeat_last_n < 0 || p->repeat_last_n > n_history ? n_history : p->repeat_last_n;
}

/* The penalty window's tokens counted into s->count (zero between calls),
 * the distinct ones listed in s->seen; returns how many.  Tokens outside
 * the vocabulary are not counted: there is nothing to penalize. */
static int32_t count_window(sampler *s, const sampler_params *p, const int32_t *history,
                            int64_t n_history)
{
    if (penalties_off(p) || n_history <= 0)
        return 0;
    int64_t n = window_len(p, n_history);
    if (n > INT32_MAX) /* keeps every count within int32_t */
        n = INT32_MAX;
    int32_t n_seen = 0;
    for (int64_t i = n_history - n; i < n_history; i++) {
        int32_t t = history[i];
        if (t >= 0 && t < s->n_vocab && s->count[t]++ == 0)
            s->seen[n_seen++] = t;
    }
    return n_seen;
}

static void clear_window(sampler *s, int32_t n_seen)
{
    for (int32_t j = 0; j < n_seen; j++)
        s->count[s->seen[j]] = 0;
}

/* llama.cpp's llama_sampler_penalties for a token seen c > 0 times. */
static float penalized(float l, int32_t c, const sampler_params *p)
{
    /* Dividing a negative logit would make the token more likely. */
    l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    return l - ((float)c * p->frequency_penalty + p->presence_penalty);
}

int32_t sampler_penalty_window(sampler *s, const sampler_params *p, const int32_t *history,
                               int64_t n_history, int32_t *pairs, int32_t cap)
{
    int32_t n_seen = count_window(s, p, history, n_history);
    for (int32_t j = 0; j < n_seen && n_seen <= cap; j++) {
        pairs[2 * j] = s->seen[j];
        pairs[2 * j + 1] = s->count[s->seen[j]];
    }
    clear_window(s, n_seen);
    return n_seen <= cap ? n_seen : -1;
}

/* Penalties over the whole row: the cost is the window's length, not the
 * vocabulary's. */
static void apply_penalties(sampler *s, const sampler_params *p, float *logits,
                            const int32_t *history, int64_t n_history)
{
    int32_t n_seen = count_window(s, p, history, n_history);
    for (int32_t j = 0; j < n_seen; j++) {
        int32_t t = s->seen[j];
        logits[t] = penalized(logits[t], s->count[t], p);
    }
    clear_window(s, n_seen);
}

/* ---- ordering (common/topk.h) ------------------------------------------- */

/* Eight running maxima: one would chain every compare through the last. */
static float max_logit(const float *logits, int32_t n)
{
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                  -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
    for (; i < n; i++)
        m[0] = logits[i] > m[0] ? logits[i] : m[0];
    float best = m[0];
    for (int j = 1; j < 8; j++)
        best = m[j] > best ? m[j] : best;
    return best;
}

/* The lowest id holding `max` (the row's max_logit); 0 if none does. */
static int32_t first_max(const float *logits, int32_t n, float max)
{
    for (int32_t i = 0; i < n; i++)
        if (logits[i] == max)
            return i;
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    int32_t x = ((const cand *)a)->id, y = ((const cand *)b)->id;
    return (x > y) - (x < y);
}

/* ---- truncation --------------------------------------------------------- */

/* Length of the shortest prefix of c (best first) whose probability mass,
 * out of `sum` (the softmax denominator relative to `max`), reaches p; 0 if
 * the n candidates given do not reach it. */
static int32_t nucleus_len(const cand *c, int32_t n, float max, double sum, float p)
{
    double need = (double)p * sum, cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += expf(c[i].value - max);
        if (cum >= need)
            return i + 1;
    }
    return 0;
}

static kept top_p_sorted(const sampler *s, kept k, float p)
{
    float max = s->cand[0].value;
    double sum = 0.0;
    for (int32_t i = 0; i < k.n; i++)
        sum += expf(s->cand[i].value - max);
    int32_t n = nucleus_len(s->cand, k.n, max, sum, p);
    if (n > 0) /* else rounding kept the mass short of p: keep everything */
        k.n = n;
    return k;
}

static int32_t bucket_of(float logit, float max)
{
    float d = (max - logit) * ((float)TOP_P_BUCKETS / TOP_P_SPAN);
    /* Written so that NaN, too, lands in the last bucket. */
    return d < (float)(TOP_P_BUCKETS - 1) ? (int32_t)d : TOP_P_BUCKETS - 1;
}

/* Top-p over the whole vocabulary, without sorting it.  One pass sums the
 * softmax denominator and the mass per bucket; buckets are monotone in the
 * logit, so the nucleus is every bucket before the one where the running
 * mass reaches p, plus the best tokens of that one: only it gets sorted.
 * (The mass ahead of a token is thus summed bucket by bucket; that differs
 * from a walk over the fully sorted order only in the last bits.)  The
 * survivors come out in id order. */
static kept top_p_vocab(sampler *s, const float *logits, float max, float p)
{
    int32_t v = s->n_vocab;
    double mass[TOP_P_BUCKETS] = {0}, sum = 0.0;
    for (int32_t i = 0; i < v; i++) {
        float w = expf(logits[i] - max);
        sum += w;
        mass[bucket_of(logits[i], max)] += w;
    }
    double need = (double)p * sum, ahead = 0.0;
    int32_t last = 0;
    while (last < TOP_P_BUCKETS - 1 && ahead + mass[last] < need)
        ahead += mass[last++];
    int32_t n = 0;
    for (int32_t i = 0; i < v; i++)
        if (bucket_of(logits[i], max) == last)
            s->cand[n++] = (cand){logits[i], i};
    if (n == 0) /* rounding ran past every bucket: all of them are kept */
        return (kept){v, KEPT_ALL};
    qsort(s->cand, (size_t)n, sizeof *s->cand, topk_cmp);
    int32_t cut = n - 1; /* if rounding keeps the mass short, the whole bucket */
    for (int32_t j = 0; j < n; j++) {
        ahead += expf(s->cand[j].value - max);
        if (ahead >= need) {
            cut = j;
            break;
        }
    }
    cand edge = s->cand[cut];
    n = 0;
    for (int32_t i = 0; i < v; i++) {
        cand c = {logits[i], i};
        if (topk_better(c, edge) || i == edge.id)
            s->cand[n++] = c;
    }
    return (kept){n, KEPT_BY_ID};
}

/* Min-p compares logits, as llama.cpp does: p_i >= min_p * p_max exactly
 * when logit_i >= logit_max + log(min_p), and no softmax is needed. */
static kept min_p_sorted(const sampler *s, kept k, float min_p)
{
    float cutoff = s->cand[0].value + logf(min_p);
    int32_t n = 1;
    while (n < k.n && s->cand[n].value >= cutoff)
        n++;
    k.n = n;
    return k;
}

static kept min_p_vocab(sampler *s, const float *logits, float max, float min_p)
{
    float cutoff = max + logf(min_p);
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (logits[i] >= cutoff)
            s->cand[n++] = (cand){logits[i], i};
    return (kept){n, KEPT_BY_ID};
}

/* Min-p over candidates in id order (what top_p_vocab keeps): their first
 * is not the best, so the cut is against the row's max, by a filter. */
static kept min_p_by_id(sampler *s, kept k, float max, float min_p)
{
    float cutoff = max + logf(min_p);
    int32_t n = 0;
    for (int32_t i = 0; i < k.n; i++)
        if (s->cand[i].value >= cutoff)
            s->cand[n++] = s->cand[i];
    k.n = n;
    return k;
}

/* Top-p and min-p after top-k (k: what top-k kept).  Every step keeps the
 * best token, so `max` stays the survivors' max. */
static kept truncate_rest(sampler *s, const sampler_params *p, const float *logits, float max,
                          kept k)
{
    if (p->top_p < 1.0f)
        k = k.order == KEPT_ALL ? top_p_vocab(s, logits, max, p->top_p)
                                : top_p_sorted(s, k, p->top_p);
    if (p->min_p > 0.0f)
        k = k.order == KEPT_ALL     ? min_p_vocab(s, logits, max, p->min_p)
            : k.order == KEPT_BY_ID ? min_p_by_id(s, k, max, p->min_p)
                                    : min_p_sorted(s, k, p->min_p);
    return k;
}

static kept truncate_candidates(sampler *s, const sampler_params *p, const float *logits, float max)
{
    kept k = {s->n_vocab, KEPT_ALL};
    if (p->top_k > 0 && p->top_k < s->n_vocab) {
        topk_select(s->cand, logits, NULL, s->n_vocab, p->top_k);
        k = (kept){p->top_k, KEPT_BY_LOGIT};
    }
    return truncate_rest(s, p, logits, max, k);
}

/* ---- the draw ----------------------------------------------------------- */

static int32_t cand_id(const sampler *s, kept k, int32_t i)
{
    return k.order == KEPT_ALL ? i : s->cand[i].id;
}

/* Softmax at the temperature (logits divided first, as llama.cpp's temp
 * sampler does), then inverse CDF over the survivors in id order.  Division
 * by t > 0 is monotone, so max / t is the largest scaled logit. */
static int32_t draw(sampler *s, const sampler_params *p, const float *logits, float max, kept k,
                    uint64_t step)
{
    if (k.order == KEPT_BY_LOGIT)
        qsort(s->cand, (size_t)k.n, sizeof *s->cand, cmp_id);
    const float *x = logits;
    if (k.order != KEPT_ALL) { /* gather, so one branch-free loop serves both */
        for (int32_t i = 0; i < k.n; i++)
            s->weight[i] = s->cand[i].value;
        x = s->weight;
    }
    float t = p->temperature, x_max = max / t;
    double total = 0.0;
    for (int32_t i = 0; i < k.n; i++) {
        s->weight[i] = expf(x[i] / t - x_max);
        total += s->weight[i];
    }
    double target = sampler_uniform(p->seed, step) * total, cum = 0.0;
    for (int32_t i = 0; i < k.n; i++) {
        cum += s->weight[i];
        if (cum > target)
            return cand_id(s, k, i);
    }
    return -1; /* reached only when a NaN logit made the total NaN */
}

int32_t sampler_sample(sampler *s, const sampler_params *p, float *logits, const int32_t *history,
                       int64_t n_history, uint64_t step)
{
    apply_penalties(s, p, logits, history, n_history);
    float max = max_logit(logits, s->n_vocab);
    /* Truncation always keeps the best token, so greedy skips it.  A row
     * without a finite max (all -inf or NaN, or a +inf) has no softmax:
     * it gets the greedy answer too. */
    if (!(p->temperature > 0.0f) || !isfinite(max))
        return first_max(logits, s->n_vocab, max);
    kept k = truncate_candidates(s, p, logits, max);
    int32_t t = draw(s, p, logits, max, k, step);
    return t >= 0 ? t : first_max(logits, s->n_vocab, max);
}

/* ---- from a row's best logits -------------------------------------------- */

int32_t sampler_top_needed(const sampler_params *p, int64_t n_history, int32_t n_vocab,
                           int32_t max_k)
{
    if (!(p->temperature > 0.0f) || p->top_k <= 0 || p->top_k >= n_vocab)
        return 0;
    int64_t window = 0;
    if (!penalties_off(p)) {
        /* A penalty that raises a logit could lift any token into the top k. */
        if (p->repeat_penalty < 1.0f || p->presence_penalty < 0.0f || p->frequency_penalty < 0.0f)
            return 0;
        window = window_len(p, n_history);
    }
    int64_t k = (int64_t)p->top_k + window;
    if (k > n_vocab)
        k = n_vocab;
    return k <= max_k ? (int32_t)k : 0;
}

/* The lowest id among the n entries holding max; 0 if none does (NaNs). */
static int32_t first_max_of(const int32_t *ids, const float *v, int32_t n, float max)
{
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (v[i] == max && (best < 0 || ids[i] < best))
            best = ids[i];
    return best < 0 ? 0 : best;
}

int32_t sampler_sample_top(sampler *s, const sampler_params *p, const int32_t *ids,
                           const float *logits, int32_t n, const int32_t *history,
                           int64_t n_history, uint64_t step)
{
    /* Penalized copies in s->weight, which the draw reuses only after
     * topk_select has copied the survivors out. */
    int32_t n_seen = count_window(s, p, history, n_history);
    for (int32_t i = 0; i < n; i++) {
        const int32_t c = n_seen > 0 && ids[i] >= 0 && ids[i] < s->n_vocab ? s->count[ids[i]] : 0;
        s->weight[i] = c > 0 ? penalized(logits[i], c, p) : logits[i];
    }
    clear_window(s, n_seen);
    float max = max_logit(s->weight, n);
    if (!(p->temperature > 0.0f) || !isfinite(max) || p->top_k <= 0 || p->top_k > n)
        return first_max_of(ids, s->weight, n, max);
    topk_select(s->cand, s->weight, ids, n, p->top_k);
    kept k = truncate_rest(s, p, NULL, max, (kept){p->top_k, KEPT_BY_LOGIT});
    int32_t t = draw(s, p, NULL, max, k, step);
    return t >= 0 ? t : s->cand[0].id;
}
