/* test-cli: the flag table every program's command line is read by
 * (common/cli.c).
 *
 * Pins: each kind of value lands where its row says, defaults stay when a
 * flag is absent and the last of a repeated flag wins; short flags bundle
 * and take attached values; numbers are strict (the whole text, decimal, in
 * range; no spaces, signs where none belong, hex, inf or nan) and their
 * messages name the flag as typed and the range; unknown flags, prefixes
 * of real ones, missing values and values given to switches are refused by
 * name; "--" ends the flags; operands, lists and text lengths are bounded
 * (no text flag takes "": an unset shell variable is named at once);
 * a required flag or operand is named when missing; a call's error carries
 * its flag; the spec's check runs after the flags, its error bad usage;
 * --help and --version win only where they stand, take no value and have
 * no letter; --help is generated from the table: every row, its heading,
 * -h/--help and --version, wrapped within 80 columns; --version names the
 * program, llmq's version from configure and the commit of the build. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/commit.h"
#include "config.h"
#include "tests/unit/check.h"

typedef struct opts {
    bool verbose, quiet;
    const char *name, *path, *operand;
    const char *items[3];
    size_t n_items;
    int32_t slots;
    int64_t big;
    uint32_t ms;
    uint64_t seed;
    float temp;
    double timeout;
    int mode;
    char words[512]; /* the argument texts the destinations point into */
} opts;

static int parse_mode(void *mode, const char *text, llmq_err *err)
{
    if (strcmp(text, "one") != 0 && strcmp(text, "two") != 0)
        return llmq_errf(err, "'%s' is neither one nor two", text);
    *(int *)mode = text[0] == 'o' ? 1 : 2;
    return 0;
}

/* A check the table cannot express: no path named like the name. */
static int check_names(void *table_opts, llmq_err *err)
{
    const opts *o = table_opts;
    if (o->path && strcmp(o->name, o->path) == 0)
        return llmq_errf(err, "--name and --path are both '%s'", o->name);
    return 0;
}

/* What the table under test takes beyond its flags. */
enum { NEED_PATH = 1, OPERAND = 2, NEED_OPERAND = 4 };

static const char LONG_HELP[] =
    "a help text long enough that it cannot fit on one line of eighty columns, so that it"
    " wraps onto a second line and a third one, each starting under the first";

/* The table under test, over o, taking what takes says. */
static int with_table(opts *o, int takes, int argc, char **argv, FILE *help, llmq_err *err)
{
    const cli_flag flags[] = {
        {"verbose", 'v', NULL, "say more", CLI_SWITCH(&o->verbose)},
        {"quiet", 'q', NULL, "say less", CLI_SWITCH(&o->quiet)},
        {"name", 0, "NAME", "a name of 1 to 4 bytes", CLI_TEXT_BYTES(&o->name, 1, 4)},
        {"path", 'p', "FILE", "a path", CLI_TEXT(&o->path), .required = takes & NEED_PATH},
        CLI_HEADING("numbers:"),
        {"item", 'i', "TEXT", "an item, repeatable", CLI_LIST(o->items, &o->n_items, 3, 1, 0)},
        {"slots", 's', "N", "slots", CLI_INT32(&o->slots, 1, 64)},
        {"big", 0, "N", "a big one", CLI_INT64(&o->big, INT64_MIN, INT64_MAX)},
        {"ms", 0, "MS", "milliseconds", CLI_UINT32(&o->ms, 0, 86400000)},
        {"seed", 0, "S", "a seed", CLI_UINT64(&o->seed, 0, UINT64_MAX)},
        {"temp", 0, "T", "a temperature", CLI_FLOAT(&o->temp, -1e30, 1e30)},
        {"timeout", 't', "SECONDS", "a timeout", CLI_DOUBLE(&o->timeout, 0, 10)},
        {"mode", 0, "one|two", LONG_HELP, CLI_CALL(parse_mode, &o->mode)},
    };
    const cli_spec spec = {.program = "prog",
                           .usage = "usage: prog [OPTION]...\n",
                           .epilog = "The end.\n",
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .operand = takes & (OPERAND | NEED_OPERAND) ? &o->operand : NULL,
                           .operand_name = takes & NEED_OPERAND ? "WORD" : NULL,
                           .check = check_names,
                           .check_ctx = o};
    if (help) {
        cli_help(&spec, help);
        return 0;
    }
    return cli_parse(&spec, argc, argv, err);
}

static const opts DEFAULTS = {
    .slots = 8, .big = 1, .ms = 2, .seed = 3, .temp = 0.5f, .timeout = 1, .name = "dflt"};

/* Parses the words of line (split at spaces; "" for none) into *o. */
static int parse_line(opts *o, const char *line, int takes, llmq_err *err)
{
    char *argv[32] = {"prog"};
    int argc = 1;
    *o = DEFAULTS;
    snprintf(o->words, sizeof o->words, "%s", line);
    for (char *w = strtok(o->words, " "); w && argc < 31; w = strtok(NULL, " "))
        argv[argc++] = w;
    err->msg[0] = '\0';
    return with_table(o, takes, argc, argv, NULL, err);
}

/* line is refused, with a message that contains want. */
static void refused(const char *line, const char *want)
{
    opts o;
    llmq_err err;
    const int rc = parse_line(&o, line, 0, &err);
    CHECK(rc == -1 && strstr(err.msg, want), "'%s' is refused: %s", line, err.msg);
}

static void test_kinds(void)
{
    opts o;
    llmq_err err;
    CHECK(parse_line(&o, "", 0, &err) == 0 && !o.verbose && o.slots == 8 && o.seed == 3 &&
              o.temp == 0.5f && strcmp(o.name, "dflt") == 0 && o.mode == 0,
          "no flags: every destination keeps its default");
    int rc = parse_line(&o,
                        "--verbose --name=ab --path p --item a --item b --slots 7 --big -5"
                        " --ms 86400000 --seed 18446744073709551615 --temp -2.5e3"
                        " --timeout=10 --mode two",
                        0, &err);
    CHECK(rc == 0 && o.verbose && !o.quiet && strcmp(o.name, "ab") == 0 &&
              strcmp(o.path, "p") == 0 && o.n_items == 2 && strcmp(o.items[1], "b") == 0 &&
              o.slots == 7 && o.big == -5 && o.ms == 86400000u && o.seed == UINT64_MAX &&
              o.temp == -2500.0f && o.timeout == 10 && o.mode == 2,
          "each kind lands in its destination, range ends included (%s)", err.msg);
    rc = parse_line(&o, "-vq -s7 -p p2 -t 0.25 -ix", 0, &err);
    CHECK(rc == 0 && o.verbose && o.quiet && o.slots == 7 && strcmp(o.path, "p2") == 0 &&
              o.timeout == 0.25 && o.n_items == 1 && strcmp(o.items[0], "x") == 0,
          "short flags bundle (-vq) and take values attached (-s7) or apart (-p p2)");
    rc = parse_line(&o, "--slots 3 --slots 5 -s 6", 0, &err);
    CHECK(rc == 0 && o.slots == 6, "the last of a repeated flag wins");
    rc = parse_line(&o, "--temp -1", 0, &err);
    CHECK(rc == 0 && o.temp == -1.0f, "a value may start with '-'");
}

static void test_strict_numbers(void)
{
    refused("--slots 7x", "--slots: '7x' is not a whole number (1..64)");
    refused("--slots 0x10", "is not a whole number");
    refused("--slots +7", "is not a whole number");
    refused("--slots -", "is not a whole number");
    refused("--slots=", "--slots: '' is not a whole number");
    refused("--slots 65", "--slots: 65 is out of range (1..64)");
    refused("--slots 0", "--slots: 0 is out of range (1..64)");
    refused("-s 99", "-s: 99 is out of range (1..64)");
    refused("--big 9223372036854775808", "--big: 9223372036854775808 is out of range");
    refused("--seed -1", "--seed: '-1' is not a whole number (0..18446744073709551615)");
    refused("--seed 18446744073709551616", "--seed: 18446744073709551616 is out of range");
    refused("--ms 86400001", "--ms: 86400001 is out of range (0..86400000)");
    refused("--temp nan", "--temp: 'nan' is not a number");
    refused("--temp inf", "--temp: 'inf' is not a number");
    refused("--temp 0x1p3", "--temp: '0x1p3' is not a number");
    refused("--temp 1.5.2", "--temp: '1.5.2' is not a number");
    refused("--temp 1e999", "--temp: 1e999 is out of range");
    refused("--timeout 10.5", "--timeout: 10.5 is out of range (0..10)");
    refused("-t -1", "-t: -1 is out of range (0..10)");
    /* strtok never yields a word with a space; build one by hand. */
    opts o = DEFAULTS;
    llmq_err err;
    char *argv[] = {"prog", "--slots", " 7", NULL};
    CHECK(with_table(&o, 0, 3, argv, NULL, &err) == -1 &&
              strstr(err.msg, "--slots: ' 7' is not a whole number"),
          "a leading space is refused: %s", err.msg);
}

static void test_refusals(void)
{
    refused("--bogus", "unknown option '--bogus'");
    refused("--bogus=1", "unknown option '--bogus'");
    refused("--slot 5", "unknown option '--slot'");
    refused("--verb", "unknown option '--verb'");
    refused("-x", "unknown option '-x'");
    refused("-vx", "unknown option '-x'");
    refused("--slots", "option '--slots' needs a value");
    refused("-v -s", "option '-s' needs a value");
    refused("--verbose=yes", "option '--verbose' takes no value");
    refused("stray", "unexpected argument 'stray'");
    refused("--item a --item b --item c --item d", "--item: at most 3 values");
    refused("--item=", "--item: must not be empty");
    refused("--path=", "--path: must not be empty"); /* a text flag: a file, an endpoint */
    opts o = DEFAULTS;
    llmq_err err;
    char *argv[] = {"prog", "-p", "", NULL}; /* strtok never yields an empty word */
    CHECK(with_table(&o, 0, 3, argv, NULL, &err) == -1 && strstr(err.msg, "-p: must not be empty"),
          "an empty value apart is refused too: %s", err.msg);
    refused("--name=", "--name: must be 1..4 bytes");
    refused("--name abcde", "--name: must be 1..4 bytes");
    refused("--mode three", "--mode: 'three' is neither one nor two");
}

static void test_operands_and_required(void)
{
    opts o;
    llmq_err err;
    int rc = parse_line(&o, "-v -- --quiet", OPERAND, &err);
    CHECK(rc == 0 && o.verbose && !o.quiet && strcmp(o.operand, "--quiet") == 0,
          "'--' ends the flags: what follows is an operand");
    rc = parse_line(&o, "first -q", OPERAND, &err);
    CHECK(rc == 0 && o.quiet && strcmp(o.operand, "first") == 0,
          "an operand may come before flags");
    rc = parse_line(&o, "one two", OPERAND, &err);
    CHECK(rc == -1 && strstr(err.msg, "unexpected argument 'two'"),
          "a second operand is refused: %s", err.msg);
    rc = parse_line(&o, "-", OPERAND, &err);
    CHECK(rc == 0 && strcmp(o.operand, "-") == 0, "'-' alone is an operand (standard input)");
    rc = parse_line(&o, "--verbose", NEED_PATH, &err);
    CHECK(rc == -1 && strcmp(err.msg, "missing required option(s): -p") == 0,
          "a missing required flag is named by its letter: %s", err.msg);
    rc = parse_line(&o, "-p x", NEED_PATH, &err);
    CHECK(rc == 0, "given, it is satisfied");
    rc = parse_line(&o, "-v", NEED_OPERAND, &err);
    CHECK(rc == -1 && strcmp(err.msg, "no WORD given") == 0,
          "a missing required operand is named: %s", err.msg);
    rc = parse_line(&o, "--name ab -p ab", 0, &err);
    CHECK(rc == -1 && strcmp(err.msg, "--name and --path are both 'ab'") == 0,
          "the spec's check runs once the flags are read, its error bad usage: %s", err.msg);
    CHECK(parse_line(&o, "--name ab -p ab -h", 0, &err) == 1, "not when --help is asked");
}

static void test_help_asked(void)
{
    opts o;
    llmq_err err;
    CHECK(parse_line(&o, "--help", NEED_PATH, &err) == 1 &&
              parse_line(&o, "-vh", NEED_PATH, &err) == 1,
          "--help and -h (bundled too) ask for help, even with a required flag missing");
    CHECK(parse_line(&o, "-h --bogus", 0, &err) == 1, "what follows --help is not read");
    CHECK(parse_line(&o, "--bogus --help", 0, &err) == -1, "an error before --help stands");
    refused("--help=1", "option '--help' takes no value");
}

static void test_version_asked(void)
{
    opts o;
    llmq_err err;
    CHECK(parse_line(&o, "--version", NEED_PATH | NEED_OPERAND, &err) == 2,
          "--version asks for the version, even with a required flag or operand missing");
    CHECK(parse_line(&o, "-v --version --bogus", 0, &err) == 2 &&
              parse_line(&o, "--version --help", 0, &err) == 2 &&
              parse_line(&o, "--help --version", 0, &err) == 1,
          "what follows --version is not read; the first of --help and --version wins");
    CHECK(parse_line(&o, "--bogus --version", 0, &err) == -1, "an error before --version stands");
    refused("--version=1", "option '--version' takes no value");
    refused("--vers", "unknown option '--vers'");
    refused("-V", "unknown option '-V'");

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    const cli_spec spec = {.program = "prog", .usage = "usage: prog\n"};
    cli_version(&spec, f);
    fclose(f);
    char want[160];
    if (LLMQ_COMMIT[0])
        snprintf(want, sizeof want, "prog (llmq) %s, commit %s\n", PACKAGE_VERSION, LLMQ_COMMIT);
    else
        snprintf(want, sizeof want, "prog (llmq) %s\n", PACKAGE_VERSION);
    CHECK(strcmp(text, want) == 0, "--version prints one line: %s", text);
    free(text);
}

/* The help text of the row that shows flag, its continuation lines (those
 * indented to col) joined by spaces, into out. */
static void row_text(const char *help, const char *flag, size_t col, char *out, size_t size)
{
    out[0] = '\0';
    const char *line = strstr(help, flag);
    while (line && line > help && line[-1] != '\n')
        line--;
    for (bool first = true; line && strlen(line) > col; first = false) {
        const size_t n = strcspn(line, "\n");
        if (!first && (strspn(line, " ") != col))
            break;
        snprintf(out + strlen(out), size - strlen(out), "%s%.*s", first ? "" : " ", (int)(n - col),
                 line + col);
        line += n + 1;
    }
}

/* The rendered --help, and its lines checked. */
static void test_help_generated(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    opts o = DEFAULTS;
    with_table(&o, 0, 0, NULL, f, NULL);
    fclose(f);
    size_t longest = 0, col = 0;
    for (const char *line = text; *line;) {
        const size_t n = strcspn(line, "\n");
        longest = n > longest ? n : longest;
        const char *at = strstr(line, "say more");
        if (at && at < line + n)
            col = (size_t)(at - line);
        line += n + (line[n] == '\n');
    }
    CHECK(strncmp(text, "usage: prog [OPTION]...\n\n", 25) == 0, "usage comes first");
    CHECK(strstr(text, "\n  -v, --verbose ") && strstr(text, "\n      --name NAME ") &&
              strstr(text, "\n  -s, --slots N ") && strstr(text, "\n      --mode one|two ") &&
              strstr(text, "\n  -h, --help ") && strstr(text, "show this help\n") &&
              strstr(text, "\n      --version "),
          "every row shows its letter, long name and value name, -h/--help and --version "
          "included");
    CHECK(strstr(text, "\nnumbers:\n  -i, --item TEXT ") != NULL,
          "a heading stands on its own line over its rows");
    CHECK(longest <= 80, "no line is wider than 80 columns (%zu)", longest);
    char mode_help[512];
    row_text(text, "  --mode one|two", col, mode_help, sizeof mode_help);
    CHECK(col > 0 && strcmp(mode_help, LONG_HELP) == 0,
          "a long help text wraps onto lines that start at the help column (%zu): %s", col,
          mode_help);
    const size_t end = strlen("The end.\n");
    CHECK(len > end && strcmp(text + len - end, "The end.\n") == 0 &&
              strstr(text, "\n\nThe end.\n"),
          "the epilog comes last, after a blank line");
    free(text);
}

int main(void)
{
    test_kinds();
    test_strict_numbers();
    test_refusals();
    test_operands_and_required();
    test_help_asked();
    test_version_asked();
    test_help_generated();
    return check_done();
}
