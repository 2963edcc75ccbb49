/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared helpers of the remora command; see cli_util.h for the contracts and
 * the definition of the pattern.
 */
#include "cli_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- pattern */

static inline uint64_t cli_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The pattern word for region word index w, as it lies in memory. */
static inline uint64_t cli_pattern_word(uint64_t w)
{
    uint64_t v = cli_splitmix64(w);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint8_t remora_pattern_byte(uint64_t offset)
{
    return (uint8_t)(cli_splitmix64(offset / 8) >> (8 * (offset % 8)));
}

/* Bytes before the first 8-aligned region offset, capped at len. */
static size_t cli_pattern_head(uint64_t offset, size_t len)
{
    size_t head = (size_t)((8 - offset % 8) % 8);
    return head < len ? head : len;
}

void remora_pattern_fill(void *buf, uint64_t offset, size_t len)
{
    uint8_t *p = buf;
    size_t i = cli_pattern_head(offset, len);

    for (size_t j = 0; j < i; j++) {
        p[j] = remora_pattern_byte(offset + j);
    }
    /* Whole words; memcpy because buf itself need not be aligned. */
    for (uint64_t w = (offset + i) / 8; len - i >= 8; i += 8, w++) {
        uint64_t v = cli_pattern_word(w);
        memcpy(p + i, &v, sizeof(v));
    }
    for (; i < len; i++) {
        p[i] = remora_pattern_byte(offset + i);
    }
}

/* Index of the first byte of [from, to) that is off the pattern, or -1. */
static int64_t cli_pattern_check_bytes(const uint8_t *p, uint64_t offset, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (p[i] != remora_pattern_byte(offset + i)) {
            return (int64_t)i;
        }
    }
    return -1;
}

int64_t remora_pattern_check(const void *buf, uint64_t offset, size_t len)
{
    const uint8_t *p = buf;
    size_t i = cli_pattern_head(offset, len);
    int64_t bad = cli_pattern_check_bytes(p, offset, 0, i);

    if (bad >= 0) {
        return bad;
    }
    for (uint64_t w = (offset + i) / 8; len - i >= 8; i += 8, w++) {
        uint64_t v;
        memcpy(&v, p + i, sizeof(v));
        if (v != cli_pattern_word(w)) {
            return cli_pattern_check_bytes(p, offset, i, i + 8);
        }
    }
    return cli_pattern_check_bytes(p, offset, i, len);
}

/* ---------------------------------------------------------------- sizes */

static unsigned cli_suffix_shift(char c)
{
    switch (c) {
    case 'k': case 'K': return 10;
    case 'm': case 'M': return 20;
    case 'g': case 'G': return 30;
    case 't': case 'T': return 40;
    default:            return 0;
    }
}

int remora_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    unsigned shift;

    if (s == NULL || *s < '0' || *s > '9') {
        return -1;
    }
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return -1;
        }
        v = v * 10 + d;
    }
    shift = cli_suffix_shift(*s);
    if (shift != 0) {
        s++;
    }
    if (*s != '\0' || v > (UINT64_MAX >> shift)) {
        return -1;
    }
    *out = v << shift;
    return 0;
}

const char *remora_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned u = 0;

    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes >> (10 * (u + 2)) != 0) {
        u++;
    }
    if (bytes % (1ull << (10 * (u + 1))) == 0) {
        snprintf(buf, len, "%llu %s", (unsigned long long)(bytes >> (10 * (u + 1))), units[u]);
    } else {
        snprintf(buf, len, "%.1f %s", (double)bytes / (double)(1ull << (10 * (u + 1))), units[u]);
    }
    return buf;
}

/* ---------------------------------------------------------------- addresses */

static int cli_target_fail(const char **why, const char *reason)
{
    if (why != NULL) {
        *why = reason;
    }
    return -1;
}

/* Parse decimal PORT from p up to '/' or the end; sets *end past it. */
static const char *cli_parse_port(const char *p, uint16_t *port, const char **end)
{
    unsigned long v = 0;
    const char *start = p;

    for (; *p != '\0' && *p != '/'; p++) {
        if (*p < '0' || *p > '9') {
            return "port is not a number";
        }
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535) {
            return "port out of range (0-65535)";
        }
    }
    if (p == start) {
        return "missing port number after ':'";
    }
    if (p - start > 5) { /* leading zeros: the address must fit its buffer */
        return "port has more than 5 digits";
    }
    *port = (uint16_t)v;
    *end = p;
    return NULL;
}

int remora_parse_target(const char *s, remora_target_t *target, const char **why)
{
    remora_target_t t;
    const char *host, *host_end, *p, *err;
    size_t host_len, addr_len;

    memset(&t, 0, sizeof(t));
    if (s[0] == '[') {
        host = s + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL) {
            return cli_target_fail(why, "unterminated '[' in host");
        }
        p = host_end + 1;
    } else {
        host = s;
        host_end = s + strcspn(s, ":/");
        p = host_end;
        if (*p == ':' && memchr(p + 1, ':', strcspn(p + 1, "/")) != NULL) {
            return cli_target_fail(why, "IPv6 host must be in brackets, e.g. [::1]:60010");
        }
    }
    host_len = (size_t)(host_end - host);
    if (host_len == 0) {
        return cli_target_fail(why, "missing host");
    }
    if (host_len > REMORA_HOST_MAX - 2) {
        return cli_target_fail(why, "host name too long");
    }
    if (*p != ':') {
        return cli_target_fail(why, "missing ':PORT' after host");
    }
    err = cli_parse_port(p + 1, &t.port, &p);
    if (err != NULL) {
        return cli_target_fail(why, err);
    }
    if (*p == '/') {
        size_t name_len = strlen(p + 1);
        if (name_len == 0) {
            return cli_target_fail(why, "empty region name after '/'");
        }
        if (name_len > REMORA_NAME_MAX) {
            return cli_target_fail(why, "region name too long");
        }
        memcpy(t.name, p + 1, name_len);
    }
    addr_len = (size_t)(p - s);
    memcpy(t.addr, s, addr_len);
    memcpy(t.host, host, host_len);
    *target = t;
    return 0;
}

/* ---------------------------------------------------------------- JSON */

/* Length of the valid UTF-8 sequence at s, or 0 if the bytes there are not one. */
static size_t cli_utf8_len(const unsigned char *s)
{
    size_t n;

    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        n = 2;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        n = 3;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        n = 4;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
    }
    return n;
}

/* Append n bytes to out[*pos] when they fit (keeping room for the NUL); always count them. */
static void cli_put(char *out, size_t cap, size_t *pos, const char *bytes, size_t n)
{
    if (*pos + n < cap) {
        memcpy(out + *pos, bytes, n);
    }
    *pos += n;
}

size_t remora_json_string(const char *s, char *out, size_t cap)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t pos = 0;
    char esc[8];

    cli_put(out, cap, &pos, "\"", 1);
    while (*u != '\0') {
        size_t n = *u < 0x80 ? 1 : cli_utf8_len(u);
        if (*u == '"' || *u == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*u;
            cli_put(out, cap, &pos, esc, 2);
        } else if (*u < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", *u);
            cli_put(out, cap, &pos, esc, 6);
        } else if (n == 0) {
            /* Not UTF-8: JSON must be, so show the replacement character. */
            cli_put(out, cap, &pos, "\\ufffd", 6);
            n = 1;
        } else {
            cli_put(out, cap, &pos, (const char *)u, n);
        }
        u += n;
    }
    cli_put(out, cap, &pos, "\"", 1);
    if (cap > 0) {
        out[pos < cap ? pos : cap - 1] = '\0';
    }
    return pos;
}

/* ---------------------------------------------------------------- statistics */

static int cli_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile pct of sorted[0, n), n > 0: the ceil(pct% * n)-th smallest. */
static double cli_percentile(const double *sorted, size_t n, unsigned pct)
{
    size_t rank = (n * pct + 99) / 100;
    return sorted[rank < 1 ? 0 : rank - 1];
}

void remora_stats_compute(double *samples, size_t n, remora_stats_t *stats)
{
    double sum = 0;

    memset(stats, 0, sizeof(*stats));
    if (n == 0) {
        return;
    }
    qsort(samples, n, sizeof(samples[0]), cli_cmp_double);
    for (size_t i = 0; i < n; i++) {
        sum += samples[i];
    }
    stats->count = n;
    stats->min = samples[0];
    stats->max = samples[n - 1];
    stats->avg = sum / (double)n;
    stats->p50 = cli_percentile(samples, n, 50);
    stats->p99 = cli_percentile(samples, n, 99);
}

/* ---------------------------------------------------------------- stream frames */

#define CLI_FRAME_K1 0x9E3779B97F4A7C15ull
#define CLI_FRAME_K2 0xD6E8FEB86659FD93ull
#define CLI_FRAME_P  0xFF51AFD7ED558CCDull

static void cli_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint64_t cli_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static inline uint64_t cli_rotl(uint64_t v, unsigned r) { return (v << r) | (v >> (64 - r)); }

static uint64_t cli_frame_fold(const uint64_t h[4], size_t len)
{
    return h[0] ^ cli_rotl(h[1], 16) ^ cli_rotl(h[2], 32) ^ cli_rotl(h[3], 48) ^ len;
}

/* Four independent lanes, so the multiply chains overlap (several GB/s). */
static uint64_t cli_frame_sum(const uint8_t *p, size_t len)
{
    uint64_t h[4] = {1, 2, 3, 4}, w;
    size_t i = 0;

    for (; i + 32 <= len; i += 32) {
        for (int l = 0; l < 4; l++) {
            memcpy(&w, p + i + 8 * l, 8);
            h[l] = cli_rotl(h[l] ^ w, 29) * CLI_FRAME_P;
        }
    }
    for (int l = 0; i < len; i += 8, l = (l + 1) & 3) {
        w = 0;
        memcpy(&w, p + i, len - i < 8 ? len - i : 8);
        h[l] = cli_rotl(h[l] ^ w, 29) * CLI_FRAME_P;
    }
    return cli_frame_fold(h, len);
}

/* The pattern's word j of a frame. */
static inline uint64_t cli_frame_word(uint64_t x, size_t j) { return x ^ (j * CLI_FRAME_K2); }

/* One word of a frame's payload. A non-temporal store (x86-64's movnti)
 * skips reading the line in first: a producer writing a ring far larger
 * than its caches otherwise pays a memory read for every line it writes. */
static inline void cli_frame_store(uint8_t *p, uint64_t w, bool stream)
{
#if defined(__x86_64__)
    if (stream) {
        _mm_stream_si64((long long *)(void *)p, (long long)w);
        return;
    }
#endif
    (void)stream;
    memcpy(p, &w, 8);
}

/*
 * Generate and sum in one pass: the producer's cost per byte is one store.
 * Four words a step, a lane each: one word a step with the lane picked by
 * j & 3 generated 8 GB/s on the build VM, this 15, and on the 16-core host
 * an unpaced 1 MiB producer made fewer frames than one plain reader reads.
 */
static inline __attribute__((always_inline)) uint64_t
cli_frame_fill(uint8_t *p, size_t len, uint64_t seq, bool stream)
{
    uint64_t x = (seq + 1) * CLI_FRAME_K1, h0 = 1, h1 = 2, h2 = 3, h3 = 4;
    size_t i = 0, j = 0;

    for (; i + 32 <= len; i += 32, j += 4) {
        /* Four stores of a register each: one 32-byte copy of an array
         * went through the stack, slower than the old loop on the H200 host. */
        uint64_t w0 = cli_frame_word(x, j), w1 = cli_frame_word(x, j + 1);
        uint64_t w2 = cli_frame_word(x, j + 2), w3 = cli_frame_word(x, j + 3);
        cli_frame_store(p + i, w0, stream);
        cli_frame_store(p + i + 8, w1, stream);
        cli_frame_store(p + i + 16, w2, stream);
        cli_frame_store(p + i + 24, w3, stream);
        h0 = cli_rotl(h0 ^ w0, 29) * CLI_FRAME_P;
        h1 = cli_rotl(h1 ^ w1, 29) * CLI_FRAME_P;
        h2 = cli_rotl(h2 ^ w2, 29) * CLI_FRAME_P;
        h3 = cli_rotl(h3 ^ w3, 29) * CLI_FRAME_P;
    }
#if defined(__x86_64__)
    if (stream)
        _mm_sfence(); /* the streamed lines are seen before the commit that publishes them */
#endif
    uint64_t h[4] = {h0, h1, h2, h3}; /* the last words: a lane each, in turn */
    for (; i + 8 <= len; i += 8, j++) {
        uint64_t w = cli_frame_word(x, j);
        memcpy(p + i, &w, 8);
        h[j & 3] = cli_rotl(h[j & 3] ^ w, 29) * CLI_FRAME_P;
    }
    if (i < len) {
        uint64_t w = 0;
        for (size_t k = 0; i + k < len; k++) {
            p[i + k] = (uint8_t)(x >> (8 * k));
        }
        memcpy(&w, p + i, len - i);
        h[j & 3] = cli_rotl(h[j & 3] ^ w, 29) * CLI_FRAME_P;
    }
    return cli_frame_fold(h, len);
}

/* A ring slot this large is read by the sender (a kernel copy, a NIC's DMA)
 * after the producer has moved on: caching its lines only costs a read of
 * each one first. Streamed, an unpaced 1 MiB producer on the H200 host made
 * 9.1-11.9 GB/s against 5.9-8.3 (docs/performance.md, session 31). */
#define CLI_FRAME_STREAM_MIN (256u << 10)

static uint64_t cli_frame_payload(void *elem, size_t elem_size, uint64_t seq, const void *src,
                                  bool streamed)
{
    uint8_t *p = (uint8_t *)elem + REMORA_FRAME_HDR;

    if (elem_size <= REMORA_FRAME_HDR) {
        return 0;
    }
    size_t len = elem_size - REMORA_FRAME_HDR;
    if (src != NULL) {
        memcpy(p, src, len);
        return cli_frame_sum(p, len);
    }
    if (streamed && len >= CLI_FRAME_STREAM_MIN && ((uintptr_t)p & 7) == 0)
        return cli_frame_fill(p, len, seq, true);
    return cli_frame_fill(p, len, seq, false);
}

uint64_t remora_frame_payload(void *elem, size_t elem_size, uint64_t seq, const void *src)
{
    return cli_frame_payload(elem, elem_size, seq, src, false);
}

uint64_t remora_frame_payload_streamed(void *elem, size_t elem_size, uint64_t seq,
                                       const void *src)
{
    return cli_frame_payload(elem, elem_size, seq, src, true);
}

static uint64_t cli_frame_final(uint64_t seq, uint64_t ts, uint64_t partial)
{
    return cli_rotl(partial ^ (seq * CLI_FRAME_K1), 31) * CLI_FRAME_P ^ ts;
}

void remora_frame_seal(void *elem, size_t elem_size, uint64_t seq, uint64_t ts_ns,
                       uint64_t partial)
{
    uint8_t *p = elem;

    if (elem_size >= 8) {
        cli_put64(p, seq);
    }
    if (elem_size >= 16) {
        cli_put64(p + 8, ts_ns);
    }
    if (elem_size >= 24) {
        cli_put64(p + 16, cli_frame_final(seq, ts_ns, partial));
    }
}

remora_frame_verdict_t remora_frame_check(const void *elem, size_t elem_size, uint64_t seq)
{
    const uint8_t *p = elem;

    if (elem_size < 8) {
        return REMORA_FRAME_OK; /* nothing to check */
    }
    if (cli_get64(p) != seq) {
        return REMORA_FRAME_TORN;
    }
    if (elem_size < 24) {
        return REMORA_FRAME_OK;
    }
    uint64_t partial = elem_size > REMORA_FRAME_HDR
                           ? cli_frame_sum(p + REMORA_FRAME_HDR, elem_size - REMORA_FRAME_HDR)
                           : 0;
    return cli_get64(p + 16) == cli_frame_final(seq, cli_get64(p + 8), partial)
               ? REMORA_FRAME_OK
               : REMORA_FRAME_CORRUPT;
}

uint64_t remora_frame_timestamp(const void *elem, size_t elem_size)
{
    return elem_size >= 16 ? cli_get64((const uint8_t *)elem + 8) : 0;
}
