/* mod_mcp_dbd — see mod_mcp_dbd.h. */
#include <apr_optional.h>
#include <httpd.h>
#include <http_log.h>

#include <poll.h>
#include <string.h>

#include <libpq-fe.h>

#include "mod_mcp_dbd.h"

APLOG_USE_MODULE(mcp);

static APR_OPTIONAL_FN_TYPE(ap_dbd_open) *dbd_open_fn;
static APR_OPTIONAL_FN_TYPE(ap_dbd_close) *dbd_close_fn;

int mcp_dbd_init(void)
{
    dbd_open_fn = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_open);
    dbd_close_fn = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_close);
    return dbd_open_fn && dbd_close_fn;
}

/* A pooled connection whose server went away (a PostgreSQL restart) still looks fine to libpq
 * until it is used, so its first statement would fail. Such a connection has the server's
 * goodbye (or EOF) waiting on its socket: read it without blocking and, if the connection turns
 * out broken, reconnect before anyone uses it. No round trip for a healthy one. */
static void revive_if_broken(server_rec *s, ap_dbd_t *dbd)
{
    PGconn *conn;
    struct pollfd pfd;
    int i;

    if (strcmp(apr_dbd_name(dbd->driver), "pgsql") != 0
        || !(conn = apr_dbd_native_handle(dbd->driver, dbd->handle))) {
        return;
    }
    pfd.fd = PQsocket(conn);
    pfd.events = POLLIN;
    /* The goodbye message first, then the end of the stream: a few reads at most. */
    for (i = 0; i < 4 && pfd.fd >= 0 && PQstatus(conn) == CONNECTION_OK; i++) {
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) <= 0 || !PQconsumeInput(conn)) {
            break;
        }
    }
    if (PQstatus(conn) == CONNECTION_BAD) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "a pooled database connection was broken "
                     "(server restart?); reconnecting it");
        PQreset(conn);
    }
}

ap_dbd_t *mcp_dbd_open_server(apr_pool_t *p, server_rec *s, mcp_store_t *store)
{
    ap_dbd_t *dbd;

    if (!dbd_open_fn) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                     "mod_dbd is not loaded: mod_mcp keeps its sessions in a database "
                     "(LoadModule dbd_module, DBDriver pgsql, DBDParams ...)");
        return NULL;
    }
    if (!(dbd = dbd_open_fn(p, s))) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                     "no database connection available from mod_dbd (check DBDParams and "
                     "that PostgreSQL is up)");
        return NULL;
    }
    revive_if_broken(s, dbd);
    store->driver = dbd->driver;
    store->handle = dbd->handle;
    return dbd;
}

void mcp_dbd_close_server(server_rec *s, ap_dbd_t *dbd)
{
    if (dbd) {
        dbd_close_fn(s, dbd);
    }
}

ap_dbd_t *mcp_dbd_open(request_rec *r, mcp_store_t *store)
{
    return mcp_dbd_open_server(r->pool, r->server, store);
}

void mcp_dbd_close(request_rec *r, ap_dbd_t *dbd)
{
    mcp_dbd_close_server(r->server, dbd);
}
