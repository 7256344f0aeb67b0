/* table: a small typed result table and its three renderings.
 *
 * llmq-stats turns every report into one of these (columns with a kind,
 * rows of cells that may be NULL), then writes it as aligned text, CSV
 * (RFC 4180) or JSON.  Keeping the numbers typed until output is what lets
 * the text form round to a column's decimals while CSV and JSON keep the
 * full value.
 *
 * Ownership: a table owns its cells, the text they hold and a copy of its
 * title; the column definitions and the name are borrowed (static). */
#ifndef LLMQ_TOOLS_STATS_TABLE_H
#define LLMQ_TOOLS_STATS_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

typedef enum table_kind { TABLE_INT, TABLE_REAL, TABLE_TEXT } table_kind;

typedef struct table_col {
    const char *name;  /* header, CSV column, JSON key */
    table_kind kind;
    int decimals;      /* TABLE_REAL in text output */
    bool machine;      /* CSV and JSON only (e.g. epoch ms beside an ISO time) */
} table_col;

typedef struct table_cell {
    bool null;
    const char *mark; /* a NULL cell's text output instead of "-" (static), or NULL */
    union {
        int64_t i;
        double d;
        char *s;       /* owned */
    };
} table_cell;

typedef struct table {
    const char *name;  /* JSON key, e.g. "batches" */
    char title[96];    /* heading in text output */
    char note[192];    /* a line under the rows in text output, or "" */
    const table_col *cols;
    size_t n_cols;
    table_cell *cells; /* n_rows * n_cols, row-major */
    size_t n_rows, cap_rows;
} table;

void table_init(table *t, const char *name, const char *title,
                const table_col *cols, size_t n_cols);
void table_free(table *t);

/* Appends a row of NULL cells; *row points at its n_cols cells. */
int table_add_row(table *t, table_cell **row, llmq_err *err);

/* Cell (r, c); r < n_rows, c < n_cols. */
const table_cell *table_at(const table *t, size_t r, size_t c);

/* Index of the column named name, or -1. */
int table_col_index(const table *t, const char *name);

/* Copies s into the cell (NULL s: the cell stays NULL). */
int table_set_text(table_cell *cell, const char *s, llmq_err *err);

/* Withholds cell (r, c): NULL in every format, shown as mark (static) in
 * text output; note, when the table has none yet, goes under its rows. */
void table_withhold(table *t, size_t r, size_t c, const char *mark, const char *note);

/* Title, header, one line per row, the note; numbers right-aligned, NULL as
 * "-" (or its mark). */
void table_write_text(FILE *f, const table *t);
/* Header row then one row per table row; NULL is an empty field. */
void table_write_csv(FILE *f, const table *t);
/* An array of objects, one per row; NULL and non-finite numbers as null. */
void table_write_json(FILE *f, const table *t);

#endif
