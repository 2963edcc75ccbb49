/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shareable host memory: a memory file (memfd) mapped here, that same-host
 * peers map too (the `map` path). A peer opens /proc/PID/fd/FD, which the
 * kernel allows only to processes that may inspect ours (same user, or
 * root): no more than it could read already. A read-only region's file is
 * sealed against new writable mappings and writes (F_SEAL_FUTURE_WRITE), so
 * even such a peer cannot map it writable; our own mapping stays writable.
 */
#ifndef RM_MEM_SHM_H
#define RM_MEM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

/* A new zeroed memory file of len bytes, mapped read-write. */
remora_status_t rm_shm_create(size_t len, int *fd_p, void **addr_p);
void            rm_shm_destroy(int fd, void *addr, size_t len);
/* No writable mapping of fd can be made from now on, by anyone. */
remora_status_t rm_shm_seal_read_only(int fd);

/* A mapping of [offset, offset+len) of another process's memory file. */
typedef struct rm_shm_view {
    void  *base;    /* what mmap returned (page-aligned), for rm_shm_unmap */
    size_t base_len;
    void  *ptr;     /* offset's byte */
} rm_shm_view_t;

/* writable: try a read-write mapping first (falls back to read-only when the
 * file is sealed); *writable_p says which it got. */
remora_status_t rm_shm_map(uint32_t pid, uint32_t fd, uint64_t offset, size_t len,
                           int writable, rm_shm_view_t *view, int *writable_p);
void            rm_shm_unmap(rm_shm_view_t *view);

#endif
