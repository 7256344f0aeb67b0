#include "model/pretok.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "common/grow.h"
#include "common/utf8.h"

/* Character classes of one code point, as the split functions see them.
 * F_IN marks a position inside the piece being split: llama.cpp's splitters
 * read "no flags at all" past the end of a piece, and some rules test that. */
enum {
    F_IN = 1,
    F_LETTER = 2,
    F_NUMBER = 4,
    F_SPACE = 8,
    F_PUNCT = 16,
};

#define OUT_OF_RANGE 0xFFFFFFFFu

/* A growable array of word lengths. */
typedef struct lenvec {
    size_t *v;
    size_t n, cap;
} lenvec;

static int lenvec_push(lenvec *l, size_t x)
{
    if (grow_reserve(&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
        return -1;
    l->v[l->n++] = x;
    return 0;
}

/* One piece [ini, end) of the text being split, and the words cut so far. */
typedef struct piece {
    const uint32_t *cpts;
    const uint8_t *fl;
    size_t ini, end;
    size_t prev_end; /* end of the last word emitted */
    lenvec *out;
    int oom;
} piece;

static uint8_t fl_at(const piece *p, size_t pos)
{
    return pos >= p->ini && pos < p->end ? p->fl[pos] : 0;
}

static uint32_t cpt_at(const piece *p, size_t pos)
{
    return pos >= p->ini && pos < p->end ? p->cpts[pos] : OUT_OF_RANGE;
}

/* Ends the current word at `end`; returns its length (0: nothing emitted). */
static size_t emit(piece *p, size_t end)
{
    size_t len = end - p->prev_end;
    if (len > 0 && lenvec_push(p->out, len) < 0)
        p->oom = 1;
    p->prev_end = end;
    return len;
}

typedef void (*split_fn)(piece *p);

/* 's|'t|'re|'ve|'m|'ll|'d at pos (case-folded when fold): length matched or 0. */
static size_t contraction_len(const piece *p, size_t pos, bool fold)
{
    if (p->cpts[pos] != '\'' || pos + 1 >= p->end)
        return 0;
    uint32_t a = cpt_at(p, pos + 1);
    if (fold)
        a = (uint32_t)utf8proc_tolower((utf8proc_int32_t)a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= p->end)
        return 0;
    uint32_t b = cpt_at(p, pos + 2);
    if (fold)
        b = (uint32_t)utf8proc_tolower((utf8proc_int32_t)b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

static size_t count_spaces(const piece *p, size_t pos)
{
    size_t n = 0;
    while (fl_at(p, pos + n) & F_SPACE)
        n++;
    return n;
}

/* \s+(?!\S)|\s+ at pos, given n spaces there: the new position, or pos. */
static size_t spaces_end(const piece *p, size_t pos, size_t n)
{
    if (n > 1 && cpt_at(p, pos + n) != OUT_OF_RANGE)
        return pos + n - 1; /* leave the last space to prefix the next word */
    return pos + n;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(piece *p)
{
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t cpt = p->cpts[pos];
        size_t c = contraction_len(p, pos, false);
        if (c) {
            pos += emit(p, pos + c);
            continue;
        }
        uint8_t f2 = cpt == ' ' ? fl_at(p, pos + 1) : p->fl[pos];
        uint8_t cls = f2 & F_LETTER ? F_LETTER : f2 & F_NUMBER ? F_NUMBER : 0;
        if (cls) {
            pos += (cpt == ' ');
            while (fl_at(p, pos) & cls)
                pos++;
            emit(p, pos);
            continue;
        }
        if (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f2) {
            pos += (cpt == ' ');
            while (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f2)
                f2 = fl_at(p, ++pos);
            emit(p, pos);
            continue;
        }
        size_t nsp = count_spaces(p, pos);
        if (nsp > 0) {
            pos = spaces_end(p, pos, nsp);
            emit(p, pos);
            continue;
        }
        emit(p, ++pos);
    }
}

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * and Qwen2's, the same but \p{N} (one digit a word): digit_run is 3 or 1. */
static void split_llama3_digits(piece *p, size_t digit_run)
{
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t cpt = p->cpts[pos];
        uint8_t f = p->fl[pos];
        size_t c = contraction_len(p, pos, true);
        if (c) {
            pos += emit(p, pos + c);
            continue;
        }
        if (!(cpt == '\r' || cpt == '\n' || (f & F_NUMBER)) &&
            ((f & F_LETTER) || (fl_at(p, pos + 1) & F_LETTER))) {
            pos++;
            while (fl_at(p, pos) & F_LETTER)
                pos++;
            emit(p, pos);
            continue;
        }
        if (f & F_NUMBER) {
            size_t ini = pos;
            while (fl_at(p, pos) & F_NUMBER) {
                if (++pos - ini >= digit_run) {
                    emit(p, pos);
                    ini = pos;
                }
            }
            emit(p, pos);
            continue;
        }
        /* llama.cpp tests the current position's flags here, not f2's. */
        uint8_t f2 = cpt == ' ' ? fl_at(p, pos + 1) : f;
        if (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f) {
            pos += (cpt == ' ');
            while (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f2)
                f2 = fl_at(p, ++pos);
            for (uint32_t c2 = cpt_at(p, pos); c2 == '\r' || c2 == '\n'; c2 = cpt_at(p, ++pos))
                ;
            emit(p, pos);
            continue;
        }
        size_t nsp = 0, last_rn = 0;
        while (fl_at(p, pos + nsp) & F_SPACE) {
            uint32_t c2 = cpt_at(p, pos + nsp);
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + nsp + 1;
            nsp++;
        }
        if (last_rn > 0) {
            pos = last_rn;
            emit(p, pos);
            continue;
        }
        if (nsp > 0) {
            pos = spaces_end(p, pos, nsp);
            emit(p, pos);
            continue;
        }
        emit(p, ++pos);
    }
}

static void split_llama3(piece *p)
{
    split_llama3_digits(p, 3);
}

static void split_qwen2(piece *p)
{
    split_llama3_digits(p, 1);
}

/* The splits below stand for plain regexes run as llama.cpp runs them: each
 * match becomes a word and so does each stretch of text between matches. */

/* A run of code points that satisfy `in`, as the regex class[...]+ . */
static void split_runs(piece *p, bool (*in)(uint32_t cpt, uint8_t fl))
{
    size_t pos = p->ini;
    while (pos < p->end) {
        if (!in(p->cpts[pos], p->fl[pos])) {
            pos++;
            continue;
        }
        emit(p, pos);
        while (pos < p->end && in(p->cpts[pos], p->fl[pos]))
            pos++;
        emit(p, pos);
    }
    emit(p, p->end);
}

static bool is_punct_or_math(uint32_t cpt, uint8_t fl)
{
    return (fl & F_PUNCT) || (cpt != 0 && cpt < 128 && strchr("$+<=>^~|", (int)cpt));
}

static bool is_number(uint32_t cpt, uint8_t fl)
{
    (void)cpt;
    return fl & F_NUMBER;
}

/* [\p{P}\$\+<=>\^~\|]+ */
static void split_punct_runs(piece *p)
{
    split_runs(p, is_punct_or_math);
}

/* \p{N}+ */
static void split_number_runs(piece *p)
{
    split_runs(p, is_number);
}

static bool is_ascii_digit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* [0-9][0-9][0-9], matched leftmost and without overlap. */
static void split_digit_triples(piece *p)
{
    size_t pos = p->ini;
    while (pos + 3 <= p->end) {
        if (is_ascii_digit(p->cpts[pos]) && is_ascii_digit(p->cpts[pos + 1]) &&
            is_ascii_digit(p->cpts[pos + 2])) {
            emit(p, pos);
            pos += 3;
            emit(p, pos);
        } else {
            pos++;
        }
    }
    emit(p, p->end);
}

#define MAX_CHAIN 4

struct pretok {
    const char *name;
    split_fn chain[MAX_CHAIN]; /* applied in order; unused slots NULL */
    bool ignore_merges;
    bool add_bos;
};

/* Names and chains follow llama.cpp's llama-vocab.cpp (the pre-tokenizer
 * types GPT2, LLAMA3, QWEN2, DBRX/SMAUG and DEFAULT). */
static const pretok k_pretoks[] = {
    {"default",
     {split_punct_runs, split_gpt2, split_number_runs, split_digit_triples},
     false,
     false},
    {"gpt-2", {split_gpt2}, false, false},
    {"phi-2", {split_gpt2}, false, false},
    {"jina-es", {split_gpt2}, false, false},
    {"jina-de", {split_gpt2}, false, false},
    {"jina-v2-es", {split_gpt2}, false, false},
    {"jina-v2-de", {split_gpt2}, false, false},
    {"mpt", {split_gpt2}, false, false},
    {"olmo", {split_gpt2}, false, false},
    {"jais", {split_gpt2}, false, false},
    {"llama3", {split_llama3}, true, true},
    {"llama-v3", {split_llama3}, true, true},
    {"llama-bpe", {split_llama3}, true, true},
    {"falcon3", {split_llama3}, true, true},
    {"dbrx", {split_llama3}, false, false},
    {"smaug-bpe", {split_llama3}, false, false},
    {"qwen2", {split_qwen2}, false, false},
    {"deepseek-r1-qwen", {split_qwen2}, false, false},
};

#define N_PRETOKS (sizeof k_pretoks / sizeof k_pretoks[0])

const pretok *pretok_find(const char *name, size_t len)
{
    if (!name)
        return &k_pretoks[0];
    for (size_t i = 0; i < N_PRETOKS; i++)
        if (strlen(k_pretoks[i].name) == len && memcmp(k_pretoks[i].name, name, len) == 0)
            return &k_pretoks[i];
    return NULL;
}

const char *pretok_known_names(void)
{
    return "default, gpt-2, phi-2, jina-es, jina-de, jina-v2-es, jina-v2-de, mpt, olmo, jais, "
           "llama3, llama-v3, llama-bpe, falcon3, dbrx, smaug-bpe, qwen2, deepseek-r1-qwen";
}

bool pretok_ignore_merges(const pretok *p)
{
    return p->ignore_merges;
}

bool pretok_default_add_bos(const pretok *p)
{
    return p->add_bos;
}

/* ---- code points ---- */

/* Unicode White_Space, the set Python's regex module (and so llama.cpp)
 * matches with \s. */
static bool is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint8_t cpt_flags(uint32_t c)
{
    uint8_t f = F_IN;
    if (is_white_space(c))
        f |= F_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return f | F_LETTER;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return f | F_NUMBER;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return f | F_PUNCT;
    default: return f;
    }
}

static bool is_cont(unsigned char b)
{
    return (b & 0xC0) == 0x80;
}

/* One code point at s[*i]; llama.cpp's unicode_cpt_from_utf8 with its
 * exceptions turned into U+FFFD (which consume one byte). */
static uint32_t decode_one(const unsigned char *s, size_t len, size_t *i)
{
    size_t o = *i;
    unsigned char b = s[o];
    uint32_t c;
    size_t n;
    if (!(b & 0x80)) {
        c = b;
        n = 1;
    } else if (!(b & 0x40)) {
        n = 0;
    } else if (!(b & 0x20)) {
        n = o + 1 < len && is_cont(s[o + 1]) ? 2 : 0;
        c = n ? (uint32_t)(b & 0x1F) << 6 | (s[o + 1] & 0x3F) : 0;
    } else if (!(b & 0x10)) {
        n = o + 2 < len && is_cont(s[o + 1]) && is_cont(s[o + 2]) ? 3 : 0;
        c = n ? (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[o + 1] & 0x3F) << 6 | (s[o + 2] & 0x3F)
              : 0;
    } else if (!(b & 0x08)) {
        n = o + 3 < len && is_cont(s[o + 1]) && is_cont(s[o + 2]) && is_cont(s[o + 3]) ? 4 : 0;
        c = n ? (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[o + 1] & 0x3F) << 12 |
                    (uint32_t)(s[o + 2] & 0x3F) << 6 | (s[o + 3] & 0x3F)
              : 0;
    } else {
        n = 0;
    }
    if (n == 0) {
        *i = o + 1;
        return 0xFFFD;
    }
    *i = o + n;
    /* Past U+10FFFF llama.cpp cannot re-encode (it throws); both are symbols. */
    return c > 0x10FFFF ? 0xFFFD : c;
}

int pretok_decode(const char *text, size_t len, uint32_t **cpts, size_t *n, llmq_err *err)
{
    uint32_t *out = malloc((len ? len : 1) * sizeof *out);
    if (!out)
        return llmq_errf(err, "pre-tokenizer: out of memory decoding %zu bytes", len);
    size_t k = 0;
    for (size_t i = 0; i < len;)
        out[k++] = decode_one((const unsigned char *)text, len, &i);
    *cpts = out;
    *n = k;
    return 0;
}

size_t pretok_encode_cpt(uint32_t c, char *out)
{
    size_t n = utf8_encode(c > 0x10FFFF ? 0xFFFD : c, out);
    if (n > 0)
        return n;
    /* A surrogate: llama.cpp decodes and re-encodes these like any value. */
    out[0] = (char)(0xE0 | (c >> 12));
    out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3;
}

/* Applies one split function to every piece listed in `in`. */
static int split_pass(split_fn fn, const uint32_t *cpts, const uint8_t *fl, const lenvec *in,
                      lenvec *out)
{
    size_t start = 0;
    for (size_t i = 0; i < in->n; i++) {
        piece p = {cpts, fl, start, start + in->v[i], start, out, 0};
        fn(&p);
        if (p.oom)
            return -1;
        start += in->v[i];
    }
    return 0;
}

int pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **lens, size_t *n_words,
                 llmq_err *err)
{
    uint8_t *fl = malloc(n ? n : 1);
    lenvec cur = {0}, next = {0};
    if (!fl || lenvec_push(&cur, n) < 0)
        goto oom;
    for (size_t i = 0; i < n; i++)
        fl[i] = cpt_flags(cpts[i]);
    for (size_t k = 0; k < MAX_CHAIN && p->chain[k]; k++) {
        next.n = 0;
        if (split_pass(p->chain[k], cpts, fl, &cur, &next) < 0)
            goto oom;
        lenvec t = cur;
        cur = next;
        next = t;
    }
    free(fl);
    free(next.v);
    *lens = cur.v;
    *n_words = cur.n;
    return 0;
oom:
    free(fl);
    free(cur.v);
    free(next.v);
    return llmq_errf(err, "pre-tokenizer %s: out of memory splitting %zu code points", p->name, n);
}
