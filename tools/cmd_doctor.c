/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora doctor: is this machine ready to move GPU memory, and by which path?
 *
 * Design notes
 * - Each check is one function that fills one cli_check_t: a verdict
 *   (OK / WARN / FAIL / SKIP), what was found, and one line of what to do.
 *   They only read (the CUDA driver, /sys, /proc, rlimits); nothing is changed.
 * - FAIL is kept for what breaks remora outright (a CUDA driver that is
 *   installed but unusable, a locked-memory limit that RDMA cannot live with).
 *   A missing GPU or NIC is SKIP or WARN: remora still works, by another path.
 * - The GPU list is read once (doctor_probe) and shared by the checks.
 */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"

typedef enum { CHECK_OK, CHECK_WARN, CHECK_FAIL, CHECK_SKIP } cli_verdict_t;

static const char *const verdict_names[] = {"OK", "WARN", "FAIL", "SKIP"};

typedef struct cli_check {
    const char   *name;
    cli_verdict_t verdict;
    char          detail[512]; /* what was found */
    char          advice[256]; /* what to do; "" when nothing */
} cli_check_t;

#define DOCTOR_MAX_CHECKS 16
#define DOCTOR_MAX_GPUS   64
#define DOCTOR_MAX_NICS   32

/* What the checks look at, gathered once. */
typedef struct doctor {
    remora_cuda_attr_t        cuda;
    int                       ngpus;
    remora_cuda_device_attr_t gpus[DOCTOR_MAX_GPUS];
    int                       gpu_ok[DOCTOR_MAX_GPUS]; /* query succeeded */
    int                       nnics;
    char                      nics[DOCTOR_MAX_NICS][256];
    int                       have_ucx;  /* a context could be made and queried */
    remora_context_attr_t     ucx;
    cli_check_t               checks[DOCTOR_MAX_CHECKS];
    int                       nchecks;
} doctor_t;

__attribute__((format(printf, 4, 5)))
static cli_check_t *check_add(doctor_t *d, const char *name, cli_verdict_t v, const char *fmt,
                              ...)
{
    cli_check_t *c = &d->checks[d->nchecks < DOCTOR_MAX_CHECKS ? d->nchecks++ : d->nchecks - 1];
    va_list ap;

    c->name      = name;
    c->verdict   = v;
    c->advice[0] = '\0';
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
    return c;
}

__attribute__((format(printf, 2, 3)))
static void check_advise(cli_check_t *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->advice, sizeof(c->advice), fmt, ap);
    va_end(ap);
}

/* Append to a detail buffer, silently truncating. */
__attribute__((format(printf, 3, 4)))
static void str_append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;

    if (n + 1 >= cap)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- probing */

static void doctor_probe_gpus(doctor_t *d)
{
    d->cuda.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE | REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |
                         REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT | REMORA_CUDA_ATTR_FIELD_REASON;
    remora_cuda_query(&d->cuda);
    d->ngpus = d->cuda.device_count < DOCTOR_MAX_GPUS ? d->cuda.device_count : DOCTOR_MAX_GPUS;
    for (int i = 0; i < d->ngpus; i++) {
        d->gpus[i].field_mask = REMORA_CUDA_DEVICE_FIELD_NAME | REMORA_CUDA_DEVICE_FIELD_PCI_BUS_ID |
                                REMORA_CUDA_DEVICE_FIELD_TOTAL_MEM |
                                REMORA_CUDA_DEVICE_FIELD_CAPABILITY |
                                REMORA_CUDA_DEVICE_FIELD_FEATURES;
        d->gpu_ok[i] = remora_cuda_device_query(i, &d->gpus[i]) == REMORA_OK;
    }
}

static void doctor_probe_nics(doctor_t *d)
{
    DIR *dir = opendir("/sys/class/infiniband");
    struct dirent *e;

    if (dir == NULL)
        return;
    while ((e = readdir(dir)) != NULL && d->nnics < DOCTOR_MAX_NICS) {
        if (e->d_name[0] != '.')
            snprintf(d->nics[d->nnics++], sizeof(d->nics[0]), "%s", e->d_name);
    }
    closedir(dir);
}

static void doctor_probe_ucx(doctor_t *d)
{
    remora_context_params_t params = {
        .field_mask = REMORA_CONTEXT_FIELD_NAME,
        .name       = "remora-doctor",
    };
    remora_context_h ctx;

    if (remora_context_create(&params, &ctx) != REMORA_OK)
        return;
    d->ucx.field_mask = REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION |
                        REMORA_CONTEXT_ATTR_FIELD_UCX_MEM_TYPES | REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS;
    d->have_ucx = remora_context_query(ctx, &d->ucx) == REMORA_OK;
    remora_context_destroy(ctx);
}

/* ---------------------------------------------------------------- checks */

static void check_cuda_driver(doctor_t *d)
{
    const remora_cuda_attr_t *c = &d->cuda;
    cli_check_t *k;

    if (c->available) {
        check_add(d, "cuda_driver", CHECK_OK, "CUDA driver %d.%d loaded, %d device(s)",
                  c->driver_version / 1000, c->driver_version % 1000 / 10, c->device_count);
        return;
    }
    if (c->driver_version == 0) {
        k = check_add(d, "cuda_driver", CHECK_SKIP, "%s", c->reason);
        check_advise(k, "install the NVIDIA driver to use GPU memory; host memory works as is");
        return;
    }
    k = check_add(d, "cuda_driver", CHECK_FAIL, "CUDA driver %d.%d found but unusable: %s",
                  c->driver_version / 1000, c->driver_version % 1000 / 10, c->reason);
    check_advise(k, "check nvidia-smi, the device nodes (/dev/nvidia*) and the container's GPU access");
}

static void check_devices(doctor_t *d)
{
    char detail[512] = "", size[32];
    cli_check_t *k;

    if (d->ngpus == 0) {
        k = check_add(d, "gpus", CHECK_SKIP, "no CUDA devices");
        check_advise(k, "nothing to do on a host without GPUs");
        return;
    }
    for (int i = 0; i < d->ngpus; i++) {
        if (!d->gpu_ok[i]) {
            str_append(detail, sizeof(detail), "%sGPU%d: query failed", i ? "; " : "", i);
            continue;
        }
        str_append(detail, sizeof(detail), "%sGPU%d %s (%s, %s, cc %d.%d)", i ? "; " : "", i,
                   d->gpus[i].name, d->gpus[i].pci_bus_id,
                   remora_format_size(d->gpus[i].total_mem, size, sizeof(size)),
                   d->gpus[i].cc_major, d->gpus[i].cc_minor);
    }
    check_add(d, "gpus", CHECK_OK, "%s", detail);
}

static void check_peer_access(doctor_t *d)
{
    char missing[480] = "";
    int nmissing = 0, can;
    cli_check_t *k;

    if (d->ngpus < 2) {
        check_add(d, "peer_access", CHECK_SKIP, "fewer than two GPUs");
        return;
    }
    for (int a = 0; a < d->ngpus; a++) {
        for (int b = 0; b < d->ngpus; b++) {
            if (a != b && (remora_cuda_can_access_peer(a, b, &can) != REMORA_OK || !can)) {
                str_append(missing, sizeof(missing), "%s%d->%d", nmissing ? " " : "", a, b);
                nmissing++;
            }
        }
    }
    if (nmissing == 0) {
        check_add(d, "peer_access", CHECK_OK, "all %d GPUs can access each other's memory",
                  d->ngpus);
        return;
    }
    k = check_add(d, "peer_access", CHECK_WARN, "no peer access for %d pair(s): %s", nmissing,
                  missing);
    check_advise(k, "copies between those GPUs go through host memory; check NVLink/P2P "
                    "(nvidia-smi topo -m) and IOMMU/ACS settings");
}

/* A device feature that every GPU should have; advice when some lack it. */
static void check_feature(doctor_t *d, const char *name, unsigned bit, const char *what,
                          const char *advice)
{
    char lacking[256] = "";
    int n = 0;
    cli_check_t *k;

    if (d->ngpus == 0) {
        check_add(d, name, CHECK_SKIP, "no CUDA devices");
        return;
    }
    for (int i = 0; i < d->ngpus; i++) {
        if (!d->gpu_ok[i] || !(d->gpus[i].features & bit)) {
            str_append(lacking, sizeof(lacking), "%sGPU%d", n ? ", " : "", i);
            n++;
        }
    }
    if (n == 0) {
        check_add(d, name, CHECK_OK, "%s: supported on every GPU", what);
        return;
    }
    k = check_add(d, name, CHECK_WARN, "%s: not supported on %s", what, lacking);
    check_advise(k, "%s", advice);
}

/* The UCX transports of a context that carry GPU memory themselves
 * (cuda_copy, cuda_ipc, gdr_copy), comma-separated; "" when none. RDMA
 * transports carry it too where GPUDirect RDMA is ready (peermem, dma-buf):
 * the doctor's other checks. */
void cli_ucx_gpu_transports(const remora_context_attr_t *attr, char *out, size_t cap)
{
    char tls[sizeof(attr->transports)], *save = NULL;
    size_t n = 0;

    out[0] = '\0';
    snprintf(tls, sizeof(tls), "%s", attr->transports);
    for (char *t = strtok_r(tls, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strncmp(t, "cuda", 4) != 0 && strncmp(t, "gdr", 3) != 0)
            continue;
        int w = snprintf(out + n, cap - n, "%s%s", n ? "," : "", t);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
}

/* Whether the loaded UCX has its CUDA transport module on disk: the
 * directory of the libucs.so this process mapped, "ucx/libuct_cuda.so". */
static int ucx_cuda_module(char *path, size_t cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 128];
    int found = 0;

    path[0] = '\0';
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/'), *slash;
        if (p == NULL || strstr(p, "/libucs.so") == NULL)
            continue;
        p[strcspn(p, "\n")] = '\0';
        if ((slash = strrchr(p, '/')) == NULL)
            continue;
        *slash = '\0';
        snprintf(path, cap, "%s/ucx/libuct_cuda.so", p);
        found = access(path, R_OK) == 0;
    }
    fclose(f);
    return found;
}

static void check_ucx_cuda(doctor_t *d)
{
    const remora_context_attr_t *u = &d->ucx;
    char tls[256], module[PATH_MAX];
    cli_check_t *k;

    if (!d->have_ucx) {
        k = check_add(d, "ucx_cuda", CHECK_FAIL, "cannot create a UCX context");
        check_advise(k, "run 'REMORA_LOG=debug remora info' to see why UCX fails");
        return;
    }
    if (u->ucx_mem_types & (1u << REMORA_MEM_CUDA)) {
        int ib = strstr(u->transports, "rc_") != NULL || strstr(u->transports, "dc_") != NULL ||
                 strstr(u->transports, "ud_") != NULL;
        cli_ucx_gpu_transports(u, tls, sizeof(tls));
        if (d->nnics > 0 && !ib) {
            /* GPUDirect RDMA needs both: UCX's CUDA support and its ib transports */
            k = check_add(d, "ucx_cuda", CHECK_WARN,
                          "UCX %u.%u.%u handles CUDA memory (over %s) but lists no InfiniBand "
                          "transport although RDMA NICs exist: no GPUDirect RDMA",
                          u->ucx_major, u->ucx_minor, u->ucx_release,
                          tls[0] ? tls : "(none listed)");
            check_advise(k, "use a UCX built --with-verbs whose ib module loads "
                            "(UCX_LOG_LEVEL=debug ucx_info -d); check UCX_TLS");
            return;
        }
        check_add(d, "ucx_cuda", CHECK_OK,
                  "UCX %u.%u.%u handles CUDA memory (ucx-direct path; GPU memory over %s%s)",
                  u->ucx_major, u->ucx_minor, u->ucx_release, tls[0] ? tls : "(none listed)",
                  ib ? ", and InfiniBand where GPUDirect RDMA is ready" : "");
        return;
    }
    if (ucx_cuda_module(module, sizeof(module))) {
        /* built with CUDA, but its CUDA transports found no GPU or did not load */
        k = check_add(d, "ucx_cuda", d->ngpus > 0 ? CHECK_WARN : CHECK_SKIP,
                      "UCX %u.%u.%u has a CUDA module (%s) but it reports no CUDA memory "
                      "support%s: remora moves GPU memory itself",
                      u->ucx_major, u->ucx_minor, u->ucx_release, module,
                      d->ngpus > 0 ? "" : " (no GPU here)");
        if (d->ngpus > 0)
            check_advise(k, "see why with 'UCX_LOG_LEVEL=debug ucx_info -d' (a library the "
                            "module needs, e.g. libcudart, not on the library path?)");
        return;
    }
    k = check_add(d, "ucx_cuda", d->ngpus > 0 ? CHECK_WARN : CHECK_SKIP,
                  "UCX %u.%u.%u has no CUDA support: remora moves GPU memory itself "
                  "(CUDA IPC on one host, staging across hosts)",
                  u->ucx_major, u->ucx_minor, u->ucx_release);
    if (d->ngpus > 0)
        check_advise(k, "for GPUDirect RDMA use a UCX built --with-cuda (scripts/gpu-ucx.sh; "
                        "docs/gpu-ucx.md)");
}

static void check_rdma_nics(doctor_t *d)
{
    char list[480] = "";
    cli_check_t *k;

    if (d->nnics == 0) {
        k = check_add(d, "rdma_nics", CHECK_WARN, "no RDMA devices in /sys/class/infiniband");
        check_advise(k, "across hosts data goes over TCP (GPU memory staged through host memory); "
                        "an InfiniBand/RoCE NIC enables RDMA");
        return;
    }
    for (int i = 0; i < d->nnics; i++)
        str_append(list, sizeof(list), "%s%s", i ? ", " : "", d->nics[i]);
    check_add(d, "rdma_nics", CHECK_OK, "%d RDMA device(s): %s", d->nnics, list);
}

static int module_loaded(const char *name)
{
    char path[128], line[256];
    size_t len = strlen(name);
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/module/%s", name);
    if (access(path, F_OK) == 0)
        return 1;
    if ((f = fopen("/proc/modules", "r")) == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strncmp(line, name, len) == 0 && line[len] == ' ';
    fclose(f);
    return found;
}

static void check_peermem(doctor_t *d)
{
    const char *loaded = module_loaded("nvidia_peermem") ? "nvidia_peermem"
                         : module_loaded("nv_peer_mem")  ? "nv_peer_mem"
                                                         : NULL;
    cli_check_t *k;

    if (d->ngpus == 0) {
        check_add(d, "peermem", CHECK_SKIP, "no CUDA devices");
    } else if (loaded != NULL) {
        check_add(d, "peermem", CHECK_OK, "%s loaded: the NIC can register GPU memory", loaded);
    } else if (d->nnics == 0) {
        check_add(d, "peermem", CHECK_SKIP, "nvidia-peermem not loaded; not needed without an "
                                            "RDMA NIC");
    } else {
        k = check_add(d, "peermem", CHECK_WARN, "neither nvidia_peermem nor nv_peer_mem is loaded");
        check_advise(k, "'modprobe nvidia-peermem', or rely on dma-buf registration (UCX >= 1.14, "
                        "see dma_buf)");
    }
}

/* CAP_IPC_LOCK in the effective set (bit 14 of CapEff) ignores RLIMIT_MEMLOCK. */
static int has_ipc_lock(void)
{
    unsigned long long caps = 0;
    char line[128];
    int found = 0;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "CapEff: %llx", &caps) == 1;
    fclose(f);
    return found && (caps >> 14 & 1u);
}

static void check_memlock(doctor_t *d)
{
    struct rlimit rl;
    char cur[32];
    cli_check_t *k;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        check_add(d, "memlock", CHECK_WARN, "getrlimit(RLIMIT_MEMLOCK) failed");
        return;
    }
    if (rl.rlim_cur == RLIM_INFINITY) {
        check_add(d, "memlock", CHECK_OK, "locked-memory limit: unlimited");
        return;
    }
    remora_format_size((uint64_t)rl.rlim_cur, cur, sizeof(cur));
    if (has_ipc_lock()) {
        check_add(d, "memlock", CHECK_OK, "locked-memory limit %s, but CAP_IPC_LOCK lifts it",
                  cur);
        return;
    }
    /* RDMA registrations pin memory: a small limit makes them fail outright. */
    k = check_add(d, "memlock", d->nnics > 0 && rl.rlim_cur < (64u << 20) ? CHECK_FAIL : CHECK_WARN,
                  "locked-memory limit %s", cur);
    check_advise(k, "pinned staging buffers and RDMA registrations count against it: "
                    "'ulimit -l unlimited' (memlock in /etc/security/limits.conf)");
}

/* "00000000:3B:00.0" -> "0000:3b:00.0", the form /sys/bus/pci uses. */
static void pci_sysfs_name(const char *bus_id, char *out, size_t cap)
{
    const char *colon = strchr(bus_id, ':');
    size_t i = 0;

    if (colon != NULL && colon - bus_id > 4)
        bus_id = colon - 4;
    for (; bus_id[i] != '\0' && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)bus_id[i]);
    out[i] = '\0';
}

static int numa_node(const char *devpath)
{
    char path[PATH_MAX + 16];
    int node = -1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/numa_node", devpath);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%d", &node) != 1)
            node = -1;
        fclose(f);
    }
    return node;
}

/* How many leading path components two sysfs device paths share. */
static int common_components(const char *a, const char *b)
{
    int n = 0;

    for (;;) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");

        if (la != lb || strncmp(a, b, la) != 0)
            return n;
        n += la > 0;
        if (a[la] == '\0' || b[lb] == '\0')
            return n;
        a += la + 1;
        b += lb + 1;
    }
}

/* The PCIe relation of a GPU and a NIC from their sysfs device paths
 * (/sys/devices/pci0000:00/<root port>/<switch ports...>/<device>). */
static const char *pci_relation(const char *gpu, const char *nic, cli_verdict_t *v)
{
    int shared = common_components(gpu, nic) - 2; /* less "sys", "devices" */
    int na = numa_node(gpu), nb = numa_node(nic);

    if (shared >= 2) {
        *v = CHECK_OK;
        return "same PCIe switch";
    }
    *v = CHECK_WARN;
    if (shared == 1)
        return "same root complex (through the CPU)";
    return na >= 0 && nb >= 0 && na != nb ? "across sockets" : "different root complexes";
}

static void check_pci_distance(doctor_t *d)
{
    char detail[512] = "", name[64], path[PATH_MAX], gpu[PATH_MAX], nic[PATH_MAX];
    cli_verdict_t worst = CHECK_OK, v;
    cli_check_t *k;

    if (d->ngpus == 0 || d->nnics == 0) {
        check_add(d, "gpu_nic_distance", CHECK_SKIP, "n/a: %s",
                  d->ngpus == 0 ? "no CUDA devices" : "no RDMA NIC");
        return;
    }
    for (int g = 0; g < d->ngpus; g++) {
        pci_sysfs_name(d->gpus[g].pci_bus_id, name, sizeof(name));
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", name);
        if (!d->gpu_ok[g] || realpath(path, gpu) == NULL) {
            str_append(detail, sizeof(detail), "%sGPU%d: not in sysfs", detail[0] ? "; " : "", g);
            worst = CHECK_WARN;
            continue;
        }
        for (int n = 0; n < d->nnics; n++) {
            snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", d->nics[n]);
            const char *rel = realpath(path, nic) != NULL ? pci_relation(gpu, nic, &v)
                                                          : (v = CHECK_WARN, "unknown");
            worst = v > worst ? v : worst;
            str_append(detail, sizeof(detail), "%sGPU%d-%s: %s", detail[0] ? "; " : "", g,
                       d->nics[n], rel);
        }
    }
    k = check_add(d, "gpu_nic_distance", worst, "%s", detail);
    if (worst != CHECK_OK)
        check_advise(k, "GPUDirect RDMA is fastest when GPU and NIC share a PCIe switch; pick "
                        "the NIC nearest each GPU (UCX_NET_DEVICES)");
}

static void doctor_run_checks(doctor_t *d)
{
    check_cuda_driver(d);
    check_devices(d);
    check_peer_access(d);
    check_feature(d, "stream_mem_ops", REMORA_CUDA_FEATURE_STREAM_MEM_OPS_64,
                  "64-bit stream memory operations",
                  "stream-ordered put/get/signal need them: load nvidia with "
                  "NVreg_EnableStreamMemOPs=1");
    check_feature(d, "gpudirect_rdma", REMORA_CUDA_FEATURE_GPUDIRECT_RDMA, "GPUDirect RDMA",
                  "the NIC cannot reach this GPU's memory: data is staged through host memory");
    check_feature(d, "dma_buf", REMORA_CUDA_FEATURE_DMA_BUF, "dma-buf export",
                  "needs Linux >= 5.12 and the open NVIDIA kernel modules; else use nvidia-peermem");
    check_ucx_cuda(d);
    check_rdma_nics(d);
    check_peermem(d);
    check_memlock(d);
    check_pci_distance(d);
}

/* ---------------------------------------------------------------- output */

static void doctor_print_text(const doctor_t *d)
{
    for (int i = 0; i < d->nchecks; i++) {
        const cli_check_t *c = &d->checks[i];

        printf("%-4s  %-17s %s\n", verdict_names[c->verdict], c->name, c->detail);
        if (c->advice[0] != '\0')
            printf("      %-17s -> %s\n", "", c->advice);
    }
}

static void json_field(const char *key, const char *value, const char *sep)
{
    char buf[6 * 512 + 3];

    remora_json_string(value, buf, sizeof(buf));
    printf("\"%s\": %s%s", key, buf, sep);
}

static void doctor_print_json(const doctor_t *d, int fails, int warns)
{
    printf("{\"remora\": \"%s\", \"ok\": %s, \"fails\": %d, \"warnings\": %d, \"checks\": [",
           remora_version_string(), fails == 0 ? "true" : "false", fails, warns);
    for (int i = 0; i < d->nchecks; i++) {
        const cli_check_t *c = &d->checks[i];

        printf("%s\n  {", i ? "," : "");
        json_field("name", c->name, ", ");
        json_field("status", verdict_names[c->verdict], ", ");
        json_field("detail", c->detail, ", ");
        json_field("advice", c->advice, "}");
    }
    printf("\n]}\n");
}

/* ---------------------------------------------------------------- command */

typedef struct cli_doctor_opts {
    bool json;
} cli_doctor_opts_t;

enum { CLI_OPT_DOCTOR_JSON = CLI_OPT_CMD };

static int cli_doctor_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_doctor_opts_t *o = opts;

    if (opt != CLI_OPT_DOCTOR_JSON)
        return cli_usage_error(cmd, "unknown option");
    o->json = true;
    return CLI_CONTINUE;
}

static int cli_doctor_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_DOCTOR_JSON}, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0}};
    cli_doctor_opts_t o = {false};
    cli_parser_t parser = {"", longopts, cli_doctor_option, &o, NULL};
    doctor_t *d;
    int rc, fails = 0, warns = 0;

    rc = cli_parse_args(cmd, argc, argv, &parser, NULL);
    if (rc != CLI_CONTINUE)
        return rc;
    if ((d = calloc(1, sizeof(*d))) == NULL)
        return cli_error(cmd->name, NULL, REMORA_ERR_NO_MEMORY, NULL);
    doctor_probe_gpus(d);
    doctor_probe_nics(d);
    doctor_probe_ucx(d);
    doctor_run_checks(d);
    for (int i = 0; i < d->nchecks; i++) {
        fails += d->checks[i].verdict == CHECK_FAIL;
        warns += d->checks[i].verdict == CHECK_WARN;
    }
    if (o.json)
        doctor_print_json(d, fails, warns);
    else
        doctor_print_text(d);
    free(d);
    return fails > 0 ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
}

const cli_command_t cli_cmd_doctor = {
    .name    = "doctor",
    .summary = "check GPUDirect readiness: CUDA, GPUs, UCX, RDMA NICs, limits",
    .usage   =
        "usage: remora doctor [--json]\n"
        "\n"
        "Check what moving GPU memory needs here and print one line per check:\n"
        "OK, WARN (works, by a slower path), FAIL (broken) or SKIP (does not\n"
        "apply), each followed by what to do. Checks: the CUDA driver, the GPUs,\n"
        "peer access between them, 64-bit stream memory operations, GPUDirect\n"
        "RDMA and dma-buf support, whether UCX handles CUDA memory, RDMA NICs,\n"
        "nvidia-peermem, the locked-memory limit and the PCIe distance between\n"
        "each GPU and each NIC. Works without a GPU.\n"
        "\n"
        "  --json            print one JSON object with a \"checks\" array\n"
        "  -h, --help        show this help\n"
        "\n"
        "Exit status: 0 unless a check FAILs (then 1).\n",
    .run     = cli_doctor_run,
};

/* ---------------------------------------------------------------- info */

void cli_info_print_cuda(const remora_context_attr_t *attr)
{
    remora_cuda_attr_t cuda = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                             REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |
                                             REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT |
                                             REMORA_CUDA_ATTR_FIELD_REASON};
    remora_cuda_device_attr_t dev;
    int ucx_cuda = (attr->ucx_mem_types & (1u << REMORA_MEM_CUDA)) != 0;
    char size[32];

    remora_cuda_query(&cuda);
    if (!cuda.available) {
        printf("cuda: unavailable (%s)\n", cuda.reason);
        printf("gpu paths: none\n");
        return;
    }
    printf("cuda: driver %d.%d, %d device(s)\n", cuda.driver_version / 1000,
           cuda.driver_version % 1000 / 10, cuda.device_count);
    for (int i = 0; i < cuda.device_count; i++) {
        dev.field_mask = REMORA_CUDA_DEVICE_FIELD_NAME | REMORA_CUDA_DEVICE_FIELD_PCI_BUS_ID |
                         REMORA_CUDA_DEVICE_FIELD_TOTAL_MEM;
        if (remora_cuda_device_query(i, &dev) == REMORA_OK)
            printf("cuda device %d: %s, %s, %s\n", i, dev.name, dev.pci_bus_id,
                   remora_format_size(dev.total_mem, size, sizeof(size)));
    }
    /* ucx-direct: UCX moves GPU memory itself; cuda-ipc: GPU to GPU on one
     * host; staging: through pinned host buffers, anywhere. */
    printf("gpu paths: ucx-direct %s, cuda-ipc %s, staging yes\n", ucx_cuda ? "yes" : "no",
           cuda.device_count > 0 ? "yes" : "no");
    if (ucx_cuda) {
        char tls[256];
        cli_ucx_gpu_transports(attr, tls, sizeof(tls));
        printf("ucx gpu transports: %s\n", tls[0] ? tls : "(none listed)");
    }
}
