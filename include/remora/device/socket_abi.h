/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The memory layout shared by GPU kernels (socket.cuh) and remora's GPU
 * socket proxy (src/gpu/gpunet.c). Plain C, included by both; every field
 * has a fixed size and offset. All of it lives in pinned host memory mapped
 * for the device, except the slot locks and send shadows (device memory).
 *
 * Ownership of each field is single-writer:
 *   device writes: rg_cmd_t.seq/op/sock/flags/len/arg/data, rg_sock_shm_t's first 64 bytes
 *                  (tx_head, rx_tail, the dtx_* and drx_* requests)
 *   proxy writes:  rg_cmd_t.done_seq/result, rg_sock_shm_t from offset 64 (tx_tail, rx_head,
 *                  state, error, rx_eof, gen, the answers dtx_done/res and drx_done/res)
 * A writer publishes data first, then (after a system-scope fence) the
 * counter; a reader reads the counter, fences, then the data. Counters are
 * byte totals that only grow; ring offsets are counter % ring_size.
 *
 * With a GPU the handle kernels get is a copy of rg_net_t in device memory
 * (the constant fields and addresses read at L2 speed, not across PCIe);
 * `alive` of that copy is unused and kernels read the word at alive_ptr (the
 * header's own `alive`, in mapped host memory). A kernel takes a socket's
 * counters and state in 16-byte loads issued together: tx_head/rx_tail,
 * tx_tail/rx_head and state/error/rx_eof/gen sit in three different 32-byte
 * sectors, because the GPU serves two loads of one sector of host memory one
 * after the other (H100: 2.26 us for two, 1.28 us for three on different
 * sectors; ABI 3 had the last two in one sector).
 *
 * Requests (sockets whose rx_eof has RG_RX_REQ: the peer is a GPU socket on
 * this host). Besides the rings, such a socket moves bytes device to device:
 * a send of direct_min bytes or more from global memory posts its buffer
 * (dtx_ptr, dtx_len, then dtx_seq = dtx_done + 1) and the peer's proxy
 * copies straight out of it into the receiver's buffer; a receive that finds
 * the ring empty posts a request (drx_ptr: its buffer if global and of
 * direct_min bytes or more, else 0 for "into the ring"; drx_len; drx_seq).
 * The proxy answers each request once: *_res, then *_done = seq. A caller
 * whose budget ran out writes *_cancel = seq and still waits for the answer
 * (it may say bytes moved: they did). Results: a byte count, 0 (receive:
 * end of stream), a negative status, or RG_RES_RING (use the ring).
 *
 * Sockets with any other peer (CPU, TCP) take direct sends too, of
 * bounce_min bytes or more from global memory (0: none): the proxy copies
 * the buffer out with the GPU's copy engine through a pinned bounce buffer
 * and sends it, or answers RG_RES_RING (its bounce buffer is busy). The
 * field sat in rg_net_t's padding (an older proxy leaves it 0).
 *
 * Queued transfers (rg_sockq_t, one per socket, at rg_net_t.queues; 0 from
 * a proxy that has none). On a socket with RG_RX_REQ a kernel may post up to
 * RG_QDEPTH sends and RG_QDEPTH receives of global memory without waiting:
 * entry k (a counter from 1) sits at index (k - 1) % RG_QDEPTH; the device
 * writes ptr and len, fences, then the posted counter; the proxy writes the
 * answer (k and the result in one word), then the done counter, which
 * posts read to know a slot is free. Entries complete in order. A queued send
 * is taken whole (its result is its length or a status); a queued receive
 * gets the next bytes of the stream, as a receive does (its result is a byte count,
 * 0 at end of stream, a status, or RG_RES_RING: nothing was received, the
 * stream goes on in the ring). The proxy moves several at once, so
 * messages are in flight together (docs/gpunet.md, "Queued transfers").
 *
 * Send shadows (rg_sock_dev_t, one per socket, in device memory at
 * rg_net_t.shadows; ABI 5). Only kernels use them: what a send's last
 * snapshot of the socket said (the send ring's tail, that the socket was
 * open) and the send ring's head this device wrote last. A send within
 * RG_SHADOW_NS of that snapshot, with room in the ring by the shadow's
 * count, writes without a snapshot first (a 1.3 us PCIe round trip). So a
 * send on a socket that failed less than RG_SHADOW_NS ago may still be
 * taken into the ring, as a POSIX send into a socket buffer is, and the
 * next call reports the error. A connect, accept, shutdown or close clears
 * the shadow of its socket.
 *
 * Queue shadows (the same struct, ABI 6) do that for queued posts: a post
 * within RG_SHADOW_NS of a post of its direction whose snapshot saw the
 * socket open takes the counters from device memory and writes its entry
 * without a snapshot. A post on a socket that failed since is answered with
 * the error, like any entry open when a socket fails.
 *
 * The magic carries the version: a kernel built against another layout
 * finds a magic it does not know and fails every call with -1.
 */
#ifndef REMORA_DEVICE_SOCKET_ABI_H
#define REMORA_DEVICE_SOCKET_ABI_H

#include <stdint.h>

#define RG_ABI_MAGIC    0x36474e52u /* "RNG6" */
#define RG_ABI_VERSION  6u
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

/* rg_sock_shm_t.rx_eof bits */
enum {
    RG_RX_EOF = 1u, /* the peer ended its stream at rx_head */
    RG_RX_SRC = 2u, /* the peer posted a direct send: a receive request gets bytes */
    RG_RX_REQ = 4u  /* the socket takes requests (dtx_*, drx_*): a GPU peer on this host */
};

/* A request's answer besides bytes and statuses: go through the ring (send:
 * the buffer cannot be shared; receive: bytes are in the ring now). */
#define RG_RES_RING (-1000)

/* Queued transfers per socket and direction. */
#define RG_QDEPTH 8u

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
    volatile uint64_t dtx_ptr;   /* direct send: the source (device address) */
    volatile uint64_t drx_ptr;   /* receive request: the destination, 0 = into the ring */
    volatile uint32_t dtx_len, dtx_seq;
    volatile uint32_t drx_len, drx_seq;
    volatile uint32_t dtx_cancel, drx_cancel;
    uint64_t          pad0;
    /* written by the proxy; offsets 64, 80 and 96 (see above) */
    volatile uint64_t tx_tail;   /* bytes the proxy took out of the send ring */
    volatile uint64_t rx_head;   /* bytes put into the receive ring; listening: connections waiting */
    volatile uint32_t dtx_done, drx_done; /* the last request answered */
    volatile int32_t  dtx_res, drx_res;
    volatile int32_t  state;
    volatile int32_t  error;     /* 0, or the negative status that failed the socket */
    volatile uint32_t rx_eof;    /* RG_RX_* bits; EOF: the peer ended its stream at rx_head */
    volatile uint32_t gen;       /* bumped each time the slot is handed out */
    uint64_t          pad1[2];
} rg_sock_shm_t; /* 128 bytes */

/* One answer word in a 32-byte sector of its own. */
typedef struct rg_qans {
    volatile uint64_t word;
    uint64_t          pad[3];
} rg_qans_t;

#define RG_QLOOK 4u /* answers a queued wait loads together (its own first) */

/* A socket's queued transfers (see above): the device writes the first 320
 * bytes, the proxy the rest. tq_mark is tx_head when the send was posted:
 * ring bytes sent before it go first. */
typedef struct rg_sockq {
    /* written by the device */
    volatile uint64_t tq_ptr[RG_QDEPTH];  /* queued sends: sources */
    volatile uint64_t rq_ptr[RG_QDEPTH];  /* queued receives: destinations */
    volatile uint64_t tq_mark[RG_QDEPTH];
    volatile uint32_t tq_len[RG_QDEPTH];
    volatile uint32_t rq_len[RG_QDEPTH];
    volatile uint32_t tq_posted, rq_posted; /* offset 256 */
    uint32_t          pad0[14];
    /* written by the proxy; offset 320 */
    volatile uint32_t tq_done, rq_done;
    uint32_t          pad1[14];
    /* Answers (ABI 6), offsets 384 and 640: entry k's at index
     * (k - 1) % RG_QDEPTH, k in the high half of its word and its result in
     * the low half, so one load says both (a counter, a fence, then the
     * result cost three PCIe trips). A word a sector: a wait loads the next
     * few answers with its own in one round trip (RG_QLOOK). */
    rg_qans_t         tq_ans[RG_QDEPTH];
    rg_qans_t         rq_ans[RG_QDEPTH];
} rg_sockq_t; /* 896 bytes */

/* A socket's send shadow (device memory; see above). */
typedef struct rg_sock_dev {
    uint64_t tx_head;  /* the send ring's head this device wrote last */
    uint64_t tx_tail;  /* the proxy's tail at the last snapshot */
    uint64_t t_snap;   /* %globaltimer of that snapshot */
    uint32_t bits;     /* its rx_eof & RG_RX_REQ (fixed for a connection) */
    uint32_t valid;    /* 0: take a snapshot */
    /* Queue shadows (ABI 6), [0] sends, [1] receives: the posted counter
     * and the done counter as the poster last knew them, and when a post of
     * that direction last saw the socket open in a snapshot (0: not since
     * the socket's last connect, shutdown or close; the counters are stale). */
    uint32_t q_posted[2];
    uint32_t q_done[2];
    uint64_t q_seen[2];
    /* Answer words a wait loaded ahead of its own (ABI 6; cleared with the
     * queue shadow): the next wait finds its answer here without a trip. */
    uint64_t q_ans[2][RG_QDEPTH];
} rg_sock_dev_t; /* 192 bytes */

#define RG_SHADOW_NS 100000u /* a shadow older than this is not used */

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
    uint64_t          direct_min;  /* sends and receives this large may go device to device */
    uint64_t          bounce_min;  /* other peers: sends this large are copied out by the proxy */
    uint64_t          queues;      /* rg_sockq_t[max_socks]; 0: no queued transfers */
    uint64_t          shadows;     /* rg_sock_dev_t[max_socks], device memory; 0: none */
} rg_net_t;

#endif
