/* mod_mcp_dbd — see mod_mcp_dbd.h. */
#include <apr_optional.h>
#include <httpd.h>
#include <http_log.h>

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

ap_dbd_t *mcp_dbd_open(request_rec *r, mcp_store_t *store)
{
    ap_dbd_t *dbd;

    if (!dbd_open_fn) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "mod_dbd is not loaded: mod_mcp keeps its sessions in a database "
                      "(LoadModule dbd_module, DBDriver pgsql, DBDParams ...)");
        return NULL;
    }
    dbd = dbd_open_fn(r->pool, r->server);
    if (!dbd) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "no database connection available from mod_dbd (check DBDParams and "
                      "that PostgreSQL is up)");
        return NULL;
    }
    store->driver = dbd->driver;
    store->handle = dbd->handle;
    return dbd;
}

void mcp_dbd_close(request_rec *r, ap_dbd_t *dbd)
{
    if (dbd) {
        dbd_close_fn(r->server, dbd);
    }
}
