/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file remora.h
 * @brief remora — remote memory access over UCX.
 *
 * A server exposes named memory regions; clients connect, list them, and read
 * and write any byte range. The data path is chosen per connection: active
 * messages with zero-copy rendezvous over TCP, one-sided RMA where UCX has a
 * native lane for it, or a direct mapping of the server's memory on one host.
 *
 * Conventions
 * - Every object is an opaque handle made by a *_create / *_connect call and
 *   ended by the matching *_destroy / *_disconnect call.
 * - Every call that can fail returns remora_status_t. Output arguments are
 *   written only when the call returns REMORA_OK.
 * - Every params struct starts with field_mask; a field is read only when its
 *   bit is set, so new fields never break old callers. Unset fields take the
 *   documented default; a NULL params pointer means "all defaults".
 * - Every output struct the caller allocates (remora_context_attr_t,
 *   remora_region_info_t, remora_elem_info_t, remora_cuda_attr_t,
 *   remora_cuda_device_attr_t) starts with field_mask too, as UCX's attr
 *   structs do, so it can grow without breaking callers:
 *   - in: the fields wanted, one *_FIELD_* bit each. Only those are written;
 *     every other field is left as the caller had it.
 *   - 0 asks for the fields the struct had when field_mask was added to it
 *     (all of this version's). Zero-initialised structs (`= {0}`) of callers
 *     written before the mask existed keep working, and 0 never grows: once
 *     a field is added, asking for it takes its bit, so a caller built
 *     against an older header is never written past the end of its smaller
 *     struct.
 *   - a bit this library does not know: REMORA_ERR_INVALID_PARAM, nothing
 *     written (a caller built against a newer header learns at once that a
 *     field it counts on is not there, rather than reading stale memory).
 *   - out, on REMORA_OK: the fields written (the bits asked for; for 0, the
 *     bits that 0 stands for).
 *   Structs the library allocates or hands to a callback (remora_client_list's
 *   array, a subscription callback's remora_elem_info_t) come with every field
 *   written and field_mask saying so. The statistics structs
 *   (remora_server_stats_t, remora_conn_stats_t) differ, as a remote server
 *   of another version fills them: bits it does not know are dropped from
 *   the returned mask rather than refused, and 0 asks for nothing.
 * - Threading, the default for every function unless its comment says
 *   otherwise: any thread may call it at any time, also concurrently with
 *   other calls on the same handle, except that a handle must not be used
 *   while or after it is destroyed (destroying is the caller's to order
 *   after every other use). Blocking calls block only the calling thread.
 *   Callbacks (events, connection events, subscriptions, log lines) say
 *   on which thread they run and what they may call. Event callbacks run on
 *   the context's progress thread; they may call any remora function, but the
 *   progress thread delivers nothing else while a callback runs, so keep them
 *   short.
 * - Every blocking call is bounded by a timeout (REMORA_DEFAULT_TIMEOUT_MS
 *   unless the caller gives one).
 */
#ifndef REMORA_REMORA_H
#define REMORA_REMORA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define REMORA_API __attribute__((visibility("default")))
#else
#define REMORA_API
#endif

#define REMORA_VERSION_MAJOR 0
#define REMORA_VERSION_MINOR 1
#define REMORA_VERSION_PATCH 0

/** Longest region name in bytes, excluding the terminating NUL. */
#define REMORA_NAME_MAX 255
/** Default for every blocking call that takes no explicit timeout. */
#define REMORA_DEFAULT_TIMEOUT_MS 10000
/** Longest shared token accepted, in bytes. */
#define REMORA_TOKEN_MAX 1024
/** Shortest shared token accepted, in bytes. */
#define REMORA_TOKEN_MIN 16

/* ---------------------------------------------------------------- status */

/** @defgroup remora_status Status
 * @{ */

/** The one status type. 0 is success, 1 is "not finished yet", errors are negative. */
typedef enum remora_status {
    REMORA_OK                     = 0,
    REMORA_INPROGRESS             = 1,
    REMORA_ERR_INVALID_PARAM      = -1,  /**< a bad argument (caller's mistake) */
    REMORA_ERR_NO_MEMORY          = -2,
    REMORA_ERR_TIMED_OUT          = -3,
    REMORA_ERR_DISCONNECTED       = -4,  /**< the peer went away or the connection failed */
    REMORA_ERR_NOT_FOUND          = -5,  /**< no region of that name */
    REMORA_ERR_OUT_OF_RANGE       = -6,  /**< offset/length outside the region */
    REMORA_ERR_READ_ONLY          = -7,  /**< write to a region exposed read-only */
    REMORA_ERR_AUTH               = -8,  /**< token missing or wrong */
    REMORA_ERR_PROTOCOL           = -9,  /**< malformed or unexpected message */
    REMORA_ERR_UNSUPPORTED        = -10, /**< not available here (e.g. no CUDA, no shared memory) */
    REMORA_ERR_CONNECTION_REFUSED = -11, /**< nothing listens at that address */
    REMORA_ERR_ADDRESS            = -12, /**< address malformed or not resolvable */
    REMORA_ERR_EXISTS             = -13, /**< a region of that name is already exposed */
    REMORA_ERR_IO                 = -14, /**< a local I/O or system call failed */
    REMORA_ERR_TRANSPORT          = -15, /**< UCX reported an error not covered above */
    REMORA_ERR_CANCELED           = -16, /**< the operation was canceled (e.g. by shutdown) */
    REMORA_ERR_BUSY               = -17, /**< the object is still in use */
    REMORA_ERR_VERSION            = -18, /**< the peer speaks an incompatible protocol version */
    REMORA_ERR_ENCRYPTION         = -19  /**< one side encrypts the connection, the other does not */
} remora_status_t;

/** A short English description of any status; never NULL. */
REMORA_API const char *remora_status_string(remora_status_t status);

/** "MAJOR.MINOR.PATCH" of the library. */
REMORA_API const char *remora_version_string(void);

/** @} */

/* ---------------------------------------------------------------- handles */

/** @defgroup remora_handles Handles
 * @{ */

typedef struct remora_context *remora_context_h;
typedef struct remora_mem     *remora_mem_h;
typedef struct remora_server  *remora_server_h;
typedef struct remora_client  *remora_client_h;
typedef struct remora_request *remora_request_h;
typedef struct remora_ring    *remora_ring_h;
typedef struct remora_sub     *remora_sub_h;
typedef struct remora_signals *remora_signals_h;

/** @} */

/* ---------------------------------------------------------------- context */

/** @defgroup remora_context Contexts
 * @{ */

enum remora_context_field {
    REMORA_CONTEXT_FIELD_NAME      = 1u << 0,
    REMORA_CONTEXT_FIELD_SPIN_US   = 1u << 1,
    REMORA_CONTEXT_FIELD_HEARTBEAT = 1u << 2,
    REMORA_CONTEXT_FIELD_BIND_HOST = 1u << 3,
    REMORA_CONTEXT_FIELD_RMA       = 1u << 4,
    REMORA_CONTEXT_FIELD_LOG_CB    = 1u << 5
};

/** Severity of a log line; REMORA_LOG (error, warn, info, debug; default
 *  warn) names the least severe that is logged at all. */
typedef enum remora_log_level {
    REMORA_LOG_ERROR = 0, /**< a call failed, or something was lost */
    REMORA_LOG_WARN  = 1, /**< unexpected, and handled */
    REMORA_LOG_INFO  = 2, /**< worth knowing once: a connection, a choice made */
    REMORA_LOG_DEBUG = 3  /**< for developers of remora */
} remora_log_level_t;

/**
 * Receives the library's log lines instead of stderr (see
 * remora_context_params_t.log_cb). `where` is the source location
 * ("client.c:1173"), `msg` the line without a trailing newline; both live
 * until the callback returns.
 *
 * Threading: called from any thread of the process (the caller's, a progress
 * thread, a subscription or reconnect thread), but never twice at once: the
 * calls are serialised by a lock of the logger, so the callback needs no lock
 * of its own for its own state. It must not call any remora function (that
 * may log, and would deadlock) and should return quickly: every thread that
 * logs waits for it.
 */
typedef void (*remora_log_cb_t)(remora_log_level_t level, const char *where, const char *msg,
                                void *arg);

/** One-sided access (the `rma` data path); see docs/security.md. */
typedef enum remora_rma_mode {
    /** Off: UCX's RMA feature is not enabled, so no peer can read or write
     *  this process's memory one-sidedly. Every path but `rma` works. */
    REMORA_RMA_OFF    = 0,
    /** On, but rkeys are handed out only on endpoints whose RMA lanes are
     *  verbs (InfiniBand/RoCE), where the NIC enforces their bounds and
     *  rights; and UCX's TCP transport is left out of this context, as UCX
     *  emulates RMA over it without checking any address. */
    REMORA_RMA_VERBS  = 1,
    /** On over any transport, including the emulated ones that check
     *  nothing: for tests and trusted machines only. */
    REMORA_RMA_UNSAFE = 2
} remora_rma_mode_t;

typedef struct remora_context_params {
    uint64_t    field_mask;
    /** Shown in UCX logs. Default "remora". */
    const char *name;
    /** How long the progress thread spins after the last event before it sleeps
     *  on the worker's event fd. Default 50 µs; 0 sleeps at once. */
    unsigned    spin_us;
    /** Heartbeats on every connection: one each way every heartbeat_ms (default
     *  500, env REMORA_HEARTBEAT_MS; 0 turns them off), and a peer silent for
     *  peer_timeout_ms (default 2000, env REMORA_PEER_TIMEOUT_MS; at least
     *  2 x heartbeat_ms) is dead: every call and subscription on it fails with
     *  REMORA_ERR_DISCONNECTED. */
    unsigned    heartbeat_ms;
    unsigned    peer_timeout_ms;
    /** A host or IP address: UCX's own network listeners are opened only on the
     *  interface that owns it (a loopback address: the loopback interface).
     *  Servers pass the host they listen on. Default: every interface. */
    const char *bind_host;
    /** Default REMORA_RMA_OFF (env REMORA_RMA=0|1|unsafe). */
    remora_rma_mode_t rma;
    /**
     * Where the library's log lines go while this context exists. Default
     * (field not set, or NULL): stderr, one line each, "remora[PID] L
     * file.c:N message". Which lines are logged at all is still REMORA_LOG's
     * choice; lines it filters out are never formatted nor passed on.
     *
     * Log lines are the process's, not the context's: the library's code
     * logs without knowing for which context. So the callback of the context
     * created last among those alive that set one receives every line of the
     * process (lines of other contexts, and of calls that have no context,
     * included), as UCX's ucs_log_push_handler works. Lines logged while no
     * such context exists (before the first, after the last is destroyed) go
     * to stderr. It receives the lines of its own remora_context_create()
     * too, a failing one included, and is never called once
     * remora_context_destroy() (or a failed create) returned.
     */
    remora_log_cb_t log_cb;
    void           *log_arg;
} remora_context_params_t;

/**
 * Create a context: a UCX context, one worker and one progress thread.
 * Servers, clients and memory made from a context must be destroyed before it.
 */
REMORA_API remora_status_t remora_context_create(const remora_context_params_t *params,
                                                 remora_context_h *context_p);
/** Threading: the last call on the context; nothing made from it may be
 *  in use or alive (from any thread), and not from one of its callbacks. */
REMORA_API void remora_context_destroy(remora_context_h context);

/** Memory types a region can live in. */
typedef enum remora_mem_type {
    REMORA_MEM_HOST = 0,
    REMORA_MEM_CUDA = 1
} remora_mem_type_t;

/** Fields of remora_context_attr_t (field_mask; see the conventions at the top). */
enum remora_context_attr_field {
    REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION   = 1u << 0, /**< ucx_major, ucx_minor, ucx_release */
    REMORA_CONTEXT_ATTR_FIELD_UCX_MEM_TYPES = 1u << 1,
    REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS    = 1u << 2
};

typedef struct remora_context_attr {
    /** In: the fields wanted (REMORA_CONTEXT_ATTR_FIELD_*, 0: all of them);
     *  out: the fields written. */
    uint64_t field_mask;
    unsigned ucx_major, ucx_minor, ucx_release; /**< version of the loaded UCX */
    /** Bit (1 << remora_mem_type_t) for each memory type the loaded UCX handles itself. */
    uint64_t ucx_mem_types;
    /** Comma-separated UCX transports this context can use, e.g. "tcp,posix,sysv,cma". */
    char     transports[256];
} remora_context_attr_t;

/** Fill the fields of *attr named in attr->field_mask. REMORA_ERR_INVALID_PARAM
 *  for a bit not in remora_context_attr_field. */
REMORA_API remora_status_t remora_context_query(remora_context_h context,
                                                remora_context_attr_t *attr);

/** @} */

/* ---------------------------------------------------------------- memory */

/** @defgroup remora_memory Memory
 * @{ */

enum remora_mem_field {
    REMORA_MEM_FIELD_ADDRESS = 1u << 0,
    REMORA_MEM_FIELD_LENGTH  = 1u << 1,
    REMORA_MEM_FIELD_TYPE    = 1u << 2,
    REMORA_MEM_FIELD_DEVICE  = 1u << 3
};

typedef struct remora_mem_params {
    uint64_t          field_mask;
    /** Caller-owned memory to register. Without it the library allocates
     *  shareable memory (same-host peers can map it); its content is undefined.
     *  GPU memory (cudaMalloc / cuMemAlloc) is recognised by itself and
     *  becomes REMORA_MEM_CUDA on its own device; pinned host memory is
     *  REMORA_MEM_HOST; managed (unified) memory is refused with
     *  REMORA_ERR_UNSUPPORTED. */
    void             *address;
    /** Length in bytes; required, > 0. */
    size_t            length;
    /** What to allocate when no address is given. Default REMORA_MEM_HOST.
     *  REMORA_MEM_CUDA allocates device memory (REMORA_ERR_UNSUPPORTED
     *  without a CUDA driver). With an address, it must match the memory's
     *  real type (REMORA_ERR_INVALID_PARAM otherwise). */
    remora_mem_type_t type;
    /** CUDA device ordinal to allocate on. Default 0. With an address it
     *  must match the device the memory lives on. */
    int               device;
} remora_mem_params_t;

/**
 * Allocate or register memory for use as a region.
 * Ownership: registered memory stays the caller's and must stay valid until the
 * last reference is gone: remora_mem_destroy() drops the caller's reference,
 * and every region using the memory holds one until it is unexposed or replaced
 * (and, after a replace, until connected clients have let go of it).
 * Allocated memory is freed when the last reference is dropped.
 */
REMORA_API remora_status_t remora_mem_create(remora_context_h context,
                                             const remora_mem_params_t *params,
                                             remora_mem_h *mem_p);
REMORA_API void   remora_mem_destroy(remora_mem_h mem);
/** For REMORA_MEM_CUDA memory this is a device pointer: not for the CPU. */
REMORA_API void  *remora_mem_address(remora_mem_h mem);
REMORA_API size_t remora_mem_length(remora_mem_h mem);
/** Where the memory lives; REMORA_MEM_HOST for a NULL handle. */
REMORA_API remora_mem_type_t remora_mem_type(remora_mem_h mem);
/** The CUDA device ordinal of REMORA_MEM_CUDA memory; -1 for host memory. */
REMORA_API int remora_mem_device(remora_mem_h mem);

/** @} */

/* ---------------------------------------------------------------- CUDA */

/**
 * @defgroup remora_cuda CUDA queries
 *
 * What the CUDA driver offers here, for diagnostics (`remora doctor`). The
 * driver is loaded at run time; without one these calls still work and say
 * so. They need no context and are thread-safe. As in every attr struct, the
 * caller sets field_mask to the fields it wants (0: all); only those are
 * written.
 * @{
 */
enum remora_cuda_attr_field {
    REMORA_CUDA_ATTR_FIELD_AVAILABLE      = 1u << 0,
    REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION = 1u << 1,
    REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT   = 1u << 2,
    REMORA_CUDA_ATTR_FIELD_REASON         = 1u << 3
};

typedef struct remora_cuda_attr {
    /** In: the fields wanted (REMORA_CUDA_ATTR_FIELD_*, 0: all of them);
     *  out: the fields written. */
    uint64_t field_mask;
    int      available;      /**< 1 when GPU memory can be used */
    int      driver_version; /**< e.g. 13000 for CUDA 13.0; 0 without a driver */
    int      device_count;
    char     reason[256];    /**< why not available; "" when it is */
} remora_cuda_attr_t;

/** REMORA_OK unless attr is NULL or field_mask has a bit not in
 *  remora_cuda_attr_field (REMORA_ERR_INVALID_PARAM): an absent driver is an
 *  answer, not an error. */
REMORA_API remora_status_t remora_cuda_query(remora_cuda_attr_t *attr);

enum remora_cuda_device_field {
    REMORA_CUDA_DEVICE_FIELD_NAME           = 1u << 0,
    REMORA_CUDA_DEVICE_FIELD_PCI_BUS_ID     = 1u << 1,
    REMORA_CUDA_DEVICE_FIELD_TOTAL_MEM      = 1u << 2,
    REMORA_CUDA_DEVICE_FIELD_CAPABILITY     = 1u << 3,
    REMORA_CUDA_DEVICE_FIELD_FEATURES       = 1u << 4
};

/** Feature bits of remora_cuda_device_attr_t.features. */
enum remora_cuda_feature {
    REMORA_CUDA_FEATURE_GPUDIRECT_RDMA     = 1u << 0, /**< the NIC may DMA to this GPU */
    REMORA_CUDA_FEATURE_DMA_BUF            = 1u << 1, /**< memory exportable as dma-buf */
    REMORA_CUDA_FEATURE_STREAM_MEM_OPS_64  = 1u << 2, /**< 64-bit cuStreamWrite/WaitValue */
    REMORA_CUDA_FEATURE_UNIFIED_ADDRESSING = 1u << 3
};

typedef struct remora_cuda_device_attr {
    /** In: the fields wanted (REMORA_CUDA_DEVICE_FIELD_*, 0: all of them);
     *  out: the fields written. */
    uint64_t field_mask;
    char     name[256];
    char     pci_bus_id[32];     /**< "0000:3b:00.0" */
    uint64_t total_mem;          /**< bytes */
    int      cc_major, cc_minor; /**< compute capability */
    unsigned features;           /**< remora_cuda_feature bits */
} remora_cuda_device_attr_t;

/**
 * Copy len bytes between any two of host, pinned host and GPU memory (a CUDA
 * copy when either side is GPU memory, else memcpy). Synchronous.
 * REMORA_ERR_UNSUPPORTED for GPU memory without a CUDA driver.
 */
REMORA_API remora_status_t remora_copy(void *dst, const void *src, size_t len);

/** One device, by ordinal. REMORA_ERR_UNSUPPORTED without CUDA,
 *  REMORA_ERR_INVALID_PARAM for an ordinal out of range or a field_mask bit
 *  not in remora_cuda_device_field. */
REMORA_API remora_status_t remora_cuda_device_query(int device, remora_cuda_device_attr_t *attr);
/** *can = 1 when device can map memory of peer (always so for device == peer). */
REMORA_API remora_status_t remora_cuda_can_access_peer(int device, int peer, int *can);

/** @} */

/* ---------------------------------------------------------------- server */

/** @defgroup remora_server Servers and regions
 * @{ */

enum remora_server_field {
    REMORA_SERVER_FIELD_LISTEN_ADDR = 1u << 0,
    REMORA_SERVER_FIELD_TOKEN       = 1u << 1,
    REMORA_SERVER_FIELD_LANES       = 1u << 2,
    REMORA_SERVER_FIELD_MAX_CONNS   = 1u << 3,
    REMORA_SERVER_FIELD_ENCRYPT     = 1u << 4,
    REMORA_SERVER_FIELD_CONN_CB     = 1u << 5
};

struct remora_conn_stats;

/** A client connected (handshake done) or its connection ended. */
typedef struct remora_conn_event {
    int                              connected; /**< 1: connected; 0: disconnected */
    /** Every field of remora_conn_stats_t: the peer's address, the connection's
     *  id and lane, and (on disconnect) its final counters. */
    const struct remora_conn_stats  *stats;
} remora_conn_event_t;

/** Runs on the progress thread of the worker serving the connection (with
 *  several workers, calls for different connections may run at once), without
 *  any remora lock held (it may
 *  call remora functions, but not destroy its own server); the event lives
 *  until it returns. Not called for the connections remora_server_destroy()
 *  closes; none runs after remora_server_destroy() returned. */
typedef void (*remora_conn_cb_t)(const remora_conn_event_t *event, void *arg);

typedef struct remora_server_params {
    uint64_t    field_mask;
    /** "HOST:PORT" (IPv4); port 0 picks a free port. Default "127.0.0.1:60010". */
    const char *listen_addr;
    /** Shared secret of REMORA_TOKEN_MIN..REMORA_TOKEN_MAX bytes; when set,
     *  clients must prove they know it before the server creates any UCX
     *  endpoint for them, lists a region or touches memory. The bytes are copied. */
    const void *token;
    size_t      token_len;
    /** Workers, 1..8 (default: $REMORA_WORKERS, else by the cores: 1 up to
     *  4, else one per two cores up to 8). Each past the first is one more UCX worker
     *  with its own progress thread and listener (same host, a free port);
     *  all serve one region table, so a region exposed, replaced or removed
     *  here is seen the same way through every worker. Connections accepted
     *  on listen_addr go to the worker with the fewest (clients need not
     *  ask), each served wholly there: reads, writes, ring subscriptions,
     *  signals and sockets. Clients asking for lanes also move one
     *  request's data on several cores at once. */
    unsigned    lanes;
    /** Connection caps: at most max_conns connections at once (default 4096)
     *  and max_conns_per_host from one peer address (default 1024); a client
     *  past either is refused with REMORA_ERR_BUSY during the handshake. */
    unsigned    max_conns;
    unsigned    max_conns_per_host;
    /** Non-zero: encrypt every connection (off by default; docs/security.md,
     *  docs/protocol.md §14). Requires a token (REMORA_ERR_INVALID_PARAM
     *  without one): keys are derived from it per connection. Clients that do
     *  not encrypt are refused with REMORA_ERR_ENCRYPTION. Encrypted
     *  connections move data by active messages only (no mapping, RMA or
     *  CUDA IPC; GPU regions through pinned staging buffers). Lanes inherit it. */
    int         encrypt;
    /** Told of every connection and disconnection (lanes included); default none. */
    remora_conn_cb_t conn_cb;
    void            *conn_arg;
} remora_server_params_t;

/** Start listening. The server serves from the context's progress thread. */
REMORA_API remora_status_t remora_server_create(remora_context_h context,
                                                const remora_server_params_t *params,
                                                remora_server_h *server_p);
/** Closes the listener and every connection; frees regions not otherwise referenced.
 *  Threading: not from the server's own conn_cb (it waits for the callbacks
 *  queued on the progress thread). */
REMORA_API void remora_server_destroy(remora_server_h server);

/** The address actually bound, "HOST:PORT" (port resolved when 0 was asked for). */
REMORA_API remora_status_t remora_server_address(remora_server_h server, char *buf, size_t len);

/** Region access flags. */
enum remora_region_flag {
    REMORA_REGION_WRITABLE = 1u << 0
};

enum remora_region_field {
    REMORA_REGION_FIELD_FLAGS  = 1u << 0,
    REMORA_REGION_FIELD_OFFSET = 1u << 1,
    REMORA_REGION_FIELD_LENGTH = 1u << 2
};

typedef struct remora_region_params {
    uint64_t field_mask;
    unsigned flags;   /**< remora_region_flag bits; default 0 (read-only) */
    size_t   offset;  /**< window start within the memory; default 0 */
    size_t   length;  /**< window length; default: the rest of the memory */
} remora_region_params_t;

/** Expose a window of mem under name. REMORA_ERR_EXISTS if the name is taken. */
REMORA_API remora_status_t remora_server_expose(remora_server_h server, const char *name,
                                                remora_mem_h mem,
                                                const remora_region_params_t *params);
/**
 * Point an exposed region at other memory (any size: this is also how a region
 * is resized). The generation increases and every connected client gets a
 * REMORA_EVENT_REGION_CHANGED event. Access flags are kept unless params sets them.
 */
REMORA_API remora_status_t remora_server_replace(remora_server_h server, const char *name,
                                                 remora_mem_h mem,
                                                 const remora_region_params_t *params);
/** Remove a region; clients get REMORA_EVENT_REGION_REMOVED. */
REMORA_API remora_status_t remora_server_unexpose(remora_server_h server, const char *name);

/**
 * Wait until every connected client has acknowledged the replacements and
 * removals made so far (it dropped its keys and mappings of the old memory
 * and will see the new), at most timeout_ms. Clients that have not by then
 * are disconnected. REMORA_OK when all followed; REMORA_ERR_TIMED_OUT when
 * some were dropped (*dropped_p, may be NULL, says how many). Afterwards the
 * old memory is no longer in any client's use. Not from an event callback.
 */
REMORA_API remora_status_t remora_server_sync_clients(remora_server_h server, int timeout_ms,
                                                      unsigned *dropped_p);

/* ---------------------------------------------------------------- server statistics */

/**
 * Counters of a server, as far as it sees them (its lanes included). Reads
 * and writes on the am and staging paths pass through the server and are
 * counted in bytes and operations; map, rma and ipc move data without it, so
 * only the descriptors it handed out for them (grants) are counted.
 *
 * Threading: the counters are relaxed atomics bumped on the progress threads
 * with no lock of their own; remora_server_stats() may be called from any
 * thread at any time and costs no lock. Each value is exact on its own, but
 * the set is not one atomic snapshot (a read may be counted in ops before
 * bytes). Counters only grow, except the gauges conns and ring_subscribers.
 */
enum remora_server_stats_field {
    REMORA_SERVER_STATS_FIELD_CONNS               = 1u << 0,  /**< connections now (handshake done) */
    REMORA_SERVER_STATS_FIELD_CONNS_ACCEPTED      = 1u << 1,  /**< TCP connections accepted, ever */
    REMORA_SERVER_STATS_FIELD_CONNS_REFUSED       = 1u << 2,  /**< refused by a connection cap (BUSY) */
    REMORA_SERVER_STATS_FIELD_AUTH_FAILURES       = 1u << 3,  /**< wrong or missing token proofs */
    REMORA_SERVER_STATS_FIELD_AM_READ_OPS         = 1u << 4,
    REMORA_SERVER_STATS_FIELD_AM_READ_BYTES       = 1u << 5,
    REMORA_SERVER_STATS_FIELD_AM_WRITE_OPS        = 1u << 6,
    REMORA_SERVER_STATS_FIELD_AM_WRITE_BYTES      = 1u << 7,
    REMORA_SERVER_STATS_FIELD_STAGING_READ_OPS    = 1u << 8,
    REMORA_SERVER_STATS_FIELD_STAGING_READ_BYTES  = 1u << 9,
    REMORA_SERVER_STATS_FIELD_STAGING_WRITE_OPS   = 1u << 10,
    REMORA_SERVER_STATS_FIELD_STAGING_WRITE_BYTES = 1u << 11,
    REMORA_SERVER_STATS_FIELD_LOOKUPS             = 1u << 12, /**< LOOKUP requests answered OK */
    REMORA_SERVER_STATS_FIELD_MAP_GRANTS          = 1u << 13, /**< descriptors with a memory file (map path) */
    REMORA_SERVER_STATS_FIELD_RMA_GRANTS          = 1u << 14, /**< descriptors with a remote key (rma path) */
    REMORA_SERVER_STATS_FIELD_IPC_GRANTS          = 1u << 15, /**< descriptors with a CUDA IPC handle */
    REMORA_SERVER_STATS_FIELD_SIGNALS             = 1u << 16, /**< signal updates (SIGNAL, WRITE_SIGNAL) */
    REMORA_SERVER_STATS_FIELD_ERRORS              = 1u << 17, /**< error replies and malformed messages */
    REMORA_SERVER_STATS_FIELD_RING_WAITS          = 1u << 18, /**< ring waits received (one per notification) */
    REMORA_SERVER_STATS_FIELD_RING_SUBSCRIBERS    = 1u << 19, /**< connections with a ring wait armed now */
    REMORA_SERVER_STATS_FIELD_RING_DROPS          = 1u << 20, /**< elements overwritten before an "every"
                                                                   subscriber asked for them */
    REMORA_SERVER_STATS_FIELD_UPTIME_MS           = 1u << 21  /**< since remora_server_create */
};

typedef struct remora_server_stats {
    /** In: the fields wanted (REMORA_SERVER_STATS_FIELD_*). Out: the fields
     *  written (a remote server of an older version may know fewer). */
    uint64_t field_mask;
    uint64_t conns, conns_accepted, conns_refused, auth_failures;
    uint64_t am_read_ops, am_read_bytes, am_write_ops, am_write_bytes;
    uint64_t staging_read_ops, staging_read_bytes, staging_write_ops, staging_write_bytes;
    uint64_t lookups, map_grants, rma_grants, ipc_grants, signals, errors;
    uint64_t ring_waits, ring_subscribers, ring_drops;
    uint64_t uptime_ms;
} remora_server_stats_t;

/** Fill the fields of *stats named in stats->field_mask. Any thread; no lock. */
REMORA_API remora_status_t remora_server_stats(remora_server_h server,
                                               remora_server_stats_t *stats);

/** Per-connection counters (reads and writes on every path the server sees). */
enum remora_conn_stats_field {
    REMORA_CONN_STATS_FIELD_ID          = 1u << 0, /**< unique per server (all its workers), from 1 */
    REMORA_CONN_STATS_FIELD_PEER        = 1u << 1, /**< the client's address, "HOST:PORT" */
    REMORA_CONN_STATS_FIELD_LANE        = 1u << 2, /**< the worker serving it, from 0 (the first) */
    REMORA_CONN_STATS_FIELD_AGE_MS      = 1u << 3, /**< since it was accepted */
    REMORA_CONN_STATS_FIELD_READ_OPS    = 1u << 4,
    REMORA_CONN_STATS_FIELD_READ_BYTES  = 1u << 5,
    REMORA_CONN_STATS_FIELD_WRITE_OPS   = 1u << 6,
    REMORA_CONN_STATS_FIELD_WRITE_BYTES = 1u << 7,
    REMORA_CONN_STATS_FIELD_ERRORS      = 1u << 8,
    REMORA_CONN_STATS_FIELD_RING_WAITS  = 1u << 9
};

typedef struct remora_conn_stats {
    uint64_t field_mask; /**< in: fields wanted; out: fields written */
    uint64_t id;
    char     peer[64];
    uint64_t lane, age_ms;
    uint64_t read_ops, read_bytes, write_ops, write_bytes, errors, ring_waits;
} remora_conn_stats_t;

/**
 * The connections that finished their handshake, lanes included: the first
 * min(max, count) are written to stats[] (each element's field_mask says
 * what is wanted), *count_p says how many there are. Takes the context lock
 * of the server and of each lane briefly (not from an event callback).
 */
REMORA_API remora_status_t remora_server_conn_stats(remora_server_h server,
                                                    remora_conn_stats_t *stats, size_t max,
                                                    size_t *count_p);

/** @} */

/* ---------------------------------------------------------------- client */

/** @defgroup remora_client Clients
 * @{ */

typedef enum remora_event_type {
    REMORA_EVENT_REGION_CHANGED = 1, /**< replaced or resized: new size and generation */
    REMORA_EVENT_REGION_REMOVED = 2,
    /** The connection is gone. Without reconnecting, every later call fails;
     *  with it (`reconnecting` set), the client is trying to reconnect. */
    REMORA_EVENT_DISCONNECTED   = 3,
    /** A reconnecting client is connected again (see "Reconnecting" below). */
    REMORA_EVENT_RECONNECTED    = 4
} remora_event_type_t;

typedef struct remora_event {
    remora_event_type_t type;
    const char         *name;       /**< region name; NULL for DISCONNECTED and RECONNECTED */
    uint64_t            size;       /**< REGION_CHANGED: new size */
    uint64_t            generation; /**< REGION_CHANGED: new generation */
    remora_status_t     status;     /**< DISCONNECTED: why */
    /** DISCONNECTED: 1 when a reconnect follows (the client retries), 0 when
     *  this is the end (reconnecting off, given up, or closed). */
    int                 reconnecting;
    /** RECONNECTED: 1 when the server is another instance than before (it
     *  restarted: regions and rings are new, ring sequence numbers start
     *  again), 0 when it is the same server object. */
    int                 new_instance;
    /** RECONNECTED: reconnects of this client so far, this one included. */
    uint64_t            reconnects;
} remora_event_t;

/** Runs on the progress thread; the event and its strings live until it returns. */
typedef void (*remora_event_cb_t)(const remora_event_t *event, void *arg);

/** How a client moves region data; see docs/protocol.md. */
typedef enum remora_path {
    REMORA_PATH_AUTO = 0, /**< choose per connection and region (default) */
    REMORA_PATH_AM   = 1, /**< request/response active messages, rendezvous payload */
    REMORA_PATH_RMA  = 2, /**< one-sided ucp_get/ucp_put with the region's remote key */
    REMORA_PATH_MAP  = 3, /**< same host: the server's memory mapped into this process */
    REMORA_PATH_IPC  = 4, /**< same host, GPU region: CUDA IPC, device-to-device copies */
    REMORA_PATH_STAGING = 5 /**< GPU memory UCX cannot reach: active messages through
                                 pinned host buffers on both sides */
} remora_path_t;

enum remora_client_field {
    REMORA_CLIENT_FIELD_TIMEOUT  = 1u << 0,
    REMORA_CLIENT_FIELD_TOKEN    = 1u << 1,
    REMORA_CLIENT_FIELD_EVENT_CB = 1u << 2,
    REMORA_CLIENT_FIELD_PATH     = 1u << 3,
    REMORA_CLIENT_FIELD_LANES    = 1u << 4,
    REMORA_CLIENT_FIELD_ENCRYPT  = 1u << 5,
    REMORA_CLIENT_FIELD_RECONNECT = 1u << 6
};

/**
 * Reconnecting (opt-in; REMORA_CLIENT_FIELD_RECONNECT, or the environment
 * variable REMORA_RECONNECT=1 for clients whose params do not set the field).
 *
 * When the connection fails (the server's socket ends, heartbeats stop, UCX
 * reports the endpoint failed):
 * - every request and call in flight fails with REMORA_ERR_DISCONNECTED,
 *   and REMORA_EVENT_DISCONNECTED is raised with `reconnecting` = 1;
 * - the old endpoint is closed, and every UCX callback of the operations on
 *   it has run, before the first new handshake starts;
 * - the client's own reconnect thread (one per client: the handshake blocks
 *   on a socket, which neither the progress thread nor the context lock may)
 *   dials the same address: the first attempt at once, then after
 *   reconnect_min_ms, doubling up to reconnect_max_ms between attempts; each
 *   attempt is bounded by min(timeout_ms, 3 s). One attempt at a time;
 * - calls made while it reconnects fail at once with REMORA_ERR_DISCONNECTED
 *   (they do not wait); subscriptions are the exception (remora_sub_next);
 * - on success REMORA_EVENT_RECONNECTED is raised (`new_instance` says
 *   whether the server restarted), the region cache is dropped (regions are
 *   looked up again on next use, GPU IPC handles and same-host mappings of the
 *   cache are closed and made again; mappings handed out by
 *   remora_client_map() stay as they were, on the old memory), and every
 *   subscription is re-established on its next call (see remora_sub_next);
 * - lanes are not reconnected: a client with lanes goes on with its first
 *   connection only after a reconnect (a warning says so);
 * - after reconnect_give_up_ms without success (-1: never give up) the
 *   client gives up: a final REMORA_EVENT_DISCONNECTED (`reconnecting` = 0)
 *   and every later call fails with REMORA_ERR_DISCONNECTED, as without
 *   reconnecting. remora_client_disconnect() stops a reconnect in progress
 *   (waiting for an attempt in flight, at most 3 s).
 * A server restarted on the same address is followed within
 * reconnect_max_ms plus one handshake of it listening again.
 */
typedef struct remora_reconnect_params {
    int      enable;        /**< 1 on, 0 off. Default off (env REMORA_RECONNECT=1: on) */
    unsigned min_ms;        /**< wait after the first failed attempt; default 50 */
    unsigned max_ms;        /**< longest wait between attempts; default 500 */
    int      give_up_ms;    /**< give up after this long; default 60000; -1: never */
} remora_reconnect_params_t;

typedef struct remora_client_params {
    uint64_t          field_mask;
    /** Bound on connecting and on every blocking call. Default REMORA_DEFAULT_TIMEOUT_MS. */
    int               timeout_ms;
    const void       *token;
    size_t            token_len;
    remora_event_cb_t event_cb;
    void             *event_arg;
    /** Force a data path. Default: REMORA_PATH_AUTO, or the REMORA_PATH
     *  environment variable ("auto", "am", "rma", "map", "ipc", "staging") when set.
     *  GPU regions and buffers: AUTO takes UCX itself when it handles CUDA
     *  memory, else IPC on one host, else STAGING. */
    remora_path_t     path;
    /** Connections to spread large transfers over, 1..8. Default 1, or the
     *  REMORA_LANES environment variable. Past the first, each is a connection
     *  to one of the server's extra lanes (as many as it has), with its own
     *  worker and progress thread here; a read or write of the active-message
     *  path of at least 512 KiB is split across them. */
    unsigned          lanes;
    /** Non-zero: encrypt the connection: the handshake's addresses and every
     *  message, payload included (libsodium XChaCha20-Poly1305, keys derived
     *  from the token and both sides' nonces). Off by default. Requires a
     *  token (REMORA_ERR_INVALID_PARAM). A server that does not encrypt is
     *  refused with REMORA_ERR_ENCRYPTION, as a server that does refuses a
     *  client that does not. Data then moves by active messages only: a
     *  forced path other than am/staging fails with REMORA_ERR_UNSUPPORTED;
     *  GPU buffers and regions go through pinned staging buffers. Lanes
     *  inherit it. */
    int               encrypt;
    /** Reconnecting, see remora_reconnect_params_t. */
    remora_reconnect_params_t reconnect;
} remora_client_params_t;

/** Connect to "HOST:PORT", say hello and (if needed) authenticate.
 *  A server of the same context can be connected to only through UCX's connection
 *  manager (the server's default from UCX 1.16 on; REMORA_CM): over worker addresses
 *  it fails with REMORA_ERR_UNSUPPORTED. A second context works either way. */
REMORA_API remora_status_t remora_client_connect(remora_context_h context, const char *addr,
                                                 const remora_client_params_t *params,
                                                 remora_client_h *client_p);
/** Close the connection. Requests still in flight complete with REMORA_ERR_CANCELED;
 *  they must still be released with remora_request_release().
 *  Threading: not from this client's own event callback (it waits until no
 *  event of the client is being delivered). */
REMORA_API void remora_client_disconnect(remora_client_h client);

/** Region access as a client sees it. */
enum remora_access {
    REMORA_ACCESS_READ  = 1u << 0,
    REMORA_ACCESS_WRITE = 1u << 1
};

/** What a region holds. */
typedef enum remora_region_kind {
    REMORA_REGION_PLAIN = 0,
    REMORA_REGION_RING  = 1, /**< a ring buffer (docs/ring.md); read-only to clients */
    REMORA_REGION_SIGNALS = 2 /**< an array of 64-bit signals (remora_server_expose_signals) */
} remora_region_kind_t;

/** Fields of remora_region_info_t (field_mask; see the conventions at the top). */
enum remora_region_info_field {
    REMORA_REGION_INFO_FIELD_NAME       = 1u << 0,
    REMORA_REGION_INFO_FIELD_SIZE       = 1u << 1,
    REMORA_REGION_INFO_FIELD_MEM_TYPE   = 1u << 2,
    REMORA_REGION_INFO_FIELD_ACCESS     = 1u << 3,
    REMORA_REGION_INFO_FIELD_GENERATION = 1u << 4,
    REMORA_REGION_INFO_FIELD_KIND       = 1u << 5
};

typedef struct remora_region_info {
    /** In (remora_client_lookup): the fields wanted
     *  (REMORA_REGION_INFO_FIELD_*, 0: all of them); out: the fields written.
     *  remora_client_list writes every field and sets all their bits. */
    uint64_t          field_mask;
    char              name[REMORA_NAME_MAX + 1];
    uint64_t          size;
    remora_mem_type_t mem_type;
    unsigned          access;     /**< remora_access bits */
    uint64_t          generation; /**< starts at 1, increases on every replace */
    remora_region_kind_t kind;    /**< plain memory or a ring (see remora_client_subscribe) */
} remora_region_info_t;

/** List every region. *infos_p is freed with remora_region_info_free(). */
REMORA_API remora_status_t remora_client_list(remora_client_h client,
                                              remora_region_info_t **infos_p, size_t *count_p);
REMORA_API void remora_region_info_free(remora_region_info_t *infos);
/** Look one region up by name (always asks the server) and fill the fields
 *  of *info named in info->field_mask. REMORA_ERR_INVALID_PARAM (before any
 *  message is sent) for a bit not in remora_region_info_field. */
REMORA_API remora_status_t remora_client_lookup(remora_client_h client, const char *name,
                                                remora_region_info_t *info);

/**
 * Blocking read/write of [offset, offset+length) of a region.
 * The buffer is the caller's; it is not touched after the call returns.
 */
REMORA_API remora_status_t remora_client_read(remora_client_h client, const char *name,
                                              uint64_t offset, void *buf, size_t length);
REMORA_API remora_status_t remora_client_write(remora_client_h client, const char *name,
                                               uint64_t offset, const void *buf, size_t length);

/**
 * Non-blocking forms. On REMORA_OK a request is returned in *req_p; the buffer
 * must stay valid and untouched until the request completes (test/wait returns
 * anything but REMORA_INPROGRESS). Any number may be in flight together.
 * Requests move while the caller does other work: a wait that returns with
 * requests of 256 KiB or more still in flight hands them to the progress
 * thread at once (smaller ones move on the next wait, or when the progress
 * thread next looks: within 10 ms).
 * On an error return no request exists.
 */
REMORA_API remora_status_t remora_client_read_nb(remora_client_h client, const char *name,
                                                 uint64_t offset, void *buf, size_t length,
                                                 remora_request_h *req_p);
REMORA_API remora_status_t remora_client_write_nb(remora_client_h client, const char *name,
                                                  uint64_t offset, const void *buf,
                                                  size_t length, remora_request_h *req_p);

/** REMORA_INPROGRESS while in flight, then the final status. Never blocks. */
REMORA_API remora_status_t remora_request_test(remora_request_h req);
/**
 * Wait up to timeout_ms (< 0: the client's timeout) for completion; returns the
 * final status, or REMORA_ERR_TIMED_OUT with the request still in flight.
 */
REMORA_API remora_status_t remora_request_wait(remora_request_h req, int timeout_ms);
/**
 * Release a request. One still in flight is waited for first (bounded by the
 * client's timeout; past that the connection is closed so that the buffer is
 * provably no longer touched).
 * Threading: once per request, when no other thread tests or waits on it.
 */
REMORA_API void remora_request_release(remora_request_h req);

/** Round trip to the server and back, in microseconds. */
REMORA_API remora_status_t remora_client_ping(remora_client_h client, double *rtt_us);

/**
 * The server's counters, read over the connection (STATS request,
 * docs/protocol.md): *stats as remora_server_stats() fills it on the server
 * (field_mask: in, wanted; out, received), and up to max of its connections
 * (as remora_server_conn_stats(); conns may be NULL with max 0), *count_p
 * (may be NULL) the number of connections the server reported.
 * REMORA_ERR_UNSUPPORTED when the server is older and does not answer it.
 */
REMORA_API remora_status_t remora_client_server_stats(remora_client_h client,
                                                      remora_server_stats_t *stats,
                                                      remora_conn_stats_t *conns, size_t max,
                                                      size_t *count_p);

/**
 * Same host only: map a region of library-allocated memory into this process,
 * read-only. The pointer stays valid until remora_client_unmap() even if the
 * server replaces the region (it then shows the old memory).
 * REMORA_ERR_UNSUPPORTED when the server is on another host or the memory is
 * not mappable.
 */
REMORA_API remora_status_t remora_client_map(remora_client_h client, const char *name,
                                             const void **addr_p, size_t *length_p);
REMORA_API remora_status_t remora_client_unmap(remora_client_h client, const void *addr);

/** The data path reads and writes of this region use now. */
REMORA_API remora_status_t remora_client_region_path(remora_client_h client, const char *name,
                                                     remora_path_t *path_p);
/** The name of a path: "auto", "am", "rma", "map", "ipc" or "staging"; "?"
 *  for a value that is none. */
REMORA_API const char *remora_path_string(remora_path_t path);
/**
 * The path named `name` (one of the names remora_path_string gives, exact
 * and lower-case): the one parser of path names, used for REMORA_PATH, the
 * CLI's --path and the Python binding. REMORA_ERR_INVALID_PARAM (and *path_p
 * untouched) for NULL or any other name.
 */
REMORA_API remora_status_t remora_path_parse(const char *name, remora_path_t *path_p);

/** Connections this client spreads large transfers over, itself included
 *  (1 without lanes). */
REMORA_API unsigned remora_client_lanes(remora_client_h client);

/** @} */

/* ---------------------------------------------------------------- rings */

/**
 * @defgroup remora_rings Rings
 *
 * A ring: fixed-size elements pushed by one producer, followed by any number
 * of local readers and remote subscribers. The memory format is documented in
 * docs/ring.md: a 64-byte header, then `capacity` slots, each an 8-byte
 * stamp followed by the element. Every element gets a sequence number
 * (0, 1, 2, ...); the ring holds the newest `capacity` of them.
 *
 * Threading: one producer thread at a time may push or reserve/commit;
 * readers (get, newest, oldest, subscribers) run concurrently with it and
 * never slow it down: a reader that finds an element overwritten while it
 * copied it reports that, it never returns a torn element.
 * @{
 */

enum remora_ring_field {
    REMORA_RING_FIELD_ELEM_SIZE = 1u << 0,
    REMORA_RING_FIELD_CAPACITY  = 1u << 1,
    REMORA_RING_FIELD_MEM_TYPE  = 1u << 2,
    REMORA_RING_FIELD_DEVICE    = 1u << 3
};

typedef struct remora_ring_params {
    uint64_t          field_mask;
    size_t            elem_size; /**< bytes per element, 1..2^40; required */
    size_t            capacity;  /**< slots, 1..2^32; required */
    /** REMORA_MEM_CUDA: the elements live in GPU memory (a camera writing
     *  straight into the GPU). The header and the slots' stamps stay in host
     *  memory. Push copies whole elements from host or GPU memory; a reserved
     *  slot is a GPU pointer, and the producer's GPU writes into it must be
     *  complete (stream synchronized) before commit. Default host. */
    remora_mem_type_t mem_type;
    int               device;    /**< GPU ordinal for REMORA_MEM_CUDA; default 0 */
} remora_ring_params_t;

/** Create an empty ring in library-allocated memory (mappable by same-host peers). */
REMORA_API remora_status_t remora_ring_create(remora_context_h context,
                                              const remora_ring_params_t *params,
                                              remora_ring_h *ring_p);
/** Unexposes the ring if a server still exposes it, then frees it. */
REMORA_API void remora_ring_destroy(remora_ring_h ring);

/** Copy one element in (len <= elem_size; the rest of the slot is zeroed).
 *  Threading: push, reserve and commit are the producer's: one thread at a
 *  time per ring (readers may run alongside).
 *  Returns its sequence number in *seq_p (may be NULL). Never blocks.
 *  Buffers given to a host ring's push/get/newest/oldest are host memory; a
 *  GPU ring's may be host or GPU memory. (Subscriptions take either.) */
REMORA_API remora_status_t remora_ring_push(remora_ring_h ring, const void *elem, size_t len,
                                            uint64_t *seq_p);
/**
 * Zero-copy push: *slot_p points at the next slot's element bytes (elem_size
 * of them), to be filled in place and published with remora_ring_commit().
 * Readers never see a reserved element before its commit. Only one
 * reservation at a time; REMORA_ERR_BUSY otherwise. Threading: the
 * producer's thread only, as push.
 */
REMORA_API remora_status_t remora_ring_reserve(remora_ring_h ring, void **slot_p);
REMORA_API remora_status_t remora_ring_commit(remora_ring_h ring, uint64_t *seq_p);

/**
 * Copy element seq into buf (len >= elem_size). REMORA_ERR_OUT_OF_RANGE when
 * the ring does not hold it (not yet pushed, or already overwritten,
 * including while it was being copied).
 */
REMORA_API remora_status_t remora_ring_get(remora_ring_h ring, uint64_t seq, void *buf,
                                           size_t len);
/** The newest / oldest element still held, with its sequence number.
 *  REMORA_ERR_OUT_OF_RANGE when none is; newest: REMORA_ERR_BUSY when the
 *  producer overwrote the newest 64 times in a row while it was copied. */
REMORA_API remora_status_t remora_ring_newest(remora_ring_h ring, void *buf, size_t len,
                                              uint64_t *seq_p);
REMORA_API remora_status_t remora_ring_oldest(remora_ring_h ring, void *buf, size_t len,
                                              uint64_t *seq_p);
REMORA_API size_t   remora_ring_elem_size(remora_ring_h ring);
REMORA_API size_t   remora_ring_capacity(remora_ring_h ring);
/** Sequence number the next push gets (= elements pushed, clones: see clone). */
REMORA_API uint64_t remora_ring_head(remora_ring_h ring);
/**
 * Create a local ring from an image of a ring's memory (docs/ring.md), e.g. a
 * file saved from remora_ring_mem(). The header is checked (REMORA_ERR_PROTOCOL
 * when malformed or larger than len); elements whose stamp does not match
 * are left out.
 */
REMORA_API remora_status_t remora_ring_create_from_image(remora_context_h context,
                                                         const void *image, size_t len,
                                                         remora_ring_h *ring_p);
/** The ring's whole memory (header and slots), e.g. to save it to a file. */
REMORA_API remora_mem_h remora_ring_mem(remora_ring_h ring);

/** Expose a ring by name beside plain regions (read-only to clients). A ring
 *  is exposed by at most one server at a time (REMORA_ERR_BUSY). A GPU ring's
 *  elements are exposed too, as region NAME#data. */
REMORA_API remora_status_t remora_server_expose_ring(remora_server_h server, const char *name,
                                                     remora_ring_h ring);

/** @} */

/* ---------------------------------------------------------------- subscriptions */

/** @defgroup remora_subscriptions Subscriptions
 * @{ */

typedef enum remora_sub_mode {
    /** Every element in order; elements the ring no longer held when the
     *  subscriber got to them are counted as drops, exactly. */
    REMORA_SUB_EVERY  = 0,
    /** Always the newest element, skipping (and counting as drops) the rest. */
    REMORA_SUB_LATEST = 1
} remora_sub_mode_t;

/** Fields of remora_elem_info_t (field_mask; see the conventions at the top). */
enum remora_elem_info_field {
    REMORA_ELEM_INFO_FIELD_SEQ   = 1u << 0,
    REMORA_ELEM_INFO_FIELD_DROPS = 1u << 1,
    REMORA_ELEM_INFO_FIELD_SIZE  = 1u << 2
};

typedef struct remora_elem_info {
    /** In (remora_sub_next, remora_sub_next_ref): the fields wanted
     *  (REMORA_ELEM_INFO_FIELD_*, 0: all of them); out: the fields written.
     *  A callback's info has every field written and all their bits set. */
    uint64_t field_mask;
    uint64_t seq;   /**< sequence number of the element */
    uint64_t drops; /**< elements skipped so far on this subscription */
    size_t   size;  /**< element size in bytes */
} remora_elem_info_t;

/** Callback form: runs on a thread the subscription owns; elem is valid until
 *  it returns. A final call with elem == NULL carries the error that ended it. */
typedef void (*remora_sub_cb_t)(const void *elem, const remora_elem_info_t *info,
                                remora_status_t status, void *arg);

enum remora_sub_field {
    REMORA_SUB_FIELD_MODE        = 1u << 0,
    REMORA_SUB_FIELD_CB          = 1u << 1,
    REMORA_SUB_FIELD_BATCH_BYTES = 1u << 2
};

typedef struct remora_sub_params {
    uint64_t          field_mask;
    remora_sub_mode_t mode;        /**< default REMORA_SUB_EVERY */
    remora_sub_cb_t   cb;          /**< callback form: elements are pushed to cb */
    void             *cb_arg;
    /** Most bytes fetched in one transfer (at least one element). Default 8 MiB. */
    size_t            batch_bytes;
} remora_sub_params_t;

/**
 * Follow a remote ring. The server tells the subscriber about new elements
 * (no polling over the network); the subscriber fetches them in batches.
 * Errors: REMORA_ERR_NOT_FOUND (no such region), REMORA_ERR_INVALID_PARAM
 * (the region is not a ring), REMORA_ERR_PROTOCOL (its header is malformed).
 * Threading: one thread at a time calls remora_sub_next() on a subscription.
 */
REMORA_API remora_status_t remora_client_subscribe(remora_client_h client, const char *name,
                                                   const remora_sub_params_t *params,
                                                   remora_sub_h *sub_p);
/**
 * Wait up to timeout_ms (< 0: the client's timeout) for the next element and
 * copy it into buf (len >= element size). REMORA_ERR_TIMED_OUT when none came;
 * REMORA_ERR_DISCONNECTED when the server went away (subscribe again after
 * reconnecting). Not for subscriptions with a callback. info may be NULL;
 * otherwise REMORA_ERR_INVALID_PARAM (nothing consumed) for a bit of
 * info->field_mask not in remora_elem_info_field.
 *
 * On a reconnecting client a subscription outlives the connection: while the
 * client reconnects, remora_sub_next waits (up to its timeout: TIMED_OUT, the
 * subscription stays good); once reconnected it re-attaches to the ring of
 * the same name and goes on. Elements already fetched are delivered first.
 * - Same server instance: it resumes from the next sequence number wanted;
 *   what the ring overwrote meanwhile is counted in drops, exactly.
 * - New instance (the server restarted): sequence numbers start again from
 *   0. The subscription resumes from the oldest element the new ring still
 *   holds, and the gap is the new instance's elements it did not get: the
 *   first sequence number delivered from it (0 when it got them all) is
 *   added to drops. Elements the old instance committed after the last one
 *   delivered, before it died, are not counted: nobody can know them.
 *   info.seq going backwards tells a consumer the numbering restarted.
 * - The ring gone, or another shape under its name: REMORA_ERR_NOT_FOUND.
 * - The client gave up reconnecting: REMORA_ERR_DISCONNECTED.
 * A callback subscription rides through the same way (its thread waits).
 *
 * Threading: one thread at a time per subscription (with
 * remora_sub_next_ref and remora_sub_discarded).
 */
REMORA_API remora_status_t remora_sub_next(remora_sub_h sub, void *buf, size_t len,
                                           remora_elem_info_t *info, int timeout_ms);
/**
 * Zero-copy form of remora_sub_next(): *elem_p points at the element inside
 * the subscription's own buffers, valid (and unchanged) until the next call on
 * this subscription or its destruction.
 */
REMORA_API remora_status_t remora_sub_next_ref(remora_sub_h sub, const void **elem_p,
                                               remora_elem_info_t *info, int timeout_ms);
REMORA_API size_t remora_sub_elem_size(remora_sub_h sub);
/**
 * Elements that reached this subscription (fetched, or pushed by the server)
 * and were thrown away because the producer overwrote them while they
 * travelled: never delivered, and in `every` mode part of the drops once a
 * later element is delivered. A count that grows while nothing is delivered
 * means the producer outruns every copy (its ring wraps faster than one
 * element crosses the network): slow it down or give the ring more slots.
 * Call from the consumer's thread (or the callback).
 */
REMORA_API uint64_t remora_sub_discarded(remora_sub_h sub);
/** End a subscription. Threading: not from its own callback (it joins the
 *  callback's thread), and not while another thread is in remora_sub_next.
 *  A client may be disconnected first: its subscriptions then fail with
 *  REMORA_ERR_CANCELED, and the client's memory goes with the last of them. */
REMORA_API void remora_sub_destroy(remora_sub_h sub);

/**
 * Copy a remote ring's whole current state into a new local ring of the same
 * shape (on the client's context): the same sequence numbers, the elements
 * the remote ring held (less any overwritten while they were copied).
 * GPU rings: REMORA_ERR_UNSUPPORTED.
 */
REMORA_API remora_status_t remora_client_clone_ring(remora_client_h client, const char *name,
                                                    remora_ring_h *ring_p);

/** @} */

/* ---------------------------------------------------------------- signals */

/**
 * @defgroup remora_signals Signals
 *
 * A signal is a 64-bit word that remote peers set or add to, and that a
 * local CUDA stream (remora_stream_wait) or the CPU (remora_signals_wait)
 * waits on. A signal array lives in shareable host memory, page-locked and
 * mapped for every GPU when a CUDA driver is present (so streams can wait on
 * it), plain memory otherwise (CPU-only peers work the same). A server
 * exposes it by name like a region (KIND signals in `remora ls`); clients
 * update it with remora_client_signal() or the stream operations below.
 * Updates are atomic per word; those of one client are applied in order.
 * See docs/stream.md.
 * @{
 */
typedef enum remora_signal_op {
    REMORA_SIGNAL_SET = 0, /**< word = value */
    REMORA_SIGNAL_ADD = 1  /**< word += value (atomic, wraps modulo 2^64) */
} remora_signal_op_t;

typedef enum remora_cmp {
    REMORA_CMP_GEQ = 0, /**< (int64_t)(word - value) >= 0: "reached", wrap-safe (as CUDA's) */
    REMORA_CMP_EQ  = 1, /**< word == value */
    REMORA_CMP_NEQ = 2  /**< word != value */
} remora_cmp_t;

enum remora_signals_field {
    REMORA_SIGNALS_FIELD_INIT = 1u << 0
};

typedef struct remora_signals_params {
    uint64_t field_mask;
    uint64_t init; /**< every word's first value; default 0 */
} remora_signals_params_t;

/** An array of count (1..2^24) signals. */
REMORA_API remora_status_t remora_signals_create(remora_context_h context, size_t count,
                                                 const remora_signals_params_t *params,
                                                 remora_signals_h *signals_p);
/** Unexposes the array if a server still exposes it, then frees it. Streams
 *  must no longer wait on it (synchronize them first). */
REMORA_API void remora_signals_destroy(remora_signals_h signals);
REMORA_API size_t remora_signals_count(remora_signals_h signals);
/** The words in host memory (count of them), for the CPU to read. */
REMORA_API volatile uint64_t *remora_signals_host_ptr(remora_signals_h signals);
/** The words' device address, for kernels to poll (volatile loads);
 *  REMORA_ERR_UNSUPPORTED without CUDA. */
REMORA_API remora_status_t remora_signals_device_ptr(remora_signals_h signals, void **dev_p);
/** Read one word. REMORA_ERR_OUT_OF_RANGE for index >= count. */
REMORA_API remora_status_t remora_signals_read(remora_signals_h signals, size_t index,
                                               uint64_t *value_p);
/** Set or add to one word locally (atomic). */
REMORA_API remora_status_t remora_signals_update(remora_signals_h signals, size_t index,
                                                 remora_signal_op_t op, uint64_t value);
/**
 * Wait on the CPU until word index compares to value as cmp says, at most
 * timeout_ms (< 0: REMORA_DEFAULT_TIMEOUT_MS). REMORA_OK with the word's
 * value in *value_p (may be NULL), or REMORA_ERR_TIMED_OUT. Spins briefly,
 * then sleeps in steps of at most 100 µs.
 */
REMORA_API remora_status_t remora_signals_wait(remora_signals_h signals, size_t index,
                                               remora_cmp_t cmp, uint64_t value,
                                               int timeout_ms, uint64_t *value_p);
/** Expose the array under name (writable by signal operations only; plain
 *  writes into it are refused). At most one server at a time (REMORA_ERR_BUSY).
 *  Signals are served on the server's first lane only. */
REMORA_API remora_status_t remora_server_expose_signals(remora_server_h server,
                                                        const char *name,
                                                        remora_signals_h signals);
/** Set or add to a remote signal; returns once the server applied it.
 *  REMORA_ERR_OUT_OF_RANGE for a bad index, REMORA_ERR_INVALID_PARAM when
 *  name is not a signal array. */
REMORA_API remora_status_t remora_client_signal(remora_client_h client, const char *name,
                                                size_t index, remora_signal_op_t op,
                                                uint64_t value);

/** @} */

/* ---------------------------------------------------------------- stream-ordered operations */

/**
 * @defgroup remora_stream_ordered_operations Stream-ordered operations
 *
 * Operations enqueued on a CUDA stream (a CUstream / cudaStream_t passed as
 * a pointer; NULL is the legacy stream). Each call only enqueues and
 * returns; the operation runs when the stream reaches it, after the work
 * enqueued before it, and the work enqueued after it waits as each call
 * says. No kernel and no host callback is used: the stream writes a "ready"
 * word in mapped host memory, remora's proxy thread runs the operation on
 * the client's data path and writes a "done" word the stream waits for. On
 * one host, a put into GPU memory reachable by CUDA IPC (and a SET of a
 * mapped signal) is enqueued on the stream itself as a copy and a stream
 * memory write, with no proxy at all. Operations of one client on one
 * stream complete in order. They may be captured into CUDA graphs and the
 * graphs replayed (one launch of a graph at a time, as CUDA runs them).
 *
 * Errors never hang a stream: an operation that fails (peer gone, timeout)
 * still lets the stream go on; the first error is kept and returned by
 * remora_stream_error(), later operations of that client on that stream
 * fail at once (enqueue returns the error; operations already queued
 * complete without running), and the error word, if set, is written
 * before the stream goes on. Bad arguments are rejected at enqueue:
 * REMORA_ERR_INVALID_PARAM (bad stream, NULL pointers), REMORA_ERR_NOT_FOUND
 * (no such region), REMORA_ERR_OUT_OF_RANGE (range, index),
 * REMORA_ERR_READ_ONLY. Without CUDA every call is REMORA_ERR_UNSUPPORTED.
 *
 * Streams given here must be created non-blocking (cudaStreamNonBlocking)
 * or be the legacy stream of a process whose other streams are; the
 * per-thread default stream is not supported.
 * @{
 */

/** In stream order, len bytes of src (GPU or host memory) go to the region at
 *  offset. Later work on the stream may reuse src at once: a source of up to
 *  64 KiB in GPU or page-locked memory is copied by the stream into pinned
 *  memory of remora's, and the stream goes on without waiting for the write
 *  (its completion and any error show at the next operation that waits,
 *  such as remora_stream_flush()); a larger or pageable source makes the
 *  stream wait until the write completed. */
REMORA_API remora_status_t remora_stream_put(remora_client_h client, const char *region,
                                             uint64_t offset, const void *src, size_t len,
                                             void *stream);
/** The same, and then signal index of the signal array `signals` is updated,
 *  never before the data is visible at the target. */
REMORA_API remora_status_t remora_stream_put_signal(remora_client_h client, const char *region,
                                                    uint64_t offset, const void *src, size_t len,
                                                    const char *signals, size_t index,
                                                    remora_signal_op_t op, uint64_t value,
                                                    void *stream);
/** The signal alone (after everything this client put before it on the stream). */
REMORA_API remora_status_t remora_stream_signal(remora_client_h client, const char *signals,
                                                size_t index, remora_signal_op_t op,
                                                uint64_t value, void *stream);
/** Read len bytes of the region into dst (GPU or host); later stream work sees them. */
REMORA_API remora_status_t remora_stream_get(remora_client_h client, const char *region,
                                             uint64_t offset, void *dst, size_t len,
                                             void *stream);
/** Later work on the stream waits until local signal index compares as cmp says. */
REMORA_API remora_status_t remora_stream_wait(remora_signals_h signals, size_t index,
                                              remora_cmp_t cmp, uint64_t value, void *stream);
/** Later work runs only once every earlier operation of this client on this
 *  stream completed at the target. */
REMORA_API remora_status_t remora_stream_flush(remora_client_h client, void *stream);
/** The first error of this client's operations on this stream; REMORA_OK if none. */
REMORA_API remora_status_t remora_stream_error(remora_client_h client, void *stream);
/**
 * An int64 in device (or mapped host) memory that a kernel can check: it
 * stays 0 while this client's operations on this stream succeed; once one
 * fails, the (negative) status is written there before any later work of
 * the stream runs. NULL stops writing it.
 */
REMORA_API remora_status_t remora_stream_error_word(remora_client_h client, void *stream,
                                                    int64_t *word);
/**
 * Free what this client keeps for the stream (mapped words, cached
 * mappings, captured operations). The stream must have no remora operation
 * of this client left to run (synchronize it first), and graphs captured
 * from it with such operations must not be launched again.
 * Disconnecting the client does this for all its streams, except that
 * memory the streams may still touch is kept until the context is destroyed.
 */
REMORA_API remora_status_t remora_stream_release(remora_client_h client, void *stream);

/** @} */

/* ---------------------------------------------------------------- sockets */

/**
 * @defgroup remora_sockets Sockets
 *
 * Byte-stream sockets over a remora connection (docs/gpunet.md): a server
 * listens under a service name, a client connects to that name through its
 * connection, and each side then sends and receives bytes in order, like a
 * TCP socket. GPU kernels are peers too (remora_gpunet_create). Many
 * sockets share one connection; each has its own flow control (a window
 * of REMORA_SOCK_WINDOW bytes in flight), so a slow reader stalls only its
 * own socket.
 *
 * Semantics (those of POSIX stream sockets):
 * - send and recv may move fewer bytes than asked; they return the count
 *   (> 0), or a negative remora_status_t. recv returns 0 at end of stream:
 *   the peer shut down or closed and every byte it sent was read.
 * - timeout_ms bounds each call: 0 never blocks, < 0 means
 *   REMORA_DEFAULT_TIMEOUT_MS. Nothing movable in time: REMORA_ERR_TIMED_OUT.
 * - A connection that fails (peer process killed, network gone, silent past
 *   the context's peer timeout) fails every socket on it: pending and later
 *   calls return REMORA_ERR_DISCONNECTED (recv first hands out what had
 *   arrived). send after the peer closed: REMORA_ERR_DISCONNECTED.
 * - Buffers are host memory; the bytes are copied before send returns.
 * - Threading: one thread may send while another receives on the same
 *   socket; two concurrent senders (or receivers) interleave unpredictably.
 * - A listener is destroyed before its server, sockets before the client or
 *   server they run on is gone (a socket outliving its connection only
 *   returns errors, and must still be closed).
 * @{
 */
typedef struct remora_sock          *remora_sock_h;
typedef struct remora_sock_listener *remora_sock_listener_h;

/** Bytes a sender may have in flight, unread by the receiver, per socket.
 *  A server's socket not yet accepted takes 64 KiB only (one message); the
 *  rest opens once the application accepts it. */
#define REMORA_SOCK_WINDOW (4u << 20)
/** Longest service name, bytes. */
#define REMORA_SOCK_SERVICE_MAX 64

/** Accept connections to `service` (1..REMORA_SOCK_SERVICE_MAX bytes) on a
 *  server. REMORA_ERR_EXISTS when the server already has that service. */
REMORA_API remora_status_t remora_sock_listen(remora_server_h server, const char *service,
                                              remora_sock_listener_h *listener_p);
/** Stop listening; sockets not yet accepted are reset (their peers see EOF). */
REMORA_API void remora_sock_listener_destroy(remora_sock_listener_h listener);
/** The next connection, waiting up to timeout_ms. */
REMORA_API remora_status_t remora_sock_accept(remora_sock_listener_h listener, int timeout_ms,
                                              remora_sock_h *sock_p);
/** Connect to a service of the client's server. REMORA_ERR_NOT_FOUND when
 *  nothing listens under that name; REMORA_ERR_BUSY when 64 sockets of this
 *  connection (1024 of all) wait there for the server to accept them. */
REMORA_API remora_status_t remora_sock_connect(remora_client_h client, const char *service,
                                               int timeout_ms, remora_sock_h *sock_p);
/** Threading: one sender and one receiver may work on a socket at once (see
 *  the group's notes). */
REMORA_API int64_t remora_sock_send(remora_sock_h sock, const void *buf, size_t len,
                                    int timeout_ms);
REMORA_API int64_t remora_sock_recv(remora_sock_h sock, void *buf, size_t len, int timeout_ms);
/** No more sends: the peer's recv returns 0 once it has read everything; a send
 *  after it returns REMORA_ERR_INVALID_PARAM, whatever the peer did meanwhile. */
REMORA_API remora_status_t remora_sock_shutdown(remora_sock_h sock);
/** Shut down and free the socket; unread bytes are dropped. */
REMORA_API void remora_sock_close(remora_sock_h sock);

/** Readiness bits of remora_sock_poll. */
enum remora_sock_poll_bits {
    REMORA_SOCK_POLLIN  = 1u << 0, /**< recv would not block (data, end of stream or error) */
    REMORA_SOCK_POLLOUT = 1u << 1, /**< send would not block */
    REMORA_SOCK_POLLERR = 1u << 2  /**< the socket failed (output only) */
};

/** Wait up to timeout_ms until one of n sockets is ready for what events[i]
 *  asks; writes revents[i] for every socket and returns how many are ready
 *  (0 on timeout), or a negative status. */
REMORA_API int remora_sock_poll(remora_sock_h *socks, const unsigned *events, unsigned *revents,
                                unsigned n, int timeout_ms);

/** @} */

/* ---------------------------------------------------------------- GPU sockets */

/**
 * @defgroup remora_gpu_sockets GPU sockets
 *
 * GPU sockets (docs/gpunet.md): kernels connect, accept, send and receive
 * through include/remora/device/socket.cuh; a proxy thread of this context
 * serves their command queues in pinned host memory mapped for the device.
 * Peers: remora sockets ("remora://HOST:PORT/SERVICE" to connect,
 * "remora:SERVICE" to listen on params->server), plain TCP ("tcp://HOST:PORT"),
 * and other GPU sockets (a GPU listening through remora or TCP).
 * @{
 */
typedef struct remora_gpunet *remora_gpunet_h;

enum remora_gpunet_field {
    REMORA_GPUNET_FIELD_SERVER     = 1u << 0,
    REMORA_GPUNET_FIELD_MAX_SOCKS  = 1u << 1,
    REMORA_GPUNET_FIELD_RING_SIZE  = 1u << 2,
    REMORA_GPUNET_FIELD_TIMEOUT_MS = 1u << 3,
    REMORA_GPUNET_FIELD_HOST_QUEUES = 1u << 4
};

typedef struct remora_gpunet_params {
    uint64_t        field_mask;
    /** Where "remora:SERVICE" binds listen. Default none (such binds fail
     *  with REMORA_ERR_UNSUPPORTED). */
    remora_server_h server;
    /** Sockets open at once, 1..4096. Default 256. */
    unsigned        max_socks;
    /** Bytes of each socket's send and receive ring, a power of two,
     *  4 KiB..64 MiB. Default 1 MiB. */
    size_t          ring_size;
    /** The clock budget of every blocking device call that gives none.
     *  Default REMORA_DEFAULT_TIMEOUT_MS. */
    unsigned        timeout_ms;
    /** Tests only: queues in ordinary host memory, no CUDA (the device side
     *  is then played by CPU code, see tests/unit/test_gpunet_queue.c). */
    int             host_queues;
} remora_gpunet_params_t;

/** Start a proxy for GPU `device` (REMORA_ERR_UNSUPPORTED without CUDA). */
REMORA_API remora_status_t remora_gpunet_create(remora_context_h context, int device,
                                                const remora_gpunet_params_t *params,
                                                remora_gpunet_h *net_p);
/**
 * The device-side handle to pass to kernels (a `rg_net_t *` of socket.cuh):
 * a device pointer, valid until remora_gpunet_destroy().
 */
REMORA_API void *remora_gpunet_device_handle(remora_gpunet_h net);
/** Counters of a proxy (remora_gpunet_stats), by the path the bytes took. */
enum remora_gpunet_stats_field {
    REMORA_GPUNET_STATS_FIELD_RING_BYTES     = 1u << 0, /**< sent from the send rings (kernels copied) */
    REMORA_GPUNET_STATS_FIELD_BOUNCE_SENDS   = 1u << 1, /**< sends the proxy copied out of GPU memory */
    REMORA_GPUNET_STATS_FIELD_BOUNCE_BYTES   = 1u << 2, /**< ... their bytes */
    REMORA_GPUNET_STATS_FIELD_BOUNCE_TO_RING = 1u << 3  /**< offered sends sent back to the ring
                                                             (bounce buffer busy, peer stalled) */
};

typedef struct remora_gpunet_stats {
    /** In: the fields wanted (REMORA_GPUNET_STATS_FIELD_*). Out: those written. */
    uint64_t field_mask;
    uint64_t ring_bytes, bounce_sends, bounce_bytes, bounce_to_ring;
} remora_gpunet_stats_t;

/** Fill the fields of *stats named in stats->field_mask. Any thread; no lock
 *  (relaxed counters: each exact, the set not one snapshot). */
REMORA_API remora_status_t remora_gpunet_stats(remora_gpunet_h net, remora_gpunet_stats_t *stats);

/**
 * Stop the proxy. Every socket fails: device calls in flight or later return
 * a negative status within their budget, never hang. The queue memory is kept
 * until the process ends, as kernels may still read it.
 */
REMORA_API void remora_gpunet_destroy(remora_gpunet_h net);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* REMORA_REMORA_H */
