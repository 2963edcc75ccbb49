/* SPDX-License-Identifier: BSD-3-Clause */
/* KiroTrb: every function, the byte layout, the index rule, error returns. */
#include <string.h>

#include "kiro-trb.h"
#include "kiro_test.h"

static uint64_t le64 (const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* The slot address of element i (0-based) of the block. */
static unsigned char *slot_at (void *raw, uint64_t es, uint64_t i)
{
    return (unsigned char *) raw + 24 + i * es;
}

static void test_unshaped (void)
{
    KiroTrb *t = kiro_trb_new ();
    CHECK (KIRO_IS_TRB (t));
    CHECK (strcmp (g_type_name (KIRO_TYPE_TRB), "KiroTrb") == 0);
    CHECK (kiro_trb_is_setup (t) == 0);
    CHECK (kiro_trb_get_element_size (t) == 0);
    CHECK (kiro_trb_get_max_elements (t) == 0);
    CHECK (kiro_trb_get_raw_size (t) == 0);
    CHECK (kiro_trb_get_raw_buffer (t) == NULL);
    CHECK (kiro_trb_get_element (t, 1) == NULL);
    CHECK (kiro_trb_dma_push (t) == NULL);
    char x = 1;
    CHECK (kiro_trb_push (t, &x) == -1);
    kiro_trb_flush (t);   /* KIRO crashed here; a no-op now */
    kiro_trb_refresh (t); /* no-op */
    kiro_trb_adopt (t, NULL);
    CHECK (kiro_trb_reshape (t, 0, 4) == -1);
    CHECK (kiro_trb_reshape (t, 4, 0) == -1);
    CHECK (kiro_trb_reshape (t, 1ull << 40, 1ull << 40) == -1); /* overflow/too large */
    CHECK (kiro_trb_is_setup (t) == 0);
    kiro_trb_free (t);
}

static void test_layout_and_index (void)
{
    KiroTrb *t = g_object_new (KIRO_TYPE_TRB, NULL);
    CHECK (kiro_trb_reshape (t, 8, 5) == 0);
    CHECK (kiro_trb_is_setup (t) == 1);
    CHECK (kiro_trb_get_element_size (t) == 8);
    CHECK (kiro_trb_get_max_elements (t) == 5);
    CHECK (kiro_trb_get_raw_size (t) == 24 + 40);
    unsigned char *raw = kiro_trb_get_raw_buffer (t);
    CHECK (sizeof (struct KiroTrbInfo) == 24);
    CHECK (le64 (raw) == 64 && le64 (raw + 8) == 8 && le64 (raw + 16) == 0);
    for (int i = 0; i < 40; i++)
        CHECK (raw[24 + i] == 0); /* zeroed */

    /* index rule before any push: cursor 0; 0 -> slot 0, 1 -> slot 4, -1 -> slot 1 */
    CHECK (kiro_trb_get_element (t, 0) == slot_at (raw, 8, 0));
    CHECK (kiro_trb_get_element (t, 1) == slot_at (raw, 8, 4));
    CHECK (kiro_trb_get_element (t, -1) == slot_at (raw, 8, 1));

    /* push 7 elements 100..106: slots 0..4 then 0,1 again; cursor = 7 mod 5 = 2 */
    for (uint64_t v = 100; v < 107; v++)
        CHECK (kiro_trb_push (t, &v) == 0);
    CHECK (le64 (raw + 16) == 7); /* header offset written through */
    CHECK (le64 (kiro_trb_get_element (t, 1)) == 106); /* newest */
    CHECK (le64 (kiro_trb_get_element (t, 2)) == 105);
    CHECK (le64 (kiro_trb_get_element (t, 0)) == 102); /* cursor slot = oldest once wrapped */
    CHECK (le64 (kiro_trb_get_element (t, -1)) == 103); /* second oldest */
    CHECK (le64 (kiro_trb_get_element (t, 6)) == 106);  /* wraps modulo 5 */
    CHECK (le64 (kiro_trb_get_element (t, -6)) == 103);
    CHECK (kiro_trb_get_element (t, G_MINLONG) != NULL);
    CHECK (kiro_trb_get_element (t, G_MAXLONG) != NULL);
    CHECK (le64 (slot_at (raw, 8, 1)) == 106 && le64 (slot_at (raw, 8, 2)) == 102);

    /* dma_push: returns the cursor slot and counts it at once */
    unsigned char *s = kiro_trb_dma_push (t);
    CHECK (s == slot_at (raw, 8, 2));
    CHECK (le64 (raw + 16) == 8);
    uint64_t v = 777;
    memcpy (s, &v, 8);
    CHECK (le64 (kiro_trb_get_element (t, 1)) == 777);

    /* get_raw_buffer rewrites the header from the TRB's state */
    memset (raw, 0xff, 24);
    CHECK (kiro_trb_get_raw_buffer (t) == raw);
    CHECK (le64 (raw) == 64 && le64 (raw + 8) == 8 && le64 (raw + 16) == 8);

    /* refresh: an external header edit of the offset is taken in */
    unsigned char off[8] = {3, 0, 0, 0, 0, 0, 0, 0};
    memcpy (raw + 16, off, 8);
    kiro_trb_refresh (t);
    CHECK (kiro_trb_get_element (t, 0) == slot_at (raw, 8, 3));

    /* flush: offset 0, data untouched */
    kiro_trb_flush (t);
    CHECK (le64 (raw + 16) == 0);
    CHECK (le64 (slot_at (raw, 8, 2)) == 777);
    CHECK (kiro_trb_get_element (t, 0) == slot_at (raw, 8, 0));

    /* a failing reshape keeps the old state */
    CHECK (kiro_trb_reshape (t, 0, 1) == -1);
    CHECK (kiro_trb_get_raw_buffer (t) == raw);
    g_object_unref (t);
}

static void test_clone_adopt_purge (void)
{
    KiroTrb *a = kiro_trb_new ();
    CHECK (kiro_trb_reshape (a, 4, 3) == 0);
    for (uint32_t v = 1; v <= 4; v++)
        CHECK (kiro_trb_push (a, &v) == 0);
    void *raw = kiro_trb_get_raw_buffer (a);

    KiroTrb *b = kiro_trb_new ();
    CHECK (kiro_trb_clone (b, raw) == 0);
    CHECK (kiro_trb_get_raw_buffer (b) != raw);
    CHECK (memcmp (kiro_trb_get_raw_buffer (b), raw, 24 + 12) == 0);
    CHECK (kiro_trb_get_max_elements (b) == 3 && kiro_trb_get_element_size (b) == 4);
    CHECK (*(uint32_t *) kiro_trb_get_element (b, 1) == 4);
    unsigned char bad[24] = {0}; /* size 0: not a TRB */
    CHECK (kiro_trb_clone (b, bad) == -1);
    CHECK (kiro_trb_is_setup (b) == 1); /* kept */

    /* adopt takes the block in place */
    void *copy = g_memdup2 (raw, 24 + 12);
    KiroTrb *c = kiro_trb_new ();
    kiro_trb_adopt (c, copy);
    CHECK (kiro_trb_get_raw_buffer (c) == copy);
    CHECK (*(uint32_t *) kiro_trb_get_element (c, 2) == 3);
    /* purge(FALSE) forgets it: still ours to free */
    kiro_trb_purge (c, FALSE);
    CHECK (kiro_trb_is_setup (c) == 0);
    CHECK (memcmp (copy, raw, 24) == 0);
    g_free (copy);
    /* adopt again, then free: the TRB g_free's it (ASan/LSan would tell) */
    kiro_trb_adopt (c, g_memdup2 (raw, 24 + 12));
    kiro_trb_purge (b, TRUE);
    CHECK (kiro_trb_is_setup (b) == 0);
    kiro_trb_free (b);
    kiro_trb_free (c);
    kiro_trb_free (a);
}

int main (void)
{
    test_unshaped ();
    test_layout_and_index ();
    test_clone_adopt_purge ();
    printf ("kiro trb: ok\n");
    return 0;
}
