/* mod_mcp_body — see mod_mcp_body.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_protocol.h>
#include <util_filter.h>

#include "mod_mcp_body.h"

extern module AP_MODULE_DECLARE_DATA mcp_module;

/* Where the bytes go: one buffer, of the announced size (Content-Length) or, for a chunked
 * body, grown by doubling with realloc (freed with the request). Not a brigade: small writes
 * into one cost a block per piece (measured: ~460 bytes per 1-byte chunk). */
typedef struct body_sink_t {
    char       *buf;
    apr_size_t  size;
    apr_off_t   total;
    int         grows;     /* chunked: buf is malloc'ed */
} body_sink_t;

static apr_status_t free_body(void *sink)
{
    free(((body_sink_t *)sink)->buf);
    return APR_SUCCESS;
}

static apr_status_t body_put(body_sink_t *sink, const char *data, apr_size_t len)
{
    apr_size_t need = (apr_size_t)sink->total + len + 1;   /* and a NUL */

    if (need > sink->size) {
        apr_size_t size = sink->size ? sink->size : 16384;
        char *buf;

        if (!sink->grows) {
            return APR_EGENERAL;   /* more than announced: HTTP_IN never lets that through */
        }
        while (size < need) {
            size *= 2;
        }
        if (!(buf = realloc(sink->buf, size))) {
            return APR_ENOMEM;
        }
        sink->buf = buf;
        sink->size = size;
    }
    memcpy(sink->buf + sink->total, data, len);
    sink->total += (apr_off_t)len;
    return APR_SUCCESS;
}

/* Moves one read's buckets into the sink; sets *eos at the end of the body. The buckets go
 * at once, and with them the input buffers they point into, so memory follows the body's size
 * and not the number of pieces it came in. */
static apr_status_t body_take(body_sink_t *sink, apr_bucket_brigade *in, apr_off_t limit,
                              int *eos, int *too_large)
{
    apr_status_t rv = APR_SUCCESS;
    apr_bucket *b;

    for (b = APR_BRIGADE_FIRST(in); b != APR_BRIGADE_SENTINEL(in) && rv == APR_SUCCESS;
         b = APR_BUCKET_NEXT(b)) {
        const char *data;
        apr_size_t len;

        if (APR_BUCKET_IS_EOS(b)) {
            *eos = 1;
            break;
        }
        if (APR_BUCKET_IS_METADATA(b)) {
            continue;
        }
        if ((rv = apr_bucket_read(b, &data, &len, APR_BLOCK_READ)) != APR_SUCCESS) {
            break;
        }
        if (sink->total + (apr_off_t)len > limit) {
            *too_large = 1;
            break;
        }
        rv = body_put(sink, data, len);
    }
    apr_brigade_cleanup(in);
    return rv;
}

static void read_into(request_rec *r, apr_off_t limit, mcp_body_t *out)
{
    apr_off_t announced = -1;
    const char *clen = apr_table_get(r->headers_in, "Content-Length");
    apr_bucket_brigade *in;
    body_sink_t *sink = apr_pcalloc(r->pool, sizeof(*sink));
    int eos = 0, too_large = 0;

    if (clen && apr_strtoff(&announced, clen, NULL, 10) == APR_SUCCESS && announced > limit) {
        out->status = MCP_BODY_TOO_LARGE;
        return;
    }
    if (clen && announced >= 0 && !apr_table_get(r->headers_in, "Transfer-Encoding")) {
        sink->size = (apr_size_t)announced + 1;
        sink->buf = apr_palloc(r->pool, sink->size);
    }
    else {
        sink->grows = 1;
        apr_pool_cleanup_register(r->pool, sink, free_body, apr_pool_cleanup_null);
    }
    in = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    while (!eos) {
        apr_status_t rv = ap_get_brigade(r->input_filters, in, AP_MODE_READBYTES,
                                         APR_BLOCK_READ, HUGE_STRING_LEN);
        if (rv == APR_SUCCESS) {
            rv = body_take(sink, in, limit, &eos, &too_large);
        }
        if (too_large) {
            out->status = MCP_BODY_TOO_LARGE;
            return;
        }
        if (rv != APR_SUCCESS) {
            out->status = MCP_BODY_UNREADABLE;
            out->rv = rv;
            return;
        }
    }
    apr_brigade_destroy(in);
    if (!sink->buf && body_put(sink, "", 0) != APR_SUCCESS) {   /* an empty chunked body */
        out->status = MCP_BODY_NO_MEMORY;
        return;
    }
    sink->buf[sink->total] = '\0';
    out->status = MCP_BODY_OK;
    out->raw = sink->buf;
    out->len = (apr_size_t)sink->total;
}

const mcp_body_t *mcp_body_peek(request_rec *r)
{
    return ap_get_module_config(r->request_config, &mcp_module);
}

const mcp_body_t *mcp_body_read(request_rec *r, apr_off_t limit)
{
    mcp_body_t *body = ap_get_module_config(r->request_config, &mcp_module);

    if (!body) {
        body = apr_pcalloc(r->pool, sizeof(*body));
        read_into(r, limit, body);
        ap_set_module_config(r->request_config, &mcp_module, body);
    }
    return body;
}
