/*
 * grpc_wire.h — pure gRPC-over-HTTP/2 wire helpers (no I/O, no state
 * outside the structs passed in): the length-prefixed message parser,
 * grpc-timeout, grpc-message percent-encoding, content-type and status
 * mappings. grpc/doc/PROTOCOL-HTTP2.md. Unit-tested in test_net_wire.c.
 */
#ifndef BF_NET_GRPC_WIRE_H
#define BF_NET_GRPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BF_GRPC_PREFIX 5

/*
 * Incremental parser of Length-Prefixed-Messages (1 byte compressed flag,
 * 4 bytes big-endian length, payload). Data arrives in arbitrary pieces
 * (HTTP/2 DATA frames); a message wholly inside one piece is delivered
 * without copying, otherwise it is assembled in a buffer that grows with
 * the bytes actually received (never pre-allocated from the declared
 * length, so a 5-byte header cannot make us allocate 256 MiB).
 */
/*
 * A budget for assembly buffers shared by many parsers (a server's calls,
 * all on one loop thread: no locking). Every parser charges its buffer's
 * capacity while a message is partially received and refunds it when the
 * message completes or the parser is reset. A growth that would take `used`
 * past `max` fails the message with RESOURCE_EXHAUSTED and sets the
 * parser's over_budget, so many peers each sending a large message slowly
 * cannot together exhaust the host's memory. max 0 = unlimited.
 */
struct bf_grpc_spare;
struct bf_grpc_budget {
    size_t used, max;              /* bytes */
    uint64_t refused;              /* messages failed for this budget */
    struct bf_grpc_budget *parent; /* charged too (a connection's share -> the server's
                                      total); NULL = top */
    struct bf_grpc_spare *yield;   /* optional: an idle spare charged here (its `charge`
                                      is this budget) that a charge this budget would
                                      refuse frees first (bf_grpc_budget_charge) */
};

/*
 * Charges n bytes to b and every parent. Returns NULL, or (nothing charged
 * anywhere) the first budget in the chain that would go over its max; its
 * `refused` is incremented. When that budget has a `yield` spare holding a
 * buffer, the spare is released (its charge refunded) and the charge tried
 * again before anything is refused: an idle recycled buffer never costs a
 * message its admission.
 */
struct bf_grpc_budget *bf_grpc_budget_charge(struct bf_grpc_budget *b, size_t n);
/* Refunds n bytes to b and every parent. */
void bf_grpc_budget_refund(struct bf_grpc_budget *b, size_t n);

/*
 * A recycled assembly buffer: at most one buffer (`min`, by default
 * BF_GRPC_MMAP_MIN, to `max` bytes of capacity) kept between messages, and
 * a message declaring `min` to `max` bytes starts in it, so a connection that
 * receives one large message after another (a provider's List pages) reuses
 * memory whose pages are already present instead of mapping, faulting in,
 * clearing and unmapping new memory for every message. Owned by the
 * connection (or client) whose parsers borrow it; loop thread only. While a
 * parser assembles a message in the spare it is charged to that parser's
 * budget like any assembly buffer; kept idle, it is bounded by `max` (one
 * per connection) and freed with bf_grpc_spare_release (when the
 * connection or client goes away).
 *
 * With `charge` set (the gRPC server: its server-wide inbound budget, whose
 * `yield` points back here), an idle buffer's capacity is charged there too:
 * a put the budget refuses frees the buffer instead of keeping it, a parser
 * taking the spare moves the charge to its own budget chain, a release
 * refunds it, and a charge that budget would refuse releases the spare first
 * (bf_grpc_budget_charge). bf_grpc_spare_tick releases a spare nobody took
 * for a whole period.
 *
 * `min` below BF_GRPC_MMAP_MIN (the gRPC client's 256 KiB) also keeps
 * malloc'd buffers: a provider's List page of 4,096 machines is ~0.9 MB,
 * and each was otherwise assembled in new memory regrown by doubling from
 * 16 KiB (a copy per step). A buffer's capacity still tells how it was
 * allocated, whoever uses it.
 */
struct bf_grpc_spare {
    uint8_t *buf;                  /* NULL when empty */
    size_t cap;                    /* its capacity (bf_grpc_buf_free's argument) */
    size_t max;                    /* the largest buffer kept; 0 = keep none */
    size_t min;                    /* the smallest kept and taken; 0 = BF_GRPC_MMAP_MIN */
    uint64_t reuses;               /* messages assembled in a recycled buffer */
    struct bf_grpc_budget *charge; /* optional: the idle buffer is charged here */
    uint64_t idle_releases;        /* buffers released idle (tick, yield, refused put) */
    bool touched;                  /* put or taken since the previous bf_grpc_spare_tick */
};
/* Keeps buf (capacity cap) as the spare when it fits (>= min, <= max, and
 * larger than the one held: the smaller is freed; with `charge`, when that
 * budget takes its capacity); frees it otherwise. spare NULL: frees it. */
void bf_grpc_spare_put(struct bf_grpc_spare *spare, void *buf, size_t cap);
/* Frees the spare and refunds its charge (an empty spare is a no-op). */
void bf_grpc_spare_release(struct bf_grpc_spare *spare);
/* Called once a period (the server's spare timer): releases the spare when
 * it was neither put nor taken since the previous call, so an idle buffer
 * is kept between one and two periods after its last use. Returns whether
 * a buffer is still held. */
bool bf_grpc_spare_tick(struct bf_grpc_spare *spare);

struct bf_grpc_parser {
    uint8_t hdr[BF_GRPC_PREFIX];
    uint8_t hdr_len; /* header bytes collected (0..5) */
    bool in_body;
    bool compressed;
    bool over_budget;                        /* the last RESOURCE_EXHAUSTED came from the budget */
    const struct bf_grpc_budget *refused_by; /* ... and from this one of the chain */
    uint32_t msg_len;
    uint32_t max; /* receive limit */
    uint8_t *buf;
    size_t have, cap;
    struct bf_grpc_budget *budget; /* optional, borrowed; kept across resets */
    struct bf_grpc_spare *spare;   /* optional, borrowed; kept across resets: a message
                                      declaring spare->min to spare->max bytes
                                      starts in it,
                                      and finished buffers go back to it */
    /* During the callback of an assembled message: its buffer and the bytes
     * charged for it (NULL/0 for a message delivered in place). A callback
     * that returns BF_GRPC_MSG_KEPT takes both over (frees the buffer with
     * bf_grpc_buf_free(buf, msg_charge) and refunds the charge with
     * bf_grpc_budget_refund itself). */
    const uint8_t *msg_owned;
    size_t msg_charge;
};

/*
 * Message callback: msg/len valid during the call. Return 0 to continue,
 * a gRPC status code > 0 to stop feeding with that status, < 0 to stop
 * quietly (the caller finished the call itself), or BF_GRPC_MSG_KEPT to
 * continue having taken over an assembled message's buffer (see msg_owned).
 */
#define BF_GRPC_MSG_KEPT 0x10000
typedef int (*bf_grpc_msg_fn)(void *arg, const uint8_t *msg, size_t len, bool compressed);

/* budget: NULL = none (see struct bf_grpc_budget). The spare is set by
 * assigning p->spare after init (NULL = none). */
void bf_grpc_parser_init(struct bf_grpc_parser *p, uint32_t max, struct bf_grpc_budget *budget);
/*
 * Feeds bytes. Returns 0, or the first non-zero callback return, or
 * RESOURCE_EXHAUSTED (8) when a message declares more than max bytes or
 * its assembly buffer would exceed the shared budget (over_budget set),
 * INTERNAL (13) for a flag byte other than 0/1 or on allocation failure.
 * After a non-zero return the parser must be reset before reuse.
 */
int bf_grpc_parser_feed(struct bf_grpc_parser *p, const uint8_t *data, size_t len,
                        bf_grpc_msg_fn fn, void *arg);
/* True when no message is partially received (a stream may end here). */
bool bf_grpc_parser_idle(const struct bf_grpc_parser *p);
void bf_grpc_parser_reset(struct bf_grpc_parser *p);

/*
 * Message buffers (assembly buffers, and copies the server keeps): below
 * 1 MiB from malloc; from 1 MiB on, anonymous mappings grown with mremap,
 * so a large message is never copied while it grows (a 48 MiB message
 * used to cost a 32 MiB memcpy in one loop turn). Free with the capacity
 * it was allocated with.
 */
#define BF_GRPC_MMAP_MIN (1u << 20)
void *bf_grpc_buf_alloc(size_t cap);
void bf_grpc_buf_free(void *p, size_t cap);

/* Writes the 5-byte prefix for an uncompressed message of len bytes. */
void bf_grpc_prefix(uint8_t out[BF_GRPC_PREFIX], uint32_t len);

/*
 * grpc-timeout: "1*8DIGIT unit", unit one of H M S m u n. Returns 0 and
 * *ns (saturating at INT64_MAX), or -EINVAL.
 */
int bf_grpc_timeout_parse(const char *s, size_t len, int64_t *ns);
/* Formats ns (> 0) with the finest unit whose value fits 8 digits, rounding
 * up. out needs 10 bytes (8 digits, unit, NUL). Returns the length. */
size_t bf_grpc_timeout_format(int64_t ns, char *out);

/*
 * grpc-message percent-encoding: bytes outside 0x20..0x7E and '%' become
 * %XX (upper-case hex). Returns a malloc'd NUL-terminated string (NULL on
 * ENOMEM).
 */
char *bf_grpc_percent_encode(const char *msg);
/* Decodes %XX; invalid escapes are kept literally. malloc'd, NUL-terminated. */
char *bf_grpc_percent_decode(const uint8_t *s, size_t len);

/* "application/grpc", "application/grpc+proto", "application/grpc;..." */
bool bf_grpc_content_type_ok(const uint8_t *v, size_t len);

/* HTTP status of a response without grpc-status -> gRPC code (gRPC spec's table). */
int bf_grpc_code_from_http(int http_status);
/* RST_STREAM / GOAWAY error code -> gRPC code (client side). */
int bf_grpc_code_from_h2(uint32_t h2_error);
/* Parses a grpc-status value (decimal 0..16); UNKNOWN for anything else. */
int bf_grpc_status_parse(const uint8_t *v, size_t len);

#endif /* BF_NET_GRPC_WIRE_H */
