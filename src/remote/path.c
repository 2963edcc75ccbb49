/* SPDX-License-Identifier: BSD-3-Clause */
/* Data path names: the one table behind remora_path_string and
 * remora_path_parse (REMORA_PATH, the CLI's --path, the Python binding). */
#include <string.h>

#include <remora/remora.h>

static const char *const path_names[] = {
    [REMORA_PATH_AUTO]    = "auto",
    [REMORA_PATH_AM]      = "am",
    [REMORA_PATH_RMA]     = "rma",
    [REMORA_PATH_MAP]     = "map",
    [REMORA_PATH_IPC]     = "ipc",
    [REMORA_PATH_STAGING] = "staging",
};

#define PATH_COUNT (sizeof(path_names) / sizeof(path_names[0]))

const char *remora_path_string(remora_path_t path)
{
    if ((unsigned)path >= PATH_COUNT)
        return "?";
    return path_names[path];
}

remora_status_t remora_path_parse(const char *name, remora_path_t *path_p)
{
    if (name == NULL || path_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < PATH_COUNT; i++) {
        if (strcmp(name, path_names[i]) == 0) {
            *path_p = (remora_path_t)i;
            return REMORA_OK;
        }
    }
    return REMORA_ERR_INVALID_PARAM;
}
