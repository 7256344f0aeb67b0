#include "engine/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays ---------------------------------------------------- */

/* Makes room for `need` elements of `elem` bytes in the array whose pointer
 * is at arrp (any T **), doubling its capacity *cap.  The pointer is read and
 * written through memcpy, so one helper serves every element type. */
static bool reserve(void *arrp, int32_t need, int32_t *cap, size_t elem)
{
    if (need <= *cap)
        return true;
    int64_t c = *cap > 0 ? *cap : 16;
    while (c < need)
        c *= 2;
    if (c > INT32_MAX)
        return false;
    void *p;
    memcpy(&p, arrp, sizeof p);
    void *q = realloc(p, (size_t)c * elem);
    if (!q)
        return false;
    memcpy(arrp, &q, sizeof q);
    *cap = (int32_t)c;
    return true;
}

/* ---- byte sets ---------------------------------------------------------- */

void gram_bytes_add(gram_bytes *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi && b < 256; b++)
        s->bits[b >> 6] |= UINT64_C(1) << (b & 63);
}

bool gram_bytes_has(const gram_bytes *s, unsigned byte)
{
    return byte < 256 && (s->bits[byte >> 6] >> (byte & 63) & 1);
}

static void bytes_union(gram_bytes *into, const gram_bytes *s)
{
    for (int i = 0; i < 4; i++)
        into->bits[i] |= s->bits[i];
}

/* ---- the builder -------------------------------------------------------- */

typedef enum gx_kind {
    GX_SET,
    GX_LIT,
    GX_SEQ,
    GX_ALT,
    GX_STAR,
    GX_LIST,
    GX_REPEAT,
    GX_CALL
} gx_kind;

/* SET: a is the set's index; LIT: the bytes lit[a..a+n); SEQ and ALT: the
 * children kids[a..a+n); STAR: a is the child; LIST: a is the item, n the
 * separator; REPEAT: a is the child, n and m the bounds; CALL: a is the
 * rule. */
typedef struct gx_node {
    gx_kind kind;
    int32_t a, n, m;
} gx_node;

typedef struct gx_rule {
    char *name;
    gram_expr body; /* GRAM_NONE until defined */
} gx_rule;

struct grammar_builder {
    gx_node *nodes;
    int32_t n_nodes, cap_nodes;
    gram_expr *kids;
    int32_t n_kids, cap_kids;
    char *lit;
    int32_t n_lit, cap_lit;
    gram_bytes *sets;
    int32_t n_sets, cap_sets;
    gx_rule *rules;
    int32_t n_rules, cap_rules;
    bool failed; /* an allocation failed or an argument was bad */
};

int grammar_builder_new(grammar_builder **out, llmq_err *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : llmq_errf(err, "grammar: out of memory");
}

void grammar_builder_free(grammar_builder *b)
{
    if (!b)
        return;
    for (int32_t i = 0; i < b->n_rules; i++)
        free(b->rules[i].name);
    free(b->rules);
    free(b->nodes);
    free(b->kids);
    free(b->lit);
    free(b->sets);
    free(b);
}

static gram_expr fail_expr(grammar_builder *b)
{
    b->failed = true;
    return GRAM_NONE;
}

static bool valid_expr(const grammar_builder *b, gram_expr x)
{
    return x >= 0 && x < b->n_nodes;
}

static gram_expr add_node(grammar_builder *b, gx_kind kind, int32_t a, int32_t n)
{
    if (b->failed || !reserve(&b->nodes, b->n_nodes + 1, &b->cap_nodes, sizeof *b->nodes))
        return fail_expr(b);
    b->nodes[b->n_nodes] = (gx_node){kind, a, n, 0};
    return b->n_nodes++;
}

gram_expr gram_set(grammar_builder *b, const gram_bytes *s)
{
    if (b->failed || !reserve(&b->sets, b->n_sets + 1, &b->cap_sets, sizeof *b->sets))
        return fail_expr(b);
    b->sets[b->n_sets] = *s;
    return add_node(b, GX_SET, b->n_sets++, 0);
}

gram_expr gram_lit(grammar_builder *b, const char *s, size_t len)
{
    if (b->failed || len > INT32_MAX - (size_t)b->n_lit ||
        !reserve(&b->lit, b->n_lit + (int32_t)len, &b->cap_lit, 1))
        return fail_expr(b);
    if (len > 0)
        memcpy(b->lit + b->n_lit, s, len);
    b->n_lit += (int32_t)len;
    return add_node(b, GX_LIT, b->n_lit - (int32_t)len, (int32_t)len);
}

static gram_expr add_list(grammar_builder *b, gx_kind kind, const gram_expr *xs, int32_t n)
{
    if (b->failed || n < 0 || n > INT32_MAX - b->n_kids ||
        !reserve(&b->kids, b->n_kids + n, &b->cap_kids, sizeof *b->kids))
        return fail_expr(b);
    for (int32_t i = 0; i < n; i++)
        if (!valid_expr(b, xs[i]))
            return fail_expr(b);
    if (n == 1)
        return xs[0];
    if (n > 0)
        memcpy(b->kids + b->n_kids, xs, (size_t)n * sizeof *xs);
    b->n_kids += n;
    return add_node(b, kind, b->n_kids - n, n);
}

gram_expr gram_seq(grammar_builder *b, const gram_expr *xs, int32_t n)
{
    return add_list(b, GX_SEQ, xs, n);
}

gram_expr gram_alt(grammar_builder *b, const gram_expr *xs, int32_t n)
{
    return add_list(b, GX_ALT, xs, n);
}

gram_expr gram_star(grammar_builder *b, gram_expr x)
{
    return valid_expr(b, x) ? add_node(b, GX_STAR, x, 0) : fail_expr(b);
}

gram_expr gram_list(grammar_builder *b, gram_expr x, gram_expr sep)
{
    return valid_expr(b, x) && valid_expr(b, sep) ? add_node(b, GX_LIST, x, sep) : fail_expr(b);
}

gram_expr gram_opt(grammar_builder *b, gram_expr x)
{
    return GRAM_ALT(b, x, gram_seq(b, NULL, 0));
}

gram_expr gram_repeat(grammar_builder *b, gram_expr x, int32_t min, int32_t max)
{
    if (min < 0 || max < min || !valid_expr(b, x))
        return fail_expr(b);
    const gram_expr r = add_node(b, GX_REPEAT, x, min);
    if (r != GRAM_NONE)
        b->nodes[r].m = max;
    return r;
}

int32_t gram_rule(grammar_builder *b, const char *name)
{
    char *copy = strdup(name);
    if (b->failed || !copy ||
        !reserve(&b->rules, b->n_rules + 1, &b->cap_rules, sizeof *b->rules)) {
        free(copy);
        b->failed = true;
        return -1;
    }
    b->rules[b->n_rules] = (gx_rule){copy, GRAM_NONE};
    return b->n_rules++;
}

void gram_define(grammar_builder *b, int32_t rule, gram_expr body)
{
    if (rule < 0 || rule >= b->n_rules || !valid_expr(b, body) || b->rules[rule].body != GRAM_NONE)
        b->failed = true;
    else
        b->rules[rule].body = body;
}

gram_expr gram_call(grammar_builder *b, int32_t rule)
{
    return rule >= 0 && rule < b->n_rules ? add_node(b, GX_CALL, rule, 0) : fail_expr(b);
}

/* ---- the compiled grammar ----------------------------------------------- */

/* Transition values besides a state (>= 0): no move, or a call (calls[-2 - t]). */
#define T_DEAD (-1)
#define T_CALL(i) (-2 - (i))

typedef struct gram_callsite {
    int32_t rule;  /* the callee */
    int32_t start; /* the callee's start state */
    int32_t ret;   /* the caller's state once the callee returns */
    bool tail;     /* ret is final: the caller's frame is replaced, not kept */
} gram_callsite;

struct grammar {
    int32_t n_states, n_classes, n_calls;
    uint8_t class_of[256];
    int32_t *trans;     /* n_states x n_classes */
    uint8_t *accepting; /* per state */
    gram_callsite *calls;
    int32_t start;
    bool reach_bounded; /* no call returns into an accepting state that can go on */
};

void grammar_free(grammar *g)
{
    if (!g)
        return;
    free(g->trans);
    free(g->accepting);
    free(g->calls);
    free(g);
}

int32_t grammar_n_states(const grammar *g)
{
    return g->n_states;
}
int32_t grammar_n_classes(const grammar *g)
{
    return g->n_classes;
}

int32_t grammar_reach(const grammar *g, size_t n)
{
    return g->reach_bounded && n < GRAMMAR_MAX_DEPTH - 1 ? (int32_t)n + 1 : GRAMMAR_MAX_DEPTH;
}

/* ---- compilation: the NFA ------------------------------------------------ */

/* Edge labels: a byte (0..255), a builder set (LABEL_SET + index), epsilon,
 * or a call of a rule (LABEL_CALL(rule)). */
#define LABEL_SET 256
#define LABEL_EPS (-1)
#define LABEL_CALL(r) (-2 - (r))
#define LABEL_RULE(l) (-2 - (l))

typedef struct nfa_edge {
    int32_t to, label, next;
} nfa_edge;

typedef struct frag {
    int32_t in, out;
} frag;

/* A DFA state under construction: a sorted set of NFA states of one rule. */
typedef struct dstate {
    int32_t rule, off, len;
} dstate;

typedef struct compiler {
    const grammar_builder *b;
    llmq_err *err;
    bool failed;
    int32_t nesting; /* of the expression being built */
    /* NFA */
    int32_t *head; /* first edge per state, -1 for none */
    int32_t n_nfa, cap_nfa;
    nfa_edge *edges;
    int32_t n_edges, cap_edges;
    frag *rule_frag; /* per builder rule: {-1, -1} unused, {-1, -2} queued, then built */
    int32_t *needed; /* rules reachable from the root, in discovery order */
    int32_t n_needed;
    /* analysis; the scratch arrays hold one entry per NFA state */
    gram_bytes *first;         /* per rule: the bytes it can begin with */
    uint8_t *color;            /* per rule: 0 new, 1 being searched, 2 done (left recursion) */
    int32_t *stamp, cur_stamp; /* closures mark the states they reach with cur_stamp */
    int32_t *work_stack;       /* the closure's DFS */
    int32_t *buf, n_buf;       /* the set being closed, then the closure */
    int32_t *buf2;             /* a move's call return states; the closure's output */
    uint8_t class_of[256], rep[256]; /* byte -> class, class -> its smallest byte */
    int32_t n_classes;
    /* DFA */
    dstate *states;
    int32_t n_states, cap_states;
    int32_t *sets;
    int32_t n_sets, cap_sets;
    int32_t *table; /* hash of sets -> state, -1 empty */
    int32_t table_size;
    int32_t *trans;
    int32_t cap_trans;
    gram_callsite *calls;
    int32_t n_calls, cap_calls;
    int64_t work;
} compiler;

static int oom(compiler *cc)
{
    if (!cc->failed)
        llmq_errf(cc->err, "grammar: out of memory");
    cc->failed = true;
    return -1;
}

static int too_large(compiler *cc, const char *what, long limit)
{
    if (!cc->failed)
        llmq_errf(cc->err, "grammar: too large (more than %ld %s)", limit, what);
    cc->failed = true;
    return -1;
}

static const char *rule_name(const compiler *cc, int32_t r)
{
    return cc->b->rules[r].name;
}

static int32_t new_nfa_state(compiler *cc)
{
    if (cc->n_nfa >= GRAMMAR_MAX_NFA_STATES)
        return too_large(cc, "NFA states", GRAMMAR_MAX_NFA_STATES);
    if (!reserve(&cc->head, cc->n_nfa + 1, &cc->cap_nfa, sizeof *cc->head))
        return oom(cc);
    cc->head[cc->n_nfa] = -1;
    return cc->n_nfa++;
}

static int add_edge(compiler *cc, int32_t from, int32_t to, int32_t label)
{
    if (!reserve(&cc->edges, cc->n_edges + 1, &cc->cap_edges, sizeof *cc->edges))
        return oom(cc);
    cc->edges[cc->n_edges] = (nfa_edge){to, label, cc->head[from]};
    cc->head[from] = cc->n_edges++;
    return 0;
}

/* A fragment of two fresh states; *f->in == -1 on failure. */
static int new_frag(compiler *cc, frag *f)
{
    f->in = new_nfa_state(cc);
    f->out = f->in < 0 ? -1 : new_nfa_state(cc);
    return f->out < 0 ? -1 : 0;
}

static int need_rule(compiler *cc, int32_t r)
{
    if (cc->rule_frag[r].in != -1 || cc->rule_frag[r].out == -2)
        return 0;
    if (cc->b->rules[r].body == GRAM_NONE) {
        cc->failed = true;
        return llmq_errf(cc->err, "grammar: rule '%s' is called but has no body", rule_name(cc, r));
    }
    cc->rule_frag[r].out = -2; /* queued */
    cc->needed[cc->n_needed++] = r;
    return 0;
}

static int build(compiler *cc, gram_expr x, frag *f);

/* x{min,max} as a chain of max copies of x, each of those from the
 * min-th on with a way out before it: one copy deep, however long, and
 * small epsilon closures (the rest of the chain is not in them). */
static int build_repeat(compiler *cc, const gx_node *n, frag *f)
{
    if (new_frag(cc, f) != 0)
        return -1;
    int32_t at = f->in;
    for (int32_t i = 0; i < n->m; i++) {
        frag k;
        if ((i >= n->n && add_edge(cc, at, f->out, LABEL_EPS) != 0) || build(cc, n->a, &k) != 0 ||
            add_edge(cc, at, k.in, LABEL_EPS) != 0)
            return -1;
        at = k.out;
    }
    return add_edge(cc, at, f->out, LABEL_EPS);
}

static int build_list(compiler *cc, const gx_node *n, frag *f)
{
    const gram_expr *kids = cc->b->kids + n->a;
    if (n->kind == GX_ALT) {
        if (new_frag(cc, f) != 0)
            return -1;
        for (int32_t i = 0; i < n->n; i++) {
            frag k;
            if (build(cc, kids[i], &k) != 0 || add_edge(cc, f->in, k.in, LABEL_EPS) != 0 ||
                add_edge(cc, k.out, f->out, LABEL_EPS) != 0)
                return -1;
        }
        return 0;
    }
    if (n->n == 0) {
        f->in = f->out = new_nfa_state(cc);
        return f->in < 0 ? -1 : 0;
    }
    if (build(cc, kids[0], f) != 0)
        return -1;
    for (int32_t i = 1; i < n->n; i++) {
        frag k;
        if (build(cc, kids[i], &k) != 0 || add_edge(cc, f->out, k.in, LABEL_EPS) != 0)
            return -1;
        f->out = k.out;
    }
    return 0;
}

/* Thompson's construction of x into a fragment: entry f->in, exit f->out. */
static int build_node(compiler *cc, gram_expr x, frag *f)
{
    const gx_node *n = &cc->b->nodes[x];
    switch (n->kind) {
    case GX_SET: return new_frag(cc, f) || add_edge(cc, f->in, f->out, LABEL_SET + n->a);
    case GX_LIT:
        if ((f->in = f->out = new_nfa_state(cc)) < 0)
            return -1;
        for (int32_t i = 0; i < n->n; i++) {
            int32_t next = new_nfa_state(cc);
            if (next < 0 || add_edge(cc, f->out, next, (uint8_t)cc->b->lit[n->a + i]) != 0)
                return -1;
            f->out = next;
        }
        return 0;
    case GX_SEQ:
    case GX_ALT: return build_list(cc, n, f);
    case GX_STAR: {
        frag k;
        return new_frag(cc, f) || build(cc, n->a, &k) || add_edge(cc, f->in, k.in, LABEL_EPS) ||
               add_edge(cc, f->in, f->out, LABEL_EPS) || add_edge(cc, k.out, k.in, LABEL_EPS) ||
               add_edge(cc, k.out, f->out, LABEL_EPS);
    }
    case GX_LIST: { /* in -> item -> out, and from the item's end back through sep */
        frag item, sep;
        return new_frag(cc, f) || build(cc, n->a, &item) || build(cc, n->n, &sep) ||
               add_edge(cc, f->in, item.in, LABEL_EPS) ||
               add_edge(cc, item.out, f->out, LABEL_EPS) ||
               add_edge(cc, item.out, sep.in, LABEL_EPS) ||
               add_edge(cc, sep.out, item.in, LABEL_EPS);
    }
    case GX_REPEAT: return build_repeat(cc, n, f);
    case GX_CALL:
        return need_rule(cc, n->a) || new_frag(cc, f) ||
               add_edge(cc, f->in, f->out, LABEL_CALL(n->a));
    }
    return -1;
}

static int build(compiler *cc, gram_expr x, frag *f)
{
    if (cc->nesting >= GRAMMAR_MAX_NESTING) {
        cc->failed = true;
        return llmq_errf(cc->err, "grammar: expressions nested deeper than %d",
                         GRAMMAR_MAX_NESTING);
    }
    cc->nesting++;
    const int rc = build_node(cc, x, f);
    cc->nesting--;
    return rc;
}

/* Every rule reachable from the root, each into its own fragment. */
static int build_rules(compiler *cc, int32_t root)
{
    const int32_t n_rules = cc->b->n_rules;
    cc->rule_frag = malloc((size_t)n_rules * sizeof *cc->rule_frag);
    cc->needed = malloc((size_t)n_rules * sizeof *cc->needed);
    if (!cc->rule_frag || !cc->needed)
        return oom(cc);
    for (int32_t r = 0; r < n_rules; r++)
        cc->rule_frag[r] = (frag){-1, -1};
    if (need_rule(cc, root) != 0)
        return -1;
    for (int32_t i = 0; i < cc->n_needed; i++) {
        const int32_t r = cc->needed[i];
        if (build(cc, cc->b->rules[r].body, &cc->rule_frag[r]) != 0)
            return -1;
    }
    return 0;
}

/* ---- compilation: closures, byte classes, first bytes ------------------- */

/* The epsilon closure of cc->buf[0..n_buf), sorted, back into cc->buf. */
static int close_set(compiler *cc)
{
    if (++cc->cur_stamp == INT32_MAX) {
        memset(cc->stamp, 0, (size_t)cc->n_nfa * sizeof *cc->stamp);
        cc->cur_stamp = 1;
    }
    int32_t sp = 0, n = 0;
    for (int32_t i = 0; i < cc->n_buf; i++)
        if (cc->stamp[cc->buf[i]] != cc->cur_stamp) {
            cc->stamp[cc->buf[i]] = cc->cur_stamp;
            cc->work_stack[sp++] = cc->buf[i];
        }
    while (sp > 0) {
        const int32_t s = cc->work_stack[--sp];
        cc->buf2[n++] = s;
        for (int32_t e = cc->head[s]; e >= 0; e = cc->edges[e].next) {
            const int32_t to = cc->edges[e].to;
            if (cc->edges[e].label == LABEL_EPS && cc->stamp[to] != cc->cur_stamp) {
                cc->stamp[to] = cc->cur_stamp;
                cc->work_stack[sp++] = to;
            }
        }
    }
    cc->work += n;
    if (cc->work > GRAMMAR_MAX_WORK)
        return too_large(cc, "steps of the subset construction", GRAMMAR_MAX_WORK);
    /* Sorting by a counting pass over the stamps would cost the NFA's size;
     * the sets are small, insertion sort them. */
    for (int32_t i = 1; i < n; i++) {
        int32_t v = cc->buf2[i], j = i;
        for (; j > 0 && cc->buf2[j - 1] > v; j--)
            cc->buf2[j] = cc->buf2[j - 1];
        cc->buf2[j] = v;
    }
    memcpy(cc->buf, cc->buf2, (size_t)n * sizeof *cc->buf);
    cc->n_buf = n;
    return 0;
}

static int closure_of_state(compiler *cc, int32_t s)
{
    cc->buf[0] = s;
    cc->n_buf = 1;
    return close_set(cc);
}

/* Splits the byte classes by membership in s. */
static void refine(compiler *cc, const gram_bytes *s)
{
    int16_t map[256][2];
    memset(map, -1, sizeof map);
    int32_t n = 0;
    for (int b = 0; b < 256; b++) {
        int16_t *slot = &map[cc->class_of[b]][gram_bytes_has(s, (unsigned)b)];
        if (*slot < 0)
            *slot = (int16_t)n++;
        cc->class_of[b] = (uint8_t)*slot;
    }
    cc->n_classes = n;
}

/* Bytes no edge label tells apart share a class: the DFA has a column per
 * class, not per byte. */
static void byte_classes(compiler *cc)
{
    memset(cc->class_of, 0, sizeof cc->class_of);
    cc->n_classes = 1;
    gram_bytes literal = {0};
    for (int32_t e = 0; e < cc->n_edges; e++)
        if (cc->edges[e].label >= 0 && cc->edges[e].label < LABEL_SET)
            gram_bytes_add(&literal, (unsigned)cc->edges[e].label, (unsigned)cc->edges[e].label);
    for (unsigned b = 0; b < 256; b++)
        if (gram_bytes_has(&literal, b)) {
            gram_bytes one = {0};
            gram_bytes_add(&one, b, b);
            refine(cc, &one);
        }
    for (int32_t i = 0; i < cc->b->n_sets; i++)
        refine(cc, &cc->b->sets[i]);
    for (int b = 255; b >= 0; b--)
        cc->rep[cc->class_of[b]] = (uint8_t)b;
}

static bool label_takes(const compiler *cc, int32_t label, uint8_t byte)
{
    if (label >= LABEL_SET)
        return gram_bytes_has(&cc->b->sets[label - LABEL_SET], byte);
    if (label >= 0)
        return label == byte;
    return label != LABEL_EPS && gram_bytes_has(&cc->first[LABEL_RULE(label)], byte);
}

/* The bytes rule r can begin with, the first bytes of the rules it can
 * begin with a call of included; refuses a rule that matches the empty
 * string, and left recursion (a rule found again while its own first bytes
 * are being gathered). */
static int first_bytes(compiler *cc, int32_t r)
{
    if (cc->color[r] == 2)
        return 0;
    if (cc->color[r] == 1) {
        cc->failed = true;
        return llmq_errf(cc->err,
                         "grammar: rule '%s' is left-recursive (it can begin with a call "
                         "of itself)",
                         rule_name(cc, r));
    }
    cc->color[r] = 1;
    if (closure_of_state(cc, cc->rule_frag[r].in) != 0)
        return -1;
    gram_bytes first = {0};
    bool nullable = false;
    int32_t n = cc->n_buf, *set = malloc((size_t)n * sizeof *set);
    if (!set)
        return oom(cc);
    memcpy(set, cc->buf, (size_t)n * sizeof *set);
    for (int32_t i = 0; i < n && !cc->failed; i++) {
        nullable |= set[i] == cc->rule_frag[r].out;
        for (int32_t e = cc->head[set[i]]; e >= 0 && !cc->failed; e = cc->edges[e].next) {
            const int32_t l = cc->edges[e].label;
            if (l >= LABEL_SET)
                bytes_union(&first, &cc->b->sets[l - LABEL_SET]);
            else if (l >= 0)
                gram_bytes_add(&first, (unsigned)l, (unsigned)l);
            else if (l != LABEL_EPS && first_bytes(cc, LABEL_RULE(l)) == 0)
                bytes_union(&first, &cc->first[LABEL_RULE(l)]);
        }
    }
    free(set);
    if (cc->failed)
        return -1;
    if (nullable) {
        cc->failed = true;
        return llmq_errf(cc->err, "grammar: rule '%s' matches the empty string", rule_name(cc, r));
    }
    cc->first[r] = first;
    cc->color[r] = 2;
    return 0;
}

static int analyse(compiler *cc)
{
    const size_t n = (size_t)cc->n_nfa;
    cc->stamp = calloc(n, sizeof *cc->stamp);
    cc->work_stack = malloc(n * sizeof *cc->work_stack);
    cc->buf = malloc(n * sizeof *cc->buf);
    cc->buf2 = malloc(n * sizeof *cc->buf2);
    cc->first = calloc((size_t)cc->b->n_rules, sizeof *cc->first);
    cc->color = calloc((size_t)cc->b->n_rules, 1);
    if (!cc->stamp || !cc->work_stack || !cc->buf || !cc->buf2 || !cc->first || !cc->color)
        return oom(cc);
    byte_classes(cc);
    for (int32_t i = 0; i < cc->n_needed; i++)
        if (first_bytes(cc, cc->needed[i]) != 0)
            return -1;
    return 0;
}

/* ---- compilation: the subset construction -------------------------------- */

static uint32_t hash_set(int32_t rule, const int32_t *s, int32_t n)
{
    uint32_t h = 2166136261u ^ (uint32_t)rule;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

static bool same_set(const compiler *cc, int32_t state, int32_t rule, const int32_t *s, int32_t n)
{
    const dstate *d = &cc->states[state];
    return d->rule == rule && d->len == n &&
           memcmp(cc->sets + d->off, s, (size_t)n * sizeof *s) == 0;
}

static int grow_table(compiler *cc)
{
    const int32_t size = cc->table_size ? cc->table_size * 2 : 1024;
    int32_t *t = malloc((size_t)size * sizeof *t);
    if (!t)
        return oom(cc);
    memset(t, -1, (size_t)size * sizeof *t);
    for (int32_t s = 0; s < cc->n_states; s++) {
        const dstate *d = &cc->states[s];
        uint32_t h = hash_set(d->rule, cc->sets + d->off, d->len) & (uint32_t)(size - 1);
        while (t[h] >= 0)
            h = (h + 1) & (uint32_t)(size - 1);
        t[h] = s;
    }
    free(cc->table);
    cc->table = t;
    cc->table_size = size;
    return 0;
}

/* The DFA state of rule for the NFA set cc->buf (closed and sorted), added
 * (with a row of dead transitions) if new; -1 on failure. */
static int32_t state_of(compiler *cc, int32_t rule)
{
    if (2 * (cc->n_states + 1) > cc->table_size && grow_table(cc) != 0)
        return -1;
    const int32_t *s = cc->buf, n = cc->n_buf;
    uint32_t h = hash_set(rule, s, n) & (uint32_t)(cc->table_size - 1);
    for (; cc->table[h] >= 0; h = (h + 1) & (uint32_t)(cc->table_size - 1))
        if (same_set(cc, cc->table[h], rule, s, n))
            return cc->table[h];
    if (cc->n_states >= GRAMMAR_MAX_STATES)
        return too_large(cc, "automaton states", GRAMMAR_MAX_STATES);
    const int32_t id = cc->n_states, width = cc->n_classes;
    if (n > INT32_MAX - cc->n_sets ||
        !reserve(&cc->states, id + 1, &cc->cap_states, sizeof *cc->states) ||
        !reserve(&cc->sets, cc->n_sets + n, &cc->cap_sets, sizeof *cc->sets) ||
        !reserve(&cc->trans, (id + 1) * width, &cc->cap_trans, sizeof *cc->trans))
        return oom(cc);
    memcpy(cc->sets + cc->n_sets, s, (size_t)n * sizeof *s);
    cc->states[id] = (dstate){rule, cc->n_sets, n};
    cc->n_sets += n;
    for (int32_t c = 0; c < width; c++)
        cc->trans[id * width + c] = T_DEAD;
    cc->table[h] = id;
    return cc->n_states++;
}

static int32_t call_index(compiler *cc, int32_t rule, int32_t ret)
{
    for (int32_t i = 0; i < cc->n_calls; i++)
        if (cc->calls[i].rule == rule && cc->calls[i].ret == ret)
            return i;
    if (!reserve(&cc->calls, cc->n_calls + 1, &cc->cap_calls, sizeof *cc->calls))
        return oom(cc);
    cc->calls[cc->n_calls] = (gram_callsite){.rule = rule, .ret = ret};
    return cc->n_calls++;
}

static int ambiguous(compiler *cc, int32_t rule, uint8_t byte, int32_t callee, int32_t other)
{
    char b[8];
    snprintf(b, sizeof b, byte > 0x20 && byte < 0x7f ? "'%c'" : "0x%02x", byte);
    cc->failed = true;
    return llmq_errf(cc->err,
                     "grammar: rule '%s' is ambiguous: %s can begin a call of '%s' and %s%s%s",
                     rule_name(cc, rule), b, rule_name(cc, callee),
                     other >= 0 ? "a call of '" : "another alternative",
                     other >= 0 ? rule_name(cc, other) : "", other >= 0 ? "'" : "");
}

/* The move of state d on class c: the closure of the NFA states its byte
 * edges reach (into cc->buf), or the call its call edges make, whose
 * return states go to cc->buf. */
static int move(compiler *cc, int32_t d, int32_t c, int32_t *callee)
{
    const dstate st = cc->states[d];
    const uint8_t byte = cc->rep[c];
    int32_t n_plain = 0, n_ret = 0;
    *callee = -1;
    for (int32_t i = 0; i < st.len; i++)
        for (int32_t e = cc->head[cc->sets[st.off + i]]; e >= 0; e = cc->edges[e].next) {
            const nfa_edge *ed = &cc->edges[e];
            cc->work++;
            if (!label_takes(cc, ed->label, byte))
                continue;
            if (ed->label >= 0) {
                cc->buf[n_plain++] = ed->to;
                continue;
            }
            const int32_t r = LABEL_RULE(ed->label);
            if (*callee >= 0 && *callee != r)
                return ambiguous(cc, st.rule, byte, *callee, r);
            *callee = r;
            cc->buf2[n_ret++] = ed->to;
        }
    if (cc->work > GRAMMAR_MAX_WORK)
        return too_large(cc, "steps of the subset construction", GRAMMAR_MAX_WORK);
    if (n_plain > 0 && *callee >= 0)
        return ambiguous(cc, st.rule, byte, *callee, -1);
    if (*callee >= 0) {
        memcpy(cc->buf, cc->buf2, (size_t)n_ret * sizeof *cc->buf);
        n_plain = n_ret;
    }
    cc->n_buf = n_plain;
    return close_set(cc);
}

static int subset_construction(compiler *cc, int32_t *rule_start)
{
    for (int32_t i = 0; i < cc->n_needed; i++) {
        const int32_t r = cc->needed[i];
        if (closure_of_state(cc, cc->rule_frag[r].in) != 0 || (rule_start[r] = state_of(cc, r)) < 0)
            return -1;
    }
    for (int32_t d = 0; d < cc->n_states; d++)
        for (int32_t c = 0; c < cc->n_classes; c++) {
            int32_t callee;
            if (move(cc, d, c, &callee) != 0)
                return -1;
            if (cc->n_buf == 0)
                continue;
            const int32_t to = state_of(cc, cc->states[d].rule);
            const int32_t call = to >= 0 && callee >= 0 ? call_index(cc, callee, to) : to;
            if (to < 0 || call < 0)
                return -1;
            cc->trans[d * cc->n_classes + c] = callee >= 0 ? T_CALL(call) : to;
        }
    return 0;
}

/* ---- compilation: pruning and the finished automaton -------------------- */

static bool has_live_move(const grammar *g, const uint8_t *live, int32_t s)
{
    for (int32_t c = 0; c < g->n_classes; c++) {
        const int32_t t = g->trans[s * g->n_classes + c];
        if (t >= 0 ? live[t]
                   : t != T_DEAD && live[g->calls[-2 - t].start] && live[g->calls[-2 - t].ret])
            return true;
    }
    return false;
}

/* The states a transition value leads to: a move's target, or a call's
 * callee start and return state (-1 where there is none). */
static void targets_of(const grammar *g, int32_t t, int32_t to[2])
{
    to[0] = t >= 0 ? t : t == T_DEAD ? -1 : g->calls[-2 - t].start;
    to[1] = t < T_DEAD ? g->calls[-2 - t].ret : -1;
}

/* Predecessors of every state, each listed once per state it leads from,
 * in CSR form: pred[off[s]..off[s+1]). */
static int predecessors(const grammar *g, int32_t **off_out, int32_t **pred_out)
{
    const int32_t n = g->n_states, w = g->n_classes;
    int32_t *off = calloc((size_t)n + 1, sizeof *off), *last = malloc((size_t)n * sizeof *last);
    int32_t *fill = malloc((size_t)n * sizeof *fill), *pred = NULL;
    for (int pass = 0; off && last && fill && pass < 2; pass++) {
        memset(last, -1, (size_t)n * sizeof *last);
        for (int32_t s = 0; s < n; s++)
            for (int32_t c = 0; c < w; c++) {
                int32_t to[2];
                targets_of(g, g->trans[s * w + c], to);
                for (int k = 0; k < 2; k++) {
                    if (to[k] < 0 || last[to[k]] == s)
                        continue;
                    last[to[k]] = s;
                    if (pass == 0)
                        off[to[k] + 1]++;
                    else
                        pred[fill[to[k]]++] = s;
                }
            }
        if (pass == 0) {
            for (int32_t s = 0; s < n; s++)
                off[s + 1] += off[s];
            memcpy(fill, off, (size_t)n * sizeof *fill);
            if (!(pred = malloc((size_t)off[n] * sizeof *pred + 1)))
                break;
        }
    }
    free(last);
    free(fill);
    if (!off || !pred) {
        free(off);
        free(pred);
        return -1;
    }
    *off_out = off;
    *pred_out = pred;
    return 0;
}

/* Marks the states from which a complete match can be reached (backwards
 * from the accepting ones) and removes the moves into the others. */
static int prune(grammar *g, uint8_t *live)
{
    int32_t *off, *pred, *queue = malloc((size_t)g->n_states * sizeof *queue), n = 0;
    if (!queue || predecessors(g, &off, &pred) != 0) {
        free(queue);
        return -1;
    }
    for (int32_t s = 0; s < g->n_states; s++)
        if ((live[s] = g->accepting[s]))
            queue[n++] = s;
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = off[queue[i]]; k < off[queue[i] + 1]; k++) {
            const int32_t p = pred[k];
            if (!live[p] && has_live_move(g, live, p)) {
                live[p] = 1;
                queue[n++] = p;
            }
        }
    for (int32_t s = 0; s < g->n_states; s++)
        for (int32_t c = 0; c < g->n_classes; c++) {
            int32_t *t = &g->trans[s * g->n_classes + c];
            if (*t >= 0 ? !live[*t]
                        : *t != T_DEAD &&
                              !(live[g->calls[-2 - *t].start] && live[g->calls[-2 - *t].ret]))
                *t = T_DEAD;
        }
    free(off);
    free(pred);
    free(queue);
    return 0;
}

static bool is_final(const grammar *g, int32_t s)
{
    if (!g->accepting[s])
        return false;
    for (int32_t c = 0; c < g->n_classes; c++)
        if (g->trans[s * g->n_classes + c] != T_DEAD)
            return false;
    return true;
}

/* Moves the construction's tables into g and finishes the calls. */
static int finish(compiler *cc, grammar *g, const int32_t *rule_start, int32_t root)
{
    g->n_states = cc->n_states;
    g->n_classes = cc->n_classes;
    memcpy(g->class_of, cc->class_of, sizeof g->class_of);
    g->trans = cc->trans;
    cc->trans = NULL;
    g->calls = cc->calls;
    cc->calls = NULL;
    g->n_calls = cc->n_calls;
    g->start = rule_start[root];
    g->accepting = malloc((size_t)g->n_states);
    uint8_t *live = malloc((size_t)g->n_states);
    if (!g->accepting || !live) {
        free(live);
        return oom(cc);
    }
    for (int32_t s = 0; s < g->n_states; s++) {
        const dstate *d = &cc->states[s];
        const int32_t accept = cc->rule_frag[d->rule].out;
        g->accepting[s] = 0;
        for (int32_t i = 0; i < d->len; i++)
            g->accepting[s] |= cc->sets[d->off + i] == accept;
    }
    for (int32_t i = 0; i < g->n_calls; i++)
        g->calls[i].start = rule_start[g->calls[i].rule];
    int rc = prune(g, live) != 0 ? oom(cc) : 0;
    if (rc == 0 && !live[g->start]) {
        cc->failed = true;
        rc = llmq_errf(cc->err,
                       "grammar: rule '%s' matches nothing (no complete match can be "
                       "reached)",
                       rule_name(cc, root));
    }
    free(live);
    g->reach_bounded = true;
    for (int32_t i = 0; rc == 0 && i < g->n_calls; i++) {
        gram_callsite *k = &g->calls[i];
        k->tail = is_final(g, k->ret);
        if (g->accepting[k->ret] && !k->tail)
            g->reach_bounded = false;
    }
    return rc;
}

static void compiler_free(compiler *cc)
{
    free(cc->head);
    free(cc->edges);
    free(cc->rule_frag);
    free(cc->needed);
    free(cc->first);
    free(cc->color);
    free(cc->stamp);
    free(cc->work_stack);
    free(cc->buf);
    free(cc->buf2);
    free(cc->states);
    free(cc->sets);
    free(cc->table);
    free(cc->trans);
    free(cc->calls);
}

int grammar_compile(grammar **out, const grammar_builder *b, int32_t root, llmq_err *err)
{
    *out = NULL;
    if (b->failed)
        return llmq_errf(err, "grammar: an expression could not be built (out of memory or a bad "
                              "argument)");
    if (root < 0 || root >= b->n_rules)
        return llmq_errf(err, "grammar: no rule %d to start from", (int)root);
    compiler cc = {.b = b, .err = err};
    grammar *g = calloc(1, sizeof *g);
    int32_t *rule_start = malloc((size_t)b->n_rules * sizeof *rule_start);
    int rc = !g || !rule_start ? oom(&cc) : 0;
    if (rc == 0)
        rc = build_rules(&cc, root) || analyse(&cc) || subset_construction(&cc, rule_start) ||
             finish(&cc, g, rule_start, root);
    free(rule_start);
    compiler_free(&cc);
    if (rc != 0) {
        grammar_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* ---- matching ----------------------------------------------------------- */

void grammar_start(const grammar *g, grammar_stack *st)
{
    st->depth = 1;
    st->frames[0] = g->start;
}

bool grammar_step(const grammar *g, grammar_stack *st, uint8_t byte)
{
    const int32_t c = g->class_of[byte];
    for (;;) {
        int32_t *top = &st->frames[st->depth - 1];
        const int32_t t = g->trans[(size_t)*top * (size_t)g->n_classes + (size_t)c];
        if (t >= 0) {
            *top = t;
            return true;
        }
        if (t == T_DEAD) {
            /* The top returns to its caller, which takes the byte. */
            if (st->depth == 1 || !g->accepting[*top])
                return false;
            st->depth--;
            continue;
        }
        const gram_callsite *k = &g->calls[-2 - t];
        if (k->tail) {
            *top = k->start;
        } else {
            if (st->depth == GRAMMAR_MAX_DEPTH)
                return false;
            *top = k->ret;
            st->frames[st->depth++] = k->start;
        }
    }
}

bool grammar_advance(const grammar *g, grammar_stack *st, const char *bytes, size_t n)
{
    grammar_stack next = *st;
    for (size_t i = 0; i < n; i++)
        if (!grammar_step(g, &next, (uint8_t)bytes[i]))
            return false;
    *st = next;
    return true;
}

bool grammar_complete(const grammar *g, const grammar_stack *st)
{
    for (int32_t i = 0; i < st->depth; i++)
        if (!g->accepting[st->frames[i]])
            return false;
    return true;
}
