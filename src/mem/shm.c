/* SPDX-License-Identifier: BSD-3-Clause */
#include "mem/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

#define RM_SHM_NAME "remora-region" /* memfd names: /memfd:NAME (deleted) */

remora_status_t rm_shm_create(size_t len, int *fd_p, void **addr_p)
{
    int fd = memfd_create(RM_SHM_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
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

/*
 * Whether fd, opened through another process's /proc/PID/fd, is a region
 * file of a remora server holding [offset, offset + len): a memfd of ours
 * (its name), owned by this user, sealed against shrinking (as every region
 * file is from its creation) and long enough. Which file to open is the
 * server's word, and a server may lie: a path to any file this user may
 * open, a read-only fd reopened writable, a length past the end (SIGBUS
 * on the first copy; all three found by review).
 */
static int region_file(int fd, const char *path, uint64_t offset, size_t len)
{
    static const char name[] = "/memfd:" RM_SHM_NAME " ";
    char target[sizeof(name)] = {0};
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);

    return seals >= 0 && (seals & F_SEAL_SHRINK) && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
           st.st_uid == geteuid() && (uint64_t)st.st_size >= offset + len &&
           readlink(path, target, sizeof(target) - 1) == (ssize_t)sizeof(target) - 1 &&
           memcmp(target, name, sizeof(target) - 1) == 0;
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
    if (!region_file(fd, path, offset, len)) {
        rm_warn_peer("%s is not a region file of the size the server gave; not mapped", path);
        close(fd);
        return REMORA_ERR_PROTOCOL;
    }
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
