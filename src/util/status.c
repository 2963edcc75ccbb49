/* SPDX-License-Identifier: BSD-3-Clause */
/* Status strings and the library version. */
#include <remora/remora.h>

const char *remora_status_string(remora_status_t status)
{
    switch (status) {
    case REMORA_OK:                     return "success";
    case REMORA_INPROGRESS:             return "operation in progress";
    case REMORA_ERR_INVALID_PARAM:      return "invalid parameter";
    case REMORA_ERR_NO_MEMORY:          return "out of memory";
    case REMORA_ERR_TIMED_OUT:          return "timed out";
    case REMORA_ERR_DISCONNECTED:       return "disconnected from peer";
    case REMORA_ERR_NOT_FOUND:          return "region not found";
    case REMORA_ERR_OUT_OF_RANGE:       return "offset or length out of range";
    case REMORA_ERR_READ_ONLY:          return "region is read-only";
    case REMORA_ERR_AUTH:               return "authentication failed (token missing or wrong)";
    case REMORA_ERR_PROTOCOL:           return "protocol error (malformed or unexpected message)";
    case REMORA_ERR_UNSUPPORTED:        return "not supported here";
    case REMORA_ERR_CONNECTION_REFUSED: return "connection refused";
    case REMORA_ERR_ADDRESS:            return "invalid or unresolvable address";
    case REMORA_ERR_EXISTS:             return "a region of that name already exists";
    case REMORA_ERR_IO:                 return "I/O error";
    case REMORA_ERR_TRANSPORT:          return "transport error";
    case REMORA_ERR_CANCELED:           return "operation canceled";
    case REMORA_ERR_BUSY:               return "resource busy";
    case REMORA_ERR_VERSION:            return "incompatible protocol version";
    case REMORA_ERR_ENCRYPTION:         return "encryption required by one side and not the other";
    }
    return "unknown status";
}

#define RM_STR2(x) #x
#define RM_STR(x)  RM_STR2(x)

const char *remora_version_string(void)
{
    return RM_STR(REMORA_VERSION_MAJOR) "." RM_STR(REMORA_VERSION_MINOR) "."
           RM_STR(REMORA_VERSION_PATCH);
}
