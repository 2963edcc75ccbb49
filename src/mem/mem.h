/* Memory handles: host memory allocated shareable through UCX, or registered.
 * Reference counted: the creator holds one reference, each region one more. */
#ifndef RM_MEM_MEM_H
#define RM_MEM_MEM_H

#include <stdatomic.h>
#include <stddef.h>

#include <ucp/api/ucp.h>

#include <remora/remora.h>

struct remora_mem {
    remora_context_h  ctx;
    ucp_mem_h         memh;
    void             *addr;
    size_t            length;
    remora_mem_type_t type;
    int               allocated; /* by UCX: mappable by same-host peers */
    void             *rkey;      /* packed remote key, made once */
    size_t            rkey_len;
    atomic_int        refs;
};

/* Any thread. */
void rm_mem_ref(remora_mem_h mem);
/* With the context lock held: the last reference unmaps through UCX. */
void rm_mem_unref(remora_mem_h mem);

#endif
