/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the KIRO compatibility layer. */
#include <stdlib.h>
#include <string.h>

#include "kiro-private.h"

int kc_timeout_ms (void)
{
    const char *s = g_getenv ("KIRO_TIMEOUT_MS");
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return 10000;
    v = strtol (s, &end, 10);
    if (*end != '\0' || v < 1 || v > G_MAXINT) {
        g_warning ("KIRO_TIMEOUT_MS='%s' is not a positive number of milliseconds; using 10000", s);
        return 10000;
    }
    return (int) v;
}

char *kc_address (const char *host, const char *port, const char *default_host,
                  const char *default_port)
{
    if (host == NULL)
        host = default_host;
    if (port == NULL)
        port = default_port;
    if (host == NULL || port == NULL || *host == '\0' || *port == '\0')
        return NULL;
    return g_strdup_printf ("%s:%s", host, port);
}

remora_context_h kc_context_new (const char *name)
{
    remora_context_params_t p = {.field_mask = REMORA_CONTEXT_FIELD_NAME, .name = name};
    remora_context_h ctx;
    remora_status_t st = remora_context_create (&p, &ctx);

    if (st != REMORA_OK) {
        g_warning ("%s: cannot create a remora context: %s", name, remora_status_string (st));
        return NULL;
    }
    return ctx;
}

uint64_t kc_load_u64 (const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

void kc_store_u64 (void *p, uint64_t v)
{
    unsigned char *b = p;

    for (int i = 0; i < 8; i++, v >>= 8)
        b[i] = (unsigned char) v;
}
