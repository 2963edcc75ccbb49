/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's side of encryption: parameters, the HELLO agreement, the keys
 * after AUTH, the sealed CONNECT exchange, and the data path. The mechanism
 * (keys, nonces, replay window, per-message sealing) is engine/seal.c; its
 * design notes and docs/protocol.md §14 describe the whole.
 *
 * Design notes
 * - Encryption is per client (and per server), not per context: it is keyed
 *   from the token, which the client and server params carry; one context
 *   may well hold an encrypted server for other hosts and plain clients.
 * - Agreement is strict: the client says ENCRYPT in its HELLO exactly when it
 *   encrypts, and refuses a server whose reply says otherwise
 *   (REMORA_ERR_ENCRYPTION); the server refuses the other way round. Nothing
 *   falls back to a plain connection.
 * - Paths: a sealed connection moves data by active messages only. MAP, RMA
 *   and IPC would bypass the seal (and the server sends no keys, mappings or
 *   IPC handles to such a client); a forced one is refused per request with
 *   REMORA_ERR_UNSUPPORTED. GPU regions go by STAGING, and transfer.c stages
 *   every GPU buffer, since the CPU encrypts and decrypts.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/seal.h"
#include "remote/client.h"
#include "util/log.h"

remora_status_t rm_client_seal_params(remora_client_h c, const remora_client_params_t *p)
{
    if (p == NULL || !(p->field_mask & REMORA_CLIENT_FIELD_ENCRYPT) || !p->encrypt)
        return REMORA_OK;
    if (c->token == NULL) {
        rm_error("encryption needs a token: its keys are derived from it");
        return REMORA_ERR_INVALID_PARAM;
    }
    c->encrypt = 1;
    return REMORA_OK;
}

remora_status_t rm_client_seal_hello(remora_client_h c, const rm_hello_t *mine,
                                     const rm_hello_t *theirs)
{
    if (!(theirs->flags & RM_HELLO_ENCRYPT) != !c->encrypt) {
        rm_info("the server %s encryption and this client %s",
                (theirs->flags & RM_HELLO_ENCRYPT) ? "requires" : "does not use",
                c->encrypt ? "requires it" : "does not use it");
        return REMORA_ERR_ENCRYPTION;
    }
    if (!c->encrypt)
        return REMORA_OK;
    /* Only reached after AUTH succeeded both ways (a token is required). */
    return rm_peer_seal_start(&c->peer, RM_SEAL_CLIENT, c->token, c->token_len, theirs->nonce,
                              mine->nonce);
}

remora_status_t rm_client_seal_connect(remora_client_h c, const void *addr, size_t len,
                                       uint8_t **sealed_p, size_t *sealed_len_p)
{
    *sealed_p = NULL;
    if (c->peer.seal == NULL)
        return REMORA_OK;
    return rm_peer_seal_wrap(&c->peer, RM_BOOT_CONNECT, RM_BOOT_CM, 0, addr, len, sealed_p,
                             sealed_len_p);
}

remora_status_t rm_client_seal_connect_reply(remora_client_h c, const rm_boot_frame_t *f,
                                             const uint8_t **addr_p, uint32_t *len_p,
                                             uint8_t **plain_p)
{
    size_t len;
    remora_status_t st;

    *plain_p = NULL;
    if (c->peer.seal == NULL)
        return REMORA_OK;
    st = rm_peer_seal_unwrap(&c->peer, f->type, f->flags, REMORA_OK, *addr_p, *len_p, plain_p,
                             &len);
    if (st != REMORA_OK)
        return st;
    *addr_p = *plain_p;
    *len_p  = (uint32_t)len;
    return REMORA_OK;
}

remora_path_t rm_client_seal_path(remora_client_h c, const rm_rregion_t *r, remora_path_t path)
{
    if (c->peer.seal == NULL)
        return path;
    switch (c->forced_path) {
    case REMORA_PATH_AUTO:
    case REMORA_PATH_AM:
    case REMORA_PATH_STAGING:
        return r->mem_type == REMORA_MEM_CUDA ? REMORA_PATH_STAGING : REMORA_PATH_AM;
    default:
        rm_info("region %s: path %s is not available on an encrypted connection", r->name,
                remora_path_string(c->forced_path));
        return REMORA_PATH_AUTO; /* requests on it fail with REMORA_ERR_UNSUPPORTED */
    }
}
