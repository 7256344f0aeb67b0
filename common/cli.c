#include "common/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>

#include "common/commit.h"
#include "config.h"

/* --help's lines stay within this many columns; the help texts start at
 * most this far in (a longer flag puts its text on the next line). */
#define HELP_WIDTH 80
#define HELP_COLUMN_MAX 30

/* Every program's -h/--help and --version, found after the table's own
 * flags. */
static const cli_flag HELP = {"help", 'h', NULL, "show this help", CLI_SWITCH(NULL)};
static const cli_flag VERSION_FLAG = {"version", 0, NULL, "show the version and its commit",
                                      CLI_SWITCH(NULL)};

/* cli's own flags, which take no value and stop the parse when given. */
static bool is_own(const cli_flag *f)
{
    return f == &HELP || f == &VERSION_FLAG;
}

/* ---- values ------------------------------------------------------------------------ */

/* Decimal digits, after a '-' where one may be; nothing else. */
static bool whole_syntax(const char *text, bool minus)
{
    if (minus && *text == '-')
        text++;
    return *text && strspn(text, "0123456789") == strlen(text);
}

int cli_int(const char *what, const char *text, int64_t lo, int64_t hi, int64_t *out, llmq_err *err)
{
    if (!whole_syntax(text, true))
        return llmq_errf(err, "%s: '%s' is not a whole number (%" PRId64 "..%" PRId64 ")", what,
                         text, lo, hi);
    errno = 0;
    const long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE || v < lo || v > hi)
        return llmq_errf(err, "%s: %s is out of range (%" PRId64 "..%" PRId64 ")", what, text, lo,
                         hi);
    *out = v;
    return 0;
}

static int parse_uint64(const char *what, const char *text, uint64_t lo, uint64_t hi, uint64_t *out,
                        llmq_err *err)
{
    if (!whole_syntax(text, false))
        return llmq_errf(err, "%s: '%s' is not a whole number (%" PRIu64 "..%" PRIu64 ")", what,
                         text, lo, hi);
    errno = 0;
    const unsigned long long v = strtoull(text, NULL, 10);
    if (errno == ERANGE || v < lo || v > hi)
        return llmq_errf(err, "%s: %s is out of range (%" PRIu64 "..%" PRIu64 ")", what, text, lo,
                         hi);
    *out = v;
    return 0;
}

/* A decimal number (digits, sign, point, exponent: no "inf", no hex). */
static int parse_real(const char *what, const char *text, double lo, double hi, double *out,
                      llmq_err *err)
{
    char *end = NULL;
    errno = 0;
    const bool decimal = *text && strspn(text, "0123456789+-.eE") == strlen(text);
    const double v = decimal ? strtod(text, &end) : 0;
    if (!decimal || *end)
        return llmq_errf(err, "%s: '%s' is not a number", what, text);
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        return llmq_errf(err, "%s: %s is out of range (%.15g..%.15g)", what, text, lo, hi);
    *out = v;
    return 0;
}

static int check_bytes(const cli_flag *f, const char *what, const char *text, llmq_err *err)
{
    const int64_t lo = f->range.i.lo, hi = f->range.i.hi, len = (int64_t)strlen(text);
    if (lo <= 0 || (len >= lo && (hi == 0 || len <= hi)))
        return 0;
    if (hi == 0 && lo == 1)
        return llmq_errf(err, "%s: must not be empty", what);
    if (hi == 0)
        return llmq_errf(err, "%s: must be at least %" PRId64 " bytes", what, lo);
    return llmq_errf(err, "%s: must be %" PRId64 "..%" PRId64 " bytes", what, lo, hi);
}

static int take_list_item(const cli_flag *f, const char *what, const char *text, llmq_err *err)
{
    if (*f->to.list.n == f->to.list.max)
        return llmq_errf(err, "%s: at most %zu values", what, f->to.list.max);
    if (check_bytes(f, what, text, err))
        return -1;
    f->to.list.items[(*f->to.list.n)++] = text;
    return 0;
}

/* Stores text as f's value; what is the flag as it was typed. */
static int take_value(const cli_flag *f, const char *what, const char *text, llmq_err *err)
{
    int64_t i = 0;
    double d = 0;
    int rc = 0;
    switch (f->kind) {
    case CLI_KIND_TEXT:
        rc = check_bytes(f, what, text, err);
        if (rc == 0)
            *f->to.text = text;
        return rc;
    case CLI_KIND_LIST: return take_list_item(f, what, text, err);
    case CLI_KIND_INT32:
    case CLI_KIND_INT64:
    case CLI_KIND_UINT32:
        rc = cli_int(what, text, f->range.i.lo, f->range.i.hi, &i, err);
        if (rc == 0 && f->kind == CLI_KIND_INT32)
            *f->to.i32 = (int32_t)i;
        else if (rc == 0 && f->kind == CLI_KIND_INT64)
            *f->to.i64 = i;
        else if (rc == 0)
            *f->to.u32 = (uint32_t)i;
        return rc;
    case CLI_KIND_UINT64:
        return parse_uint64(what, text, f->range.u.lo, f->range.u.hi, f->to.u64, err);
    case CLI_KIND_FLOAT:
    case CLI_KIND_DOUBLE:
        rc = parse_real(what, text, f->range.f.lo, f->range.f.hi, &d, err);
        if (rc == 0 && f->kind == CLI_KIND_FLOAT)
            *f->to.f32 = (float)d;
        else if (rc == 0)
            *f->to.f64 = d;
        return rc;
    case CLI_KIND_CALL:
        return f->to.call.fn(f->to.call.ctx, text, err) ? llmq_err_prefix(err, "%s", what) : 0;
    case CLI_KIND_HEADING:
    case CLI_KIND_SWITCH: break;
    }
    return llmq_errf(err, "%s: takes no value", what);
}

/* ---- parsing ----------------------------------------------------------------------- */

typedef struct parser {
    const cli_spec *s;
    int argc;
    char **argv;
    int next; /* the argument after the one being read */
    bool given[CLI_MAX_FLAGS];
    bool have_operand;
    llmq_err *err;
} parser;

static bool is_flag(const cli_flag *f)
{
    return f->kind != CLI_KIND_HEADING;
}

static const cli_flag *by_name(const cli_spec *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->n_flags; i++)
        if (is_flag(&s->flags[i]) && strlen(s->flags[i].name) == len &&
            memcmp(s->flags[i].name, name, len) == 0)
            return &s->flags[i];
    if (len == 4 && memcmp(name, "help", 4) == 0)
        return &HELP;
    return len == 7 && memcmp(name, "version", 7) == 0 ? &VERSION_FLAG : NULL;
}

static const cli_flag *by_letter(const cli_spec *s, char letter)
{
    for (size_t i = 0; i < s->n_flags; i++)
        if (is_flag(&s->flags[i]) && s->flags[i].letter == letter)
            return &s->flags[i];
    return letter == 'h' ? &HELP : NULL;
}

/* f given, typed as what, with value (NULL when none was attached to it:
 * the next argument is taken if f needs one).  1 for --help, 2 for
 * --version. */
static int given(parser *p, const cli_flag *f, const char *what, const char *value)
{
    if (is_own(f) && !value)
        return f == &HELP ? 1 : 2;
    if (f->kind == CLI_KIND_SWITCH && !value) {
        *f->to.on = true;
    } else if (f->kind == CLI_KIND_SWITCH || is_own(f)) {
        return llmq_errf(p->err, "option '%s' takes no value", what);
    } else {
        if (!value && p->next == p->argc)
            return llmq_errf(p->err, "option '%s' needs a value", what);
        if (take_value(f, what, value ? value : p->argv[p->next++], p->err))
            return -1;
    }
    p->given[f - p->s->flags] = true;
    return 0;
}

/* "--name" or "--name=value". */
static int long_flag(parser *p, const char *arg)
{
    const char *name = arg + 2, *eq = strchr(name, '=');
    const size_t len = eq ? (size_t)(eq - name) : strlen(name);
    char what[72];
    snprintf(what, sizeof what, "--%.*s", (int)len, name);
    const cli_flag *f = by_name(p->s, name, len);
    if (!f)
        return llmq_errf(p->err, "unknown option '%s'", what);
    return given(p, f, what, eq ? eq + 1 : NULL);
}

/* "-x", "-xy" (switches bundled), "-xVALUE". */
static int short_flags(parser *p, const char *arg)
{
    for (const char *c = arg + 1; *c; c++) {
        const char what[3] = {'-', *c, '\0'};
        const cli_flag *f = by_letter(p->s, *c);
        if (!f)
            return llmq_errf(p->err, "unknown option '%s'", what);
        const bool takes_value = f->kind != CLI_KIND_SWITCH && !is_own(f);
        const int rc = given(p, f, what, takes_value && c[1] ? c + 1 : NULL);
        if (rc != 0 || takes_value)
            return rc;
    }
    return 0;
}

static int operand(parser *p, const char *arg)
{
    if (!p->s->operand || p->have_operand)
        return llmq_errf(p->err, "unexpected argument '%s'", arg);
    *p->s->operand = arg;
    p->have_operand = true;
    return 0;
}

/* Every required flag that was not given, in table order, named as a usage
 * line names it (the letter where there is one); then the operand. */
static int check_required(const parser *p)
{
    char missing[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < p->s->n_flags; i++) {
        const cli_flag *f = &p->s->flags[i];
        if (!f->required || p->given[i] || len >= sizeof missing)
            continue;
        if (f->letter)
            len += (size_t)snprintf(missing + len, sizeof missing - len, " -%c", f->letter);
        else
            len += (size_t)snprintf(missing + len, sizeof missing - len, " --%s", f->name);
    }
    if (missing[0])
        return llmq_errf(p->err, "missing required option(s):%s", missing);
    if (p->s->operand_name && !p->have_operand)
        return llmq_errf(p->err, "no %s given", p->s->operand_name);
    return 0;
}

int cli_parse(const cli_spec *s, int argc, char **argv, llmq_err *err)
{
    if (s->n_flags > CLI_MAX_FLAGS)
        return llmq_errf(err, "%s: %zu flags, more than CLI_MAX_FLAGS", s->program, s->n_flags);
    parser p = {.s = s, .argc = argc, .argv = argv, .next = 1, .err = err};
    bool flags_over = false;
    while (p.next < argc) {
        const char *arg = argv[p.next++];
        int rc;
        if (flags_over || arg[0] != '-' || arg[1] == '\0')
            rc = operand(&p, arg);
        else if (strcmp(arg, "--") == 0)
            rc = 0, flags_over = true;
        else
            rc = arg[1] == '-' ? long_flag(&p, arg) : short_flags(&p, arg);
        if (rc != 0)
            return rc;
    }
    if (check_required(&p) != 0)
        return -1;
    return s->check ? s->check(s->check_ctx, err) : 0;
}

/* ---- --help ------------------------------------------------------------------------ */

/* "  -x, --name VALUE" (letter or four spaces) into buf; its length. */
static size_t flag_column(const cli_flag *f, char *buf, size_t size)
{
    const int n = snprintf(buf, size, "  %c%c%c --%s%s%s", f->letter ? '-' : ' ',
                           f->letter ? f->letter : ' ', f->letter ? ',' : ' ', f->name,
                           f->value_name ? " " : "", f->value_name ? f->value_name : "");
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* text from column col on (the cursor is at column at), its words wrapped
 * within HELP_WIDTH, each further line indented to col. */
static void put_wrapped(FILE *out, const char *text, size_t col, size_t at)
{
    if (at >= col) {
        fputc('\n', out);
        at = 0;
    }
    fprintf(out, "%*s", (int)(col - at), "");
    at = col;
    for (const char *w = text + strspn(text, " "); *w; w += strspn(w, " ")) {
        const size_t len = strcspn(w, " ");
        if (at > col && at + 1 + len > HELP_WIDTH) {
            fprintf(out, "\n%*s", (int)col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', out);
            at++;
        }
        fwrite(w, 1, len, out);
        at += len;
        w += len;
    }
    fputc('\n', out);
}

static void help_row(FILE *out, const cli_flag *f, size_t col)
{
    char left[128];
    const size_t n = flag_column(f, left, sizeof left);
    fputs(left, out);
    /* Two spaces at least between a flag and its text. */
    put_wrapped(out, f->help, col, n + 2 > col ? col : n);
}

/* Where the help texts start: two columns past the longest flag, within
 * HELP_COLUMN_MAX. */
static size_t help_column(const cli_spec *s)
{
    char left[128];
    size_t widest = flag_column(&VERSION_FLAG, left, sizeof left);
    for (size_t i = 0; i < s->n_flags; i++) {
        const size_t n = is_flag(&s->flags[i]) ? flag_column(&s->flags[i], left, sizeof left) : 0;
        widest = n > widest && n + 2 <= HELP_COLUMN_MAX ? n : widest;
    }
    return widest + 2;
}

void cli_help(const cli_spec *s, FILE *out)
{
    fputs(s->usage, out);
    const size_t col = help_column(s);
    bool headed = false; /* the first flags follow a heading, or a blank line */
    for (size_t i = 0; i < s->n_flags; i++) {
        const cli_flag *f = &s->flags[i];
        if (!is_flag(f)) {
            fprintf(out, "\n%s\n", f->help);
        } else {
            if (!headed)
                fputc('\n', out);
            help_row(out, f, col);
        }
        headed = true;
    }
    if (!headed)
        fputc('\n', out);
    help_row(out, &HELP, col);
    help_row(out, &VERSION_FLAG, col);
    if (s->epilog)
        fprintf(out, "\n%s", s->epilog);
}

void cli_version(const cli_spec *s, FILE *out)
{
    fprintf(out, "%s (%s) %s", s->program, PACKAGE_NAME, PACKAGE_VERSION);
    if (LLMQ_COMMIT[0])
        fprintf(out, ", commit %s", LLMQ_COMMIT);
    fputc('\n', out);
}

/* ---- for main ---------------------------------------------------------------------- */

int cli_read(const cli_spec *s, int argc, char **argv)
{
    llmq_err err;
    const int rc = cli_parse(s, argc, argv, &err);
    if (rc == 0)
        return CLI_RUN;
    if (rc > 0) {
        if (rc == 1)
            cli_help(s, stdout);
        else
            cli_version(s, stdout);
        return 0;
    }
    fprintf(stderr, "%s: %s\nTry '%s --help'.\n", s->program, err.msg, s->program);
    return CLI_EXIT_USAGE;
}

int cli_stop_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}
