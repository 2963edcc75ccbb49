/* SPDX-License-Identifier: BSD-3-Clause */
/* Memory handles: host memory allocated shareable through UCX, or registered;
 * GPU memory allocated here or registered (see DESIGN.md, GPU memory).
 * Reference counted: the creator holds one reference, each region one more. */
#ifndef RM_MEM_MEM_H
#define RM_MEM_MEM_H

#include <stdatomic.h>
#include <stddef.h>

#include <ucp/api/ucp.h>

#include <remora/remora.h>

#include "mem/cuda.h"

struct remora_mem {
    remora_context_h  ctx;
    /* UCX registration; NULL for CUDA memory when the loaded UCX has no CUDA
     * support: such memory moves through CUDA IPC or host staging instead. */
    ucp_mem_h         memh;
    void             *addr;
    size_t            length;
    remora_mem_type_t type;
    int               device;    /* CUDA device ordinal; -1 for host memory */
    int               shm_fd;    /* a memory file allocated here (shm.h): mappable by
                                    same-host peers; -1 for caller and CUDA memory */
    int               sealed;    /* shm_fd sealed against writable mappings */
    int               owns_cuda; /* device memory cuMemAlloc'd here, freed with the last ref */
    void             *rkey;      /* packed remote keys, made on first use (rm_mem_rkey) */
    size_t            rkey_len;
    ucp_mem_h         memh_ro;   /* a registration without remote write, for read-only keys */
    void             *rkey_ro;
    size_t            rkey_ro_len;
    /* CUDA IPC: a handle for the allocation holding addr, and addr's offset in
     * it. has_ipc is 0 for host memory and for device memory the driver
     * cannot share (e.g. from the virtual memory management API). */
    rm_cuda_ipc_handle_t ipc;
    size_t            ipc_offset;
    int               has_ipc;
    atomic_int        refs;
};

/* Any thread. */
void rm_mem_ref(remora_mem_h mem);
/* A packed remote key for mem, writable or not; REMORA_ERR_UNSUPPORTED when
 * the context has RMA off or mem has no UCX registration. Lock held. */
remora_status_t rm_mem_rkey(remora_mem_h mem, int writable, const void **rkey_p, size_t *len_p);
/* With the context lock held: the last reference unmaps through UCX and
 * frees what the library allocated. */
void rm_mem_unref(remora_mem_h mem);

#endif
