/* SPDX-License-Identifier: BSD-3-Clause */
/* The public CUDA queries: thin wrappers over the loader (cuda.h). */
#include <stdio.h>
#include <string.h>

#include "mem/cuda.h"
#include "util/fields.h"

remora_status_t remora_cuda_query(remora_cuda_attr_t *attr)
{
    int available, version = 0;
    uint64_t fm;

    if (attr == NULL ||
        rm_fields_wanted(attr->field_mask, RM_CUDA_ATTR_FIELDS, RM_CUDA_ATTR_FIELDS, &fm) !=
            REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    available = rm_cuda_init() == REMORA_OK;
    rm_cuda_driver_version(&version);
    if (fm & REMORA_CUDA_ATTR_FIELD_AVAILABLE)
        attr->available = available;
    if (fm & REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION)
        attr->driver_version = version;
    if (fm & REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT)
        attr->device_count = rm_cuda_device_count();
    if (fm & REMORA_CUDA_ATTR_FIELD_REASON)
        snprintf(attr->reason, sizeof(attr->reason), "%s", rm_cuda_unavailable_reason());
    attr->field_mask = fm;
    return REMORA_OK;
}

static unsigned device_features(const rm_cuda_device_info_t *in)
{
    return (in->gpudirect_rdma ? REMORA_CUDA_FEATURE_GPUDIRECT_RDMA : 0u) |
           (in->dma_buf ? REMORA_CUDA_FEATURE_DMA_BUF : 0u) |
           (in->stream_mem_ops_64 ? REMORA_CUDA_FEATURE_STREAM_MEM_OPS_64 : 0u) |
           (in->unified_addressing ? REMORA_CUDA_FEATURE_UNIFIED_ADDRESSING : 0u);
}

remora_status_t remora_cuda_device_query(int device, remora_cuda_device_attr_t *attr)
{
    rm_cuda_device_info_t in;
    remora_status_t status;
    uint64_t fm;

    if (attr == NULL ||
        rm_fields_wanted(attr->field_mask, RM_CUDA_DEVICE_FIELDS, RM_CUDA_DEVICE_FIELDS, &fm) !=
            REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = rm_cuda_device_info(device, &in)) != REMORA_OK)
        return status;
    if (fm & REMORA_CUDA_DEVICE_FIELD_NAME)
        snprintf(attr->name, sizeof(attr->name), "%s", in.name);
    if (fm & REMORA_CUDA_DEVICE_FIELD_PCI_BUS_ID)
        snprintf(attr->pci_bus_id, sizeof(attr->pci_bus_id), "%s", in.pci_bus_id);
    if (fm & REMORA_CUDA_DEVICE_FIELD_TOTAL_MEM)
        attr->total_mem = in.total_mem;
    if (fm & REMORA_CUDA_DEVICE_FIELD_CAPABILITY) {
        attr->cc_major = in.cc_major;
        attr->cc_minor = in.cc_minor;
    }
    if (fm & REMORA_CUDA_DEVICE_FIELD_FEATURES)
        attr->features = device_features(&in);
    attr->field_mask = fm;
    return REMORA_OK;
}

remora_status_t remora_cuda_can_access_peer(int device, int peer, int *can)
{
    return rm_cuda_can_access_peer(device, peer, can);
}

remora_status_t remora_copy(void *dst, const void *src, size_t len)
{
    rm_ptr_kind_t kd = RM_PTR_HOST, ks = RM_PTR_HOST;
    int dev;

    if (len == 0)
        return REMORA_OK;
    if (dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    /* Without the driver loaded no pointer can be GPU memory. */
    if (rm_cuda_in_process()) {
        rm_cuda_ptr_kind(dst, &kd, &dev);
        rm_cuda_ptr_kind(src, &ks, &dev);
    }
    if (kd == RM_PTR_DEVICE || ks == RM_PTR_DEVICE || kd == RM_PTR_MANAGED ||
        ks == RM_PTR_MANAGED)
        return rm_cuda_copy(dst, src, len);
    memcpy(dst, src, len);
    return REMORA_OK;
}
