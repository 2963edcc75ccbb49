/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server internals shared by server.c (listener, connections, regions) and
 * server_ring.c (rings: subscribers' waits and notifications). Everything
 * here is guarded by the context lock of the server's worker, except the
 * region table (registry.h), which all of a server's workers share.
 *
 * Workers: a server serves on 1..RM_LANES_MAX workers. The first is the
 * context it was created on and runs the public listener, rings, signals
 * and sockets. Each other worker is a context of its own (a UCX worker with
 * its own progress thread and lock, rm_engine_lane_create) with a worker
 * server on it: a listener on our host (its port goes to clients in the
 * LANES reply, after their handshake on the first worker), connections and
 * their retired memory, and nothing else. Every worker server points to the
 * one registry. Lock order: the first worker's lock, then another's, then
 * the registry's.
 */
#ifndef RM_REMOTE_SERVER_H
#define RM_REMOTE_SERVER_H

#include "engine/engine.h"
#include "ring/ring.h"
#include "remote/conn_caps.h"
#include "remote/registry.h"

/* Counters: indices are the bit numbers of remora_server_stats_field and
 * remora_conn_stats_field (server_stats.c maps them to the public structs). */
enum {
    RM_SS_CONNS, RM_SS_CONNS_ACCEPTED, RM_SS_CONNS_REFUSED, RM_SS_AUTH_FAILURES,
    RM_SS_AM_READ_OPS, RM_SS_AM_READ_BYTES, RM_SS_AM_WRITE_OPS, RM_SS_AM_WRITE_BYTES,
    RM_SS_STAGING_READ_OPS, RM_SS_STAGING_READ_BYTES, RM_SS_STAGING_WRITE_OPS,
    RM_SS_STAGING_WRITE_BYTES, RM_SS_LOOKUPS, RM_SS_MAP_GRANTS, RM_SS_RMA_GRANTS,
    RM_SS_IPC_GRANTS, RM_SS_SIGNALS, RM_SS_ERRORS, RM_SS_RING_WAITS, RM_SS_RING_SUBSCRIBERS,
    RM_SS_RING_DROPS, RM_SS_UPTIME_MS, RM_SS_COUNT
};
enum {
    RM_CS_ID, RM_CS_PEER, RM_CS_LANE, RM_CS_AGE_MS, RM_CS_READ_OPS, RM_CS_READ_BYTES,
    RM_CS_WRITE_OPS, RM_CS_WRITE_BYTES, RM_CS_ERRORS, RM_CS_RING_WAITS, RM_CS_COUNT
};

/* Bump a server counter: relaxed, no lock (any thread may read them). */
#define RM_SS_ADD(s, i, n) atomic_fetch_add_explicit(&(s)->stat[i], (uint64_t)(n), memory_order_relaxed)


typedef struct rm_retired {
    rm_list_t    link;
    remora_mem_h mem;
    uint64_t     epoch;
    uint64_t     expire_ns;
} rm_retired_t;

/* The handshake runs on the bootstrap socket (server.c); only CONN_READY
 * connections have a UCX endpoint. */
typedef enum {
    CONN_HELLO,
    CONN_MISFIT,   /* its UCX's TCP segments do not fit ours: its next frame is refused */
    CONN_AUTH,
    CONN_CONNECT,
    CONN_REACH,    /* its worker address's interfaces are probed (engine/reach.h) */
    CONN_CM_WAIT,  /* a listener waits for this client's UCX connection */
    CONN_CM_PROVE, /* connected through it: the first message must be the ticket */
    CONN_READY
} rm_conn_state_t;

typedef struct rm_conn {
    rm_peer_t       peer; /* first: the engine hands us the peer */
    rm_list_t       link;
    remora_server_h server;
    rm_conn_state_t state;
    uint8_t         server_nonce[RM_NONCE_LEN];
    uint8_t         client_nonce[RM_NONCE_LEN];
    uint64_t        acked_epoch;
    unsigned        inflight;   /* holds: writes landing in region memory, rm_conn_hold */
    int             dead;       /* failed or closed; freed when inflight == 0 */
    uint64_t        born_ns;
    char            peer_host[64]; /* the client's address, for logs and caps */
    int             rma_ok;     /* may be given remote keys (server.c: conn_ready) */
    struct rm_reach *reach;     /* CONN_REACH: the probes, watched by reach_watch, */
    rm_watch_t      reach_watch;
    uint8_t        *reach_addr; /* ... of this worker address (malloc'd), */
    uint64_t        reach_deadline; /* ... silent past this: refused */
    struct rm_cm_slot *cm;      /* CONN_CM_WAIT: a listener for this client alone */
    uint8_t         cm_ticket[RM_CM_TICKET_LEN]; /* ... and what proves it is that client */
    unsigned        nwaits;     /* ring waits armed (server_ring.c) */
    uint64_t        id;         /* from 1, per server */
    char            peer_addr[64]; /* HOST:PORT */
    uint64_t        cs[RM_CS_COUNT]; /* counters, by remora_conn_stats_field bit */
} rm_conn_t;

/*
 * A UCX listener opened for one client. UCX 1.13 may still deliver (or
 * reject) a connection request queued for a listener after it was destroyed,
 * and crash doing so; so a listener outlives its connection: the slot is
 * detached (conn = NULL) and destroyed RM_CM_LINGER_NS later by the ticker.
 */
typedef struct rm_cm_slot {
    rm_list_t       link;     /* server->cm_slots */
    ucp_listener_h  listener;
    struct rm_conn *conn;     /* NULL once detached */
    uint64_t        detached_ns;
} rm_cm_slot_t;

struct remora_server {
    remora_context_h ctx;
    rm_watch_t       listener; /* spreads connections over the workers */
    rm_watch_t       direct;   /* with workers: keeps them on this one (lanes) */
    uint16_t         direct_port;
    rm_ticker_t      ticker;
    char             addr[80];
    uint8_t         *token;
    size_t           token_len;
    int              encrypt;  /* every connection sealed (engine/seal.h) */
    int              cm;       /* clients connect through UCX's connection manager */
    rm_registry_t   *reg;    /* the region table, shared by every worker */
    remora_server_h  main;   /* a worker server: the server on the first worker; else NULL */
    rm_list_t        conns, retired, cm_slots;
    rm_list_t        waits;  /* rm_ring_wait_t armed for a commit, server_ring.c */
    /* Ring pushes (server_ring.c): answers with whole slots, sent one or two
     * at a time in arrival order, each element chosen when its send starts. */
    rm_list_t        pushq;  /* rm_ring_wait_t whose element is there, in order */
    rm_list_t        pushes; /* rm_ring_push_t in flight */
    unsigned         push_active; /* pushes in flight and not stalled */
    int              push_pumping; /* push_pump runs: a push ending inside it needs no call */
    /* A worker server: its waits are answered on its own thread when the
     * first worker's ring_signaled raises this (armed_waits > 0). */
    rm_signal_t      rings_sig;
    atomic_uint      armed_waits; /* entries of waits */
    /* How long a push of x bytes takes, y = a + b x: decayed least-squares
     * sums over recent pushes (server_ring.c, push_time_ns). */
    struct rm_push_fit { double n, x, y, xx, xy; } push_fit;
    struct rm_stage_pool *stage; /* pinned buffers for GPU regions UCX cannot reach */
    int              destroying; /* remora_server_destroy runs: regions go all at once */
    uint64_t         instance; /* random: tells clients this server from a restarted one */
    unsigned         max_conns, max_conns_per_host;
    rm_conn_caps_t  *caps;   /* ... counted over every worker (shared, like reg) */
    int              accept_paused; /* out of fds: the listener is unwatched until a tick */
    uint64_t         pause_logged_ns;
    unsigned         nconns; /* allocated, dead or alive */
    atomic_int       drained;
    atomic_int       acked;  /* an EVENT_ACK arrived (remora_server_sync_clients) */
    /* Other workers: a worker server each, on a lane context of ctx
     * (rm_engine_lane_create), sharing reg. Empty on a worker server. */
    remora_server_h  lane[RM_LANES_MAX - 1];
    remora_context_h lane_ctx[RM_LANES_MAX - 1];
    uint16_t         lane_port[RM_LANES_MAX - 1];
    unsigned         nlanes;
    unsigned         lane_no;  /* a worker server: its worker's number (1..); else 0 */
    /* Counters (server_stats.c): relaxed atomics, by RM_SS_*. */
    _Atomic uint64_t stat[RM_SS_COUNT];
    uint64_t         born_ns;
    _Atomic uint64_t next_conn_id; /* the first worker's numbers every connection */
    unsigned         next_worker; /* the first worker: where the next accepted connection goes */
    remora_conn_cb_t conn_cb;
    void            *conn_arg;
    atomic_int       events_pending; /* conn_cb calls queued, not yet run */
};

/* server.c */
remora_status_t rm_conn_send(rm_conn_t *c, const rm_hdr_t *hdr, rm_send_params_t *sp);
/* Keep c's memory across a call that may close the connection at once (a
 * send to a peer that went away can fail its endpoint inside the send, and
 * the close frees the connection's ring waits). rm_conn_release says
 * whether it died meanwhile, and frees it if this was the last hold. */
void            rm_conn_hold(rm_conn_t *c);
int             rm_conn_release(rm_conn_t *c);
/* A reply of type with a status and an optional body (freed here). */
void            rm_conn_reply(rm_conn_t *c, unsigned type, uint64_t req_id,
                              remora_status_t status, rm_wbuf_t *body);
/* A region by id, for code on any worker (its context lock held). r stays
 * valid while that lock is held: a region leaves the table first, and is
 * freed only after every worker heard of it under its own lock
 * (rm_server_region_drop). Its signal array goes without that lock: signal
 * code looks up and applies under the table's lock (server_signals.c). */
rm_region_t    *rm_server_region_by_id(remora_server_h s, uint32_t id);
/* What a region serves besides its bytes; set before any worker can see it. */
typedef struct rm_region_role {
    remora_ring_h          ring;      /* a ring's memory */
    int                    ring_data; /* a GPU ring's elements: they go with their ring */
    struct remora_signals *signals;   /* a signal array */
} rm_region_role_t;

/* Add a region over [offset, offset+length) of mem (lock not held); role
 * NULL for plain bytes. */
remora_status_t rm_server_region_add(remora_server_h s, const char *name, remora_mem_h mem,
                                     size_t offset, size_t length, unsigned flags,
                                     const rm_region_role_t *role);

/* Remove a region by name (lock held). */
remora_status_t rm_server_region_drop(remora_server_h s, const char *name);

/* server_stats.c */
/* Fill v[] (by RM_SS_*) for mask, lanes included; *mask_p: what was filled.
 * lock_held: the caller holds s's context lock. */
void rm_server_stats_collect(remora_server_h s, uint64_t mask, uint64_t v[64], int lock_held);
/* A connection's counters as the public struct. Lock held. */
void rm_conn_stats_fill(const rm_conn_t *c, remora_conn_stats_t *out);
/* Connections of s and its lanes (READY only); lock on s held when lock_held. */
size_t rm_server_conn_stats_collect(remora_server_h s, remora_conn_stats_t *out, size_t max,
                                    int lock_held);
/* Answer a STATS request. */
void rm_server_handle_stats(rm_conn_t *c, const rm_hdr_t *hdr);
/* Tell the server's conn_cb (deferred to the progress thread). Lock held. */
void rm_server_conn_event(rm_conn_t *c, int connected);

/* server_ring.c */
void rm_server_ring_wait(rm_conn_t *c, const rm_hdr_t *hdr);
/* A connection died: forget its waits. */
void rm_server_ring_conn_gone(rm_conn_t *c);
/* A ring region goes away: its waiters get REMORA_ERR_NOT_FOUND, the ring is detached. */
void rm_server_ring_region_gone(remora_server_h s, rm_region_t *r);
/* A worker server's ring signal (lock held): its waits are its own to answer. */
void rm_server_ring_worker_start(remora_server_h s);
void rm_server_ring_worker_stop(remora_server_h s);
/* Every tick (lock held): pushes that stalled while nothing else happened
 * on this worker stop holding up the queue. */
void rm_server_ring_tick(remora_server_h s);

#endif
