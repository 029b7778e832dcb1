/*
 * wire_identity.c: the protobuf-c side of the wire-identity interop test
 * (tests/interop/wire_identity.test.js runs it; protobufjs is the other side).
 *
 *   wire_identity list
 *       print the full name of every top-level message type of the five
 *       bigfleet.v1alpha1 .proto files, one a line (the JS side checks that
 *       this table and protobufjs' view of the schema are the same set).
 *   wire_identity encode FIXTURE OUTDIR
 *       read the shared fixture (tests/interop/wire_fixtures.json), build every
 *       case with protobuf-c, pack it and write OUTDIR/<full name>@<case>.bin;
 *       also write OUTDIR/<full name>@_default.bin (a freshly initialised
 *       message) for every type of the table.
 *   wire_identity decode DIR
 *       unpack every DIR/<full name>@<label>.bin with protobuf-c and print one
 *       JSON object on stdout: {"<file stem>": {"ok": true, "value": DUMP,
 *       "repacked": HEX} | {"ok": false}, ...}.
 *
 * Design notes.
 * - Generic: values are set and read through the protoc-c generated
 *   descriptors (field offsets, quantifier offsets, oneof case members), so the
 *   only per-message knowledge here is the table of descriptors; the values come
 *   from the fixture, which the JS side reads too. Nothing here knows a result.
 * - Fixture value syntax (per proto type): int32/enum JSON number; int64/uint64
 *   decimal string (or number); double JSON number or "NaN"/"Infinity"/
 *   "-Infinity"; bool; string JSON string (no NUL: protobuf-c strings are
 *   NUL-terminated); bytes lowercase/uppercase hex string; message object;
 *   repeated array; map object (entries packed in the object's order); a oneof
 *   sets exactly one member. Keys starting with '$' are comments, ignored.
 * - Dump syntax: every field in field-number order; implicit-presence scalars
 *   always (defaults included); message fields null when absent; a oneof shows
 *   only its set member; int64 as decimal strings; doubles with %.17g or
 *   "NaN"/"Infinity"/"-Infinity"; bytes as hex; maps as [[key, value], ...] in
 *   wire order (duplicates kept); unknown fields as "$unknown":
 *   [[number, wire_type, hex of the data protobuf-c keeps], ...] (for wire
 *   type 2 that data starts with the length prefix).
 * - Errors: messages on stderr, exit status 1 (2 for usage). Memory is freed
 *   with protobuf_c_message_free_unpacked (everything is malloc'd).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "pbc_fields.h"

/* ------------------------------------------------------------ type table */

#define D(name) &bigfleet__v1alpha1__##name##__descriptor

/* Every top-level message of the five proto/bigfleet/v1alpha1 files (map entry types
 * are nested and reached through their map fields). */
static const ProtobufCMessageDescriptor *const types[] = {
    /* capacity.proto */
    D(cluster_capacity_needs),
    D(capacity_need),
    D(node_selector_requirement),
    D(topology_spread),
    /* provider.proto */
    D(host_ref),
    D(resources),
    D(machine),
    D(machine_ref),
    D(machine_list),
    D(list_filter),
    D(create_request),
    D(configure_request),
    D(drain_request),
    D(delete_request),
    D(transition_ack),
    /* shard.proto */
    D(operator_message),
    D(shard_message),
    D(hello),
    D(acknowledgement),
    D(bootstrap_request),
    D(bootstrap_blob_response),
    D(reclaim_instruction),
    D(reclaim_ack),
    D(node_state_update),
    D(taint),
    D(available_capacity_update),
    /* shardread.proto */
    D(inspect_needs_request),
    D(inspect_needs_response),
    D(inspect_needs_header),
    D(need_view),
    D(matching_supply),
    D(preemption_summary),
    D(domain_coverage),
    /* coordinator.proto */
    D(shard_report),
    D(shard_summary),
    D(free_count),
    D(shortfall),
    D(report_ack),
    D(coordinator_instruction),
    D(assign_domain),
    D(unassign_domain),
    D(reassign_speculative),
    D(cross_shard_drain),
    D(transfer_ownership),
    D(instruct_ack),
    D(assign_domain_request),
    D(assign_domain_response),
    D(unassign_domain_request),
    D(unassign_domain_response),
    D(remove_shard_request),
    D(remove_shard_response),
    D(list_shards_request),
    D(list_shards_response),
    D(shard_registry_entry),
    D(list_domain_assignments_request),
    D(list_domain_assignments_response),
    D(domain_assignment),
    D(assign_cluster_request),
    D(assign_cluster_response),
    D(list_cluster_assignments_request),
    D(list_cluster_assignments_response),
    D(cluster_assignment),
    D(list_quotas_request),
    D(list_quotas_response),
    D(quota_allocation),
    D(list_providers_request),
    D(list_providers_response),
    D(provider_entry),
    D(list_shard_reports_request),
    D(list_shard_reports_response),
    D(shard_report_snapshot),
    D(join_raft_cluster_request),
    D(join_raft_cluster_response),
    D(snapshot_save_request),
    D(snapshot_save_chunk),
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

static const ProtobufCMessageDescriptor *find_type(const char *full, size_t len)
{
    for (size_t i = 0; i < N_TYPES; i++)
        if (strlen(types[i]->name) == len && memcmp(types[i]->name, full, len) == 0)
            return types[i];
    return NULL;
}

/* ------------------------------------------------------------ the fixture, parsed by jansson */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool read_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wire_identity: %s: %s\n", path, strerror(errno));
        return false;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    bool ok = b && !ferror(f);
    fclose(f);
    if (!ok) {
        fprintf(stderr, "wire_identity: %s: read failed\n", path);
        free(b);
        return false;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return true;
}

/* The fixture as jansson reads it: strict JSON, "\u0000" allowed in strings
 * (set_value rejects it where protobuf-c cannot carry it), a key given twice
 * rejected. NULL (and a message) on error; the caller json_decref()s it. */
static json_t *jparse_file(const char *path)
{
    char *text;
    size_t len;
    if (!read_file(path, &text, &len))
        return NULL;
    json_error_t e;
    json_t *x =
        json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &e);
    free(text);
    if (!x)
        fprintf(stderr, "wire_identity: %s: JSON: %s at line %d column %d\n", path, e.text, e.line,
                e.column);
    return x;
}

/* ------------------------------------------------------------ building from the fixture */

static bool is_map_entry(const ProtobufCMessageDescriptor *d)
{
    size_t nl = strlen(d->name);
    return nl > 5 && strcmp(d->name + nl - 5, "Entry") == 0 && d->n_fields == 2 &&
           d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 && d->fields[1].id == 2 &&
           strcmp(d->fields[1].name, "value") == 0;
}

static bool bad(const char *path, const char *what)
{
    fprintf(stderr, "wire_identity: fixture %s: %s\n", path, what);
    return false;
}

/* snprintf into a path buffer; an over-long path is cut (only used in messages). */
__attribute__((format(printf, 3, 4))) static void subpath(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* An integer field's value: a JSON integer (jansson reads it within int64;
 * a larger uint64 must be a decimal string in the fixture) or a decimal
 * string without NUL. A JSON real never passes as an integer. */
static bool int_text(const json_t *v, char *buf, size_t n, const char **text)
{
    if (json_is_integer(v)) {
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        *text = buf;
        return true;
    }
    if (json_is_string(v) && json_string_length(v) > 0 &&
        strlen(json_string_value(v)) == json_string_length(v)) {
        *text = json_string_value(v);
        return true;
    }
    return false;
}

static bool parse_signed(const json_t *v, long long lo, long long hi, long long *out)
{
    char buf[32];
    const char *t;
    if (!int_text(v, buf, sizeof(buf), &t))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(t, &end, 10);
    if (errno || *end || end == t || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static bool parse_unsigned(const json_t *v, unsigned long long hi, unsigned long long *out)
{
    char buf[32];
    const char *t;
    if (!int_text(v, buf, sizeof(buf), &t) || t[0] == '-')
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(t, &end, 10);
    if (errno || *end || end == t || x > hi)
        return false;
    *out = x;
    return true;
}

static bool parse_double(const json_t *v, double *out)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "NaN") == 0)
            *out = NAN;
        else if (strcmp(s, "Infinity") == 0)
            *out = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
            *out = -INFINITY;
        else
            return false;
        return true;
    }
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static bool build_message(const ProtobufCMessageDescriptor *d, const json_t *obj, const char *path,
                          ProtobufCMessage **out);

/* Sets one value (a singular field, or one element of a repeated field). */
static bool set_value(const ProtobufCFieldDescriptor *f, void *member, const json_t *v,
                      const char *path)
{
    long long s;
    unsigned long long u;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        if (!parse_signed(v, INT32_MIN, INT32_MAX, &s))
            return bad(path, "expected a 32-bit signed integer");
        *(int32_t *)member = (int32_t)s;
        return true;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (!parse_unsigned(v, UINT32_MAX, &u))
            return bad(path, "expected a 32-bit unsigned integer");
        *(uint32_t *)member = (uint32_t)u;
        return true;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (!parse_signed(v, INT64_MIN, INT64_MAX, &s))
            return bad(path, "expected a 64-bit signed integer (decimal string)");
        *(int64_t *)member = (int64_t)s;
        return true;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (!parse_unsigned(v, UINT64_MAX, &u))
            return bad(path, "expected a 64-bit unsigned integer (decimal string)");
        *(uint64_t *)member = (uint64_t)u;
        return true;
    case PROTOBUF_C_TYPE_FLOAT: {
        double x;
        if (!parse_double(v, &x))
            return bad(path, "expected a number");
        *(float *)member = (float)x;
        return true;
    }
    case PROTOBUF_C_TYPE_DOUBLE:
        if (!parse_double(v, (double *)member))
            return bad(path, "expected a number, \"NaN\", \"Infinity\" or \"-Infinity\"");
        return true;
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_is_boolean(v))
            return bad(path, "expected true or false");
        *(protobuf_c_boolean *)member = json_is_true(v);
        return true;
    case PROTOBUF_C_TYPE_STRING:
        if (!json_is_string(v))
            return bad(path, "expected a string");
        if (strlen(json_string_value(v)) != json_string_length(v))
            return bad(path, "NUL in a string field (protobuf-c cannot carry it; use bytes)");
        if (!(*(char **)member = strdup(json_string_value(v))))
            return bad(path, "out of memory");
        return true;
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *bd = member;
        if (!json_is_string(v) || json_string_length(v) % 2)
            return bad(path, "expected a hex string");
        const char *hex = json_string_value(v);
        bd->len = json_string_length(v) / 2;
        bd->data = NULL;
        if (bd->len && !(bd->data = malloc(bd->len)))
            return bad(path, "out of memory");
        for (size_t i = 0; i < bd->len; i++) {
            int hi = hexval((unsigned char)hex[2 * i]), lo = hexval((unsigned char)hex[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return bad(path, "expected a hex string");
            bd->data[i] = (uint8_t)(hi << 4 | lo);
        }
        return true;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        if (!json_is_object(v))
            return bad(path, "expected an object");
        return build_message(f->descriptor, v, path, (ProtobufCMessage **)member);
    }
    return bad(path, "unsupported field type");
}

static bool set_field(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, const json_t *v,
                      const char *path)
{
    char *base = (char *)m;
    void *member = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        const ProtobufCMessageDescriptor *entry =
            f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(f->descriptor) ? f->descriptor
                                                                              : NULL;
        if (entry ? !json_is_object(v) : !json_is_array(v))
            return bad(path, entry ? "expected an object (map)" : "expected an array");
        size_t n = entry ? json_object_size(v) : json_array_size(v);
        size_t es = pbc_elem_size(f->type);
        void *arr = n ? calloc(n, es) : NULL;
        if (n && !arr)
            return bad(path, "out of memory");
        *(void **)member = arr;
        *(size_t *)(base + f->quantifier_offset) = n;
        if (!entry) {
            for (size_t i = 0; i < n; i++) {
                char sub[512];
                subpath(sub, sizeof(sub), "%s[%zu]", path, i);
                if (!set_value(f, (char *)arr + i * es, json_array_get(v, i), sub))
                    return false;
            }
            return true;
        }
        size_t i = 0;
        const char *k;
        json_t *ev;
        json_object_foreach((json_t *)v, k, ev)
        {
            char sub[512];
            subpath(sub, sizeof(sub), "%s[%s]", path, k);
            ProtobufCMessage *e = calloc(1, entry->sizeof_message);
            if (!e)
                return bad(path, "out of memory");
            protobuf_c_message_init(entry, e);
            ((ProtobufCMessage **)arr)[i++] = e;
            json_t *key = json_string(k);
            bool ok = key &&
                      set_value(&entry->fields[0], (char *)e + entry->fields[0].offset, key, sub) &&
                      set_value(&entry->fields[1], (char *)e + entry->fields[1].offset, ev, sub);
            json_decref(key);
            if (!ok)
                return false;
        }
        return true;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        uint32_t *oneof_case = (uint32_t *)(base + f->quantifier_offset);
        if (*oneof_case != 0)
            return bad(path, "a second member of the same oneof is set");
        *oneof_case = f->id;
    } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
               f->type != PROTOBUF_C_TYPE_STRING) {
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    }
    return set_value(f, member, v, path);
}

static bool build_message(const ProtobufCMessageDescriptor *d, const json_t *obj, const char *path,
                          ProtobufCMessage **out)
{
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (!m)
        return bad(path, "out of memory");
    protobuf_c_message_init(d, m);
    *out = m; /* the caller frees the whole tree, also on failure */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        char sub[512];
        subpath(sub, sizeof(sub), "%s.%s", path, key);
        if (key[0] == '$')
            continue;
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
        if (!f)
            return bad(sub, "no such field in the protobuf-c descriptor");
        if (!set_field(m, f, v, sub))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------ output */

static void put_hex(FILE *o, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%02x", p[i]);
}

static void put_jstr(FILE *o, const char *s, size_t n)
{
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            fprintf(o, "\\u%04x", c);
        else
            fputc(c, o);
    }
    fputc('"', o);
}

static void put_double(FILE *o, double x)
{
    if (isnan(x))
        fputs("\"NaN\"", o);
    else if (isinf(x))
        fputs(x > 0 ? "\"Infinity\"" : "\"-Infinity\"", o);
    else
        fprintf(o, "%.17g", x);
}

static void dump_message(FILE *o, const ProtobufCMessage *m);

static void dump_value(FILE *o, const ProtobufCFieldDescriptor *f, const void *member)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        fprintf(o, "%" PRId32, *(const int32_t *)member);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        fprintf(o, "%" PRIu32, *(const uint32_t *)member);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        fprintf(o, "\"%" PRId64 "\"", *(const int64_t *)member);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        fprintf(o, "\"%" PRIu64 "\"", *(const uint64_t *)member);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        put_double(o, *(const float *)member);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        put_double(o, *(const double *)member);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        fputs(*(const protobuf_c_boolean *)member ? "true" : "false", o);
        break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)member;
        if (!s)
            s = "";
        put_jstr(o, s, strlen(s));
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = member;
        fputc('"', o);
        put_hex(o, bd->data, bd->len);
        fputc('"', o);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)member;
        if (sub)
            dump_message(o, sub);
        else
            fputs("null", o);
        break;
    }
    }
}

static void dump_message(FILE *o, const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool first = true;
    fputc('{', o);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
                   f->type != PROTOBUF_C_TYPE_STRING) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
        }
        fprintf(o, "%s\"%s\":", first ? "" : ",", f->name);
        first = false;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            dump_value(o, f, member);
            continue;
        }
        size_t n = *(const size_t *)(base + f->quantifier_offset);
        const char *arr = *(const char *const *)member;
        bool map = f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(f->descriptor);
        fputc('[', o);
        for (size_t k = 0; k < n; k++) {
            if (k)
                fputc(',', o);
            if (map) {
                const ProtobufCMessage *e = ((const ProtobufCMessage *const *)arr)[k];
                const ProtobufCMessageDescriptor *ed = f->descriptor;
                fputc('[', o);
                dump_value(o, &ed->fields[0], (const char *)e + ed->fields[0].offset);
                fputc(',', o);
                dump_value(o, &ed->fields[1], (const char *)e + ed->fields[1].offset);
                fputc(']', o);
            } else {
                dump_value(o, f, arr + k * pbc_elem_size(f->type));
            }
        }
        fputc(']', o);
    }
    if (m->n_unknown_fields) {
        fprintf(o, "%s\"$unknown\":[", first ? "" : ",");
        for (unsigned k = 0; k < m->n_unknown_fields; k++) {
            const ProtobufCMessageUnknownField *u = &m->unknown_fields[k];
            fprintf(o, "%s[%" PRIu32 ",%d,\"", k ? "," : "", u->tag, (int)u->wire_type);
            put_hex(o, u->data, u->len);
            fputs("\"]", o);
        }
        fputc(']', o);
    }
    fputc('}', o);
}

static bool write_file(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "wire_identity: %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

/* Packs with both protobuf-c entry points and checks they agree. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return NULL;
    size_t got = protobuf_c_message_pack(m, buf);
    uint8_t scratch[64];
    ProtobufCBufferSimple simple = PROTOBUF_C_BUFFER_SIMPLE_INIT(scratch);
    size_t got2 = protobuf_c_message_pack_to_buffer(m, &simple.base);
    bool same = got == n && got2 == n && memcmp(simple.data, buf, n) == 0;
    PROTOBUF_C_BUFFER_SIMPLE_CLEAR(&simple);
    if (!same) {
        fprintf(stderr, "wire_identity: %s: get_packed_size/pack/pack_to_buffer disagree\n",
                m->descriptor->name);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* ------------------------------------------------------------ commands */

static bool case_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-'))
            return false;
    return true;
}

static int cmd_encode(const char *fixture, const char *dir)
{
    int rc = 1;
    size_t ncases = 0, ntypes = 0;
    json_t *root = jparse_file(fixture);
    if (!root)
        return 1;
    const char *pkg = json_string_value(json_object_get(root, "package"));
    json_t *msgs = json_object_get(root, "messages");
    if (!pkg || !json_is_object(msgs)) {
        bad(fixture, "needs \"package\" (string) and \"messages\" (object)");
        goto out;
    }
    for (size_t i = 0; i < N_TYPES; i++) {
        const char *want = types[i]->short_name;
        if (strcmp(types[i]->package_name, pkg) != 0 || !json_object_get(msgs, want)) {
            fprintf(stderr, "wire_identity: fixture has no cases for %s\n", types[i]->name);
            goto out;
        }
    }
    const char *tname;
    json_t *cases;
    json_object_foreach(msgs, tname, cases)
    {
        char full[256];
        snprintf(full, sizeof(full), "%s.%s", pkg, tname);
        const ProtobufCMessageDescriptor *d = find_type(full, strlen(full));
        if (tname[0] == '$')
            continue;
        if (!d) {
            bad(full, "not a message type of the C table");
            goto out;
        }
        if (!json_is_object(cases) || json_object_size(cases) == 0) {
            bad(full, "expected an object of named cases");
            goto out;
        }
        ntypes++;
        const char *cname;
        json_t *cv;
        json_object_foreach(cases, cname, cv)
        {
            if (cname[0] == '$')
                continue;
            char path[512];
            snprintf(path, sizeof(path), "%s@%s", full, cname);
            if (!case_name_ok(cname) || !json_is_object(cv)) {
                bad(path, "case names are [a-z0-9-]+ and cases are objects");
                goto out;
            }
            ProtobufCMessage *m = NULL;
            bool ok = build_message(d, cv, path, &m);
            if (ok && !protobuf_c_message_check(m))
                ok = bad(path, "protobuf_c_message_check failed");
            size_t len = 0;
            uint8_t *buf = ok ? pack(m, &len) : NULL;
            char file[1024];
            snprintf(file, sizeof(file), "%s/%s.bin", dir, path);
            ok = buf && write_file(file, buf, len);
            free(buf);
            if (m)
                protobuf_c_message_free_unpacked(m, NULL);
            if (!ok)
                goto out;
            ncases++;
        }
    }
    for (size_t i = 0; i < N_TYPES; i++) {
        ProtobufCMessage *m = calloc(1, types[i]->sizeof_message);
        if (!m)
            goto out;
        protobuf_c_message_init(types[i], m);
        size_t len = 0;
        uint8_t *buf = pack(m, &len);
        char file[1024];
        snprintf(file, sizeof(file), "%s/%s@_default.bin", dir, types[i]->name);
        bool ok = buf && write_file(file, buf, len);
        free(buf);
        protobuf_c_message_free_unpacked(m, NULL);
        if (!ok)
            goto out;
    }
    fprintf(stderr,
            "wire_identity: encoded %zu fixture cases of %zu message types (+%zu defaults)\n",
            ncases, ntypes, (size_t)N_TYPES);
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmd_decode(const char *dir)
{
    DIR *dh = opendir(dir);
    if (!dh) {
        fprintf(stderr, "wire_identity: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    int rc = 1;
    while ((de = readdir(dh))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".bin") != 0)
            continue;
        char **nn = realloc(names, (n + 1) * sizeof(*names));
        if (!nn || !(nn[n] = strdup(de->d_name))) {
            names = nn ? nn : names;
            goto out;
        }
        names = nn;
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_names);
    fputc('{', stdout);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        size_t stem = strlen(names[i]) - 4;
        const char *at = memchr(names[i], '@', stem);
        const ProtobufCMessageDescriptor *d =
            at ? find_type(names[i], (size_t)(at - names[i])) : NULL;
        if (!d) {
            fprintf(stderr, "wire_identity: %s: name is not <message full name>@<label>.bin\n",
                    names[i]);
            goto out;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        char *buf;
        size_t len;
        if (!read_file(path, &buf, &len))
            goto out;
        ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, (const uint8_t *)buf);
        free(buf);
        printf("%s\"%.*s\":", i ? ",\n" : "\n", (int)stem, names[i]);
        if (!m) {
            fputs("{\"ok\":false}", stdout);
            continue;
        }
        fputs("{\"ok\":true,\"value\":", stdout);
        dump_message(stdout, m);
        size_t rlen;
        uint8_t *re = pack(m, &rlen);
        fputs(",\"repacked\":\"", stdout);
        if (re)
            put_hex(stdout, re, rlen);
        fputs(re ? "\"}" : "!pack failed\"}", stdout);
        free(re);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    fputs("\n}\n", stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dh);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < N_TYPES; i++)
            printf("%s\n", types[i]->name);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "encode") == 0)
        return cmd_encode(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "decode") == 0)
        return cmd_decode(argv[2]);
    fprintf(stderr, "usage: wire_identity list | encode FIXTURE OUTDIR | decode DIR\n");
    return 2;
}
