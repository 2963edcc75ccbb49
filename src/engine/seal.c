/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Sealing: optional encryption of a connection with libsodium's AEAD.
 *
 * Design notes
 * - Opt-in on both sides (REMORA_SERVER_FIELD_ENCRYPT, REMORA_CLIENT_FIELD_ENCRYPT,
 *   `--encrypt`), and only with a token. Each side says so in its HELLO
 *   (RM_HELLO_ENCRYPT); a server refuses a client whose setting differs, and a
 *   client refuses such a server, both with REMORA_ERR_ENCRYPTION: a mismatch
 *   is an error, never a silent downgrade.
 * - Keys: after AUTH succeeded, each side derives, from the token and both
 *   HELLO nonces (fresh per connection), a master key
 *       prk    = BLAKE2b-256("remora-v1 seal key" || token)
 *       master = BLAKE2b-256(key = prk, "remora-v1 session" || server_nonce || client_nonce)
 *   and from it two session keys with crypto_kdf (BLAKE2b), contexts
 *   "rm-c2s-1" (client -> server) and "rm-s2c-1" (server -> client). The
 *   token is never a key itself. Keys live in sodium_malloc()ed memory
 *   (locked, guarded) and are wiped when the connection closes. Lanes are
 *   connections of their own: each derives its own keys.
 * - Handshake: the CONNECT and CONNECT_REPLY payloads (worker addresses, or
 *   the connection-manager port) travel sealed (XChaCha20-Poly1305, nonce
 *   0x80 | direction, counter 0; the frame's type, flags and status as
 *   additional data), so no one on the path can read or swap them.
 * - Messages: every UCX active message of a sealed connection, body or not,
 *   is sealed with crypto_aead_xchacha20poly1305_ietf_*_detached. Additional
 *   data: the encoded fixed header (with RM_HDR_FLAG_SEALED set in its byte
 *   2); nonce: a direction byte and a per-direction 64-bit counter from 1
 *   (24 bytes: dir, 15 zero bytes, u64 LE counter); counter and tag travel in
 *   24 bytes after the fixed header. Headers must be canonical (what
 *   rm_hdr_encode makes of what was decoded), so a rendezvous body can be
 *   opened after it landed from the decoded header alone.
 * - Receiving: eager bodies are checked and decrypted here, before the
 *   remote layer sees them (in place when UCX handed us the buffer, else into
 *   a copy). Rendezvous bodies (READ_REPLY at the client, WRITE at the
 *   server) land first and are opened in place by the receiver
 *   (rm_peer_seal_open): the client decrypts in the caller's buffer; the
 *   server receives into a temporary buffer and copies into region memory
 *   only after the tag verified, so no reader ever sees ciphertext there.
 * - Replays: counters are accepted once, in a sliding window of
 *   RM_SEAL_WINDOW below the highest accepted (rendezvous bodies complete out
 *   of order). A header's counter is checked on arrival and remembered when
 *   its body verified.
 * - A message that fails a check (bad tag, replayed counter, unsealed or
 *   non-canonical header) is dropped, logged, and fails the connection with
 *   REMORA_ERR_PROTOCOL at the next tick (boot.c's live ticker): a peer or
 *   path that forges one message is not trusted with the next. Failing it
 *   from a ticker rather than inside UCX's callback keeps endpoint closes
 *   out of UCX's own call stack.
 * - Sending encrypts into a temporary buffer: a sealed connection gives up
 *   zero-copy sends (and UCX memory handles) for its bodies.
 */
#include "engine/seal.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util/log.h"

#define RM_SEAL_NONCE_LEN crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define RM_SEAL_DIR_C2S   1u
#define RM_SEAL_DIR_S2C   2u
#define RM_SEAL_DIR_BOOT  0x80u

_Static_assert(RM_SEAL_TAG_LEN == crypto_aead_xchacha20poly1305_ietf_ABYTES, "tag length");
_Static_assert(RM_SEAL_KEY_LEN == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "key length");
_Static_assert(RM_SEAL_NONCE_LEN == 24, "nonce length");
_Static_assert(RM_SEAL_WINDOW % 64 == 0, "window in whole words");

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void make_nonce(uint8_t nonce[RM_SEAL_NONCE_LEN], unsigned dir, uint64_t counter)
{
    memset(nonce, 0, RM_SEAL_NONCE_LEN);
    nonce[0] = (uint8_t)dir;
    put64(nonce + 16, counter);
}

/* ------------------------------------------------------------ keys */

rm_seal_t *rm_seal_new(rm_seal_role_t role, const void *token, size_t token_len,
                       const uint8_t server_nonce[RM_NONCE_LEN],
                       const uint8_t client_nonce[RM_NONCE_LEN])
{
    static const char label_prk[] = "remora-v1 seal key", label_master[] = "remora-v1 session";
    uint8_t prk[32], master[crypto_kdf_KEYBYTES], c2s[RM_SEAL_KEY_LEN], s2c[RM_SEAL_KEY_LEN];
    crypto_generichash_state st;
    rm_seal_t *s = sodium_malloc(sizeof(*s));

    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    crypto_generichash_init(&st, NULL, 0, sizeof(prk));
    crypto_generichash_update(&st, (const uint8_t *)label_prk, sizeof(label_prk) - 1);
    crypto_generichash_update(&st, token, token_len);
    crypto_generichash_final(&st, prk, sizeof(prk));
    crypto_generichash_init(&st, prk, sizeof(prk), sizeof(master));
    crypto_generichash_update(&st, (const uint8_t *)label_master, sizeof(label_master) - 1);
    crypto_generichash_update(&st, server_nonce, RM_NONCE_LEN);
    crypto_generichash_update(&st, client_nonce, RM_NONCE_LEN);
    crypto_generichash_final(&st, master, sizeof(master));
    crypto_kdf_derive_from_key(c2s, sizeof(c2s), 1, "rm-c2s-1", master);
    crypto_kdf_derive_from_key(s2c, sizeof(s2c), 1, "rm-s2c-1", master);

    memcpy(s->tx_key, role == RM_SEAL_CLIENT ? c2s : s2c, RM_SEAL_KEY_LEN);
    memcpy(s->rx_key, role == RM_SEAL_CLIENT ? s2c : c2s, RM_SEAL_KEY_LEN);
    s->tx_dir  = role == RM_SEAL_CLIENT ? RM_SEAL_DIR_C2S : RM_SEAL_DIR_S2C;
    s->rx_dir  = role == RM_SEAL_CLIENT ? RM_SEAL_DIR_S2C : RM_SEAL_DIR_C2S;
    s->tx_next = 1;

    sodium_memzero(&st, sizeof(st));
    sodium_memzero(prk, sizeof(prk));
    sodium_memzero(master, sizeof(master));
    sodium_memzero(c2s, sizeof(c2s));
    sodium_memzero(s2c, sizeof(s2c));
    return s;
}

void rm_seal_free(rm_seal_t *s)
{
    if (s != NULL)
        sodium_free(s); /* wipes it */
}

/* ------------------------------------------------------------ replay window */

int rm_seal_fresh(const rm_seal_t *s, uint64_t counter)
{
    if (counter == 0)
        return 0; /* never sent */
    if (counter > s->rx_top)
        return 1;
    if (s->rx_top - counter >= RM_SEAL_WINDOW)
        return 0; /* too old to tell */
    return !(s->rx_seen[(counter % RM_SEAL_WINDOW) / 64] >> (counter % 64) & 1u);
}

static void seen_mark(rm_seal_t *s, uint64_t counter)
{
    if (counter > s->rx_top) {
        if (counter - s->rx_top >= RM_SEAL_WINDOW) {
            memset(s->rx_seen, 0, sizeof(s->rx_seen));
        } else {
            for (uint64_t c = s->rx_top + 1; c < counter; c++)
                s->rx_seen[(c % RM_SEAL_WINDOW) / 64] &= ~(1ull << (c % 64));
        }
        s->rx_top = counter;
    }
    s->rx_seen[(counter % RM_SEAL_WINDOW) / 64] |= 1ull << (counter % 64);
}

/* ------------------------------------------------------------ messages */

void rm_seal_msg(rm_seal_t *s, uint8_t *hdr, size_t fixed_len, const void *in, void *out,
                 size_t len)
{
    uint8_t nonce[RM_SEAL_NONCE_LEN], dummy = 0;
    uint64_t counter = s->tx_next++;

    make_nonce(nonce, s->tx_dir, counter);
    put64(hdr + fixed_len, counter);
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
        len ? out : &dummy, hdr + fixed_len + 8, NULL, len ? in : &dummy, len, hdr, fixed_len,
        NULL, nonce, s->tx_key);
}

int rm_seal_open_msg(rm_seal_t *s, const uint8_t *ad, size_t ad_len, uint64_t counter,
                     const uint8_t tag[RM_SEAL_TAG_LEN], const void *in, void *out, size_t len)
{
    uint8_t nonce[RM_SEAL_NONCE_LEN], dummy = 0;

    if (!rm_seal_fresh(s, counter))
        return -2;
    make_nonce(nonce, s->rx_dir, counter);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(len ? out : &dummy, NULL,
                                                            len ? in : &dummy, len, tag, ad,
                                                            ad_len, nonce, s->rx_key) != 0) {
        if (len)
            memset(out, 0, len);
        return -1;
    }
    seen_mark(s, counter);
    return 0;
}

/* ------------------------------------------------------------ bootstrap payloads */

static void boot_ad(uint8_t ad[6], unsigned type, unsigned flags, int32_t status)
{
    uint32_t st = (uint32_t)status;

    ad[0] = (uint8_t)type;
    ad[1] = (uint8_t)flags;
    for (int i = 0; i < 4; i++)
        ad[2 + i] = (uint8_t)(st >> (8 * i));
}

void rm_seal_boot(rm_seal_t *s, unsigned type, unsigned flags, int32_t status, const void *in,
                  size_t len, uint8_t *out)
{
    uint8_t nonce[RM_SEAL_NONCE_LEN], ad[6];

    make_nonce(nonce, RM_SEAL_DIR_BOOT | s->tx_dir, 0);
    boot_ad(ad, type, flags, status);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out, NULL, in, len, ad, sizeof(ad), NULL, nonce,
                                               s->tx_key);
}

int rm_seal_boot_open(rm_seal_t *s, unsigned type, unsigned flags, int32_t status,
                      const uint8_t *in, size_t len, uint8_t *out)
{
    uint8_t nonce[RM_SEAL_NONCE_LEN], ad[6];

    if (len < RM_SEAL_BOOT_EXTRA)
        return -1;
    make_nonce(nonce, RM_SEAL_DIR_BOOT | s->rx_dir, 0);
    boot_ad(ad, type, flags, status);
    return crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, in, len, ad, sizeof(ad),
                                                      nonce, s->rx_key) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ peer hooks */

remora_status_t rm_peer_seal_start(rm_peer_t *peer, rm_seal_role_t role, const void *token,
                                   size_t token_len, const uint8_t server_nonce[RM_NONCE_LEN],
                                   const uint8_t client_nonce[RM_NONCE_LEN])
{
    rm_peer_seal_stop(peer);
    peer->seal_failed = 0;
    peer->seal = rm_seal_new(role, token, token_len, server_nonce, client_nonce);
    return peer->seal ? REMORA_OK : REMORA_ERR_NO_MEMORY;
}

void rm_peer_seal_stop(rm_peer_t *peer)
{
    rm_seal_free(peer->seal);
    peer->seal = NULL;
}

int rm_peer_seal_send(rm_peer_t *peer, uint8_t *hdr, size_t *hlen_p, const void *body,
                      size_t len, void **cipher_p)
{
    size_t fixed = *hlen_p;
    void *out    = NULL;

    if (len && (out = malloc(len)) == NULL)
        return -1;
    hdr[2] |= RM_HDR_FLAG_SEALED;
    rm_seal_msg(peer->seal, hdr, fixed, body, out, len);
    *hlen_p   = fixed + RM_HDR_SEAL_EXT;
    *cipher_p = out;
    return 0;
}

/* Drop the message; the connection fails at the next tick. */
static ucs_status_t seal_reject(rm_peer_t *peer, const char *why)
{
    if (!peer->seal_failed)
        rm_warn("encrypted connection: %s; closing it", why);
    peer->seal_failed = 1;
    return UCS_OK;
}

ucs_status_t rm_peer_seal_recv(rm_peer_t *peer, const void *header, size_t header_len,
                               void *data, size_t len, const ucp_am_recv_param_t *param)
{
    uint8_t canon[RM_HDR_MAX], small[512];
    rm_hdr_t hdr;
    void *out;
    ucs_status_t ret;
    int rc;

    if (peer->seal_failed)
        return UCS_OK;
    if (rm_hdr_decode(header, header_len, &hdr) != 0 || !hdr.sealed)
        return seal_reject(peer, "a message without a valid sealed header");
    if (rm_hdr_encode(&hdr, canon) != header_len || memcmp(canon, header, header_len) != 0)
        return seal_reject(peer, "a message with a non-canonical header");
    if (!rm_seal_fresh(peer->seal, hdr.seal_counter))
        return seal_reject(peer, "a replayed message");
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) /* opened once it landed */
        return peer->ops->on_message(peer, &hdr, data, len, param);

    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)
        out = data; /* ours until released: decrypt in place */
    else if (len <= sizeof(small))
        out = small;
    else if ((out = malloc(len)) == NULL)
        return seal_reject(peer, "out of memory for a message");
    rc = rm_seal_open_msg(peer->seal, header, rm_hdr_fixed_len(hdr.type), hdr.seal_counter,
                          hdr.seal_tag, data, out, len);
    if (rc != 0) {
        if (out != data && out != small)
            free(out);
        return seal_reject(peer, rc == -2 ? "a replayed message"
                                          : "a message that failed authentication");
    }
    ret = peer->ops->on_message(peer, &hdr, out, len, param);
    if (out != data && out != small)
        free(out);
    return ret;
}

remora_status_t rm_peer_seal_open(rm_peer_t *peer, const rm_hdr_t *hdr, void *buf, size_t len)
{
    uint8_t ad[RM_HDR_MAX];
    size_t fixed;
    int rc;

    if (peer->seal == NULL || peer->seal_failed || !hdr->sealed) {
        if (len)
            memset(buf, 0, len);
        return peer->seal_failed ? REMORA_ERR_PROTOCOL : REMORA_ERR_DISCONNECTED;
    }
    rm_hdr_encode(hdr, ad); /* canonical: checked on arrival */
    fixed = rm_hdr_fixed_len(hdr->type);
    rc = rm_seal_open_msg(peer->seal, ad, fixed, hdr->seal_counter, hdr->seal_tag, buf, buf, len);
    if (rc != 0) {
        if (len)
            memset(buf, 0, len);
        seal_reject(peer, rc == -2 ? "a replayed message" : "a payload that failed authentication");
        return REMORA_ERR_PROTOCOL;
    }
    return REMORA_OK;
}

remora_status_t rm_peer_seal_wrap(rm_peer_t *peer, unsigned type, unsigned flags,
                                  int32_t status, const void *in, size_t len, uint8_t **out_p,
                                  size_t *out_len_p)
{
    uint8_t *out = malloc(len + RM_SEAL_BOOT_EXTRA);

    if (out == NULL)
        return REMORA_ERR_NO_MEMORY;
    rm_seal_boot(peer->seal, type, flags, status, in, len, out);
    *out_p     = out;
    *out_len_p = len + RM_SEAL_BOOT_EXTRA;
    return REMORA_OK;
}

remora_status_t rm_peer_seal_unwrap(rm_peer_t *peer, unsigned type, unsigned flags,
                                    int32_t status, const void *in, size_t len, uint8_t **out_p,
                                    size_t *out_len_p)
{
    uint8_t *out;

    if (len < RM_SEAL_BOOT_EXTRA)
        return REMORA_ERR_PROTOCOL;
    if ((out = malloc(len - RM_SEAL_BOOT_EXTRA + 1)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if (rm_seal_boot_open(peer->seal, type, flags, status, in, len, out) != 0) {
        rm_warn("an encrypted handshake payload failed authentication");
        free(out);
        return REMORA_ERR_PROTOCOL;
    }
    *out_p     = out;
    *out_len_p = len - RM_SEAL_BOOT_EXTRA;
    return REMORA_OK;
}
