/* SPDX-License-Identifier: BSD-3-Clause */
/* Context lifetime, the progress thread, waiting and completion. */
#include "engine/engine.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <ucs/config/global_opts.h>

#include "engine/seal.h"
#include "engine/spin.h"
#include "mem/cuda.h"
#include "util/fields.h"
#include "util/env.h"
#include "util/log.h"
#include "util/time.h"

#define RM_DEFAULT_SPIN_US   50
#define RM_DEFAULT_HEARTBEAT_MS    500
#define RM_DEFAULT_PEER_TIMEOUT_MS 2000
#define RM_ENV_MS_MAX              3600000u /* an hour, in ms (or µs for REMORA_SPIN_US) */
#define RM_DRIVER_IDLE_NS    2000000ull /* a driver that saw nothing for 2 ms steps back */
#define RM_STAND_ASIDE_NS    1000000ull /* how often a standing-aside progress thread looks again */
#define RM_STAND_ASIDE_ASLEEP_NS 10000000ull /* the same while the driver sleeps on the worker */
#define RM_LOAD_CHECK_NS     10000000ull /* how often spinners look whether the cores are oversubscribed */
#define RM_LOAD_BUSY_HOLD_NS 50000000ull /* how long one look that found them so holds */
#define RM_SPIN_YIELD_NS     10000ull /* how often an idle spinner yields its core (spin_pause) */

remora_status_t rm_status_from_ucs(ucs_status_t s)
{
    switch (s) {
    case UCS_OK:                     return REMORA_OK;
    case UCS_INPROGRESS:             return REMORA_INPROGRESS;
    case UCS_ERR_NO_MEMORY:          return REMORA_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:       return REMORA_ERR_INVALID_PARAM;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:           return REMORA_ERR_CONNECTION_REFUSED;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:           return REMORA_ERR_DISCONNECTED;
    case UCS_ERR_CANCELED:           return REMORA_ERR_CANCELED;
    case UCS_ERR_TIMED_OUT:          return REMORA_ERR_TIMED_OUT;
    case UCS_ERR_UNSUPPORTED:        return REMORA_ERR_UNSUPPORTED;
    case UCS_ERR_BUSY:               return REMORA_ERR_BUSY;
    default:                         return REMORA_ERR_TRANSPORT;
    }
}

/*
 * A UCX that handles CUDA memory (1.13's cuda_copy and cuda_ipc) copies GPU
 * memory only on a thread with a current CUDA context ("attempt to perform
 * cuda memcpy without active context"), and remora's own CUDA calls leave
 * none behind (they push and pop). Once GPU memory has gone to UCX in this
 * process (rm_engine_cuda_enter), every thread that enters the engine (the
 * progress threads, callers issuing requests or driving progress while they
 * wait) may run UCX's GPU copies, so each gets GPU 0's primary context if it
 * has none (rm_cuda_thread_ctx). Not before: a process that only moves host
 * memory creates no CUDA context. Cheap: a thread-local and an atomic test.
 */
static _Thread_local int tls_cuda_bound;
static atomic_int cuda_active;

static void cuda_bind_thread(remora_context_h ctx, int device)
{
    if (tls_cuda_bound || !ctx->ucx_cuda ||
        !atomic_load_explicit(&cuda_active, memory_order_relaxed))
        return;
    tls_cuda_bound = 1;
    if (rm_cuda_thread_ctx(device) != REMORA_OK)
        rm_warn("no CUDA context for this thread: UCX may fail to copy GPU memory");
}

void rm_engine_cuda_enter(remora_context_h ctx, int device)
{
    if (!ctx->ucx_cuda)
        return;
    atomic_store(&cuda_active, 1);
    cuda_bind_thread(ctx, device < 0 ? 0 : device);
}

void rm_engine_lock(remora_context_h ctx)
{
    if (pthread_mutex_trylock(&ctx->lock) != 0) {
        atomic_fetch_add(&ctx->lock_waiters, 1);
        pthread_mutex_lock(&ctx->lock);
        atomic_fetch_sub(&ctx->lock_waiters, 1);
    }
    cuda_bind_thread(ctx, 0);
}
void rm_engine_unlock(remora_context_h ctx) { pthread_mutex_unlock(&ctx->lock); }

/* ------------------------------------------------------------ waiting */

static void wake_waiters(remora_context_h ctx)
{
    if (atomic_load(&ctx->driver_asleep)) /* on the worker's fd: see driver_sleep */
        ucp_worker_signal(ctx->worker);
    if (atomic_load(&ctx->sleepers) > 0) {
        pthread_mutex_lock(&ctx->wait_mx);
        pthread_cond_broadcast(&ctx->wait_cv);
        pthread_mutex_unlock(&ctx->wait_mx);
    }
}

void rm_engine_complete(remora_context_h ctx, atomic_int *done)
{
    atomic_store(done, 1);
    wake_waiters(ctx);
}

void rm_engine_kick(remora_context_h ctx)
{
    if (atomic_load(&ctx->thread_asleep) || atomic_load(&ctx->driver_asleep))
        ucp_worker_signal(ctx->worker);
}

static void timespec_from_ns(struct timespec *ts, uint64_t ns)
{
    ts->tv_sec  = (time_t)(ns / 1000000000u);
    ts->tv_nsec = (long)(ns % 1000000000u);
}

/* Sleep until done, the deadline, or a wake-up (at most 10 ms, so a driver slot
 * that frees up is noticed). */
static void sleep_once(remora_context_h ctx, const atomic_int *done, uint64_t deadline)
{
    struct timespec ts;
    uint64_t until = rm_now_ns() + 10000000u;

    timespec_from_ns(&ts, until < deadline ? until : deadline);
    pthread_mutex_lock(&ctx->wait_mx);
    atomic_fetch_add(&ctx->sleepers, 1);
    if (!atomic_load(done))
        pthread_cond_timedwait(&ctx->wait_cv, &ctx->wait_mx, &ts);
    atomic_fetch_sub(&ctx->sleepers, 1);
    pthread_mutex_unlock(&ctx->wait_mx);
}

/*
 * A thread waiting in rm_engine_lock goes before a loop that takes the lock
 * again and again (the progress thread, a driver): a mutex is not fair, the
 * loop's unlock-and-retake wins every time, and a server's first worker,
 * waiting for a busy worker's lock to hand it a connection, stalled for
 * seconds with its own lock held (its clients' heartbeats and handshakes
 * with it; 64 clients on 4 workers, 16 cores).
 */
static void yield_to_lockers(remora_context_h ctx)
{
    for (int i = 0; i < 100 && atomic_load(&ctx->lock_waiters) > 0; i++)
        sched_yield();
}

/* One pass: UCX's events, endpoints that failed inside our sends, then GPU
 * copies that ended. Lock held. */
static unsigned progress_once(remora_context_h ctx)
{
    unsigned n = ucp_worker_progress(ctx->worker);

    n += rm_peer_failures_run(ctx);
    return n + rm_copyq_poll(ctx->copyq);
}

remora_status_t rm_engine_copy(remora_context_h ctx, rm_copy_t *copy, void *dst,
                               const void *src, size_t length, rm_copy_cb_t done)
{
    copy->d2d = 0; /* staging: one side is host memory */
    remora_status_t st = ctx->copyq ? rm_copyq_start(ctx->copyq, copy, dst, src, length, done)
                                    : REMORA_ERR_UNSUPPORTED;

    if (st == REMORA_ERR_UNSUPPORTED) /* that device was never prepared */
        return rm_cuda_copy(dst, src, length);
    if (st != REMORA_OK)
        return st;
    rm_engine_hand_off(ctx); /* the progress thread polls it, not sleeps */
    return REMORA_INPROGRESS;
}

remora_status_t rm_engine_copy_prepare(remora_context_h ctx, int device)
{
    if (ctx->copyq == NULL && (ctx->copyq = rm_copyq_create()) == NULL)
        return REMORA_ERR_NO_MEMORY;
    return rm_copyq_prepare(ctx->copyq, device);
}

void rm_engine_copy_drain(remora_context_h ctx) { rm_copyq_drain(ctx->copyq); }

/* ------------------------------------------------------------ spinning */

/*
 * Whether a spinning thread would take a core that another runnable thread
 * needs: more threads runnable than cores online, beyond the spinners the
 * spin slots allow (/proc/loadavg's running count, looked at every
 * RM_LOAD_CHECK_NS by one thread of the process). Spinning saves a wake-up
 * only while a core is free: 64 subscriber processes spinning for their
 * answers beside the server's spinning workers on 16 cores made every
 * wake-up wait for a time slice, and with 4 of them spinning (the slots
 * alone) their p99 was 2.8 ms against 0.4 (docs/performance.md, session
 * 33). The slots' own spinners are allowed for: on 2 cores a subscriber,
 * the server thread it waits for and the producer sample as 3, and a rule
 * of "more than the cores" forbade the one spinner that helps. A look that
 * finds the cores oversubscribed holds for RM_LOAD_BUSY_HOLD_NS: a load
 * that comes in bursts (64 subscribers woken by each commit) would
 * otherwise let every process that looked between two bursts spin for the
 * next 10 ms. Unreadable: never oversubscribed.
 */
static int cpus_oversubscribed(void)
{
    static _Atomic uint64_t next_check, busy_until;
    uint64_t now = rm_now_ns();

    if (now < atomic_load_explicit(&next_check, memory_order_relaxed))
        return now < atomic_load_explicit(&busy_until, memory_order_relaxed);
    atomic_store_explicit(&next_check, now + RM_LOAD_CHECK_NS, memory_order_relaxed);
    long cores = sysconf(_SC_NPROCESSORS_ONLN), running = 0;
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        /* "0.20 0.18 0.12 3/512 4242": runnable/threads is the fourth field */
        if (n > 0 && (buf[n] = '\0', sscanf(buf, "%*s %*s %*s %ld/", &running) != 1))
            running = 0;
    }
    if (cores > 0 && running > cores + (long)rm_spin_slots())
        atomic_store_explicit(&busy_until, now + RM_LOAD_BUSY_HOLD_NS, memory_order_relaxed);
    return now < atomic_load_explicit(&busy_until, memory_order_relaxed);
}

/* How long to spin for an event before sleeping: idle_ns, or nothing while
 * the cores are oversubscribed or every spin slot is taken (unless the
 * context says not to look). A slot taken here is the calling thread's until
 * it sleeps (rm_spin_give). */
static uint64_t spin_budget(remora_context_h ctx, uint64_t idle_ns)
{
    if (idle_ns == 0 || !ctx->spin_load)
        return idle_ns;
    return cpus_oversubscribed() || !rm_spin_take() ? 0 : idle_ns;
}

/* One idle turn of a spin loop; every RM_SPIN_YIELD_NS the core is offered
 * to whatever else is runnable on it. A spinner that wakes a sleeping thread
 * with a send (a client's request to its server's progress thread, a ring
 * subscriber's next wait) often gets that thread queued behind it on its own
 * core: Linux places a thread woken through a socket beside its waker,
 * expecting the waker to sleep soon. A spinner does not, and the woken
 * thread waited out its time slice while the other core sat idle: 150-250 us
 * a wake-up on the 2-core VM, the ring subscriber's p99 (docs/performance.md,
 * session 34). With nothing else runnable, a yield is one system call. */
static void spin_pause(uint64_t *last_yield, uint64_t now)
{
    if (now - *last_yield >= RM_SPIN_YIELD_NS) {
        sched_yield();
        *last_yield = now;
    } else {
        rm_cpu_relax();
    }
}

/* Progress as the driver until done, the deadline, or idle_ns of nothing
 * (yielding to lockers, as the progress thread does); one pass at least. */
static void drive(remora_context_h ctx, const atomic_int *done, uint64_t deadline,
                  uint64_t idle_ns)
{
    uint64_t last_event = rm_now_ns(), now = last_event, last_yield = now;
    unsigned n = 1; /* one pass at least; and on while passes find events */

    idle_ns = spin_budget(ctx, idle_ns);
    while (!atomic_load(done) && now < deadline && (n || now - last_event < idle_ns)) {
        n = 0;
        yield_to_lockers(ctx);
        if (pthread_mutex_trylock(&ctx->lock) == 0) {
            n = progress_once(ctx);
            pthread_mutex_unlock(&ctx->lock);
        }
        now = rm_now_ns();
        if (n)
            last_event = now;
        else
            spin_pause(&last_yield, now);
    }
}

/* Wake the progress thread if it stands aside for a driver. */
static void wake_progress_thread(remora_context_h ctx)
{
    pthread_mutex_lock(&ctx->wait_mx);
    pthread_cond_signal(&ctx->prog_cv);
    pthread_mutex_unlock(&ctx->wait_mx);
}

void rm_engine_serving_add(remora_context_h ctx, uint64_t instance)
{
    for (unsigned i = 0; i < RM_SERVING_MAX; i++)
        if (ctx->serving[i] == 0) {
            ctx->serving[i] = instance;
            return;
        }
}

void rm_engine_serving_remove(remora_context_h ctx, uint64_t instance)
{
    for (unsigned i = 0; i < RM_SERVING_MAX; i++)
        if (ctx->serving[i] == instance)
            ctx->serving[i] = 0;
}

int rm_engine_serving(remora_context_h ctx, uint64_t instance)
{
    for (unsigned i = 0; i < RM_SERVING_MAX; i++)
        if (instance != 0 && ctx->serving[i] == instance)
            return 1;
    return 0;
}

void rm_engine_hand_off(remora_context_h ctx)
{
    rm_engine_kick(ctx);
    wake_progress_thread(ctx);
}

void rm_engine_bulk_add(remora_context_h ctx, int n) { atomic_fetch_add(&ctx->bulk, n); }

#define RM_GPU_UCX_POLL_NS (1000ull * 1000000u)

void rm_engine_gpu_ucx_add(remora_context_h ctx, int n)
{
    if (n > 0)
        atomic_store(&ctx->gpu_ucx_ns, rm_now_ns());
    atomic_fetch_add(&ctx->gpu_ucx, n);
}

ucs_status_ptr_t rm_engine_am_recv_data(remora_context_h ctx, void *data_desc, void *buf,
                                        size_t len, const ucp_request_param_t *p)
{
    int gpu = (p->op_attr_mask & UCP_OP_ATTR_FIELD_MEMORY_TYPE) &&
              p->memory_type == UCS_MEMORY_TYPE_CUDA;

    if (gpu)
        rm_engine_gpu_ucx_add(ctx, 1);
    ucs_status_ptr_t ret = ucp_am_recv_data_nbx(ctx->worker, data_desc, buf, len, p);
    if (gpu && !UCS_PTR_IS_PTR(ret))
        rm_engine_gpu_ucx_add(ctx, -1);
    return ret;
}

/* GPU copies run whose end is polled, not signalled (or signalled late):
 * the copy queue's, and UCX's own (rm_engine_gpu_ucx_add). */
static int gpu_copies_run(remora_context_h ctx)
{
    return rm_copyq_busy(ctx->copyq) != 0 ||
           (atomic_load(&ctx->gpu_ucx) > 0 &&
            rm_now_ns() - atomic_load(&ctx->gpu_ucx_ns) < RM_GPU_UCX_POLL_NS);
}

remora_status_t rm_engine_wait(remora_context_h ctx, const atomic_int *done, uint64_t deadline)
{
    return rm_engine_wait_spin(ctx, done, deadline, RM_DRIVER_IDLE_NS);
}

/*
 * The driver saw nothing for its spin budget: it sleeps on the worker's
 * event fd itself and stays the driver, so that the event completing its
 * operation wakes it alone. (Handing the sleep to the progress thread cost
 * two more wake-ups per operation: the progress thread's, then ours from
 * it; 64 ring subscribers at 10 kHz on 16 cores spent their cores on
 * them.) Completions from other threads and kicks reach it through
 * ucp_worker_signal (driver_asleep). Not while GPU copies run: their end is
 * polled, not signalled. Returns when woken, or after 10 ms at most.
 */
static void driver_sleep(remora_context_h ctx, const atomic_int *done, uint64_t deadline)
{
    uint64_t now = rm_now_ns();

    if (now >= deadline || gpu_copies_run(ctx))
        return;
    rm_engine_lock(ctx);
    ucs_status_t status = ucp_worker_arm(ctx->worker);
    rm_engine_unlock(ctx);
    if (status != UCS_OK)
        return; /* events are pending (BUSY): drive again */
    rm_spin_give();
    atomic_store(&ctx->driver_asleep, 1);
    if (!atomic_load(done) && !atomic_load(&ctx->stop)) {
        uint64_t ms = (deadline - now + 999999u) / 1000000u;
        struct pollfd pfd = {.fd = ctx->efd, .events = POLLIN};
        poll(&pfd, 1, ms < 10 ? (int)ms : 10);
    }
    atomic_store(&ctx->driver_asleep, 0);
}

/*
 * Hand-offs as the driver leaves (rm_engine_bulk_add). A caller that comes
 * straight back (a loop posting its next request and waiting again) drives
 * the transfers in flight itself: waking the progress thread for it cost
 * two context switches and a futex round per request, and one connection's
 * 1 MiB reads at depth 4 ran about 9 % slower with it than without on a
 * 16-core host (docs/performance.md, session 35). Callers that stay away
 * (a ring subscriber checking each frame, an application working on its
 * block) get the hand-off. The rule itself is in engine.h.
 */
uint64_t rm_engine_away_avg(uint64_t avg_ns, uint64_t away_ns)
{
    if (away_ns > RM_HAND_OFF_AWAY_MAX_NS)
        away_ns = RM_HAND_OFF_AWAY_MAX_NS; /* one long pause must not stand for ages */
    return avg_ns - avg_ns / 8 + away_ns / 8;
}

int rm_engine_hand_off_due(uint64_t avg_ns) { return avg_ns >= RM_HAND_OFF_AWAY_NS; }

/* A caller takes the driver's seat at `now`: how long callers stayed away
 * since the last one left with its operation done goes into the average. */
static void driver_returns(remora_context_h ctx, uint64_t now)
{
    uint64_t left = atomic_load_explicit(&ctx->driver_left_ns, memory_order_relaxed);
    uint64_t avg  = atomic_load_explicit(&ctx->away_avg_ns, memory_order_relaxed);

    if (left != 0)
        atomic_store_explicit(&ctx->away_avg_ns, rm_engine_away_avg(avg, now - left),
                              memory_order_relaxed);
}

static void driver_leaves(remora_context_h ctx)
{
    if (atomic_load(&ctx->bulk) > 0 &&
        rm_engine_hand_off_due(atomic_load_explicit(&ctx->away_avg_ns, memory_order_relaxed)))
        wake_progress_thread(ctx); /* they move while our caller works */
    atomic_store_explicit(&ctx->driver_left_ns, rm_now_ns(), memory_order_relaxed);
}

remora_status_t rm_engine_wait_spin(remora_context_h ctx, const atomic_int *done,
                                    uint64_t deadline, uint64_t idle_ns)
{
    while (!atomic_load(done)) {
        uint64_t now = rm_now_ns();
        if (now >= deadline)
            return REMORA_ERR_TIMED_OUT;
        int expected = 0;
        if (atomic_compare_exchange_strong(&ctx->driver, &expected, 1)) {
            driver_returns(ctx, now);
            while (!atomic_load(done) && rm_now_ns() < deadline && !atomic_load(&ctx->stop)) {
                drive(ctx, done, deadline, idle_ns);
                if (!atomic_load(done))
                    driver_sleep(ctx, done, deadline);
            }
            atomic_store(&ctx->driver, 0);
            rm_spin_give(); /* our caller works on, or we sleep as a waiter */
            if (atomic_load(done)) {
                driver_leaves(ctx);
                break;
            }
            /* Deadline or shutdown: the progress thread sleeps on the
             * worker for the others now; we sleep as a waiter. */
            wake_progress_thread(ctx);
        }
        sleep_once(ctx, done, deadline);
    }
    return REMORA_OK;
}

/* ------------------------------------------------------------ deferred work */

void rm_engine_defer(remora_context_h ctx, rm_deferred_t *d)
{
    pthread_mutex_lock(&ctx->defer_mx);
    rm_list_push_back(&ctx->deferred, &d->link);
    atomic_fetch_add(&ctx->ndeferred, 1);
    pthread_mutex_unlock(&ctx->defer_mx);
    rm_engine_kick(ctx);
    wake_progress_thread(ctx);
    wake_waiters(ctx);
}

static void run_deferred(remora_context_h ctx)
{
    rm_list_t batch, *pos, *tmp;

    /* Only the progress thread takes from the list: non-empty stays so. */
    if (atomic_load(&ctx->ndeferred) == 0)
        return;
    /* Move the whole list out so callbacks may defer more. */
    pthread_mutex_lock(&ctx->defer_mx);
    batch       = ctx->deferred;
    batch.next->prev = &batch;
    batch.prev->next = &batch;
    rm_list_init(&ctx->deferred);
    atomic_store(&ctx->ndeferred, 0);
    pthread_mutex_unlock(&ctx->defer_mx);

    rm_list_for_each_safe(pos, tmp, &batch) {
        rm_list_del(pos);
        rm_container_of(pos, rm_deferred_t, link)->fn(rm_container_of(pos, rm_deferred_t, link));
    }
}

/* ------------------------------------------------------------ signals */

void rm_engine_add_signal(remora_context_h ctx, rm_signal_t *sig)
{
    atomic_init(&sig->pending, 0);
    rm_list_push_back(&ctx->signals, &sig->link);
}

void rm_engine_remove_signal(remora_context_h ctx, rm_signal_t *sig) { rm_list_del(&sig->link); }

void rm_engine_signal(remora_context_h ctx, rm_signal_t *sig)
{
    if (atomic_exchange(&sig->pending, 1))
        return; /* already on its way */
    atomic_store(&ctx->signaled, 1);
    rm_engine_kick(ctx);
    if (atomic_load(&ctx->driver))
        wake_progress_thread(ctx);
}

void rm_engine_signal_now(remora_context_h ctx, rm_signal_t *sig)
{
    if (pthread_mutex_trylock(&ctx->lock) != 0) {
        rm_engine_signal(ctx, sig);
        return;
    }
    atomic_store(&sig->pending, 0);
    sig->fn(sig);
    rm_engine_unlock(ctx);
    /* The progress thread completes the sends: make sure it looks even if
     * it was just going to sleep (it re-checks `signaled` first). */
    atomic_store(&ctx->signaled, 1);
    rm_engine_kick(ctx);
}

void rm_engine_try_progress(remora_context_h ctx)
{
    if (pthread_mutex_trylock(&ctx->lock) == 0) {
        progress_once(ctx);
        pthread_mutex_unlock(&ctx->lock);
    }
}

static void run_signals(remora_context_h ctx)
{
    rm_list_t *pos, *tmp;

    if (!atomic_exchange(&ctx->signaled, 0))
        return;
    rm_engine_lock(ctx);
    rm_list_for_each_safe(pos, tmp, &ctx->signals) {
        rm_signal_t *sig = rm_container_of(pos, rm_signal_t, link);
        if (atomic_exchange(&sig->pending, 0))
            sig->fn(sig);
    }
    rm_engine_unlock(ctx);
}

/* ------------------------------------------------------------ sockets and ticks */

remora_status_t rm_engine_watch(remora_context_h ctx, rm_watch_t *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(ctx->watch_epfd, EPOLL_CTL_ADD, w->fd, &ev) == 0 ? REMORA_OK : REMORA_ERR_IO;
}

void rm_engine_unwatch(remora_context_h ctx, rm_watch_t *w)
{
    epoll_ctl(ctx->watch_epfd, EPOLL_CTL_DEL, w->fd, NULL);
}

void rm_engine_add_ticker(remora_context_h ctx, rm_ticker_t *t)
{
    rm_list_push_back(&ctx->tickers, &t->link);
}

void rm_engine_remove_ticker(remora_context_h ctx, rm_ticker_t *t) { rm_list_del(&t->link); }

/* Handle ready sockets, one event at a time and under the lock, so a callback
 * may unwatch (and free) any other watch safely. */
static void poll_watches(remora_context_h ctx)
{
    struct epoll_event ev;

    rm_engine_lock(ctx);
    for (int i = 0; i < 64 && epoll_wait(ctx->watch_epfd, &ev, 1, 0) == 1; i++) {
        rm_watch_t *w = ev.data.ptr;
        w->cb(w, ev.events);
    }
    rm_engine_unlock(ctx);
}

static void run_tickers(remora_context_h ctx)
{
    rm_list_t *pos, *tmp;

    rm_engine_lock(ctx);
    rm_list_for_each_safe(pos, tmp, &ctx->tickers)
        rm_container_of(pos, rm_ticker_t, link)->fn(rm_container_of(pos, rm_ticker_t, link));
    rm_engine_unlock(ctx);
}

/* Sockets every millisecond, tickers every RM_TICK_MS: cheap enough to do
 * from any phase of the progress loop. */
static void housekeeping(remora_context_h ctx, uint64_t *next_poll, uint64_t *next_tick)
{
    uint64_t now = rm_now_ns();

    if (now >= *next_poll) {
        poll_watches(ctx);
        *next_poll = now + 1000000u;
    }
    if (now >= *next_tick) {
        run_tickers(ctx);
        *next_tick = now + (uint64_t)RM_TICK_MS * 1000000u;
    }
}

/* ------------------------------------------------------------ progress thread */

/* Arm the worker and sleep on its event fd; returns when woken or after a tick. */
static void sleep_on_worker(remora_context_h ctx)
{
    struct epoll_event ev;
    ucs_status_t status;

    rm_engine_lock(ctx);
    status = ucp_worker_arm(ctx->worker);
    rm_engine_unlock(ctx);
    if (status == UCS_ERR_BUSY)
        return; /* events are pending: progress again */
    rm_spin_give();
    atomic_store(&ctx->thread_asleep, 1);
    if (atomic_load(&ctx->ndeferred) || atomic_load(&ctx->stop) ||
        atomic_load(&ctx->signaled)) {
        atomic_store(&ctx->thread_asleep, 0);
        return;
    }
    epoll_wait(ctx->epfd, &ev, 1, RM_TICK_MS);
    atomic_store(&ctx->thread_asleep, 0);
}

/*
 * While a caller drives progress, stand aside. A driver that finished its
 * operation does not wake us (it usually comes straight back with the next
 * one, and waking a third thread on a busy machine costs more than it
 * saves); we look again after RM_STAND_ASIDE_NS. A driver that gives up
 * idle, deferred work, and shutdown wake us at once.
 */
static void stand_aside(remora_context_h ctx)
{
    struct timespec ts;
    /* A driver asleep on the worker's fd is woken by the worker's events;
     * ours (deferred work, signals, shutdown) wake us. Look again seldom:
     * 64 subscriber processes looking every millisecond were 64,000
     * wake-ups a second for nothing. */
    uint64_t wait = atomic_load(&ctx->driver_asleep) ? RM_STAND_ASIDE_ASLEEP_NS : RM_STAND_ASIDE_NS;

    rm_spin_give();
    timespec_from_ns(&ts, rm_now_ns() + wait);
    pthread_mutex_lock(&ctx->wait_mx);
    if (atomic_load(&ctx->driver) && !atomic_load(&ctx->stop) && atomic_load(&ctx->ndeferred) == 0 &&
        !atomic_load(&ctx->signaled))
        pthread_cond_timedwait(&ctx->prog_cv, &ctx->wait_mx, &ts);
    pthread_mutex_unlock(&ctx->wait_mx);
}

static void *progress_thread(void *arg)
{
    remora_context_h ctx = arg;
    uint64_t last_event  = rm_now_ns(), next_poll = 0, next_tick = 0, last_yield = 0;

    while (!atomic_load(&ctx->stop)) {
        run_deferred(ctx);
        run_signals(ctx);
        housekeeping(ctx, &next_poll, &next_tick);
        if (atomic_load(&ctx->driver)) {
            stand_aside(ctx);
            last_event = rm_now_ns();
            continue;
        }
        yield_to_lockers(ctx);
        rm_engine_lock(ctx);
        unsigned n = progress_once(ctx);
        int copying = gpu_copies_run(ctx);
        rm_engine_unlock(ctx);
        uint64_t now = rm_now_ns();
        if (n) {
            last_event = now;
        } else if (!copying && now - last_event >= spin_budget(ctx, (uint64_t)ctx->spin_us * 1000u)) {
            sleep_on_worker(ctx);
            last_event = rm_now_ns();
            next_poll  = 0;
        } else {
            spin_pause(&last_yield, now);
        }
    }
    rm_spin_give();
    run_deferred(ctx);
    return NULL;
}

/* ------------------------------------------------------------ peers by ep */

static size_t peer_slot(remora_context_h ctx, ucp_ep_h ep)
{
    uintptr_t h = (uintptr_t)ep;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (ctx->peers_cap - 1);
}

static rm_peer_t *peer_find(remora_context_h ctx, ucp_ep_h ep)
{
    if (ctx->peers_cap == 0)
        return NULL;
    for (rm_peer_t *p = ctx->peers[peer_slot(ctx, ep)]; p; p = p->hash_next)
        if (p->ep == ep)
            return p;
    return NULL;
}

static int peers_grow(remora_context_h ctx)
{
    size_t old_cap = ctx->peers_cap, cap = old_cap ? old_cap * 2 : 64;
    rm_peer_t **old = ctx->peers, **tab = calloc(cap, sizeof(*tab));

    if (tab == NULL)
        return -1;
    ctx->peers     = tab;
    ctx->peers_cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        rm_peer_t *p = old[i], *next;
        for (; p; p = next) {
            next = p->hash_next;
            size_t s = peer_slot(ctx, p->ep);
            p->hash_next = tab[s];
            tab[s]       = p;
        }
    }
    free(old);
    return 0;
}

int rm_engine_peer_add(remora_context_h ctx, rm_peer_t *peer)
{
    if (ctx->npeers >= ctx->peers_cap && peers_grow(ctx) != 0)
        return -1;
    size_t s        = peer_slot(ctx, peer->ep);
    peer->hash_next = ctx->peers[s];
    ctx->peers[s]   = peer;
    ctx->npeers++;
    return 0;
}

void rm_engine_peer_remove(remora_context_h ctx, rm_peer_t *peer)
{
    if (ctx->peers_cap == 0)
        return;
    for (rm_peer_t **pp = &ctx->peers[peer_slot(ctx, peer->ep)]; *pp; pp = &(*pp)->hash_next) {
        if (*pp == peer) {
            *pp = peer->hash_next;
            ctx->npeers--;
            return;
        }
    }
}

/* ------------------------------------------------------------ AM dispatch */

static ucs_status_t am_recv(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    remora_context_h ctx = arg;
    rm_peer_t *peer      = NULL;
    rm_hdr_t hdr;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        peer = peer_find(ctx, param->reply_ep);
    if (peer == NULL || rm_peer_failing(peer)) {
        rm_debug("message from an unknown or closed endpoint dropped");
        return UCS_OK;
    }
    if (peer->seal != NULL) /* checked and decrypted there */
        return rm_peer_seal_recv(peer, header, header_length, data, length, param);
    if (rm_hdr_decode(header, header_length, &hdr) != 0 || hdr.sealed)
        return peer->ops->on_message(peer, NULL, data, length, param);
    return peer->ops->on_message(peer, &hdr, data, length, param);
}

static ucs_status_t set_am_handler(remora_context_h ctx, unsigned id)
{
    ucp_am_handler_param_t p = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id    = id,
        .cb    = am_recv,
        .arg   = ctx,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
    };
    return ucp_worker_set_am_recv_handler(ctx->worker, &p);
}

/* ------------------------------------------------------------ create / destroy */

/* Same-host identity: boot id, hostname and network namespace. Peers in other
 * namespaces count as other hosts, so the cross-host paths can be tested. */
static void compute_host_id(uint8_t out[RM_HOST_ID_LEN])
{
    char buf[512] = {0}, ns[128] = {0};
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY);

    if (fd >= 0) {
        ssize_t n = read(fd, buf, 64);
        (void)n;
        close(fd);
    }
    gethostname(buf + 64, 255);
    ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    if (n > 0)
        memcpy(buf + 320, ns, (size_t)n);
    crypto_generichash(out, RM_HOST_ID_LEN, (const uint8_t *)buf, sizeof(buf), NULL, 0);
}

/* The network interface that owns host (an IP address or name), for UCX's
 * NET_DEVICES; 0 when host is a wildcard or no interface has it. */
static int interface_of(const char *host, char *ifname, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICSERV}, *res;
    struct ifaddrs *ifs, *i;
    int found = 0;

    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i && !found; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != res->ai_family)
                continue;
            if (res->ai_family == AF_INET
                    ? ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr ==
                          ((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr.s_addr
                    : memcmp(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr,
                             &((struct sockaddr_in6 *)(void *)res->ai_addr)->sin6_addr,
                             sizeof(struct in6_addr)) == 0) {
                snprintf(ifname, len, "%s", i->ifa_name);
                found = 1;
            }
        }
        freeifaddrs(ifs);
    }
    freeaddrinfo(res);
    return found;
}

/* Keep UCX's network transports to the interface of bind_host, so that the
 * TCP listeners UCX opens for its own connections are where the server was
 * told to listen, and nowhere else. Shared-memory devices are not network
 * devices and stay. */
static void config_bind(ucp_config_t *config, const char *bind_host)
{
    char ifname[IF_NAMESIZE + 1];

    if (bind_host == NULL || getenv("UCX_NET_DEVICES") != NULL)
        return;
    if (!interface_of(bind_host, ifname, sizeof(ifname))) {
        rm_debug("%s is no interface's own address; UCX keeps every interface", bind_host);
        return;
    }
    ucp_config_modify(config, "NET_DEVICES", ifname);
}

/* RMA: off by default. When on for verbs only, UCX's TCP transport is left
 * out of the context: UCX emulates RMA over it and the emulation checks no
 * address, so any peer reaching UCX's TCP port could read and write all of
 * this process (docs/security.md). */
/* What config_rma gives UCX for REMORA_RMA=1 when the environment says nothing. */
#define TLS_NO_TCP "^tcp"

static int config_rma(ucp_config_t *config, int rma)
{
    const char *tls = getenv("UCX_TLS");

    if (rma != REMORA_RMA_VERBS)
        return rma;
    if (tls == NULL) {
        ucp_config_modify(config, "TLS", TLS_NO_TCP);
        return rma;
    }
    if (strstr(tls, "tcp") != NULL && tls[0] != '^') {
        rm_warn("REMORA_RMA=1 with UCX_TLS=%s, which has tcp: RMA stays off", tls);
        return REMORA_RMA_OFF;
    }
    return rma;
}

/*
 * A UCX built with CUDA keeps a cache of which addresses are GPU memory,
 * filled by hooks on the CUDA allocation calls; an address it does not hold
 * it takes for host memory (UCX 1.13, ucp_memory_detect_internal). Memory
 * allocated through entry points the hooks never see (remora's: the driver
 * is dlopen'd; cudart's own: cuGetProcAddress) is then read and written with
 * memcpy as if it were host memory. remora tells UCX the memory type wherever
 * it knows it; with the cache off, UCX asks the driver (cuPointerGetAttributes)
 * for the rest. The cache is made on first use, after this. A user's
 * UCX_MEMTYPE_CACHE wins. Without a CUDA module, UCX detects nothing either way.
 */
static void config_memtype_cache(void)
{
    if (getenv("UCX_MEMTYPE_CACHE") == NULL &&
        ucs_global_opts_set_value("MEMTYPE_CACHE", "n") != UCS_OK)
        rm_debug("cannot turn UCX's memory type cache off");
}

int rm_ucx_at_least(unsigned major, unsigned minor)
{
    unsigned ma, mi, rel;

    ucp_get_version(&ma, &mi, &rel);
    return ma > major || (ma == major && mi >= minor);
}

/* Connection-manager endpoints by default from UCX 1.16 on; REMORA_CM=1 or 0
 * decides otherwise. UCX 1.13's manager crashed the server in about one test
 * run in six when a client was killed while connecting (1.16 survived 600
 * kills in a row: docs/performance.md, session 28). */
int rm_ucx_cm_wanted(void)
{
    const char *opt = getenv("REMORA_CM");

    return opt ? strcmp(opt, "1") == 0 : rm_ucx_at_least(1, 16);
}

/* A UCX boolean setting's value, as UCX reads it. */
static int ucx_yes(const char *v)
{
    return strcasecmp(v, "y") == 0 || strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0 ||
           strcmp(v, "1") == 0;
}

const char *rm_engine_ucx_tls(remora_context_h ctx)
{
    const char *tls = getenv("UCX_TLS");

    return tls == NULL && ctx->rma == REMORA_RMA_VERBS ? TLS_NO_TCP : tls;
}

/* Whether UCX may load its TCP transport under this UCX_TLS (NULL: all). */
static int tls_has_tcp(const char *tls)
{
    if (tls == NULL)
        return 1;
    if (tls[0] == '^')
        return strstr(tls, "tcp") == NULL;
    return strstr(tls, "tcp") != NULL || strstr(tls, "all") != NULL;
}

/* Host bulk bodies from this length on go by rendezvous on UCX's TCP
 * transport (config_tcp). */
#define RNDV_MIN (64u << 10)

/* UCX's TCP transport: the segments peers agree on, socket events per
 * pass, connects. Not set where TCP is left out (UCX would warn of
 * settings no transport took). After config_rma, which may leave it out. */
static void config_tcp(remora_context_h ctx, ucp_config_t *config)
{
    if (!tls_has_tcp(rm_engine_ucx_tls(ctx))) {
        ctx->connect_blocks = 0; /* nothing of UCX's TCP to probe for */
        return;
    }
    /* UCX's TCP segment sizes, which peers must agree on: tcp_segs.c. */
    rm_tcp_segs_config(ctx, config);
    /* UCX 1.16's protocols send a 64-128 KiB active message whose buffer we
     * registered as eager fragments of one TCP segment each: 1.0-1.3 GB/s
     * on one connection, where the same bodies by rendezvous (its zero-copy
     * lanes, the connection manager's endpoints) read 1.8-3.2, as much as
     * ucp_am_bw at those sizes (an H100 host; docs/performance.md, session
     * 43). Without those lanes (UCX 1.13, zero copy off) rendezvous data
     * goes as active messages, and the VM's figures were mixed: UCX decides
     * there. Lanes and workers take the parent's (rm_engine_lane_create). */
    ctx->rndv_min = (uint32_t)rm_env_u64(
        "REMORA_RNDV_MIN", rm_ucx_at_least(1, 16) && rm_ucx_cm_wanted() ? RNDV_MIN : 0, 0,
        UINT32_MAX);
    /* UCX 1.13's TCP transport handles a batch of socket events per pass.
     * Handling one can send on another endpoint (a rendezvous reply, RTR in,
     * data out on the connection the other way); if that peer has died, the
     * send marks its endpoint closed while its hang-up is still due in the
     * batch, and UCX aborts (tcp_iface.c:307, "conn_state != CLOSED"; a
     * server whose ring subscribers were killed mid-push, 3 runs in 8 of
     * 16 x 40 kills). Our own sends from its callbacks (a ring push started
     * by another's completion) can do the same. One event a pass leaves no
     * stale event for either: a failed endpoint is out of the event set
     * before the next epoll_wait. */
    if (getenv("UCX_TCP_MAX_POLL") == NULL)
        ucp_config_modify(config, "MAX_POLL", "1");
    /* UCX's TCP transport connects inside ucp_ep_create with a blocking
     * connect(): an interface of the peer's that drops SYNs holds the
     * thread for minutes. UCX 1.16 connects without blocking and passes our
     * suite so; 1.13 then aborts in ucp_worker_destroy on a wire-up reply
     * left pending (docs/security.md 3.5). Where connects block, peers'
     * interfaces are probed first (reach.h). */
    const char *nb = getenv("UCX_TCP_CONN_NB");
    ctx->connect_blocks = nb ? !ucx_yes(nb) : !rm_ucx_at_least(1, 16);
    if (nb == NULL && !ctx->connect_blocks)
        ucp_config_modify(config, "CONN_NB", "y");
}

/* What UCX before 1.16 needs so that no peer, and no setting, aborts the
 * process inside it. */
static void config_old_ucx(ucp_config_t *config)
{
    if (rm_ucx_at_least(1, 16))
        return;
    /* UCX 1.13 fails a dead peer's send requests while a zero-copy TCP send
     * of one is still UCX's own, and that send's later completion aborts
     * the process (uct_iface.h:884 "comp->count > 0"): clients killed
     * mid-transfer, three at a time, took a server down within two minutes
     * in each of 3 runs, and in none of 3 with copied sends
     * (docs/security.md 3.5). Copying costs about a third of one
     * connection's loopback throughput. Not seen on 1.16; the user's
     * UCX_ZCOPY_THRESH wins. */
    if (getenv("UCX_ZCOPY_THRESH") == NULL)
        ucp_config_modify(config, "ZCOPY_THRESH", "inf");
    /* UCX 1.13's protocols v2 (opt-in before 1.16: UCX_PROTO_ENABLE=y)
     * overflow a stack buffer inside ucp_am_send_nbx for every message sent
     * with UCP_AM_SEND_FLAG_REPLY, which all of ours are: a process that
     * opted in aborted on its first send ("stack smashing detected"), a
     * server on its first reply. UCX 1.16 has them on by default, sound. */
    const char *v2 = getenv("UCX_PROTO_ENABLE");
    if (v2 != NULL && ucx_yes(v2)) {
        rm_warn("UCX_PROTO_ENABLE=%s ignored: this UCX's protocols v2 abort on remora's "
                "messages (UCX 1.16 and later use them by default)", v2);
        ucp_config_modify(config, "PROTO_ENABLE", "n");
    }
}

static ucs_status_t create_ucp(remora_context_h ctx, const char *name, const char *bind_host)
{
    ucp_config_t *config;
    ucs_status_t status;

    config_memtype_cache();
    if ((status = ucp_config_read(NULL, NULL, &config)) != UCS_OK)
        return status;
    config_bind(config, bind_host);
    ctx->rma = config_rma(config, ctx->rma);
    /* A dead peer must become an error promptly even without a TCP reset:
     * remora's own heartbeats (boot.c) see to that. UCX's keepalive is
     * then only extra wire-up traffic, and UCX 1.13 aborts (ucp_request.c
     * "got REP message", tcp_ep.c:478) when a peer that its keepalive
     * failed wakes up from a stop; it runs only with heartbeats off. */
    if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL)
        ucp_config_modify(config, "KEEPALIVE_INTERVAL", ctx->hb_interval_ns ? "inf" : "1s");
    config_tcp(ctx, config);
    config_old_ucx(config);
    ucp_params_t params = {
        .field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                             UCP_PARAM_FIELD_NAME,
        /* Without UCP_FEATURE_RMA, UCX installs no handlers for its software
         * RMA, so no peer can read or write memory it was not sent. */
        .features          = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
                             (ctx->rma ? UCP_FEATURE_RMA : 0),
        .mt_workers_shared = 1, /* lane contexts' workers share it (rm_engine_lane_create) */
        .name              = name,
    };
    status = ucp_init(&params, config, &ctx->ucp);
    ucp_config_release(config);
    return status;
}

/* Peers' worker addresses are checked against our own before UCX sees them
 * (ucx_addr.h). A UCX whose address format this code does not know leaves
 * only the length and version checks: said once per process. */
static ucs_status_t learn_addr_shape(remora_context_h ctx)
{
    static atomic_int warned;

    if (rm_ucx_addr_learn(&ctx->addr_shape, ctx->worker_addr, ctx->worker_addr_len) != 0 &&
        atomic_exchange(&warned, 1) == 0)
        rm_warn("this UCX's worker address format is not one remora can check; peers' "
                "addresses go to UCX after AUTH with only their length checked");
    return UCS_OK;
}

static ucs_status_t create_worker(remora_context_h ctx)
{
    ucp_worker_params_t wp = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
        .events      = UCP_WAKEUP_AMO | UCP_WAKEUP_RMA | UCP_WAKEUP_TAG_SEND |
                       UCP_WAKEUP_TAG_RECV | UCP_WAKEUP_TX | UCP_WAKEUP_RX,
    };
    ucs_status_t status = ucp_worker_create(ctx->ucp, &wp, &ctx->worker);
    if (status != UCS_OK)
        return status;

    if ((status = ucp_worker_get_address(ctx->worker, (ucp_address_t **)&ctx->worker_addr,
                                         &ctx->worker_addr_len)) != UCS_OK ||
        (status = ucp_worker_get_efd(ctx->worker, &ctx->efd)) != UCS_OK ||
        (status = learn_addr_shape(ctx)) != UCS_OK ||
        (status = set_am_handler(ctx, RM_AM_ID_TO_SERVER)) != UCS_OK ||
        (status = set_am_handler(ctx, RM_AM_ID_TO_CLIENT)) != UCS_OK)
        return status;
    rm_tcp_segs_known(ctx);
    return UCS_OK;
}

static remora_status_t init_sync(remora_context_h ctx)
{
    pthread_condattr_t ca;

    pthread_mutex_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->wait_mx, NULL);
    pthread_mutex_init(&ctx->defer_mx, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->wait_cv, &ca);
    pthread_cond_init(&ctx->prog_cv, &ca);
    pthread_condattr_destroy(&ca);
    rm_list_init(&ctx->deferred);
    rm_list_init(&ctx->failing);
    rm_list_init(&ctx->signals);
    rm_list_init(&ctx->tickers);
    rm_engine_live_init(ctx);

    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ctx->efd};
    struct epoll_event wev = {.events = EPOLLIN, .data.fd = -1};
    ctx->epfd       = epoll_create1(EPOLL_CLOEXEC);
    ctx->watch_epfd = epoll_create1(EPOLL_CLOEXEC);
    wev.data.fd     = ctx->watch_epfd;
    if (ctx->epfd < 0 || ctx->watch_epfd < 0 ||
        epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->efd, &ev) != 0 ||
        epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->watch_epfd, &wev) != 0) {
        rm_error("epoll setup failed: %s", strerror(errno));
        return REMORA_ERR_IO;
    }
    return REMORA_OK;
}

/* A worker with its progress thread and event plumbing, on ctx->ucp. */
static remora_status_t start_worker(remora_context_h ctx)
{
    ucs_status_t ustatus;
    remora_status_t status;

    if ((ustatus = create_worker(ctx)) != UCS_OK) {
        rm_error("ucp worker setup failed: %s", ucs_status_string(ustatus));
        status = rm_status_from_ucs(ustatus);
        goto err;
    }
    /* UCX's TCP listening sockets admit no one until a peer is let in. */
    rm_gate_guard_worker(rm_engine_gate(ctx), ctx, ctx->worker_addr, ctx->worker_addr_len);
    if ((status = init_sync(ctx)) != REMORA_OK)
        goto err;
    if (pthread_create(&ctx->thread, NULL, progress_thread, ctx) != 0) {
        status = REMORA_ERR_NO_MEMORY;
        goto err;
    }
    return REMORA_OK;

err:
    rm_gate_forget(rm_engine_gate(ctx), ctx);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->watch_epfd >= 0)
        close(ctx->watch_epfd);
    if (ctx->worker_addr)
        ucp_worker_release_address(ctx->worker, ctx->worker_addr);
    if (ctx->worker)
        ucp_worker_destroy(ctx->worker);
    return status;
}

static remora_context_h context_alloc(void)
{
    remora_context_h ctx = calloc(1, sizeof(*ctx));

    if (ctx != NULL) {
        ctx->spin_us     = RM_DEFAULT_SPIN_US;
        ctx->spin_load   = 1;
        ctx->away_avg_ns = RM_HAND_OFF_AWAY_START_NS;
        ctx->epfd        = -1;
        ctx->watch_epfd  = -1;
    }
    return ctx;
}

remora_status_t rm_engine_lane_create(remora_context_h parent, remora_context_h *lane_p)
{
    remora_context_h ctx = context_alloc();
    remora_status_t status;

    if (ctx == NULL)
        return REMORA_ERR_NO_MEMORY;
    ctx->ucp     = parent->ucp;
    ctx->parent  = parent;
    ctx->spin_us = parent->spin_us;
    ctx->spin_load = parent->spin_load;
    ctx->gate    = NULL; /* the parent's (rm_engine_gate) */
    ctx->rma     = parent->rma;
    ctx->shm_ok  = parent->shm_ok;
    ctx->ucx_cuda = parent->ucx_cuda;
    ctx->connect_blocks = parent->connect_blocks;
    /* One UCX context: the same segments and protocol choice as the parent's. */
    ctx->tcp_tx_seg = parent->tcp_tx_seg;
    ctx->tcp_rx_seg = parent->tcp_rx_seg;
    ctx->rndv_min   = parent->rndv_min;
    ctx->hb_interval_ns  = parent->hb_interval_ns;
    ctx->peer_timeout_ns = parent->peer_timeout_ns;
    memcpy(ctx->host_id, parent->host_id, RM_HOST_ID_LEN);
    if ((status = start_worker(ctx)) != REMORA_OK) {
        free(ctx);
        return status;
    }
    *lane_p = ctx;
    return REMORA_OK;
}

static int rma_from_env(void)
{
    const char *v = getenv("REMORA_RMA");

    if (v == NULL || strcmp(v, "0") == 0)
        return REMORA_RMA_OFF;
    if (strcmp(v, "1") == 0)
        return REMORA_RMA_VERBS;
    if (strcmp(v, "unsafe") == 0)
        return REMORA_RMA_UNSAFE;
    rm_warn("REMORA_RMA=%s not understood (0, 1 or unsafe); RMA stays off", v);
    return REMORA_RMA_OFF;
}

static int context_has_shm(remora_context_h ctx);

static remora_status_t context_apply_params(remora_context_h ctx,
                                            const remora_context_params_t *p)
{
    uint64_t fm   = p ? p->field_mask : 0;
    unsigned hb   = (unsigned)rm_env_u64("REMORA_HEARTBEAT_MS", RM_DEFAULT_HEARTBEAT_MS, 0, RM_ENV_MS_MAX);
    unsigned dead = (unsigned)rm_env_u64("REMORA_PEER_TIMEOUT_MS", RM_DEFAULT_PEER_TIMEOUT_MS, 0,
                                         RM_ENV_MS_MAX);

    ctx->spin_us   = (unsigned)rm_env_u64("REMORA_SPIN_US", RM_DEFAULT_SPIN_US, 0, RM_ENV_MS_MAX);
    ctx->spin_load = rm_env_u64("REMORA_SPIN_LOAD", 1, 0, 1) != 0;
    ctx->rma       = rma_from_env();
    if (fm & REMORA_CONTEXT_FIELD_SPIN_US)
        ctx->spin_us = p->spin_us;
    if (fm & REMORA_CONTEXT_FIELD_HEARTBEAT) {
        hb   = p->heartbeat_ms;
        dead = p->peer_timeout_ms;
    }
    if (fm & REMORA_CONTEXT_FIELD_RMA) {
        if (p->rma < REMORA_RMA_OFF || p->rma > REMORA_RMA_UNSAFE)
            return REMORA_ERR_INVALID_PARAM;
        ctx->rma = p->rma;
    }
    if (hb != 0 && dead < 2 * hb) {
        rm_error("peer timeout %u ms is shorter than two heartbeats of %u ms", dead, hb);
        return REMORA_ERR_INVALID_PARAM;
    }
    ctx->hb_interval_ns  = (uint64_t)hb * 1000000u;
    ctx->peer_timeout_ns = (uint64_t)dead * 1000000u;
    return REMORA_OK;
}

static remora_status_t context_create(const remora_context_params_t *params,
                                      remora_context_h *context_p)
{
    remora_context_h ctx;
    const char *name = "remora", *bind_host = NULL;
    ucs_status_t ustatus;
    remora_status_t status;

    rm_log_init();
    if (context_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (sodium_init() < 0)
        return REMORA_ERR_UNSUPPORTED;
    if ((ctx = context_alloc()) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if ((status = context_apply_params(ctx, params)) != REMORA_OK) {
        free(ctx);
        return status;
    }
    if (params && (params->field_mask & REMORA_CONTEXT_FIELD_NAME) && params->name)
        name = params->name;
    if (params && (params->field_mask & REMORA_CONTEXT_FIELD_BIND_HOST))
        bind_host = params->bind_host;
    compute_host_id(ctx->host_id);

    if ((ustatus = create_ucp(ctx, name, bind_host)) != UCS_OK) {
        rm_error("ucp_init failed: %s", ucs_status_string(ustatus));
        free(ctx);
        return rm_status_from_ucs(ustatus);
    }
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    ctx->ucx_cuda = ucp_context_query(ctx->ucp, &ca) == UCS_OK &&
                    (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    ctx->gate     = rm_gate_create();
    if ((status = start_worker(ctx)) != REMORA_OK) {
        rm_gate_destroy(ctx->gate);
        ucp_cleanup(ctx->ucp);
        free(ctx);
        return status;
    }
    ctx->shm_ok = context_has_shm(ctx);
    *context_p = ctx;
    return REMORA_OK;
}

remora_status_t remora_context_create(const remora_context_params_t *params,
                                      remora_context_h *context_p)
{
    rm_log_sink_t *sink = NULL;
    remora_status_t status;

    /* First, so that the lines of this very call reach the callback too. */
    if (params && (params->field_mask & REMORA_CONTEXT_FIELD_LOG_CB) && params->log_cb &&
        (sink = rm_log_sink_push(params->log_cb, params->log_arg)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if ((status = context_create(params, context_p)) != REMORA_OK) {
        rm_log_sink_remove(sink);
        return status;
    }
    (*context_p)->log_sink = sink;
    return REMORA_OK;
}

void remora_context_destroy(remora_context_h ctx)
{
    rm_log_sink_t *sink;

    if (ctx == NULL)
        return;
    sink = ctx->log_sink;
    if (ctx->stream_fini)
        ctx->stream_fini(ctx);
    atomic_store(&ctx->stop, 1);
    ucp_worker_signal(ctx->worker);
    wake_progress_thread(ctx);
    pthread_join(ctx->thread, NULL);
    if (ctx->npeers)
        rm_warn("context destroyed with %zu endpoint(s) still open", ctx->npeers);
    rm_copyq_destroy(ctx->copyq); /* their owners drained them */
    rm_gate_forget(rm_engine_gate(ctx), ctx);
    ucp_worker_release_address(ctx->worker, ctx->worker_addr);
    ucp_worker_destroy(ctx->worker);
    if (ctx->parent == NULL) {
        ucp_cleanup(ctx->ucp);
        rm_gate_destroy(ctx->gate);
    }
    close(ctx->epfd);
    close(ctx->watch_epfd);
    pthread_cond_destroy(&ctx->wait_cv);
    pthread_cond_destroy(&ctx->prog_cv);
    pthread_mutex_destroy(&ctx->wait_mx);
    pthread_mutex_destroy(&ctx->defer_mx);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->peers);
    free(ctx);
    rm_log_sink_remove(sink);
}

/* ------------------------------------------------------------ query */

static void append_transport(char *out, size_t cap, const char *tl)
{
    size_t n = strlen(out), k = strlen(tl);
    char needle[40];

    snprintf(needle, sizeof(needle), "%s", tl);
    for (const char *p = out; (p = strstr(p, needle)) != NULL; p += k)
        if ((p == out || p[-1] == ',') && (p[k] == ',' || p[k] == '\0'))
            return; /* already listed */
    if (n + k + 2 > cap)
        return;
    if (n)
        out[n++] = ',';
    memcpy(out + n, tl, k + 1);
}

/* UCX 1.13 has no structured transport query; its context dump lists each
 * resource as "#   resource N :  md M  dev D  flags -- TRANSPORT/DEVICE". */
static void query_transports(remora_context_h ctx, char *out, size_t cap)
{
    char *dump = NULL, *line, *save = NULL;
    size_t dump_len = 0;
    FILE *f = open_memstream(&dump, &dump_len);

    out[0] = '\0';
    if (f == NULL)
        return;
    ucp_context_print_info(ctx->ucp, f);
    fclose(f);
    for (line = strtok_r(dump, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *res = strstr(line, "resource"), *dd = strstr(line, "-- "), *slash;
        if (res == NULL || dd == NULL)
            continue;
        dd += 3;
        if ((slash = strchr(dd, '/')) != NULL)
            *slash = '\0';
        append_transport(out, cap, dd);
    }
    free(dump);
}

/* The `map` path counts as shared memory: allowed where UCX may use shared
 * memory itself (so UCX_TLS=tcp means network only, as UCX users expect). */
static int context_has_shm(remora_context_h ctx)
{
    char tls[256];

    query_transports(ctx, tls, sizeof(tls));
    return strstr(tls, "posix") != NULL || strstr(tls, "sysv") != NULL ||
           strstr(tls, "xpmem") != NULL;
}

remora_status_t remora_context_query(remora_context_h ctx, remora_context_attr_t *attr)
{
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    uint64_t want;

    if (ctx == NULL || attr == NULL ||
        rm_fields_wanted(attr->field_mask, RM_CONTEXT_ATTR_FIELDS, RM_CONTEXT_ATTR_FIELDS,
                         &want) != REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    if (want & REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION)
        ucp_get_version(&attr->ucx_major, &attr->ucx_minor, &attr->ucx_release);
    if (want & REMORA_CONTEXT_ATTR_FIELD_UCX_MEM_TYPES) {
        attr->ucx_mem_types = 0;
        if (ucp_context_query(ctx->ucp, &ca) == UCS_OK) {
            if (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_HOST))
                attr->ucx_mem_types |= 1u << REMORA_MEM_HOST;
            if (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))
                attr->ucx_mem_types |= 1u << REMORA_MEM_CUDA;
        }
    }
    if (want & REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS)
        query_transports(ctx, attr->transports, sizeof(attr->transports));
    attr->field_mask = want;
    return REMORA_OK;
}
