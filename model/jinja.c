/* jinja: lexer, parser and evaluator of the chat-template subset (jinja.h).
 *
 * Layout: arena and errors; strings (ropes of pieces that remember whether
 * they came from content); values; the lexer (jinja2's rules for
 * whitespace control); the parser (jinja2's grammar, one function per
 * precedence level); the evaluator; the builtins (filters, tests, methods,
 * globals), each a table row. */
#include "model/jinja.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "common/utf8.h"

/* Values nest at run time (a list in a list in a namespace...): printing,
 * comparing and tojson recurse over them, so their depth is bounded too. */
#define VALUE_MAX_DEPTH 128
/* What a template's parse may allocate (tokens and nodes of <= 1 MiB). */
#define PARSE_MAX_MEMORY (256u << 20)

/* ---- arena ---- */

typedef struct arena_chunk arena_chunk;
struct arena_chunk {
    arena_chunk *next;
    size_t cap, used;
    max_align_t data[];
};

typedef struct arena {
    arena_chunk *head;
    size_t total, limit;
} arena;

enum { ARENA_CHUNK = 64 * 1024 };

/* NULL when the limit would be passed or malloc fails. */
static void *arena_alloc(arena *a, size_t n)
{
    const size_t align = sizeof(max_align_t);
    size_t need = n == 0 ? align : (n + align - 1) / align * align;
    if (need < n)
        return NULL;
    arena_chunk *c = a->head;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > ARENA_CHUNK ? need : ARENA_CHUNK;
        if (cap > a->limit || a->total > a->limit - cap)
            return NULL;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->cap = cap;
        c->used = 0;
        a->head = c;
        a->total += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += need;
    return p;
}

static void arena_free(arena *a)
{
    while (a->head) {
        arena_chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
    a->total = 0;
}

/* ---- positions and errors ---- */

static void line_col(const char *src, size_t off, unsigned *line, unsigned *col)
{
    *line = 1;
    size_t start = 0;
    for (size_t i = 0; i < off; i++)
        if (src[i] == '\n') {
            (*line)++;
            start = i + 1;
        }
    *col = (unsigned)(off - start + 1);
}

static int vfail_at(llmq_err *err, const char *src, size_t off, const char *fmt, va_list ap)
{
    char msg[LLMQ_ERR_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    unsigned line, col;
    line_col(src, off, &line, &col);
    return llmq_errf(err, "line %u, column %u: %s", line, col, msg);
}

/* "line L, column C: ..." for the source offset off. */
static int fail_at(llmq_err *err, const char *src, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(llmq_err *err, const char *src, size_t off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(err, src, off, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- Unicode helpers ---- */

/* Python's str.isspace(), which strip(), split() and jinja2's \s follow. */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The code point at s[0..n) and its length; a byte that starts no valid
 * sequence is one character of its own (never a space, never cased). */
static size_t cp_at(const char *s, size_t n, uint32_t *cp)
{
    size_t k = utf8_decode(s, n, cp);
    if (k == 0) {
        *cp = 0xDC00u + (unsigned char)s[0];
        return 1;
    }
    return k;
}

/* Length of the last character of s[0..n), n > 0. */
static size_t cp_last_len(const char *s, size_t n)
{
    size_t k = 1;
    while (k < 4 && k < n && ((unsigned char)s[n - k] & 0xC0) == 0x80)
        k++;
    uint32_t cp;
    return utf8_decode(s + n - k, k, &cp) == k ? k : 1;
}

static size_t cp_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; count++) {
        uint32_t cp;
        i += cp_at(s + i, n - i, &cp);
    }
    return count;
}

/* Bytes of trailing Python whitespace at the end of s[0..n). */
static size_t space_suffix(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t k = cp_last_len(s, end);
        uint32_t cp;
        cp_at(s + end - k, k, &cp);
        if (!py_space(cp))
            break;
        end -= k;
    }
    return n - end;
}

static size_t space_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = cp_at(s + i, n - i, &cp);
        if (!py_space(cp))
            break;
        i += k;
    }
    return i;
}

/* ---- strings: ropes of pieces ---- */

typedef struct piece {
    const char *s;
    size_t len;
    bool content;
} piece;

typedef struct jstr {
    const piece *p;
    size_t n;   /* pieces; none of them empty */
    size_t len; /* bytes */
} jstr;

/* ---- values ---- */

typedef enum jkind {
    JV_MISSING, /* an argument not given; never seen by templates */
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_LOOP,
    JV_FUNC,
    JV_MACRO,
} jkind;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct builtin builtin;
typedef struct node node;

struct jv {
    jkind kind;
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;
        const jlist *list;
        const jdict *dict; /* JV_DICT; JV_NS points at a mutable one */
        jdict *ns;
        jloop *loop;
        struct {
            const builtin *fn;
            const jv *self;
        } func;
        const node *macro; /* its N_MACRO */
        struct {
            const char *name;  /* what was looked up, or NULL */
            const char *owner; /* type it was looked up on; NULL for a variable */
        } undef;
    };
};

struct jlist {
    size_t n;
    bool tuple;
    jv items[];
};

typedef struct jkv {
    jv key, val;
} jkv;

struct jdict {
    size_t n, cap;
    jkv *items;
};

struct jloop {
    const jlist *items;
    size_t index0;
};

static jv jv_none(void)
{
    return (jv){.kind = JV_NONE};
}
static jv jv_bool(bool b)
{
    return (jv){.kind = JV_BOOL, .b = b};
}
static jv jv_int(int64_t i)
{
    return (jv){.kind = JV_INT, .i = i};
}
static jv jv_float(double f)
{
    return (jv){.kind = JV_FLOAT, .f = f};
}
static jv jv_strv(jstr s)
{
    return (jv){.kind = JV_STR, .s = s};
}
static jv jv_undef(const char *name, const char *owner)
{
    return (jv){.kind = JV_UNDEF, .undef = {name, owner}};
}

static const char *type_name(const jv *v)
{
    switch (v->kind) {
    case JV_MISSING:
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->list->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    }
    return "?";
}

static bool is_number(const jv *v)
{
    return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT;
}

/* bool counts as int, as in Python. */
static bool is_integer(const jv *v)
{
    return v->kind == JV_BOOL || v->kind == JV_INT;
}
static int64_t int_of(const jv *v)
{
    return v->kind == JV_BOOL ? v->b : v->i;
}
static double float_of(const jv *v)
{
    return v->kind == JV_FLOAT ? v->f : (double)int_of(v);
}

/* ---- the template ---- */

struct jinja_template {
    arena a;
    char *src; /* normalized newlines, without the dropped trailing one */
    size_t len;
    node *const *body;
    size_t n_body;
};

/* ---- syntax tree ---- */

typedef enum nkind {
    /* statements */
    N_TEXT,
    N_OUTPUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SET_BLOCK,
    N_BREAK,
    N_CONTINUE,
    N_MACRO,
    /* expressions */
    N_CONST,
    N_NAME,
    N_ATTR,
    N_ITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NEG,
    N_POS,
    N_NOT,
    N_BIN,
    N_AND,
    N_OR,
    N_CMP,
    N_COND,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_CONCAT,
} nkind;

typedef enum binop { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW } binop;
typedef enum cmpop { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } cmpop;

typedef struct nodelist {
    node **v;
    size_t n;
} nodelist;

/* Arguments of a call, filter or test: positional, then keyword. */
typedef struct callargs {
    nodelist pos;
    const char **kw;
    node **kwval;
    size_t nkw;
} callargs;

struct node {
    nkind kind;
    uint32_t off; /* source offset, for errors */
    union {
        jstr text;        /* N_TEXT */
        jv value;         /* N_CONST */
        const char *name; /* N_NAME */
        node *expr;       /* N_OUTPUT, N_NEG, N_POS, N_NOT */
        struct {
            node *obj;
            const char *name;
        } attr; /* N_ATTR */
        struct {
            node *obj, *key;
        } item; /* N_ITEM */
        struct {
            node *obj, *start, *stop, *step;
        } slice; /* N_SLICE (NULL: omitted) */
        struct {
            node *fn;
            callargs args;
        } call; /* N_CALL */
        struct {
            node *obj;
            const builtin *fn;
            callargs args;
        } filter; /* N_FILTER, N_TEST */
        struct {
            binop op;
            node *a, *b;
        } bin; /* N_BIN, N_AND, N_OR */
        struct {
            node *first;
            cmpop *ops;
            node **rest;
            size_t n;
        } cmp; /* N_CMP */
        struct {
            node *test, *then, *otherwise;
        } cond;         /* N_COND (otherwise may be NULL) */
        nodelist items; /* N_LIST, N_TUPLE, N_CONCAT */
        struct {
            nodelist keys, vals;
        } dict; /* N_DICT */
        struct {
            node *test;
            nodelist then, otherwise;
        } if_;            /* N_IF; an elif is an N_IF
                             alone in otherwise */
        struct {          /* N_FOR */
            node *target; /* N_NAME or N_TUPLE of N_NAME */
            node *iter, *filter;
            nodelist body, otherwise;
        } for_;
        struct { /* N_MACRO */
            const char *name;
            const char **params;
            node **defaults; /* per parameter; NULL: none */
            size_t n_params;
            nodelist body;
        } macro;
        struct {           /* N_SET, N_SET_BLOCK */
            node *target;  /* N_NAME, N_TUPLE of N_NAME, or N_ATTR on an N_NAME */
            node *value;   /* N_SET */
            nodelist body; /* N_SET_BLOCK */
        } set;
    };
};

/* ---- lexer ---- */

typedef enum tkind {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF,
} tkind;

typedef struct token {
    tkind kind;
    uint32_t off;
    const char *s; /* TEXT, NAME, OP: source bytes; STRING: the decoded value */
    size_t len;
    int64_t i;
    double f;
} token;

typedef struct lexer {
    const char *src;
    size_t len;
    arena *a;
    llmq_err *err;
    token *v;
    size_t n, cap;
} lexer;

#define lex_fail(L, off, ...) fail_at((L)->err, (L)->src, (off), __VA_ARGS__)

static token *lex_push(lexer *L, tkind kind, size_t off, const char *s, size_t len)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        token *v = realloc(L->v, cap * sizeof *v);
        if (!v) {
            lex_fail(L, off, "out of memory");
            return NULL;
        }
        L->v = v;
        L->cap = cap;
    }
    token *t = &L->v[L->n++];
    *t = (token){.kind = kind, .off = (uint32_t)off, .s = s, .len = len};
    return t;
}

static size_t skip_space(const char *s, size_t len, size_t p)
{
    return p + space_prefix(s + p, len - p);
}

static size_t find_tag(const char *s, size_t len, size_t from)
{
    for (size_t i = from; i + 1 < len; i++)
        if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))
            return i;
    return len;
}

/* Where text [from, to) ends once a block or comment tag starting at `to`
 * lstrips it: spaces and tabs back to the start of the line go. */
static size_t lstrip_block(const char *s, size_t from, size_t to, bool line_starting)
{
    size_t l = to;
    while (l > from && (s[l - 1] == ' ' || s[l - 1] == '\t'))
        l--;
    if (l > from ? s[l - 1] == '\n' : line_starting)
        return l;
    return to;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the escapes of a string literal as Python's unicode-escape does
 * (jinja2's rule); unknown escapes keep their backslash. */
static int lex_unescape(lexer *L, size_t off, const char *s, size_t n, char *out, size_t *out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            out[o++] = s[i];
            continue;
        }
        char c = s[++i];
        const char *simple = strchr("\\'\"abfnrtv\n", c);
        if (c != 0 && simple) {
            static const char repl[] = "\\'\"\a\b\f\n\r\t\v";
            if (c != '\n')
                out[o++] = repl[simple - "\\'\"abfnrtv\n"];
            continue;
        }
        uint32_t cp = 0;
        if (c >= '0' && c <= '7') {
            size_t k = 0;
            while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                cp = cp * 8 + (uint32_t)(s[i++] - '0'), k++;
            i--;
        } else if (c == 'x' || c == 'u' || c == 'U') {
            size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            for (size_t k = 1; k <= digits; k++) {
                int h = i + k < n ? hex_value(s[i + k]) : -1;
                if (h < 0)
                    return lex_fail(L, off, "truncated \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)h;
            }
            i += digits;
        } else if (c == 'N') {
            return lex_fail(L, off, "\\N{...} escapes are not supported");
        } else {
            out[o++] = '\\';
            out[o++] = c;
            continue;
        }
        char buf[4];
        size_t k = utf8_encode(cp, buf);
        if (k == 0)
            return lex_fail(L, off, "string escape U+%04X is not a character", (unsigned)cp);
        memcpy(out + o, buf, k);
        o += k;
    }
    *out_len = o;
    return 0;
}

static int lex_string(lexer *L, size_t p, size_t *end)
{
    char q = L->src[p];
    size_t i = p + 1;
    while (i < L->len && L->src[i] != q)
        i += L->src[i] == '\\' ? 2 : 1;
    if (i >= L->len)
        return lex_fail(L, p, "unterminated string");
    char *out = arena_alloc(L->a, i - p);
    size_t n = 0;
    if (!out)
        return lex_fail(L, p, "out of memory");
    if (lex_unescape(L, p, L->src + p + 1, i - p - 1, out, &n) < 0)
        return -1;
    out[n] = '\0';
    if (!lex_push(L, TK_STRING, p, out, n))
        return -1;
    *end = i + 1;
    return 0;
}

static size_t digits_end(const char *s, size_t len, size_t p)
{
    while (p < len && (s[p] >= '0' && s[p] <= '9'))
        if (++p + 1 < len && s[p] == '_' && s[p + 1] >= '0' && s[p + 1] <= '9')
            p++;
    return p;
}

static int lex_number(lexer *L, size_t p, size_t *end)
{
    const char *s = L->src;
    size_t e = digits_end(s, L->len, p);
    bool is_float = false;
    /* jinja2's float rule does not start right after a dot (x.0.1) */
    bool after_dot = p > 0 && s[p - 1] == '.';
    if (!after_dot && e + 1 < L->len && s[e] == '.' && s[e + 1] >= '0' && s[e + 1] <= '9') {
        e = digits_end(s, L->len, e + 1);
        is_float = true;
    }
    if (!after_dot && e < L->len && (s[e] == 'e' || s[e] == 'E')) {
        size_t x = e + 1;
        if (x < L->len && (s[x] == '+' || s[x] == '-'))
            x++;
        if (x < L->len && s[x] >= '0' && s[x] <= '9') {
            e = digits_end(s, L->len, x);
            is_float = true;
        }
    }
    char buf[128];
    size_t n = 0;
    for (size_t i = p; i < e && n + 1 < sizeof buf; i++)
        if (s[i] != '_')
            buf[n++] = s[i];
    buf[n] = '\0';
    if (e - p >= sizeof buf)
        return lex_fail(L, p, "number literal too long");
    token *t = lex_push(L, is_float ? TK_FLOAT : TK_INT, p, s + p, e - p);
    if (!t)
        return -1;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        for (size_t i = 0; i < n; i++)
            if (__builtin_mul_overflow(t->i, 10, &t->i) ||
                __builtin_add_overflow(t->i, buf[i] - '0', &t->i))
                return lex_fail(L, p, "integer literal does not fit in 64 bits");
    }
    *end = e;
    return 0;
}

/* Whether a tag of kind ('{' variable, '%' block) ends at p; *after is
 * where text resumes (whitespace control and trim_blocks applied). */
static bool tag_end(const lexer *L, char kind, size_t p, size_t *after)
{
    const char *s = L->src;
    char close = kind == '{' ? '}' : '%';
    size_t left = L->len - p;
    if (left >= 3 && s[p] == '-' && s[p + 1] == close && s[p + 2] == '}') {
        *after = skip_space(s, L->len, p + 3);
        return true;
    }
    if (kind == '%' && left >= 3 && s[p] == '+' && s[p + 1] == '%' && s[p + 2] == '}') {
        *after = p + 3;
        return true;
    }
    if (left >= 2 && s[p] == close && s[p + 1] == '}') {
        *after = p + 2;
        if (kind == '%' && *after < L->len && s[*after] == '\n')
            (*after)++; /* trim_blocks */
        return true;
    }
    return false;
}

static int lex_operator(lexer *L, size_t p, int *depth, size_t *end)
{
    static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
    const char *s = L->src + p;
    size_t n = 0;
    for (size_t k = 0; k < sizeof two / sizeof two[0] && !n; k++)
        if (p + 1 < L->len && s[0] == two[k][0] && s[1] == two[k][1])
            n = 2;
    if (!n && strchr("+-*/%~<>=()[]{},.:|", s[0]) && s[0])
        n = 1;
    if (!n) {
        if ((unsigned char)s[0] < 0x20 || (unsigned char)s[0] >= 0x7f)
            return lex_fail(L, p, "unexpected byte 0x%02x in a tag", (unsigned char)s[0]);
        return lex_fail(L, p, "unexpected character '%c' in a tag", s[0]);
    }
    if (n == 1 && strchr("([{", s[0]))
        (*depth)++;
    if (n == 1 && strchr(")]}", s[0])) {
        if (*depth == 0)
            return lex_fail(L, p, "unexpected '%c'", s[0]);
        (*depth)--;
    }
    *end = p + n;
    return lex_push(L, TK_OP, p, s, n) ? 0 : -1;
}

/* The tokens of a {{ }} or {% %} tag whose body starts at p. */
static int lex_tag(lexer *L, char kind, size_t open, size_t p, size_t *end)
{
    const char *s = L->src;
    if (!lex_push(L, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, open, s + open, 2))
        return -1;
    int depth = 0;
    for (;;) {
        p = skip_space(s, L->len, p);
        if (p >= L->len)
            return lex_fail(L, open, "'%s' is never closed", kind == '{' ? "{{" : "{%");
        size_t after;
        if (depth == 0 && tag_end(L, kind, p, &after)) {
            if (!lex_push(L, kind == '{' ? TK_VAR_END : TK_BLOCK_END, p, s + p, 2))
                return -1;
            *end = after;
            return 0;
        }
        char c = s[p];
        int rc;
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t e = p + 1;
            while (e < L->len && (s[e] == '_' || (s[e] >= 'a' && s[e] <= 'z') ||
                                  (s[e] >= 'A' && s[e] <= 'Z') || (s[e] >= '0' && s[e] <= '9')))
                e++;
            rc = lex_push(L, TK_NAME, p, s + p, e - p) ? 0 : -1;
            p = e;
        } else if (c >= '0' && c <= '9') {
            rc = lex_number(L, p, &p);
        } else if (c == '\'' || c == '"') {
            rc = lex_string(L, p, &p);
        } else {
            rc = lex_operator(L, p, &depth, &p);
        }
        if (rc < 0)
            return -1;
    }
}

static int lex_comment(lexer *L, size_t open, size_t p, size_t *end)
{
    const char *s = L->src;
    const char *close = NULL;
    for (size_t i = p; i + 1 < L->len && !close; i++)
        if (s[i] == '#' && s[i + 1] == '}')
            close = s + i;
    if (!close)
        return lex_fail(L, open, "'{#' is never closed");
    size_t e = (size_t)(close - s);
    *end = e + 2;
    if (e > p && s[e - 1] == '-')
        *end = skip_space(s, L->len, e + 2);
    else if (!(e > p && s[e - 1] == '+') && *end < L->len && s[*end] == '\n')
        (*end)++; /* trim_blocks */
    return 0;
}

/* Cuts the source into tokens, applying whitespace control to the text
 * between tags exactly as jinja2's lexer does (tokeniter). */
static int lex(lexer *L)
{
    const char *s = L->src;
    size_t pos = 0;
    bool line_starting = true;
    for (;;) {
        size_t at = find_tag(s, L->len, pos);
        if (at == L->len) {
            if (at > pos && !lex_push(L, TK_TEXT, pos, s + pos, at - pos))
                return -1;
            break;
        }
        char kind = s[at + 1];
        char mod = at + 2 < L->len && (s[at + 2] == '-' || s[at + 2] == '+') ? s[at + 2] : 0;
        size_t text_end = at;
        if (mod == '-')
            text_end = at - space_suffix(s + pos, at - pos);
        else if (mod != '+' && kind != '{')
            text_end = lstrip_block(s, pos, at, line_starting);
        if (text_end > pos && !lex_push(L, TK_TEXT, pos, s + pos, text_end - pos))
            return -1;
        size_t body = at + 2 + (mod != 0), end = body;
        int rc = kind == '#' ? lex_comment(L, at, body, &end) : lex_tag(L, kind, at, body, &end);
        if (rc < 0)
            return -1;
        line_starting = s[end - 1] == '\n';
        pos = end;
    }
    return lex_push(L, TK_EOF, L->len, s + L->len, 0) ? 0 : -1;
}

/* ---- builtins, declared for the parser (defined at the end) ---- */

typedef struct R R;
typedef struct args args;
/* mode: the row's variant (which side strip() strips, which case...). */
typedef int (*builtin_fn)(R *r, const jv *self, const args *a, int mode, jv *out);

struct builtin {
    const char *name;
    builtin_fn fn;
    int mode;
};

static const builtin *find_filter(const char *name);
static const builtin *find_test(const char *name);

/* ---- parser ---- */

typedef struct parser {
    const token *t; /* the current token */
    const char *src;
    arena *a;
    llmq_err *err;
    int depth;  /* nesting of blocks and expressions */
    int loops;  /* enclosing for loops, for break/continue */
    int scopes; /* enclosing bodies that run in a scope of their own */
} parser;

#define parse_fail(P, off, ...) fail_at((P)->err, (P)->src, (off), __VA_ARGS__)

static bool tok_op(const token *t, const char *op)
{
    return t->kind == TK_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}

static bool tok_name(const token *t, const char *name)
{
    return t->kind == TK_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}

/* How a token reads in an error message. */
static void describe(const token *t, char *buf, size_t size)
{
    switch (t->kind) {
    case TK_EOF: snprintf(buf, size, "end of template"); break;
    case TK_VAR_END: snprintf(buf, size, "end of print statement"); break;
    case TK_BLOCK_END: snprintf(buf, size, "end of statement block"); break;
    case TK_STRING: snprintf(buf, size, "string"); break;
    case TK_TEXT: snprintf(buf, size, "template text"); break;
    default: snprintf(buf, size, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); break;
    }
}

static int unexpected(parser *P, const char *wanted)
{
    char got[64];
    describe(P->t, got, sizeof got);
    if (wanted)
        return parse_fail(P, P->t->off, "expected %s, got %s", wanted, got);
    return parse_fail(P, P->t->off, "unexpected %s", got);
}

static int expect_op(parser *P, const char *op)
{
    if (!tok_op(P->t, op)) {
        char want[8];
        snprintf(want, sizeof want, "'%s'", op);
        return unexpected(P, want);
    }
    P->t++;
    return 0;
}

static void *palloc(parser *P, size_t n)
{
    void *p = arena_alloc(P->a, n);
    if (!p)
        parse_fail(P, P->t->off, "template too large to parse");
    return p;
}

static node *new_node(parser *P, nkind kind, size_t off)
{
    node *n = palloc(P, sizeof *n);
    if (n) {
        memset(n, 0, sizeof *n);
        n->kind = kind;
        n->off = (uint32_t)off;
    }
    return n;
}

static char *pstrdup(parser *P, const char *s, size_t len)
{
    char *c = palloc(P, len + 1);
    if (c) {
        memcpy(c, s, len);
        c[len] = '\0';
    }
    return c;
}

/* A growable list of nodes, built in the arena. */
static int list_push(parser *P, nodelist *l, size_t *cap, node *n)
{
    if (l->n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        node **v = palloc(P, c * sizeof *v);
        if (!v)
            return -1;
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        *cap = c;
    }
    l->v[l->n++] = n;
    return 0;
}

static int enter(parser *P)
{
    if (++P->depth > JINJA_MAX_DEPTH)
        return parse_fail(P, P->t->off, "nesting deeper than %d", JINJA_MAX_DEPTH);
    return 0;
}

/* A chain (a + b + c, x|f|g, a.b.c) builds a tree as deep as it is long,
 * which evaluation recurses over: each link counts as a level.  *links
 * counts what the caller gives back with P->depth -= links. */
static bool link(parser *P, int *links)
{
    (*links)++;
    return enter(P) == 0;
}

static node *parse_expr(parser *P, bool condexpr);
static node *parse_tuple(parser *P, bool condexpr, bool explicit_parens, const char *end_name);
static node *parse_unary(parser *P, bool with_filter);
static node *parse_primary(parser *P);
static node *parse_postfix(parser *P, node *n);

static node *const_node(parser *P, size_t off, jv value)
{
    node *n = new_node(P, N_CONST, off);
    if (n)
        n->value = value;
    return n;
}

static jstr literal_str(parser *P, const char *s, size_t len)
{
    jstr out = {NULL, 0, 0};
    if (len == 0)
        return out;
    piece *p = palloc(P, sizeof *p);
    if (p) {
        *p = (piece){s, len, false};
        out = (jstr){p, 1, len};
    }
    return out;
}

static node *parse_string(parser *P)
{
    /* adjacent literals concatenate: 'a' "b" */
    const token *first = P->t;
    size_t total = 0;
    for (const token *t = first; t->kind == TK_STRING; t++)
        total += t->len;
    char *buf = palloc(P, total + 1);
    if (!buf)
        return NULL;
    size_t at = 0;
    for (; P->t->kind == TK_STRING; P->t++) {
        memcpy(buf + at, P->t->s, P->t->len);
        at += P->t->len;
    }
    buf[at] = '\0';
    jstr s = literal_str(P, buf, total);
    if (total && !s.p)
        return NULL;
    return const_node(P, first->off, jv_strv(s));
}

/* [a, b, ...] or {k: v, ...}, trailing comma allowed. */
static node *parse_list_or_dict(parser *P, bool dict)
{
    node *n = new_node(P, dict ? N_DICT : N_LIST, P->t->off);
    size_t kcap = 0, vcap = 0;
    const char *close = dict ? "}" : "]";
    if (!n)
        return NULL;
    P->t++;
    while (!tok_op(P->t, close)) {
        if ((dict ? n->dict.keys.n : n->items.n) && expect_op(P, ",") < 0)
            return NULL;
        if (tok_op(P->t, close))
            break;
        node *k = parse_expr(P, true);
        if (!k)
            return NULL;
        if (!dict) {
            if (list_push(P, &n->items, &kcap, k) < 0)
                return NULL;
            continue;
        }
        if (expect_op(P, ":") < 0)
            return NULL;
        node *v = parse_expr(P, true);
        if (!v || list_push(P, &n->dict.keys, &kcap, k) < 0 ||
            list_push(P, &n->dict.vals, &vcap, v) < 0)
            return NULL;
    }
    P->t++;
    return n;
}

static node *parse_primary(parser *P)
{
    const token *t = P->t;
    switch (t->kind) {
    case TK_NAME:
        P->t++;
        if (tok_name(t, "true") || tok_name(t, "True"))
            return const_node(P, t->off, jv_bool(true));
        if (tok_name(t, "false") || tok_name(t, "False"))
            return const_node(P, t->off, jv_bool(false));
        if (tok_name(t, "none") || tok_name(t, "None"))
            return const_node(P, t->off, jv_none());
        node *n = new_node(P, N_NAME, t->off);
        if (n && !(n->name = pstrdup(P, t->s, t->len)))
            return NULL;
        return n;
    case TK_STRING: return parse_string(P);
    case TK_INT: P->t++; return const_node(P, t->off, jv_int(t->i));
    case TK_FLOAT: P->t++; return const_node(P, t->off, jv_float(t->f));
    case TK_OP:
        if (tok_op(t, "(")) {
            P->t++;
            node *inner = parse_tuple(P, true, true, NULL);
            if (!inner || expect_op(P, ")") < 0)
                return NULL;
            return inner;
        }
        if (tok_op(t, "[") || tok_op(t, "{"))
            return parse_list_or_dict(P, tok_op(t, "{"));
        break;
    default: break;
    }
    unexpected(P, NULL);
    return NULL;
}

/* (a, b=c): positional arguments, then keywords; no *args / **kwargs. */
static int parse_call_args(parser *P, callargs *ca)
{
    size_t pcap = 0, kcap = 0;
    if (expect_op(P, "(") < 0)
        return -1;
    while (!tok_op(P->t, ")")) {
        if ((ca->pos.n || ca->nkw) && expect_op(P, ",") < 0)
            return -1;
        if (tok_op(P->t, ")"))
            break;
        if (tok_op(P->t, "*") || tok_op(P->t, "**"))
            return parse_fail(P, P->t->off, "*args and **kwargs in calls are not supported");
        if (P->t->kind == TK_NAME && tok_op(P->t + 1, "=")) {
            if (ca->nkw == kcap) {
                size_t c = kcap ? kcap * 2 : 4;
                const char **kw = palloc(P, c * sizeof *kw);
                node **kv = palloc(P, c * sizeof *kv);
                if (!kw || !kv)
                    return -1;
                if (ca->nkw) {
                    memcpy(kw, ca->kw, ca->nkw * sizeof *kw);
                    memcpy(kv, ca->kwval, ca->nkw * sizeof *kv);
                }
                ca->kw = kw;
                ca->kwval = kv;
                kcap = c;
            }
            if (!(ca->kw[ca->nkw] = pstrdup(P, P->t->s, P->t->len)))
                return -1;
            P->t += 2;
            if (!(ca->kwval[ca->nkw++] = parse_expr(P, true)))
                return -1;
            continue;
        }
        if (ca->nkw)
            return parse_fail(P, P->t->off, "positional argument after a keyword argument");
        node *arg = parse_expr(P, true);
        if (!arg || list_push(P, &ca->pos, &pcap, arg) < 0)
            return -1;
    }
    P->t++;
    return 0;
}

/* One subscript: an expression or a slice a:b:c (each part optional). */
static node *parse_subscript(parser *P, node *obj, size_t off)
{
    node *parts[3] = {NULL, NULL, NULL};
    bool is_slice = false;
    for (int k = 0; k < 3; k++) {
        if (!tok_op(P->t, ":") && !tok_op(P->t, "]") && !(parts[k] = parse_expr(P, true)))
            return NULL;
        if (k == 2 || !tok_op(P->t, ":"))
            break;
        is_slice = true;
        P->t++;
    }
    if (tok_op(P->t, ","))
        return parse_fail(P, P->t->off, "subscripts with commas are not supported"), NULL;
    if (!is_slice && !parts[0])
        return unexpected(P, "an expression"), NULL;
    if (expect_op(P, "]") < 0)
        return NULL;
    node *n = new_node(P, is_slice ? N_SLICE : N_ITEM, off);
    if (!n)
        return NULL;
    if (is_slice) {
        n->slice.obj = obj;
        n->slice.start = parts[0];
        n->slice.stop = parts[1];
        n->slice.step = parts[2];
    } else {
        n->item.obj = obj;
        n->item.key = parts[0];
    }
    return n;
}

static node *parse_postfix(parser *P, node *n)
{
    int links = 0;
    while (n) {
        const token *t = P->t;
        if ((tok_op(t, ".") || tok_op(t, "[") || tok_op(t, "(")) && !link(P, &links))
            return NULL;
        if (tok_op(t, ".")) {
            P->t++;
            if (P->t->kind == TK_NAME) {
                node *a = new_node(P, N_ATTR, t->off);
                if (!a || !(a->attr.name = pstrdup(P, P->t->s, P->t->len)))
                    return NULL;
                a->attr.obj = n;
                n = a;
            } else if (P->t->kind == TK_INT) {
                node *a = new_node(P, N_ITEM, t->off);
                if (!a || !(a->item.key = const_node(P, P->t->off, jv_int(P->t->i))))
                    return NULL;
                a->item.obj = n;
                n = a;
            } else {
                return unexpected(P, "a name or a number after '.'"), NULL;
            }
            P->t++;
        } else if (tok_op(t, "[")) {
            P->t++;
            n = parse_subscript(P, n, t->off);
        } else if (tok_op(t, "(")) {
            node *c = new_node(P, N_CALL, n->off);
            if (!c || parse_call_args(P, &c->call.args) < 0)
                return NULL;
            c->call.fn = n;
            n = c;
        } else {
            break;
        }
    }
    P->depth -= links;
    return n;
}

/* name or name.name... (filter and test names) */
static const char *parse_dotted_name(parser *P)
{
    if (P->t->kind != TK_NAME)
        return unexpected(P, "a name"), NULL;
    const char *start = P->t->s;
    const token *last = P->t++;
    while (tok_op(P->t, ".") && P->t[1].kind == TK_NAME) {
        last = P->t + 1;
        P->t += 2;
    }
    return pstrdup(P, start, (size_t)(last->s + last->len - start));
}

/* `| name` or `is [not] name`, the builtin looked up: unknown names are
 * refused here, as jinja2 refuses them when it compiles a template. */
static node *parse_applied(parser *P, node *obj, nkind kind, bool *negated)
{
    const token *t = P->t++; /* '|' or 'is' */
    *negated = kind == N_TEST && tok_name(P->t, "not");
    if (*negated)
        P->t++;
    size_t name_off = P->t->off;
    const char *name = parse_dotted_name(P);
    if (!name)
        return NULL;
    const builtin *f = kind == N_FILTER ? find_filter(name) : find_test(name);
    if (!f)
        return parse_fail(P, name_off, "unknown %s '%s'", kind == N_FILTER ? "filter" : "test",
                          name),
               NULL;
    node *n = new_node(P, kind, t->off);
    if (n) {
        n->filter.obj = obj;
        n->filter.fn = f;
    }
    return n;
}

static node *parse_filter(parser *P, node *obj)
{
    bool negated;
    node *n = parse_applied(P, obj, N_FILTER, &negated);
    if (n && tok_op(P->t, "(") && parse_call_args(P, &n->filter.args) < 0)
        return NULL;
    return n;
}

static bool starts_test_arg(const token *t)
{
    if (t->kind == TK_NAME)
        return !tok_name(t, "else") && !tok_name(t, "or") && !tok_name(t, "and");
    return t->kind == TK_STRING || t->kind == TK_INT || t->kind == TK_FLOAT || tok_op(t, "(") ||
           tok_op(t, "[") || tok_op(t, "{");
}

static node *parse_test(parser *P, node *obj)
{
    bool negated;
    size_t off = P->t->off;
    node *n = parse_applied(P, obj, N_TEST, &negated);
    if (!n)
        return NULL;
    if (tok_op(P->t, "(")) {
        if (parse_call_args(P, &n->filter.args) < 0)
            return NULL;
    } else if (starts_test_arg(P->t)) {
        if (tok_name(P->t, "is"))
            return parse_fail(P, P->t->off, "tests cannot be chained with 'is'"), NULL;
        size_t cap = 0;
        node *arg = parse_postfix(P, parse_primary(P));
        if (!arg || list_push(P, &n->filter.args.pos, &cap, arg) < 0)
            return NULL;
    }
    if (!negated)
        return n;
    node *no = new_node(P, N_NOT, off);
    if (no)
        no->expr = n;
    return no;
}

static node *parse_unary(parser *P, bool with_filter)
{
    const token *t = P->t;
    node *n;
    if (enter(P) < 0)
        return NULL;
    if (tok_op(t, "-") || tok_op(t, "+")) {
        P->t++;
        n = new_node(P, tok_op(t, "-") ? N_NEG : N_POS, t->off);
        if (n && !(n->expr = parse_unary(P, false)))
            return NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    int links = 0;
    while (n && with_filter) {
        if ((tok_op(P->t, "|") || tok_name(P->t, "is") || tok_op(P->t, "(")) && !link(P, &links))
            return NULL;
        if (tok_op(P->t, "|"))
            n = parse_filter(P, n);
        else if (tok_name(P->t, "is"))
            n = parse_test(P, n);
        else if (tok_op(P->t, "(")) {
            node *c = new_node(P, N_CALL, n->off);
            if (!c || parse_call_args(P, &c->call.args) < 0)
                return NULL;
            c->call.fn = n;
            n = c;
        } else
            break;
    }
    P->depth -= links + 1;
    return n;
}

static node *bin_node(parser *P, nkind kind, binop op, size_t off, node *a, node *b)
{
    if (!a || !b)
        return NULL;
    node *n = new_node(P, kind, off);
    if (n) {
        n->bin.op = op;
        n->bin.a = a;
        n->bin.b = b;
    }
    return n;
}

static node *parse_pow(parser *P)
{
    node *n = parse_unary(P, true);
    int links = 0;
    while (n && tok_op(P->t, "**")) {
        size_t off = P->t++->off;
        n = link(P, &links) ? bin_node(P, N_BIN, OP_POW, off, n, parse_unary(P, true)) : NULL;
    }
    P->depth -= links;
    return n;
}

static node *parse_math2(parser *P)
{
    static const struct {
        const char *op;
        binop code;
    } ops[] = {{"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FLOORDIV}, {"%", OP_MOD}};
    node *n = parse_pow(P);
    int links = 0;
    while (n) {
        size_t k = 0;
        while (k < 4 && !tok_op(P->t, ops[k].op))
            k++;
        if (k == 4)
            break;
        size_t off = P->t++->off;
        n = link(P, &links) ? bin_node(P, N_BIN, ops[k].code, off, n, parse_pow(P)) : NULL;
    }
    P->depth -= links;
    return n;
}

static node *parse_concat(parser *P)
{
    size_t off = P->t->off;
    node *first = parse_math2(P);
    if (!first || !tok_op(P->t, "~"))
        return first;
    node *n = new_node(P, N_CONCAT, off);
    size_t cap = 0;
    if (!n || list_push(P, &n->items, &cap, first) < 0)
        return NULL;
    while (tok_op(P->t, "~")) {
        P->t++;
        node *next = parse_math2(P);
        if (!next || list_push(P, &n->items, &cap, next) < 0)
            return NULL;
    }
    return n;
}

static node *parse_math1(parser *P)
{
    node *n = parse_concat(P);
    int links = 0;
    while (n && (tok_op(P->t, "+") || tok_op(P->t, "-"))) {
        binop op = tok_op(P->t, "+") ? OP_ADD : OP_SUB;
        size_t off = P->t++->off;
        n = link(P, &links) ? bin_node(P, N_BIN, op, off, n, parse_concat(P)) : NULL;
    }
    P->depth -= links;
    return n;
}

static bool compare_op(parser *P, cmpop *op)
{
    static const struct {
        const char *s;
        cmpop op;
    } ops[] = {{"==", CMP_EQ}, {"!=", CMP_NE}, {"<", CMP_LT},
               {"<=", CMP_LE}, {">", CMP_GT},  {">=", CMP_GE}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (tok_op(P->t, ops[k].s)) {
            *op = ops[k].op;
            P->t++;
            return true;
        }
    if (tok_name(P->t, "in")) {
        *op = CMP_IN;
        P->t++;
        return true;
    }
    if (tok_name(P->t, "not") && tok_name(P->t + 1, "in")) {
        *op = CMP_NOTIN;
        P->t += 2;
        return true;
    }
    return false;
}

static node *parse_compare(parser *P)
{
    size_t off = P->t->off;
    node *first = parse_math1(P);
    cmpop op;
    if (!first || !compare_op(P, &op))
        return first;
    node *n = new_node(P, N_CMP, off);
    if (!n)
        return NULL;
    n->cmp.first = first;
    size_t cap = 0;
    do {
        if (n->cmp.n == cap) {
            size_t c = cap ? cap * 2 : 2;
            cmpop *ops = palloc(P, c * sizeof *ops);
            node **rest = palloc(P, c * sizeof *rest);
            if (!ops || !rest)
                return NULL;
            if (n->cmp.n) {
                memcpy(ops, n->cmp.ops, n->cmp.n * sizeof *ops);
                memcpy(rest, n->cmp.rest, n->cmp.n * sizeof *rest);
            }
            n->cmp.ops = ops;
            n->cmp.rest = rest;
            cap = c;
        }
        n->cmp.ops[n->cmp.n] = op;
        if (!(n->cmp.rest[n->cmp.n++] = parse_math1(P)))
            return NULL;
    } while (compare_op(P, &op));
    return n;
}

static node *parse_not(parser *P)
{
    if (!tok_name(P->t, "not"))
        return parse_compare(P);
    size_t off = P->t++->off;
    if (enter(P) < 0)
        return NULL;
    node *inner = parse_not(P);
    P->depth--;
    node *n = inner ? new_node(P, N_NOT, off) : NULL;
    if (n)
        n->expr = inner;
    return n;
}

/* a or b over a and b over not a: one level each, left to right */
static node *parse_logic(parser *P, bool is_or)
{
    node *n = is_or ? parse_logic(P, false) : parse_not(P);
    int links = 0;
    while (n && tok_name(P->t, is_or ? "or" : "and")) {
        size_t off = P->t++->off;
        node *right = !link(P, &links) ? NULL : is_or ? parse_logic(P, false) : parse_not(P);
        n = bin_node(P, is_or ? N_OR : N_AND, OP_ADD, off, n, right);
    }
    P->depth -= links;
    return n;
}

/* a if b else c, and a if b (undefined when b is false) */
static node *parse_expr(parser *P, bool condexpr)
{
    if (enter(P) < 0)
        return NULL;
    node *n = parse_logic(P, true);
    int links = 0;
    while (n && condexpr && tok_name(P->t, "if")) {
        if (!link(P, &links))
            return NULL;
        node *c = new_node(P, N_COND, P->t->off);
        P->t++;
        if (!c || !(c->cond.test = parse_logic(P, true)))
            return NULL;
        c->cond.then = n;
        if (tok_name(P->t, "else")) {
            P->t++;
            if (!(c->cond.otherwise = parse_expr(P, true)))
                return NULL;
        }
        n = c;
    }
    P->depth -= links + 1;
    return n;
}

static bool tuple_end(const parser *P, const char *end_name)
{
    const token *t = P->t;
    return t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || tok_op(t, ")") ||
           (end_name && tok_name(t, end_name));
}

/* An expression, or a tuple when commas separate several. */
static node *parse_tuple(parser *P, bool condexpr, bool explicit_parens, const char *end_name)
{
    size_t off = P->t->off, cap = 0;
    nodelist items = {NULL, 0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && expect_op(P, ",") < 0)
            return NULL;
        if (tuple_end(P, end_name))
            break;
        node *n = parse_expr(P, condexpr);
        if (!n || list_push(P, &items, &cap, n) < 0)
            return NULL;
        if (!tok_op(P->t, ","))
            break;
        is_tuple = true;
    }
    if (!is_tuple && items.n)
        return items.v[0];
    if (!is_tuple && !explicit_parens)
        return unexpected(P, "an expression"), NULL;
    node *t = new_node(P, N_TUPLE, off);
    if (t)
        t->items = items;
    return t;
}

/* ---- statements ---- */

static int parse_body(parser *P, nodelist *body, const char *const *ends, size_t open);

static int expect_block_end(parser *P)
{
    if (P->t->kind != TK_BLOCK_END)
        return unexpected(P, "end of statement block");
    P->t++;
    return 0;
}

/* The names a for or set assigns: a name, a tuple of names, or (set only)
 * namespace.attr. */
static node *parse_target(parser *P, bool with_namespace, const char *end_name)
{
    size_t off = P->t->off, cap = 0;
    if (with_namespace && P->t->kind == TK_NAME && tok_op(P->t + 1, ".")) {
        node *ns = new_node(P, N_NAME, off), *a = new_node(P, N_ATTR, off);
        if (!ns || !a || !(ns->name = pstrdup(P, P->t->s, P->t->len)))
            return NULL;
        P->t += 2;
        if (P->t->kind != TK_NAME)
            return unexpected(P, "an attribute name"), NULL;
        if (!(a->attr.name = pstrdup(P, P->t->s, P->t->len)))
            return NULL;
        a->attr.obj = ns;
        P->t++;
        return a;
    }
    bool parens = tok_op(P->t, "(");
    if (parens)
        P->t++;
    nodelist names = {NULL, 0};
    for (;;) {
        if (P->t->kind != TK_NAME || tok_name(P->t, "true") || tok_name(P->t, "false") ||
            tok_name(P->t, "none"))
            return unexpected(P, "a variable name"), NULL;
        node *n = new_node(P, N_NAME, P->t->off);
        if (!n || !(n->name = pstrdup(P, P->t->s, P->t->len)) || list_push(P, &names, &cap, n) < 0)
            return NULL;
        P->t++;
        if (!tok_op(P->t, ","))
            break;
        P->t++;
        if ((parens && tok_op(P->t, ")")) || (end_name && tok_name(P->t, end_name)) ||
            tok_op(P->t, "="))
            break;
    }
    if (parens && expect_op(P, ")") < 0)
        return NULL;
    if (names.n == 1 && !parens)
        return names.v[0];
    node *t = new_node(P, N_TUPLE, off);
    if (t)
        t->items = names;
    return t;
}

static node *parse_if(parser *P, size_t off)
{
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const end_only[] = {"endif", NULL};
    node *n = new_node(P, N_IF, off);
    if (!n || !(n->if_.test = parse_tuple(P, false, false, NULL)) || expect_block_end(P) < 0 ||
        parse_body(P, &n->if_.then, ends, off) < 0)
        return NULL;
    const token *t = P->t++; /* the name parse_body stopped at */
    if (tok_name(t, "elif")) {
        node *elif = parse_if(P, t->off);
        size_t cap = 0;
        if (!elif || list_push(P, &n->if_.otherwise, &cap, elif) < 0)
            return NULL;
        return n; /* the innermost elif consumed the endif */
    }
    if (tok_name(t, "else") &&
        (expect_block_end(P) < 0 || parse_body(P, &n->if_.otherwise, end_only, off) < 0))
        return NULL;
    if (tok_name(t, "else"))
        P->t++;
    return n;
}

static node *parse_for(parser *P, size_t off)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const end_only[] = {"endfor", NULL};
    node *n = new_node(P, N_FOR, off);
    if (!n || !(n->for_.target = parse_target(P, false, "in")))
        return NULL;
    if (!tok_name(P->t, "in"))
        return unexpected(P, "'in'"), NULL;
    P->t++;
    if (!(n->for_.iter = parse_tuple(P, false, false, "recursive")))
        return NULL;
    if (tok_name(P->t, "if")) {
        P->t++;
        if (!(n->for_.filter = parse_expr(P, true)))
            return NULL;
    }
    if (tok_name(P->t, "recursive"))
        return parse_fail(P, P->t->off, "recursive loops are not supported"), NULL;
    P->loops++;
    P->scopes++;
    if (expect_block_end(P) < 0 || parse_body(P, &n->for_.body, ends, off) < 0)
        return NULL;
    P->loops--;
    const token *t = P->t++;
    if (tok_name(t, "else") &&
        (expect_block_end(P) < 0 || parse_body(P, &n->for_.otherwise, end_only, off) < 0))
        return NULL;
    P->scopes--;
    if (tok_name(t, "else"))
        P->t++;
    return n;
}

static node *parse_set(parser *P, size_t off)
{
    static const char *const ends[] = {"endset", NULL};
    node *target = parse_target(P, true, NULL);
    if (!target)
        return NULL;
    if (tok_op(P->t, "=")) {
        P->t++;
        node *n = new_node(P, N_SET, off);
        if (!n || !(n->set.value = parse_tuple(P, true, false, NULL)))
            return NULL;
        n->set.target = target;
        return n;
    }
    if (tok_op(P->t, "|"))
        return parse_fail(P, P->t->off, "filters on a {%% set %%} block are not supported"), NULL;
    node *n = new_node(P, N_SET_BLOCK, off);
    P->scopes++;
    if (!n || expect_block_end(P) < 0 || parse_body(P, &n->set.body, ends, off) < 0)
        return NULL;
    P->scopes--;
    P->t++;
    n->set.target = target;
    return n;
}

/* {% macro name(a, b=default) %}...{% endmacro %} */
static node *parse_macro(parser *P, size_t off)
{
    static const char *const ends[] = {"endmacro", NULL};
    node *n = new_node(P, N_MACRO, off);
    size_t cap = 0;
    if (!n)
        return NULL;
    /* a macro sees the template's top level; one defined in a loop or in
     * another macro would need to close over a scope that ends */
    if (P->scopes > 0)
        return parse_fail(P, off,
                          "macros are supported at the top level only, not inside "
                          "for, macro or set blocks"),
               NULL;
    if (P->t->kind != TK_NAME)
        return unexpected(P, "a macro name"), NULL;
    if (!(n->macro.name = pstrdup(P, P->t->s, P->t->len)))
        return NULL;
    P->t++;
    if (expect_op(P, "(") < 0)
        return NULL;
    while (!tok_op(P->t, ")")) {
        if (n->macro.n_params && expect_op(P, ",") < 0)
            return NULL;
        if (P->t->kind != TK_NAME)
            return unexpected(P, "a parameter name"), NULL;
        if (n->macro.n_params == cap) {
            size_t c = cap ? cap * 2 : 4;
            const char **names = palloc(P, c * sizeof *names);
            node **defaults = palloc(P, c * sizeof *defaults);
            if (!names || !defaults)
                return NULL;
            if (cap) {
                memcpy(names, n->macro.params, cap * sizeof *names);
                memcpy(defaults, n->macro.defaults, cap * sizeof *defaults);
            }
            n->macro.params = names;
            n->macro.defaults = defaults;
            cap = c;
        }
        size_t i = n->macro.n_params++;
        if (!(n->macro.params[i] = pstrdup(P, P->t->s, P->t->len)))
            return NULL;
        P->t++;
        n->macro.defaults[i] = NULL;
        if (tok_op(P->t, "=")) {
            P->t++;
            if (!(n->macro.defaults[i] = parse_expr(P, true)))
                return NULL;
        }
    }
    P->t++;
    P->scopes++;
    if (expect_block_end(P) < 0 || parse_body(P, &n->macro.body, ends, off) < 0)
        return NULL;
    P->scopes--;
    P->t++;
    return n;
}

static node *parse_statement(parser *P)
{
    const token *t = P->t;
    if (t->kind != TK_NAME)
        return unexpected(P, "a tag name"), NULL;
    P->t++;
    if (tok_name(t, "if"))
        return parse_if(P, t->off);
    if (tok_name(t, "for"))
        return parse_for(P, t->off);
    if (tok_name(t, "set"))
        return parse_set(P, t->off);
    if (tok_name(t, "macro"))
        return parse_macro(P, t->off);
    if (tok_name(t, "break") || tok_name(t, "continue")) {
        if (P->loops == 0)
            return parse_fail(P, t->off, "'%.*s' outside a for loop", (int)t->len, t->s), NULL;
        return new_node(P, tok_name(t, "break") ? N_BREAK : N_CONTINUE, t->off);
    }
    static const char *const known[] = {"call",       "filter", "block", "extends", "include",
                                        "import",     "from",   "with",  "raw",     "autoescape",
                                        "generation", "do",     NULL};
    for (size_t k = 0; known[k]; k++)
        if (tok_name(t, known[k]))
            return parse_fail(P, t->off, "the '%s' tag is not supported", known[k]), NULL;
    return parse_fail(P, t->off, "unknown tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s),
           NULL;
}

static bool is_end(const token *t, const char *const *ends)
{
    for (size_t k = 0; ends && ends[k]; k++)
        if (tok_name(t, ends[k]))
            return true;
    return false;
}

/* Statements up to a block tag named in ends (NULL: up to the end of the
 * template; ends[0] is the closing tag); leaves P->t on that tag's name. */
static int parse_body(parser *P, nodelist *body, const char *const *ends, size_t open)
{
    size_t cap = 0;
    if (enter(P) < 0)
        return -1;
    for (;;) {
        const token *t = P->t;
        node *n = NULL;
        if (t->kind == TK_EOF) {
            if (!ends)
                break;
            return parse_fail(P, open, "this block is never closed (no '%s')", ends[0]);
        }
        if (t->kind == TK_TEXT) {
            n = new_node(P, N_TEXT, t->off);
            if (!n)
                return -1;
            n->text = literal_str(P, t->s, t->len);
            if (!n->text.p)
                return -1;
            P->t++;
        } else if (t->kind == TK_VAR_BEGIN) {
            P->t++;
            n = new_node(P, N_OUTPUT, t->off);
            if (!n || !(n->expr = parse_tuple(P, true, false, NULL)))
                return -1;
            if (P->t->kind != TK_VAR_END)
                return unexpected(P, "end of print statement");
            P->t++;
        } else if (t->kind == TK_BLOCK_BEGIN) {
            P->t++;
            if (is_end(P->t, ends))
                break;
            static const char *const enders[] = {"endif", "endfor",   "endset",   "elif",
                                                 "else",  "endmacro", "endblock", NULL};
            if (is_end(P->t, enders))
                return unexpected(P, NULL);
            if (!(n = parse_statement(P)) || expect_block_end(P) < 0)
                return -1;
        } else {
            return unexpected(P, NULL);
        }
        if (!n || list_push(P, body, &cap, n) < 0)
            return -1;
    }
    P->depth--;
    return 0;
}

/* jinja2 reads \r\n and \r as \n, and drops one newline at the very end
 * (keep_trailing_newline=False). */
static size_t normalize_newlines(char *dst, const char *src, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            dst[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            dst[o++] = src[i];
        }
    }
    if (o > 0 && dst[o - 1] == '\n')
        o--;
    dst[o] = '\0';
    return o;
}

int jinja_parse(jinja_template **out, const char *src, size_t len, llmq_err *err)
{
    *out = NULL;
    if (len > JINJA_MAX_SOURCE)
        return llmq_errf(err, "template is %zu bytes, more than the %u allowed", len,
                         JINJA_MAX_SOURCE);
    size_t valid = utf8_valid_prefix(src, len);
    if (valid < len) {
        unsigned line, col;
        line_col(src, valid, &line, &col);
        return llmq_errf(err, "line %u, column %u: template is not valid UTF-8", line, col);
    }
    jinja_template *t = calloc(1, sizeof *t);
    if (!t)
        return llmq_errf(err, "out of memory");
    t->a.limit = PARSE_MAX_MEMORY;
    t->src = arena_alloc(&t->a, len + 1);
    if (!t->src) {
        jinja_free(t);
        return llmq_errf(err, "out of memory");
    }
    t->len = normalize_newlines(t->src, src, len);
    lexer L = {.src = t->src, .len = t->len, .a = &t->a, .err = err};
    int rc = lex(&L);
    if (rc == 0) {
        parser P = {.t = L.v, .src = t->src, .a = &t->a, .err = err};
        nodelist body = {NULL, 0};
        rc = parse_body(&P, &body, NULL, 0);
        t->body = body.v;
        t->n_body = body.n;
    }
    free(L.v);
    if (rc < 0) {
        jinja_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(jinja_template *t)
{
    if (!t)
        return;
    arena_free(&t->a);
    free(t);
}

/* ---- rendering: state, errors, builders ---- */

struct args {
    const jv *pos;
    size_t npos;
    const char *const *kw;
    const jv *kwv;
    size_t nkw;
};

/* A scope: the template's top level, or one iteration of a for loop. */
typedef struct frame frame;
struct frame {
    frame *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
};

typedef struct run {
    size_t len;
    bool content;
} run;

/* Copies bytes, remembering which runs came from content. */
typedef struct sb {
    R *r;
    char *buf;
    size_t len, cap;
    run *runs;
    size_t n_runs, runs_cap;
    bool failed;
} sb;

/* Joins strings without copying their bytes. */
typedef struct ropeb {
    R *r;
    piece *p;
    size_t n, cap, len;
    bool failed;
} ropeb;

struct R {
    const jinja_template *t;
    const jinja_env *env;
    arena a;
    llmq_err *err;
    const node *at; /* the node being evaluated, for error positions */
    uint64_t steps;
    frame *scope;
    frame *root;     /* the template's top level, where macros look names up */
    int macro_depth; /* macro calls in progress */
    jv *vars;        /* env->vars as values */
    sb *out;
};

static int rfail(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rfail(R *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(r->err, r->t->src, r->at ? r->at->off : 0, fmt, ap);
    va_end(ap);
    return -1;
}

static void *ralloc(R *r, size_t n)
{
    void *p = arena_alloc(&r->a, n);
    if (!p)
        rfail(r, "the render needs more than %zu MiB of memory", r->env->limits.max_memory >> 20);
    return p;
}

static int step(R *r)
{
    if (++r->steps > r->env->limits.max_steps)
        return rfail(r, "the render takes more than %llu steps",
                     (unsigned long long)r->env->limits.max_steps);
    return 0;
}

/* Any string, temporary or output, is bounded by the output limit. */
static bool fits(R *r, size_t have, size_t extra)
{
    size_t limit = r->env->limits.max_output;
    if (extra > limit || have > limit - extra) {
        rfail(r, "text longer than the output limit of %zu bytes", limit);
        return false;
    }
    return true;
}

/* Grows an arena array of elem-sized items to hold one more. */
static bool grow(R *r, void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 8;
    void *nv = ralloc(r, c * elem);
    if (!nv)
        return false;
    if (n)
        memcpy(nv, *v, n * elem);
    *v = nv;
    *cap = c;
    return true;
}

static void sb_init(sb *b, R *r)
{
    memset(b, 0, sizeof *b);
    b->r = r;
}

static void sb_put(sb *b, const char *s, size_t n, bool content)
{
    if (n == 0 || b->failed)
        return;
    if (!fits(b->r, b->len, n)) {
        b->failed = true;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n + 64;
        char *nb = ralloc(b->r, cap);
        if (!nb) {
            b->failed = true;
            return;
        }
        if (b->len)
            memcpy(nb, b->buf, b->len);
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    if (b->n_runs && b->runs[b->n_runs - 1].content == content) {
        b->runs[b->n_runs - 1].len += n;
        return;
    }
    if (!grow(b->r, (void **)&b->runs, &b->runs_cap, b->n_runs, sizeof *b->runs)) {
        b->failed = true;
        return;
    }
    b->runs[b->n_runs++] = (run){n, content};
}

static void sb_cstr(sb *b, const char *s)
{
    sb_put(b, s, strlen(s), false);
}

static void sb_str(sb *b, jstr s)
{
    for (size_t i = 0; i < s.n; i++)
        sb_put(b, s.p[i].s, s.p[i].len, s.p[i].content);
}

static void sb_int(sb *b, int64_t i)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)i);
    sb_cstr(b, num);
}

static void sb_fail(sb *b)
{
    b->failed = true;
}

static int sb_done(sb *b, jstr *out)
{
    if (b->failed)
        return -1;
    *out = (jstr){NULL, 0, b->len};
    if (b->n_runs == 0)
        return 0;
    piece *p = ralloc(b->r, b->n_runs * sizeof *p);
    if (!p)
        return -1;
    size_t at = 0;
    for (size_t i = 0; i < b->n_runs; i++) {
        p[i] = (piece){b->buf + at, b->runs[i].len, b->runs[i].content};
        at += b->runs[i].len;
    }
    out->p = p;
    out->n = b->n_runs;
    return 0;
}

static void rb_init(ropeb *b, R *r)
{
    memset(b, 0, sizeof *b);
    b->r = r;
}

static void rb_add(ropeb *b, jstr s)
{
    if (b->failed || s.len == 0)
        return;
    if (!fits(b->r, b->len, s.len)) {
        b->failed = true;
        return;
    }
    for (size_t i = 0; i < s.n; i++) {
        const piece *q = &s.p[i];
        piece *last = b->n ? &b->p[b->n - 1] : NULL;
        if (last && last->content == q->content && last->s + last->len == q->s) {
            last->len += q->len;
            continue;
        }
        if (!grow(b->r, (void **)&b->p, &b->cap, b->n, sizeof *b->p)) {
            b->failed = true;
            return;
        }
        b->p[b->n++] = *q;
    }
    b->len += s.len;
}

static int rb_done(ropeb *b, jstr *out)
{
    if (b->failed)
        return -1;
    *out = (jstr){b->p, b->n, b->len};
    return 0;
}

/* ---- strings ---- */

static int str_make(R *r, const char *s, size_t n, bool content, jstr *out)
{
    *out = (jstr){NULL, 0, 0};
    if (n == 0)
        return 0;
    piece *p = ralloc(r, sizeof *p);
    if (!p)
        return -1;
    *p = (piece){s, n, content};
    *out = (jstr){p, 1, n};
    return 0;
}

static int str_cat(R *r, jstr a, jstr b, jstr *out)
{
    if (a.len == 0 || b.len == 0) {
        *out = a.len ? a : b;
        return 0;
    }
    ropeb rb;
    rb_init(&rb, r);
    rb_add(&rb, a);
    rb_add(&rb, b);
    return rb_done(&rb, out);
}

/* A NUL-terminated copy, for names and formats. */
static int str_cstr(R *r, jstr s, char **out)
{
    char *buf = ralloc(r, s.len + 1);
    if (!buf)
        return -1;
    size_t at = 0;
    for (size_t i = 0; i < s.n; i++) {
        memcpy(buf + at, s.p[i].s, s.p[i].len);
        at += s.p[i].len;
    }
    buf[at] = '\0';
    *out = buf;
    return 0;
}

/* The bytes of s in one place (not NUL-terminated): a single piece as it
 * is, several joined in a copy. */
static int str_flat(R *r, jstr s, const char **out)
{
    if (s.n <= 1) {
        *out = s.n ? s.p[0].s : "";
        return 0;
    }
    char *copy;
    int rc = str_cstr(r, s, &copy);
    *out = copy;
    return rc;
}

/* Bytes [off, off + len) of s, keeping each piece's origin. */
static int str_sub(R *r, jstr s, size_t off, size_t len, jstr *out)
{
    *out = (jstr){NULL, 0, 0};
    if (len == 0)
        return 0;
    size_t first = 0, skip = off;
    while (skip >= s.p[first].len)
        skip -= s.p[first++].len;
    size_t last = first, need = len + skip;
    while (need > s.p[last].len)
        need -= s.p[last++].len;
    size_t n = last - first + 1;
    piece *p = ralloc(r, n * sizeof *p);
    if (!p)
        return -1;
    memcpy(p, s.p + first, n * sizeof *p);
    p[0].s += skip;
    p[0].len -= skip;
    p[n - 1].len = n == 1 ? len : need;
    *out = (jstr){p, n, len};
    return 0;
}

/* Byte order of UTF-8 is code point order, as Python compares str. */
static int str_cmp(jstr a, jstr b)
{
    size_t ia = 0, ib = 0, oa = 0, ob = 0;
    while (ia < a.n && ib < b.n) {
        size_t k = a.p[ia].len - oa;
        if (b.p[ib].len - ob < k)
            k = b.p[ib].len - ob;
        int c = memcmp(a.p[ia].s + oa, b.p[ib].s + ob, k);
        if (c)
            return c;
        oa += k;
        ob += k;
        if (oa == a.p[ia].len)
            ia++, oa = 0;
        if (ob == b.p[ib].len)
            ib++, ob = 0;
    }
    return (ia < a.n) - (ib < b.n);
}

static bool str_is(jstr s, const char *c)
{
    size_t n = strlen(c);
    jstr cs = {&(piece){c, n, false}, n ? 1 : 0, n};
    return s.len == n && str_cmp(s, cs) == 0;
}

static size_t str_count(jstr s)
{
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++)
        n += cp_count(s.p[i].s, s.p[i].len);
    return n;
}

/* Each character of s as a piece of its own. */
static int str_chars(R *r, jstr s, piece **out, size_t *n)
{
    *n = str_count(s);
    *out = NULL;
    if (*n == 0)
        return 0;
    piece *c = ralloc(r, *n * sizeof *c);
    if (!c)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        for (size_t at = 0; at < s.p[i].len;) {
            uint32_t cp;
            size_t len = cp_at(s.p[i].s + at, s.p[i].len - at, &cp);
            c[k++] = (piece){s.p[i].s + at, len, s.p[i].content};
            at += len;
        }
    *out = c;
    return 0;
}

/* Byte offset of character k of s (k <= its length), walking the rope. */
static size_t str_char_offset(jstr s, size_t k)
{
    size_t off = 0;
    for (size_t i = 0; i < s.n && k > 0; i++)
        for (size_t at = 0; at < s.p[i].len && k > 0; k--) {
            uint32_t cp;
            size_t len = cp_at(s.p[i].s + at, s.p[i].len - at, &cp);
            at += len;
            off += len;
        }
    return off;
}

/* ---- values: truth, text, equality, order ---- */

static bool truthy(const jv *v)
{
    switch (v->kind) {
    case JV_MISSING:
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0;
    case JV_STR: return v->s.len > 0;
    case JV_LIST: return v->list->n > 0;
    case JV_DICT: return v->dict->n > 0;
    default: return true;
    }
}

/* Python's repr(float): the shortest digits that read back the same. */
static void float_repr(double x, char *buf, size_t size)
{
    if (isnan(x)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, size, x < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e is [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    const char *sign = neg ? "-" : "";
    if (exp < -4 || exp >= 16)
        snprintf(buf, size, "%s%c%s%.*se%c%02d", sign, digits[0], nd > 1 ? "." : "", (int)nd - 1,
                 digits + 1, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    else if (exp < 0)
        snprintf(buf, size, "%s0.%.*s%.*s", sign, -exp - 1, "0000", (int)nd, digits);
    else if ((size_t)exp + 1 >= nd)
        snprintf(buf, size, "%s%.*s%.*s.0", sign, (int)nd, digits, exp + 1 - (int)nd,
                 "0000000000000000");
    else
        snprintf(buf, size, "%s%.*s.%.*s", sign, exp + 1, digits, (int)nd - exp - 1,
                 digits + exp + 1);
}

static void put_repr_str(sb *b, jstr s)
{
    bool single = false, dbl = false;
    for (size_t i = 0; i < s.n; i++) {
        single |= memchr(s.p[i].s, '\'', s.p[i].len) != NULL;
        dbl |= memchr(s.p[i].s, '"', s.p[i].len) != NULL;
    }
    char q = single && !dbl ? '"' : '\'';
    sb_put(b, &q, 1, false);
    for (size_t i = 0; i < s.n; i++) {
        const piece *p = &s.p[i];
        for (size_t k = 0; k < p->len; k++) {
            unsigned char c = (unsigned char)p->s[k];
            char esc[8];
            if (c == '\\' || c == (unsigned char)q)
                snprintf(esc, sizeof esc, "\\%c", c);
            else if (c == '\n' || c == '\r' || c == '\t')
                snprintf(esc, sizeof esc, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
            else if (c < 0x20 || c == 0x7f)
                snprintf(esc, sizeof esc, "\\x%02x", c);
            else {
                sb_put(b, p->s + k, 1, p->content);
                continue;
            }
            sb_put(b, esc, strlen(esc), p->content);
        }
    }
    sb_put(b, &q, 1, false);
}

/* str(v), or repr(v) inside containers, as Python writes them. */
static void put_value(sb *b, const jv *v, bool repr, int depth)
{
    char num[40];
    if (depth > VALUE_MAX_DEPTH) {
        rfail(b->r, "values nested deeper than %d", VALUE_MAX_DEPTH);
        sb_fail(b);
        return;
    }
    switch (v->kind) {
    case JV_MISSING:
    case JV_UNDEF:
        if (repr)
            sb_cstr(b, "Undefined");
        return;
    case JV_NONE: sb_cstr(b, "None"); return;
    case JV_BOOL: sb_cstr(b, v->b ? "True" : "False"); return;
    case JV_INT: sb_int(b, v->i); return;
    case JV_FLOAT:
        float_repr(v->f, num, sizeof num);
        sb_cstr(b, num);
        return;
    case JV_STR:
        if (repr)
            put_repr_str(b, v->s);
        else
            sb_str(b, v->s);
        return;
    case JV_LIST:
        sb_cstr(b, v->list->tuple ? "(" : "[");
        for (size_t i = 0; i < v->list->n; i++) {
            if (i)
                sb_cstr(b, ", ");
            put_value(b, &v->list->items[i], true, depth + 1);
        }
        sb_cstr(b, v->list->tuple ? (v->list->n == 1 ? ",)" : ")") : "]");
        return;
    case JV_DICT:
        sb_cstr(b, "{");
        for (size_t i = 0; i < v->dict->n; i++) {
            if (i)
                sb_cstr(b, ", ");
            put_value(b, &v->dict->items[i].key, true, depth + 1);
            sb_cstr(b, ": ");
            put_value(b, &v->dict->items[i].val, true, depth + 1);
        }
        sb_cstr(b, "}");
        return;
    default:
        rfail(b->r, "a %s cannot be written as text", type_name(v));
        sb_fail(b);
        return;
    }
}

/* str(v); Undefined is "". */
static int to_str(R *r, const jv *v, jstr *out)
{
    if (v->kind == JV_STR) {
        *out = v->s;
        return 0;
    }
    sb b;
    sb_init(&b, r);
    put_value(&b, v, false, 0);
    return sb_done(&b, out);
}

/* Python ==: 1 equal, 0 not, -1 error (nesting too deep). */
static int jv_eq(R *r, const jv *a, const jv *b, int depth)
{
    if (depth > VALUE_MAX_DEPTH)
        return rfail(r, "values nested deeper than %d", VALUE_MAX_DEPTH);
    if (is_number(a) && is_number(b)) {
        if (a->kind == JV_FLOAT || b->kind == JV_FLOAT)
            return float_of(a) == float_of(b);
        return int_of(a) == int_of(b);
    }
    bool undef_a = a->kind == JV_UNDEF || a->kind == JV_MISSING;
    bool undef_b = b->kind == JV_UNDEF || b->kind == JV_MISSING;
    if (undef_a || undef_b)
        return undef_a && undef_b;
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case JV_NONE: return 1;
    case JV_STR: return a->s.len == b->s.len && str_cmp(a->s, b->s) == 0;
    case JV_LIST:
        if (a->list->tuple != b->list->tuple || a->list->n != b->list->n)
            return 0;
        for (size_t i = 0; i < a->list->n; i++) {
            int e = jv_eq(r, &a->list->items[i], &b->list->items[i], depth + 1);
            if (e != 1)
                return e;
        }
        return 1;
    case JV_DICT:
        if (a->dict->n != b->dict->n)
            return 0;
        for (size_t i = 0; i < a->dict->n; i++) {
            bool found = false;
            for (size_t j = 0; j < b->dict->n && !found; j++) {
                int e = jv_eq(r, &a->dict->items[i].key, &b->dict->items[j].key, depth + 1);
                if (e < 0)
                    return -1;
                if (e) {
                    e = jv_eq(r, &a->dict->items[i].val, &b->dict->items[j].val, depth + 1);
                    if (e != 1)
                        return e;
                    found = true;
                }
            }
            if (!found)
                return 0;
        }
        return 1;
    case JV_NS: return a->ns == b->ns;
    case JV_LOOP: return a->loop == b->loop;
    case JV_FUNC: return a->func.fn == b->func.fn && a->func.self == b->func.self;
    default: return 0;
    }
}

static const char *const cmp_names[] = {"==", "!=", "<", "<=", ">", ">=", "in", "not in"};

/* Python's ordering for numbers, strings and lists; *c is <0, 0 or >0. */
static int jv_order(R *r, const jv *a, const jv *b, int *c, int depth)
{
    if (depth > VALUE_MAX_DEPTH)
        return rfail(r, "values nested deeper than %d", VALUE_MAX_DEPTH);
    if (is_number(a) && is_number(b)) {
        if (a->kind == JV_FLOAT || b->kind == JV_FLOAT) {
            double x = float_of(a), y = float_of(b);
            *c = (x > y) - (x < y);
        } else {
            int64_t x = int_of(a), y = int_of(b);
            *c = (x > y) - (x < y);
        }
        return 0;
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        int k = str_cmp(a->s, b->s);
        *c = (k > 0) - (k < 0);
        return 0;
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST && a->list->tuple == b->list->tuple) {
        size_t n = a->list->n < b->list->n ? a->list->n : b->list->n;
        for (size_t i = 0; i < n; i++) {
            int e = jv_eq(r, &a->list->items[i], &b->list->items[i], depth + 1);
            if (e < 0)
                return -1;
            if (!e)
                return jv_order(r, &a->list->items[i], &b->list->items[i], c, depth + 1);
        }
        *c = (a->list->n > b->list->n) - (a->list->n < b->list->n);
        return 0;
    }
    return rfail(r, "'<' not supported between instances of '%s' and '%s'", type_name(a),
                 type_name(b));
}

static int undefined_error(R *r, const jv *u)
{
    if (u->undef.owner && u->undef.name)
        return rfail(r, "'%s object' has no attribute '%s'", u->undef.owner, u->undef.name);
    if (u->undef.owner)
        return rfail(r, "'%s object' has no such element", u->undef.owner);
    if (u->undef.name)
        return rfail(r, "'%s' is undefined", u->undef.name);
    return rfail(r, "the value is undefined");
}

static bool is_undef(const jv *v)
{
    return v->kind == JV_UNDEF || v->kind == JV_MISSING;
}

static int new_list(R *r, size_t n, bool tuple, jlist **out)
{
    jlist *l = ralloc(r, sizeof *l + n * sizeof l->items[0]);
    if (!l)
        return -1;
    l->n = n;
    l->tuple = tuple;
    *out = l;
    return 0;
}

static jv jv_listv(const jlist *l)
{
    return (jv){.kind = JV_LIST, .list = l};
}

/* What a for loop or a filter walks: a list's items, a dict's keys, a
 * string's characters; Undefined is empty. */
static int jv_iter(R *r, const jv *v, const jlist **out)
{
    jlist *l;
    switch (v->kind) {
    case JV_LIST: *out = v->list; return 0;
    case JV_DICT:
        if (new_list(r, v->dict->n, false, &l) < 0)
            return -1;
        for (size_t i = 0; i < l->n; i++)
            l->items[i] = v->dict->items[i].key;
        *out = l;
        return 0;
    case JV_STR: {
        piece *c;
        size_t n;
        if (str_chars(r, v->s, &c, &n) < 0 || new_list(r, n, false, &l) < 0)
            return -1;
        for (size_t i = 0; i < n; i++)
            l->items[i] = jv_strv((jstr){&c[i], 1, c[i].len});
        *out = l;
        return 0;
    }
    case JV_MISSING:
    case JV_UNDEF: return new_list(r, 0, false, &l) < 0 ? -1 : (*out = l, 0);
    default: return rfail(r, "'%s' object is not iterable", type_name(v));
    }
}

static int dict_find(R *r, const jdict *d, const jv *key, const jv **val)
{
    *val = NULL;
    for (size_t i = 0; i < d->n; i++) {
        int e = jv_eq(r, &d->items[i].key, key, 0);
        if (e < 0)
            return -1;
        if (e) {
            *val = &d->items[i].val;
            return 0;
        }
    }
    return 0;
}

static const jv *dict_find_name(const jdict *d, const char *name)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].key.kind == JV_STR && str_is(d->items[i].key.s, name))
            return &d->items[i].val;
    return NULL;
}

/* Sets (or adds) key in a dict the render owns. */
static int dict_set(R *r, jdict *d, jv key, jv val)
{
    for (size_t i = 0; i < d->n; i++) {
        int e = jv_eq(r, &d->items[i].key, &key, 0);
        if (e < 0)
            return -1;
        if (e) {
            d->items[i].val = val;
            return 0;
        }
    }
    if (!grow(r, (void **)&d->items, &d->cap, d->n, sizeof *d->items))
        return -1;
    d->items[d->n++] = (jkv){key, val};
    return 0;
}

static int contains(R *r, const jv *container, const jv *item, bool *out)
{
    *out = false;
    switch (container->kind) {
    case JV_STR: {
        if (item->kind != JV_STR)
            return rfail(r, "'in <string>' requires string as left operand, not %s",
                         type_name(item));
        const char *hay, *needle;
        if (str_flat(r, container->s, &hay) < 0 || str_flat(r, item->s, &needle) < 0)
            return -1;
        *out = item->s.len == 0 || memmem(hay, container->s.len, needle, item->s.len) != NULL;
        return 0;
    }
    case JV_LIST:
        for (size_t i = 0; i < container->list->n && !*out; i++) {
            int e = jv_eq(r, &container->list->items[i], item, 0);
            if (e < 0)
                return -1;
            *out = e;
        }
        return 0;
    case JV_DICT: {
        const jv *v;
        if (dict_find(r, container->dict, item, &v) < 0)
            return -1;
        *out = v != NULL;
        return 0;
    }
    case JV_MISSING:
    case JV_UNDEF: return 0;
    default: return rfail(r, "argument of type '%s' is not iterable", type_name(container));
    }
}

/* ---- names, attributes, subscripts ---- */

static const builtin *find_global(const char *name);
static const builtin *find_method(const jv *self, const char *name);

static jv lookup(R *r, const char *name)
{
    for (const frame *f = r->scope; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (strcmp(f->names[i], name) == 0)
                return f->vals[i];
    for (size_t i = 0; i < r->env->n_vars; i++)
        if (strcmp(r->env->vars[i].name, name) == 0)
            return r->vars[i];
    const builtin *g = find_global(name);
    if (g)
        return (jv){.kind = JV_FUNC, .func = {g, NULL}};
    return jv_undef(name, NULL);
}

static int assign(R *r, const char *name, jv v)
{
    frame *f = r->scope;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0) {
            f->vals[i] = v;
            return 0;
        }
    size_t cap = f->cap;
    if (!grow(r, (void **)&f->names, &cap, f->n, sizeof *f->names) ||
        !grow(r, (void **)&f->vals, &f->cap, f->n, sizeof *f->vals))
        return -1;
    f->names[f->n] = name;
    f->vals[f->n++] = v;
    return 0;
}

static int bound_method(R *r, const builtin *m, const jv *self, jv *out)
{
    jv *copy = ralloc(r, sizeof *copy);
    if (!copy)
        return -1;
    *copy = *self;
    *out = (jv){.kind = JV_FUNC, .func = {m, copy}};
    return 0;
}

static int loop_attr(R *r, const jv *obj, const char *name, jv *out)
{
    const jloop *l = obj->loop;
    int64_t i = (int64_t)l->index0, n = (int64_t)l->items->n;
    static const char *const ints[] = {"index0", "index",  "revindex0", "revindex",
                                       "length", "depth0", "depth"};
    const int64_t vals[] = {i, i + 1, n - i - 1, n - i, n, 0, 1};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (strcmp(name, ints[k]) == 0) {
            *out = jv_int(vals[k]);
            return 0;
        }
    if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0) {
        *out = jv_bool(name[0] == 'f' ? i == 0 : i == n - 1);
        return 0;
    }
    if (strcmp(name, "previtem") == 0 || strcmp(name, "nextitem") == 0) {
        int64_t j = name[0] == 'p' ? i - 1 : i + 1;
        *out = j >= 0 && j < n ? l->items->items[j] : jv_undef(name, "LoopContext");
        return 0;
    }
    const builtin *m = find_method(obj, name);
    if (m)
        return bound_method(r, m, obj, out);
    *out = jv_undef(name, "LoopContext");
    return 0;
}

/* obj.name, as jinja2's sandbox resolves it: a safe method of the type
 * first, then the item of that name (dicts), else Undefined. */
static int get_attr(R *r, const jv *obj, const char *name, jv *out)
{
    if (is_undef(obj))
        return undefined_error(r, obj);
    if (obj->kind == JV_LOOP)
        return loop_attr(r, obj, name, out);
    const builtin *m = find_method(obj, name);
    if (m)
        return bound_method(r, m, obj, out);
    const jv *v = NULL;
    if (obj->kind == JV_DICT)
        v = dict_find_name(obj->dict, name);
    else if (obj->kind == JV_NS)
        v = dict_find_name(obj->ns, name);
    *out = v ? *v : jv_undef(name, type_name(obj));
    return 0;
}

/* Python's index arithmetic: negative counts from the end. */
static bool list_index(const jv *key, size_t n, size_t *at)
{
    if (!is_integer(key))
        return false;
    int64_t i = int_of(key);
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *at = (size_t)i;
    return true;
}

/* obj[key]: the item first, then (for a string key) the attribute. */
static int get_item(R *r, const jv *obj, const jv *key, jv *out)
{
    size_t at;
    if (is_undef(obj))
        return undefined_error(r, obj);
    if (obj->kind == JV_DICT) {
        const jv *v;
        if (dict_find(r, obj->dict, key, &v) < 0)
            return -1;
        if (v) {
            *out = *v;
            return 0;
        }
    } else if (obj->kind == JV_LIST && list_index(key, obj->list->n, &at)) {
        *out = obj->list->items[at];
        return 0;
    } else if (obj->kind == JV_STR && is_integer(key) && list_index(key, str_count(obj->s), &at)) {
        size_t from = str_char_offset(obj->s, at), to = str_char_offset(obj->s, at + 1);
        out->kind = JV_STR;
        return str_sub(r, obj->s, from, to - from, &out->s);
    }
    if (key->kind == JV_STR) {
        char *name;
        if (str_cstr(r, key->s, &name) < 0)
            return -1;
        return get_attr(r, obj, name, out);
    }
    *out = jv_undef(NULL, type_name(obj));
    return 0;
}

static int slice_bound(R *r, const jv *v, int64_t dflt, int64_t *out)
{
    if (!v || v->kind == JV_NONE) {
        *out = dflt;
        return 0;
    }
    if (!is_integer(v))
        return rfail(r, "slice indices must be integers or None, not %s", type_name(v));
    *out = int_of(v);
    return 0;
}

static int64_t slice_clamp(int64_t i, int64_t len, int64_t step)
{
    if (i < 0) {
        i += len;
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= len) {
        i = step < 0 ? len - 1 : len;
    }
    return i;
}

/* obj[start:stop:step] of a list or a string (in characters). */
static int get_slice(R *r, const jv *obj, const jv *start, const jv *stop, const jv *stepv, jv *out)
{
    int64_t st = 1, a = 0, b = 0;
    if (slice_bound(r, stepv, 1, &st) < 0)
        return -1;
    if (st == 0)
        return rfail(r, "slice step cannot be zero");
    if (slice_bound(r, start, st < 0 ? INT64_MAX : 0, &a) < 0 ||
        slice_bound(r, stop, st < 0 ? INT64_MIN : INT64_MAX, &b) < 0)
        return -1;
    if (is_undef(obj))
        return undefined_error(r, obj);
    piece *chars = NULL;
    size_t len;
    if (obj->kind == JV_LIST)
        len = obj->list->n;
    else if (obj->kind == JV_STR)
        len = str_count(obj->s);
    else {
        *out = jv_undef(NULL, type_name(obj));
        return 0;
    }
    a = slice_clamp(a, (int64_t)len, st);
    b = slice_clamp(b, (int64_t)len, st);
    size_t count = 0;
    if (st > 0 && b > a)
        count = (size_t)((b - a - 1) / st + 1);
    else if (st < 0 && a > b)
        count = (size_t)((a - b - 1) / -st + 1);
    if (obj->kind == JV_LIST) {
        jlist *l;
        if (new_list(r, count, obj->list->tuple, &l) < 0)
            return -1;
        for (size_t k = 0; k < count; k++)
            l->items[k] = obj->list->items[a + (int64_t)k * st];
        *out = jv_listv(l);
        return 0;
    }
    out->kind = JV_STR;
    if (st == 1) {
        size_t from = count ? str_char_offset(obj->s, (size_t)a) : 0;
        size_t to = count ? str_char_offset(obj->s, (size_t)a + count) : 0;
        return str_sub(r, obj->s, from, to - from, &out->s);
    }
    if (str_chars(r, obj->s, &chars, &len) < 0)
        return -1;
    ropeb rb;
    rb_init(&rb, r);
    for (size_t k = 0; k < count; k++) {
        const piece *c = &chars[a + (int64_t)k * st];
        rb_add(&rb, (jstr){c, 1, c->len});
    }
    return rb_done(&rb, &out->s);
}

/* ---- operators ---- */

static int type_error(R *r, const char *op, const jv *a, const jv *b)
{
    return rfail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, type_name(a),
                 type_name(b));
}

static int repeat(R *r, const jv *seq, int64_t times, jv *out)
{
    size_t each = seq->kind == JV_STR ? seq->s.len : seq->list->n;
    size_t n = times > 0 && each > 0 ? (size_t)times : 0;
    if (seq->kind == JV_STR) {
        if (n && n > r->env->limits.max_output / each)
            return rfail(r, "text longer than the output limit of %zu bytes",
                         r->env->limits.max_output);
        sb b;
        sb_init(&b, r);
        for (size_t k = 0; k < n; k++)
            sb_str(&b, seq->s);
        out->kind = JV_STR;
        return sb_done(&b, &out->s);
    }
    if (n && n > r->env->limits.max_steps / each)
        return rfail(r, "a list of more than %llu items (the step limit)",
                     (unsigned long long)r->env->limits.max_steps);
    jlist *l;
    if (new_list(r, each * n, seq->list->tuple, &l) < 0)
        return -1;
    for (size_t k = 0; k < n; k++)
        memcpy(l->items + k * each, seq->list->items, each * sizeof *l->items);
    *out = jv_listv(l);
    return 0;
}

static int int_arith(R *r, binop op, int64_t x, int64_t y, jv *out)
{
    int64_t z = 0;
    bool overflow = false;
    switch (op) {
    case OP_ADD: overflow = __builtin_add_overflow(x, y, &z); break;
    case OP_SUB: overflow = __builtin_sub_overflow(x, y, &z); break;
    case OP_MUL: overflow = __builtin_mul_overflow(x, y, &z); break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (y == 0)
            return rfail(r, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            overflow = op == OP_FLOORDIV;
            break;
        }
        z = op == OP_FLOORDIV ? x / y : x % y;
        if (op == OP_FLOORDIV && x % y != 0 && ((x < 0) != (y < 0)))
            z--;
        if (op == OP_MOD && z != 0 && ((z < 0) != (y < 0)))
            z += y;
        break;
    case OP_POW:
        if (y < 0) {
            *out = jv_float(pow((double)x, (double)y));
            return 0;
        }
        z = 1;
        for (int64_t base = x; y > 0 && !overflow; y >>= 1) {
            if (y & 1)
                overflow = __builtin_mul_overflow(z, base, &z);
            if (y > 1 && !overflow)
                overflow = __builtin_mul_overflow(base, base, &base);
        }
        break;
    case OP_DIV: break;
    }
    if (overflow)
        return rfail(r, "integer overflow (integers are 64-bit here)");
    *out = jv_int(z);
    return 0;
}

static int float_arith(R *r, binop op, double x, double y, jv *out)
{
    double z;
    if ((op == OP_DIV || op == OP_FLOORDIV || op == OP_MOD) && y == 0)
        return rfail(r, "float division by zero");
    switch (op) {
    case OP_ADD: z = x + y; break;
    case OP_SUB: z = x - y; break;
    case OP_MUL: z = x * y; break;
    case OP_DIV: z = x / y; break;
    case OP_FLOORDIV: z = floor(x / y); break;
    case OP_MOD:
        z = fmod(x, y);
        if (z != 0 && ((z < 0) != (y < 0)))
            z += y;
        else if (z == 0)
            z = copysign(0.0, y);
        break;
    default: z = pow(x, y); break;
    }
    *out = jv_float(z);
    return 0;
}

static int binary(R *r, binop op, const jv *a, const jv *b, jv *out)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (is_undef(a))
        return undefined_error(r, a);
    if (is_undef(b))
        return undefined_error(r, b);
    if (is_number(a) && is_number(b)) {
        if (op == OP_DIV || a->kind == JV_FLOAT || b->kind == JV_FLOAT)
            return float_arith(r, op, float_of(a), float_of(b), out);
        return int_arith(r, op, int_of(a), int_of(b), out);
    }
    if (op == OP_ADD && a->kind == JV_STR && b->kind == JV_STR) {
        out->kind = JV_STR;
        return str_cat(r, a->s, b->s, &out->s);
    }
    if (op == OP_ADD && a->kind == JV_LIST && b->kind == JV_LIST &&
        a->list->tuple == b->list->tuple) {
        jlist *l;
        size_t na = a->list->n, nb = b->list->n;
        if (new_list(r, na + nb, a->list->tuple, &l) < 0)
            return -1;
        memcpy(l->items, a->list->items, na * sizeof *l->items);
        memcpy(l->items + na, b->list->items, nb * sizeof *l->items);
        *out = jv_listv(l);
        return 0;
    }
    if (op == OP_MUL && (a->kind == JV_STR || a->kind == JV_LIST) && is_integer(b))
        return repeat(r, a, int_of(b), out);
    if (op == OP_MUL && (b->kind == JV_STR || b->kind == JV_LIST) && is_integer(a))
        return repeat(r, b, int_of(a), out);
    if (op == OP_MOD && a->kind == JV_STR)
        return rfail(r, "string formatting with %% is not supported");
    return type_error(r, names[op], a, b);
}

static int compare(R *r, cmpop op, const jv *a, const jv *b, bool *out)
{
    int c, e;
    switch (op) {
    case CMP_EQ:
    case CMP_NE:
        if ((e = jv_eq(r, a, b, 0)) < 0)
            return -1;
        *out = op == CMP_EQ ? e : !e;
        return 0;
    case CMP_IN:
    case CMP_NOTIN:
        if (contains(r, b, a, out) < 0)
            return -1;
        if (op == CMP_NOTIN)
            *out = !*out;
        return 0;
    default:
        if (is_undef(a))
            return undefined_error(r, a);
        if (is_undef(b))
            return undefined_error(r, b);
        if (jv_order(r, a, b, &c, 0) < 0)
            return rfail(r, "'%s' not supported between instances of '%s' and '%s'", cmp_names[op],
                         type_name(a), type_name(b));
        *out = op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0;
        return 0;
    }
}

/* ---- evaluation ---- */

static int eval(R *r, const node *n, jv *out);

static int eval_args(R *r, const callargs *ca, args *out)
{
    jv *pos = NULL, *kwv = NULL;
    if (ca->pos.n && !(pos = ralloc(r, ca->pos.n * sizeof *pos)))
        return -1;
    if (ca->nkw && !(kwv = ralloc(r, ca->nkw * sizeof *kwv)))
        return -1;
    for (size_t i = 0; i < ca->pos.n; i++)
        if (eval(r, ca->pos.v[i], &pos[i]) < 0)
            return -1;
    for (size_t i = 0; i < ca->nkw; i++)
        if (eval(r, ca->kwval[i], &kwv[i]) < 0)
            return -1;
    *out = (args){pos, ca->pos.n, ca->kw, kwv, ca->nkw};
    return 0;
}

static int exec_body(R *r, const nodelist *body);

static int bind_params(R *r, const node *m, const args *a)
{
    const char *name = m->macro.name;
    if (a->npos > m->macro.n_params)
        return rfail(r, "macro '%s' takes %zu arguments (%zu given)", name, m->macro.n_params,
                     a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < m->macro.n_params && strcmp(m->macro.params[i], a->kw[k]) != 0)
            i++;
        if (i == m->macro.n_params)
            return rfail(r, "macro '%s' has no parameter '%s'", name, a->kw[k]);
        if (i < a->npos)
            return rfail(r, "macro '%s' got multiple values for '%s'", name, a->kw[k]);
    }
    for (size_t i = 0; i < m->macro.n_params; i++) {
        jv v = i < a->npos ? a->pos[i] : (jv){.kind = JV_MISSING};
        for (size_t k = 0; k < a->nkw; k++)
            if (strcmp(m->macro.params[i], a->kw[k]) == 0)
                v = a->kwv[k];
        /* a parameter neither passed nor defaulted is undefined, as in jinja2 */
        if (v.kind == JV_MISSING && !m->macro.defaults[i])
            v = jv_undef(m->macro.params[i], NULL);
        if ((v.kind == JV_MISSING && eval(r, m->macro.defaults[i], &v) < 0) ||
            assign(r, m->macro.params[i], v) < 0)
            return -1;
    }
    return 0;
}

/* A macro call: its parameters in a scope of their own over the template's
 * top level; what its body writes is the call's value. */
static int call_macro(R *r, const node *m, const args *a, jv *out)
{
    if (r->macro_depth >= JINJA_MAX_DEPTH)
        return rfail(r, "macro calls nested deeper than %d", JINJA_MAX_DEPTH);
    frame f = {.parent = r->root}, *scope = r->scope;
    sb capture, *saved = r->out;
    sb_init(&capture, r);
    r->scope = &f;
    r->macro_depth++;
    int rc = bind_params(r, m, a);
    if (rc == 0) {
        r->out = &capture;
        rc = exec_body(r, &m->macro.body);
        r->out = saved;
    }
    r->macro_depth--;
    r->scope = scope;
    out->kind = JV_STR;
    return rc < 0 ? -1 : sb_done(&capture, &out->s);
}

static int call_value(R *r, const jv *fn, const args *a, jv *out)
{
    if (is_undef(fn))
        return undefined_error(r, fn);
    if (fn->kind == JV_MACRO)
        return call_macro(r, fn->macro, a, out);
    if (fn->kind != JV_FUNC)
        return rfail(r, "'%s' object is not callable", type_name(fn));
    return fn->func.fn->fn(r, fn->func.self, a, fn->func.fn->mode, out);
}

static int eval_items(R *r, const nodelist *items, bool tuple, jv *out)
{
    jlist *l;
    if (new_list(r, items->n, tuple, &l) < 0)
        return -1;
    for (size_t i = 0; i < items->n; i++)
        if (eval(r, items->v[i], &l->items[i]) < 0)
            return -1;
    *out = jv_listv(l);
    return 0;
}

static int eval_dict(R *r, const node *n, jv *out)
{
    jdict *d = ralloc(r, sizeof *d);
    if (!d)
        return -1;
    *d = (jdict){0, 0, NULL};
    for (size_t i = 0; i < n->dict.keys.n; i++) {
        jv k, v;
        if (eval(r, n->dict.keys.v[i], &k) < 0 || eval(r, n->dict.vals.v[i], &v) < 0 ||
            dict_set(r, d, k, v) < 0)
            return -1;
    }
    *out = (jv){.kind = JV_DICT, .dict = d};
    return 0;
}

static int eval_concat(R *r, const nodelist *items, jv *out)
{
    ropeb rb;
    rb_init(&rb, r);
    for (size_t i = 0; i < items->n; i++) {
        jv v;
        jstr s;
        if (eval(r, items->v[i], &v) < 0 || to_str(r, &v, &s) < 0)
            return -1;
        rb_add(&rb, s);
    }
    out->kind = JV_STR;
    return rb_done(&rb, &out->s);
}

static int eval_compare(R *r, const node *n, jv *out)
{
    jv left, right;
    if (eval(r, n->cmp.first, &left) < 0)
        return -1;
    for (size_t i = 0; i < n->cmp.n; i++) {
        bool ok;
        if (eval(r, n->cmp.rest[i], &right) < 0 ||
            compare(r, n->cmp.ops[i], &left, &right, &ok) < 0)
            return -1;
        if (!ok) {
            *out = jv_bool(false);
            return 0;
        }
        left = right;
    }
    *out = jv_bool(true);
    return 0;
}

static int eval_node(R *r, const node *n, jv *out)
{
    jv a, b, c, d;
    args ar;
    switch (n->kind) {
    case N_CONST: *out = n->value; return 0;
    case N_NAME: *out = lookup(r, n->name); return 0;
    case N_ATTR: return eval(r, n->attr.obj, &a) < 0 ? -1 : get_attr(r, &a, n->attr.name, out);
    case N_ITEM:
        if (eval(r, n->item.obj, &a) < 0 || eval(r, n->item.key, &b) < 0)
            return -1;
        return get_item(r, &a, &b, out);
    case N_SLICE:
        b = c = d = jv_none();
        if (eval(r, n->slice.obj, &a) < 0 || (n->slice.start && eval(r, n->slice.start, &b) < 0) ||
            (n->slice.stop && eval(r, n->slice.stop, &c) < 0) ||
            (n->slice.step && eval(r, n->slice.step, &d) < 0))
            return -1;
        return get_slice(r, &a, &b, &c, &d, out);
    case N_CALL:
        if (eval(r, n->call.fn, &a) < 0 || eval_args(r, &n->call.args, &ar) < 0)
            return -1;
        return call_value(r, &a, &ar, out);
    case N_FILTER:
    case N_TEST:
        if (eval(r, n->filter.obj, &a) < 0 || eval_args(r, &n->filter.args, &ar) < 0)
            return -1;
        return n->filter.fn->fn(r, &a, &ar, n->filter.fn->mode, out);
    case N_NEG:
    case N_POS:
        if (eval(r, n->expr, &a) < 0)
            return -1;
        if (is_undef(&a))
            return undefined_error(r, &a);
        if (!is_number(&a))
            return rfail(r, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                         type_name(&a));
        if (n->kind == N_POS)
            *out = a.kind == JV_BOOL ? jv_int(a.b) : a;
        else if (a.kind == JV_FLOAT)
            *out = jv_float(-a.f);
        else
            return int_arith(r, OP_SUB, 0, int_of(&a), out);
        return 0;
    case N_NOT:
        if (eval(r, n->expr, &a) < 0)
            return -1;
        *out = jv_bool(!truthy(&a));
        return 0;
    case N_BIN:
        if (eval(r, n->bin.a, &a) < 0 || eval(r, n->bin.b, &b) < 0)
            return -1;
        return binary(r, n->bin.op, &a, &b, out);
    case N_AND:
    case N_OR:
        if (eval(r, n->bin.a, out) < 0)
            return -1;
        if (truthy(out) == (n->kind == N_OR))
            return 0;
        return eval(r, n->bin.b, out);
    case N_CMP: return eval_compare(r, n, out);
    case N_COND:
        if (eval(r, n->cond.test, &a) < 0)
            return -1;
        if (truthy(&a))
            return eval(r, n->cond.then, out);
        if (n->cond.otherwise)
            return eval(r, n->cond.otherwise, out);
        *out = jv_undef(NULL, NULL);
        return 0;
    case N_LIST:
    case N_TUPLE: return eval_items(r, &n->items, n->kind == N_TUPLE, out);
    case N_DICT: return eval_dict(r, n, out);
    case N_CONCAT: return eval_concat(r, &n->items, out);
    default: return rfail(r, "not an expression");
    }
}

/* Every expression node passes here: it counts a step and is where an
 * error is reported. */
static int eval(R *r, const node *n, jv *out)
{
    const node *up = r->at;
    r->at = n;
    int rc = step(r) < 0 ? -1 : eval_node(r, n, out);
    r->at = up;
    return rc;
}

/* ---- statements ---- */

enum { FLOW_NEXT = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int assign_target(R *r, const node *target, const jv *v)
{
    if (target->kind == N_NAME)
        return assign(r, target->name, *v);
    if (target->kind == N_ATTR) {
        jv ns = lookup(r, target->attr.obj->name);
        if (ns.kind != JV_NS)
            return rfail(r, "cannot assign attribute on a %s ('%s' is not a namespace)",
                         type_name(&ns), target->attr.obj->name);
        jstr key;
        size_t len = strlen(target->attr.name);
        if (str_make(r, target->attr.name, len, false, &key) < 0)
            return -1;
        return dict_set(r, ns.ns, jv_strv(key), *v);
    }
    const jlist *items;
    if (jv_iter(r, v, &items) < 0)
        return -1;
    if (items->n != target->items.n)
        return rfail(r, "cannot unpack %zu values into %zu names", items->n, target->items.n);
    for (size_t i = 0; i < items->n; i++)
        if (assign(r, target->items.v[i]->name, items->items[i]) < 0)
            return -1;
    return 0;
}

/* The loop's items once its `if` filter has kept what it keeps. */
static int loop_items(R *r, const node *n, const jlist **out)
{
    jv it;
    const jlist *all;
    if (eval(r, n->for_.iter, &it) < 0 || jv_iter(r, &it, &all) < 0)
        return -1;
    if (!n->for_.filter) {
        *out = all;
        return 0;
    }
    jlist *kept;
    if (new_list(r, all->n, false, &kept) < 0)
        return -1;
    kept->n = 0;
    frame f = {.parent = r->scope};
    r->scope = &f;
    for (size_t i = 0; i < all->n; i++) {
        jv keep;
        f.n = 0;
        if (step(r) < 0 || assign_target(r, n->for_.target, &all->items[i]) < 0 ||
            eval(r, n->for_.filter, &keep) < 0) {
            r->scope = f.parent;
            return -1;
        }
        if (truthy(&keep))
            kept->items[kept->n++] = all->items[i];
    }
    r->scope = f.parent;
    *out = kept;
    return 0;
}

static int exec_for(R *r, const node *n)
{
    const jlist *items;
    jloop *loop;
    if (loop_items(r, n, &items) < 0 || !(loop = ralloc(r, sizeof *loop)))
        return -1;
    loop->items = items;
    /* one scope per iteration, as jinja2 gives: what the body sets does not
     * outlive the iteration (namespaces carry state out) */
    frame f = {.parent = r->scope};
    r->scope = &f;
    int rc = FLOW_NEXT;
    for (size_t i = 0; i < items->n && rc != FLOW_BREAK; i++) {
        loop->index0 = i;
        f.n = 0;
        if (step(r) < 0 || assign_target(r, n->for_.target, &items->items[i]) < 0 ||
            assign(r, "loop", (jv){.kind = JV_LOOP, .loop = loop}) < 0 ||
            (rc = exec_body(r, &n->for_.body)) < 0) {
            r->scope = f.parent;
            return -1;
        }
    }
    f.n = 0;
    rc = items->n == 0 ? exec_body(r, &n->for_.otherwise) : FLOW_NEXT;
    r->scope = f.parent;
    return rc;
}

/* {% set x %}...{% endset %}: the body's output, kept as a string. */
static int exec_set_block(R *r, const node *n)
{
    sb capture, *saved = r->out;
    sb_init(&capture, r);
    frame f = {.parent = r->scope};
    r->out = &capture;
    r->scope = &f;
    int rc = exec_body(r, &n->set.body);
    r->scope = f.parent;
    r->out = saved;
    jv v = {.kind = JV_STR};
    if (rc < 0 || sb_done(&capture, &v.s) < 0)
        return -1;
    return assign_target(r, n->set.target, &v);
}

static int exec_stmt(R *r, const node *n)
{
    jv v;
    switch (n->kind) {
    case N_TEXT: sb_str(r->out, n->text); return r->out->failed ? -1 : FLOW_NEXT;
    case N_OUTPUT:
        if (eval(r, n->expr, &v) < 0)
            return -1;
        put_value(r->out, &v, false, 0);
        return r->out->failed ? -1 : FLOW_NEXT;
    case N_IF:
        if (eval(r, n->if_.test, &v) < 0)
            return -1;
        return exec_body(r, truthy(&v) ? &n->if_.then : &n->if_.otherwise);
    case N_FOR: return exec_for(r, n);
    case N_SET:
        if (eval(r, n->set.value, &v) < 0)
            return -1;
        return assign_target(r, n->set.target, &v);
    case N_SET_BLOCK: return exec_set_block(r, n);
    case N_MACRO: return assign(r, n->macro.name, (jv){.kind = JV_MACRO, .macro = n});
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: return rfail(r, "not a statement");
    }
}

static int exec_body(R *r, const nodelist *body)
{
    for (size_t i = 0; i < body->n; i++) {
        const node *up = r->at;
        r->at = body->v[i];
        int rc = step(r) < 0 ? -1 : exec_stmt(r, body->v[i]);
        r->at = up;
        if (rc != FLOW_NEXT)
            return rc;
    }
    return FLOW_NEXT;
}

/* ---- builtins: argument binding ---- */

/* Fills out[0..n) from a's positional then keyword arguments by the names
 * given; what is not passed is JV_MISSING. */
static int bind(R *r, const char *what, const args *a, const char *const *names, size_t n, jv *out)
{
    if (a->npos > n)
        return rfail(r, "%s takes at most %zu arguments (%zu given)", what, n, a->npos);
    for (size_t i = 0; i < n; i++)
        out[i] = i < a->npos ? a->pos[i] : (jv){.kind = JV_MISSING};
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < n && strcmp(names[i], a->kw[k]) != 0)
            i++;
        if (i == n)
            return rfail(r, "%s got an unexpected keyword argument '%s'", what, a->kw[k]);
        if (out[i].kind != JV_MISSING)
            return rfail(r, "%s got multiple values for argument '%s'", what, a->kw[k]);
        out[i] = a->kwv[k];
    }
    return 0;
}

#define BIND(what, a, out, ...)                          \
    bind(r, what, a, (const char *const[]){__VA_ARGS__}, \
         sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *), out)

static int no_args(R *r, const char *what, const args *a)
{
    return bind(r, what, a, NULL, 0, NULL);
}

static int want_str(R *r, const char *what, const jv *v)
{
    if (v->kind != JV_STR)
        return rfail(r, "%s expects a string, not %s", what, type_name(v));
    return 0;
}

static int want_int(R *r, const char *what, const jv *v, int64_t dflt, int64_t *out)
{
    if (v->kind == JV_MISSING || v->kind == JV_NONE) {
        *out = dflt;
        return 0;
    }
    if (!is_integer(v))
        return rfail(r, "%s expects an integer, not %s", what, type_name(v));
    *out = int_of(v);
    return 0;
}

/* ---- string operations ---- */

static bool in_charset(uint32_t cp, const char *set, size_t n)
{
    if (!set)
        return py_space(cp);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += cp_at(set + i, n - i, &c);
        if (c == cp)
            return true;
    }
    return false;
}

/* Python's strip/lstrip/rstrip: chars NULL or None strips whitespace. */
static int strip(R *r, jstr s, const jv *chars, bool left, bool right, jstr *out)
{
    const char *flat, *set = NULL;
    size_t set_len = 0;
    if (chars && chars->kind != JV_MISSING && chars->kind != JV_NONE) {
        if (want_str(r, "strip()", chars) < 0 || str_flat(r, chars->s, &set) < 0)
            return -1;
        set_len = chars->s.len;
    }
    if (str_flat(r, s, &flat) < 0)
        return -1;
    size_t a = 0, b = s.len;
    while (left && a < b) {
        uint32_t cp;
        size_t k = cp_at(flat + a, b - a, &cp);
        if (!in_charset(cp, set, set_len))
            break;
        a += k;
    }
    while (right && b > a) {
        uint32_t cp;
        size_t k = cp_last_len(flat + a, b - a);
        cp_at(flat + b - k, k, &cp);
        if (!in_charset(cp, set, set_len))
            break;
        b -= k;
    }
    return str_sub(r, s, a, b - a, out);
}

typedef enum casing {
    CASE_UPPER,
    CASE_LOWER,
    CASE_CAPITALIZE,
    CASE_TITLE,
    CASE_TITLE_WORDS,
} casing;

static bool is_cased(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* jinja2's title filter starts a word after these (its _word_beginning_split_re). */
static bool starts_word_after(uint32_t cp)
{
    return py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

/* Case changes, one code point at a time (simple case mapping). */
static int change_case(R *r, jstr s, casing how, jstr *out)
{
    sb b;
    sb_init(&b, r);
    bool first = true, prev_cased = false, word_start = true;
    for (size_t i = 0; i < s.n; i++)
        for (size_t at = 0; at < s.p[i].len;) {
            uint32_t cp;
            const char *src = s.p[i].s + at;
            size_t k = cp_at(src, s.p[i].len - at, &cp);
            utf8proc_int32_t c = (utf8proc_int32_t)cp, m = c;
            switch (how) {
            case CASE_UPPER: m = utf8proc_toupper(c); break;
            case CASE_LOWER: m = utf8proc_tolower(c); break;
            case CASE_CAPITALIZE: m = first ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
            case CASE_TITLE: m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c); break;
            case CASE_TITLE_WORDS:
                m = word_start ? utf8proc_toupper(c) : utf8proc_tolower(c);
                break;
            }
            char enc[4];
            size_t ek = m != c ? utf8_encode((uint32_t)m, enc) : 0;
            sb_put(&b, ek ? enc : src, ek ? ek : k, s.p[i].content);
            first = false;
            prev_cased = is_cased(cp);
            word_start = starts_word_after(cp);
            at += k;
        }
    return sb_done(&b, out);
}

static int new_str_list(R *r, const jstr *parts, size_t n, jv *out)
{
    jlist *l;
    if (new_list(r, n, false, &l) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        l->items[i] = jv_strv(parts[i]);
    *out = jv_listv(l);
    return 0;
}

/* Python's str.split(sep=None, maxsplit=-1). */
static int split(R *r, jstr s, const jv *sepv, int64_t maxsplit, jv *out)
{
    const char *flat, *sep = NULL;
    size_t sep_len = 0, n = 0, cap = 0;
    jstr *parts = NULL;
    if (sepv->kind != JV_MISSING && sepv->kind != JV_NONE) {
        if (want_str(r, "split()", sepv) < 0 || str_flat(r, sepv->s, &sep) < 0)
            return -1;
        if ((sep_len = sepv->s.len) == 0)
            return rfail(r, "split(): empty separator");
    }
    if (str_flat(r, s, &flat) < 0)
        return -1;
    size_t i = 0;
    for (;;) {
        size_t from, to, next;
        if (sep) {
            const char *hit = maxsplit == 0 ? NULL : memmem(flat + i, s.len - i, sep, sep_len);
            from = i;
            to = hit ? (size_t)(hit - flat) : s.len;
            next = hit ? to + sep_len : s.len + 1;
        } else {
            i += space_prefix(flat + i, s.len - i);
            if (i == s.len)
                break;
            from = i;
            to = maxsplit == 0 ? s.len : from;
            while (to < s.len) {
                uint32_t cp;
                size_t k = cp_at(flat + to, s.len - to, &cp);
                if (py_space(cp))
                    break;
                to += k;
            }
            next = to;
        }
        if (!grow(r, (void **)&parts, &cap, n, sizeof *parts) ||
            str_sub(r, s, from, to - from, &parts[n]) < 0)
            return -1;
        n++;
        if (maxsplit > 0)
            maxsplit--;
        if (next > s.len)
            break;
        i = next;
    }
    return new_str_list(r, parts, n, out);
}

/* Python's str.replace(old, new, count=-1). */
static int replace(R *r, jstr s, jstr old, jstr with, int64_t count, jstr *out)
{
    const char *flat, *needle;
    if (str_flat(r, s, &flat) < 0 || str_flat(r, old, &needle) < 0)
        return -1;
    ropeb rb;
    rb_init(&rb, r);
    size_t i = 0;
    while (count != 0 && i <= s.len && !rb.failed) {
        size_t at;
        if (old.len == 0) {
            at = i;
        } else {
            const char *hit = memmem(flat + i, s.len - i, needle, old.len);
            if (!hit)
                break;
            at = (size_t)(hit - flat);
        }
        jstr before;
        if (str_sub(r, s, i, at - i, &before) < 0)
            return -1;
        rb_add(&rb, before);
        rb_add(&rb, with);
        if (old.len == 0) {
            /* an empty `old` matches before every character and at the end */
            uint32_t cp;
            size_t k = at < s.len ? cp_at(flat + at, s.len - at, &cp) : 1;
            jstr ch;
            if (at < s.len && str_sub(r, s, at, k, &ch) < 0)
                return -1;
            if (at < s.len)
                rb_add(&rb, ch);
            i = at + k;
        } else {
            i = at + old.len;
        }
        if (count > 0)
            count--;
        if (step(r) < 0)
            return -1;
    }
    jstr rest;
    if (i < s.len) {
        if (str_sub(r, s, i, s.len - i, &rest) < 0)
            return -1;
        rb_add(&rb, rest);
    }
    return rb_done(&rb, out);
}

static bool has_prefix(jstr s, jstr p, bool at_end, const char *flat)
{
    if (p.len > s.len)
        return false;
    size_t at = at_end ? s.len - p.len : 0;
    for (size_t i = 0, o = 0; i < p.n; o += p.p[i].len, i++)
        if (memcmp(flat + at + o, p.p[i].s, p.p[i].len) != 0)
            return false;
    return true;
}

/* startswith/endswith: a string or a tuple of strings. */
static int m_affix(R *r, const jv *self, const args *a, int at_end, jv *out)
{
    const char *what = at_end ? "endswith()" : "startswith()";
    jv p[1];
    const char *flat;
    if (BIND(what, a, p, "prefix") < 0 || str_flat(r, self->s, &flat) < 0)
        return -1;
    if (p[0].kind == JV_LIST) {
        bool any = false;
        for (size_t i = 0; i < p[0].list->n && !any; i++) {
            if (want_str(r, what, &p[0].list->items[i]) < 0)
                return -1;
            any = has_prefix(self->s, p[0].list->items[i].s, at_end, flat);
        }
        *out = jv_bool(any);
        return 0;
    }
    if (want_str(r, what, &p[0]) < 0)
        return -1;
    *out = jv_bool(has_prefix(self->s, p[0].s, at_end, flat));
    return 0;
}

static int join_strs(R *r, const jlist *items, jstr sep, const jstr *attr, jv *out);

/* ---- string methods ---- */

/* strip() and the trim filter (which str()s its input first). */
enum { STRIP_LEFT = 1, STRIP_RIGHT = 2 };

static int m_strip(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    jstr s;
    if (BIND("strip", a, p, "chars") < 0 || to_str(r, self, &s) < 0)
        return -1;
    out->kind = JV_STR;
    return strip(r, s, &p[0], mode & STRIP_LEFT, mode & STRIP_RIGHT, &out->s);
}

static int m_split(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[2];
    int64_t maxsplit = -1;
    if (BIND("split()", a, p, "sep", "maxsplit") < 0 ||
        want_int(r, "split()", &p[1], -1, &maxsplit) < 0)
        return -1;
    return split(r, self->s, &p[0], maxsplit, out);
}

static int m_find(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    const char *hay, *needle;
    if (BIND("find()", a, p, "sub") < 0 || want_str(r, "find()", &p[0]) < 0 ||
        str_flat(r, self->s, &hay) < 0 || str_flat(r, p[0].s, &needle) < 0)
        return -1;
    const char *hit = p[0].s.len ? memmem(hay, self->s.len, needle, p[0].s.len) : hay;
    *out = jv_int(hit ? (int64_t)cp_count(hay, (size_t)(hit - hay)) : -1);
    return 0;
}

static int m_join(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    const jlist *items;
    if (BIND("join()", a, p, "iterable") < 0 || jv_iter(r, &p[0], &items) < 0)
        return -1;
    for (size_t i = 0; i < items->n; i++)
        if (want_str(r, "join()", &items->items[i]) < 0)
            return -1;
    return join_strs(r, items, self->s, NULL, out);
}

/* ---- dict and loop methods ---- */

static int dict_part(R *r, const jv *self, const args *a, int keys, jv *out)
{
    jlist *l;
    if (no_args(r, keys ? "keys()" : "values()", a) < 0 ||
        new_list(r, self->dict->n, false, &l) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++)
        l->items[i] = keys ? self->dict->items[i].key : self->dict->items[i].val;
    *out = jv_listv(l);
    return 0;
}

static int m_get(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[2];
    const jv *v;
    if (BIND("get()", a, p, "key", "default") < 0 || dict_find(r, self->dict, &p[0], &v) < 0)
        return -1;
    *out = v ? *v : p[1].kind == JV_MISSING ? jv_none() : p[1];
    return 0;
}

static int m_cycle(R *r, const jv *self, const args *a, int mode, jv *out)
{
    if (a->nkw || a->npos == 0)
        return rfail(r, "loop.cycle() takes one or more positional arguments");
    *out = a->pos[self->loop->index0 % a->npos];
    return 0;
}

static int case_fn(R *r, const jv *self, const args *a, int how, jv *out);
static int f_replace(R *r, const jv *self, const args *a, int mode, jv *out);
static int items_of(R *r, const jv *self, const args *a, int mode, jv *out);

static const builtin str_methods[] = {{"capitalize", case_fn, CASE_CAPITALIZE},
                                      {"endswith", m_affix, 1},
                                      {"find", m_find, 0},
                                      {"join", m_join, 0},
                                      {"lower", case_fn, CASE_LOWER},
                                      {"lstrip", m_strip, STRIP_LEFT},
                                      {"replace", f_replace, 0},
                                      {"rstrip", m_strip, STRIP_RIGHT},
                                      {"split", m_split, 0},
                                      {"startswith", m_affix, 0},
                                      {"strip", m_strip, STRIP_LEFT | STRIP_RIGHT},
                                      {"title", case_fn, CASE_TITLE},
                                      {"upper", case_fn, CASE_UPPER},
                                      {NULL, NULL, 0}};
static const builtin dict_methods[] = {{"get", m_get, 0},
                                       {"items", items_of, 0},
                                       {"keys", dict_part, 1},
                                       {"values", dict_part, 0},
                                       {NULL, NULL, 0}};
static const builtin loop_methods[] = {{"cycle", m_cycle, 0}, {NULL, NULL, 0}};

static const builtin *find_in(const builtin *table, const char *name)
{
    for (; table->name; table++)
        if (strcmp(table->name, name) == 0)
            return table;
    return NULL;
}

static const builtin *find_method(const jv *self, const char *name)
{
    switch (self->kind) {
    case JV_STR: return find_in(str_methods, name);
    case JV_DICT: return find_in(dict_methods, name);
    case JV_LOOP: return find_in(loop_methods, name);
    default: return NULL;
    }
}

/* ---- tojson: Python's json.dumps, as transformers calls it ---- */

typedef struct json_style {
    jstr indent; /* used when has_indent */
    bool has_indent;
    jstr item_sep, key_sep;
    bool sort_keys, ensure_ascii;
} json_style;

static void put_json_str(sb *b, jstr s, bool ensure_ascii)
{
    sb_cstr(b, "\"");
    for (size_t i = 0; i < s.n; i++) {
        const piece *p = &s.p[i];
        for (size_t at = 0; at < p->len;) {
            uint32_t cp;
            size_t k = cp_at(p->s + at, p->len - at, &cp);
            char esc[16];
            const char *named = cp == '"'    ? "\\\""
                                : cp == '\\' ? "\\\\"
                                : cp == '\n' ? "\\n"
                                : cp == '\r' ? "\\r"
                                : cp == '\t' ? "\\t"
                                : cp == '\b' ? "\\b"
                                : cp == '\f' ? "\\f"
                                             : NULL;
            if (named)
                snprintf(esc, sizeof esc, "%s", named);
            else if (cp < 0x20 || (ensure_ascii && cp >= 0x80 && cp < 0x10000))
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            else if (ensure_ascii && cp >= 0x10000)
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                         0xdc00 + ((cp - 0x10000) & 0x3ff));
            else {
                sb_put(b, p->s + at, k, p->content);
                at += k;
                continue;
            }
            sb_put(b, esc, strlen(esc), p->content);
            at += k;
        }
    }
    sb_cstr(b, "\"");
}

static void json_newline(sb *b, const json_style *st, int level)
{
    if (!st->has_indent)
        return;
    sb_cstr(b, "\n");
    for (int i = 0; i < level; i++)
        sb_str(b, st->indent);
}

static void put_json(sb *b, const jv *v, const json_style *st, int level);

static void put_json_key(sb *b, const jv *k, const json_style *st)
{
    char num[40];
    switch (k->kind) {
    case JV_STR: put_json_str(b, k->s, st->ensure_ascii); return;
    case JV_INT: snprintf(num, sizeof num, "\"%lld\"", (long long)k->i); break;
    case JV_FLOAT:
        num[0] = '"';
        float_repr(k->f, num + 1, sizeof num - 2);
        strcat(num, "\"");
        break;
    case JV_BOOL: snprintf(num, sizeof num, "\"%s\"", k->b ? "true" : "false"); break;
    case JV_NONE: snprintf(num, sizeof num, "\"null\""); break;
    default:
        rfail(b->r, "tojson: keys must be str, int, float, bool or None, not %s", type_name(k));
        sb_fail(b);
        return;
    }
    sb_cstr(b, num);
}

/* The dict's items in key order (sort_keys), insertion-sorted. */
static const jkv *sorted_items(sb *b, const jdict *d)
{
    jkv *items = ralloc(b->r, (d->n ? d->n : 1) * sizeof *items);
    if (!items) {
        sb_fail(b);
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i;
        while (j > 0) {
            int c;
            if (jv_order(b->r, &items[j - 1].key, &d->items[i].key, &c, 0) < 0) {
                sb_fail(b);
                return NULL;
            }
            if (c <= 0)
                break;
            items[j] = items[j - 1];
            j--;
        }
        items[j] = d->items[i];
    }
    return items;
}

static void put_json_container(sb *b, const jv *v, const json_style *st, int level)
{
    bool dict = v->kind == JV_DICT;
    size_t n = dict ? v->dict->n : v->list->n;
    if (n == 0) {
        sb_cstr(b, dict ? "{}" : "[]");
        return;
    }
    const jkv *items = dict ? (st->sort_keys ? sorted_items(b, v->dict) : v->dict->items) : NULL;
    if (dict && !items)
        return;
    sb_cstr(b, dict ? "{" : "[");
    for (size_t i = 0; i < n && !b->failed; i++) {
        if (i)
            sb_str(b, st->item_sep);
        json_newline(b, st, level + 1);
        if (dict) {
            put_json_key(b, &items[i].key, st);
            sb_str(b, st->key_sep);
            put_json(b, &items[i].val, st, level + 1);
        } else {
            put_json(b, &v->list->items[i], st, level + 1);
        }
    }
    json_newline(b, st, level);
    sb_cstr(b, dict ? "}" : "]");
}

static void put_json(sb *b, const jv *v, const json_style *st, int level)
{
    char num[40];
    if (b->failed)
        return;
    if (level > VALUE_MAX_DEPTH) {
        rfail(b->r, "tojson: values nested deeper than %d", VALUE_MAX_DEPTH);
        sb_fail(b);
        return;
    }
    switch (v->kind) {
    case JV_NONE: sb_cstr(b, "null"); return;
    case JV_BOOL: sb_cstr(b, v->b ? "true" : "false"); return;
    case JV_INT: sb_int(b, v->i); return;
    case JV_FLOAT:
        if (isnan(v->f))
            sb_cstr(b, "NaN");
        else if (isinf(v->f))
            sb_cstr(b, v->f < 0 ? "-Infinity" : "Infinity");
        else {
            float_repr(v->f, num, sizeof num);
            sb_cstr(b, num);
        }
        return;
    case JV_STR: put_json_str(b, v->s, st->ensure_ascii); return;
    case JV_LIST:
    case JV_DICT: put_json_container(b, v, st, level); return;
    default:
        rfail(b->r, "tojson: Object of type %s is not JSON serializable", type_name(v));
        sb_fail(b);
        return;
    }
}

static int lit(R *r, const char *s, jstr *out)
{
    return str_make(r, s, strlen(s), false, out);
}

static int f_tojson(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[4];
    json_style st = {0};
    if (BIND("tojson", a, p, "ensure_ascii", "indent", "separators", "sort_keys") < 0)
        return -1;
    st.ensure_ascii = truthy(&p[0]);
    st.sort_keys = truthy(&p[3]);
    if (p[1].kind == JV_STR) {
        st.indent = p[1].s;
        st.has_indent = true;
    } else if (is_integer(&p[1])) {
        int64_t n = int_of(&p[1]);
        jstr space;
        if (n > 256)
            return rfail(r, "tojson: indent %lld is too large", (long long)n);
        if (lit(r, " ", &space) < 0)
            return -1;
        jv sp = jv_strv(space);
        if (repeat(r, &sp, n, &sp) < 0)
            return -1;
        st.indent = sp.s;
        st.has_indent = true;
    } else if (p[1].kind != JV_MISSING && p[1].kind != JV_NONE) {
        return rfail(r, "tojson: indent must be an integer or a string");
    }
    if (p[2].kind == JV_LIST && p[2].list->n == 2 && p[2].list->items[0].kind == JV_STR &&
        p[2].list->items[1].kind == JV_STR) {
        st.item_sep = p[2].list->items[0].s;
        st.key_sep = p[2].list->items[1].s;
    } else if (p[2].kind != JV_MISSING && p[2].kind != JV_NONE) {
        return rfail(r, "tojson: separators must be a pair of strings");
    } else if (lit(r, st.has_indent ? "," : ", ", &st.item_sep) < 0 ||
               lit(r, ": ", &st.key_sep) < 0) {
        return -1;
    }
    sb b;
    sb_init(&b, r);
    put_json(&b, self, &st, 0);
    out->kind = JV_STR;
    return sb_done(&b, &out->s);
}

/* ---- filters ---- */

/* upper(), lower(), ... and the filters of those names (which str() first). */
static int case_fn(R *r, const jv *self, const args *a, int how, jv *out)
{
    jstr s;
    if (no_args(r, "a case change", a) < 0 || to_str(r, self, &s) < 0)
        return -1;
    out->kind = JV_STR;
    return change_case(r, s, (casing)how, &out->s);
}

static int f_replace(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[3];
    jstr s, old, with;
    int64_t count = -1;
    if (BIND("replace", a, p, "old", "new", "count") < 0 || to_str(r, self, &s) < 0 ||
        to_str(r, &p[0], &old) < 0 || to_str(r, &p[1], &with) < 0 ||
        want_int(r, "replace", &p[2], -1, &count) < 0)
        return -1;
    out->kind = JV_STR;
    return replace(r, s, old, with, count, &out->s);
}

static int f_length(R *r, const jv *self, const args *a, int mode, jv *out)
{
    if (no_args(r, "length", a) < 0)
        return -1;
    switch (self->kind) {
    case JV_STR: *out = jv_int((int64_t)str_count(self->s)); return 0;
    case JV_LIST: *out = jv_int((int64_t)self->list->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)self->dict->n); return 0;
    case JV_MISSING:
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: return rfail(r, "object of type '%s' has no len()", type_name(self));
    }
}

static int f_default(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[2];
    if (BIND("default", a, p, "default_value", "boolean") < 0)
        return -1;
    if (is_undef(self) || (truthy(&p[1]) && !truthy(self))) {
        if (p[0].kind != JV_MISSING)
            *out = p[0];
        else
            *out = jv_strv((jstr){NULL, 0, 0});
        return 0;
    }
    *out = *self;
    return 0;
}

/* jinja2's attribute getter: "a.b.0" walks items, digits as indices. */
static int get_path(R *r, const jv *item, jstr path, jv *out)
{
    char *p;
    if (str_cstr(r, path, &p) < 0)
        return -1;
    *out = *item;
    for (char *part = p, *dot; part; part = dot ? dot + 1 : NULL) {
        dot = strchr(part, '.');
        if (dot)
            *dot = '\0';
        jv key, cur = *out;
        bool digits = *part != '\0' && strspn(part, "0123456789") == strlen(part);
        if (digits)
            key = jv_int(strtoll(part, NULL, 10));
        else if (str_make(r, part, strlen(part), false, &key.s) < 0)
            return -1;
        else
            key.kind = JV_STR;
        if (get_item(r, &cur, &key, out) < 0)
            return -1;
    }
    return 0;
}

static int join_strs(R *r, const jlist *items, jstr sep, const jstr *attr, jv *out)
{
    ropeb rb;
    rb_init(&rb, r);
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->items[i];
        jstr s;
        if ((attr && get_path(r, &items->items[i], *attr, &v) < 0) || to_str(r, &v, &s) < 0)
            return -1;
        if (i)
            rb_add(&rb, sep);
        rb_add(&rb, s);
    }
    out->kind = JV_STR;
    return rb_done(&rb, &out->s);
}

static int f_join(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[2];
    const jlist *items;
    jstr sep = {NULL, 0, 0};
    if (BIND("join", a, p, "d", "attribute") < 0 || jv_iter(r, self, &items) < 0 ||
        (p[0].kind != JV_MISSING && to_str(r, &p[0], &sep) < 0))
        return -1;
    if (p[1].kind != JV_MISSING && p[1].kind != JV_NONE) {
        jstr attr;
        if (to_str(r, &p[1], &attr) < 0)
            return -1;
        return join_strs(r, items, sep, &attr, out);
    }
    return join_strs(r, items, sep, NULL, out);
}

static int first_or_last(R *r, const jv *self, const args *a, int last, jv *out)
{
    const jlist *items;
    if (no_args(r, last ? "last" : "first", a) < 0 || jv_iter(r, self, &items) < 0)
        return -1;
    if (items->n == 0)
        *out = jv_undef(NULL, type_name(self));
    else
        *out = items->items[last ? items->n - 1 : 0];
    return 0;
}

/* list (mode 0) and reverse (mode 1, which turns a string around as a string) */
static int f_list(R *r, const jv *self, const args *a, int reverse, jv *out)
{
    const jlist *items;
    jlist *l;
    if (no_args(r, reverse ? "reverse" : "list", a) < 0 || jv_iter(r, self, &items) < 0 ||
        new_list(r, items->n, false, &l) < 0)
        return -1;
    for (size_t i = 0; i < items->n; i++)
        l->items[i] = items->items[reverse ? items->n - 1 - i : i];
    *out = jv_listv(l);
    if (!reverse || self->kind != JV_STR)
        return 0;
    jstr none = {NULL, 0, 0};
    return join_strs(r, l, none, NULL, out);
}

static int f_string(R *r, const jv *self, const args *a, int mode, jv *out)
{
    out->kind = JV_STR;
    return no_args(r, "string", a) < 0 ? -1 : to_str(r, self, &out->s);
}

static int f_safe(R *r, const jv *self, const args *a, int mode, jv *out)
{
    *out = *self;
    return no_args(r, "safe", a);
}

static int f_abs(R *r, const jv *self, const args *a, int mode, jv *out)
{
    if (no_args(r, "abs", a) < 0)
        return -1;
    if (self->kind == JV_FLOAT) {
        *out = jv_float(fabs(self->f));
        return 0;
    }
    if (!is_integer(self))
        return rfail(r, "bad operand type for abs(): '%s'", type_name(self));
    return int_of(self) < 0 ? int_arith(r, OP_SUB, 0, int_of(self), out)
                            : (*out = jv_int(int_of(self)), 0);
}

/* A string as Python's int() or float() reads it; false when it does not. */
static bool parse_number(R *r, jstr s, bool integral, int64_t base, jv *out)
{
    char *c;
    if (s.len > 64 || str_cstr(r, s, &c) < 0)
        return false;
    char *end;
    if (integral) {
        long long v = strtoll(c, &end, (int)base);
        if (end == c)
            return false;
        *out = jv_int(v);
    } else {
        double v = strtod(c, &end);
        if (end == c)
            return false;
        *out = jv_float(v);
    }
    end += space_prefix(end, strlen(end));
    return *end == '\0';
}

static int f_int(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[2];
    int64_t base = 10;
    if (BIND("int", a, p, "default", "base") < 0 || want_int(r, "int", &p[1], 10, &base) < 0)
        return -1;
    if (is_integer(self)) {
        *out = jv_int(int_of(self));
        return 0;
    }
    if (self->kind == JV_FLOAT && isfinite(self->f) && fabs(self->f) < 9.2e18) {
        *out = jv_int((int64_t)self->f);
        return 0;
    }
    jv f;
    if (self->kind == JV_STR && (parse_number(r, self->s, true, base, out) ||
                                 (parse_number(r, self->s, false, 10, &f) && isfinite(f.f) &&
                                  fabs(f.f) < 9.2e18 && (*out = jv_int((int64_t)f.f), true))))
        return 0;
    *out = p[0].kind == JV_MISSING ? jv_int(0) : p[0];
    return 0;
}

static int f_float(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    if (BIND("float", a, p, "default") < 0)
        return -1;
    if (is_number(self)) {
        *out = jv_float(float_of(self));
        return 0;
    }
    if (self->kind == JV_STR && parse_number(r, self->s, false, 10, out))
        return 0;
    *out = p[0].kind == JV_MISSING ? jv_float(0) : p[0];
    return 0;
}

static int items_of(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jlist *l;
    size_t n = self->kind == JV_DICT ? self->dict->n : 0;
    if (no_args(r, "items", a) < 0)
        return -1;
    if (self->kind != JV_DICT && !is_undef(self))
        return rfail(r, "items expects a mapping, not %s", type_name(self));
    if (new_list(r, n, false, &l) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        jlist *pair;
        if (new_list(r, 2, true, &pair) < 0)
            return -1;
        pair->items[0] = self->dict->items[i].key;
        pair->items[1] = self->dict->items[i].val;
        l->items[i] = jv_listv(pair);
    }
    *out = jv_listv(l);
    return 0;
}

/* Runs the test named by name (a string value) on v with extra arguments. */
static int run_test(R *r, const jv *name, const jv *v, const jv *extra, size_t n_extra, bool *ok)
{
    char *tn;
    if (want_str(r, "a test name", name) < 0 || str_cstr(r, name->s, &tn) < 0)
        return -1;
    const builtin *t = find_test(tn);
    if (!t)
        return rfail(r, "unknown test '%s'", tn);
    args ta = {extra, n_extra, NULL, NULL, 0};
    jv res;
    if (t->fn(r, v, &ta, t->mode, &res) < 0)
        return -1;
    *ok = truthy(&res);
    return 0;
}

/* select, reject, selectattr, rejectattr: keep the items whose value (or
 * attribute) passes the named test (or is true, without one). */
enum { SELECT_KEEP = 1, SELECT_BY_ATTR = 2 };

static int filter_items(R *r, const jv *self, const args *a, int mode, jv *out)
{
    bool by_attr = mode & SELECT_BY_ATTR, keep = mode & SELECT_KEEP;
    const jlist *items;
    jlist *l;
    size_t skip = by_attr ? 1 : 0;
    if (a->nkw)
        return rfail(r, "select/reject filters take no keyword arguments");
    if (by_attr && a->npos == 0)
        return rfail(r, "selectattr/rejectattr need an attribute name");
    jstr attr = {NULL, 0, 0};
    if ((by_attr && to_str(r, &a->pos[0], &attr) < 0) || jv_iter(r, self, &items) < 0 ||
        new_list(r, items->n, false, &l) < 0)
        return -1;
    l->n = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->items[i];
        bool ok = false;
        if (by_attr && get_path(r, &items->items[i], attr, &v) < 0)
            return -1;
        if (a->npos > skip) {
            if (run_test(r, &a->pos[skip], &v, a->pos + skip + 1, a->npos - skip - 1, &ok) < 0)
                return -1;
        } else {
            ok = truthy(&v);
        }
        if (ok == keep)
            l->items[l->n++] = items->items[i];
    }
    *out = jv_listv(l);
    return 0;
}

/* map(attribute='x', default=...) or map('filter', args...). */
static int f_map(R *r, const jv *self, const args *a, int mode, jv *out)
{
    const jlist *items;
    jlist *l;
    const jv *attr = NULL, *dflt = NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        if (strcmp(a->kw[k], "attribute") == 0)
            attr = &a->kwv[k];
        else if (strcmp(a->kw[k], "default") == 0)
            dflt = &a->kwv[k];
        else if (a->npos == 0)
            return rfail(r, "map got an unexpected keyword argument '%s'", a->kw[k]);
    }
    const builtin *f = NULL;
    if (!attr) {
        char *name;
        if (a->npos == 0)
            return rfail(r, "map needs a filter name or attribute=");
        if (want_str(r, "map", &a->pos[0]) < 0 || str_cstr(r, a->pos[0].s, &name) < 0)
            return -1;
        if (!(f = find_filter(name)))
            return rfail(r, "unknown filter '%s'", name);
    }
    jstr path;
    if ((attr && to_str(r, attr, &path) < 0) || jv_iter(r, self, &items) < 0 ||
        new_list(r, items->n, false, &l) < 0)
        return -1;
    args rest = {a->npos ? a->pos + 1 : NULL, a->npos ? a->npos - 1 : 0, a->kw, a->kwv, a->nkw};
    for (size_t i = 0; i < items->n; i++) {
        jv *v = &l->items[i];
        if (attr ? get_path(r, &items->items[i], path, v) < 0
                 : f->fn(r, &items->items[i], &rest, f->mode, v) < 0)
            return -1;
        if (attr && dflt && is_undef(v))
            *v = *dflt;
    }
    *out = jv_listv(l);
    return 0;
}

static const builtin filters[] = {{"abs", f_abs, 0},
                                  {"capitalize", case_fn, CASE_CAPITALIZE},
                                  {"count", f_length, 0},
                                  {"d", f_default, 0},
                                  {"default", f_default, 0},
                                  {"first", first_or_last, 0},
                                  {"float", f_float, 0},
                                  {"int", f_int, 0},
                                  {"items", items_of, 0},
                                  {"join", f_join, 0},
                                  {"last", first_or_last, 1},
                                  {"length", f_length, 0},
                                  {"list", f_list, 0},
                                  {"lower", case_fn, CASE_LOWER},
                                  {"map", f_map, 0},
                                  {"reject", filter_items, 0},
                                  {"rejectattr", filter_items, SELECT_BY_ATTR},
                                  {"replace", f_replace, 0},
                                  {"reverse", f_list, 1},
                                  {"safe", f_safe, 0},
                                  {"select", filter_items, SELECT_KEEP},
                                  {"selectattr", filter_items, SELECT_KEEP | SELECT_BY_ATTR},
                                  {"string", f_string, 0},
                                  {"title", case_fn, CASE_TITLE_WORDS},
                                  {"tojson", f_tojson, 0},
                                  {"trim", m_strip, STRIP_LEFT | STRIP_RIGHT},
                                  {"upper", case_fn, CASE_UPPER},
                                  {NULL, NULL, 0}};

static const builtin *find_filter(const char *name)
{
    return find_in(filters, name);
}

/* ---- tests ---- */

/* Tests of what a value is; Undefined iterates (as empty), has a length
 * and is callable in jinja2. */
typedef enum kind_test {
    IS_DEFINED,
    IS_UNDEFINED,
    IS_NONE,
    IS_STRING,
    IS_NUMBER,
    IS_INTEGER,
    IS_FLOAT,
    IS_BOOLEAN,
    IS_TRUE,
    IS_FALSE,
    IS_MAPPING,
    IS_ITERABLE,
    IS_SEQUENCE,
    IS_CALLABLE,
} kind_test;

static bool has_kind(const jv *v, kind_test k)
{
    bool container = v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT;
    switch (k) {
    case IS_DEFINED: return !is_undef(v);
    case IS_UNDEFINED: return is_undef(v);
    case IS_NONE: return v->kind == JV_NONE;
    case IS_STRING: return v->kind == JV_STR;
    case IS_NUMBER: return is_number(v);
    case IS_INTEGER: return v->kind == JV_INT;
    case IS_FLOAT: return v->kind == JV_FLOAT;
    case IS_BOOLEAN: return v->kind == JV_BOOL;
    case IS_TRUE: return v->kind == JV_BOOL && v->b;
    case IS_FALSE: return v->kind == JV_BOOL && !v->b;
    case IS_MAPPING: return v->kind == JV_DICT;
    case IS_ITERABLE: return container || v->kind == JV_LOOP || is_undef(v);
    case IS_SEQUENCE: return container || is_undef(v);
    case IS_CALLABLE: return v->kind == JV_FUNC || is_undef(v);
    }
    return false;
}

static int t_kind(R *r, const jv *v, const args *a, int mode, jv *o)
{
    if (no_args(r, "this test", a) < 0)
        return -1;
    *o = jv_bool(has_kind(v, (kind_test)mode));
    return 0;
}

/* islower / isupper (mode 1): some cased character, all in that case. */
static int t_case(R *r, const jv *v, const args *a, int upper, jv *o)
{
    jstr s;
    if (no_args(r, upper ? "upper" : "lower", a) < 0 || to_str(r, v, &s) < 0)
        return -1;
    bool cased = false, ok = true;
    for (size_t i = 0; i < s.n; i++)
        for (size_t at = 0; at < s.p[i].len;) {
            uint32_t cp;
            at += cp_at(s.p[i].s + at, s.p[i].len - at, &cp);
            utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
            bool lower = c == UTF8PROC_CATEGORY_LL;
            bool up = c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
            cased |= lower || up;
            ok &= upper ? !lower && c != UTF8PROC_CATEGORY_LT : !up;
        }
    *o = jv_bool(cased && ok);
    return 0;
}

/* even (mode 0) and odd (mode 1) */
static int t_parity(R *r, const jv *v, const args *a, int odd, jv *o)
{
    if (no_args(r, "even/odd", a) < 0)
        return -1;
    if (!is_integer(v))
        return rfail(r, "even/odd expects an integer, not %s", type_name(v));
    *o = jv_bool((int_of(v) % 2 != 0) == odd);
    return 0;
}

static int t_divisibleby(R *r, const jv *v, const args *a, int mode, jv *o)
{
    jv p[1];
    if (BIND("divisibleby", a, p, "num") < 0)
        return -1;
    jv m;
    if (binary(r, OP_MOD, v, &p[0], &m) < 0)
        return -1;
    *o = jv_bool(!truthy(&m));
    return 0;
}

static int t_compare(R *r, const jv *v, const args *a, int op, jv *o)
{
    jv p[1];
    bool ok;
    if (BIND("a comparison test", a, p, "other") < 0 || compare(r, (cmpop)op, v, &p[0], &ok) < 0)
        return -1;
    *o = jv_bool(ok);
    return 0;
}

static const builtin tests[] = {{"!=", t_compare, CMP_NE},
                                {"<", t_compare, CMP_LT},
                                {"<=", t_compare, CMP_LE},
                                {"==", t_compare, CMP_EQ},
                                {">", t_compare, CMP_GT},
                                {">=", t_compare, CMP_GE},
                                {"boolean", t_kind, IS_BOOLEAN},
                                {"callable", t_kind, IS_CALLABLE},
                                {"defined", t_kind, IS_DEFINED},
                                {"divisibleby", t_divisibleby, 0},
                                {"eq", t_compare, CMP_EQ},
                                {"equalto", t_compare, CMP_EQ},
                                {"even", t_parity, 0},
                                {"false", t_kind, IS_FALSE},
                                {"float", t_kind, IS_FLOAT},
                                {"ge", t_compare, CMP_GE},
                                {"greaterthan", t_compare, CMP_GT},
                                {"gt", t_compare, CMP_GT},
                                {"in", t_compare, CMP_IN},
                                {"integer", t_kind, IS_INTEGER},
                                {"iterable", t_kind, IS_ITERABLE},
                                {"le", t_compare, CMP_LE},
                                {"lessthan", t_compare, CMP_LT},
                                {"lower", t_case, 0},
                                {"lt", t_compare, CMP_LT},
                                {"mapping", t_kind, IS_MAPPING},
                                {"ne", t_compare, CMP_NE},
                                {"none", t_kind, IS_NONE},
                                {"number", t_kind, IS_NUMBER},
                                {"odd", t_parity, 1},
                                {"sequence", t_kind, IS_SEQUENCE},
                                {"string", t_kind, IS_STRING},
                                {"true", t_kind, IS_TRUE},
                                {"undefined", t_kind, IS_UNDEFINED},
                                {"upper", t_case, 1},
                                {NULL, NULL, 0}};

static const builtin *find_test(const char *name)
{
    return find_in(tests, name);
}

/* ---- globals ---- */

static int g_raise_exception(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    jstr msg;
    char *text;
    if (BIND("raise_exception", a, p, "message") < 0 || to_str(r, &p[0], &msg) < 0 ||
        str_cstr(r, msg, &text) < 0)
        return -1;
    return rfail(r, "raise_exception: %s", text);
}

/* transformers' strftime_now(format), on the caller's clock, in UTC. */
static int g_strftime_now(R *r, const jv *self, const args *a, int mode, jv *out)
{
    jv p[1];
    char *fmt;
    if (BIND("strftime_now", a, p, "format") < 0 || want_str(r, "strftime_now", &p[0]) < 0 ||
        str_cstr(r, p[0].s, &fmt) < 0)
        return -1;
    if (p[0].s.len > 256)
        return rfail(r, "strftime_now: format longer than 256 bytes");
    time_t t = (time_t)r->env->now;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return rfail(r, "strftime_now: the clock (%lld) is out of range", (long long)r->env->now);
    size_t cap = 64 + 16 * p[0].s.len;
    char *buf = ralloc(r, cap);
    if (!buf)
        return -1;
    size_t n = strftime(buf, cap, fmt, &tm);
    out->kind = JV_STR;
    return str_make(r, buf, n, false, &out->s);
}

static int g_range(R *r, const jv *self, const args *a, int mode, jv *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->nkw || a->npos == 0 || a->npos > 3)
        return rfail(r, "range() takes 1 to 3 positional arguments");
    for (size_t i = 0; i < a->npos; i++)
        if (want_int(r, "range()", &a->pos[i], 0, &v[a->npos == 1 ? 1 : i]) < 0)
            return -1;
    if (v[2] == 0)
        return rfail(r, "range() arg 3 must not be zero");
    double span = ((double)v[1] - (double)v[0]) / (double)v[2];
    size_t n = span > 0 ? (size_t)ceil(span) : 0;
    if (n > r->env->limits.max_steps)
        return rfail(r, "range() of %zu items passes the step limit", n);
    jlist *l;
    if (new_list(r, n, false, &l) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        l->items[i] = jv_int(v[0] + (int64_t)i * v[2]);
    *out = jv_listv(l);
    return 0;
}

/* dict(mapping?, **kw) and namespace(mapping?, **kw): a new dict. */
static int new_dict_from(R *r, const args *a, jdict **out)
{
    jdict *d = ralloc(r, sizeof *d);
    if (!d)
        return -1;
    *d = (jdict){0, 0, NULL};
    if (a->npos > 1 || (a->npos == 1 && a->pos[0].kind != JV_DICT))
        return rfail(r, "dict() and namespace() take at most one mapping and keywords");
    for (size_t i = 0; a->npos && i < a->pos[0].dict->n; i++)
        if (dict_set(r, d, a->pos[0].dict->items[i].key, a->pos[0].dict->items[i].val) < 0)
            return -1;
    for (size_t k = 0; k < a->nkw; k++) {
        jv key = {.kind = JV_STR};
        if (str_make(r, a->kw[k], strlen(a->kw[k]), false, &key.s) < 0 ||
            dict_set(r, d, key, a->kwv[k]) < 0)
            return -1;
    }
    *out = d;
    return 0;
}

/* dict() (mode 0) and namespace() (mode 1) */
static int g_dict(R *r, const jv *self, const args *a, int is_namespace, jv *out)
{
    jdict *d = NULL;
    if (new_dict_from(r, a, &d) < 0)
        return -1;
    *out = is_namespace ? (jv){.kind = JV_NS, .ns = d} : (jv){.kind = JV_DICT, .dict = d};
    return 0;
}

static const builtin globals[] = {{"dict", g_dict, 0},
                                  {"namespace", g_dict, 1},
                                  {"raise_exception", g_raise_exception, 0},
                                  {"range", g_range, 0},
                                  {"strftime_now", g_strftime_now, 0},
                                  {NULL, NULL, 0}};

static const builtin *find_global(const char *name)
{
    return find_in(globals, name);
}

/* ---- render ---- */

static int from_json(R *r, const json_value *j, bool content, jv *out, int depth)
{
    if (depth > VALUE_MAX_DEPTH)
        return rfail(r, "variable nested deeper than %d", VALUE_MAX_DEPTH);
    switch (j->type) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_BOOL: *out = jv_bool(j->boolean); return 0;
    case JSON_NUMBER: *out = j->num.is_int ? jv_int(j->num.i) : jv_float(j->num.d); return 0;
    case JSON_STRING:
        out->kind = JV_STR;
        return str_make(r, j->str.s, j->str.len, content, &out->s);
    case JSON_ARRAY: {
        jlist *l;
        if (new_list(r, j->arr.n, false, &l) < 0)
            return -1;
        for (size_t i = 0; i < j->arr.n; i++)
            if (from_json(r, &j->arr.items[i], content, &l->items[i], depth + 1) < 0)
                return -1;
        *out = jv_listv(l);
        return 0;
    }
    case JSON_OBJECT: {
        jdict *d = ralloc(r, sizeof *d);
        jkv *items = ralloc(r, (j->obj.n ? j->obj.n : 1) * sizeof *items);
        if (!d || !items)
            return -1;
        *d = (jdict){j->obj.n, j->obj.n, items};
        for (size_t i = 0; i < j->obj.n; i++) {
            const json_member *m = &j->obj.members[i];
            items[i].key.kind = JV_STR;
            if (str_make(r, m->key, m->key_len, content, &items[i].key.s) < 0 ||
                from_json(r, &m->value, content, &items[i].val, depth + 1) < 0)
                return -1;
        }
        *out = (jv){.kind = JV_DICT, .dict = d};
        return 0;
    }
    }
    return rfail(r, "unknown JSON type");
}

static int finish(R *r, const sb *o, jinja_output *out)
{
    out->text = malloc(o->len + 1);
    out->segments = o->n_runs ? malloc(o->n_runs * sizeof *out->segments) : NULL;
    if (!out->text || (o->n_runs && !out->segments)) {
        jinja_output_free(out);
        return rfail(r, "out of memory for the rendered text");
    }
    if (o->len)
        memcpy(out->text, o->buf, o->len);
    out->text[o->len] = '\0';
    out->len = o->len;
    size_t at = 0;
    for (size_t i = 0; i < o->n_runs; i++) {
        out->segments[i] = (jinja_segment){out->text + at, o->runs[i].len, o->runs[i].content};
        at += o->runs[i].len;
    }
    out->n_segments = o->n_runs;
    return 0;
}

int jinja_render(const jinja_template *t, const jinja_env *env, jinja_output *out, llmq_err *err)
{
    memset(out, 0, sizeof *out);
    R r = {.t = t, .env = env, .err = err};
    r.a.limit = env->limits.max_memory;
    sb o;
    sb_init(&o, &r);
    frame root = {0};
    r.scope = r.root = &root;
    r.out = &o;
    int rc = 0;
    if (env->n_vars && !(r.vars = ralloc(&r, env->n_vars * sizeof *r.vars)))
        rc = -1;
    for (size_t i = 0; rc == 0 && i < env->n_vars; i++)
        rc = from_json(&r, env->vars[i].value, env->vars[i].from_content, &r.vars[i], 0);
    if (rc == 0)
        rc = exec_body(&r, &(nodelist){(node **)t->body, t->n_body}) < 0 ? -1 : 0;
    if (rc == 0)
        rc = finish(&r, &o, out);
    arena_free(&r.a);
    return rc;
}

void jinja_output_free(jinja_output *out)
{
    free(out->text);
    free(out->segments);
    memset(out, 0, sizeof *out);
}
