#include "tools/stats/when.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DURATION_MS (10LL * 366 * 86400 * 1000)

typedef struct unit {
    const char *name;
    int64_t ms;
} unit;

static const unit UNITS[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}, {"w", 604800000},
};

int when_duration(const char *text, int64_t *out_ms, llmq_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v > 0))
        return llmq_errf(err, "'%s' is not a duration (a positive number and a unit: "
                              "ms, s, m, h, d or w, e.g. 15m)", text);
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++) {
        if (strcmp(end, UNITS[i].name) != 0)
            continue;
        double ms = v * (double)UNITS[i].ms;
        if (ms > (double)MAX_DURATION_MS || ms < 1)
            return llmq_errf(err, "duration '%s' is out of range (1 ms to 10 years)", text);
        *out_ms = llround(ms);
        return 0;
    }
    return llmq_errf(err, "'%s': unknown unit '%s' (ms, s, m, h, d or w)", text, end);
}

/* Reads exactly n digits. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

/* "Z", "+HH:MM", "+HHMM", "-HH" or nothing (UTC): seconds east of UTC. */
static bool zone(const char **p, long *east_s)
{
    *east_s = 0;
    if (**p == '\0')
        return true;
    if (**p == 'Z' || **p == 'z') {
        (*p)++;
        return true;
    }
    if (**p != '+' && **p != '-')
        return false;
    int sign = **p == '-' ? -1 : 1, hh, mm = 0;
    (*p)++;
    if (!digits(p, 2, &hh))
        return false;
    if (**p == ':')
        (*p)++;
    if (isdigit((unsigned char)**p) && !digits(p, 2, &mm))
        return false;
    if (hh > 23 || mm > 59)
        return false;
    *east_s = sign * (hh * 3600L + mm * 60L);
    return true;
}

/* Clock part after the date: "HH:MM[:SS[.fff]]". */
static bool clock_part(const char **p, struct tm *tm, int *ms)
{
    if (!digits(p, 2, &tm->tm_hour) || *(*p)++ != ':' || !digits(p, 2, &tm->tm_min))
        return false;
    if (**p == ':') {
        (*p)++;
        if (!digits(p, 2, &tm->tm_sec))
            return false;
        if (**p == '.' || **p == ',') {
            (*p)++;
            double scale = 100;
            if (!isdigit((unsigned char)**p))
                return false;
            for (; isdigit((unsigned char)**p); (*p)++, scale /= 10)
                *ms += (int)(scale * (**p - '0'));
        }
    }
    return tm->tm_hour <= 23 && tm->tm_min <= 59 && tm->tm_sec <= 60;
}

static int parse_iso(const char *text, int64_t *out_ms, llmq_err *err)
{
    struct tm tm = {0};
    const char *p = text;
    int ms = 0;
    long east_s;
    bool ok = digits(&p, 4, &tm.tm_year) && *p++ == '-' && digits(&p, 2, &tm.tm_mon) &&
              *p++ == '-' && digits(&p, 2, &tm.tm_mday);
    if (ok && (*p == 'T' || *p == 't' || *p == ' ')) {
        p++;
        ok = clock_part(&p, &tm, &ms);
    }
    ok = ok && zone(&p, &east_s) && *p == '\0';
    int mday = tm.tm_mday, mon = tm.tm_mon;
    if (!ok || mon < 1 || mon > 12 || mday < 1 || mday > 31)
        return llmq_errf(err, "'%s' is not a time: use ISO 8601 (2024-05-01T12:30:00Z), "
                              "a duration ago (1h, 30m, 2d) or now", text);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (tm.tm_mday != mday) /* timegm normalised an impossible day (Feb 30) */
        return llmq_errf(err, "'%s': no such day", text);
    *out_ms = ((int64_t)t - east_s) * 1000 + ms;
    return 0;
}

int when_parse(const char *text, int64_t now_ms, int64_t *out_ms, llmq_err *err)
{
    if (strcmp(text, "now") == 0) {
        *out_ms = now_ms;
        return 0;
    }
    /* A date starts with four digits and a dash; anything else is a duration. */
    if (strlen(text) >= 5 && isdigit((unsigned char)text[0]) && text[4] == '-')
        return parse_iso(text, out_ms, err);
    int64_t ago;
    if (when_duration(text, &ago, NULL))
        return llmq_errf(err, "'%s' is not a time: use ISO 8601 (2024-05-01T12:30:00Z), "
                              "a duration ago (1h, 30m, 2d) or now", text);
    *out_ms = now_ms - ago;
    return 0;
}

void when_format(int64_t ms, char *buf, size_t size)
{
    int64_t s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    int rem = (int)(ms - s * 1000);
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[24];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (rem)
        snprintf(buf, size, "%s.%03dZ", base, rem);
    else
        snprintf(buf, size, "%sZ", base);
}
