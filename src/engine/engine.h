/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine: one UCX context and worker per remora context, one progress
 * thread, endpoints, and the active-message plumbing the remote layer uses.
 *
 * Design notes
 * - One lock (ctx->lock) guards the worker and every piece of protocol state
 *   built on it (servers, connections, clients, pending operations). UCX
 *   callbacks run inside ucp_worker_progress() and therefore with it held.
 * - Progress: the progress thread spins for spin_us after the last event, then
 *   arms the worker and sleeps on its event fd. No thread spins while more
 *   threads are runnable than there are cores, beyond the spinners the spin
 *   slots allow, or while every slot is taken (spin_load; spin.h); a spinner
 *   yields its core every 10 us, to a thread its sends woke beside it. A thread
 *   blocked in a remora call becomes the "driver" and progresses the worker
 *   itself (no hand-off to another thread on the latency path); the progress
 *   thread stands aside while a driver exists. Only one driver at a time;
 *   other waiters sleep.
 * - Completions are published with rm_engine_complete(), which wakes sleepers.
 * - Work that must run without the lock (user event callbacks) is deferred to
 *   the progress thread with rm_engine_defer().
 */
#ifndef RM_ENGINE_ENGINE_H
#define RM_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <remora/remora.h>

#define RM_SERVING_MAX 8

#include "engine/gate.h"
#include "engine/ucx_addr.h"
#include "mem/copyq.h"
#include "util/list.h"
#include "wire/wire.h"

#define RM_AM_ID_TO_SERVER 0x52
#define RM_AM_ID_TO_CLIENT 0x53

typedef struct rm_peer rm_peer_t;
typedef struct rm_seal rm_seal_t; /* seal.h */

/* A file descriptor the progress thread watches; cb runs with the lock held. */
typedef struct rm_watch rm_watch_t;
struct rm_watch {
    int  fd;
    void (*cb)(rm_watch_t *w, uint32_t events);
};

/* Runs every RM_TICK_MS on the progress thread with the lock held. */
typedef struct rm_ticker {
    rm_list_t link;
    void (*fn)(struct rm_ticker *t);
} rm_ticker_t;

#define RM_TICK_MS 100

/* What a peer does with a message; called with the context lock held. */
typedef struct rm_peer_ops {
    /* body is valid only during the call unless param says RNDV/DATA (see UCX docs). */
    ucs_status_t (*on_message)(rm_peer_t *peer, const rm_hdr_t *hdr, void *body,
                               size_t body_len, const ucp_am_recv_param_t *param);
    /* The endpoint failed; the peer must stop using it. */
    void (*on_error)(rm_peer_t *peer, remora_status_t status);
    /* Optional: a lingering close (rm_peer_close_linger) is over; the peer
     * may be freed now, and not before. */
    void (*on_closed)(rm_peer_t *peer);
} rm_peer_ops_t;

/* Bytes read from a bootstrap socket and not yet parsed into frames (boot.c). */
typedef struct rm_boot_rx {
    uint8_t *buf;
    size_t   len, cap;
    size_t   used; /* the frame last handed out, dropped at the next call */
    size_t   max;  /* the most it may hold (0: a frame of any legal length) */
} rm_boot_rx_t;

/* Embedded in a server connection or a client. */
struct rm_peer {
    remora_context_h     ctx;
    ucp_ep_h             ep;
    rm_watch_t           sock;   /* the bootstrap socket: handshake, then heartbeats */
    rm_boot_rx_t         rx;     /* what arrived on it */
    rm_list_t            live;   /* ctx->live while heartbeats run */
    uint64_t             last_rx_ns, last_tx_ns;
    const rm_peer_ops_t *ops;
    int                  failed; /* on_error was delivered; ep is closed */
    rm_list_t            sends;  /* sends UCX still holds (ep.c) */
    unsigned             nsends; /* ... how many */
    /* The most sends UCX may hold for this peer (0: no limit); past it the
     * peer is failed (rm_peer_fail_lost). A server's connection has one: a
     * client that never reads its replies queued them without bound (2 GB
     * in 12 s from one connection; review). */
    unsigned             sends_max;
    rm_seal_t           *seal;   /* encryption keys (seal.h); NULL: a plain connection */
    rm_gate_pass_t       gate;   /* hosts let through to UCX's ports for it (gate.h) */
    int                  seal_failed; /* a sealed message failed a check: fail at next tick */
    /* fail_later (a server's connections): an endpoint that fails inside
     * one of our sends gets on_error after the progress pass (ctx->failing),
     * not under the sender's feet. A client's own send learns of its
     * disconnect at once, as its reconnect logic expects. */
    int                  fail_later;
    rm_list_t            fail_link;
    remora_status_t      fail_status;
    rm_peer_t           *hash_next;
    /* A lingering close (ep.c): the endpoint being flushed (NULL once
     * closed, while the flush's callback is still due). */
    ucp_ep_h             linger_ep;
    rm_ticker_t          linger;
    uint64_t             linger_deadline;
    int                  linger_flushed;
};

/* Work another thread requests without the lock (a ring commit): fn runs on
 * the progress thread, lock held, soon after rm_engine_signal(). Signals
 * raised again before fn runs coalesce into one call. */
typedef struct rm_signal {
    rm_list_t  link;
    atomic_int pending;
    void (*fn)(struct rm_signal *sig);
} rm_signal_t;

typedef struct rm_deferred {
    rm_list_t link;
    void (*fn)(struct rm_deferred *d);
} rm_deferred_t;

struct remora_context {
    ucp_context_h   ucp;   /* a lane's is its parent's */
    remora_context_h parent; /* lanes only (rm_engine_lane_create) */
    ucp_worker_h    worker;
    int             efd;   /* worker event fd */
    int             epfd;  /* what the progress thread sleeps on: efd and watch_epfd */
    int             watch_epfd; /* sockets, see rm_engine_watch */
    rm_list_t       tickers;
    void           *worker_addr; /* this worker's UCX address, for the bootstrap */
    size_t          worker_addr_len;
    rm_ucx_addr_shape_t addr_shape; /* what peers' addresses are checked against */
    rm_gate_t      *gate;  /* who may reach UCX's listening ports (gate.h); lanes: the parent's */
    pthread_mutex_t lock;  /* see design notes */
    atomic_int      lock_waiters; /* threads blocked in rm_engine_lock: drivers yield to them */
    pthread_t       thread;
    atomic_int      stop;
    unsigned        spin_us;
    int             spin_load;    /* spin only while the cores are not oversubscribed */

    atomic_int      driver;       /* 1 while a caller thread drives progress */
    atomic_int      thread_asleep;/* progress thread is in epoll_wait */
    atomic_int      driver_asleep;/* the driver sleeps on efd (engine.c, driver_sleep) */
    atomic_int      bulk;         /* large transfers in flight (rm_engine_bulk_add) */
    _Atomic uint64_t driver_left_ns; /* when the last driver left, its operation done */
    _Atomic uint64_t away_avg_ns;    /* how long callers stay away between waits (engine.c) */
    atomic_int      gpu_ucx;      /* GPU memory UCX moves now (rm_engine_gpu_ucx_add) */
    _Atomic uint64_t gpu_ucx_ns;  /* ... and when the last such move started */
    pthread_mutex_t wait_mx;
    pthread_cond_t  wait_cv;      /* completions, for callers in rm_engine_wait */
    pthread_cond_t  prog_cv;      /* the progress thread standing aside */
    atomic_int      sleepers;

    /* Deferred work: any thread adds to it (another worker's handlers hold
     * their own lock, not this one), so it has a mutex of its own. */
    pthread_mutex_t defer_mx;
    rm_list_t       deferred;     /* guarded by defer_mx */
    atomic_uint     ndeferred;    /* entries in it: read without defer_mx */
    rm_list_t       failing;      /* peers whose endpoint failed inside a send (ep.c), lock held */
    int             in_send;      /* a send of ours is inside UCX (lock held) */
    rm_list_t       signals;      /* rm_signal_t, guarded by lock */
    atomic_int      signaled;     /* some signal is pending */
    rm_peer_t     **peers;        /* ep -> peer hash, guarded by lock */
    size_t          peers_cap, npeers;

    uint8_t         host_id[RM_HOST_ID_LEN];
    /* Instances of the servers created on this context (0: free), so that a
     * client of the same context refuses to connect to one of them whichever
     * of its workers it lands on. Guarded by lock. */
    uint64_t        serving[RM_SERVING_MAX];

    /* Liveness (boot.c): peers whose handshake is done, guarded by lock. */
    rm_list_t       live;
    rm_ticker_t     live_ticker;
    uint64_t        live_tick_ns;    /* when live_ticker last ran: our own stalls */
    uint64_t        hb_interval_ns;  /* 0: no heartbeats */
    uint64_t        peer_timeout_ns; /* silence after which a peer is dead */
    int             rma;             /* RMA enabled: 0 no, 1 verbs only, 2 any transport */
    int             shm_ok;          /* same-host mappings allowed (UCX may use shared memory) */
    int             ucx_cuda;        /* UCX handles CUDA memory (threads get a CUDA context) */
    int             connect_blocks;  /* UCX's TCP connect() blocks: peers are probed first */
    uint32_t        tcp_tx_seg;      /* UCX's TCP segment sizes in bytes (tcp_segs.c); */
    uint32_t        tcp_rx_seg;      /* 0: not known, or no TCP transport */
    uint32_t        rndv_min;        /* host bulk bodies this long go by rendezvous
                                      * (ep.c; 0: UCX's protocol choice) */

    /* Stream-ordered operations (src/gpu/stream.c), an upper layer: it sets
     * these on first use (under its own lock); the lower layers call them. */
    struct rm_stream_proxy *stream_proxy;
    /* remora_client_disconnect: phase 0 before the connection is failed,
     * phase 1 once its operations drained (before its regions are dropped);
     * phase 1 returns whether stream operations still hold the client. */
    int (*stream_client_hook)(struct remora_client *client, int phase);
    /* remora_context_destroy, first thing. */
    void (*stream_fini)(remora_context_h ctx);
    /* remora_context_params_t.log_cb on the logger's stack (util/log.h). */
    struct rm_log_sink *log_sink;
    /* GPU copies in flight (rm_engine_copy), made on the first; lock. */
    rm_copyq_t     *copyq;
};

/*
 * A lane: another worker with its own progress thread and lock, on the
 * parent's UCX context (so memory registered there is usable here). Servers
 * and clients run extra connections on lanes to move data on several cores
 * at once. Destroy it with remora_context_destroy() before the parent.
 */
remora_status_t rm_engine_lane_create(remora_context_h parent, remora_context_h *lane_p);

/* The gate of ctx's root context (gate.h); NULL when disabled. */
static inline rm_gate_t *rm_engine_gate(remora_context_h ctx)
{
    return ctx->parent ? ctx->parent->gate : ctx->gate;
}

/* Status mapping, once for the whole library. */
remora_status_t rm_status_from_ucs(ucs_status_t status);

void rm_engine_lock(remora_context_h ctx);
/* GPU memory (on device, -1: unknown) is about to go to UCX: from now on,
 * threads entering the engine get a CUDA context if they have none, this one
 * first (engine.c). Nothing when UCX does not handle CUDA memory. Lock held. */
void rm_engine_cuda_enter(remora_context_h ctx, int device);
void rm_engine_unlock(remora_context_h ctx);

/*
 * Wait until *done becomes non-zero or the deadline passes, driving progress
 * if no one else does. Call without the lock. Returns REMORA_OK or
 * REMORA_ERR_TIMED_OUT.
 */
remora_status_t rm_engine_wait(remora_context_h ctx, const atomic_int *done, uint64_t deadline_ns);
/* The same, driving for at most idle_ns without an event before sleeping
 * (rm_engine_wait: 2 ms). Waits that usually last longer than that should
 * not spin: on a machine with fewer cores than busy threads the spinning
 * takes the CPU from whoever must produce the answer. */
remora_status_t rm_engine_wait_spin(remora_context_h ctx, const atomic_int *done,
                                    uint64_t deadline_ns, uint64_t idle_ns);
/* Publish a completion: set *done and wake waiters. Any thread, lock or not. */
void rm_engine_complete(remora_context_h ctx, atomic_int *done);
/* Wake the progress thread so it notices newly posted work. */
void rm_engine_kick(remora_context_h ctx);
/* A caller leaves work in flight and goes off to do something else (not
 * waiting): have the progress thread carry it on now rather than when it
 * next looks (it stands aside while callers drive). */
void rm_engine_hand_off(remora_context_h ctx);
/* Large transfers (RM_ENGINE_BULK_MIN bytes or more) in flight: +1 when one
 * starts, -1 when it ends. A driver whose own operation completed while any
 * is in flight hands progress to the progress thread as it leaves, so that
 * they move while the caller works (rather than when the progress thread
 * next looks: up to 10 ms), unless callers come back to wait within
 * RM_HAND_OFF_AWAY_NS (a loop that posts the next request and waits again:
 * it drives them itself). Small ones do without: a wake-up per message
 * costs more than the wait it saves. Any thread, lock or not. */
#define RM_ENGINE_BULK_MIN (256u << 10)
void rm_engine_bulk_add(remora_context_h ctx, int n);
/* The hand-off rule (engine.c, driver_leaves), pure for its tests: the
 * moving average of how long callers stay away between waits after one more
 * return away_ns after the last (each return counts 1/8, at most
 * RM_HAND_OFF_AWAY_MAX_NS); a hand-off is due from RM_HAND_OFF_AWAY_NS on.
 * A new context starts at RM_HAND_OFF_AWAY_START_NS: hand-offs until its
 * callers have shown they come back quickly (about a dozen returns). */
#define RM_HAND_OFF_AWAY_NS       50000ull
#define RM_HAND_OFF_AWAY_START_NS (4 * RM_HAND_OFF_AWAY_NS)
#define RM_HAND_OFF_AWAY_MAX_NS   (100 * RM_HAND_OFF_AWAY_NS)
uint64_t rm_engine_away_avg(uint64_t avg_ns, uint64_t away_ns);
int rm_engine_hand_off_due(uint64_t avg_ns);
/* Sends and receives of GPU memory that UCX moves itself (CUDA-enabled UCX:
 * cuda_ipc, cuda_copy), +1 when one is pending in UCX, -1 when it ended.
 * While any is, the progress thread and a driving caller poll instead of
 * sleeping: UCX reports the end of its GPU copies through a host function
 * on the copy's stream, which woke a sleeping server about 100 µs after a
 * 256 MiB copy ended (a quarter of the read's time; docs/gpu-ucx.md).
 * Polling stops 1 s after the last start, should UCX never call back for
 * one (a receive from a peer that died may never end): a longer transfer
 * only loses the early wake-up at its end. Any thread, lock or not. */
void rm_engine_gpu_ucx_add(remora_context_h ctx, int n);
/* ucp_am_recv_data_nbx on ctx's worker, counted as above when p says the
 * buffer is CUDA memory: +1 before the call (its callback may run inside
 * it), taken back when no callback will come; the callback takes -1. */
ucs_status_ptr_t rm_engine_am_recv_data(remora_context_h ctx, void *data_desc, void *buf,
                                        size_t len, const ucp_request_param_t *p);

/* Servers on this context, by instance (lock held): add (0 when the table is
 * full: not remembered), remove, and whether one serves instance. */
void rm_engine_serving_add(remora_context_h ctx, uint64_t instance);
void rm_engine_serving_remove(remora_context_h ctx, uint64_t instance);
int rm_engine_serving(remora_context_h ctx, uint64_t instance);
/* Whether the UCX loaded at run time is major.minor or later. */
int rm_ucx_at_least(unsigned major, unsigned minor);
/* The UCX_TLS this context's UCX was given: the environment's, or "^tcp"
 * where REMORA_RMA=1 left tcp out itself; NULL: UCX's default, all. */
const char *rm_engine_ucx_tls(remora_context_h ctx);
/* Whether servers connect clients through UCX's connection manager
 * (REMORA_CM, else from UCX 1.16 on) rather than by worker addresses. */
int rm_ucx_cm_wanted(void);
/* UCX's TCP segment sizes (tcp_segs.c): chosen into the UCX config (the
 * environment's win) and recorded in the context; then, once the worker
 * exists, forgotten if it has no TCP interface. */
void rm_tcp_segs_config(remora_context_h ctx, ucp_config_t *config);
void rm_tcp_segs_known(remora_context_h ctx);
/* Whether a peer's TCP segments (from its hello; sent = 0: an older remora)
 * and ours fit each other: REMORA_OK, or REMORA_ERR_UNSUPPORTED with why
 * (n bytes) saying what does not fit and what to set. */
remora_status_t rm_tcp_segs_fit(remora_context_h ctx, int sent, uint32_t peer_tx,
                                uint32_t peer_rx, char *why, size_t n);
/*
 * A GPU copy that takes no thread while it runs (staged transfers): it goes
 * on the context's own CUDA stream, and done(copy, status) runs with the lock
 * held on whichever thread progresses the context after it ended (the
 * progress thread spins instead of sleeping while copies are in flight):
 * REMORA_INPROGRESS. On a device not prepared (rm_engine_copy_prepare) the
 * copy is made here, synchronously. Any other return is the finished copy's
 * status (or why it could not start), and done never runs. Lock held. The
 * caller keeps copy and both buffers until done; it drains
 * (rm_engine_copy_drain) before it frees what a callback would touch.
 */
remora_status_t rm_engine_copy(remora_context_h ctx, rm_copy_t *copy, void *dst,
                               const void *src, size_t length, rm_copy_cb_t done);
/* Make device ready for rm_engine_copy (a stream, a word; copyq.h): where
 * no stream may wait on this context, not on a transfer's path. Lock held.
 * Until then rm_engine_copy copies synchronously. */
remora_status_t rm_engine_copy_prepare(remora_context_h ctx, int device);
/* Wait for this context's copies in flight and run their callbacks. Lock held. */
void rm_engine_copy_drain(remora_context_h ctx);

/* Run d->fn on the progress thread without the lock. Any thread, with or
 * without any context's lock (a worker's handler defers to the first
 * worker's context). */
void rm_engine_defer(remora_context_h ctx, rm_deferred_t *d);

/* Register / unregister a signal (lock held); raise it from any thread. */
void rm_engine_add_signal(remora_context_h ctx, rm_signal_t *sig);
void rm_engine_remove_signal(remora_context_h ctx, rm_signal_t *sig);
void rm_engine_signal(remora_context_h ctx, rm_signal_t *sig);
/* Signal the progress thread now, or defer if busy: when the lock is free,
 * run sig->fn on this thread at once (then the progress thread carries on
 * what it started); otherwise raise sig as rm_engine_signal does. Never waits
 * for the lock. Call without the lock, from any thread. */
void rm_engine_signal_now(remora_context_h ctx, rm_signal_t *sig);
/* Progress the worker once if the lock is free (a thread that drives
 * progress itself, ctx->driver claimed); nothing otherwise. */
void rm_engine_try_progress(remora_context_h ctx);

/* Watch fd for events (EPOLLIN...) / stop watching. Lock held. */
remora_status_t rm_engine_watch(remora_context_h ctx, rm_watch_t *w, uint32_t events);
void rm_engine_unwatch(remora_context_h ctx, rm_watch_t *w);
void rm_engine_add_ticker(remora_context_h ctx, rm_ticker_t *t);
void rm_engine_remove_ticker(remora_context_h ctx, rm_ticker_t *t);

/* ------------------------------------------------------------ endpoints */

/* The ep -> peer table the AM handler dispatches through (lock held). */
int  rm_engine_peer_add(remora_context_h ctx, rm_peer_t *peer);
void rm_engine_peer_remove(remora_context_h ctx, rm_peer_t *peer);

/* Register a peer whose ep is set, so that its messages reach it. */
remora_status_t rm_peer_attach(rm_peer_t *peer);
/* Deliver on_error to the peers whose endpoint failed inside a send (a
 * send's caller may be walking lists that on_error frees: it learns of the
 * failure from the send's status, and the peer goes afterwards). Returns
 * how many. Lock held, outside any handler: the progress pass. */
unsigned rm_peer_failures_run(remora_context_h ctx);
/* A message of `type` that had to go could not (status): the peer waits for
 * it (a reply, a socket's credit), so the peer is failed, with a warning. No
 * send goes out from now on, and on_error(status) comes after the progress
 * pass, as above. Lock held; a peer failing already is left as it is. */
void rm_peer_fail_lost(rm_peer_t *peer, unsigned type, remora_status_t status);
/* Whether the peer failed or is about to (sends fail at once). Lock held. */
int  rm_peer_failing(const rm_peer_t *peer);
/* Unregister and close the ep (forcefully: pending operations are canceled). */
void rm_peer_close(rm_peer_t *peer);
/*
 * The same, except that an endpoint with sends in flight and no error is
 * flushed first, for at most linger_ms, and force-closed after that (UCX
 * 1.13's TCP transport can crash when it force-closes an endpoint in the
 * middle of rendezvous sends: docs/security.md section 4). Only for peers
 * whose sends hold their own memory and whose receives land in memory that
 * outlives the close (a server's). Returns 1 when the close lingers: the
 * peer must stay allocated until ops->on_closed is called. Lock held.
 */
int rm_peer_close_linger(rm_peer_t *peer, unsigned linger_ms);

/* Which kinds of transport carry the endpoint's RMA lanes: UCX emulates RMA
 * over TCP (no address checks), verbs NICs enforce keys, the rest (shared
 * memory, CMA) are same-host and same-user. */
enum { RM_RMA_LANE_TCP = 1u << 0, RM_RMA_LANE_VERBS = 1u << 1, RM_RMA_LANE_OTHER = 1u << 2 };
unsigned rm_peer_rma_lanes(rm_peer_t *peer);

/* Wait (without the lock) until UCX finished wiring the endpoint up: a
 * flush completes once every lane is connected. UCX 1.13 aborts when it
 * must discard an endpoint whose wire-up reply is still queued (a peer that
 * stops right after connecting), so the handshake ends only after this. */
remora_status_t rm_peer_wireup_wait(rm_peer_t *peer, uint64_t deadline);

/* Let the peer's host (its bootstrap socket's address) and the TCP
 * interfaces of its UCX worker address (ucx_addr, may be NULL) through to
 * this context's UCX ports, until the peer is closed (gate.h); on one host
 * also the interfaces of our own address. Call before UCX may connect: a
 * server at CONNECT, a client before
 * sending CONNECT and again with the server's address. REMORA_ERR_BUSY when
 * the gate is full. */
remora_status_t rm_peer_gate_open(rm_peer_t *peer, const void *ucx_addr, size_t len);

/* Start probing the TCP interfaces of the peer's UCX worker address before
 * UCX connects to them (reach.h: UCX's blocking connect to a silent one holds
 * the thread for minutes); loopback ones only when the bootstrap socket joins
 * two processes of this host. As rm_reach_start; nothing to probe (*out
 * NULL) where UCX's connects do not block (ctx->connect_blocks). */
struct rm_reach;
remora_status_t rm_peer_reach_start(rm_peer_t *peer, const void *ucx_addr, size_t len,
                                    struct rm_reach **out);

/* Create the peer's endpoint to a UCX worker address (from the bootstrap)
 * and attach it. UCX pairs it with the endpoint the other side creates. */
remora_status_t rm_peer_create_ep(rm_peer_t *peer, const void *worker_addr);

/* The same through UCX's connection manager: connect to a listener the
 * server opened for this one client, or accept that client's request. */
remora_status_t rm_peer_connect_cm(rm_peer_t *peer, const struct sockaddr *sa, socklen_t len);
remora_status_t rm_peer_accept_cm(rm_peer_t *peer, ucp_conn_request_h conn_request);

/* Bootstrap (boot.c): a TCP connection over which the handshake runs and the
 * two sides then learn how to reach each other's worker; it stays open and
 * carries heartbeats, so a peer's death or silence is seen promptly. */
remora_status_t rm_boot_listen(const char *addr, int *fd_p);
/* A plain TCP connection (a GPU socket's) whose peer must not vanish
 * unnoticed: keepalive probes after a second idle and TCP_USER_TIMEOUT of
 * timeout_ms, so a peer gone silent (powered off, link lost) fails the
 * socket within about timeout_ms + 1 s, idle or not. 0 (nothing set with a
 * timeout of 0) or -1. */
int rm_tcp_keepalive(int fd, unsigned timeout_ms);
/* Connect a non-blocking TCP socket, bounded by the deadline. */
remora_status_t rm_boot_dial(const char *addr, uint64_t deadline, int *fd_p);
/* 1 if a peer's worker address may be handed to UCX (ucx_addr.h); otherwise
 * 0 and *why says what is wrong with it. */
int rm_boot_addr_plausible(remora_context_h ctx, const uint8_t *addr, size_t len, const char **why);
/* Write all of buf on a non-blocking socket; -1 if it would block or fails. */
int rm_boot_send(int fd, const void *buf, size_t len);
/* Encode and send one frame (rm_boot_send_reply: with a leading status). */
int rm_boot_send_frame(int fd, unsigned type, unsigned flags, const void *payload, size_t len);
int rm_boot_send_reply(int fd, unsigned type, unsigned flags, remora_status_t status,
                       const void *payload, size_t len);
/* One recv() into rx: -1 when the peer closed or failed (EAGAIN is 0). */
int  rm_boot_rx_fill(rm_boot_rx_t *rx, int fd);
/* The next whole frame, valid until the next call: 0, 1 (need more bytes)
 * or -1 (garbage). */
int  rm_boot_rx_next(rm_boot_rx_t *rx, rm_boot_frame_t *f);
void rm_boot_rx_free(rm_boot_rx_t *rx);
/* Blocking: the next frame, bounded by the deadline. */
remora_status_t rm_boot_recv_frame(int fd, rm_boot_rx_t *rx, uint64_t deadline,
                                   rm_boot_frame_t *f);

/* Heartbeats (lock held). start: the handshake is done, send and expect them;
 * a peer silent for peer_timeout gets on_error(REMORA_ERR_DISCONNECTED).
 * sock_read: the socket is readable; -1 means the peer is gone or sent
 * something other than heartbeats. */
void rm_peer_live_start(rm_peer_t *peer);
void rm_peer_live_stop(rm_peer_t *peer);
int  rm_peer_sock_read(rm_peer_t *peer);
void rm_engine_live_init(remora_context_h ctx);

/*
 * Send a message. hdr is encoded into storage that lives with the send. When
 * the send completes (or fails), done(arg, status) runs, if given, with the
 * lock held; body_free, if set, is free()d then. Returns an error only when
 * the send could not start; in that case done does not run and body_free is
 * freed here.
 */
typedef void (*rm_send_done_t)(void *arg, ucs_status_t status);
typedef struct rm_send_params {
    const void    *body;
    size_t         body_len;
    void          *body_free;  /* free() this when done */
    int            bulk;       /* payload may go by rendezvous; else forced eager */
    ucp_mem_h      memh;       /* registration of body, if known */
    int            cuda;       /* body is CUDA device memory (told to UCX, not detected) */
    int            to_gpu;     /* with cuda: it lands in GPU memory UCX moves (see ep.c) */
    rm_send_done_t done;
    void          *arg;
} rm_send_params_t;

remora_status_t rm_peer_send(rm_peer_t *peer, unsigned am_id, const rm_hdr_t *hdr,
                             const rm_send_params_t *params);

/* Parse "HOST:PORT" into a sockaddr (getaddrinfo); REMORA_ERR_ADDRESS if bad. */
remora_status_t rm_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len);
/* Format a sockaddr as "HOST:PORT" ("[v6]:PORT" for IPv6). */
void rm_format_addr(const struct sockaddr *sa, char *buf, size_t len);

#endif
