/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The memory layout shared by GPU kernels (socket.cuh) and remora's GPU
 * socket proxy (src/gpu/gpunet.c). Plain C, included by both; every field
 * has a fixed size and offset. All of it lives in pinned host memory mapped
 * for the device, except the slot locks (device memory).
 *
 * Ownership of each field is single-writer:
 *   device writes: rg_cmd_t.seq/op/sock/flags/len/arg/data, rg_sock_shm_t.tx_head/rx_tail
 *   proxy writes:  rg_cmd_t.done_seq/result, rg_sock_shm_t.tx_tail/rx_head/state/error/rx_eof
 * A writer publishes data first, then (after a system-scope fence) the
 * counter; a reader reads the counter, fences, then the data. Counters are
 * byte totals that only grow; ring offsets are counter % ring_size.
 *
 * With a GPU the handle kernels get is a copy of rg_net_t in device memory
 * (the constant fields and addresses read at L2 speed, not across PCIe);
 * `alive` of that copy is unused and kernels read the word at alive_ptr (the
 * header's own `alive`, in mapped host memory). The proxy-written half of
 * rg_sock_shm_t (offset 64: tx_tail, rx_head, state, error, rx_eof, gen) is
 * 16-byte aligned so a kernel takes it in two loads issued together.
 */
#ifndef REMORA_DEVICE_SOCKET_ABI_H
#define REMORA_DEVICE_SOCKET_ABI_H

#include <stdint.h>

#define RG_ABI_MAGIC    0x31474e52u /* "RNG1" */
#define RG_ABI_VERSION  2u
#define RG_CMD_INLINE   256u        /* bytes of a command's inline data (addresses) */
#define RG_ADDR_MAX     (RG_CMD_INLINE - 1u)

/* Commands a kernel posts in a slot. */
enum rg_op {
    RG_OP_NONE     = 0,
    RG_OP_CONNECT  = 1, /* data: address; result: socket or status */
    RG_OP_BIND     = 2, /* data: address; result: listening socket or status */
    RG_OP_ACCEPT   = 3, /* sock: listening socket; result: socket or status */
    RG_OP_SHUTDOWN = 4, /* sock; the proxy sends what the ring holds, then ends the stream */
    RG_OP_CLOSE    = 5  /* sock; as shutdown, then the socket is freed */
};

/* rg_cmd_t.flags */
enum { RG_CMD_NONBLOCK = 1u << 0 };

/* rg_sock_shm_t.state */
enum { RG_SOCK_FREE = 0, RG_SOCK_OPEN = 1, RG_SOCK_LISTEN = 2, RG_SOCK_CLOSING = 3 };

typedef struct rg_cmd {
    volatile uint32_t seq;       /* the device bumps it to post the command */
    uint32_t          op;
    int32_t           sock;
    uint32_t          flags;
    uint32_t          len;       /* bytes of data used */
    uint32_t          pad0;
    uint64_t          arg;
    char              data[RG_CMD_INLINE];
    volatile uint32_t done_seq;  /* the proxy sets it to seq when done */
    volatile int32_t  result;
    uint64_t          pad1[3];
} rg_cmd_t; /* 320 bytes */

typedef struct rg_sock_shm {
    /* written by the device */
    volatile uint64_t tx_head;   /* bytes put into the send ring */
    volatile uint64_t rx_tail;   /* bytes taken out of the receive ring */
    uint64_t          pad0[6];
    /* written by the proxy */
    volatile uint64_t tx_tail;   /* bytes the proxy took out of the send ring */
    volatile uint64_t rx_head;   /* bytes put into the receive ring; listening: connections waiting */
    volatile int32_t  state;
    volatile int32_t  error;     /* 0, or the negative status that failed the socket */
    volatile uint32_t rx_eof;    /* the peer ended its stream at rx_head */
    volatile uint32_t gen;       /* bumped each time the slot is handed out */
    uint64_t          pad1[4];
} rg_sock_shm_t; /* 128 bytes */

/* The handle kernels get (remora_gpunet_device_handle). Addresses are
 * device addresses. */
typedef struct rg_net {
    uint32_t          magic, version;
    uint32_t          max_socks, nslots;
    uint64_t          ring_size;   /* per socket and direction, a power of two */
    uint64_t          timeout_ns;  /* budget of blocking calls that give none */
    volatile uint32_t alive;       /* 0 once the proxy is gone */
    uint32_t          pad0;
    uint64_t          socks;       /* rg_sock_shm_t[max_socks] */
    uint64_t          cmds;        /* rg_cmd_t[nslots] */
    uint64_t          tx_data;     /* max_socks rings of ring_size: socket i's at i * ring_size */
    uint64_t          rx_data;
    uint64_t          slot_locks;  /* int[nslots], device memory: 0 free, 1 taken */
    uint64_t          alive_ptr;   /* address of the uint32_t kernels read as `alive` */
    uint64_t          pad1[3];
} rg_net_t;

#endif
