/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers of the remora command that other programs (unit tests, benchmarks,
 * test servers) share: the test data pattern, size and address parsing, and
 * small formatting and statistics helpers. Nothing here touches the network
 * or allocates; everything is pure and thread-safe.
 *
 * The pattern
 * -----------
 * Regions filled "with the pattern" hold, at every absolute region offset o,
 *
 *     byte (o % 8) of the little-endian encoding of splitmix64(o / 8)
 *
 * where
 *
 *     splitmix64(x): z = x + 0x9E3779B97F4A7C15
 *                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
 *                    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
 *                    return z ^ (z >> 31)
 *
 * (all arithmetic modulo 2^64). Any byte range can be generated or checked on
 * its own, knowing only its offset, so a reader can verify a sub-range of a
 * region without seeing the rest, and a misplaced range (wrong offset) fails.
 */
#ifndef REMORA_CLI_UTIL_H
#define REMORA_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Fill buf[0, len) with the pattern bytes of region offsets [offset, offset+len). */
void remora_pattern_fill(void *buf, uint64_t offset, size_t len);

/**
 * Check buf[0, len) against the pattern for region offsets [offset, offset+len).
 * Returns -1 when every byte matches, else the index in buf of the first
 * mismatching byte.
 */
int64_t remora_pattern_check(const void *buf, uint64_t offset, size_t len);

/** The pattern byte at one absolute region offset. */
uint8_t remora_pattern_byte(uint64_t offset);

/**
 * Parse a byte count: decimal digits with an optional binary suffix
 * K (2^10), M (2^20), G (2^30) or T (2^40), either case, e.g. "4096", "4K",
 * "2G". Signs, spaces, fractions, other suffixes and values above UINT64_MAX
 * are rejected. Returns 0 and sets *out on success, -1 otherwise.
 */
int remora_parse_size(const char *s, uint64_t *out);

/** Longest HOST accepted, brackets of an IPv6 literal included. */
#define REMORA_HOST_MAX 255

/** A parsed "HOST:PORT[/NAME]". */
typedef struct remora_target {
    /** "HOST:PORT" exactly as written (an IPv6 host keeps its brackets). */
    char     addr[REMORA_HOST_MAX + 7];
    /** The host without brackets. */
    char     host[REMORA_HOST_MAX + 1];
    uint16_t port;
    /** Everything after the first '/' following the port; "" when absent. */
    char     name[REMORA_NAME_MAX + 1];
} remora_target_t;

/**
 * Parse "HOST:PORT" or "HOST:PORT/NAME". HOST is a name, an IPv4 address or a
 * bracketed IPv6 address ("[::1]"); PORT is 0..65535; NAME, when there is a
 * '/', is non-empty and may itself contain '/'.
 * Returns 0 and fills *target on success; otherwise -1, and *why (when
 * non-NULL) points to a static English reason.
 */
int remora_parse_target(const char *s, remora_target_t *target, const char **why);

/**
 * Format a byte count for people, binary units: "512 B", "4 KiB", "1.5 MiB",
 * "2 GiB". Returns buf.
 */
const char *remora_format_size(uint64_t bytes, char *buf, size_t len);

/**
 * Write s as a JSON string literal (quotes included) into out, always
 * NUL-terminated. Returns the length the full literal needs (excluding the
 * NUL), like snprintf: a result >= cap means out was truncated.
 * A buffer of 6 * strlen(s) + 3 bytes is always enough.
 */
size_t remora_json_string(const char *s, char *out, size_t cap);

/** Summary of a set of samples. */
typedef struct remora_stats {
    size_t count;
    double min, avg, p50, p99, max;
} remora_stats_t;

/**
 * Summarize samples[0, n); sorts samples in place. Percentiles use the
 * nearest-rank method. With n == 0 every field is 0.
 */
void remora_stats_compute(double *samples, size_t n, remora_stats_t *stats);

/*
 * Stream frames: how `remora stream serve` stamps each ring element so that a
 * reader can check it on its own. Little-endian, at the start of the element:
 *   u64 seq, u64 timestamp (ns, CLOCK_REALTIME), u64 checksum, payload...
 * Elements shorter than 24 bytes keep the fields that fit (seq needs 8).
 * The checksum covers seq, timestamp and the payload; a payload made by
 * remora_frame_fill() is the pattern XOR a per-sequence word, so two frames
 * never share payload bytes and a torn mix of them fails the checksum.
 */
#define REMORA_FRAME_HDR 24u
#define REMORA_FRAME_MIN 8u

/** Write the payload for seq (pattern source; src == NULL) or copy it from src
 *  (elem_size - REMORA_FRAME_HDR bytes); returns the payload's partial checksum. */
uint64_t remora_frame_payload(void *elem, size_t elem_size, uint64_t seq, const void *src);
/** The same for a frame read long after it is written (a host ring's slot): a
 *  large generated payload goes past the CPU's caches (non-temporal stores).
 *  Not for a buffer that is read again at once (a GPU ring's staging frame). */
uint64_t remora_frame_payload_streamed(void *elem, size_t elem_size, uint64_t seq,
                                       const void *src);
/** Finish a frame: seq, timestamp and checksum (partial from remora_frame_payload). */
void remora_frame_seal(void *elem, size_t elem_size, uint64_t seq, uint64_t ts_ns,
                       uint64_t partial);

typedef enum remora_frame_verdict {
    REMORA_FRAME_OK      = 0,
    REMORA_FRAME_TORN    = 1, /**< carries another sequence number than the one delivered */
    REMORA_FRAME_CORRUPT = 2  /**< content does not match its checksum */
} remora_frame_verdict_t;

/** Check a delivered frame against the sequence number it was delivered as. */
remora_frame_verdict_t remora_frame_check(const void *elem, size_t elem_size, uint64_t seq);
/** The frame's timestamp (0 when the element has no room for one). */
uint64_t remora_frame_timestamp(const void *elem, size_t elem_size);

#ifdef __cplusplus
}
#endif

#endif /* REMORA_CLI_UTIL_H */
