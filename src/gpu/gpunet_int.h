/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU socket proxy internals shared by gpunet.c (commands, TCP and remora
 * backends) and gpunet_peer.c (GPU peers on the same host). Not installed.
 *
 * Threading: socket i's data (psock_t and the proxy-written half of its
 * rg_sock_shm_t) belongs to worker i % nworkers; worker 0 also runs the
 * commands, listeners and connects in flight, and hands a socket to its
 * owner with gn_hand_over(). The IPC mapping cache is shared under maps_lock.
 */
#ifndef RM_GPU_GPUNET_INT_H
#define RM_GPU_GPUNET_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "gpu/gpunet.h"
#include "mem/copyq.h"
#include "mem/cuda.h"
#include "remote/sock.h"

#define GN_DEFAULT_SOCKS  128u
#define GN_DEFAULT_RING   (256u << 10)
#define GN_SLOTS          256u
#define GN_CLIENTS_MAX    16
#define GN_WORKERS_MAX    16    /* REMORA_GPUNET_THREADS; default one a CPU, up to this */
#define GN_NAP_NS         50000L   /* an idle worker's nap, once it stopped spinning */
#define GN_DOZE_NS        50000000ull /* idle this long, a worker naps GN_NAP_LONG_NS */
#define GN_NAP_LONG_NS    1000000L
#define GN_EMPTY_WAIT_MS  100   /* a worker (not 0) without sockets sleeps until handed one */
#define GN_MAPS           64u   /* peers' buffers kept mapped (CUDA IPC) until destroy */
/* A command answered later (a TCP connect in flight). Not a status and not
 * a socket: REMORA_INPROGRESS (1) is also socket 1. */
#define GN_PENDING        (-1000000)
#define GN_EV_CTL         0x80000000u /* epoll data: socket i's control fd (BK_GPU) */

/* BK_RESERVED: handed out by sock_alloc, backend not set up yet (no worker
 * touches it). BK_GPU: a GPU socket of another proxy on this host, over a
 * local seqpacket socket (gpunet_peer.c). */
enum { BK_NONE, BK_TCP, BK_TCP_CONNECTING, BK_TCP_LISTEN, BK_SOCK, BK_SOCK_LISTEN, BK_RESERVED,
       BK_GPU, BK_SOCK_CONNECTING };

/* A copy on a worker's copy queue (rm_copyq) and how it ended; polled by
 * the socket's owner after gp_poll_copies ran the callbacks. */
typedef struct gn_copy {
    rm_copy_t       copy;
    int             ended;  /* its callback ran, with status */
    remora_status_t status;
    uint64_t        n;      /* bytes */
} gn_copy_t;

/* A peer's buffer mapped here (CUDA IPC), shared by the sockets using it. */
typedef struct gp_map {
    pid_t    pid;       /* the exporting process: handles are only unique within one */
    rm_cuda_ipc_handle_t handle;
    uint8_t *base;      /* NULL: a free entry */
    size_t   size;
} gp_map_t;

/* A buffer of ours offered to peers: its allocation's IPC handle, kept per
 * worker (cuIpcGetMemHandle costs more than the lookup that validates it). */
typedef struct gp_offer {
    uint64_t             id;    /* rm_cuda_ptr_alloc's; 0: empty */
    uint8_t             *base;
    size_t               size;
    rm_cuda_ipc_handle_t handle;
} gp_offer_t;

/* A queued send of the peer's (its RTSQ), taken in the order they came. */
typedef struct gp_qsrc {
    uint8_t *src;             /* in a peer's buffer mapped here */
    uint64_t len, taken;      /* bytes offered, bytes given to copies so far */
    uint64_t id;              /* the peer's entry counter */
    unsigned copies;          /* copies out of it still running */
} gp_qsrc_t;

/* How one of the kernel's queued receives is answered: a copy (from the
 * peer's direct send or a queued one), or a result known at once. */
typedef struct gp_qrx {
    int       copying;        /* copy runs (or ran: copy.ended) */
    int       from_src;       /* out of the peer's direct send (src), not a queued one */
    unsigned  qi;             /* the gp_qsrc_t it reads (counter, not index) */
    int32_t   res;            /* without a copy: the answer */
    gn_copy_t copy;
} gp_qrx_t;

/* BK_GPU state, owned by the socket's worker. */
typedef struct gp_state {
    int      cfd;             /* the control socket (-1 until the acceptor gets it) */
    int      ctl_readable, ctl_closed;
    int      hello, fin_in, peer_closed;
    pid_t    peer_pid;        /* SO_PEERCRED */
    uint64_t last_rx_ns, last_ping_ns; /* liveness while the kernel waits on the peer */
    uint64_t last_check_ns;            /* when liveness last ran: our own stalls */
    uint32_t rx_bits;         /* what rg_sock_shm_t.rx_eof says (RG_RX_*) */
    /* Our direct send: the kernel's dtx request, out as an RTS until DONE. */
    uint32_t tx_id;           /* the dtx_seq out as an RTS (tx_busy) */
    int      tx_busy, tx_cancel_sent;
    uint64_t tx_deadline;     /* a canceled RTS must be answered by then */
    /* The peer's direct send (its RTS), until one copy moved some of it. */
    int      src_active;
    uint64_t src_id, src_len;
    uint64_t done_id;         /* the last RTS answered */
    int      cancel_seen;     /* a CANCEL for cancel_id came before its RTS */
    uint64_t cancel_id;
    uint8_t *src;             /* in a peer's buffer mapped here (maps) */
    /* The kernel's receive request and the copy serving it. */
    uint32_t rx_seen;         /* the last drx_seq answered */
    int      copying, copy_to_ring;
    int      copy_q;          /* ... out of a queued send of the peer's (copy_qi), not src */
    unsigned copy_qi;
    uint32_t copy_seq;
    gn_copy_t copy;           /* on the worker's copy queue while copying */
    /* Queued transfers (rg_sockq_t). Ours: entries offered as RTSQ and
     * answered; tq_res[(k - 1) % RG_QDEPTH] holds an answer until its turn. */
    uint32_t tq_sent, tq_acked;
    int      tq_has[RG_QDEPTH];
    int32_t  tq_res[RG_QDEPTH];
    /* The peer's queued sends: qsrc[k % RG_QDEPTH] for counters k in
     * [qs_head, qs_tail); qs_take is the one bytes are taken from next. */
    gp_qsrc_t qsrc[RG_QDEPTH];
    uint64_t qs_head, qs_take, qs_tail;
    uint64_t qs_last;         /* the last RTSQ's counter */
    /* The kernel's queued receives: counters up to rq_assigned have an
     * answer on the way (rqa[k % RG_QDEPTH]), up to rq_answered published. */
    uint32_t rq_assigned, rq_answered;
    gp_qrx_t rqa[RG_QDEPTH];
    int      src_busy;        /* a queued receive copies out of src */
    int      ering;           /* a queued receive was told "the ring first" ... */
    uint64_t ering_tail;      /* ... when the kernel had taken this much of it */
    unsigned qcopies;         /* copies of queued receives running */
    /* Control frames that found the socket full, sent before anything else:
     * at most one DONE, CANCEL and PING/PONG, and a DONEQ per queued send. */
    struct { uint32_t type; uint64_t a, b; } out[4 + RG_QDEPTH];
    unsigned nout;
} gp_state_t;

/* A worker's bounce buffer (gpunet_bounce.c): a staging ring of the proxy's
 * own, owned by one socket at a time. Counters are positions in the bytes
 * that socket sent through it; byte k is at buf[k % GN_BOUNCE_SPAN]. */
#define GN_BOUNCE_SPAN        (2u << 20)
#define GN_BOUNCE_CHUNK       (512u << 10) /* a copy, at most */
#define GN_BOUNCE_MIN_DEFAULT (4u << 20)   /* REMORA_GPUNET_BOUNCE_MIN (docs/gpunet.md) */
typedef struct gn_bounce {
    uint8_t  *buf;            /* pinned (malloc'd with host queues); NULL: none */
    int       sock;           /* its owner, -1: free */
    uint64_t  copied, landed, sent; /* started into buf, in buf, handed to the peer */
    int32_t   err;            /* a failed copy: answered, then the socket fails */
    /* The owner's request being copied in (req_active), answered once landed. */
    int       req_active, req_canceled;
    uint32_t  req_seq;
    uint64_t  req_src, req_len, req_base; /* kernel's buffer, bytes, `copied` at take */
    uint64_t  progress_ns;    /* when the request last moved */
    int       copying;        /* a copy is in flight (it may outlive its socket) */
    gn_copy_t copy;
} gn_bounce_t;

typedef struct psock {
    int      kind;           /* atomic: the owner pumps BK_TCP/BK_SOCK/BK_GPU once it is set */
    int      fd;
    int      ufd;            /* BK_TCP_LISTEN: the local listener GPU peers connect to, or -1 */
    remora_sock_h          rs;
    remora_sock_listener_h rl;
    int      readable;       /* epoll said so (TCP, local) */
    int      closing, shutting; /* atomic: set by worker 0 (commands), read by the owner */
    int      shut_done;
    uint64_t tx_tail, rx_head;
    uint32_t tx_seen;        /* the last dtx_seq answered (gn_answer_tx) */
    int      pend_slot;      /* BK_TCP_CONNECTING, BK_SOCK_CONNECTING: the command to answer */
    uint32_t pend_seq;
    uint64_t deadline;
    gp_state_t gp;
} psock_t;

typedef struct paccept {
    int      active, sock, nonblock;
    uint32_t seq;
} paccept_t;

typedef struct pclient {
    char            addr[128];
    remora_client_h client;
} pclient_t;

/* A remora:// connect handed to the connector thread (gpunet_connect.c). */
typedef struct gn_rconn {
    struct gn_rconn *next;
    int              sock;   /* its slot, BK_SOCK_CONNECTING until finished (pend_slot, pend_seq) */
    remora_status_t  st;     /* the connector's result, and on success ... */
    remora_sock_h    rs;     /* ... the socket */
    char             host[128], service[RG_ADDR_MAX + 1];
} gn_rconn_t;

typedef struct gn_connector {
    pthread_mutex_t mx;
    pthread_cond_t  cv;
    pthread_t       thread;
    int             started, stop;            /* started: by worker 0 */
    gn_rconn_t     *todo, **todo_tail, *done; /* under mx: FIFO in, any order out */
    atomic_int      has_done;                 /* done is not empty: worker 0's cheap look */
} gn_connector_t;

struct remora_gpunet {
    remora_context_h ctx, cctx;  /* cctx: this proxy's own, for remora:// connects */
    remora_server_h  server;
    int              device, host_queues;
    unsigned         max_socks, nslots;
    size_t           ring;
    uint64_t         timeout_ns, spin_ns;
    uint64_t         direct_min; /* 0: GPU peers on this host go through the rings only */
    uint64_t         bounce_min; /* 0: sends to other peers go through the rings only */
    int              submit_thread; /* copy queues make their driver calls on a thread of their own */
    unsigned         copy_lanes;    /* streams per copy queue */
    uint64_t         hb_ns, dead_ns; /* GPU peers' liveness: the context's heartbeat, peer timeout */
    uint8_t         *mem;        /* host view */
    uintptr_t        dev;        /* device address of mem */
    size_t           mem_len;
    void            *locks;      /* device memory (host memory in host_queues mode) */
    void            *dnet;       /* device memory: the copy of *net kernels get (NULL: host queues) */
    rg_net_t        *net;
    rg_sock_shm_t   *sh;
    rg_cmd_t        *cmds;
    rg_sockq_t      *q;          /* queued transfers, per socket */
    uint8_t         *tx, *rx;
    psock_t         *ps;
    uint32_t        *seen;
    paccept_t       *acc;
    pclient_t        clients[GN_CLIENTS_MAX]; /* the connector's, with cctx */
    unsigned         nclients;
    gn_connector_t   cn;
    unsigned         nworkers;   /* socket i's data is pumped by worker i % nworkers */
    int              epfd[GN_WORKERS_MAX];
    pthread_t        thread[GN_WORKERS_MAX];
    rm_copyq_t      *copyq[GN_WORKERS_MAX];       /* each worker's device-to-device copies */
    gp_offer_t       offers[GN_WORKERS_MAX][4];   /* each worker's, most recent first */
    gn_bounce_t      bounce[GN_WORKERS_MAX];      /* each worker's */
    pthread_mutex_t  wake_lock;  /* a worker without sockets sleeps until handed one */
    pthread_cond_t   wake_cv[GN_WORKERS_MAX];
    int              wake[GN_WORKERS_MAX];
    pthread_mutex_t  maps_lock;
    gp_map_t         maps[GN_MAPS];
    int              maps_full;  /* said once: the table is full */
    atomic_int       stop;
    _Atomic uint64_t ring_bytes, bounce_sends, bounce_bytes, bounce_to_ring; /* remora_gpunet_stats */
};

static inline void gn_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t ld_acq(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline uint32_t ld_acq32(volatile uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st_rel(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void st_rel32(volatile int32_t *p, int32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void st_relu32(volatile uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int kind_of(psock_t *p) { return __atomic_load_n(&p->kind, __ATOMIC_ACQUIRE); }
static inline void set_kind(psock_t *p, int k) { __atomic_store_n(&p->kind, k, __ATOMIC_RELEASE); }
static inline int flag(int *f) { return __atomic_load_n(f, __ATOMIC_ACQUIRE); }
static inline void set_flag(int *f) { __atomic_store_n(f, 1, __ATOMIC_RELEASE); }

/* A connect in flight (BK_TCP_CONNECTING, BK_SOCK_CONNECTING) whose command
 * the kernel gave up on: its slot holds a newer one. */
static inline int gn_pend_abandoned(remora_gpunet_h g, psock_t *p)
{
    return ld_acq32(&g->cmds[p->pend_slot].seq) != p->pend_seq;
}

/* gpunet.c */
int  gn_sock_alloc(remora_gpunet_h g, int kind); /* worker 0: a free slot of kind, or -1 */
void gn_sock_publish(remora_gpunet_h g, int i, int state);
void gn_complete(remora_gpunet_h g, unsigned slot, uint32_t seq, int32_t result); /* a command's answer */
void gn_hand_over(remora_gpunet_h g, int i, int kind); /* set_kind, and its owner woken */
int  gn_watch_ctl(remora_gpunet_h g, int i, int fd); /* a BK_GPU control fd to its owner's epoll */
void gn_sock_free(remora_gpunet_h g, int i);
void gn_sock_fail(remora_gpunet_h g, int i, remora_status_t st);

int64_t gn_backend_send(psock_t *p, const void *buf, size_t n); /* BK_TCP/BK_SOCK: bytes taken or a status */
/* Answer the kernel's direct send (dtx) seq with res: bytes, a status or RG_RES_RING. */
void gn_answer_tx(remora_gpunet_h g, int i, uint32_t seq, int32_t res);
/* Start dst <- src on socket i's worker's copy queue, on our device (a
 * peer's buffer is mapped in its context only); no CUDA object is made.
 * d2d: both sides device-addressable (rm_copy_t.d2d). */
remora_status_t gn_copy_start(remora_gpunet_h g, int i, gn_copy_t *c, void *dst, const void *src,
                              uint64_t n, int d2d);

/* gpunet_connect.c: remora:// connects on a thread of their own. */
void gn_connect_init(remora_gpunet_h g);
/* Worker 0: start one (GN_PENDING), or a status at once. */
int  gn_connect_remora(remora_gpunet_h g, const char *rest, unsigned slot, uint32_t seq);
int  gn_connects_progress(remora_gpunet_h g); /* worker 0: finish those that ended; 1 if any */
void gn_connect_stop(remora_gpunet_h g);      /* destroy: after the workers, before cctx goes */

/* gpunet_bounce.c: direct sends to CPU and TCP peers (BK_TCP, BK_SOCK),
 * copied out of GPU memory through the worker's bounce buffer. */
remora_status_t gb_prepare(remora_gpunet_h g);   /* at create, after gp_prepare */
/* The bounce buffer's side of pump(): its bytes go out before the ring's
 * (they are older), a kernel's direct send is taken once the ring is empty
 * (before, only its cancel is answered). 1 if anything moved, 0 if not, or
 * the status that failed the socket. */
int  gb_pump(remora_gpunet_h g, int i, int ring_empty);
int  gb_holds(remora_gpunet_h g, int i);  /* bytes of i wait in the bounce buffer: the ring waits */
int  gb_busy(remora_gpunet_h g, int i);   /* ... or a direct send awaits its answer */
void gb_fail(remora_gpunet_h g, int i);   /* the socket failed: answer what can be */
void gb_release(remora_gpunet_h g, int i); /* from gn_sock_free */

/* gpunet_peer.c: GPU peers on this host. A TCP listener gets a local
 * seqpacket listener beside it, named after its address; a connect to a
 * TCP address tries that name first. */
int  gp_listen(remora_gpunet_h g, int tcp_fd);   /* the local listener, or -1 (none) */
int  gp_connect(remora_gpunet_h g, const struct sockaddr *sa, int *cfd); /* fd, or -1 */
int  gp_accept(int ufd);                         /* a connected fd, or -1 */
void gp_open(remora_gpunet_h g, int i, int cfd); /* before the socket is published */
int  gp_pump(remora_gpunet_h g, int i);          /* the owner's step; 1 if anything moved */
void gp_release(remora_gpunet_h g, int i);       /* from gn_sock_free */
int  gp_poll_copies(remora_gpunet_h g, unsigned w); /* worker w's ended copies; 1 if any */
remora_status_t gp_prepare(remora_gpunet_h g);   /* at create: copy queues, the closer */
void gp_shutdown(remora_gpunet_h g);             /* proxy teardown, workers stopped */

#endif
