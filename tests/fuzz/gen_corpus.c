/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the fuzz_wire seed corpus: a few valid encodings of each kind, each
 * file prefixed with the mode byte fuzz_wire uses to pick its decoder.
 *
 *   fuzz_wire_corpus DIR
 *
 * The files in tests/fuzz/corpus/ were made with it; run it again after a
 * wire format change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

enum { MODE_HDR, MODE_HELLO, MODE_DESC, MODE_LIST, MODE_NAME, MODE_READER, MODE_BOOT,
       MODE_RING, MODE_LANES };

static const char *g_dir;
static int g_errors;

static void put(const char *name, unsigned mode, const void *body, size_t len)
{
    char path[4096];
    FILE *f;
    unsigned char m = (unsigned char)mode;

    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    if ((f = fopen(path, "wb")) == NULL || fwrite(&m, 1, 1, f) != 1 ||
        (len && fwrite(body, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        g_errors++;
    }
}

static void put_wbuf(const char *name, unsigned mode, rm_wbuf_t *w)
{
    if (w->failed) {
        fprintf(stderr, "%s: out of memory\n", name);
        g_errors++;
    } else {
        put(name, mode, w->data, w->len);
    }
    rm_wbuf_free(w);
}

static void hdr(const char *name, rm_hdr_t h)
{
    uint8_t buf[RM_HDR_MAX];
    put(name, MODE_HDR, buf, rm_hdr_encode(&h, buf));
}

static rm_region_desc_t desc(const char *name, uint32_t id, const uint8_t *rkey, uint32_t rkey_len)
{
    rm_region_desc_t d = {
        .region_id   = id,
        .size        = 4096u * (id + 1),
        .mem_type    = (uint8_t)(id % 2),
        .access      = REMORA_ACCESS_READ | (id % 2 ? REMORA_ACCESS_WRITE : 0),
        .flags       = id % 2 ? 0 : RM_REGION_WIRE_MAPPABLE, /* host memory only */
        .map_pid     = 4242,
        .map_fd      = 7 + id,
        .map_offset  = 4096u * id,
        .generation  = id + 1,
        .remote_addr = 0x7f0000001000ull + id * 0x10000u,
        .rkey_len    = rkey_len,
        .rkey        = rkey,
    };
    snprintf(d.name, sizeof(d.name), "%s", name);
    return d;
}

static void le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A ring image written out by hand (docs/ring.md): header, then capacity
 * slots of stride bytes, each a u64 stamp and the element. Elements
 * [lo, head) are stamped complete (2s+2) and hold bytes derived from s. */
static size_t ring_image(uint8_t *img, uint64_t elem, uint64_t cap, uint64_t head,
                         uint64_t claimed, uint64_t first)
{
    uint64_t stride = 8 + (elem + 7) / 8 * 8;
    uint64_t lo     = head > cap ? head - cap : 0;
    size_t len      = (size_t)(64 + cap * stride);

    memset(img, 0, len);
    memcpy(img, "RRNG", 4);
    img[4] = 1;  /* version */
    img[6] = 64; /* header length */
    le64_put(img + 8, elem);
    le64_put(img + 16, cap);
    le64_put(img + 24, stride);
    le64_put(img + 32, head);
    le64_put(img + 40, claimed);
    le64_put(img + 48, first);
    for (uint64_t s = lo < first ? first : lo; s < head; s++) {
        uint8_t *slot = img + 64 + (s % cap) * stride;
        le64_put(slot, 2 * s + 2);
        for (uint64_t i = 0; i < elem; i++)
            slot[8 + i] = (uint8_t)(s * 31 + i);
    }
    return len;
}

int main(int argc, char **argv)
{
    rm_wbuf_t w;
    uint8_t rkey[24];

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    for (size_t i = 0; i < sizeof(rkey); i++)
        rkey[i] = (uint8_t)(0xa0 + i);

    /* Headers: one of each layout, and a reply with a status. */
    hdr("hdr-ping", (rm_hdr_t){.type = RM_MSG_PING, .req_id = 1});
    hdr("hdr-hello-reply", (rm_hdr_t){.type = RM_MSG_HELLO_REPLY, .status = REMORA_ERR_VERSION,
                                      .req_id = 2});
    hdr("hdr-read", (rm_hdr_t){.type = RM_MSG_READ, .req_id = 3, .region_id = 7,
                               .offset = 4096, .length = 1 << 20});
    hdr("hdr-write", (rm_hdr_t){.type = RM_MSG_WRITE, .req_id = 4, .region_id = 8,
                                .offset = 0, .length = 64});
    hdr("hdr-event-changed", (rm_hdr_t){.type = RM_MSG_EVENT, .region_id = 9,
                                        .kind = RM_EVENT_CHANGED, .generation = 2,
                                        .size = 8192, .epoch = 5});
    hdr("hdr-event-removed", (rm_hdr_t){.type = RM_MSG_EVENT, .region_id = 9,
                                        .kind = RM_EVENT_REMOVED, .epoch = 6});
    hdr("hdr-event-ack", (rm_hdr_t){.type = RM_MSG_EVENT_ACK, .epoch = 6});

    /* Lanes: none, and three ports. */
    static const uint16_t lane_ports[] = {40001, 40002, 65535};
    rm_wbuf_init(&w);
    rm_lanes_encode(&w, lane_ports, 0);
    put_wbuf("lanes-none", MODE_LANES, &w);
    rm_wbuf_init(&w);
    rm_lanes_encode(&w, lane_ports, 3);
    put_wbuf("lanes-three", MODE_LANES, &w);

    /* Hellos: a client's, a server's that asks for auth, one with a tail. */
    rm_hello_t h = {.proto_min = 2, .proto_max = 2, .instance = 0x1122334455667788ull,
                    .ucx_version = 1u << 16 | 13u};
    memset(h.host_id, 0x11, sizeof(h.host_id));
    memset(h.nonce, 0x22, sizeof(h.nonce));
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    put_wbuf("hello-client", MODE_HELLO, &w);
    h.flags = RM_HELLO_AUTH_REQUIRED;
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    put_wbuf("hello-server-auth", MODE_HELLO, &w);
    h.proto_max = 3;
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    rm_wbuf_u32(&w, 0xfeedf00d);
    put_wbuf("hello-trailing", MODE_HELLO, &w);

    /* Descriptors: without an rkey, with one, and one followed by more bytes. */
    rm_region_desc_t d = desc("weights", 0, NULL, 0);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    put_wbuf("desc-no-rkey", MODE_DESC, &w);
    d = desc("kv-cache/layer-0", 1, rkey, sizeof(rkey));
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    put_wbuf("desc-rkey", MODE_DESC, &w);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    rm_wbuf_u16(&w, 0xbeef);
    put_wbuf("desc-trailing", MODE_DESC, &w);

    /* The largest rkey allowed, with bytes after it (so that one mutation of
     * rkey_len probes the RM_RKEY_MAX boundary). */
    static uint8_t big_rkey[RM_RKEY_MAX + 8];
    memset(big_rkey, 0x5a, sizeof(big_rkey));
    d = desc("big-rkey", 2, big_rkey, RM_RKEY_MAX);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    rm_wbuf_bytes(&w, big_rkey, 8);
    put_wbuf("desc-rkey-max-trailing", MODE_DESC, &w);

    /* Lists of 0, 1 and 3 descriptors. */
    static const char *names[] = {"a", "region two", "third.region"};
    for (unsigned count = 0; count <= 3; count += count ? 2 : 1) {
        char fname[32];
        rm_wbuf_init(&w);
        rm_wbuf_u32(&w, count);
        for (unsigned i = 0; i < count; i++) {
            d = desc(names[i], i, NULL, 0);
            rm_region_desc_encode(&w, &d);
        }
        snprintf(fname, sizeof(fname), "list-%u", count);
        put_wbuf(fname, MODE_LIST, &w);
    }

    /* Name bodies: shortest, typical, longest. */
    char longest[REMORA_NAME_MAX + 1];
    memset(longest, 'n', REMORA_NAME_MAX);
    longest[REMORA_NAME_MAX] = '\0';
    const char *bodies[][2] = {{"name-short", "x"},
                               {"name-typical", "model/layer.3 weights"},
                               {"name-longest", longest}};
    for (size_t i = 0; i < 3; i++) {
        rm_wbuf_init(&w);
        rm_wbuf_name(&w, bodies[i][1]);
        put_wbuf(bodies[i][0], MODE_NAME, &w);
    }

    /* Reader programs: op count, ops (u8, u16, u32, u64, bytes, name), data. */
    static const uint8_t reader_ints[] = {4, 0, 1, 2, 3, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
                                          0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    put("reader-ints", MODE_READER, reader_ints, sizeof(reader_ints));
    static const uint8_t reader_name[] = {3, 5, 16 /* bytes(2) */, 0, 3, 0, 'a', 'b', 'c', 0xde, 0xad, 7};
    put("reader-name", MODE_READER, reader_name, sizeof(reader_name));

    /* Rings: a header alone (its slots are not there), a whole wrapped image
     * of 3 slots of 13-byte elements, and a clone's image (first > 0) taken
     * while the producer was writing (claimed = head + 1, that slot's stamp
     * odd). */
    static uint8_t img[64 + 4 * 24];
    ring_image(img, 13, 3, 10, 11, 4);
    put("ring-hdr", MODE_RING, img, 64);
    put("ring-image", MODE_RING, img, ring_image(img, 13, 3, 5, 5, 0));
    size_t len = ring_image(img, 8, 4, 9, 10, 6);
    le64_put(img + 64 + (9 % 4) * 16, 2 * 9 + 1);
    put("ring-image-clone-claimed", MODE_RING, img, len);

    /* Bootstrap frames: one of each type, a whole handshake in one input. */
    {
        rm_hello_t bh = {.proto_min = 2, .proto_max = 2};
        uint8_t mac[RM_MAC_LEN], addr[40];
        rm_wbuf_t hb;
        memset(mac, 0xab, sizeof(mac));
        memset(addr, 0x5c, sizeof(addr));
        addr[0] = 0x02;
        rm_wbuf_init(&hb);
        rm_hello_encode(&hb, &bh);
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_HELLO, 0, hb.data, (uint32_t)hb.len);
        put_wbuf("boot-hello", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_reply_encode(&w, RM_BOOT_HELLO_REPLY, 0, REMORA_OK, hb.data, (uint32_t)hb.len);
        put_wbuf("boot-hello-reply", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_AUTH, 0, mac, RM_MAC_LEN);
        put_wbuf("boot-auth", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_reply_encode(&w, RM_BOOT_AUTH_REPLY, 0, REMORA_ERR_AUTH, NULL, 0);
        put_wbuf("boot-auth-reply", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_CONNECT, RM_BOOT_CM, addr, sizeof(addr));
        put_wbuf("boot-connect", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_reply_encode(&w, RM_BOOT_CONNECT_REPLY, RM_BOOT_CM, REMORA_OK, "\x39\x30", 2);
        put_wbuf("boot-connect-reply-cm", MODE_BOOT, &w);
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
        put_wbuf("boot-heartbeat", MODE_BOOT, &w);
        rm_wbuf_free(&hb);
    }
    return g_errors ? 1 : 0;
}
