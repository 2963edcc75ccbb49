/* SPDX-License-Identifier: BSD-3-Clause */
/* A raw bootstrap peer for tests: see raw_boot.h. */
#include "raw_boot.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h" /* rm_parse_addr */
#include "remote/auth.h"

double rb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int rb_dial(rb_sock_t *s, const char *addr) { return rb_dial_from(s, addr, NULL); }

int rb_dial_from(rb_sock_t *s, const char *addr, const char *src_ip)
{
    struct sockaddr_storage ss;
    struct sockaddr_in src = {.sin_family = AF_INET};
    socklen_t len;

    memset(s, 0, sizeof(*s));
    s->fd = -1;
    if (rm_parse_addr(addr, &ss, &len) != REMORA_OK ||
        (src_ip && (ss.ss_family != AF_INET || inet_pton(AF_INET, src_ip, &src.sin_addr) != 1)))
        return -1;
    s->cap = RM_BOOT_HDR_LEN + RM_BOOT_PAYLOAD_MAX + 4096;
    if ((s->buf = malloc(s->cap)) == NULL)
        return -1;
    if ((s->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        (src_ip && bind(s->fd, (struct sockaddr *)&src, sizeof(src)) != 0) ||
        connect(s->fd, (struct sockaddr *)&ss, len) != 0) {
        rb_close(s);
        return -1;
    }
    s->last_tx_ms = rb_now_ms();
    return 0;
}

void rb_close(rb_sock_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

void rb_frame_free(rb_frame_t *f)
{
    free(f->payload);
    memset(f, 0, sizeof(*f));
}

int rb_send_bytes(rb_sock_t *s, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = send(s->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    s->last_tx_ms = rb_now_ms();
    return 0;
}

int rb_send_frame(rb_sock_t *s, unsigned type, unsigned flags, const void *payload, uint32_t len)
{
    rm_wbuf_t w;
    int rc;

    rm_wbuf_init(&w);
    rm_boot_encode(&w, type, flags, payload, len);
    rc = w.failed ? -1 : rb_send_bytes(s, w.data, w.len);
    rm_wbuf_free(&w);
    return rc;
}

/* One frame out of the buffer: 0 taken, 1 incomplete, -1 garbage. */
static int take_frame(rb_sock_t *s, rb_frame_t *f)
{
    rm_boot_frame_t bf;
    size_t used;
    int r = rm_boot_parse(s->buf, s->have, &bf, &used);

    if (r != 0)
        return r;
    f->type    = bf.type;
    f->flags   = bf.flags;
    f->len     = bf.len;
    f->payload = NULL;
    if (bf.len) {
        f->payload = malloc(bf.len);
        if (f->payload == NULL)
            return -1;
        memcpy(f->payload, bf.payload, bf.len);
    }
    memmove(s->buf, s->buf + used, s->have - used);
    s->have -= used;
    return 0;
}

int rb_recv(rb_sock_t *s, int ms, bool skip_hb, rb_frame_t *f)
{
    double deadline = rb_now_ms() + ms;

    memset(f, 0, sizeof(*f));
    for (;;) {
        int r = take_frame(s, f);
        if (r == 0) {
            if (skip_hb && f->type == RM_BOOT_HEARTBEAT) {
                s->heartbeats_rx++;
                rb_frame_free(f);
                continue;
            }
            return 0;
        }
        if (r < 0 || s->have == s->cap)
            return -1;
        ssize_t got = recv(s->fd, s->buf + s->have, s->cap - s->have, MSG_DONTWAIT);
        if (got > 0) {
            s->have += (size_t)got;
            continue;
        }
        if (got == 0 || (errno != EAGAIN && errno != EINTR))
            return -1;
        double left = deadline - rb_now_ms();
        if (left <= 0)
            return -2;
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        if (poll(&pfd, 1, left > 50 ? 50 : (int)left + 1) < 0 && errno != EINTR)
            return -1;
    }
}

bool rb_closed_within(rb_sock_t *s, int ms, unsigned *other_p)
{
    double deadline = rb_now_ms() + ms;
    rb_frame_t f;

    do { /* once at least, also for ms == 0 */
        double left = deadline - rb_now_ms();
        int r = rb_recv(s, left > 0 ? (int)left + 1 : 0, true, &f);
        if (r == -1)
            return true;
        if (r == 0) {
            if (other_p)
                (*other_p)++;
            rb_frame_free(&f);
        }
    } while (rb_now_ms() < deadline);
    return false;
}

/* The reply of type to what was just sent; its status, rest copied out. */
static remora_status_t expect_reply(rb_sock_t *s, unsigned type, rb_frame_t *f,
                                    const uint8_t **rest, uint32_t *rest_len)
{
    rm_boot_frame_t bf;
    remora_status_t st;
    int r = rb_recv(s, 5000, true, f);

    if (r == -1)
        return REMORA_ERR_DISCONNECTED;
    if (r == -2)
        return REMORA_ERR_TIMED_OUT;
    bf.type    = (uint8_t)f->type;
    bf.flags   = (uint8_t)f->flags;
    bf.payload = f->payload;
    bf.len     = f->len;
    if (f->type != type || rm_boot_reply_split(&bf, &st, rest, rest_len) != 0) {
        rb_frame_free(f);
        return REMORA_ERR_PROTOCOL;
    }
    return st;
}

remora_status_t rb_hello(rb_sock_t *s, uint16_t pmin, uint16_t pmax, rm_hello_t *theirs)
{
    rm_hello_t h = {.proto_min = pmin, .proto_max = pmax};
    rm_wbuf_t w;
    rb_frame_t f;
    const uint8_t *rest;
    uint32_t rest_len;
    remora_status_t st;

    rm_auth_nonce(s->client_nonce);
    memcpy(h.nonce, s->client_nonce, RM_NONCE_LEN);
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    int sent = !w.failed && rb_send_frame(s, RM_BOOT_HELLO, 0, w.data, (uint32_t)w.len) == 0;
    rm_wbuf_free(&w);
    if (!sent)
        return REMORA_ERR_DISCONNECTED;
    st = expect_reply(s, RM_BOOT_HELLO_REPLY, &f, &rest, &rest_len);
    if (st == REMORA_ERR_DISCONNECTED || st == REMORA_ERR_TIMED_OUT || st == REMORA_ERR_PROTOCOL)
        return st;
    if (rest_len) {
        rm_hello_t tmp;
        if (rm_hello_decode(rest, rest_len, &tmp) != 0) {
            rb_frame_free(&f);
            return REMORA_ERR_PROTOCOL;
        }
        memcpy(s->server_nonce, tmp.nonce, RM_NONCE_LEN);
        s->server_flags = tmp.flags;
        if (theirs)
            *theirs = tmp;
    } else if (st == REMORA_OK) {
        rb_frame_free(&f);
        return REMORA_ERR_PROTOCOL;
    }
    rb_frame_free(&f);
    return st;
}

remora_status_t rb_auth(rb_sock_t *s, const void *token, size_t token_len)
{
    uint8_t mac[RM_MAC_LEN];
    rb_frame_t f;
    const uint8_t *rest;
    uint32_t rest_len;
    remora_status_t st;

    if (token)
        rm_auth_proof(RM_AUTH_CLIENT_PROOF, token, token_len, s->server_nonce, s->client_nonce,
                      mac);
    else
        memset(mac, 0x5a, sizeof(mac));
    if (rb_send_frame(s, RM_BOOT_AUTH, 0, mac, RM_MAC_LEN) != 0)
        return REMORA_ERR_DISCONNECTED;
    st = expect_reply(s, RM_BOOT_AUTH_REPLY, &f, &rest, &rest_len);
    if (st == REMORA_ERR_DISCONNECTED || st == REMORA_ERR_TIMED_OUT || st == REMORA_ERR_PROTOCOL)
        return st;
    if (st == REMORA_OK) { /* the server proves it knows the token too */
        if (rest_len != RM_MAC_LEN ||
            rm_auth_check(RM_AUTH_SERVER_PROOF, token, token_len, s->server_nonce,
                          s->client_nonce, rest) != 0)
            st = REMORA_ERR_PROTOCOL;
    }
    rb_frame_free(&f);
    return st;
}

remora_status_t rb_connect(rb_sock_t *s, const void *addr, size_t len, void **out,
                           size_t *out_len)
{
    rb_frame_t f;
    const uint8_t *rest;
    uint32_t rest_len;
    remora_status_t st;

    *out = NULL;
    *out_len = 0;
    if (rb_send_frame(s, RM_BOOT_CONNECT, 0, addr, (uint32_t)len) != 0)
        return REMORA_ERR_DISCONNECTED;
    st = expect_reply(s, RM_BOOT_CONNECT_REPLY, &f, &rest, &rest_len);
    if (st == REMORA_ERR_DISCONNECTED || st == REMORA_ERR_TIMED_OUT || st == REMORA_ERR_PROTOCOL)
        return st;
    if (st == REMORA_OK) {
        if (rest_len == 0 || (*out = malloc(rest_len)) == NULL)
            st = REMORA_ERR_PROTOCOL;
        else {
            memcpy(*out, rest, rest_len);
            *out_len = rest_len;
        }
    }
    rb_frame_free(&f);
    return st;
}

remora_status_t rb_hello_auth(rb_sock_t *s, const void *token, size_t token_len)
{
    remora_status_t st = rb_hello(s, RM_PROTO_VERSION, RM_PROTO_VERSION, NULL);

    if (st != REMORA_OK)
        return st;
    if ((s->server_flags & RM_HELLO_AUTH_REQUIRED) && token)
        st = rb_auth(s, token, token_len);
    return st;
}

void rb_tick(rb_sock_t *s)
{
    rb_frame_t f;

    if (s->fd < 0)
        return;
    if (rb_now_ms() - s->last_tx_ms >= 250)
        rb_send_frame(s, RM_BOOT_HEARTBEAT, 0, NULL, 0);
    /* Drain without waiting: after the handshake the server sends nothing
     * but heartbeats here. */
    while (rb_recv(s, 0, true, &f) == 0)
        rb_frame_free(&f);
}
