/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Settings from the environment (the REMORA_* variables, listed by
 * `remora config`).
 *
 * Design notes
 * - A value that is not what the variable takes is refused with a warning
 *   naming the range, and the default is used: a typo must not change
 *   behaviour silently, nor fail a program that does not need the setting.
 */
#ifndef RM_UTIL_ENV_H
#define RM_UTIL_ENV_H

#include <stdint.h>

/* The decimal integer in `name`, dflt when unset or empty, or refused (not
 * an integer from min to max). */
uint64_t rm_env_u64(const char *name, uint64_t dflt, uint64_t min, uint64_t max);

#endif
