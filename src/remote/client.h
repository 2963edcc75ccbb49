/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Client internals shared by client.c (connection, control calls, regions,
 * events), transfer.c (reads and writes on every data path; above client.c:
 * it makes data ops that carry their own reply and completion callbacks)
 * and client_map.c (mappings handed out by remora_client_map).
 *
 * Design notes
 * - All of it is guarded by the context lock.
 * - An op is one message exchange or one UCX data operation. It is finished
 *   when its reply is in (or it failed) AND every UCX callback it started has
 *   run (ucx_busy == 0): only then is the caller's buffer provably untouched.
 * - A request is what the user holds: one or more chunk ops over a byte range,
 *   at most `window` in flight at once.
 * - Reconnecting (opt-in, client.c): a failed connection leaves the client
 *   `disconnected` and, with reconnecting on, `reconnecting`; the client's
 *   reconnect thread closes nothing itself (client_fail did, under the lock),
 *   waits for the old ops' UCX callbacks, then dials again. Each connection
 *   made bumps conn_gen; subscriptions compare it with theirs to re-attach.
 * - Regions are cached by name with their remote key. A change event marks
 *   an entry stale; the next use looks it up again. An entry still used by
 *   ops when it goes stale is detached and freed by its last user, which then
 *   acknowledges the change so the server may free the old memory.
 */
#ifndef RM_REMOTE_CLIENT_H
#define RM_REMOTE_CLIENT_H

#include "engine/engine.h"
#include "mem/shm.h"

/* Largest chunk of a staged transfer (GPU memory through pinned buffers). */
#define RM_STAGE_CHUNK (4u << 20)
/* GPU to GPU through UCX's cuda_ipc on one host (transfer.c: ucx_ipc_shape) */
#define RM_UCX_IPC_CHUNK  (64u << 20)
#define RM_UCX_IPC_WINDOW 16u

typedef struct rm_rregion {
    rm_list_t     link;
    uint32_t      id;
    char          name[REMORA_NAME_MAX + 1];
    uint64_t      size;
    uint64_t      generation;
    unsigned      access;
    uint8_t       mem_type;
    uint16_t      flags;
    uint64_t      remote_addr;
    ucp_rkey_h    rkey;      /* only where the server allows RMA (docs/security.md) */
    void         *mapped;    /* same-host mapping of the region's first byte, or NULL */
    rm_shm_view_t map;       /* ... and the mapping itself */
    int           map_writable; /* read-only mappings send writes as active messages */
    uint32_t      map_pid, map_fd; /* the server's memory file, for remora_client_map */
    uint64_t      map_offset;
    remora_path_t path;
    int           device;    /* GPU regions: the server's device ordinal */
    int           has_ipc;
    uint8_t       ipc[RM_IPC_HANDLE_LEN];
    uint64_t      ipc_offset;
    void         *ipc_base;  /* the handle opened here (first IPC use), closed with the entry */
    int           ipc_dev;   /* the device it was opened on */
    unsigned      users;     /* requests in flight on it */
    int           detached;  /* no longer in client->regions */
    uint64_t      ack_epoch; /* oldest change that detached it (0: none) */
} rm_rregion_t;

typedef struct rm_event_item {
    rm_list_t         link;
    remora_event_t    ev;
    remora_event_cb_t cb;
    void             *arg;
    char              name[REMORA_NAME_MAX + 1];
} rm_event_item_t;

/* A GPU allocation of the caller's registered with UCX (client_reg.c). */
#define RM_CLIENT_REGS 8
#define RM_CLIENT_REG_REFUSED 4
typedef struct rm_gpu_reg {
    uint64_t  id;    /* the driver's buffer ID of the allocation */
    void     *base;
    size_t    size;
    ucp_mem_h memh;  /* NULL: a free entry */
    unsigned  users; /* requests holding it */
    uint64_t  used;  /* last taken, for eviction */
} rm_gpu_reg_t;

struct remora_client {
    rm_peer_t         peer; /* first: the engine hands us the peer */
    remora_context_h  ctx;
    int               timeout_ms;
    uint8_t          *token;
    size_t            token_len;
    int               encrypt;     /* seal the connection (client_seal.c) */
    remora_event_cb_t event_cb;
    void             *event_arg;
    remora_path_t     forced_path;
    size_t            chunk_size;
    unsigned          window;
    int               ucx_cuda;    /* the loaded UCX handles CUDA memory itself */
    struct rm_stage_pool *stage;   /* pinned buffers for GPU buffers UCX cannot reach */

    int               ready;       /* handshake finished */
    int               same_host;
    uint64_t          server_instance; /* from HELLO_REPLY: changes when the server restarts */
    int               native_rma;
    uint64_t          next_req_id;
    rm_list_t         pending;     /* rm_op_t */
    unsigned          nops;        /* ops allocated, pending or not */
    rm_list_t         regions;     /* rm_rregion_t */
    rm_list_t         zombies;     /* detached regions still in use */
    uint64_t          event_seq;   /* change events received */
    uint64_t          epoch_seen;  /* newest change epoch received */
    uint64_t          epoch_acked; /* newest epoch acknowledged */
    rm_list_t         maps;        /* rm_map_t */
    rm_gpu_reg_t      gpu_regs[RM_CLIENT_REGS];
    uint64_t          gpu_reg_clock;
    uint64_t          gpu_reg_refused[RM_CLIENT_REG_REFUSED]; /* buffer IDs UCX refused */
    unsigned          gpu_reg_nrefused;
    int               disconnected;
    remora_status_t   disc_status;
    unsigned          nsubs;       /* subscriptions (sub.c) still alive */
    unsigned          nsubops;     /* of nops: RING_WAITs subscriptions own and free */
    unsigned          nabandoned;  /* of nops: control calls that timed out, answer due */
    int               closed;      /* disconnected by the user; freed with the last sub */

    rm_list_t         events;      /* rm_event_item_t waiting for the progress thread */
    rm_deferred_t     event_task;
    int               event_task_queued;
    atomic_int        events_idle;
    atomic_int        drained;     /* nops == 0 after disconnect */

    /* Lanes: endpoints to the server's other workers, each a connection
     * (with its own handshake and token check) on a lane context of ctx;
     * large AM-path requests are split across them and this connection.
     * They carry data only: regions are looked up and cached here, once. */
    unsigned          want_lanes;
    remora_client_h   lane[RM_LANES_MAX - 1];
    remora_context_h  lane_ctx[RM_LANES_MAX - 1];
    unsigned          nlanes;
    atomic_uint       lane_next;   /* the lane the next split request starts on */
    unsigned          lanes_made;  /* lane clients to close (nlanes drops to 0 on reconnect) */

    /* Reconnecting (client.c). */
    char             *addr;        /* "HOST:PORT" as given, dialed again */
    int               rc_enable;
    unsigned          rc_min_ms, rc_max_ms;
    int               rc_give_up_ms;
    pthread_t         rc_thread;
    int               rc_has_thread;
    pthread_mutex_t   rc_mx;       /* guards rc_wanted, rc_stop; rc_cv waits on it */
    pthread_cond_t    rc_cv;
    int               rc_wanted;   /* a reconnect is asked for */
    int               rc_stop;     /* the user disconnects: the thread ends */
    int               reconnecting;/* lock: disconnected, and a reconnect will follow */
    atomic_int        link_settled;/* 0 while reconnecting; 1 connected or gone for good */
    uint64_t          conn_gen;    /* lock: connections made so far (1 after connect) */
    uint64_t          reconnects;  /* lock: of them, reconnects */
    uint64_t          hs_instance; /* the handshaking thread's: HELLO_REPLY's instance */
    int               hs_same_host;
    _Atomic int       server_stats;  /* the server answers STATS (its hello said so) */
};

/*
 * An op: a message that waits for its reply, or a UCX operation that waits
 * for its callback, on the client's pending list until both are in. Control
 * ops (client.c, sub.c, signals, sockets) are this struct: their waiter
 * takes the reply and frees the op. Data transfers embed it (rm_chunk_t in
 * transfer.c, sized through rm_client_op_new) and set on_reply and on_done:
 * client.c dispatches replies through them and never calls into transfer.c.
 */
typedef struct rm_op rm_op_t;
struct rm_op {
    rm_list_t        link;
    uint64_t         req_id;
    remora_client_h  client;
    uint8_t          reply_type; /* expected reply; 0 for pure UCX ops */
    int              replied;
    unsigned         ucx_busy;
    remora_status_t  status;
    rm_hdr_t         reply_hdr;  /* the reply's header */
    /* Data ops: their reply and their end go to these. */
    ucs_status_t   (*on_reply)(rm_op_t *op, const rm_hdr_t *hdr, void *body, size_t len,
                               const ucp_am_recv_param_t *param);
    void           (*on_done)(rm_op_t *op); /* finished: reply in, UCX done (then freed) */

    /* Control ops only. */
    atomic_int       done;       /* set when finished */
    void            *reply;      /* reply body copy */
    size_t           reply_len;
    size_t           reply_cap;  /* a buffer lent for a ring push: what it holds */
    int              sub_owned;  /* a subscription's RING_WAIT: its owner frees it */
    int              abandoned;  /* its caller timed out: counted in nabandoned */
    int              push_req;     /* a subscription's RING_WAIT asking for a push */
    size_t           push_cap;     /* ... its credit: the most bytes a push may bring */
    int              push_verdict; /* a ring push landed; its verdict is due (sub.c) */
    uint64_t         push_claimed; /* the verdict: the ring's `claimed` once it was sent */
    /* A push wait may send the next wait the moment its push starts to
     * arrive (sub.c): on_push (lock held; never for an abandoned op) sends
     * it as `follow`, lent follow_buf for its push. The owner takes follow
     * with the answer; abandoning the op abandons follow too. */
    void           (*on_push)(rm_op_t *op, const rm_hdr_t *hdr);
    void            *push_arg;
    uint8_t         *follow_buf;   /* owned by the op until on_push lends it */
    rm_op_t         *follow;
};

struct remora_request {
    remora_client_h  client;
    remora_context_h ctx;
    int              timeout_ms;
    atomic_int       done;
    remora_status_t  status;
    int              write;
    char            *buf;
    uint64_t         offset;
    size_t           length;
    rm_rregion_t    *region;     /* held until the request completes, then NULL */
    uint32_t         region_id;  /* region->id, kept past completion */
    remora_path_t    path;
    int              dev_buf;    /* buf is GPU memory UCX cannot reach: stage every chunk */
    int              gpu_buf;    /* buf is GPU memory (UCX is told so when it moves it) */
    size_t           chunk;      /* bytes per chunk op */
    unsigned         window;     /* chunk ops in flight at most */
    size_t           issued;
    unsigned         inflight;
    int              issuing;    /* in issue_more's loop: chunk_end only counts */
    int              flushed;
    uint64_t         conn_gen;   /* the connection it runs on (client's conn_gen) */
    int              bulk;       /* counted in rm_engine_bulk_add until complete */
    rm_gpu_reg_t    *reg;        /* the GPU buffer's registration (am path), held */

    /* A request split across lanes has parts (requests of their own, on
     * the lanes' clients) and no chunks; each part points to it and uses a
     * copy of view, the region as this client's one cache had it. */
    remora_request_h whole;
    uint64_t         generation;   /* the whole's view of the region */
    rm_rregion_t     view;
    remora_request_h part[RM_LANES_MAX];
    unsigned         nparts;
    atomic_int       parts_left;
    atomic_int       parts_status; /* the first part's error */
};

/* client.c */
/* A new op of size bytes (sizeof(rm_op_t), or a type that starts with one),
 * zeroed and on the pending list (lock held). */
rm_op_t *rm_client_op_new(remora_client_h c, uint8_t reply_type, size_t size);
void     rm_client_op_finish(rm_op_t *op);
/* Create a control op and send hdr (its req_id set here) with sp's body
 * (lock held). A failed send finishes the op with the error; NULL (body
 * freed) when no op could be made. */
rm_op_t *rm_client_op_send(remora_client_h c, rm_hdr_t *hdr, uint8_t reply_type,
                           rm_send_params_t *sp);
/* Free a control op its waiter saw finish (lock held). */
void     rm_client_op_free(rm_op_t *op);
/* The waiter gives up on a control op: free it now if finished, else when it finishes. */
void     rm_client_op_abandon(rm_op_t *op);
/* Wait for a control op just sent until the deadline, with the lock dropped
 * (held on entry and again on return). REMORA_ERR_TIMED_OUT: the op is marked
 * done, for its late reply (or the close) to free; else op->status says. */
remora_status_t rm_client_op_wait(remora_client_h c, rm_op_t *op, uint64_t deadline);
/* Send a control message and wait for its reply until the deadline (lock
 * not held). On REMORA_OK the reply body, if any, is handed over in *body_p
 * (free()); returns the reply's status. rm_client_call: until the client's
 * timeout. */
remora_status_t rm_client_call_until(remora_client_h c, uint64_t deadline, uint8_t type,
                                     uint8_t reply_type, rm_wbuf_t *body, void **body_p,
                                     size_t *len_p);
remora_status_t rm_client_call(remora_client_h c, uint8_t type, uint8_t reply_type,
                               rm_wbuf_t *body, void **body_p, size_t *len_p);

/* Staged GPU buffers of device: the copy stream and small staging buffers
 * made now, where no stream can be waiting on a transfer (mem/copyq.h);
 * until then staged copies are synchronous. Idempotent. Lock held. */
void rm_client_staging_prepare(remora_client_h c, int device);

/* client_regions.c (lock held unless said) */
/* Look the region up (cached unless stale; lock not held); returns with the
 * lock held on success. */
remora_status_t rm_client_region_get(remora_client_h c, const char *name, uint64_t deadline,
                                     rm_rregion_t **r_p);
/* A request lets go of an entry: freed if it was retired meanwhile. */
void          rm_client_region_put(remora_client_h c, rm_rregion_t *r);
/* Drop a cached entry so that the next use looks the region up. */
void          rm_client_region_forget(remora_client_h c, rm_rregion_t *r);
/* Retire an entry (freed now, or by its last user); ack_epoch: the change
 * event that retired it, acknowledged once it is unused (0: none). */
void          rm_client_region_detach(remora_client_h c, rm_rregion_t *r, uint64_t ack_epoch);
rm_rregion_t *rm_client_region_by_id(remora_client_h c, uint32_t id);
/* A GPU region's memory through its CUDA IPC handle (*p: the region's first
 * byte), opened on first use in the context of near_dev, the device whose
 * copies will use it (-1: the region's own device). */
remora_status_t rm_client_region_ipc(rm_rregion_t *r, int near_dev, char **p);
/* Acknowledge every change epoch that no request still depends on. */
void          rm_client_send_acks(remora_client_h c);
/* Empty the cache (regions are looked up again on next use); reconnected:
 * also forget the old connection's change epochs. */
void          rm_client_regions_drop(remora_client_h c, int reconnected);
/* Subscriptions hold the client: the user's disconnect frees it only once the
 * last of them is destroyed (lock not held). */
void rm_client_sub_attach(remora_client_h c);
void rm_client_sub_detach(remora_client_h c);
/* Give up on the connection (without the lock): pending ops fail with op_status,
 * later calls with REMORA_ERR_DISCONNECTED. */
void rm_client_abort(remora_client_h c, remora_status_t op_status);
/* remora_request_release, and whether the request ended: 0 when it was
 * still in flight after its connection was closed, and was leaked rather
 * than freed under UCX's feet; then so must be the memory it reads or
 * writes. */
int rm_request_release_ended(remora_request_h req);
/* The id of the region a started request reads or writes (the one its name
 * resolved to when it started). */
uint32_t rm_request_region_id(remora_request_h req);
/* For subscriptions riding through a reconnect (lock not held): wait until
 * the client is connected again or gone for good; REMORA_OK when connected
 * (then *gen_p and *instance_p say which connection), REMORA_ERR_TIMED_OUT,
 * or the status later calls fail with. */
remora_status_t rm_client_await_link(remora_client_h c, uint64_t deadline, uint64_t *gen_p,
                                     uint64_t *instance_p);

/* client_map.c: drop the mappings handed out by remora_client_map (lock held) */
void rm_client_unmap_all(remora_client_h c);

/* client_reg.c (lock held): a registration covering [buf, buf + len) of
 * a GPU allocation, held until put (NULL: none to be had; the transfer goes
 * without); all dropped when the client is freed (no lock needed then). */
rm_gpu_reg_t *rm_client_reg_get(remora_client_h c, const void *buf, size_t len);
void          rm_client_reg_put(rm_gpu_reg_t *g);
void          rm_client_regs_free(remora_client_h c);

/* client_seal.c: the client's side of encryption (engine/seal.h). */
remora_status_t rm_client_seal_params(remora_client_h c, const remora_client_params_t *p);
remora_status_t rm_client_seal_hello(remora_client_h c, const rm_hello_t *mine,
                                     const rm_hello_t *theirs);
remora_status_t rm_client_seal_connect(remora_client_h c, const void *addr, size_t len,
                                       uint8_t **sealed_p, size_t *sealed_len_p);
remora_status_t rm_client_seal_connect_reply(remora_client_h c, const rm_boot_frame_t *f,
                                             const uint8_t **addr_p, uint32_t *len_p,
                                             uint8_t **plain_p);
remora_path_t   rm_client_seal_path(remora_client_h c, const rm_rregion_t *r, remora_path_t path);

#endif
