/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora GPU sockets, device side: header-only CUDA C++ (docs/gpunet.md).
 *
 *   #include <remora/device/socket.cuh>
 *
 * The host starts a proxy (remora_gpunet_create) and installs its handle
 * once with rg_install(remora_gpunet_device_handle(net)) from the translation
 * unit that launches the kernels (or passes it to the *_on forms).
 *
 * Block-cooperative calls (rg_connect, rg_bind, rg_accept, rg_send, rg_recv,
 * rg_shutdown, rg_close, rg_poll): every thread of the block calls them at
 * the same point with the same arguments, as in GPUnet; all get the same
 * result. Thread-level calls (rg_*_thread): one thread acts alone; several
 * threads may use different sockets at once. Non-blocking forms (*_nb)
 * return REMORA_ERR_TIMED_OUT (-3) at once when nothing can move.
 *
 * Results: >= 0 a socket or a byte count (recv: 0 = end of stream); < 0 a
 * remora_status_t: -1 bad argument (NULL buffer, bad socket, negative
 * length), -10 not with this peer (queued transfers), -3 timed out (the clock budget, default the proxy's timeout, ran
 * out), -4 the peer went away, -16 the proxy is gone. send and recv may move
 * fewer bytes than asked. Buffers may be in shared, global or mapped host
 * memory. No call spins forever.
 */
#ifndef REMORA_DEVICE_SOCKET_CUH
#define REMORA_DEVICE_SOCKET_CUH

#include <stdint.h>

#include <remora/device/socket_abi.h>

#define RG_OK            0
#define RG_EINVAL      (-1)
#define RG_ETIMEDOUT   (-3)
#define RG_EDISCONNECT (-4)
#define RG_EUNSUPPORTED (-10)
#define RG_EADDRESS    (-12)
#define RG_ECANCELED   (-16)

#define RG_POLLIN  1
#define RG_POLLOUT 2
#define RG_POLLERR 4

struct rg_pollfd {
    int   sock;
    short events;
    short revents;
};

/* The handle kernels use when none is given: set by rg_install(). */
static __device__ rg_net_t *rg_default_net;

/* Host: make `handle` (remora_gpunet_device_handle) the default of this
 * translation unit's kernels. Returns cudaSuccess or the CUDA error. */
static inline cudaError_t rg_install(void *handle)
{
    rg_net_t *h = (rg_net_t *)handle;
    return cudaMemcpyToSymbol(rg_default_net, &h, sizeof(h));
}

namespace rg_detail {

__device__ __forceinline__ uint64_t now_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ bool block_leader()
{
    return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

__device__ __forceinline__ unsigned block_rank()
{
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ unsigned block_size()
{
    return blockDim.x * blockDim.y * blockDim.z;
}

__device__ __forceinline__ rg_sock_shm_t *sock_of(rg_net_t *net, int s)
{
    return (rg_sock_shm_t *)(uintptr_t)net->socks + s;
}

__device__ __forceinline__ uint64_t budget(rg_net_t *net, uint64_t timeout_ns)
{
    return now_ns() + (timeout_ns ? timeout_ns : net->timeout_ns);
}

/* The proxy's liveness word (mapped host memory). */
__device__ __forceinline__ uint32_t alive(rg_net_t *net)
{
    return *(const volatile uint32_t *)(uintptr_t)net->alive_ptr;
}

/* Acquire at system scope: ring data read after this is at least as new as
 * the counters read before it. */
__device__ __forceinline__ void fence_acquire_sys()
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* One 16-byte volatile load. Several issued back to back cost one PCIe
 * round trip together if they fall in different 32-byte sectors (two of
 * one sector are served in turn); dependent loads and fences cost one each. */
__device__ __forceinline__ void ld_v2(const void *p, uint64_t &a, uint64_t &b)
{
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

/* A socket record as one snapshot: both halves and `alive` in one round trip. */
struct snap_t {
    uint64_t tx_head, rx_tail, tx_tail, rx_head;
    int32_t  state, error;
    uint32_t rx_eof, alive;
    bool     shadowed; /* made from a send shadow: tx_tail may be old */
};

/* The same with acquire semantics at system scope: loads after it see data
 * at least as new as the words it read. */
__device__ __forceinline__ void ld_v2_acq(const void *p, uint64_t &a, uint64_t &b)
{
    asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

/* A socket snapshot: the counters, the state and `alive` in one round trip.
 * A receive's (ACQ) loads the proxy's counters (tx_tail, rx_head) last and
 * with acquire: ring bytes read after it are at least as new as its
 * rx_head, with no fence between (docs/gpunet.md). Sends keep plain loads:
 * an acquire snapshot cost a queued post 1.1 us more on an H100. */
template <bool ACQ = false>
__device__ __forceinline__ snap_t snap(rg_net_t *net, rg_sock_shm_t *sh)
{
    snap_t x;
    uint64_t se, eg;
    const volatile uint32_t *al = (const volatile uint32_t *)(uintptr_t)net->alive_ptr;
    x.alive = *al;
    ld_v2((const void *)&sh->tx_head, x.tx_head, x.rx_tail);
    ld_v2((const void *)&sh->state, se, eg);
    if (ACQ)
        ld_v2_acq((const void *)&sh->tx_tail, x.tx_tail, x.rx_head);
    else
        ld_v2((const void *)&sh->tx_tail, x.tx_tail, x.rx_head);
    x.state    = (int32_t)(uint32_t)se;
    x.error    = (int32_t)(uint32_t)(se >> 32);
    x.rx_eof   = (uint32_t)eg;
    x.shadowed = false;
    return x;
}

/* The socket's send shadow (socket_abi.h), or NULL. */
__device__ __forceinline__ rg_sock_dev_t *shadow_of(rg_net_t *net, int s)
{
    return net->shadows ? (rg_sock_dev_t *)(uintptr_t)net->shadows + s : NULL;
}

/* A shadow as loaded: both halves in one round trip to L2. */
struct shadow_t {
    uint64_t tx_head, tx_tail, t_snap, flags; /* flags: bits | valid << 32 */
};

__device__ __forceinline__ shadow_t shadow_load(const rg_sock_dev_t *sd)
{
    shadow_t v;
    ld_v2((const void *)&sd->tx_head, v.tx_head, v.tx_tail);
    ld_v2((const void *)&sd->t_snap, v.t_snap, v.flags);
    return v;
}

/* A cached answer word for slot x that no ticket matches: its entry number
 * belongs to another slot (qans_age compares the number's low 30 bits). */
__device__ __forceinline__ uint64_t qans_none(unsigned x)
{
    return (uint64_t)(x + 2) << 32;
}

__device__ __forceinline__ void shadow_clear(rg_sock_dev_t *sd)
{
    if (sd) {
        volatile rg_sock_dev_t *w = sd;
        w->valid = 0;
        for (unsigned d = 0; d < 2; d++) {
            w->q_seen[d] = 0;
            for (unsigned k = 0; k < RG_QDEPTH; k++)
                w->q_ans[d][k] = qans_none(k); /* a new socket's tickets start at 1 again */
        }
    }
}

/* A send keeps what its snapshot x says of the send side (v: the shadow as
 * loaded before it); the head stays the one this device wrote (the
 * snapshot's is the same, or older). Only the socket's sender writes the
 * send fields (queued receives write only their own direction's queue
 * fields); a connect, accept, close or shutdown clears it. */
__device__ inline void shadow_note(rg_sock_dev_t *sd, const shadow_t &v, const snap_t &x)
{
    volatile rg_sock_dev_t *w = sd;
    if (!x.alive || x.error || x.state != RG_SOCK_OPEN) {
        w->valid = 0;
        return;
    }
    if (!(v.flags >> 32)) {
        w->tx_head = x.tx_head;
        w->tx_tail = x.tx_tail;
        w->bits    = x.rx_eof & RG_RX_REQ;
    } else if ((int64_t)(x.tx_tail - v.tx_tail) > 0) {
        w->tx_tail = x.tx_tail;
    }
    w->t_snap = now_ns();
    w->valid  = 1;
}

/* A real snapshot for a send, noted in the shadow (v: as loaded before). */
__device__ __forceinline__ snap_t snap_noted(rg_net_t *net, rg_sock_shm_t *sh, rg_sock_dev_t *sd,
                                             const shadow_t &v)
{
    snap_t x = snap(net, sh);
    shadow_note(sd, v, x);
    return x;
}

/* A send's fresh snapshot (the shadow said the ring is full, or a direct
 * send fell back). */
__device__ __forceinline__ snap_t send_resnap(rg_net_t *net, rg_sock_shm_t *sh, rg_sock_dev_t *sd)
{
    return sd == NULL ? snap(net, sh) : snap_noted(net, sh, sd, shadow_load(sd));
}

/* A send's snapshot: from a fresh shadow without crossing PCIe, else a
 * real one, noted in the shadow. */
__device__ inline snap_t send_snap(rg_net_t *net, rg_sock_shm_t *sh, rg_sock_dev_t *sd)
{
    if (sd == NULL)
        return snap(net, sh);
    shadow_t v = shadow_load(sd);
    if ((v.flags >> 32) && now_ns() - v.t_snap <= RG_SHADOW_NS) {
        snap_t x;
        x.tx_head = v.tx_head;
        x.tx_tail = v.tx_tail;
        x.rx_tail = x.rx_head = 0;
        x.state   = RG_SOCK_OPEN;
        x.error   = 0;
        x.rx_eof  = (uint32_t)v.flags;
        x.alive   = 1;
        x.shadowed = true;
        return x;
    }
    return snap_noted(net, sh, sd, v);
}

/* Checks every call makes on the handle and the socket number (no PCIe). */
__device__ __forceinline__ int check_net(rg_net_t *net, int s)
{
    if (net == NULL || net->magic != RG_ABI_MAGIC)
        return RG_EINVAL;
    if (s < 0 || (unsigned)s >= net->max_socks)
        return RG_EINVAL;
    return RG_OK;
}

/* ... and on a snapshot of the socket: the proxy, the socket's state. */
__device__ __forceinline__ int check_snap(const snap_t &x, bool need_open)
{
    if (!x.alive)
        return RG_ECANCELED;
    if (x.state == RG_SOCK_FREE && x.error == 0)
        return RG_EINVAL;
    if (need_open && x.state != RG_SOCK_OPEN && x.error == 0)
        return RG_EINVAL;
    return RG_OK;
}

/* Copy n bytes with `nthr` threads (rank r): 16-byte words where src and dst
 * share alignment, bytes otherwise. Two loads per thread are in flight
 * before their stores, so reading mapped host memory pipelines its PCIe
 * round trips (more would cost registers: kernels of 1024 threads have 64). */
__device__ __forceinline__ void copy(void *dst, const void *src, size_t n, unsigned r,
                                     unsigned nthr)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    if ((((uintptr_t)d ^ (uintptr_t)s) & 15) == 0) {
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        if (head > n)
            head = n;
        for (size_t i = r; i < head; i += nthr)
            d[i] = s[i];
        size_t words = (n - head) / 16;
        uint4 *dw = (uint4 *)(d + head);
        const uint4 *sw = (const uint4 *)(s + head);
        size_t i = r;
        for (; i + nthr < words; i += 2 * (size_t)nthr) {
            uint4 v0 = sw[i], v1 = sw[i + nthr];
            dw[i] = v0;
            dw[i + nthr] = v1;
        }
        for (; i < words; i += nthr)
            dw[i] = sw[i];
        for (size_t k = head + words * 16 + r; k < n; k += nthr)
            d[k] = s[k];
    } else {
        for (size_t i = r; i < n; i += nthr)
            d[i] = s[i];
    }
}

/* One thread: post a command in a free slot and wait for its answer. */
__device__ inline int command(rg_net_t *net, uint32_t op, int sock, uint32_t flags,
                              const char *data, uint64_t timeout_ns)
{
    if (net == NULL || net->magic != RG_ABI_MAGIC)
        return RG_EINVAL;
    if (!alive(net))
        return RG_ECANCELED;
    uint64_t until = budget(net, timeout_ns);
    int *locks = (int *)(uintptr_t)net->slot_locks;
    unsigned start = (blockIdx.x * 131u + block_rank() * 7u) % net->nslots, slot = 0;
    bool got = false;
    while (!got) {
        for (unsigned k = 0; k < net->nslots && !got; k++) {
            slot = (start + k) % net->nslots;
            got = atomicCAS(&locks[slot], 0, 1) == 0;
        }
        if (!got && now_ns() > until)
            return RG_ETIMEDOUT;
    }
    rg_cmd_t *c = (rg_cmd_t *)(uintptr_t)net->cmds + slot;
    uint32_t len = 0;
    if (data) {
        while (len < RG_ADDR_MAX && data[len])
            len++;
        for (uint32_t i = 0; i < len; i++)
            c->data[i] = data[i];
        if (data[len] != '\0') { /* longer than an address may be */
            atomicExch(&locks[slot], 0);
            return RG_EADDRESS;
        }
    }
    c->op = op;
    c->sock = sock;
    c->flags = flags;
    c->len = len;
    uint32_t seq = c->seq + 1;
    __threadfence_system();
    c->seq = seq;
    __threadfence_system();
    int result = RG_ETIMEDOUT;
    for (;;) {
        /* Both loads issued before either is used: one PCIe round trip a look. */
        uint32_t done = *(volatile uint32_t *)&c->done_seq, up = alive(net);
        if (done == seq) {
            __threadfence_system();
            result = *(volatile int32_t *)&c->result;
            break;
        }
        if (!up) {
            result = RG_ECANCELED;
            break;
        }
        if (now_ns() > until)
            break;
    }
    /* A new socket in its slot, or one shut down or closed: sends take a
     * snapshot again. */
    int touched = op == RG_OP_CONNECT || op == RG_OP_ACCEPT || op == RG_OP_BIND ? result : sock;
    if (touched >= 0 && (unsigned)touched < net->max_socks)
        shadow_clear(shadow_of(net, touched));
    __threadfence();
    atomicExch(&locks[slot], 0);
    return result;
}

/* One thread: how many bytes send may put in now (> 0), or a status; *x
 * holds the snapshot it decided on. A shadow's tail may be old: with less
 * room than len by it, a real snapshot decides (a non-blocking send would
 * say "full" of a ring the proxy emptied meanwhile). */
__device__ inline int64_t tx_space(rg_net_t *net, rg_sock_shm_t *sh, rg_sock_dev_t *sd, snap_t *x,
                                   int len, uint64_t until, bool nb)
{
    for (;;) {
        if (x->error)
            return x->error;
        if (!x->alive)
            return RG_ECANCELED;
        uint64_t used = x->tx_head - x->tx_tail;
        if (x->shadowed && net->ring_size - used < (uint64_t)len) {
            *x = send_resnap(net, sh, sd);
            continue;
        }
        if (used < net->ring_size)
            return (int64_t)(net->ring_size - used);
        if (nb || now_ns() > until)
            return RG_ETIMEDOUT;
        *x = send_resnap(net, sh, sd);
    }
}

/* One thread: bytes recv may take now (> 0), 0 at end of stream, or a status. */
__device__ inline int64_t rx_avail(rg_net_t *net, rg_sock_shm_t *sh, snap_t *x, uint64_t until,
                                   bool nb)
{
    for (;;) {
        if (x->rx_head != x->rx_tail) /* snap<true> loaded rx_head with acquire */
            return (int64_t)(x->rx_head - x->rx_tail);
        if (x->rx_eof & RG_RX_EOF) {
            /* rx_eof is published after the last rx_head: look again after it. */
            fence_acquire_sys();
            *x = snap<true>(net, sh);
            if (x->rx_head != x->rx_tail)
                continue;
            return 0;
        }
        if (x->error)
            return x->error;
        if (!x->alive)
            return RG_ECANCELED;
        if (x->rx_eof & RG_RX_REQ)
            return RG_RES_RING; /* the caller asks the proxy (rx_request) */
        if (nb || now_ns() > until)
            return RG_ETIMEDOUT;
        *x = snap<true>(net, sh);
    }
}

/* One thread: wait for the answer to request `seq` (a direct send if `send`,
 * else a receive request). When the budget runs out the request is canceled
 * and its answer still awaited, since bytes may have moved; the proxy gives
 * it within its own timeout, or this gives up after twice that. */
__device__ inline int32_t await(rg_net_t *net, rg_sock_shm_t *sh, bool send, uint32_t seq,
                                uint64_t until)
{
    const volatile uint32_t *done = send ? &sh->dtx_done : &sh->drx_done;
    bool canceled = false;
    uint64_t grace = 0;
    for (;;) {
        uint32_t d = *done, up = alive(net); /* one round trip a look, as in command() */
        if (d == seq) {
            fence_acquire_sys();
            return send ? *(const volatile int32_t *)&sh->dtx_res
                        : *(const volatile int32_t *)&sh->drx_res;
        }
        if (!up)
            return RG_ECANCELED;
        uint64_t t = now_ns();
        if (!canceled && t > until) {
            *(send ? &sh->dtx_cancel : &sh->drx_cancel) = seq;
            __threadfence_system();
            canceled = true;
            grace = t + 2 * net->timeout_ns;
        } else if (canceled && t > grace) {
            return RG_ETIMEDOUT;
        }
    }
}

/* One thread, send side: a large send from global memory offers the buffer
 * itself (tx_offers); the bytes the peer or the proxy took, a status, or
 * RG_RES_RING (send through the ring). */
__device__ inline int64_t tx_direct(rg_net_t *net, rg_sock_shm_t *sh, const void *buf, int len,
                                    uint64_t until)
{
    uint32_t seq = *(const volatile uint32_t *)&sh->dtx_done + 1;
    sh->dtx_ptr = (uint64_t)(uintptr_t)buf;
    sh->dtx_len = (uint32_t)len;
    __threadfence_system();
    sh->dtx_seq = seq;
    return await(net, sh, true, seq, until);
}

/* A blocking send this large offers its buffer rather than copying it into
 * the ring: to a GPU peer on this host (device to device), else to the proxy
 * (copied out by the GPU's copy engine through its bounce buffer). */
__device__ inline bool tx_offers(const rg_net_t *net, uint32_t bits, int len)
{
    uint64_t min = (bits & RG_RX_REQ) ? net->direct_min : net->bounce_min;
    return min != 0 && (uint64_t)len >= min;
}

/* ... receive side, the ring found empty: ask the proxy, naming buf if the
 * peer may copy into it. Bytes put in buf, 0 at end of stream, a status, or
 * RG_RES_RING (bytes are in the ring now). */
__device__ inline int64_t rx_request(rg_net_t *net, rg_sock_shm_t *sh, void *buf, int len,
                                     const snap_t &x, uint64_t until, bool nb)
{
    if (nb && !(x.rx_eof & RG_RX_SRC))
        return RG_ETIMEDOUT;
    bool into = net->direct_min && (uint64_t)len >= net->direct_min && __isGlobal(buf);
    uint32_t seq = *(const volatile uint32_t *)&sh->drx_done + 1;
    sh->drx_ptr = into ? (uint64_t)(uintptr_t)buf : 0;
    sh->drx_len = (uint32_t)len;
    __threadfence_system();
    sh->drx_seq = seq;
    return await(net, sh, false, seq, until);
}

/* Send/recv with nthr threads of rank r; `sync` synchronizes them. The
 * leader decides, everyone copies. Per call the leader crosses PCIe for one
 * snapshot (more only while it waits); a send adds one system fence. */
template <bool BLOCK>
__device__ inline int xfer(rg_net_t *net, int s, void *buf, int len, bool send, bool nb,
                           uint64_t timeout_ns)
{
    __shared__ int64_t shared_n;
    __shared__ uint64_t shared_pos;
    __shared__ bool shared_direct;
    int64_t n = 0;
    uint64_t pos = 0;
    bool direct = false; /* the proxy moved the bytes device to device */
    const bool leader = BLOCK ? block_leader() : true;
    const unsigned r = BLOCK ? block_rank() : 0, nthr = BLOCK ? block_size() : 1;

    if (leader) {
        n = check_net(net, s);
        rg_sock_shm_t *sh = n == RG_OK ? sock_of(net, s) : NULL;
        rg_sock_dev_t *sd = n == RG_OK ? shadow_of(net, s) : NULL;
        snap_t x;
        if (n == RG_OK) {
            /* A send with a fresh shadow skips the snapshot's round trip.
             * Only sends touch its send fields: a receive may run beside them. */
            x = send ? send_snap(net, sh, sd) : snap<true>(net, sh);
            n = check_snap(x, send);
        }
        if (n == RG_OK && (buf == NULL || len < 0))
            n = RG_EINVAL;
        if (n == RG_OK && len == 0)
            n = 0;
        else if (n == RG_OK) {
            uint64_t until = budget(net, timeout_ns);
            n = RG_RES_RING;
            if (send && !nb && tx_offers(net, x.rx_eof, len) && __isGlobal(buf)) {
                n = tx_direct(net, sh, buf, len, until);
                direct = n != RG_RES_RING;
                if (!direct)
                    x = send_resnap(net, sh, sd);
            }
            while (n == RG_RES_RING) {
                n = send ? tx_space(net, sh, sd, &x, len, until, nb)
                         : rx_avail(net, sh, &x, until, nb);
                if (n == RG_RES_RING) {
                    n = rx_request(net, sh, buf, len, x, until, nb);
                    direct = n != RG_RES_RING;
                    if (!direct)
                        x = snap<true>(net, sh);
                }
            }
            if (n > len)
                n = len;
            pos = send ? x.tx_head : x.rx_tail;
        }
        if (BLOCK) {
            shared_n = n;
            shared_pos = pos;
            shared_direct = direct;
        }
    }
    if (BLOCK) {
        __syncthreads();
        n = shared_n;
        pos = shared_pos;
        direct = shared_direct;
    }
    if (n > 0 && !direct) {
        uint64_t ring = net->ring_size;
        uint8_t *base = (uint8_t *)(uintptr_t)(send ? net->tx_data : net->rx_data) +
                        (size_t)s * ring;
        size_t off = (size_t)(pos & (ring - 1)), first = ring - off;
        if (first > (size_t)n)
            first = (size_t)n;
        if (send) {
            copy(base + off, buf, first, r, nthr);
            copy(base, (uint8_t *)buf + first, (size_t)n - first, r, nthr);
            __threadfence_system(); /* the bytes reach the host before the counter */
        } else {
            copy(buf, base + off, first, r, nthr);
            copy((uint8_t *)buf + first, base, (size_t)n - first, r, nthr);
        }
        if (BLOCK)
            __syncthreads(); /* every thread's loads and stores are done */
        if (leader) {
            rg_sock_shm_t *sh = sock_of(net, s);
            /* A posted write: nothing waits for it; the proxy sees it within a
             * PCIe latency, the next call of this thread reads it back. */
            if (send) {
                *(volatile uint64_t *)&sh->tx_head = pos + (uint64_t)n;
                rg_sock_dev_t *sd = shadow_of(net, s);
                if (sd) /* a store only; an invalid shadow takes the next snapshot's */
                    *(volatile uint64_t *)&sd->tx_head = pos + (uint64_t)n;
            } else
                *(volatile uint64_t *)&sh->rx_tail = pos + (uint64_t)n;
        }
    }
    if (BLOCK)
        __syncthreads();
    return (int)n;
}

/* Every thread of the block gets the leader's r (BLOCK), or r as is. */
template <bool BLOCK>
__device__ __forceinline__ int from_leader(int r)
{
    __shared__ int shared_r;
    if (!BLOCK)
        return r;
    if (block_leader())
        shared_r = r;
    __syncthreads();
    r = shared_r;
    __syncthreads(); /* no thread's next call overwrites it before all read it */
    return r;
}

template <bool BLOCK>
__device__ inline int cmd(rg_net_t *net, uint32_t op, int sock, uint32_t flags, const char *data,
                          uint64_t timeout_ns)
{
    int r = 0;
    if (!BLOCK || block_leader())
        r = command(net, op, sock, flags, data, timeout_ns);
    return from_leader<BLOCK>(r);
}

template <bool BLOCK>
__device__ inline int poll(rg_net_t *net, struct rg_pollfd *fds, int n, uint64_t timeout_ns)
{
    int ready = 0;
    if (!BLOCK || block_leader()) {
        if (net == NULL || fds == NULL || n < 0) {
            ready = RG_EINVAL;
        } else {
            uint64_t until = budget(net, timeout_ns);
            for (;;) {
                ready = 0;
                for (int i = 0; i < n; i++) {
                    short rev = 0;
                    int s = fds[i].sock;
                    snap_t x;
                    if (check_net(net, s) != RG_OK ||
                        check_snap(x = snap(net, sock_of(net, s)), false) != RG_OK) {
                        rev = RG_POLLERR;
                    } else {
                        if (x.error)
                            rev |= RG_POLLERR;
                        if ((fds[i].events & RG_POLLIN) &&
                            (x.rx_head != x.rx_tail || (x.rx_eof & (RG_RX_EOF | RG_RX_SRC)) ||
                             x.error))
                            rev |= RG_POLLIN;
                        if ((fds[i].events & RG_POLLOUT) && x.state == RG_SOCK_OPEN &&
                            x.tx_head - x.tx_tail < net->ring_size)
                            rev |= RG_POLLOUT;
                    }
                    fds[i].revents = rev;
                    ready += rev != 0;
                }
                if (ready || !alive(net) || now_ns() > until)
                    break;
            }
            if (!ready && !alive(net))
                ready = RG_ECANCELED;
        }
    }
    return from_leader<BLOCK>(ready);
}

/* Queued transfers (socket_abi.h, rg_sockq_t). */
#define RG_TICKET_MASK 0x3fffffffu

/* How many entries the answer word's entry lies past ticket t (0: t's own
 * answer; over RG_TICKET_MASK / 2: an earlier entry's). Tickets are the
 * entry number's low 30 bits. */
__device__ __forceinline__ uint32_t qans_age(uint64_t word, uint32_t t)
{
    return ((uint32_t)(word >> 32) - t) & RG_TICKET_MASK;
}

__device__ __forceinline__ rg_sockq_t *queue_of(rg_net_t *net, int s)
{
    return (rg_sockq_t *)(uintptr_t)net->queues + s;
}

/* A queue shadow as a post needs it (socket_abi.h): the counters and the
 * ring's head from device memory, if a post of this direction saw the
 * socket open in a snapshot within RG_SHADOW_NS. */
struct qshadow_t {
    uint32_t posted, done;
    uint64_t tx_head;
    bool     fresh;
};

__device__ __forceinline__ qshadow_t qshadow_load(const rg_sock_dev_t *sd, int dir)
{
    qshadow_t v = {0, 0, 0, false};
    if (sd == NULL)
        return v;
    uint64_t seen = *(const volatile uint64_t *)&sd->q_seen[dir];
    v.posted  = *(const volatile uint32_t *)&sd->q_posted[dir];
    v.done    = *(const volatile uint32_t *)&sd->q_done[dir];
    if (dir == 0) /* a send's mark: kept by every ring send */
        v.tx_head = *(const volatile uint64_t *)&sd->tx_head;
    v.fresh   = seen != 0 && now_ns() - seen <= RG_SHADOW_NS;
    return v;
}

/* A post's real snapshot, its counters loaded with it (one PCIe round trip
 * for all): the status of the socket for a queued transfer. */
__device__ inline int qpost_snap(rg_net_t *net, int s, bool send, const volatile uint32_t *posted,
                                 const volatile uint32_t *done, uint32_t *k, uint32_t *d,
                                 uint64_t *mark, uint64_t *t_snap)
{
    *t_snap = now_ns(); /* before the loads: the time the shadow may vouch from */
    rg_sock_shm_t *sh = sock_of(net, s);
    uint32_t p = *posted, dn = *done; /* issued before the snapshot's loads, used after */
    /* A send notes its snapshot in the send shadow, whose head later posts read. */
    snap_t x = send ? send_resnap(net, sh, shadow_of(net, s)) : snap(net, sh);
    *k = p + 1;
    *d = dn;
    int st = check_snap(x, send);
    if (st != RG_OK)
        return st;
    if (x.error)
        return x.error;
    if (!(x.rx_eof & RG_RX_REQ))
        return RG_EUNSUPPORTED; /* the peer is not a GPU socket on this host */
    *mark = x.tx_head;
    return RG_OK;
}

/* One thread: post buf as the socket's next queued send or receive, once
 * fewer than RG_QDEPTH are open; a ticket (>= 0) or a status. Within
 * RG_SHADOW_NS of the last look at the socket no PCIe round trip precedes
 * the entry's stores (socket_abi.h, queue shadows). */
__device__ inline int qpost(rg_net_t *net, int s, void *buf, int len, bool send,
                            uint64_t timeout_ns)
{
    int st = check_net(net, s);
    if (st != RG_OK)
        return st;
    if (net->queues == 0)
        return RG_EUNSUPPORTED;
    if (buf == NULL || len <= 0 || !__isGlobal(buf))
        return RG_EINVAL;
    rg_sockq_t *q = queue_of(net, s);
    rg_sock_dev_t *sd = shadow_of(net, s);
    volatile uint32_t *posted = send ? &q->tq_posted : &q->rq_posted;
    const volatile uint32_t *done = send ? &q->tq_done : &q->rq_done;
    const int dir = send ? 0 : 1;
    qshadow_t v = qshadow_load(sd, dir);
    uint32_t k = v.posted + 1, d = v.done;
    uint64_t mark = v.tx_head, t_snap = 0;
    if (!v.fresh &&
        (st = qpost_snap(net, s, send, posted, done, &k, &d, &mark, &t_snap)) != RG_OK)
        return st;
    uint64_t until = budget(net, timeout_ns);
    while (k - d > RG_QDEPTH) { /* full: the oldest completes first */
        if (!alive(net))
            return RG_ECANCELED;
        if (now_ns() > until)
            return RG_ETIMEDOUT;
        d = *done;
    }
    unsigned ix = (k - 1) % RG_QDEPTH;
    if (send) {
        q->tq_ptr[ix]  = (uint64_t)(uintptr_t)buf;
        q->tq_len[ix]  = (uint32_t)len;
        q->tq_mark[ix] = mark; /* our own counter: ring bytes sent before go first */
    } else {
        q->rq_ptr[ix] = (uint64_t)(uintptr_t)buf;
        q->rq_len[ix] = (uint32_t)len;
    }
    __threadfence_system();
    *posted = k;
    if (sd != NULL) {
        sd->q_posted[dir] = k;
        sd->q_done[dir]   = d;
        if (!v.fresh)
            sd->q_seen[dir] = t_snap;
    }
    return (int)(k & RG_TICKET_MASK);
}

/* One thread: the result of queued transfer `ticket`, once it completed.
 * A failed socket still answers only once no copy into a buffer of ours
 * runs, so a result always means the buffer is free again. */
__device__ inline int qwait(rg_net_t *net, int s, int ticket, bool send, uint64_t timeout_ns)
{
    int st = check_net(net, s);
    if (st != RG_OK)
        return st;
    if (net->queues == 0)
        return RG_EUNSUPPORTED;
    if (ticket < 0)
        return RG_EINVAL;
    rg_sock_shm_t *sh = sock_of(net, s);
    rg_sockq_t *q = queue_of(net, s);
    rg_sock_dev_t *sd = shadow_of(net, s);
    const int dir = send ? 0 : 1;
    const uint32_t t = (uint32_t)ticket;
    unsigned ix = (t - 1) % RG_QDEPTH;
    const rg_qans_t *ans = send ? q->tq_ans : q->rq_ans;
    if (sd != NULL) { /* loaded ahead by an earlier wait, after its fence */
        volatile uint64_t *cached = &sd->q_ans[dir][ix];
        uint64_t c = *cached;
        if (qans_age(c, t) == 0) {
            if (!send) /* the data as new as that fence, whichever thread took it */
                asm volatile("fence.acq_rel.gpu;" ::: "memory");
            *cached = qans_none(ix); /* taken: it must not answer a ticket 2^30 later */
            sd->q_done[dir] = (uint32_t)(c >> 32);
            return (int32_t)(uint32_t)c;
        }
    }
    uint64_t until = budget(net, timeout_ns);
    for (;;) {
        /* Issued together, each in a sector of its own: one PCIe round trip
         * a look. An answer word says whose answer it holds and what it is. */
        uint64_t a[RG_QLOOK];
        for (unsigned j = 0; j < RG_QLOOK; j++)
            a[j] = ans[(ix + j) % RG_QDEPTH].word;
        uint32_t up = alive(net), state = *(const volatile uint32_t *)&sh->state;
        uint32_t age = qans_age(a[0], t);
        if (age == 0) {
            /* A send's buffer is free: the copy out of it ended before the
             * answer was written, and no store of ours passes this load. */
            if (!send)
                fence_acquire_sys(); /* the received bytes, as new as the answers */
            if (sd != NULL) {
                uint32_t upto = (uint32_t)(a[0] >> 32); /* k, not masked */
                sd->q_ans[dir][ix] = qans_none(ix); /* whatever an older wait left */
                for (unsigned j = 1; j < RG_QLOOK; j++)
                    if (qans_age(a[j], t) == j) {
                        sd->q_ans[dir][(ix + j) % RG_QDEPTH] = a[j];
                        upto = (uint32_t)(a[j] >> 32);
                    }
                sd->q_done[dir] = upto; /* answered in order: so many are done at least */
            }
            return (int32_t)(uint32_t)a[0];
        }
        if (age < (RG_TICKET_MASK >> 1))
            return RG_EINVAL; /* a later entry's answer: this one's was read long ago */
        if (state == RG_SOCK_FREE)
            return RG_EINVAL; /* closed: its transfers went with it */
        if (!up)
            return RG_ECANCELED;
        if (now_ns() > until)
            return RG_ETIMEDOUT;
    }
}

/* qpost or qwait by one thread, or by the block's leader for everyone. */
template <bool BLOCK>
__device__ inline int queued(rg_net_t *net, int s, void *buf, int arg, bool send, bool post,
                             uint64_t timeout_ns)
{
    int r = 0;
    if (!BLOCK || block_leader())
        r = post ? qpost(net, s, buf, arg, send, timeout_ns) : qwait(net, s, arg, send, timeout_ns);
    return from_leader<BLOCK>(r);
}

} /* namespace rg_detail */

/* ---------------------------------------------------------------- block-cooperative */

/* Connect: "tcp://HOST:PORT" or "remora://HOST:PORT/SERVICE". A socket or < 0. */
__device__ inline int rg_connect_on(rg_net_t *net, const char *addr, uint64_t timeout_ns = 0)
{
    return rg_detail::cmd<true>(net, RG_OP_CONNECT, -1, 0, addr, timeout_ns);
}
__device__ inline int rg_connect(const char *addr) { return rg_connect_on(rg_default_net, addr); }

/* Listen: "tcp://HOST:PORT" or "remora:SERVICE" (the proxy's server). */
__device__ inline int rg_bind_on(rg_net_t *net, const char *addr)
{
    return rg_detail::cmd<true>(net, RG_OP_BIND, -1, 0, addr, 0);
}
__device__ inline int rg_bind(const char *addr) { return rg_bind_on(rg_default_net, addr); }

__device__ inline int rg_accept_on(rg_net_t *net, int lsock, uint64_t timeout_ns = 0)
{
    return rg_detail::cmd<true>(net, RG_OP_ACCEPT, lsock, 0, NULL, timeout_ns);
}
__device__ inline int rg_accept(int lsock) { return rg_accept_on(rg_default_net, lsock); }
__device__ inline int rg_accept_nb(int lsock)
{
    return rg_detail::cmd<true>(rg_default_net, RG_OP_ACCEPT, lsock, RG_CMD_NONBLOCK, NULL, 0);
}

__device__ inline int rg_send_on(rg_net_t *net, int s, const void *buf, int len,
                                 uint64_t timeout_ns = 0)
{
    return rg_detail::xfer<true>(net, s, (void *)buf, len, true, false, timeout_ns);
}
__device__ inline int rg_send(int s, const void *buf, int len)
{
    return rg_send_on(rg_default_net, s, buf, len);
}
__device__ inline int rg_send_nb(int s, const void *buf, int len)
{
    return rg_detail::xfer<true>(rg_default_net, s, (void *)buf, len, true, true, 0);
}

__device__ inline int rg_recv_on(rg_net_t *net, int s, void *buf, int len,
                                 uint64_t timeout_ns = 0)
{
    return rg_detail::xfer<true>(net, s, buf, len, false, false, timeout_ns);
}
__device__ inline int rg_recv(int s, void *buf, int len)
{
    return rg_recv_on(rg_default_net, s, buf, len);
}
__device__ inline int rg_recv_nb(int s, void *buf, int len)
{
    return rg_detail::xfer<true>(rg_default_net, s, buf, len, false, true, 0);
}

/* The peer's recv returns 0 once it has read everything sent before. */
__device__ inline int rg_shutdown(int s)
{
    return rg_detail::cmd<true>(rg_default_net, RG_OP_SHUTDOWN, s, 0, NULL, 0);
}
/* Bytes still in the send ring are delivered, then the socket is freed. */
__device__ inline int rg_close(int s)
{
    return rg_detail::cmd<true>(rg_default_net, RG_OP_CLOSE, s, 0, NULL, 0);
}

/*
 * Queued transfers: messages in flight together (docs/gpunet.md, "Queued
 * transfers"). Only between GPU sockets on one host (RG_EUNSUPPORTED with
 * any other peer: use rg_send/rg_recv) and only from and into global
 * memory. A post returns a ticket (>= 0) at once, or once fewer than
 * RG_QDEPTH of its kind are open (within the budget); the buffer belongs to
 * the socket until rg_*_wait on the ticket has returned a result, and open
 * receive buffers must not overlap (their copies may run at once). Each
 * direction completes in the order posted. Threading: one block (or one
 * thread, with the _thread forms) at a time posts in each direction of a
 * socket; waits may come from other threads.
 *   rg_send_post: the whole buffer is sent; its wait returns len, or < 0.
 *   rg_recv_post: gets the next bytes of the stream, at most len; its wait
 *     returns the count (0: end of stream), < 0, or RG_ERING: nothing was
 *     received because the peer sent bytes through the ring first (rg_recv
 *     them, then post again).
 * A wait that times out leaves the transfer queued (wait again). Ring bytes
 * and queued ones keep the order the kernel sent them in; a blocking
 * rg_send or rg_recv may be mixed in, and runs after the queued ones.
 * A result stays readable until the entry RG_QDEPTH posts later of that
 * direction completed (a wait after that returns RG_EINVAL): wait for
 * tickets in order.
 */
#define RG_ERING RG_RES_RING
__device__ inline int rg_send_post_on(rg_net_t *net, int s, const void *buf, int len,
                                      uint64_t timeout_ns = 0)
{
    return rg_detail::queued<true>(net, s, (void *)buf, len, true, true, timeout_ns);
}
__device__ inline int rg_send_post(int s, const void *buf, int len)
{
    return rg_send_post_on(rg_default_net, s, buf, len);
}
__device__ inline int rg_recv_post_on(rg_net_t *net, int s, void *buf, int len,
                                      uint64_t timeout_ns = 0)
{
    return rg_detail::queued<true>(net, s, buf, len, false, true, timeout_ns);
}
__device__ inline int rg_recv_post(int s, void *buf, int len)
{
    return rg_recv_post_on(rg_default_net, s, buf, len);
}
__device__ inline int rg_send_wait_on(rg_net_t *net, int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<true>(net, s, NULL, ticket, true, false, timeout_ns);
}
__device__ inline int rg_send_wait(int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_send_wait_on(rg_default_net, s, ticket, timeout_ns);
}
__device__ inline int rg_recv_wait_on(rg_net_t *net, int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<true>(net, s, NULL, ticket, false, false, timeout_ns);
}
__device__ inline int rg_recv_wait(int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_recv_wait_on(rg_default_net, s, ticket, timeout_ns);
}

/* Wait up to timeout_ns (0: the default budget) until a socket is ready;
 * the number ready, 0 on timeout, or < 0. */
__device__ inline int rg_poll(struct rg_pollfd *fds, int n, uint64_t timeout_ns)
{
    return rg_detail::poll<true>(rg_default_net, fds, n, timeout_ns);
}

/* ---------------------------------------------------------------- one thread alone */

__device__ inline int rg_connect_thread(const char *addr, uint64_t timeout_ns = 0)
{
    return rg_detail::cmd<false>(rg_default_net, RG_OP_CONNECT, -1, 0, addr, timeout_ns);
}
__device__ inline int rg_bind_thread(const char *addr)
{
    return rg_detail::cmd<false>(rg_default_net, RG_OP_BIND, -1, 0, addr, 0);
}
__device__ inline int rg_accept_thread(int lsock, uint64_t timeout_ns = 0)
{
    return rg_detail::cmd<false>(rg_default_net, RG_OP_ACCEPT, lsock, 0, NULL, timeout_ns);
}
__device__ inline int rg_send_thread(int s, const void *buf, int len, uint64_t timeout_ns = 0)
{
    return rg_detail::xfer<false>(rg_default_net, s, (void *)buf, len, true, false, timeout_ns);
}
__device__ inline int rg_recv_thread(int s, void *buf, int len, uint64_t timeout_ns = 0)
{
    return rg_detail::xfer<false>(rg_default_net, s, buf, len, false, false, timeout_ns);
}
__device__ inline int rg_send_nb_thread(int s, const void *buf, int len)
{
    return rg_detail::xfer<false>(rg_default_net, s, (void *)buf, len, true, true, 0);
}
__device__ inline int rg_recv_nb_thread(int s, void *buf, int len)
{
    return rg_detail::xfer<false>(rg_default_net, s, buf, len, false, true, 0);
}
__device__ inline int rg_send_post_thread(int s, const void *buf, int len, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<false>(rg_default_net, s, (void *)buf, len, true, true, timeout_ns);
}
__device__ inline int rg_recv_post_thread(int s, void *buf, int len, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<false>(rg_default_net, s, buf, len, false, true, timeout_ns);
}
__device__ inline int rg_send_wait_thread(int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<false>(rg_default_net, s, NULL, ticket, true, false, timeout_ns);
}
__device__ inline int rg_recv_wait_thread(int s, int ticket, uint64_t timeout_ns = 0)
{
    return rg_detail::queued<false>(rg_default_net, s, NULL, ticket, false, false, timeout_ns);
}
__device__ inline int rg_shutdown_thread(int s)
{
    return rg_detail::cmd<false>(rg_default_net, RG_OP_SHUTDOWN, s, 0, NULL, 0);
}
__device__ inline int rg_close_thread(int s)
{
    return rg_detail::cmd<false>(rg_default_net, RG_OP_CLOSE, s, 0, NULL, 0);
}
__device__ inline int rg_poll_thread(struct rg_pollfd *fds, int n, uint64_t timeout_ns)
{
    return rg_detail::poll<false>(rg_default_net, fds, n, timeout_ns);
}

#endif /* REMORA_DEVICE_SOCKET_CUH */
