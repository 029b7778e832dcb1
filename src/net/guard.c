/*
 * guard.c — token buckets, the HTTP/2 flood guard and connection counts
 * (see guard.h).
 *
 * Design notes: everything is per connection (the flood guard) or per
 * server (the counts) and runs on the loop thread. The guard keeps seven
 * buckets (16 bytes each) and the state of the open header block: 136
 * bytes per connection. The counts map is keyed by 16 bytes; identities are hashed
 * with XXH3-64 (a collision merges two identities' counts, which can only
 * make the limit stricter for them).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <xxhash.h>

#include "net/guard.h"

/* ------------------------------------------------------------ buckets */

bool bf_bucket_take(struct bf_bucket *b, uint32_t burst, uint32_t rate, int64_t now_ns)
{
    int64_t cap = (int64_t)burst * 1000;
    if (cap > (int64_t)UINT32_MAX)
        cap = UINT32_MAX;
    if (!b->started) {
        b->started = true;
        b->milli = (uint32_t)cap;
        b->last_ns = now_ns;
    } else if (now_ns > b->last_ns && rate > 0) {
        int64_t dt = now_ns - b->last_ns;
        /* rate tokens per second = rate x 1000 milli-tokens per 1e9 ns */
        int64_t add = dt >= ((int64_t)1 << 40) ? cap : dt * (int64_t)rate / 1000000;
        if ((int64_t)b->milli + add >= cap) {
            b->milli = (uint32_t)cap;
            b->last_ns = now_ns;
        } else if (add > 0) {
            b->milli += (uint32_t)add;
            b->last_ns += add * 1000000 / (int64_t)rate; /* keep the remainder */
        }
    }
    if (b->milli < 1000)
        return false;
    b->milli -= 1000;
    return true;
}

/* ------------------------------------------------------------ flood guard */

enum {
    F_DATA = 0x0,
    F_HEADERS = 0x1,
    F_PRIORITY = 0x2,
    F_RST_STREAM = 0x3,
    F_SETTINGS = 0x4,
    F_PUSH_PROMISE = 0x5,
    F_PING = 0x6,
    F_GOAWAY = 0x7,
    F_WINDOW_UPDATE = 0x8,
    F_CONTINUATION = 0x9,
};
#define FL_END_STREAM  0x1
#define FL_ACK         0x1
#define FL_END_HEADERS 0x4

void bf_h2_guard_init(struct bf_h2_guard *g, uint32_t stream_rate)
{
    memset(g, 0, sizeof *g);
    g->stream_rate = !stream_rate                           ? BF_H2G_STREAM_RATE
                     : stream_rate > BF_H2G_STREAM_RATE_MAX ? BF_H2G_STREAM_RATE_MAX
                                                            : stream_rate;
}

int bf_h2_guard_frame(struct bf_h2_guard *g, uint8_t type, uint8_t flags, int32_t sid, size_t len,
                      int64_t now_ns)
{
    if (g->in_block) {
        /* HTTP/2 allows nothing but CONTINUATION inside a header block;
         * nghttp2 turns anything else into a connection error */
        if (type != F_CONTINUATION)
            return 0;
        g->block_frames++;
        g->block_bytes += len;
        if (g->block_frames > BF_H2G_MAX_CONTINUATIONS || g->block_bytes > BF_H2G_MAX_HEADER_BLOCK)
            return BF_NET_FLOOD_CONTINUATION;
        if (flags & FL_END_HEADERS)
            g->in_block = false;
        return 0;
    }
    switch (type) {
    case F_HEADERS:
        if (sid > g->last_sid) { /* opens a stream (trailers reuse an open one) */
            g->last_sid = sid;
            if (!bf_bucket_take(&g->streams, 2 * g->stream_rate, g->stream_rate, now_ns))
                return BF_NET_FLOOD_STREAMS;
        }
        if (len > BF_H2G_MAX_HEADER_BLOCK)
            return BF_NET_FLOOD_CONTINUATION;
        if (!(flags & FL_END_HEADERS)) {
            g->in_block = true;
            g->block_frames = 0;
            g->block_bytes = len;
        }
        return 0;
    case F_RST_STREAM:
        return bf_bucket_take(&g->resets, BF_H2G_RESET_BURST, BF_H2G_RESET_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_RAPID_RESET;
    case F_PING:
        if (flags & FL_ACK)
            return 0; /* answers to our own PINGs */
        return bf_bucket_take(&g->pings, BF_H2G_PING_BURST, BF_H2G_PING_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_PING;
    case F_SETTINGS:
        if (flags & FL_ACK)
            return 0;
        return bf_bucket_take(&g->settings, BF_H2G_SETTINGS_BURST, BF_H2G_SETTINGS_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_SETTINGS;
    case F_PRIORITY:
        return bf_bucket_take(&g->priority, BF_H2G_PRIORITY_BURST, BF_H2G_PRIORITY_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_PRIORITY;
    case F_DATA:
        if (len > 0 || (flags & FL_END_STREAM))
            return 0;
        return bf_bucket_take(&g->empty, BF_H2G_EMPTY_BURST, BF_H2G_EMPTY_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_EMPTY_FRAMES;
    case F_CONTINUATION:  /* outside a block: nghttp2's connection error */
    case F_PUSH_PROMISE:  /* a client must not push: nghttp2's connection error */
    case F_GOAWAY:        /* ends the connection */
    case F_WINDOW_UPDATE: /* O(1) for nghttp2, and a reading peer sends many */
        return 0;
    default:
        return bf_bucket_take(&g->unknown, BF_H2G_UNKNOWN_BURST, BF_H2G_UNKNOWN_RATE, now_ns)
                   ? 0
                   : BF_NET_FLOOD_UNKNOWN_FRAMES;
    }
}

/* ------------------------------------------------------------ connection counts */

void bf_cc_init(struct bf_conn_counts *cc)
{
    memset(cc, 0, sizeof *cc);
}

void bf_cc_free(struct bf_conn_counts *cc)
{
    bf_conn_counts_free(cc);
}

uint32_t bf_cc_get(const struct bf_conn_counts *cc, const struct bf_cc_key *k)
{
    return bf_conn_counts_get(cc, *k, 0);
}

int bf_cc_inc(struct bf_conn_counts *cc, const struct bf_cc_key *k)
{
    uint32_t *n = bf_conn_counts_ref(cc, *k);
    if (n)
        return (int)++*n;
    return bf_conn_counts_put(cc, *k, 1) ? -ENOMEM : 1;
}

void bf_cc_dec(struct bf_conn_counts *cc, const struct bf_cc_key *k)
{
    uint32_t *n = bf_conn_counts_ref(cc, *k);
    if (n && --*n == 0)
        bf_conn_counts_del(cc, *k, NULL);
}

void bf_cc_key_addr(struct bf_cc_key *k, const struct sockaddr *sa)
{
    memset(k, 0, sizeof *k);
    if (sa->sa_family == AF_INET6) {
        memcpy(k->b, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    } else if (sa->sa_family == AF_INET) {
        k->b[10] = 0xff; /* ::ffff:a.b.c.d */
        k->b[11] = 0xff;
        memcpy(k->b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    }
}

void bf_cc_key_str(struct bf_cc_key *k, const char *s)
{
    memset(k, 0, sizeof *k);
    uint64_t h = XXH3_64bits(s, strlen(s));
    k->b[0] = 1; /* never equal to an address key (those start with 0 or an IPv6 prefix) */
    memcpy(k->b + 8, &h, sizeof h);
}

const char *bf_net_flood_name(int reason)
{
    static const char *names[BF_NET_FLOOD_COUNT] = {
        "none",     "rapid_reset", "streams",      "continuation",   "ping",
        "settings", "priority",    "empty_frames", "unknown_frames",
    };
    if (reason < 0 || reason >= BF_NET_FLOOD_COUNT)
        return "unknown";
    return names[reason];
}
