#include "tests/unit/sql_read.h"

#include <sqlite3.h>
#include <stdio.h>

int64_t sql_first_int(const char *db_path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    int64_t v = INT64_MIN;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db); /* a failed open still allocates the handle */
        return v;
    }
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    } else {
        fprintf(stderr, "sql: %s: %s\n", sql, sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    return v;
}
