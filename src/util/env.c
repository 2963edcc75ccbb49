/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdlib.h>

#include "util/env.h"
#include "util/log.h"

uint64_t rm_env_u64(const char *name, uint64_t dflt, uint64_t min, uint64_t max)
{
    const char *v = getenv(name);
    char *end;
    unsigned long long n;

    if (v == NULL || *v == '\0') /* `VAR= cmd` is unset, as the shell means it */
        return dflt;
    errno = 0;
    n = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end != '\0' || errno || n < min || n > max) {
        rm_warn("%s=%s is not an integer from %llu to %llu; using %llu", name, v,
                (unsigned long long)min, (unsigned long long)max, (unsigned long long)dflt);
        return dflt;
    }
    return n;
}
