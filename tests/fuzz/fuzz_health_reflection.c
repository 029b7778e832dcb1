/*
 * fuzz_health_reflection.c — the request decoders of the standard services
 * on --listen (src/session/health.c, src/session/reflection.c). Input: a
 * selector byte (low bit), then the request bytes:
 *   0  HealthCheckRequest (Check and Watch) through bf_session_health_service;
 *   1  ServerReflectionRequest through bf_session_reflection_answer, which builds
 *      the whole response from the compiled-in descriptor set.
 *
 * Properties:
 *   - health: 0 exactly when protobuf-c decodes the request and its service
 *     name fits (-EBADMSG / -ENAMETOOLONG otherwise); the name returned is
 *     protobuf-c's;
 *   - reflection: 0 exactly when protobuf-c decodes the request; the answer
 *     decodes as a ServerReflectionResponse that echoes the request's known
 *     fields (never an unknown one: see the finding in docs/fuzzing.md) and
 *     the host; it answers the request's kind: the five services,
 *     the file asked for (first) and its dependencies, each a decodable
 *     FileDescriptorProto named once, the file defining a symbol, or an
 *     ErrorResponse with NOT_FOUND / INVALID_ARGUMENT; and it is bounded by
 *     the compiled-in set.
 */
#include "fuzz.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "session/session_internal.h"

extern const size_t bf_descriptor_set_len;

static void health(const uint8_t *p, size_t len)
{
    char name[SS_HEALTH_SERVICE_MAX + 1];
    int rc = bf_session_health_service(p, len, name);
    Grpc__Health__V1__HealthCheckRequest *m =
        grpc__health__v1__health_check_request__unpack(NULL, len, p);
    if (!m) {
        FUZZ_CHECK(rc == -EBADMSG);
        return;
    }
    if (strlen(m->service) > SS_HEALTH_SERVICE_MAX)
        FUZZ_CHECK(rc == -ENAMETOOLONG);
    else
        FUZZ_CHECK(rc == 0 && strcmp(name, m->service) == 0);
    grpc__health__v1__health_check_request__free_unpacked(m, NULL);
}

static void reflection(const uint8_t *p, size_t len)
{
    uint8_t *out;
    size_t outlen;
    struct ss_reflection_info info;
    int rc = bf_session_reflection_answer(p, len, &out, &outlen, &info);
    Grpc__Reflection__V1__ServerReflectionRequest *req =
        grpc__reflection__v1__server_reflection_request__unpack(NULL, len, p);
    if (!req) {
        FUZZ_CHECK(rc == -EBADMSG && out == NULL);
        return;
    }
    FUZZ_CHECK(rc == 0 && out != NULL);
    Grpc__Reflection__V1__ServerReflectionResponse *r =
        grpc__reflection__v1__server_reflection_response__unpack(NULL, outlen, out);
    FUZZ_CHECK(r != NULL);
    /* the echo: the request's known fields (no unknown field: protobuf-c
     * would re-pack an unknown field 0 into bytes no client decodes) */
    const Grpc__Reflection__V1__ServerReflectionRequest *o = r->original_request;
    FUZZ_CHECK(o && strcmp(r->valid_host, req->host) == 0 && strcmp(o->host, req->host) == 0);
    FUZZ_CHECK(o->base.n_unknown_fields == 0 &&
               o->message_request_case == req->message_request_case);
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION: {
        const Grpc__Reflection__V1__ExtensionRequest *x = o->file_containing_extension,
                                                     *y = req->file_containing_extension;
        FUZZ_CHECK(x && y && x->base.n_unknown_fields == 0);
        FUZZ_CHECK(strcmp(x->containing_type, y->containing_type) == 0 &&
                   x->extension_number == y->extension_number);
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST__NOT_SET:
        break;
    default: /* every other member is a string, at the same place */
        FUZZ_CHECK(strcmp(o->file_by_filename, req->file_by_filename) == 0);
        break;
    }
    /* every file once, the answer no larger than the set plus the echo */
    FUZZ_CHECK(outlen <= bf_descriptor_set_len + 2 * len + 4096);
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        FUZZ_CHECK(
            r->message_response_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE &&
            r->list_services_response->n_service == 5);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        if (r->message_response_case ==
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE) {
            FUZZ_CHECK(r->error_response->error_code == 5 /* NOT_FOUND */);
            break;
        }
        FUZZ_CHECK(
            r->message_response_case ==
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE);
        {
            const Grpc__Reflection__V1__FileDescriptorResponse *fr = r->file_descriptor_response;
            FUZZ_CHECK(fr->n_file_descriptor_proto >= 1);
            char **names = calloc(fr->n_file_descriptor_proto, sizeof *names);
            Google__Protobuf__FileDescriptorProto **fds =
                calloc(fr->n_file_descriptor_proto, sizeof *fds);
            FUZZ_CHECK(names && fds);
            for (size_t i = 0; i < fr->n_file_descriptor_proto; i++) {
                fds[i] = google__protobuf__file_descriptor_proto__unpack(
                    NULL, fr->file_descriptor_proto[i].len, fr->file_descriptor_proto[i].data);
                FUZZ_CHECK(fds[i] && fds[i]->name);
                names[i] = fds[i]->name;
                for (size_t j = 0; j < i; j++)
                    FUZZ_CHECK(strcmp(names[j], names[i]) != 0);
            }
            if (req->message_request_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME)
                FUZZ_CHECK(strcmp(names[0], req->file_by_filename) == 0);
            else /* the symbol's package is the defining file's */
                FUZZ_CHECK(!fds[0]->package ||
                           strstr(req->file_containing_symbol, fds[0]->package) != NULL);
            for (size_t i = 0; i < fr->n_file_descriptor_proto; i++)
                google__protobuf__file_descriptor_proto__free_unpacked(fds[i], NULL);
            free(names);
            free(fds);
        }
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        FUZZ_CHECK(
            r->message_response_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE &&
            r->error_response->error_code == 5);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        if (r->message_response_case ==
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE)
            FUZZ_CHECK(r->error_response->error_code == 5);
        else
            FUZZ_CHECK(strcmp(r->all_extension_numbers_response->base_type_name,
                              req->all_extension_numbers_of_type) == 0 &&
                       r->all_extension_numbers_response->n_extension_number == 0);
        break;
    default:
        FUZZ_CHECK(
            r->message_response_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE &&
            r->error_response->error_code == 3 /* INVALID_ARGUMENT */);
        break;
    }
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
    grpc__reflection__v1__server_reflection_request__free_unpacked(req, NULL);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        reflection(data + 1, size - 1);
    else
        health(data + 1, size - 1);
    return 0;
}
