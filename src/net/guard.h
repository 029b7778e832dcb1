/*
 * guard.h — hostile-peer accounting for the gRPC server (private to
 * src/net): token buckets, the HTTP/2 frame-level flood guard, and the
 * counts of connections per peer address and per identity.
 *
 * Pure: no I/O, no clock reads (callers pass now_ns), no globals. The flood
 * guard sees every frame header the peer sends (nghttp2's
 * on_begin_frame_callback, which is also called for CONTINUATION frames),
 * before nghttp2 acts on the frame, so the limits below hold whatever
 * libnghttp2 version is installed (CVE-2023-44487 rapid reset,
 * CVE-2024-28182 CONTINUATION flood, and the older control-frame floods of
 * CVE-2019-9512/9514/9515/9518). Unit-tested in test_net_guard.c; the fuzz
 * entry point is bf_h2_guard_frame() (any sequence of frame headers).
 */
#ifndef BF_NET_GUARD_H
#define BF_NET_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "bigfleet/net.h"

/* ------------------------------------------------------------ token bucket */

/*
 * A token bucket: holds at most `burst` tokens, refills `rate` tokens per
 * second; each event takes one. Integer arithmetic in milli-tokens. A
 * zero-initialised bucket is full at its first use.
 */
struct bf_bucket {
    int64_t last_ns;
    uint32_t milli; /* tokens x 1000; at most UINT32_MAX (a burst of 4,294,967 tokens) */
    bool started;
}; /* 16 bytes: seven of them per connection (issue 18) */
/* Takes one token at now_ns; false when the bucket is empty (the event is
 * over the rate). A burst above 4,294,967 tokens counts as that many. */
bool bf_bucket_take(struct bf_bucket *b, uint32_t burst, uint32_t rate, int64_t now_ns);

/* ------------------------------------------------------------ HTTP/2 floods */

/*
 * Limits per connection. Legitimate gRPC peers stay far below every one of
 * them: grpc-js and grpc-go open one stream per call, cancel rarely, send a
 * handful of PINGs/SETTINGS per minute, never PRIORITY, and put request
 * headers (< 1 KiB) in one HEADERS frame.
 */
#define BF_H2G_RESET_BURST       200 /* RST_STREAM from the peer */
#define BF_H2G_RESET_RATE        100 /* per second */
#define BF_H2G_STREAM_BURST      400 /* new streams (HEADERS opening a stream); twice the rate */
#define BF_H2G_STREAM_RATE       200 /* default; bf_net_server_opts.max_new_streams_per_second */
#define BF_H2G_STREAM_RATE_MAX   1000000
#define BF_H2G_PING_BURST        100
#define BF_H2G_PING_RATE         20
#define BF_H2G_SETTINGS_BURST    50
#define BF_H2G_SETTINGS_RATE     10
#define BF_H2G_PRIORITY_BURST    200
#define BF_H2G_PRIORITY_RATE     100
#define BF_H2G_EMPTY_BURST       200 /* DATA frames without payload and without END_STREAM */
#define BF_H2G_EMPTY_RATE        100
#define BF_H2G_UNKNOWN_BURST     100 /* extension frame types */
#define BF_H2G_UNKNOWN_RATE      50
#define BF_H2G_MAX_CONTINUATIONS 4           /* CONTINUATION frames after one HEADERS */
#define BF_H2G_MAX_HEADER_BLOCK  (64u << 10) /* HEADERS + CONTINUATION payload bytes */

struct bf_h2_guard {
    struct bf_bucket resets, streams, pings, settings, priority, empty, unknown;
    uint32_t stream_rate;  /* new streams per second; burst twice this */
    int32_t last_sid;      /* highest client stream id seen in a HEADERS frame */
    bool in_block;         /* a header block is open (HEADERS without END_HEADERS) */
    uint32_t block_frames; /* CONTINUATION frames of the open block */
    uint64_t block_bytes;
};

/*
 * Initialise before the first frame. stream_rate: new streams the peer may
 * open per second (token bucket, burst twice the rate); 0 =
 * BF_H2G_STREAM_RATE; above BF_H2G_STREAM_RATE_MAX it is clamped there
 * (the bucket's integer arithmetic). Every other limit is the BF_H2G_* figure above.
 */
void bf_h2_guard_init(struct bf_h2_guard *g, uint32_t stream_rate);
/*
 * Accounts one frame header sent by the peer (type, flags, stream id,
 * payload length as in RFC 9113 §4.1). Returns 0 when the frame is within
 * the limits, or the enum bf_net_flood reason (> 0) at the first frame over
 * a limit: the caller closes the connection (GOAWAY ENHANCE_YOUR_CALM) and
 * feeds nothing more to HTTP/2.
 */
int bf_h2_guard_frame(struct bf_h2_guard *g, uint8_t type, uint8_t flags, int32_t sid, size_t len,
                      int64_t now_ns);

/* ------------------------------------------------------------ connection counts */

/*
 * Counts of open connections keyed by 16 bytes (an IPv6 address, an IPv4
 * address mapped into it, or a 64-bit hash of an identity), in a
 * bigfleet/hmap.h map (n = keys with a count > 0). Loop thread only.
 */
struct bf_cc_key {
    uint8_t b[16];
};
static inline uint64_t bf_cc_hash(struct bf_cc_key k)
{
    return bf_hash_bytes(k.b, sizeof k.b);
}
static inline bool bf_cc_eq(struct bf_cc_key a, struct bf_cc_key b)
{
    return memcmp(a.b, b.b, sizeof a.b) == 0;
}
BF_HMAP_DEFINE(bf_conn_counts, struct bf_cc_key, uint32_t, bf_cc_hash, bf_cc_eq)
void bf_cc_init(struct bf_conn_counts *cc);
void bf_cc_free(struct bf_conn_counts *cc);
/* The count for key (0 when absent). */
uint32_t bf_cc_get(const struct bf_conn_counts *cc, const struct bf_cc_key *k);
/* +1; returns the new count, or -ENOMEM. */
int bf_cc_inc(struct bf_conn_counts *cc, const struct bf_cc_key *k);
/* -1 (the entry goes at 0); no-op when absent. */
void bf_cc_dec(struct bf_conn_counts *cc, const struct bf_cc_key *k);
/* Keys: a socket address (the port is ignored) and an identity string. */
struct sockaddr;
void bf_cc_key_addr(struct bf_cc_key *k, const struct sockaddr *sa);
void bf_cc_key_str(struct bf_cc_key *k, const char *s);

#endif /* BF_NET_GUARD_H */
