#include "common/clock.h"

#include <time.h>

static struct timespec read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

int64_t clock_mono_ms(void)
{
    const struct timespec ts = read_clock(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double clock_mono_ms_f(void)
{
    const struct timespec ts = read_clock(CLOCK_MONOTONIC);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t clock_wall_ms(void)
{
    const struct timespec ts = read_clock(CLOCK_REALTIME);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
