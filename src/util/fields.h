/* SPDX-License-Identifier: BSD-3-Clause */
/* field_mask of the output structs the caller allocates (the rule is written
 * once, at the top of include/remora/remora.h). */
#ifndef RM_UTIL_FIELDS_H
#define RM_UTIL_FIELDS_H

#include <stdint.h>

#include <remora/remora.h>

/*
 * The fields to write for a caller's field_mask `asked`: `zero_set` when it
 * is 0 (the fields the struct had when its mask was added; a field added
 * later must never join it), REMORA_ERR_INVALID_PARAM when it names a bit
 * outside `known` (every field this library has).
 */
static inline remora_status_t rm_fields_wanted(uint64_t asked, uint64_t zero_set, uint64_t known,
                                               uint64_t *want_p)
{
    if (asked & ~known)
        return REMORA_ERR_INVALID_PARAM;
    *want_p = asked ? asked : zero_set;
    return REMORA_OK;
}

/* Every field each struct has now; also what 0 asks for (nothing added yet). */
#define RM_CONTEXT_ATTR_FIELDS                                                             \
    (REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION | REMORA_CONTEXT_ATTR_FIELD_UCX_MEM_TYPES |     \
     REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS)
#define RM_REGION_INFO_FIELDS                                                              \
    (REMORA_REGION_INFO_FIELD_NAME | REMORA_REGION_INFO_FIELD_SIZE |                       \
     REMORA_REGION_INFO_FIELD_MEM_TYPE | REMORA_REGION_INFO_FIELD_ACCESS |                 \
     REMORA_REGION_INFO_FIELD_GENERATION | REMORA_REGION_INFO_FIELD_KIND)
#define RM_ELEM_INFO_FIELDS                                                                \
    (REMORA_ELEM_INFO_FIELD_SEQ | REMORA_ELEM_INFO_FIELD_DROPS | REMORA_ELEM_INFO_FIELD_SIZE)
#define RM_CUDA_ATTR_FIELDS                                                                \
    (REMORA_CUDA_ATTR_FIELD_AVAILABLE | REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |            \
     REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT | REMORA_CUDA_ATTR_FIELD_REASON)
#define RM_CUDA_DEVICE_FIELDS                                                              \
    (REMORA_CUDA_DEVICE_FIELD_NAME | REMORA_CUDA_DEVICE_FIELD_PCI_BUS_ID |                 \
     REMORA_CUDA_DEVICE_FIELD_TOTAL_MEM | REMORA_CUDA_DEVICE_FIELD_CAPABILITY |            \
     REMORA_CUDA_DEVICE_FIELD_FEATURES)

#endif
