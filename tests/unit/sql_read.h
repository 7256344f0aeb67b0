/* sql_read: what the tests read back from a broker's database, as an
 * outside reader would -- a separate read-only connection per query. */
#ifndef LLMQ_TESTS_SQL_READ_H
#define LLMQ_TESTS_SQL_READ_H

#include <stdint.h>

/* The first column of the first row of sql on db_path; INT64_MIN when there
 * is none or the query fails (which is printed on stderr). */
int64_t sql_first_int(const char *db_path, const char *sql);

#endif
