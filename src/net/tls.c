/*
 * tls.c — TLS 1.3 / mTLS with wolfSSL 5.5.4 over custom I/O callbacks fed
 * by the io_uring loop (reference/ecosystem.md §3.2).
 *
 * Design notes
 *   - Only the in/out interface (struct bf_tls_io, net_internal.h) is seen
 *     of a connection. The recv callback hands wolfSSL the ciphertext the
 *     loop just received (io->in); it answers WANT_READ when that is used
 *     up. The send callback hands records to io->out, which conn.c queues
 *     without blocking and sends with one outstanding io_uring send per
 *     connection.
 *   - Contexts are reference counted: every session holds one, so a server
 *     can drop its context while connections still use it.
 *   - TLS 1.3 only (wolfTLSv1_3_*_method), ALPN "h2" offered by clients and
 *     required on servers when the client sends ALPN at all.
 *   - mTLS servers use VERIFY_PEER|FAIL_IF_NO_PEER_CERT against the CA;
 *     the identity is then read from the verified leaf's URI SANs
 *     (wire.md §7: exactly one with scheme bigfleet).
 *   - wolfSSL_Init/Cleanup are reference counted by wolfSSL itself; every
 *     context does one Init and one Cleanup.
 *   - Memory (issue 18): wolfSSL allocates through tls_malloc/tls_free (set
 *     once, before the first wolfSSL_Init), which count its live bytes
 *     (bf_net_tls_heap_bytes) and remember the large blocks (>= one page)
 *     allocated on behalf of a connection (io->blocks). Once the
 *     handshake is done, bf_tls_session_trim() releases the handshake
 *     resources and gives the kernel back the pages of the connection's
 *     WOLFSSL object and of its session that hold only zeros
 *     (MADV_DONTNEED on private anonymous memory reads back as zeros, so the
 *     contents do not change). The Debian build's session object
 *     (SESSION_CERTS: a 9-deep certificate chain of 4 KiB slots) is ~37 KiB
 *     of which ~32 KiB stays zero on a server; that is most of what an idle
 *     mTLS connection held. Only blocks known to be this connection's are
 *     touched: the WOLFSSL itself and wolfSSL_get_session(ssl), each
 *     checked against io->blocks.
 *   - Two wolfSSL builds are supported (docs/net.md "The TLS library").
 *     The default (scripts/build-wolfssl, linked statically) has no OpenSSL
 *     layer, KEEP_PEER_CERT or SESSION_CERTS, so a connection keeps no copy
 *     of the peer's certificate: the verify callback reads what is needed
 *     from the verified leaf during the handshake (WOLFSSL_ALWAYS_VERIFY_CB:
 *     called for the leaf with preverify=1 once its chain verified). A
 *     server keeps the result of bf_tls_leaf_identity (io->peer_uris,
 *     io->peer_ident); a client has wolfSSL match the server name
 *     (wolfSSL_check_domain_name: the SANs, or the CN when there are none —
 *     the matcher wolfSSL_X509_check_host uses) and the handshake fails on
 *     a mismatch. With Debian's shared library (make WOLFSSL=system:
 *     OPENSSL_EXTRA) the identity is bf_tls_leaf_identity of the peer
 *     certificate's DER after the handshake and the server name is checked
 *     with wolfSSL_X509_check_host / _check_ip_asc. One identity rule
 *     (bf_tls_leaf_identity) in both.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfcrypt/asn.h>
#include <wolfssl/wolfio.h>
#include <wolfssl/wolfcrypt/asn_public.h>
#include <wolfssl/wolfcrypt/error-crypt.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "net/net_internal.h"

/* io->peer_uris before the verify callback saw the peer's leaf */
#define BF_TLS_NO_LEAF INT8_MIN

/* ------------------------------------------------------------ wolfSSL heap */

#define TLS_BLK_MAGIC 0x7b15u
#define TLS_PAGE      4096u

/* In front of every block wolfSSL gets (16 bytes: malloc's alignment kept). */
struct tls_blk {
    uint32_t size; /* bytes wolfSSL asked for */
    uint16_t magic;
    uint16_t large; /* a struct tls_large precedes this header */
    uint32_t pad[2];
};
/* Large blocks also sit on their connection's list (io->blocks). */
struct tls_large {
    struct bf_list link; /* empty when the block belongs to no connection */
    struct tls_blk h;
};

static _Atomic uint64_t g_tls_heap;                              /* live bytes wolfSSL holds */
static pthread_mutex_t g_tls_blk_mu = PTHREAD_MUTEX_INITIALIZER; /* the lists */
static _Thread_local struct bf_tls_io *g_tls_owner;              /* session inside a wolfSSL call */
static pthread_once_t g_tls_alloc_once = PTHREAD_ONCE_INIT;

static void *tls_malloc(size_t n)
{
    if (n > UINT32_MAX - TLS_PAGE)
        return NULL;
    bool large = n >= TLS_PAGE;
    size_t pre = large ? sizeof(struct tls_large) : sizeof(struct tls_blk);
    uint8_t *base = malloc(pre + n);
    if (!base)
        return NULL;
    struct tls_blk *h = (struct tls_blk *)(base + pre) - 1;
    h->size = (uint32_t)n;
    h->magic = TLS_BLK_MAGIC;
    h->large = large;
    if (large) {
        struct tls_large *l = (struct tls_large *)base;
        bf_list_init(&l->link);
        if (g_tls_owner) {
            pthread_mutex_lock(&g_tls_blk_mu);
            bf_list_add_tail(&g_tls_owner->blocks, &l->link);
            pthread_mutex_unlock(&g_tls_blk_mu);
        }
    }
    atomic_fetch_add_explicit(&g_tls_heap, n, memory_order_relaxed);
    return h + 1;
}

static void tls_free(void *p)
{
    if (!p)
        return;
    struct tls_blk *h = (struct tls_blk *)p - 1;
    if (h->magic != TLS_BLK_MAGIC)
        abort(); /* not ours: a heap corruption or a block from before the allocator */
    atomic_fetch_sub_explicit(&g_tls_heap, h->size, memory_order_relaxed);
    h->magic = 0;
    if (h->large) {
        struct tls_large *l = BF_CONTAINER_OF(h, struct tls_large, h);
        pthread_mutex_lock(&g_tls_blk_mu);
        bf_list_del(&l->link);
        pthread_mutex_unlock(&g_tls_blk_mu);
        free(l);
    } else {
        free(h);
    }
}

static void *tls_realloc(void *p, size_t n)
{
    if (!p)
        return tls_malloc(n);
    if (n == 0) {
        tls_free(p);
        return NULL;
    }
    struct tls_blk *h = (struct tls_blk *)p - 1;
    void *q = tls_malloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, h->size < n ? h->size : n);
    tls_free(p);
    return q;
}

static void tls_alloc_install(void)
{
    wolfSSL_SetAllocators(tls_malloc, tls_free, tls_realloc);
}

/* Before every wolfSSL_Init: the allocators must be in place before
 * wolfSSL allocates anything. */
static int tls_init(void)
{
    pthread_once(&g_tls_alloc_once, tls_alloc_install);
    return wolfSSL_Init() == WOLFSSL_SUCCESS ? 0 : -EIO;
}

uint64_t bf_net_tls_heap_bytes(void)
{
    return atomic_load_explicit(&g_tls_heap, memory_order_relaxed);
}

/* The large block p of session io, or NULL if p is not one. */
static struct tls_large *tls_conn_block(struct bf_tls_io *io, const void *p)
{
    struct tls_large *found = NULL;
    pthread_mutex_lock(&g_tls_blk_mu);
    for (struct bf_list *e = io->blocks.next; e != &io->blocks; e = e->next) {
        struct tls_large *l = BF_CONTAINER_OF(e, struct tls_large, link);
        if ((const void *)(&l->h + 1) == p) {
            found = l;
            break;
        }
    }
    pthread_mutex_unlock(&g_tls_blk_mu);
    return found;
}

/* Detaches whatever is still on io's list (blocks wolfSSL keeps beyond the
 * session, if any: they stay allocated, just no longer io's). */
static void tls_blocks_forget(struct bf_tls_io *io)
{
    pthread_mutex_lock(&g_tls_blk_mu);
    while (!bf_list_empty(&io->blocks))
        bf_list_del(io->blocks.next);
    pthread_mutex_unlock(&g_tls_blk_mu);
}

/* Gives back the whole pages of block l that hold only zeros. */
static size_t tls_block_trim(struct tls_large *l)
{
    static const uint8_t zero[TLS_PAGE];
    uintptr_t a = (uintptr_t)(&l->h + 1), e = a + l->h.size;
    a = (a + TLS_PAGE - 1) & ~(uintptr_t)(TLS_PAGE - 1);
    e &= ~(uintptr_t)(TLS_PAGE - 1);
    size_t freed = 0;
    for (; a < e; a += TLS_PAGE) {
        if (memcmp((const void *)a, zero, TLS_PAGE) != 0)
            continue;
        if (madvise((void *)a, TLS_PAGE, MADV_DONTNEED) == 0)
            freed += TLS_PAGE;
    }
    return freed;
}

struct bf_tls_ctx {
    WOLFSSL_CTX *ctx;
    int refs;
    bool mtls;
    enum bf_tls_role role;
    /* rotation: cert/key re-read when their mtime changes; the CA bundle is
     * read once at startup and kept (wire.md §7) */
    char *cert_file, *key_file;
    uint8_t *ca_pem;
    long ca_len;
    struct timespec cert_mtime, key_mtime;
    int64_t checked_ns;
};

static int io_recv(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    struct bf_tls_io *io = ctx;
    if (io->in_len == 0)
        return WOLFSSL_CBIO_ERR_WANT_READ;
    size_t n = (size_t)sz < io->in_len ? (size_t)sz : io->in_len;
    memcpy(buf, io->in, n);
    io->in += n;
    io->in_len -= n;
    return (int)n;
}

static int io_send(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    struct bf_tls_io *io = ctx;
    int r = io->out(io, buf, (size_t)sz);
    if (r == -EPIPE)
        return WOLFSSL_CBIO_ERR_CONN_CLOSE;
    if (r < 0)
        return WOLFSSL_CBIO_ERR_GENERAL;
    return sz;
}

static const char *wolf_err(unsigned long e, char *buf, size_t cap)
{
#ifdef OPENSSL_EXTRA
    (void)e;
    unsigned long q = wolfSSL_ERR_get_error();
#else
    unsigned long q = e; /* no error queue: the call's own code */
#endif
    if (q)
        wolfSSL_ERR_error_string_n(q, buf, cap);
    else
        snprintf(buf, cap, "cannot load or parse the file");
    return buf;
}

static int load_ca(WOLFSSL_CTX *ctx, const uint8_t *pem, long len, const char *name)
{
    char eb[128];
    int r = wolfSSL_CTX_load_verify_buffer(ctx, pem, len, WOLFSSL_FILETYPE_PEM);
    if (r != WOLFSSL_SUCCESS) {
        BF_ERROR("TLS CA bundle unusable", "file=\"%s\" err=\"%s\"", name,
                 wolf_err((unsigned long)r, eb, sizeof eb));
        return -EIO;
    }
    return 0;
}

static uint8_t *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && n < (16 << 20) && fseek(f, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)n);
            if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            }
            *len = n;
        }
    }
    fclose(f);
    return buf;
}

static int load_files(WOLFSSL_CTX *ctx, const struct bf_net_tls_config *cfg)
{
    char eb[128];
    if (cfg->cert_file && *cfg->cert_file) {
        int r = wolfSSL_CTX_use_certificate_chain_file(ctx, cfg->cert_file);
        if (r != WOLFSSL_SUCCESS) {
            BF_ERROR("TLS certificate unusable", "file=\"%s\" err=\"%s\"", cfg->cert_file,
                     wolf_err((unsigned long)r, eb, sizeof eb));
            return -EIO;
        }
    }
    if (cfg->key_file && *cfg->key_file) {
        int r = wolfSSL_CTX_use_PrivateKey_file(ctx, cfg->key_file, WOLFSSL_FILETYPE_PEM);
        if (r != WOLFSSL_SUCCESS) {
            BF_ERROR("TLS key unusable", "file=\"%s\" err=\"%s\"", cfg->key_file,
                     wolf_err((unsigned long)r, eb, sizeof eb));
            return -EIO;
        }
        if (wolfSSL_CTX_check_private_key(ctx) != WOLFSSL_SUCCESS) {
            BF_ERROR("TLS key does not match certificate", "key=\"%s\" cert=\"%s\"", cfg->key_file,
                     cfg->cert_file);
            return -EIO;
        }
    }
    return 0;
}

static void file_mtime(const char *path, struct timespec *ts)
{
    struct stat st;
    if (path && stat(path, &st) == 0)
        *ts = st.st_mtim;
    else
        memset(ts, 0, sizeof *ts);
}

/* The rules of wire.md §7 on a certificate's URI SANs, in both builds (the
 * contract is in net_internal.h). The DER is parsed by wolfSSL's own
 * certificate parser, the one the handshake used on the same bytes. */
static bool is_bigfleet_uri(const DNS_entry *a)
{
    /* scheme "bigfleet" (case-insensitive, as url.Parse lowercases it); an
     * embedded NUL: not a URI */
    return a->type == ASN_URI_TYPE && a->name && a->len >= 9 &&
           strncasecmp(a->name, "bigfleet:", 9) == 0 && !memchr(a->name, 0, (size_t)a->len);
}

int bf_tls_leaf_identity(const uint8_t *der, size_t len, char **ident)
{
    *ident = NULL;
    if (!der || len == 0 || len > UINT32_MAX)
        return -EINVAL;
    DecodedCert dc;
    wc_InitDecodedCert(&dc, der, (word32)len, NULL);
    int n = 0;
    int r = wc_ParseCert(&dc, CERT_TYPE, NO_VERIFY, NULL);
    if (r != 0) {
        n = r == MEMORY_E ? -ENOMEM : -EINVAL;
        goto out;
    }
    for (DNS_entry *a = dc.altNames; a; a = a->next) {
        if (!is_bigfleet_uri(a))
            continue;
        if (n < INT8_MAX)
            n++;
    }
    if (n == 1) {
        for (DNS_entry *a = dc.altNames; a; a = a->next) {
            if (!is_bigfleet_uri(a))
                continue;
            char *s = malloc((size_t)a->len + 1);
            if (!s) {
                n = -ENOMEM;
                break;
            }
            memcpy(s, "bigfleet", 8);
            memcpy(s + 8, a->name + 8, (size_t)a->len - 8);
            s[a->len] = 0;
            *ident = s;
            break;
        }
    }
out:
    wc_FreeDecodedCert(&dc);
    return n;
}

#ifndef OPENSSL_EXTRA
/* wolfSSL calls this for the peer's leaf with preverify=1 once the chain
 * verified (WOLFSSL_ALWAYS_VERIFY_CB) and for every failure with
 * preverify=0; the verdict is wolfSSL's, unchanged. */
static int verify_cb(int preverify, WOLFSSL_X509_STORE_CTX *store)
{
    struct bf_tls_io *io = g_tls_owner;
    if (!preverify || !io || !store || store->error_depth != 0 || !store->certs ||
        store->totalCerts < 1)
        return preverify;
    if (!io->is_client) {
        free(io->peer_ident);
        io->peer_ident = NULL;
        int n =
            bf_tls_leaf_identity(store->certs[0].buffer, store->certs[0].length, &io->peer_ident);
        io->peer_uris = (int8_t)(n < -INT8_MAX ? -EINVAL : n); /* count, -EINVAL or -ENOMEM */
    } else {
        io->name_checked = true; /* wolfSSL fails the handshake on a mismatch */
    }
    return preverify;
}
#define BF_VERIFY_CB verify_cb
#else
#define BF_VERIFY_CB NULL
#endif

/* A WOLFSSL_CTX for t's role from its files (cert/key re-read, CA kept). */
static WOLFSSL_CTX *build_ctx(struct bf_tls_ctx *t, int *err)
{
    WOLFSSL_CTX *ctx = wolfSSL_CTX_new(t->role == BF_TLS_SERVER ? wolfTLSv1_3_server_method()
                                                                : wolfTLSv1_3_client_method());
    if (!ctx) {
        *err = -ENOMEM;
        return NULL;
    }
    struct bf_net_tls_config cfg = {t->cert_file, t->key_file, NULL};
    int r = load_files(ctx, &cfg);
    if (r == 0 && t->ca_pem)
        r = load_ca(ctx, t->ca_pem, t->ca_len, "(ca bundle)");
    if (r < 0) {
        wolfSSL_CTX_free(ctx);
        *err = r;
        return NULL;
    }
    if (t->role == BF_TLS_SERVER)
        wolfSSL_CTX_set_verify(ctx,
                               t->mtls ? WOLFSSL_VERIFY_PEER | WOLFSSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                       : WOLFSSL_VERIFY_NONE,
                               BF_VERIFY_CB);
    else
        wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_PEER, BF_VERIFY_CB);
    wolfSSL_CTX_SetIORecv(ctx, io_recv);
    wolfSSL_CTX_SetIOSend(ctx, io_send);
    return ctx;
}

static void ctx_free_fields(struct bf_tls_ctx *t)
{
    free(t->cert_file);
    free(t->key_file);
    free(t->ca_pem);
}

int bf_tls_ctx_new(const struct bf_net_tls_config *cfg, enum bf_tls_role role,
                   struct bf_tls_ctx **out)
{
    bool cert = cfg->cert_file && *cfg->cert_file, key = cfg->key_file && *cfg->key_file,
         ca = cfg->ca_file && *cfg->ca_file;
    if (cert != key)
        return -EINVAL;
    if (role == BF_TLS_SERVER && !cert)
        return -EINVAL;
    if (role == BF_TLS_CLIENT && !ca)
        return -EINVAL;
    if (tls_init() < 0)
        return -EIO;
    struct bf_tls_ctx *t = calloc(1, sizeof *t);
    if (!t) {
        wolfSSL_Cleanup();
        return -ENOMEM;
    }
    t->refs = 1;
    t->role = role;
    t->mtls = role == BF_TLS_SERVER && ca;
    int r = -ENOMEM;
    if (cert &&
        (!(t->cert_file = strdup(cfg->cert_file)) || !(t->key_file = strdup(cfg->key_file))))
        goto out_fail;
    if (ca) {
        t->ca_pem = read_file(cfg->ca_file, &t->ca_len);
        if (!t->ca_pem) {
            BF_ERROR("TLS CA bundle unreadable", "file=\"%s\"", cfg->ca_file);
            r = -EIO;
            goto out_fail;
        }
    }
    file_mtime(t->cert_file, &t->cert_mtime);
    file_mtime(t->key_file, &t->key_mtime);
    t->checked_ns = bf_mono_ns();
    t->ctx = build_ctx(t, &r);
    if (!t->ctx)
        goto out_fail;
    *out = t;
    return 0;
out_fail:
    ctx_free_fields(t);
    free(t);
    wolfSSL_Cleanup();
    return r;
}

int bf_tls_ctx_maybe_reload(struct bf_tls_ctx **pt)
{
    struct bf_tls_ctx *t = *pt;
    int64_t now = bf_mono_ns();
    if (!t->cert_file || now - t->checked_ns < BF_NS_PER_SEC)
        return 0;
    t->checked_ns = now;
    struct timespec cm, km;
    file_mtime(t->cert_file, &cm);
    file_mtime(t->key_file, &km);
    if (memcmp(&cm, &t->cert_mtime, sizeof cm) == 0 && memcmp(&km, &t->key_mtime, sizeof km) == 0)
        return 0;
    /* a new context; connections already open keep the old one (refcounted) */
    struct bf_tls_ctx *n = calloc(1, sizeof *n);
    if (!n)
        return -ENOMEM;
    *n = *t;
    n->refs = 1;
    n->cert_file = strdup(t->cert_file);
    n->key_file = strdup(t->key_file);
    n->ca_pem = t->ca_pem ? malloc((size_t)t->ca_len) : NULL;
    int r = -ENOMEM;
    if (!n->cert_file || !n->key_file || (t->ca_pem && !n->ca_pem))
        goto out_fail;
    if (t->ca_pem)
        memcpy(n->ca_pem, t->ca_pem, (size_t)t->ca_len);
    n->ctx = build_ctx(n, &r);
    if (!n->ctx)
        goto out_fail;
    if (tls_init() < 0) {
        wolfSSL_CTX_free(n->ctx);
        r = -EIO;
        goto out_fail;
    }
    n->cert_mtime = cm;
    n->key_mtime = km;
    BF_INFO("TLS certificate reloaded", "cert=\"%s\"", t->cert_file);
    *pt = n;
    bf_tls_ctx_unref(t);
    return 1;
out_fail:
    /* keep serving with the old pair; try again on the next change */
    t->cert_mtime = cm;
    t->key_mtime = km;
    BF_WARN("TLS certificate reload failed; keeping the previous one", "cert=\"%s\" err=%d",
            t->cert_file, r);
    ctx_free_fields(n);
    free(n);
    return r;
}

void bf_tls_ctx_ref(struct bf_tls_ctx *t)
{
    t->refs++;
}

void bf_tls_ctx_unref(struct bf_tls_ctx *t)
{
    if (!t || --t->refs > 0)
        return;
    wolfSSL_CTX_free(t->ctx);
    ctx_free_fields(t);
    free(t);
    wolfSSL_Cleanup();
}

bool bf_tls_ctx_mtls(const struct bf_tls_ctx *t)
{
    return t->mtls;
}

static bool is_ip_literal(const char *s)
{
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

int bf_tls_session_new(struct bf_tls_io *io, struct bf_tls_ctx *t, const char *sni)
{
    bf_list_init(&io->blocks);
    io->name_checked = false;
    io->peer_uris = BF_TLS_NO_LEAF;
    io->peer_ident = NULL;
    g_tls_owner = io;
    WOLFSSL *ssl = wolfSSL_new(t->ctx);
    g_tls_owner = NULL;
    if (!ssl) {
        tls_blocks_forget(io);
        return -ENOMEM;
    }
    wolfSSL_SetIOReadCtx(ssl, io);
    wolfSSL_SetIOWriteCtx(ssl, io);
    char alpn[] = "h2";
    if (wolfSSL_UseALPN(ssl, alpn, 2, WOLFSSL_ALPN_FAILED_ON_MISMATCH) != WOLFSSL_SUCCESS) {
        wolfSSL_free(ssl);
        tls_blocks_forget(io);
        return -EIO;
    }
    if (t->role == BF_TLS_CLIENT && sni && *sni && !is_ip_literal(sni))
        wolfSSL_UseSNI(ssl, WOLFSSL_SNI_HOST_NAME, sni, (unsigned short)strlen(sni));
#ifndef OPENSSL_EXTRA
    /* the server name is matched during the handshake (verify_cb) */
    if (t->role == BF_TLS_CLIENT && sni && *sni &&
        wolfSSL_check_domain_name(ssl, sni) != WOLFSSL_SUCCESS) {
        wolfSSL_free(ssl);
        tls_blocks_forget(io);
        return -ENOMEM;
    }
#endif
    io->ssl = (struct WOLFSSL *)ssl;
    io->ctx = t;
    bf_tls_ctx_ref(t);
    return 0;
}

void bf_tls_session_free(struct bf_tls_io *io)
{
    if (io->ssl) {
        wolfSSL_free((WOLFSSL *)io->ssl);
        io->ssl = NULL;
        tls_blocks_forget(io);
        free(io->peer_ident);
        io->peer_ident = NULL;
    }
    if (io->ctx) {
        bf_tls_ctx_unref(io->ctx);
        io->ctx = NULL;
    }
}

size_t bf_tls_session_trim(struct bf_tls_io *io)
{
    WOLFSSL *ssl = (WOLFSSL *)io->ssl;
    if (!ssl)
        return 0;
    size_t freed = 0;
    const void *mine[2] = {ssl, wolfSSL_get_session(ssl)};
    for (int i = 0; i < 2; i++) {
        struct tls_large *l = mine[i] ? tls_conn_block(io, mine[i]) : NULL;
        if (l)
            freed += tls_block_trim(l);
    }
    return freed;
}

int bf_tls_handshake(struct bf_tls_io *io)
{
    WOLFSSL *ssl = (WOLFSSL *)io->ssl;
    g_tls_owner = io;
    int r = io->is_client ? wolfSSL_connect(ssl) : wolfSSL_accept(ssl);
    g_tls_owner = NULL;
    if (r == WOLFSSL_SUCCESS)
        return 1;
    int e = wolfSSL_get_error(ssl, r);
    if (e == WOLFSSL_ERROR_WANT_READ || e == WOLFSSL_ERROR_WANT_WRITE)
        return 0;
    return e < 0 ? e : -EIO;
}

int bf_tls_read(struct bf_tls_io *io, uint8_t *buf, size_t cap,
                int (*emit)(struct bf_tls_io *io, const uint8_t *p, size_t n))
{
    WOLFSSL *ssl = (WOLFSSL *)io->ssl;
    for (;;) {
        int n = wolfSSL_read(ssl, buf, (int)cap);
        if (n > 0) {
            int r = emit(io, buf, (size_t)n);
            if (r < 0)
                return r;
            if (r > 0)
                return 0;
            continue;
        }
        int e = wolfSSL_get_error(ssl, n);
        if (e == WOLFSSL_ERROR_WANT_READ || e == WOLFSSL_ERROR_WANT_WRITE)
            return 0;
        if (e == WOLFSSL_ERROR_ZERO_RETURN)
            return 1;
        return e < 0 ? e : -EIO;
    }
}

int bf_tls_write(struct bf_tls_io *io, const void *p, size_t n)
{
    WOLFSSL *ssl = (WOLFSSL *)io->ssl;
    const uint8_t *s = p;
    while (n > 0) {
        int chunk = n > (1u << 30) ? (1 << 30) : (int)n;
        int r = wolfSSL_write(ssl, s, chunk);
        if (r <= 0)
            return -EIO;
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

void bf_tls_shutdown(struct bf_tls_io *io)
{
    wolfSSL_shutdown((WOLFSSL *)io->ssl);
}

int bf_tls_peer_identity(struct bf_tls_io *io, char **ident)
{
    *ident = NULL;
#ifndef OPENSSL_EXTRA
    if (!io->ssl || io->peer_uris == BF_TLS_NO_LEAF)
        return -1;
    int n = io->peer_uris;
    if (n == 1 && io->peer_ident) {
        *ident = io->peer_ident; /* the caller owns it now */
        io->peer_ident = NULL;
        return 1;
    }
    free(io->peer_ident);
    io->peer_ident = NULL;
    return n == 1 ? -ENOMEM : n; /* never 1 without the identity */
#else
    WOLFSSL_X509 *peer = wolfSSL_get_peer_certificate((WOLFSSL *)io->ssl);
    if (!peer)
        return -1;
    int len = 0;
    const unsigned char *der = wolfSSL_X509_get_der(peer, &len);
    int n = der && len > 0 ? bf_tls_leaf_identity(der, (size_t)len, ident) : -EINVAL;
    wolfSSL_X509_free(peer);
    return n;
#endif
}

int bf_tls_verify_name(struct bf_tls_io *io, const char *name)
{
#ifndef OPENSSL_EXTRA
    (void)name; /* the name given to bf_tls_session_new, matched by wolfSSL */
    return io->ssl && io->name_checked ? 0 : -EPERM;
#else
    WOLFSSL_X509 *peer = wolfSSL_get_peer_certificate((WOLFSSL *)io->ssl);
    if (!peer)
        return -EPERM;
    int ok;
    if (is_ip_literal(name))
        ok = wolfSSL_X509_check_ip_asc(peer, name, 0) == WOLFSSL_SUCCESS;
    else
        ok = wolfSSL_X509_check_host(peer, name, strlen(name), 0, NULL) == WOLFSSL_SUCCESS;
    wolfSSL_X509_free(peer);
    return ok ? 0 : -EPERM;
#endif
}

int bf_tls_alpn_h2(struct bf_tls_io *io)
{
    char *name = NULL;
    unsigned short len = 0;
    int r = wolfSSL_ALPN_GetProtocol((WOLFSSL *)io->ssl, &name, &len);
    if (r != WOLFSSL_SUCCESS || !name)
        return 0;
    return (len == 2 && memcmp(name, "h2", 2) == 0) ? 1 : -1;
}

const char *bf_tls_error_string(int ret, char *buf, size_t cap)
{
    /* wolfSSL codes are negative ints; the API takes them cast to unsigned long */
    wolfSSL_ERR_error_string_n((unsigned long)(long)ret, buf, cap);
    return buf;
}
