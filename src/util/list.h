/* SPDX-License-Identifier: BSD-3-Clause */
/* Intrusive circular doubly-linked list. */
#ifndef RM_UTIL_LIST_H
#define RM_UTIL_LIST_H

#include <stddef.h>

typedef struct rm_list {
    struct rm_list *prev, *next;
} rm_list_t;

#define rm_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void rm_list_init(rm_list_t *h) { h->prev = h->next = h; }
static inline int  rm_list_empty(const rm_list_t *h) { return h->next == h; }

static inline void rm_list_push_back(rm_list_t *h, rm_list_t *e)
{
    e->prev = h->prev;
    e->next = h;
    h->prev->next = e;
    h->prev = e;
}

static inline void rm_list_del(rm_list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}

#define rm_list_for_each_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
