/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Wire format. Design notes:
 * - Every remora message is one UCX active message. Its AM header carries the
 *   fixed part (rm_hdr_t, layout per type, see docs/protocol.md); its AM data
 *   carries the variable body (names, region lists, payload).
 * - Everything is explicit little-endian; nothing is a raw C struct.
 * - Decoders never trust a length: each field is bounds-checked against the
 *   buffer and the protocol maximum; a failure is RM_WIRE_EINVAL, never a read
 *   past the end.
 */
#ifndef RM_WIRE_WIRE_H
#define RM_WIRE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

#define RM_PROTO_VERSION   2u
#define RM_HELLO_MAGIC     0x41524d52u /* "RMRA" */
#define RM_HOST_ID_LEN     16
#define RM_NONCE_LEN       32
#define RM_MAC_LEN         32
#define RM_RKEY_MAX        8192
#define RM_LIST_MAX        65536
#define RM_HDR_FIXED_MAX   48
/* An encrypted connection's messages carry a u64 counter and a 16-byte tag
 * after the fixed part (engine/seal.h, docs/protocol.md §3.8). */
#define RM_SEAL_TAG_LEN    16
#define RM_HDR_SEAL_EXT    (8 + RM_SEAL_TAG_LEN)
#define RM_HDR_MAX         (RM_HDR_FIXED_MAX + RM_HDR_SEAL_EXT)
/* Header byte 2 (flags): the seal extension follows the fixed part. */
#define RM_HDR_FLAG_SEALED 0x01u
#define RM_BOOT_MAGIC      0x42524d52u /* "RMRB" */
#define RM_BOOT_VERSION    2u
#define RM_BOOT_HDR_LEN    12u
#define RM_WORKER_ADDR_MAX 65536u
#define RM_BOOT_PAYLOAD_MAX (RM_WORKER_ADDR_MAX + 4u)

typedef enum rm_msg_type {
    RM_MSG_HELLO        = 1,
    RM_MSG_HELLO_REPLY  = 2,
    RM_MSG_AUTH         = 3,
    RM_MSG_AUTH_REPLY   = 4,
    RM_MSG_LIST         = 5,
    RM_MSG_LIST_REPLY   = 6,
    RM_MSG_LOOKUP       = 7,
    RM_MSG_LOOKUP_REPLY = 8,
    RM_MSG_READ         = 9,
    RM_MSG_READ_REPLY   = 10,
    RM_MSG_WRITE        = 11,
    RM_MSG_WRITE_REPLY  = 12,
    RM_MSG_PING         = 13,
    RM_MSG_PONG         = 14,
    RM_MSG_EVENT        = 15,
    RM_MSG_EVENT_ACK    = 16,
    RM_MSG_ERROR        = 17,
    RM_MSG_RING_WAIT    = 18,
    RM_MSG_RING_NOTIFY  = 19,
    RM_MSG_LANES        = 20,
    RM_MSG_LANES_REPLY  = 21,
    RM_MSG_SIGNAL       = 22, /* region_id, kind = op, offset = index, length = value */
    RM_MSG_SIGNAL_REPLY = 23,
    RM_MSG_WRITE_SIGNAL = 24, /* a WRITE whose body starts with rm_sig_desc (answered WRITE_REPLY) */
    RM_MSG_TYPE_MAX     = 24,
    /* Counters (docs/protocol.md §15). Outside 1..RM_MSG_TYPE_MAX, so that
     * their number does not move RM_MSG_TYPE_MAX; a server that answers
     * STATS says so in its hello (RM_HELLO_STATS). */
    RM_MSG_STATS        = 25,
    RM_MSG_STATS_REPLY  = 31
} rm_msg_type_t;

/* Byte-stream sockets (src/remote/sock.c, docs/gpunet.md). Kept apart from
 * the list above: numbers 26..31 are theirs. region_id is the socket id the
 * receiver knows, offset the sender's own id, length a byte count (CONNECT:
 * the sender's receive window; DATA: the payload; CREDIT: bytes consumed),
 * kind flags. */
enum {
    RM_MSG_SOCK_CONNECT       = 26, /* body: service name; reply: u32 id, u64 window */
    RM_MSG_SOCK_CONNECT_REPLY = 27,
    RM_MSG_SOCK_DATA          = 28, /* body: the bytes */
    RM_MSG_SOCK_FIN           = 29, /* the sender writes no more (kind 1: and reads no more) */
    RM_MSG_SOCK_CREDIT        = 30, /* the receiver consumed `length` more bytes */
    RM_MSG_SOCK_FIRST         = 26,
    RM_MSG_SOCK_LAST          = 30
};
#define RM_MSG_IS_SOCK(t) ((t) >= RM_MSG_SOCK_FIRST && (t) <= RM_MSG_SOCK_LAST)
#define RM_MSG_IS_STATS(t) ((t) == RM_MSG_STATS || (t) == RM_MSG_STATS_REPLY)

/* Event kinds carried by RM_MSG_EVENT. */
enum { RM_EVENT_CHANGED = 1, RM_EVENT_REMOVED = 2 };

/* Region flags on the wire. */
enum { RM_REGION_WIRE_MAPPABLE = 1u << 0, RM_REGION_WIRE_RING = 1u << 1,
       RM_REGION_WIRE_IPC = 1u << 2, /* a CUDA IPC handle follows */
       RM_REGION_WIRE_SIGNALS = 1u << 3, /* an array of 64-bit signals */
       /* GPU memory registered with the server's UCX (a UCX with CUDA):
        * READ/WRITE move it straight from/to the GPU through UCX, unless
        * the request asks for RM_RW_STAGED */
       RM_REGION_WIRE_UCX = 1u << 4 };

/* READ/WRITE kind: STAGED: the server copies a GPU region's bytes through
 * its pinned staging buffers even where its UCX could move them directly
 * (REMORA_PATH=staging; 0 from clients that predate it). GPU_BUF: the
 * client's buffer is GPU memory that its UCX moves, so a READ's reply from
 * a GPU region may go by rendezvous GPU to GPU (0 from older clients: UCX
 * chooses). Other bits are ignored, as the byte was reserved. */
enum { RM_RW_STAGED = 1u << 0, RM_RW_GPU_BUF = 1u << 1 };

/* Signal operations (RM_MSG_SIGNAL kind, rm_sig_desc op). */
enum { RM_SIG_SET = 0, RM_SIG_ADD = 1 };

/* The signal a WRITE_SIGNAL applies once its data landed: the first
 * RM_SIG_DESC_LEN bytes of its body (u32 region id, u8 op, 3 zero bytes,
 * u64 index, u64 value); the data follows. */
#define RM_SIG_DESC_LEN 24
typedef struct rm_sig_desc {
    uint32_t region_id;
    uint8_t  op;
    uint64_t index;
    uint64_t value;
} rm_sig_desc_t;

void rm_sig_desc_encode(uint8_t out[RM_SIG_DESC_LEN], const rm_sig_desc_t *d);
/* 0, or -1 when short or malformed (unknown op, non-zero padding). */
int  rm_sig_desc_decode(const void *buf, size_t len, rm_sig_desc_t *d);
#define RM_IPC_HANDLE_LEN 64

/* Subscription modes carried by RING_WAIT (kind). */
enum { RM_RING_EVERY = 0, RM_RING_LATEST = 1 };
/* RING_WAIT kind flag: the subscriber takes elements of any size in the
 * answer, as whole slots (stamp, element, padding) sent from the ring by
 * rendezvous; `length` is then its credit in bytes (docs/ring.md, "Fan-out"). */
#define RM_RING_BULK 0x80u
#define RM_RING_MODE(kind) ((kind) & 0x7fu)

/* The fixed part of a message; which fields travel depends on the type. */
typedef struct rm_hdr {
    uint8_t  type;
    int32_t  status;     /* replies */
    uint64_t req_id;     /* requests and their replies */
    uint32_t region_id;  /* READ, WRITE, EVENT, RING_* */
    uint8_t  kind;       /* EVENT; RING_WAIT: mode */
    uint64_t offset;     /* READ, WRITE; RING_WAIT: wanted seq; RING_NOTIFY: first seq inline */
    uint64_t length;     /* READ, WRITE; RING_WAIT: inline bytes; RING_NOTIFY: elements inline */
    uint64_t generation; /* EVENT */
    uint64_t size;       /* EVENT; RING_NOTIFY: head */
    uint64_t epoch;      /* EVENT, EVENT_ACK */
    /* Encrypted connections (RM_HDR_FLAG_SEALED): the message counter and
     * the AEAD tag over the body, with the fixed part as additional data. */
    uint8_t  sealed;
    uint64_t seal_counter;
    uint8_t  seal_tag[RM_SEAL_TAG_LEN];
} rm_hdr_t;

/* Encode into buf (RM_HDR_MAX bytes); returns the encoded length (the fixed
 * part, plus RM_HDR_SEAL_EXT when hdr->sealed). */
size_t rm_hdr_encode(const rm_hdr_t *hdr, uint8_t *buf);
/* The length of a type's fixed part (what the seal authenticates). */
size_t rm_hdr_fixed_len(unsigned type);
/* Decode; 0 on success, -1 on a short/long header or unknown type. */
int rm_hdr_decode(const void *buf, size_t len, rm_hdr_t *hdr);
const char *rm_msg_type_name(unsigned type);

/* ------------------------------------------------------------- buffers */

typedef struct rm_wbuf {
    uint8_t *data;
    size_t   len, cap;
    int      failed; /* an allocation failed; the content is unusable */
} rm_wbuf_t;

void rm_wbuf_init(rm_wbuf_t *w);
void rm_wbuf_free(rm_wbuf_t *w);
void rm_wbuf_u8(rm_wbuf_t *w, uint8_t v);
void rm_wbuf_u16(rm_wbuf_t *w, uint16_t v);
void rm_wbuf_u32(rm_wbuf_t *w, uint32_t v);
void rm_wbuf_u64(rm_wbuf_t *w, uint64_t v);
void rm_wbuf_bytes(rm_wbuf_t *w, const void *p, size_t n);
void rm_wbuf_name(rm_wbuf_t *w, const char *name); /* u16 length + bytes */

typedef struct rm_rbuf {
    const uint8_t *p;
    size_t         left;
    int            failed; /* a read ran past the end or a check failed */
} rm_rbuf_t;

void     rm_rbuf_init(rm_rbuf_t *r, const void *data, size_t len);
uint8_t  rm_rbuf_u8(rm_rbuf_t *r);
uint16_t rm_rbuf_u16(rm_rbuf_t *r);
uint32_t rm_rbuf_u32(rm_rbuf_t *r);
uint64_t rm_rbuf_u64(rm_rbuf_t *r);
/* Points into the buffer; NULL (and failed) when fewer than n bytes remain. */
const uint8_t *rm_rbuf_bytes(rm_rbuf_t *r, size_t n);
/* A u16-prefixed name of 1..REMORA_NAME_MAX bytes without NUL, copied into out. */
void rm_rbuf_name(rm_rbuf_t *r, char out[REMORA_NAME_MAX + 1]);

/* ------------------------------------------------------------- bodies */

typedef struct rm_hello {
    uint16_t proto_min, proto_max; /* client: supported range; server: chosen in both */
    uint16_t flags;                /* server: RM_HELLO_AUTH_REQUIRED */
    uint8_t  host_id[RM_HOST_ID_LEN];
    uint8_t  nonce[RM_NONCE_LEN];
    uint64_t instance;             /* server: random per server object (0 from clients):
                                      a client tells a restarted server from the same one */
    uint32_t ucx_version;          /* the sender's UCX runtime, major << 16 | minor */
    /* The sender's UCX TCP segment sizes in bytes, 0 where not known (no
     * TCP transport, a setting not understood). Appended after the first
     * 70 bytes; tcp_segs_sent is 0 for a peer that sends none (older). */
    uint32_t tcp_tx_seg, tcp_rx_seg;
    uint8_t  tcp_segs_sent;
} rm_hello_t;

/* AUTH_REQUIRED (server): a token is due. ENCRYPT (either side): this side
 * encrypts the connection; both must agree (docs/protocol.md §6.3). */
enum { RM_HELLO_AUTH_REQUIRED = 1u << 0, RM_HELLO_ENCRYPT = 1u << 1 };
/* STATS (server): it answers RM_MSG_STATS (older servers do not set it). */
enum { RM_HELLO_STATS = 1u << 2 };

void rm_hello_encode(rm_wbuf_t *w, const rm_hello_t *h);
int  rm_hello_decode(const void *buf, size_t len, rm_hello_t *h);

/* A region as described to clients. rkey points into the decoded buffer. */
typedef struct rm_region_desc {
    uint32_t       region_id;
    char           name[REMORA_NAME_MAX + 1];
    uint64_t       size;
    uint8_t        mem_type;
    uint8_t        access;
    uint16_t       flags;       /* RM_REGION_WIRE_* */
    uint64_t       generation;
    uint64_t       remote_addr; /* base address for RMA */
    uint32_t       rkey_len;
    const uint8_t *rkey;
    /* RM_REGION_WIRE_MAPPABLE: the server's memory file, for same-host
     * clients that may open /proc/PID/fd/FD (read-only regions: sealed
     * against writable mappings) and map it at map_offset. */
    uint32_t       map_pid, map_fd;
    uint64_t       map_offset;
    /* mem_type CUDA only: */
    int32_t        device;      /* the server's device ordinal */
    uint8_t        ipc[RM_IPC_HANDLE_LEN]; /* RM_REGION_WIRE_IPC: handle of the allocation */
    uint64_t       ipc_offset;  /* where the region starts in that allocation */
} rm_region_desc_t;

void rm_region_desc_encode(rm_wbuf_t *w, const rm_region_desc_t *d);
void rm_region_desc_decode(rm_rbuf_t *r, rm_region_desc_t *d);

/* LIST_REPLY body: u32 count, then count descriptors (without rkeys). */
int rm_list_decode(const void *buf, size_t len, rm_region_desc_t **descs_p, size_t *count_p);

/* A body that is just one name (LOOKUP, EVENT). */
int rm_name_decode(const void *buf, size_t len, char out[REMORA_NAME_MAX + 1]);

/* Checks a region name: 1..REMORA_NAME_MAX bytes, printable, no NUL. */
int rm_name_valid(const char *name);

/* Connections one client may spread its transfers over, its first included. */
#define RM_LANES_MAX 8

/* LANES_REPLY body: u16 count (< RM_LANES_MAX), then count u16 non-zero TCP
 * ports: the server's lane listeners, on the host the client reached. */
void rm_lanes_encode(rm_wbuf_t *w, const uint16_t *ports, unsigned count);
int  rm_lanes_decode(const void *buf, size_t len, uint16_t ports[RM_LANES_MAX - 1],
                     unsigned *count_p);

/*
 * STATS_REPLY body (docs/protocol.md §15): u64 mask, then one u64 per set bit
 * (lowest first): the server's counters (remora_server_stats_t); u32 count
 * (<= RM_STATS_CONNS_MAX), then per connection: u64 mask, then per set bit
 * (lowest first) a u64, except bit 1 (the peer address), a u16 length
 * (0..63) and that many bytes. Bits a decoder does not know are u64 values
 * it skips; trailing bytes are ignored (later versions may append).
 */
#define RM_STATS_CONNS_MAX 65536u
#define RM_STATS_PEER_BIT  1u
#define RM_STATS_PEER_MAX  63u
typedef struct rm_stats_conn {
    uint64_t mask;
    char     peer[RM_STATS_PEER_MAX + 1];
    uint64_t v[64]; /* by bit; v[RM_STATS_PEER_BIT] unused */
} rm_stats_conn_t;

void rm_stats_encode_server(rm_wbuf_t *w, uint64_t mask, const uint64_t v[64]);
void rm_stats_encode_conn(rm_wbuf_t *w, const rm_stats_conn_t *c);
/* 0, or -1 when malformed. *conns_p (free()) holds min(count, max_conns) entries. */
int  rm_stats_decode(const void *buf, size_t len, uint64_t *mask_p, uint64_t v[64],
                     rm_stats_conn_t **conns_p, size_t max_conns, uint32_t *count_p);

/* ------------------------------------------------------------- bootstrap */

/*
 * Bootstrap frames on the TCP socket (docs/protocol.md §1): u32 magic, u16
 * version, u8 type, u8 flags, u32 length, then that many payload bytes
 * (0..RM_BOOT_PAYLOAD_MAX). The handshake runs entirely on these frames, so
 * no UCX endpoint exists for a peer before it authenticated; afterwards the
 * socket carries heartbeats only.
 */
typedef enum rm_boot_type {
    RM_BOOT_HELLO         = 1, /* client: rm_hello */
    RM_BOOT_HELLO_REPLY   = 2, /* server: i32 status, rm_hello */
    RM_BOOT_AUTH          = 3, /* client: its proof (RM_MAC_LEN) */
    RM_BOOT_AUTH_REPLY    = 4, /* server: i32 status, its proof when OK */
    RM_BOOT_CONNECT       = 5, /* client: its UCX worker address */
    RM_BOOT_CONNECT_REPLY = 6, /* server: i32 status, its worker address or (CM) a u16 port */
    RM_BOOT_HEARTBEAT     = 7, /* either side, empty, once the handshake is done */
    RM_BOOT_TYPE_MAX      = 7
} rm_boot_type_t;

/* RM_BOOT_CM on CONNECT: the client can use UCX's connection manager; on
 * CONNECT_REPLY: the payload after the status is a port to connect to (u16
 * LE) and a ticket, which the client's first message on that connection
 * (AUTH) carries back: anyone can reach the port, only the client that
 * passed the handshake knows the ticket. */
enum { RM_BOOT_CM = 1u << 0 };
#define RM_CM_TICKET_LEN RM_NONCE_LEN /* as random as a nonce: rm_auth_nonce makes it */
#define RM_CM_REPLY_LEN  (2 + RM_CM_TICKET_LEN)

typedef struct rm_boot_frame {
    uint8_t        type, flags;
    const uint8_t *payload; /* points into the parsed buffer */
    uint32_t       len;
} rm_boot_frame_t;

void rm_boot_encode(rm_wbuf_t *w, unsigned type, unsigned flags, const void *payload,
                    uint32_t len);
/* 1: need more bytes; 0: a complete frame (used_p bytes of buf); -1: not a
 * remora bootstrap frame (wrong magic or version, unknown type or flags,
 * length out of range). */
int rm_boot_parse(const void *buf, size_t len, rm_boot_frame_t *f, size_t *used_p);

/* Reply payloads start with an i32 status; these split one off. */
void rm_boot_reply_encode(rm_wbuf_t *w, unsigned type, unsigned flags, remora_status_t status,
                          const void *payload, uint32_t len);
int  rm_boot_reply_split(const rm_boot_frame_t *f, remora_status_t *status_p,
                         const uint8_t **rest_p, uint32_t *rest_len_p);

#endif
