#include "proto/job_params.h"

job_params job_params_default(void)
{
#define DEFAULT_OF(name, kind, lo, hi, lo_open, dflt, engine) .name = dflt,
    return (job_params){JOB_PARAMS(DEFAULT_OF)}; /* stop: none */
#undef DEFAULT_OF
}
