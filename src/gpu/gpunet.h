/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU socket proxy internals (gpunet.c). The public surface is
 * remora_gpunet_* in remora.h; the memory layout is
 * include/remora/device/socket_abi.h.
 */
#ifndef RM_GPU_GPUNET_H
#define RM_GPU_GPUNET_H

#include <remora/device/socket_abi.h>
#include <remora/remora.h>

/* Host views of the shared memory, for tests that play the device side
 * (host_queues): the rg_net_t header, whose addresses are then host ones. */
rg_net_t *rm_gpunet_host_view(remora_gpunet_h net);

#endif
