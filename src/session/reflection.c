/*
 * reflection.c — gRPC server reflection (grpc.reflection.v1 and v1alpha,
 * grpc/doc/server-reflection.md) on --listen, so that grpcurl-style tools
 * can list and describe the shard's services without the .proto files.
 *
 * The schema comes from a FileDescriptorSet generated at build time from
 * proto/ (protoc-c --descriptor_set_out --include_imports; GNUmakefile) and
 * compiled into the binary (bf_descriptor_set). The first reflection call
 * decodes it with protobuf-c (descriptor.proto) into an index: each file's
 * serialized FileDescriptorProto and its dependencies, and every
 * fully-qualified symbol (messages and nested messages, enums, services,
 * Service.Method) with the file that defines it. Answers:
 *   list_services                  the services this server answers
 *   file_by_filename               the file and its transitive dependencies
 *   file_containing_symbol         the defining file and its dependencies
 *   file_containing_extension      NOT_FOUND (the schema has no extensions)
 *   all_extension_numbers_of_type  the type with no numbers, or NOT_FOUND
 * A request that does not decode ends the stream with INVALID_ARGUMENT.
 *
 * v1alpha is wire-identical to v1: both paths share this code.
 * Bounds: a request is at most 64 KiB (a symbol name); a stream whose
 * unread responses exceed 4 MiB (a client that asks without reading) is
 * ended with RESOURCE_EXHAUSTED.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "session_internal.h"

extern const unsigned char bf_descriptor_set[];
extern const size_t bf_descriptor_set_len;

#define MAX_REQUEST_BYTES (64u << 10)
#define MAX_UNREAD_BYTES  (4u << 20)

static const char *const served[] = {
    "bigfleet.v1alpha1.Shard",
    "bigfleet.v1alpha1.ShardRead",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};
#define N_SERVED (sizeof served / sizeof served[0])

struct rfile {
    const char *name;
    ProtobufCBinaryData bytes; /* the serialized FileDescriptorProto */
    int *deps;                 /* indices of its direct dependencies */
    size_t n_deps;
};

struct rsym {
    char *name; /* fully qualified, no leading dot */
    int file;
};

static struct {
    bool built, failed;
    Google__Protobuf__FileDescriptorSet *set;
    struct rfile *files;
    size_t n_files;
    struct rsym *syms;
    size_t n_syms, cap_syms;
} R;

static int add_sym(const char *prefix, const char *name, int file)
{
    if (R.n_syms == R.cap_syms &&
        bf_grow((void **)&R.syms, &R.cap_syms, R.n_syms + 1, sizeof *R.syms))
        return -ENOMEM;
    size_t l = strlen(prefix) + strlen(name) + 2;
    char *full = malloc(l);
    if (!full)
        return -ENOMEM;
    snprintf(full, l, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    R.syms[R.n_syms++] = (struct rsym){full, file};
    return 0;
}

static int add_message(const char *prefix, const Google__Protobuf__DescriptorProto *m, int file)
{
    if (add_sym(prefix, m->name, file))
        return -ENOMEM;
    char inner[512];
    snprintf(inner, sizeof inner, "%s%s%s", prefix, prefix[0] ? "." : "", m->name);
    for (size_t i = 0; i < m->n_nested_type; i++)
        if (add_message(inner, m->nested_type[i], file))
            return -ENOMEM;
    for (size_t i = 0; i < m->n_enum_type; i++)
        if (add_sym(inner, m->enum_type[i]->name, file))
            return -ENOMEM;
    return 0;
}

static int find_file(const char *name)
{
    for (size_t i = 0; i < R.n_files; i++)
        if (strcmp(R.files[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int build_index(void)
{
    if (R.built)
        return R.failed ? -EIO : 0;
    R.built = true;
    R.failed = true;
    R.set = google__protobuf__file_descriptor_set__unpack(NULL, bf_descriptor_set_len,
                                                          bf_descriptor_set);
    if (!R.set)
        return -EIO;
    R.n_files = R.set->n_file;
    R.files = calloc(R.n_files ? R.n_files : 1, sizeof *R.files);
    if (!R.files)
        return -ENOMEM;
    for (size_t i = 0; i < R.n_files; i++) {
        const Google__Protobuf__FileDescriptorProto *f = R.set->file[i];
        struct rfile *rf = &R.files[i];
        rf->name = f->name;
        size_t len = protobuf_c_message_get_packed_size(&f->base);
        rf->bytes.data = malloc(len ? len : 1);
        if (!rf->bytes.data)
            return -ENOMEM;
        rf->bytes.len = protobuf_c_message_pack(&f->base, rf->bytes.data);
        const char *pkg = f->package ? f->package : "";
        for (size_t k = 0; k < f->n_message_type; k++)
            if (add_message(pkg, f->message_type[k], (int)i))
                return -ENOMEM;
        for (size_t k = 0; k < f->n_enum_type; k++)
            if (add_sym(pkg, f->enum_type[k]->name, (int)i))
                return -ENOMEM;
        for (size_t k = 0; k < f->n_service; k++) {
            const Google__Protobuf__ServiceDescriptorProto *sv = f->service[k];
            if (add_sym(pkg, sv->name, (int)i))
                return -ENOMEM;
            char svc[512];
            snprintf(svc, sizeof svc, "%s%s%s", pkg, pkg[0] ? "." : "", sv->name);
            for (size_t m = 0; m < sv->n_method; m++)
                if (add_sym(svc, sv->method[m]->name, (int)i))
                    return -ENOMEM;
        }
    }
    for (size_t i = 0; i < R.n_files; i++) {
        const Google__Protobuf__FileDescriptorProto *f = R.set->file[i];
        struct rfile *rf = &R.files[i];
        rf->deps = calloc(f->n_dependency ? f->n_dependency : 1, sizeof *rf->deps);
        if (!rf->deps)
            return -ENOMEM;
        for (size_t d = 0; d < f->n_dependency; d++) {
            int j = find_file(f->dependency[d]);
            if (j >= 0) /* --include_imports: every dependency is in the set */
                rf->deps[rf->n_deps++] = j;
        }
    }
    R.failed = false;
    BF_DEBUG("server reflection index built", "files=%zu symbols=%zu bytes=%zu", R.n_files,
             R.n_syms, bf_descriptor_set_len);
    return 0;
}

static int find_symbol(const char *name)
{
    if (name[0] == '.')
        name++;
    for (size_t i = 0; i < R.n_syms; i++)
        if (strcmp(R.syms[i].name, name) == 0)
            return R.syms[i].file;
    return -1;
}

/* file and its transitive dependencies, each once, the file first */
static size_t closure(int file, bool *seen, ProtobufCBinaryData *out, size_t n)
{
    if (seen[file])
        return n;
    seen[file] = true;
    out[n++] = R.files[file].bytes;
    for (size_t d = 0; d < R.files[file].n_deps; d++)
        n = closure(R.files[file].deps[d], seen, out, n);
    return n;
}

static void reply_error(Grpc__Reflection__V1__ServerReflectionResponse *resp,
                        Grpc__Reflection__V1__ErrorResponse *er, int code, const char *msg)
{
    er->error_code = code;
    er->error_message = (char *)msg;
    resp->message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp->error_response = er;
}

int bf_session_reflection_answer(const uint8_t *msg, size_t len, uint8_t **out, size_t *outlen,
                                 struct ss_reflection_info *info)
{
    memset(info, 0, sizeof *info);
    *out = NULL;
    *outlen = 0;
    Grpc__Reflection__V1__ServerReflectionRequest *req =
        grpc__reflection__v1__server_reflection_request__unpack(NULL, len, msg);
    if (!req)
        return -EBADMSG;
    if (build_index() != 0) {
        grpc__reflection__v1__server_reflection_request__free_unpacked(req, NULL);
        return -EIO;
    }
    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    Grpc__Reflection__V1__ErrorResponse er = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    Grpc__Reflection__V1__FileDescriptorResponse fd =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ListServiceResponse ls =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse sr[N_SERVED];
    Grpc__Reflection__V1__ServiceResponse *srp[N_SERVED];
    Grpc__Reflection__V1__ExtensionNumberResponse en =
        GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
    ProtobufCBinaryData *files = calloc(R.n_files ? R.n_files : 1, sizeof *files);
    bool *seen = calloc(R.n_files ? R.n_files : 1, sizeof *seen);
    /* the echo carries the request's known fields only: protobuf-c keeps an
     * unknown field numbered 0 (invalid protobuf) that it would pack into a
     * response no client could decode */
    Grpc__Reflection__V1__ServerReflectionRequest echo = *req;
    Grpc__Reflection__V1__ExtensionRequest ext;
    echo.base.n_unknown_fields = 0;
    echo.base.unknown_fields = NULL;
    if (req->message_request_case ==
            GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION &&
        req->file_containing_extension) {
        ext = *req->file_containing_extension;
        ext.base.n_unknown_fields = 0;
        ext.base.unknown_fields = NULL;
        echo.file_containing_extension = &ext;
    }
    resp.valid_host = req->host;
    resp.original_request = &echo;
    int file = -1;
    const char *what = NULL;
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        for (size_t i = 0; i < N_SERVED; i++) {
            grpc__reflection__v1__service_response__init(&sr[i]);
            sr[i].name = (char *)served[i];
            srp[i] = &sr[i];
        }
        ls.n_service = N_SERVED;
        ls.service = srp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        resp.list_services_response = &ls;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        what = req->file_by_filename;
        file = find_file(what);
        if (file < 0)
            reply_error(&resp, &er, BF_NET_NOT_FOUND, "file not found");
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        what = req->file_containing_symbol;
        file = find_symbol(what);
        if (file < 0)
            reply_error(&resp, &er, BF_NET_NOT_FOUND, "symbol not found");
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        reply_error(&resp, &er, BF_NET_NOT_FOUND, "extension not found");
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        if (find_symbol(req->all_extension_numbers_of_type) < 0) {
            reply_error(&resp, &er, BF_NET_NOT_FOUND, "type not found");
        } else {
            en.base_type_name = req->all_extension_numbers_of_type;
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
            resp.all_extension_numbers_response = &en;
        }
        break;
    default:
        reply_error(&resp, &er, BF_NET_INVALID_ARGUMENT, "no request set");
        break;
    }
    int rc = 0;
    if (file >= 0 && files && seen) {
        fd.n_file_descriptor_proto = closure(file, seen, files, 0);
        fd.file_descriptor_proto = files;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        resp.file_descriptor_response = &fd;
    } else if (file >= 0) {
        rc = -ENOMEM;
    }
    if (!rc) {
        size_t n = protobuf_c_message_get_packed_size(&resp.base);
        *out = malloc(n ? n : 1);
        if (*out)
            *outlen = protobuf_c_message_pack(&resp.base, *out);
        else
            rc = -ENOMEM;
    }
    info->request_case = (int)req->message_request_case;
    info->files = fd.n_file_descriptor_proto;
    snprintf(info->subject, sizeof info->subject, "%s", what ? what : "");
    free(files);
    free(seen);
    grpc__reflection__v1__server_reflection_request__free_unpacked(req, NULL);
    return rc;
}

static void on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct ss *ss = arg;
    if (len > MAX_REQUEST_BYTES) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "reflection request over 64 KiB");
        return;
    }
    if (bf_net_call_outbox_bytes(call) > MAX_UNREAD_BYTES) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED,
                           "reflection responses not read (over 4 MiB queued)");
        return;
    }
    uint8_t *out;
    size_t outlen;
    struct ss_reflection_info info;
    int rc = bf_session_reflection_answer(msg, len, &out, &outlen, &info);
    if (rc == -EBADMSG) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT,
                           "ServerReflectionRequest does not decode");
        return;
    }
    BF_STAT_INC(ss->shm->st->host.reflection_calls);
    if (rc == -EIO) {
        bf_net_call_finish(call, BF_NET_INTERNAL, "the compiled-in descriptor set does not decode");
        return;
    }
    if (!rc)
        rc = bf_net_call_send(call, out, outlen);
    BF_DEBUG("server reflection", "peer=%s request=%d subject=\"%s\" files=%zu rc=%d",
             bf_net_call_peer(call), info.request_case, info.subject, info.files, rc);
    free(out);
    if (rc)
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "cannot queue the response");
}

static void on_half_close(struct bf_net_call *call, void *arg)
{
    (void)arg;
    if (!bf_net_call_finished(call))
        bf_net_call_finish(call, BF_NET_OK, NULL);
}

const struct bf_net_method bf_reflection_v1_method = {
    .path = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    .kind = BF_NET_BIDI_STREAMING,
    .on_message = on_message,
    .on_half_close = on_half_close,
};

const struct bf_net_method bf_reflection_v1alpha_method = {
    .path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    .kind = BF_NET_BIDI_STREAMING,
    .on_message = on_message,
    .on_half_close = on_half_close,
};
