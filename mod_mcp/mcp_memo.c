/* mcp_memo — see mcp_memo.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>

#include "mcp_memo.h"

int mcp_memo_get(mcp_memo_t *m, apr_pool_t *p, const char *key, apr_time_t now,
                 const char **value)
{
    int i, fresh = 0;

    *value = NULL;
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->n; i++) {
        if (m->slots[i].key && strcmp(m->slots[i].key, key) == 0) {
            *value = m->slots[i].value ? apr_pstrdup(p, m->slots[i].value) : NULL;
            fresh = m->slots[i].expires > now;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return fresh;
}

void mcp_memo_put(mcp_memo_t *m, const char *key, const char *value, apr_time_t expires)
{
    mcp_memo_slot_t *slot = NULL;
    char *copy = value ? strdup(value) : NULL;
    int i;

    if (value && !copy) {
        return;
    }
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->n; i++) {
        if (!m->slots[i].key || strcmp(m->slots[i].key, key) == 0) {
            slot = &m->slots[i];
            break;
        }
        if (!slot || m->slots[i].expires < slot->expires) {
            slot = &m->slots[i];
        }
    }
    if (slot && (!slot->key || strcmp(slot->key, key) != 0)) {
        free(slot->key);
        free(slot->value);
        slot->value = NULL;
        if (!(slot->key = strdup(key))) {
            slot = NULL;
        }
    }
    if (slot) {
        free(slot->value);
        slot->value = copy;
        slot->expires = expires;
    }
    pthread_mutex_unlock(&m->lock);
    if (!slot) {
        free(copy);
    }
}
