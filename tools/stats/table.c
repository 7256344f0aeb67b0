#include "tools/stats/table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/json.h"

#define CELL_TEXT_MAX 64 /* numbers; text cells are printed from their own storage */

void table_init(table *t, const char *name, const char *title,
                const table_col *cols, size_t n_cols)
{
    *t = (table){.name = name, .cols = cols, .n_cols = n_cols};
    snprintf(t->title, sizeof t->title, "%s", title);
}

void table_free(table *t)
{
    if (!t)
        return;
    for (size_t r = 0; r < t->n_rows; r++)
        for (size_t c = 0; c < t->n_cols; c++) {
            table_cell *cell = &t->cells[r * t->n_cols + c];
            if (!cell->null && t->cols[c].kind == TABLE_TEXT)
                free(cell->s);
        }
    free(t->cells);
    t->cells = NULL;
    t->n_rows = t->cap_rows = 0;
}

int table_add_row(table *t, table_cell **row, llmq_err *err)
{
    /* A row of cells is one element. */
    if (grow_reserve(&t->cells, &t->cap_rows, t->n_rows + 1, t->n_cols * sizeof *t->cells))
        return llmq_errf(err, "table %s: out of memory at row %zu", t->name, t->n_rows);
    *row = &t->cells[t->n_rows * t->n_cols];
    for (size_t c = 0; c < t->n_cols; c++)
        (*row)[c] = (table_cell){.null = true};
    t->n_rows++;
    return 0;
}

const table_cell *table_at(const table *t, size_t r, size_t c)
{
    return &t->cells[r * t->n_cols + c];
}

int table_col_index(const table *t, const char *name)
{
    for (size_t c = 0; c < t->n_cols; c++)
        if (strcmp(t->cols[c].name, name) == 0)
            return (int)c;
    return -1;
}

void table_withhold(table *t, size_t r, size_t c, const char *mark, const char *note)
{
    table_cell *cell = &t->cells[r * t->n_cols + c];
    if (!cell->null && t->cols[c].kind == TABLE_TEXT)
        free(cell->s);
    *cell = (table_cell){.null = true, .mark = mark};
    if (!t->note[0])
        snprintf(t->note, sizeof t->note, "%s", note);
}

int table_set_text(table_cell *cell, const char *s, llmq_err *err)
{
    if (!s)
        return 0;
    char *copy = strdup(s);
    if (!copy)
        return llmq_errf(err, "out of memory copying a %zu-byte string", strlen(s));
    cell->s = copy;
    cell->null = false;
    return 0;
}

/* A cell as text; numbers go into buf, text cells are returned as they are.
 * full: machine precision (CSV), else the column's decimals. */
static const char *cell_text(const table_col *col, const table_cell *cell, bool full,
                             char buf[CELL_TEXT_MAX])
{
    if (cell->null)
        return full ? "" : cell->mark ? cell->mark : "-";
    switch (col->kind) {
    case TABLE_INT: snprintf(buf, CELL_TEXT_MAX, "%lld", (long long)cell->i); return buf;
    case TABLE_REAL:
        if (!isfinite(cell->d))
            return full ? "" : "-";
        if (full)
            snprintf(buf, CELL_TEXT_MAX, "%.12g", cell->d);
        else
            snprintf(buf, CELL_TEXT_MAX, "%.*f", col->decimals, cell->d);
        return buf;
    case TABLE_TEXT: return cell->s;
    }
    return "";
}

/* Display width: UTF-8 code points, which is right for the names and ISO
 * times these tables hold. */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* The last column text output shows (machine columns are left out). */
static size_t last_shown(const table *t)
{
    size_t last = 0;
    for (size_t c = 0; c < t->n_cols; c++)
        if (!t->cols[c].machine)
            last = c;
    return last;
}

static void text_row(FILE *f, const table *t, size_t r, const size_t *width)
{
    char buf[CELL_TEXT_MAX];
    size_t last = last_shown(t);
    bool first = true;
    for (size_t c = 0; c < t->n_cols; c++) {
        if (t->cols[c].machine)
            continue;
        const char *s = r == 0 ? t->cols[c].name
                               : cell_text(&t->cols[c], table_at(t, r - 1, c), false, buf);
        int pad = (int)(width[c] - text_width(s));
        bool left = t->cols[c].kind == TABLE_TEXT;
        fprintf(f, "%s%*s%s%*s", first ? "" : "  ", left ? 0 : pad, "", s,
                left && c != last ? pad : 0, "");
        first = false;
    }
    fputc('\n', f);
}

void table_write_text(FILE *f, const table *t)
{
    size_t *width = calloc(t->n_cols ? t->n_cols : 1, sizeof *width);
    char buf[CELL_TEXT_MAX];
    if (!width) {
        fprintf(f, "%s: out of memory\n", t->title);
        return;
    }
    for (size_t c = 0; c < t->n_cols; c++) {
        width[c] = text_width(t->cols[c].name);
        for (size_t r = 0; r < t->n_rows; r++) {
            size_t w = text_width(cell_text(&t->cols[c], table_at(t, r, c), false, buf));
            width[c] = w > width[c] ? w : width[c];
        }
    }
    fprintf(f, "%s\n", t->title);
    for (size_t r = 0; r <= t->n_rows; r++)
        text_row(f, t, r, width);
    if (t->n_rows == 0)
        fputs("(no rows)\n", f);
    if (t->note[0])
        fprintf(f, "%s\n", t->note);
    free(width);
}

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void table_write_csv(FILE *f, const table *t)
{
    char buf[CELL_TEXT_MAX];
    for (size_t r = 0; r <= t->n_rows; r++) {
        for (size_t c = 0; c < t->n_cols; c++) {
            if (c)
                fputc(',', f);
            csv_field(f, r == 0 ? t->cols[c].name
                                : cell_text(&t->cols[c], table_at(t, r - 1, c), true, buf));
        }
        fputs("\r\n", f);
    }
}

static void json_cell(FILE *f, const table_col *col, const table_cell *cell)
{
    char buf[CELL_TEXT_MAX];
    if (cell->null || (col->kind == TABLE_REAL && !isfinite(cell->d)))
        fputs("null", f);
    else if (col->kind == TABLE_TEXT)
        json_write_string(f, cell->s, strlen(cell->s));
    else
        fputs(cell_text(col, cell, true, buf), f);
}

void table_write_json(FILE *f, const table *t)
{
    fputc('[', f);
    for (size_t r = 0; r < t->n_rows; r++) {
        fputs(r ? ",\n  {" : "\n  {", f);
        for (size_t c = 0; c < t->n_cols; c++) {
            if (c)
                fputs(", ", f);
            json_write_string(f, t->cols[c].name, strlen(t->cols[c].name));
            fputs(": ", f);
            json_cell(f, &t->cols[c], table_at(t, r, c));
        }
        fputc('}', f);
    }
    fputs(t->n_rows ? "\n]" : "]", f);
}
