#include "tools/stats/scale.h"

#include <math.h>
#include <stddef.h>

double scale_nice_step(double x)
{
    double p = pow(10, floor(log10(x)));
    static const double mult[] = {1, 2, 5, 10};
    for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++)
        if (mult[i] * p >= x * (1 - 1e-9)) /* 0.3 / 3 is 0.0999...: still 0.1 */
            return mult[i] * p;
    return 10 * p;
}

int64_t scale_time_step(int64_t span_ms, int64_t max_steps)
{
    static const int64_t steps[] = {
        10, 20, 50, 100, 200, 500,                      /* milliseconds */
        1000, 2000, 5000, 10000, 15000, 30000,          /* seconds */
        60000, 120000, 300000, 600000, 900000, 1800000, /* minutes */
        3600000, 7200000, 21600000, 43200000, 86400000, /* hours, a day */
        604800000,                                      /* a week */
    };
    size_t n = sizeof steps / sizeof steps[0];
    for (size_t i = 0; i < n; i++)
        if (span_ms / steps[i] < max_steps)
            return steps[i];
    return steps[n - 1];
}

void scale_bins(double lo, double hi, int target, double *bin_lo, double *width, int *n)
{
    double w = hi > lo ? scale_nice_step((hi - lo) / target)
                       : scale_nice_step(fabs(hi) > 0 ? fabs(hi) / 10 : 1);
    *width = w;
    *bin_lo = floor(lo / w) * w;
    int k = (int)floor((hi - *bin_lo) / w) + 1;
    *n = k < 1 ? 1 : k;
}
