/* SPDX-License-Identifier: BSD-3-Clause */
#include "mem/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/log.h"

remora_status_t rm_shm_create(size_t len, int *fd_p, void **addr_p)
{
    int fd = memfd_create("remora-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *addr;

    if (fd < 0) {
        rm_error("memfd_create: %s", strerror(errno));
        return errno == EMFILE || errno == ENFILE ? REMORA_ERR_IO : REMORA_ERR_NO_MEMORY;
    }
    if (ftruncate(fd, (off_t)len) != 0 ||
        (addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        rm_error("cannot make %zu bytes of shareable memory: %s", len, strerror(errno));
        close(fd);
        return REMORA_ERR_NO_MEMORY;
    }
    /* The file cannot shrink under a peer's mapping (SIGBUS there). */
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    *fd_p   = fd;
    *addr_p = addr;
    return REMORA_OK;
}

void rm_shm_destroy(int fd, void *addr, size_t len)
{
    munmap(addr, len);
    close(fd);
}

remora_status_t rm_shm_seal_read_only(int fd)
{
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0) {
        rm_error("cannot seal a read-only region: %s", strerror(errno));
        return REMORA_ERR_IO;
    }
    return REMORA_OK;
}

static remora_status_t map_with(const char *path, int oflags, int prot, uint64_t offset,
                                size_t len, rm_shm_view_t *view)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = offset - offset % (uint64_t)page;
    int fd = open(path, oflags | O_CLOEXEC);
    void *base;

    if (fd < 0)
        return REMORA_ERR_UNSUPPORTED;
    view->base_len = (size_t)(offset - start) + len;
    base = mmap(NULL, view->base_len, prot, MAP_SHARED, fd, (off_t)start);
    close(fd); /* the mapping keeps the file */
    if (base == MAP_FAILED)
        return REMORA_ERR_UNSUPPORTED;
    view->base = base;
    view->ptr  = (char *)base + (offset - start);
    return REMORA_OK;
}

remora_status_t rm_shm_map(uint32_t pid, uint32_t fd, uint64_t offset, size_t len,
                           int writable, rm_shm_view_t *view, int *writable_p)
{
    char path[64];

    if (len == 0 || offset > UINT64_MAX - len)
        return REMORA_ERR_INVALID_PARAM;
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    if (writable && map_with(path, O_RDWR, PROT_READ | PROT_WRITE, offset, len, view) == REMORA_OK) {
        *writable_p = 1;
        return REMORA_OK;
    }
    *writable_p = 0;
    return map_with(path, O_RDONLY, PROT_READ, offset, len, view);
}

void rm_shm_unmap(rm_shm_view_t *view)
{
    if (view->base)
        munmap(view->base, view->base_len);
    view->base = view->ptr = NULL;
}
