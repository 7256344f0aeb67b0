/* cli: every program's command line, from one table of flags.
 *
 * A program lists each flag once -- long name, short letter, the name of
 * its value, its help line, the kind and range of the value and where it
 * goes -- in a cli_spec; cli_parse reads argv by that table and cli_help
 * prints --help from it, so no flag is parsed without a help line nor has
 * a help line without being parsed.  -h/--help and --version are cli's
 * own, in every program.
 *
 * Parsing is strict: a long flag is spelled in full (--name VALUE or
 * --name=VALUE; no abbreviations), short ones may be bundled (-qv, -t4), a
 * value is the whole argument (a number in decimal and in range, nothing
 * after it), a switch takes no value, and "--" ends the flags.  A repeated
 * flag's last value wins, except a list's, which collects.  Messages name
 * the flag as it was typed and, for a number, its range.  A destination
 * holds its default until its flag is given.
 *
 * A program's main:
 *
 *     const cli_flag flags[] = {
 *         {"slots", 's', "N", "jobs run at once", CLI_INT32(&o->slots, 1, 4096)},
 *         {"verbose", 'v', NULL, "a log line per job", CLI_SWITCH(&o->verbose)},
 *     };
 *     const cli_spec spec = {.program = "llmq-worker", .usage = USAGE,
 *                            .flags = flags, .n_flags = CLI_COUNT(flags),
 *                            .check = check_options, .check_ctx = o};
 *     int status = cli_read(&spec, argc, argv);
 *     if (status != CLI_RUN)
 *         return status;
 *
 * Also here: the stop signals every long-running program sets up. */
#ifndef LLMQ_COMMON_CLI_H
#define LLMQ_COMMON_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

/* The exit status of a bad command line, in every program. */
#define CLI_EXIT_USAGE 2
/* What cli_read returns when the program should go on. */
#define CLI_RUN (-1)
/* Flags in one table, at most (one bit each while parsing). */
#define CLI_MAX_FLAGS 64

typedef enum cli_kind {
    CLI_KIND_HEADING, /* no flag: a heading line in --help, before the flags it heads */
    CLI_KIND_SWITCH,  /* no value: *to.on = true */
    CLI_KIND_TEXT,    /* *to.text = the value (a pointer into argv), never empty */
    CLI_KIND_LIST,    /* the value appended to to.list, at most max of them */
    CLI_KIND_INT32,   /* whole numbers in range.i */
    CLI_KIND_INT64,
    CLI_KIND_UINT32,
    CLI_KIND_UINT64, /* whole numbers in range.u */
    CLI_KIND_FLOAT,  /* finite decimal numbers in range.f */
    CLI_KIND_DOUBLE,
    CLI_KIND_CALL, /* to.call.fn(to.call.ctx, value, err) */
} cli_kind;

/* Takes the value of a CLI_KIND_CALL flag: 0, or -1 with err saying what is
 * wrong with it (cli prefixes the flag). */
typedef int (*cli_call_fn)(void *ctx, const char *value, llmq_err *err);

/* What a table cannot say (flags that go together or exclude each other),
 * checked once every flag is read: 0, or -1 with err saying what. */
typedef int (*cli_check_fn)(void *ctx, llmq_err *err);

typedef struct cli_flag {
    const char *name;       /* long name, without "--" */
    char letter;            /* short name, 0 for none */
    const char *value_name; /* "N", "FILE" ... in --help; NULL for a switch */
    const char *help;       /* one paragraph: --help wraps it */
    cli_kind kind;
    union {
        bool *on;
        const char **text;
        struct {
            const char **items;
            size_t *n;
            size_t max;
        } list;
        int32_t *i32;
        int64_t *i64;
        uint32_t *u32;
        uint64_t *u64;
        float *f32;
        double *f64;
        struct {
            cli_call_fn fn;
            void *ctx;
        } call;
    } to;
    /* Numbers: the range, bounds included.  Texts and lists: the length in
     * bytes, when range.i.lo > 0 (range.i.hi 0: no upper bound). */
    union {
        struct {
            int64_t lo, hi;
        } i;
        struct {
            uint64_t lo, hi;
        } u;
        struct {
            double lo, hi;
        } f;
    } range;
    bool required; /* cli_parse fails, naming it, when it is not given */
} cli_flag;

/* The kind, destination and range of a table row, after its four texts. */
#define CLI_SWITCH(p) .kind = CLI_KIND_SWITCH, .to.on = (p)
/* A text flag's value is never "": an empty file, endpoint or name is a
 * slip (a shell variable unset), which "FLAG: must not be empty" names
 * where the program would fail later on ":" or "" alone. */
#define CLI_TEXT(p) .kind = CLI_KIND_TEXT, .to.text = (p), .range.i = {1, 0}
#define CLI_TEXT_BYTES(p, lo, hi) .kind = CLI_KIND_TEXT, .to.text = (p), .range.i = {(lo), (hi)}
#define CLI_LIST(items, n, max, lo, hi) \
    .kind = CLI_KIND_LIST, .to.list = {(items), (n), (max)}, .range.i = {(lo), (hi)}
#define CLI_INT32(p, lo, hi) .kind = CLI_KIND_INT32, .to.i32 = (p), .range.i = {(lo), (hi)}
#define CLI_INT64(p, lo, hi) .kind = CLI_KIND_INT64, .to.i64 = (p), .range.i = {(lo), (hi)}
#define CLI_UINT32(p, lo, hi) .kind = CLI_KIND_UINT32, .to.u32 = (p), .range.i = {(lo), (hi)}
#define CLI_UINT64(p, lo, hi) .kind = CLI_KIND_UINT64, .to.u64 = (p), .range.u = {(lo), (hi)}
#define CLI_FLOAT(p, lo, hi) .kind = CLI_KIND_FLOAT, .to.f32 = (p), .range.f = {(lo), (hi)}
#define CLI_DOUBLE(p, lo, hi) .kind = CLI_KIND_DOUBLE, .to.f64 = (p), .range.f = {(lo), (hi)}
#define CLI_CALL(fn, ctx) .kind = CLI_KIND_CALL, .to.call = {(fn), (ctx)}
/* A whole row: a heading ("generation:") over the flags after it. */
#define CLI_HEADING(text)                        \
    {                                            \
        .help = (text), .kind = CLI_KIND_HEADING \
    }

#define CLI_COUNT(array) (sizeof(array) / sizeof((array)[0]))

typedef struct cli_spec {
    const char *program; /* its messages start "PROGRAM: " */
    const char *usage;   /* --help's first lines (each ending in a newline):
                          * the usage line and what the program does */
    const char *epilog;  /* its last lines (notes, exit statuses), or NULL */
    const cli_flag *flags;
    size_t n_flags;           /* at most CLI_MAX_FLAGS */
    const char **operand;     /* where the one operand goes (llmq-keygen NAME); NULL: none */
    const char *operand_name; /* set: the operand is required, and named so when missing */
    cli_check_fn check;       /* NULL: none */
    void *check_ctx;
} cli_spec;

/* Reads argv[1..argc) into the table's destinations, then checks that the
 * required flags and operand were given and runs the spec's check.  0: run;
 * 1: --help was asked, 2: --version (what follows either is not read); -1:
 * bad usage, err says what. */
int cli_parse(const cli_spec *s, int argc, char **argv, llmq_err *err);

/* Writes --help: the usage text, one row per flag (under its heading),
 * -h/--help, then the epilog. */
void cli_help(const cli_spec *s, FILE *out);

/* Writes --version: "PROGRAM (llmq) VERSION, commit COMMIT", the version
 * configure was given (PACKAGE_VERSION) and the git commit the build was
 * made from (with "-dirty" when the tree had changes; left out where the
 * source is not a git checkout and the tarball recorded none). */
void cli_version(const cli_spec *s, FILE *out);

/* cli_parse as a main wants it: CLI_RUN to go on; otherwise the status to
 * exit with at once, 0 after --help or --version (on stdout) or
 * CLI_EXIT_USAGE after the error and "Try 'PROGRAM --help'." (on stderr). */
int cli_read(const cli_spec *s, int argc, char **argv);

/* Parses text as a whole number in lo..hi, as a table's CLI_KIND_INT64 does
 * (for values read elsewhere: an environment variable, a list item); the
 * message names what (a flag) and the range. */
int cli_int(const char *what, const char *text, int64_t lo, int64_t hi, int64_t *out,
            llmq_err *err);

/* Blocks SIGTERM and SIGINT (call it before any thread starts, so that all
 * inherit the mask), ignores SIGPIPE, and returns a non-blocking signalfd
 * that reports the stop signals, for the caller's poll loop; -1 on error. */
int cli_stop_signals(void);

#endif
