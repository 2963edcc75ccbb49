/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copy_enqueue_probe: how fast one process can enqueue device-to-device
 * copies out of another process's buffers (CUDA IPC), each followed by the
 * completion write a copy queue polls (src/mem/copyq.h), with nothing of
 * remora. It is what a GPU socket's receiving proxy does per queued message
 * (docs/performance.md, session 18).
 *
 * Two processes (fork, before CUDA is touched), both on GPU 0: the owner
 * allocates NB buffers of SIZE MiB and passes their IPC handles through a
 * pipe; the copier opens them and copies them into buffers of its own, at
 * most DEPTH copies in flight, waiting for the oldest's completion word
 * before the next. With --spin each process keeps a one-block kernel
 * resident, as the GPU socket kernels are (run it under MPS then: without,
 * the two processes' kernels time-slice). Modes, per copy:
 *   one_stream   cuMemcpyAsync + cuStreamWriteValue64, one stream
 *   two_streams  the same, alternating between two streams
 *   no_marker    cuMemcpyAsync alone on one stream (a sync at the end)
 *   two_threads  two threads, each one_stream on a stream of its own (so
 *                2 x DEPTH copies in flight)
 *   dtod         two_streams with cuMemcpyDtoDAsync (no pointer-type lookup)
 *   own_src      two_streams from this process's own buffers (no IPC mapping)
 *   batch2       two copies a call (cuMemcpyBatchAsync) and one write, one stream
 * no_marker has no limit in flight: its call time includes the driver
 * waiting for room in the stream. Any error, or a copy not done in 10 s,
 * ends both processes.
 *   copy_enqueue_probe [SIZE_MIB] [DEPTH] [--spin]
 * prints "copy_probe mode=M us_per_copy=X call_us=Y GBps=Z".
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NB     8
#define COPIES 3000

#define CK(x)                                                                      \
    do {                                                                           \
        CUresult r_ = (x);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "copy_probe: %s:%d: CUDA error %d\n", __FILE__, __LINE__, \
                    (int)r_);                                                      \
            _exit(1); /* no exit handlers: a resident kernel may run */           \
        }                                                                          \
    } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__global__ void resident(volatile unsigned *stop)
{
    while (*stop == 0)
        __nanosleep(1000);
}

static CUcontext g_ctx;
static CUdeviceptr g_src[NB], g_dst[NB], g_own[NB];
enum { E_MEMCPY, E_DTOD, E_OWN, E_BATCH2 };
static int g_how; /* which enqueue copies() makes */
static size_t g_len;
static int g_depth;

/* A stream and its completion word. */
typedef struct lane {
    CUstream              stream;
    volatile uint64_t    *word;
    CUdeviceptr           word_dev;
    uint64_t              next;
} lane_t;

static void lane_init(lane_t *l)
{
    CK(cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING));
    CK(cuMemHostAlloc((void **)&l->word, 8, CU_MEMHOSTALLOC_DEVICEMAP));
    CK(cuMemHostGetDevicePointer(&l->word_dev, (void *)l->word, 0));
    *l->word = 0;
    l->next  = 0;
}

/* Nothing is freed while the process runs: a free waits for the device,
 * and with --spin the resident kernel never ends before exit. */
static void lane_wait(lane_t *l)
{
    CK(cuStreamSynchronize(l->stream));
}

/* n copies over nl lanes in turn, at most g_depth in flight; the time spent
 * in driver calls is added to *call. */
static void copies(lane_t *lanes, int nl, int n, int first, int marker, double *call)
{
    for (int i = 0; i < n; i++) {
        lane_t *l = &lanes[i % nl];
        if (marker && i >= g_depth) {
            lane_t *old = &lanes[(i - g_depth) % nl];
            uint64_t want = (uint64_t)((i - g_depth) / (g_how == E_BATCH2 ? 2 : nl)) + 1;
            double until = now_us() + 10e6;
            while (*old->word < want)
                if (now_us() > until) {
                    fprintf(stderr, "copy_probe: a copy not done in 10 s\n");
                    _exit(1);
                }
        }
        int k = (first + i) % NB;
        double t0 = now_us();
        if (g_how == E_BATCH2) { /* copies i and i+1 in one call, one write */
            int k2 = (k + 1) % NB;
            CUdeviceptr d[2] = {g_dst[k], g_dst[k2]}, s[2] = {g_src[k], g_src[k2]};
            size_t sz[2] = {g_len, g_len}, idx = 0;
            CUmemcpyAttributes at;
            memset(&at, 0, sizeof(at));
            at.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
            CK(cuMemcpyBatchAsync(d, s, sz, 2, &at, &idx, 1, l->stream));
            i++;
        } else if (g_how == E_DTOD) {
            CK(cuMemcpyDtoDAsync(g_dst[k], g_src[k], g_len, l->stream));
        } else {
            CK(cuMemcpyAsync(g_dst[k], g_how == E_OWN ? g_own[k] : g_src[k], g_len, l->stream));
        }
        if (marker)
            CK(cuStreamWriteValue64(l->stream, l->word_dev, ++l->next, 0));
        *call += now_us() - t0;
    }
}

typedef struct {
    int     id;
    lane_t *lane;
    double  call;
} thread_arg_t;

static void *copy_thread(void *p)
{
    thread_arg_t *a = (thread_arg_t *)p;

    CK(cuCtxSetCurrent(g_ctx));
    copies(a->lane, 1, COPIES / 2, a->id, 1, &a->call);
    lane_wait(a->lane);
    return NULL;
}

static void report(const char *mode, double t, double call, int n)
{
    printf("copy_probe mode=%s us_per_copy=%.2f call_us=%.2f GBps=%.1f\n", mode, t / n, call / n,
           g_len / (t / n) / 1e3);
}

/* lanes[4]: made before the resident kernel starts (see lane_wait). */
static void run_modes(lane_t *lanes)
{
    const char *modes[] = {"one_stream", "two_streams", "no_marker", "two_threads",
                           "dtod",       "own_src",     "batch2"};

    for (int m = 0; m < 7; m++) {
        g_how = m == 4 ? E_DTOD : m == 5 ? E_OWN : m == 6 ? E_BATCH2 : E_MEMCPY;
        double call = 0, t0 = now_us();
        for (int i = 0; i < 4; i++)
            *lanes[i].word = lanes[i].next = 0;
        if (m == 3) {
            pthread_t th[2];
            thread_arg_t a[2] = {{0, &lanes[2], 0}, {1, &lanes[3], 0}};
            for (int i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, copy_thread, &a[i]);
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
            report(modes[m], now_us() - t0, a[0].call + a[1].call, COPIES);
            continue;
        }
        int nl = m == 1 || m == 4 || m == 5 ? 2 : 1;
        copies(lanes, nl, COPIES, 0, m != 2, &call);
        for (int i = 0; i < nl; i++)
            lane_wait(&lanes[i]);
        report(modes[m], now_us() - t0, call, COPIES);
    }
}

static volatile unsigned *start_resident(void)
{
    unsigned *stop;
    CUstream s;

    CK(cuMemHostAlloc((void **)&stop, 4, CU_MEMHOSTALLOC_DEVICEMAP));
    *stop = 0;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    resident<<<1, 32, 0, (cudaStream_t)s>>>(stop);
    return stop;
}

/* The owner: its buffers, made and filled before its resident kernel
 * starts, handed over; then it waits for the copier's word (or its end). */
static void owner(int to_copier, int from_copier, int spin)
{
    CUipcMemHandle h[NB];
    char done;

    for (int k = 0; k < NB; k++) {
        CUdeviceptr p;
        CK(cuMemAlloc(&p, g_len));
        CK(cuMemsetD8(p, (unsigned char)k, g_len));
        CK(cuIpcGetMemHandle(&h[k], p));
    }
    CK(cuCtxSynchronize()); /* filled before the copier reads */
    volatile unsigned *stop = spin ? start_resident() : NULL;
    int ok = write(to_copier, h, sizeof(h)) == (ssize_t)sizeof(h) &&
             read(from_copier, &done, 1) == 1;
    if (stop) {
        *stop = 1;
        CK(cuCtxSynchronize());
    }
    _exit(ok ? 0 : 1);
}

int main(int argc, char **argv)
{
    int mib = argc > 1 ? atoi(argv[1]) : 4, spin = 0;
    int to_copier[2], to_owner[2];
    CUipcMemHandle h[NB];
    lane_t lanes[4];
    char done = 1;

    g_depth = argc > 2 ? atoi(argv[2]) : 4;
    for (int i = 1; i < argc; i++)
        spin |= strcmp(argv[i], "--spin") == 0;
    if (mib <= 0 || g_depth <= 0 || g_depth > 64) {
        fprintf(stderr, "usage: copy_enqueue_probe [SIZE_MIB] [DEPTH 1-64] [--spin]\n");
        return 2;
    }
    g_len = (size_t)mib << 20;
    if (pipe(to_copier) != 0 || pipe(to_owner) != 0)
        return 1;
    pid_t pid = fork(); /* before CUDA is touched */
    if (pid < 0)
        return 1;
    /* Each side closes the ends it does not use: the other's death is EOF. */
    close(pid == 0 ? to_copier[0] : to_copier[1]);
    close(pid == 0 ? to_owner[1] : to_owner[0]);
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&g_ctx, dev));
    CK(cuCtxSetCurrent(g_ctx));
    if (pid == 0)
        owner(to_copier[1], to_owner[0], spin);
    if (read(to_copier[0], h, sizeof(h)) != (ssize_t)sizeof(h))
        return 1;
    for (int k = 0; k < NB; k++) {
        CK(cuIpcOpenMemHandle(&g_src[k], h[k], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        CK(cuMemAlloc(&g_dst[k], g_len));
        CK(cuMemAlloc(&g_own[k], g_len));
    }
    for (int i = 0; i < 4; i++)
        lane_init(&lanes[i]);
    volatile unsigned *stop = spin ? start_resident() : NULL;
    printf("copy_probe size_mib=%d depth=%d resident_kernels=%d\n", mib, g_depth, spin);
    run_modes(lanes);
    if (write(to_owner[1], &done, 1) != 1)
        _exit(1);
    if (stop) {
        *stop = 1;
        CK(cuCtxSynchronize());
    }
    int status = 1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
