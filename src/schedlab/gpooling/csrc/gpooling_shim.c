/* gPooling data plane: an LD_PRELOAD shim over the CUDA driver API (and NVML's memory query).
 *
 * gPooling (../shared/papers/14-gpooling.md) builds elastic virtual devices by intercepting the
 * driver, below every framework, so one mechanism works for any CUDA program. This shim
 *   - refuses an allocation that would take the virtual device past its memory quota with the
 *     driver's own CUDA_ERROR_OUT_OF_MEMORY, the real driver never asked; every allocation
 *     family is covered (linear, pitched, managed, stream-ordered and pool, arrays, 3D and
 *     mipmapped arrays, VMM cuMemCreate, the pre-3.2 unversioned entry points, contexts and
 *     modules; pinned host memory against its own limit);
 *   - reports the quota from cuMemGetInfo / cuDeviceTotalMem / nvmlDeviceGetMemoryInfo(_v2);
 *   - time-slices every launch family (cuLaunchKernel(Ex), cooperative, graph, legacy cuLaunch*)
 *     with a token bucket: share s buys s seconds of device time per second (burst s * window);
 *   - fails closed: no readable, valid limits (or a revoked device) refuses every allocation and
 *     launch, with one line on stderr saying why.
 *
 * Lookups: direct linking (the exported cu* functions interpose), dlsym and dlvsym (interposed;
 * any answer that is, by name or by address, an intercepted function becomes our wrapper, and
 * asking for dlsym/dlvsym/dlmopen themselves gets ours), cuGetProcAddress(_v2) (every version
 * and _ptsz flavour), dlmopen into a new namespace (loaded in the base namespace instead, where
 * the shim is). The shim's own access to the real dlsym/dlvsym/dlopen comes from a lookup in
 * libc's ELF symbol table, so it cannot be redirected by anything the application interposes.
 *
 * State: see gpooling_shared.h (read-only limits region, shared usage region). The real driver
 * is GPOOLING_REAL_LIBCUDA (default libcuda.so.1), NVML GPOOLING_REAL_LIBNVML.
 *
 * Charging model: a launch costs the wall time of the real call (the stand-in driver runs
 * kernels synchronously) plus the time synchronisation waits; on a real GPU launches are
 * asynchronous and their device time shows up at the next synchronisation.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpooling_cuda.h"
#include "gpooling_shared.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#define EXPORT __attribute__((visibility("default")))

/* ---- messages ----------------------------------------------------------------------------- */

static int said[16];
static void say_once(int topic, const char *fmt, ...) {
    if (__atomic_exchange_n(&said[topic], 1, __ATOMIC_RELAXED)) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t ignored = write(2, line, (size_t)n);
    (void)ignored;
}
enum { SAY_CLOSED, SAY_REVOKED, SAY_TABLE, SAY_DLMOPEN, SAY_IPC, SAY_IMPORT, SAY_POOL_IMPORT,
       SAY_GRAPH, SAY_EXPORT, SAY_DEEPBIND };

/* ---- the regions ---------------------------------------------------------------------------- */

static gpooling_usage *U;
static const gpooling_limits *L;
static gpooling_usage private_usage;
static gpooling_limits private_limits;
static char closed_reason[4400]; /* non-empty: fail closed */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void close_with(const char *fmt, const char *what, int err) {
    snprintf(closed_reason, sizeof closed_reason, fmt, what ? what : "",
             err ? strerror(err) : "");
}

static void *map_file(const char *path, int fd, size_t size, int writable) {
    int own = fd < 0;
    if (own) fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)size)
        p = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    else
        errno = EINVAL;
    int saved = errno;
    close(fd); /* the mapping stays; no descriptor is left for the job to find */
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

static int limits_valid(const gpooling_limits *l) {
    return l->magic == GPOOLING_LIMITS_MAGIC && l->version == GPOOLING_VERSION;
}

static void private_from_env(void) {
    const char *share = getenv("GPOOLING_COMPUTE_SHARE"), *mem = getenv("GPOOLING_MEMORY_LIMIT");
    const char *win = getenv("GPOOLING_WINDOW_MS");
    double s = share && *share ? strtod(share, NULL) : 1.0;
    if (!(s > 0.0)) s = 1.0;
    private_limits.magic = GPOOLING_LIMITS_MAGIC;
    private_limits.version = GPOOLING_VERSION;
    private_limits.memory_limit = mem && *mem ? strtoull(mem, NULL, 10) : 0;
    private_limits.share_ppm = s >= 1.0 ? 1000000ULL : (uint64_t)(s * 1e6 + 0.5);
    private_limits.window_ns = (win && *win ? strtoull(win, NULL, 10) : 100) * 1000000ULL;
    L = &private_limits;
}

static void private_usage_init(void) {
    private_usage.magic = GPOOLING_MAGIC;
    private_usage.version = GPOOLING_VERSION;
    private_usage.tokens_ns = (int64_t)(L->window_ns / 1000000ULL * L->share_ppm);
    private_usage.last_refill_ns = now_ns();
    U = &private_usage;
}

static int sealed(int fd) {
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
}

/* Where limits come from, in order: GPOOLING_LIMITS_FD (a sealed memfd inherited from the
 * agent), GPOOLING_LIMITS (a path; the agent gives /proc/<agent>/fd/<n> of the same memfd, which
 * a child that lost the descriptor to close_fds can still open read-only), "$GPOOLING_SHM.limits",
 * GPOOLING_MEMORY_LIMIT (private mode, this process only). GPOOLING_LIMITS_SEALED=1 (set by the
 * agent) accepts only a write-sealed memfd. Nothing, or anything unreadable or invalid: closed. */
static void init_regions(void) {
    const char *shm = getenv("GPOOLING_SHM"), *lpath = getenv("GPOOLING_LIMITS");
    const char *lfd = getenv("GPOOLING_LIMITS_FD"), *mem = getenv("GPOOLING_MEMORY_LIMIT");
    const char *need = getenv("GPOOLING_LIMITS_SEALED");
    int must_seal = need && *need == '1';
    char derived[4096];
    if (lfd && *lfd && sealed(atoi(lfd))) {
        L = map_file(NULL, atoi(lfd), GPOOLING_LIMITS_SIZE, 0);
        if (!L) { close_with("cannot map limits fd %s: %s", lfd, errno); return; }
    } else if ((lpath && *lpath) || (shm && *shm)) {
        if (!(lpath && *lpath)) {
            snprintf(derived, sizeof derived, "%s.limits", shm);
            lpath = derived;
        }
        int fd = open(lpath, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { close_with("cannot open limits region %s: %s", lpath, errno); return; }
        if (must_seal && !sealed(fd)) {
            close(fd);
            close_with("limits region %s is not a write-sealed memfd%s", lpath, 0);
            return;
        }
        L = map_file(NULL, fd, GPOOLING_LIMITS_SIZE, 0);
        if (!L) { close_with("cannot map limits region %s: %s", lpath, errno); return; }
    } else if (lfd && *lfd) {
        close_with("GPOOLING_LIMITS_FD=%s is not a write-sealed memfd%s", lfd, 0);
        return;
    } else if (mem && *mem && !must_seal) {
        private_from_env();
    } else {
        close_with("no virtual device configured (GPOOLING_SHM, GPOOLING_LIMITS or "
                   "GPOOLING_MEMORY_LIMIT)%s%s", "", 0);
        return;
    }
    if (!limits_valid(L)) {
        close_with("limits region %s is not a gPooling limits region (bad magic/version)%s",
                   lpath ? lpath : lfd, 0);
        L = NULL;
        return;
    }
    if (shm && *shm) {
        U = map_file(shm, -1, sizeof(gpooling_usage), 1);
        if (!U) { close_with("cannot open usage region %s: %s", shm, errno); return; }
        if (U->magic != GPOOLING_MAGIC || U->version != GPOOLING_VERSION) {
            close_with("usage region %s is not a gPooling usage region (bad magic/version)%s",
                       shm, 0);
            U = NULL;
        }
    } else {
        private_usage_init();
    }
}

static void init_all(void) { init_regions(); }

/* 1 when calls may go ahead; else says why once and counts the refusal */
static int usable(void) {
    pthread_once(&init_once, init_all);
    if (closed_reason[0]) {
        say_once(SAY_CLOSED, "gpooling: %s; refusing every allocation and launch (fail closed)",
                 closed_reason);
        return 0;
    }
    if (__atomic_load_n(&L->revoked, __ATOMIC_ACQUIRE)) {
        say_once(SAY_REVOKED, "gpooling: virtual device %.64s was released by its owner; "
                 "refusing every allocation and launch", L->vdev[0] ? L->vdev : "(unnamed)");
        __atomic_fetch_add(&U->denied_calls, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

/* ---- the usage region's lock and process table ------------------------------------------- */

/* getpid() is a system call since glibc 2.25; the pid only changes at fork (reset there) */
static uint64_t cached_pid;
static inline uint64_t self_pid(void) {
    uint64_t pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (!pid) {
        pid = (uint64_t)getpid();
        __atomic_store_n(&cached_pid, pid, __ATOMIC_RELAXED);
    }
    return pid;
}

/* The lock word holds the holder's pid. Every change under it is a single aligned store, so the
 * region is consistent at every instruction and a holder that was SIGKILLed can be taken over. */
static void lock_usage(gpooling_usage *u) {
    uint64_t me = self_pid();
    for (unsigned spins = 1;; spins++) {
        uint64_t seen = 0;
        if (__atomic_compare_exchange_n(&u->lock, &seen, me, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return;
        if (!(spins & 255) && seen && kill((pid_t)seen, 0) != 0 && errno == ESRCH &&
            __atomic_compare_exchange_n(&u->lock, &seen, me, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return;
        sched_yield();
    }
}
static void unlock_usage(gpooling_usage *u) { __atomic_store_n(&u->lock, 0, __ATOMIC_RELEASE); }

static int my_slot = -1;
static uint64_t my_bytes, my_host; /* the truth about this process, in private memory */

static void mirror_locked(gpooling_usage *u) {
    uint64_t dev = 0, host = 0, live = 0, high = u->slots_high;
    if (high > GPOOLING_PROCS) high = GPOOLING_PROCS;
    for (uint64_t i = 0; i < high; i++) {
        if (!u->procs[i].pid) continue;
        dev += u->procs[i].bytes;
        host += u->procs[i].host;
        live++;
    }
    while (high && !u->procs[high - 1].pid) high--;
    u->slots_high = high;
    u->memory_used = dev;
    u->host_used = host;
    u->live = live;
    if (dev > u->memory_peak) u->memory_peak = dev;
    if (host > u->host_peak) u->host_peak = host;
}

/* give back what dead processes held (a SIGKILLed job runs no destructor) */
static uint64_t reap_locked(gpooling_usage *u) {
    uint64_t total = 0, high = u->slots_high;
    if (high > GPOOLING_PROCS) high = GPOOLING_PROCS;
    for (uint64_t i = 0; i < high; i++) {
        uint64_t pid = u->procs[i].pid;
        if (!pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        total += u->procs[i].bytes;
        u->procs[i].bytes = 0;
        u->procs[i].host = 0;
        u->procs[i].pid = 0;
        u->reaped_procs++;
    }
    u->reaped_bytes += total;
    mirror_locked(u);
    return total;
}

/* this process's slot, taking one (and re-asserting what it holds) if needed; -1 if full */
static int slot_locked(gpooling_usage *u) {
    uint64_t me = self_pid();
    if (my_slot >= 0 && u->procs[my_slot].pid == me) {
        if (u->procs[my_slot].bytes != my_bytes || u->procs[my_slot].host != my_host) {
            u->tampered++;
            u->procs[my_slot].bytes = my_bytes;
            u->procs[my_slot].host = my_host;
        }
        return my_slot;
    }
    if (my_slot >= 0) u->tampered++; /* someone cleared our slot: take one again */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < GPOOLING_PROCS; i++) {
            uint64_t pid = u->procs[i].pid;
            if (pid == me && my_slot < 0) {
                /* left by this pid's image before exec(): its memory went with that image */
                u->reaped_bytes += u->procs[i].bytes;
                u->procs[i].pid = 0;
                pid = 0;
            }
            if (pid) continue;
            u->procs[i].bytes = my_bytes;
            u->procs[i].host = my_host;
            u->procs[i].pid = me;
            if ((uint64_t)i >= u->slots_high) u->slots_high = (uint64_t)i + 1;
            u->attached++;
            my_slot = i;
            return i;
        }
        reap_locked(u);
    }
    return -1;
}

static uint64_t sum_locked(gpooling_usage *u, int host) {
    uint64_t total = 0, high = u->slots_high;
    if (high > GPOOLING_PROCS) high = GPOOLING_PROCS;
    for (uint64_t i = 0; i < high; i++)
        if (u->procs[i].pid) total += host ? u->procs[i].host : u->procs[i].bytes;
    return total;
}

/* for the agent (loaded with ctypes): reap the usage region at path; bytes given back or -1 */
EXPORT long long gpooling_reap(const char *path) {
    gpooling_usage *u = map_file(path, -1, sizeof(gpooling_usage), 1);
    if (!u) return -1;
    long long bytes = -1;
    if (u->magic == GPOOLING_MAGIC && u->version == GPOOLING_VERSION) {
        lock_usage(u);
        bytes = (long long)reap_locked(u);
        unlock_usage(u);
    }
    munmap(u, sizeof(gpooling_usage));
    return bytes;
}

/* ---- quota accounting ------------------------------------------------------------------- */

enum { DEVICE = 0, HOST = 1 };

static void patch_loaded(void);
/* patch_loaded, at most once per tick of the coarse clock (a few ms): asking the loader costs
 * ~0.1 us, more than the rest of an allocation's bookkeeping */
static void patch_soon(void) {
    static uint64_t last_tick;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t tick = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    if (__atomic_exchange_n(&last_tick, tick, __ATOMIC_RELAXED) != tick) patch_loaded();
}
static int reserve(int kind, uint64_t bytes) {
    if (!usable()) return 0;
    patch_soon(); /* objects some loader we did not see brought in */
    gpooling_usage *u = U;
    __atomic_fetch_add(&u->alloc_calls, 1, __ATOMIC_RELAXED);
    uint64_t limit = kind == HOST ? __atomic_load_n(&L->host_limit, __ATOMIC_ACQUIRE)
                                  : __atomic_load_n(&L->memory_limit, __ATOMIC_ACQUIRE);
    lock_usage(u);
    int slot = slot_locked(u);
    if (slot < 0) {
        unlock_usage(u);
        say_once(SAY_TABLE, "gpooling: %d processes already attached to this virtual device; "
                 "refusing this process's allocations", GPOOLING_PROCS);
        __atomic_fetch_add(&u->oom_rejections, 1, __ATOMIC_RELAXED);
        return 0;
    }
    for (int attempt = 0;; attempt++) {
        uint64_t used = sum_locked(u, kind);
        if (!limit || (bytes <= limit && used <= limit - bytes)) break;
        if (attempt == 0 && reap_locked(u)) continue; /* a dead process may be holding it */
        unlock_usage(u);
        __atomic_fetch_add(&u->oom_rejections, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (kind == HOST) u->procs[slot].host = (my_host += bytes);
    else u->procs[slot].bytes = (my_bytes += bytes);
    mirror_locked(u);
    unlock_usage(u);
    return 1;
}

static void unreserve(int kind, uint64_t bytes) {
    if (!bytes || !U) return;
    gpooling_usage *u = U;
    lock_usage(u);
    uint64_t *mine = kind == HOST ? &my_host : &my_bytes;
    *mine -= bytes < *mine ? bytes : *mine;
    int slot = slot_locked(u);
    if (slot >= 0) {
        u->procs[slot].bytes = my_bytes;
        u->procs[slot].host = my_host;
    }
    mirror_locked(u);
    unlock_usage(u);
}

/* ---- per-process allocation table: pointer or handle -> (bytes, kind) ---------------------- */

typedef struct entry { uint64_t key; uint64_t size; uint64_t kind; } entry;
static entry *table;
static size_t table_cap, table_len;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t hash_key(uint64_t key, size_t cap) {
    key ^= key >> 33; key *= 0xff51afd7ed558ccdULL; key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static void table_put_locked(uint64_t key, uint64_t size, uint64_t kind);

static int table_grow_locked(void) {
    size_t old_cap = table_cap;
    entry *old = table;
    size_t cap = old_cap ? old_cap * 2 : 1024;
    entry *fresh = calloc(cap, sizeof(entry));
    if (!fresh) return -1;
    table = fresh; table_cap = cap; table_len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) table_put_locked(old[i].key, old[i].size, old[i].kind);
    free(old);
    return 0;
}

static void table_put_locked(uint64_t key, uint64_t size, uint64_t kind) {
    if ((table_len + 1) * 2 > table_cap && table_grow_locked() != 0) return;
    size_t i = hash_key(key, table_cap);
    while (table[i].key && table[i].key != key) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) table_len++;
    table[i].key = key; table[i].size = size; table[i].kind = kind;
}

/* removes key; its size (0 when unknown) and kind; backward shift keeps probe chains intact */
static uint64_t table_take_locked(uint64_t key, uint64_t *kind) {
    if (!table_cap || !key) return 0;
    size_t i = hash_key(key, table_cap);
    while (table[i].key && table[i].key != key) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) return 0;
    uint64_t size = table[i].size;
    *kind = table[i].kind;
    size_t hole = i;
    for (size_t j = (i + 1) & (table_cap - 1); table[j].key; j = (j + 1) & (table_cap - 1)) {
        size_t home = hash_key(table[j].key, table_cap);
        int movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) { table[hole] = table[j]; hole = j; }
    }
    table[hole].key = 0; table[hole].size = 0;
    table_len--;
    return size;
}

static void remember(uint64_t key, uint64_t bytes, int kind) {
    pthread_mutex_lock(&table_lock);
    table_put_locked(key, bytes, (uint64_t)kind);
    pthread_mutex_unlock(&table_lock);
}

static void forget(uint64_t key) {
    uint64_t kind = DEVICE;
    pthread_mutex_lock(&table_lock);
    uint64_t bytes = table_take_locked(key, &kind);
    pthread_mutex_unlock(&table_lock);
    if (U) __atomic_fetch_add(&U->free_calls, 1, __ATOMIC_RELAXED);
    unreserve((int)kind, bytes);
}

/* exit(): the driver frees a dead context's memory; so does the quota (only this process's) */
__attribute__((destructor)) static void detach(void) {
    if (!U || U == &private_usage || my_slot < 0) return;
    lock_usage(U);
    if (U->procs[my_slot].pid == self_pid()) {
        U->procs[my_slot].bytes = 0;
        U->procs[my_slot].host = 0;
        U->procs[my_slot].pid = 0;
    }
    mirror_locked(U);
    unlock_usage(U);
    my_slot = -1;
}

/* fork(): the child holds no device memory of its own (CUDA contexts do not survive fork), so
 * it starts with empty books; its exit must not give back the parent's bytes. */
static void after_fork_child(void) {
    cached_pid = (uint64_t)getpid();
    my_slot = -1;
    my_bytes = my_host = 0;
    table = NULL; /* the parent's copy; freeing it here is not async-signal-safe */
    table_cap = table_len = 0;
    pthread_mutex_init(&table_lock, NULL);
    if (U == &private_usage) {
        memset(private_usage.procs, 0, sizeof private_usage.procs);
        private_usage.lock = 0;
        private_usage.slots_high = private_usage.memory_used = private_usage.live = 0;
    }
}

/* ---- token-bucket time slicing ------------------------------------------------------------ */

static int throttled(void) {
    return __atomic_load_n(&L->share_ppm, __ATOMIC_RELAXED) < 1000000ULL;
}

/* waits until the bucket is out of debt; refills at share ns of device time per ns */
static void acquire_tokens(gpooling_usage *u) {
    for (;;) {
        uint64_t share = __atomic_load_n(&L->share_ppm, __ATOMIC_RELAXED);
        uint64_t window = __atomic_load_n(&L->window_ns, __ATOMIC_RELAXED);
        if (!share) share = 1;
        if (!window) window = 100000000ULL;
        lock_usage(u);
        uint64_t t = now_ns();
        int64_t cap = (int64_t)(window / 1000000ULL * share);
        uint64_t last = u->last_refill_ns > t ? t : u->last_refill_ns;
        int64_t gained = (int64_t)((double)(t - last) / 1000000.0 * (double)share);
        int64_t tokens = u->tokens_ns > cap ? cap : u->tokens_ns;
        u->tokens_ns = tokens + gained > cap ? cap : tokens + gained;
        u->last_refill_ns = t;
        int64_t debt = u->tokens_ns;
        unlock_usage(u);
        if (debt >= 0) return;
        uint64_t wait = (uint64_t)((double)(-debt) * 1e6 / (double)share);
        struct timespec ts = {(time_t)(wait / 1000000000ULL), (long)(wait % 1000000000ULL)};
        nanosleep(&ts, NULL);
        __atomic_fetch_add(&u->throttle_ns, wait, __ATOMIC_RELAXED);
    }
}

static void charge(gpooling_usage *u, uint64_t cost) {
    __atomic_fetch_add(&u->busy_ns, cost, __ATOMIC_RELAXED);
    if (!throttled()) return;
    lock_usage(u);
    u->tokens_ns -= (int64_t)cost;
    unlock_usage(u);
}

/* ---- the real libc loader functions, from libc's own symbol table ------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

struct elf_query { const char *name; void *found; };

static uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

static void *dyn_ptr(ElfW(Addr) base, ElfW(Addr) p) { return (void *)(p < base ? base + p : p); }

static int find_in_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct elf_query *q = data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libc.so")) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gh = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB) symtab = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_STRTAB) strtab = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_GNU_HASH) gh = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr);
    }
    if (!symtab || !strtab || !gh) return 0;
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gh + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t h = gnu_hash(q->name), i = buckets[h % nbuckets];
    if (i < symoffset) return 0;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        if ((ch | 1) == (h | 1) && !strcmp(strtab + symtab[i].st_name, q->name) &&
            symtab[i].st_value && symtab[i].st_shndx != SHN_UNDEF) {
            q->found = (void *)(info->dlpi_addr + symtab[i].st_value);
            return 1;
        }
        if (ch & 1) return 0;
    }
}

static void *libc_symbol(const char *name) {
    struct elf_query q = {name, NULL};
    dl_iterate_phdr(find_in_object, &q);
    return q.found;
}

static dlsym_fn real_dlsym_fn;
static dlvsym_fn real_dlvsym_fn;
static dlopen_fn real_dlopen_fn;
static dlmopen_fn real_dlmopen_fn;
static pthread_once_t libc_once = PTHREAD_ONCE_INIT;
static void resolve_libc(void) {
    real_dlsym_fn = (dlsym_fn)libc_symbol("dlsym");
    real_dlvsym_fn = (dlvsym_fn)libc_symbol("dlvsym");
    real_dlopen_fn = (dlopen_fn)libc_symbol("dlopen");
    real_dlmopen_fn = (dlmopen_fn)libc_symbol("dlmopen");
}
static void libc_ready(void) { pthread_once(&libc_once, resolve_libc); }

/* ---- the hooks table ---------------------------------------------------------------------- */

enum { LIB_CUDA, LIB_NVML };

/* name, base name cuGetProcAddress is asked for, first CUDA version it is the default for,
 * _ptsz flavour, library */
#define HOOKS(X)                                                                               \
    X(cuMemAlloc, "cuMemAlloc", 0, 0, LIB_CUDA)                                                \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, LIB_CUDA)                                          \
    X(cuMemAllocPitch, "cuMemAllocPitch", 0, 0, LIB_CUDA)                                      \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, LIB_CUDA)                                \
    X(cuMemAllocManaged, "cuMemAllocManaged", 0, 0, LIB_CUDA)                                  \
    X(cuMemAllocAsync, "cuMemAllocAsync", 0, 0, LIB_CUDA)                                      \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 0, 1, LIB_CUDA)                                 \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0, 0, LIB_CUDA)                      \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 0, 1, LIB_CUDA)                 \
    X(cuMemFree, "cuMemFree", 0, 0, LIB_CUDA)                                                  \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, LIB_CUDA)                                            \
    X(cuMemFreeAsync, "cuMemFreeAsync", 0, 0, LIB_CUDA)                                        \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 0, 1, LIB_CUDA)                                   \
    X(cuMemCreate, "cuMemCreate", 0, 0, LIB_CUDA)                                              \
    X(cuMemRelease, "cuMemRelease", 0, 0, LIB_CUDA)                                            \
    X(cuMemMap, "cuMemMap", 0, 0, LIB_CUDA)                                                    \
    X(cuMemUnmap, "cuMemUnmap", 0, 0, LIB_CUDA)                                                \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 0, 0, LIB_CUDA)                                      \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 0, 0, LIB_CUDA)                                    \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 0, 0, LIB_CUDA)              \
    X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 0, 0, LIB_CUDA)                                \
    X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, 0, LIB_CUDA)                         \
    X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 0, 0, LIB_CUDA)        \
    X(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle", 0, 0, LIB_CUDA)\
    X(cuMemPoolImportPointer, "cuMemPoolImportPointer", 0, 0, LIB_CUDA)                        \
    X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 0, 0, LIB_CUDA)                        \
    X(cuGraphAddNode, "cuGraphAddNode", 0, 0, LIB_CUDA)                                        \
    X(cuGraphAddNode_v2, "cuGraphAddNode", 12030, 0, LIB_CUDA)                                 \
    X(cuGetExportTable, "cuGetExportTable", 0, 0, LIB_CUDA)                                    \
    X(cuArrayCreate, "cuArrayCreate", 0, 0, LIB_CUDA)                                          \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0, LIB_CUDA)                                    \
    X(cuArray3DCreate, "cuArray3DCreate", 0, 0, LIB_CUDA)                                      \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0, LIB_CUDA)                                \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 0, 0, LIB_CUDA)                        \
    X(cuArrayDestroy, "cuArrayDestroy", 0, 0, LIB_CUDA)                                        \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 0, 0, LIB_CUDA)                      \
    X(cuMemAllocHost, "cuMemAllocHost", 0, 0, LIB_CUDA)                                        \
    X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0, LIB_CUDA)                                  \
    X(cuMemHostAlloc, "cuMemHostAlloc", 0, 0, LIB_CUDA)                                        \
    X(cuMemFreeHost, "cuMemFreeHost", 0, 0, LIB_CUDA)                                          \
    X(cuMemGetInfo, "cuMemGetInfo", 0, 0, LIB_CUDA)                                            \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, LIB_CUDA)                                      \
    X(cuDeviceTotalMem, "cuDeviceTotalMem", 0, 0, LIB_CUDA)                                    \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, LIB_CUDA)                              \
    X(cuCtxCreate, "cuCtxCreate", 0, 0, LIB_CUDA)                                              \
    X(cuCtxCreate_v2, "cuCtxCreate", 3020, 0, LIB_CUDA)                                        \
    X(cuCtxCreate_v3, "cuCtxCreate", 11040, 0, LIB_CUDA)                                       \
    X(cuCtxCreate_v4, "cuCtxCreate", 12050, 0, LIB_CUDA)                                       \
    X(cuCtxDestroy, "cuCtxDestroy", 0, 0, LIB_CUDA)                                            \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0, LIB_CUDA)                                      \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0, 0, LIB_CUDA)                    \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 0, 0, LIB_CUDA)                  \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0, LIB_CUDA)           \
    X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 0, 0, LIB_CUDA)                      \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0, LIB_CUDA)               \
    X(cuModuleLoad, "cuModuleLoad", 0, 0, LIB_CUDA)                                            \
    X(cuModuleLoadData, "cuModuleLoadData", 0, 0, LIB_CUDA)                                    \
    X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 0, 0, LIB_CUDA)                                \
    X(cuModuleLoadFatBinary, "cuModuleLoadFatBinary", 0, 0, LIB_CUDA)                          \
    X(cuModuleUnload, "cuModuleUnload", 0, 0, LIB_CUDA)                                        \
    X(cuLibraryLoadData, "cuLibraryLoadData", 0, 0, LIB_CUDA)                                  \
    X(cuLibraryLoadFromFile, "cuLibraryLoadFromFile", 0, 0, LIB_CUDA)                          \
    X(cuLibraryUnload, "cuLibraryUnload", 0, 0, LIB_CUDA)                                      \
    X(cuLaunchKernel, "cuLaunchKernel", 0, 0, LIB_CUDA)                                        \
    X(cuLaunchKernel_ptsz, "cuLaunchKernel", 0, 1, LIB_CUDA)                                   \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, 0, LIB_CUDA)                                    \
    X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 0, 1, LIB_CUDA)                               \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, 0, LIB_CUDA)                  \
    X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 0, 1, LIB_CUDA)             \
    X(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice", 0, 0,      \
      LIB_CUDA)                                                                                \
    X(cuGraphLaunch, "cuGraphLaunch", 0, 0, LIB_CUDA)                                          \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch", 0, 1, LIB_CUDA)                                     \
    X(cuLaunch, "cuLaunch", 0, 0, LIB_CUDA)                                                    \
    X(cuLaunchGrid, "cuLaunchGrid", 0, 0, LIB_CUDA)                                            \
    X(cuLaunchGridAsync, "cuLaunchGridAsync", 0, 0, LIB_CUDA)                                  \
    X(cuCtxSynchronize, "cuCtxSynchronize", 0, 0, LIB_CUDA)                                    \
    X(cuStreamSynchronize, "cuStreamSynchronize", 0, 0, LIB_CUDA)                              \
    X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 0, 1, LIB_CUDA)                         \
    X(cuEventSynchronize, "cuEventSynchronize", 0, 0, LIB_CUDA)                                \
    X(cuGetProcAddress, "cuGetProcAddress", 0, 0, LIB_CUDA)                                    \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, LIB_CUDA)                             \
    X(nvmlDeviceGetMemoryInfo, NULL, 0, 0, LIB_NVML)                                           \
    X(nvmlDeviceGetMemoryInfo_v2, NULL, 0, 0, LIB_NVML)

#define AS_ENUM(n, b, v, p, l) H_##n,
enum { HOOKS(AS_ENUM) H_COUNT };

typedef struct hook {
    const char *name, *base;
    int min_version, ptsz, lib;
    void *wrapper, *real;
} hook;
static hook hooks[H_COUNT];
static void *libs[2];
static pthread_once_t reals_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT;

/* resolve every hook of one library from the real library (NVML only when first needed) */
static void resolve_lib(int which) {
    libc_ready();
    const char *env = getenv(which == LIB_CUDA ? "GPOOLING_REAL_LIBCUDA" : "GPOOLING_REAL_LIBNVML");
    const char *fallback = which == LIB_CUDA ? "libcuda.so.1" : "libnvidia-ml.so.1";
    if (real_dlopen_fn)
        libs[which] = real_dlopen_fn(env && *env ? env : fallback, RTLD_NOW | RTLD_LOCAL);
    for (int i = 0; i < H_COUNT; i++) {
        if (hooks[i].lib != which) continue;
        void *f = libs[which] && real_dlsym_fn ? real_dlsym_fn(libs[which], hooks[i].name) : NULL;
        void *expected = NULL;
        if (f && f != hooks[i].wrapper)
            __atomic_compare_exchange_n(&hooks[i].real, &expected, f, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE);
    }
}
static void open_libs(void) { resolve_lib(LIB_CUDA); }
static void open_nvml(void) { resolve_lib(LIB_NVML); }

static void *real_of(int id) {
    pthread_once(hooks[id].lib == LIB_NVML ? &nvml_once : &reals_once,
                 hooks[id].lib == LIB_NVML ? open_nvml : open_libs);
    return __atomic_load_n(&hooks[id].real, __ATOMIC_ACQUIRE);
}

#define REAL(n, type) ((type)real_of(H_##n))
#define NOT_FOUND_IF_NULL(f) \
    if (!(f)) return CUDA_ERROR_NOT_FOUND

/* ---- memory wrappers ----------------------------------------------------------------------- */

/* the common shape: reserve, ask the driver, remember or undo */
#define GUARDED(kind, bytes, key_expr, call)                                                   \
    do {                                                                                       \
        uint64_t want_ = (bytes);                                                              \
        if (!reserve(kind, want_)) return CUDA_ERROR_OUT_OF_MEMORY;                            \
        CUresult rc_ = (call);                                                                 \
        if (rc_ == CUDA_SUCCESS) remember((uint64_t)(key_expr), want_, kind);                  \
        else unreserve(kind, want_);                                                           \
        return rc_;                                                                            \
    } while (0)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    alloc_fn f = REAL(cuMemAlloc_v2, alloc_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(DEVICE, bytes, *dptr, f(dptr, bytes));
}

typedef CUresult (*alloc_v1_fn)(CUdeviceptr_v1 *, unsigned int);
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes) {
    alloc_v1_fn f = REAL(cuMemAlloc, alloc_v1_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(DEVICE, bytes, *dptr, f(dptr, bytes));
}

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned int);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    managed_fn f = REAL(cuMemAllocManaged, managed_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(DEVICE, bytes, *dptr, f(dptr, bytes, flags));
}

/* stream-ordered allocations are charged by what their pool holds (see "pools" below) */
static int pool_accounted(CUmemoryPool *pool);
static int pool_admit(CUmemoryPool pool, uint64_t bytes, uint64_t *want);
static CUresult pool_after(CUresult rc, CUmemoryPool pool, uint64_t want, CUdeviceptr dptr);
static int pool_freed(uint64_t dptr);
static void pools_settle_all(void);

typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
static CUresult alloc_async(async_fn f, CUdeviceptr *dptr, size_t bytes, CUstream s) {
    NOT_FOUND_IF_NULL(f);
    CUmemoryPool pool = NULL;
    uint64_t want = 0;
    if (!pool_accounted(&pool)) GUARDED(DEVICE, bytes, *dptr, f(dptr, bytes, s));
    if (!pool_admit(pool, bytes, &want)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, bytes, s);
    return pool_after(rc, pool, want, rc ? 0 : *dptr);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) {
    return alloc_async(REAL(cuMemAllocAsync, async_fn), d, n, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) {
    return alloc_async(REAL(cuMemAllocAsync_ptsz, async_fn), d, n, s);
}

typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static CUresult alloc_pool(pool_fn f, CUdeviceptr *dptr, size_t bytes, CUmemoryPool p,
                           CUstream s) {
    NOT_FOUND_IF_NULL(f);
    uint64_t want = 0;
    if (!p || !pool_accounted(&p)) GUARDED(DEVICE, bytes, *dptr, f(dptr, bytes, p, s));
    if (!pool_admit(p, bytes, &want)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, bytes, p, s);
    return pool_after(rc, p, want, rc ? 0 : *dptr);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) {
    return alloc_pool(REAL(cuMemAllocFromPoolAsync, pool_fn), d, n, p, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p,
                                             CUstream s) {
    return alloc_pool(REAL(cuMemAllocFromPoolAsync_ptsz, pool_fn), d, n, p, s);
}

/* pitched: reserve width x height, then settle on what the driver's padding really took */
static CUresult settle_pitch(CUresult rc, uint64_t key, uint64_t guess, uint64_t actual,
                             CUresult (*undo)(uint64_t)) {
    if (rc != CUDA_SUCCESS) { unreserve(DEVICE, guess); return rc; }
    if (actual > guess && !reserve(DEVICE, actual - guess)) { /* padding went past the quota */
        undo(key);
        unreserve(DEVICE, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess) unreserve(DEVICE, guess - actual);
    remember(key, actual, DEVICE);
    return rc;
}
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*free_v1_fn)(CUdeviceptr_v1);
static CUresult undo_v2(uint64_t key) {
    free_fn f = REAL(cuMemFree_v2, free_fn);
    return f ? f(key) : CUDA_ERROR_NOT_FOUND;
}
static CUresult undo_v1(uint64_t key) {
    free_v1_fn f = REAL(cuMemFree, free_v1_fn);
    return f ? f((CUdeviceptr_v1)key) : CUDA_ERROR_NOT_FOUND;
}

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int element) {
    pitch_fn f = REAL(cuMemAllocPitch_v2, pitch_fn);
    NOT_FOUND_IF_NULL(f);
    uint64_t guess;
    if (__builtin_mul_overflow((uint64_t)width, (uint64_t)height, &guess)) guess = UINT64_MAX;
    if (!reserve(DEVICE, guess)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, pitch, width, height, element);
    return settle_pitch(rc, rc ? 0 : *dptr, guess, rc ? 0 : (uint64_t)*pitch * height, undo_v2);
}

typedef CUresult (*pitch_v1_fn)(CUdeviceptr_v1 *, unsigned int *, unsigned int, unsigned int,
                                unsigned int);
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                                unsigned int height, unsigned int element) {
    pitch_v1_fn f = REAL(cuMemAllocPitch, pitch_v1_fn);
    NOT_FOUND_IF_NULL(f);
    uint64_t guess = (uint64_t)width * height;
    if (!reserve(DEVICE, guess)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, pitch, width, height, element);
    return settle_pitch(rc, rc ? 0 : *dptr, guess, rc ? 0 : (uint64_t)*pitch * height, undo_v1);
}

/* cuMemFree synchronises the device (as cudaFree does): pools may have trimmed */
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    free_fn f = REAL(cuMemFree_v2, free_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(dptr);
    if (rc == CUDA_SUCCESS && !pool_freed(dptr)) forget(dptr);
    if (rc == CUDA_SUCCESS) pools_settle_all();
    return rc;
}
EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    free_v1_fn f = REAL(cuMemFree, free_v1_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(dptr);
    if (rc == CUDA_SUCCESS && !pool_freed(dptr)) forget(dptr);
    if (rc == CUDA_SUCCESS) pools_settle_all();
    return rc;
}

typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
static CUresult free_async(free_async_fn f, CUdeviceptr dptr, CUstream stream) {
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(dptr, stream);
    if (rc == CUDA_SUCCESS && !pool_freed(dptr)) forget(dptr);
    return rc;
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) {
    return free_async(REAL(cuMemFreeAsync, free_async_fn), d, s);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) {
    return free_async(REAL(cuMemFreeAsync_ptsz, free_async_fn), d, s);
}

/* virtual-memory management (NCCL, PyTorch expandable segments). Physical memory is created by
 * cuMemCreate, so that is where the quota is charged; but it lives on while anything refers to
 * it: the handle (and every handle cuMemRetainAllocationHandle gives out) until cuMemRelease,
 * each mapping until cuMemUnmap. The CUDA samples and NCCL release the handle right after
 * mapping it, so crediting the quota at cuMemRelease would let a job hold mapped memory past its
 * quota. The quota is credited only when the last reference goes.
 *
 * Books (process-private, one lock): allocation handle -> size and references; mapped address
 * -> (mapping size, handle); a retained handle the driver spells differently -> the original. */
typedef struct vref { uint64_t key, size, other; int64_t refs; } vref;
typedef struct vtab { vref *e; size_t cap, len; } vtab;
static vtab vm_allocs, vm_maps, vm_alias;
static vtab pool_books; /* pool -> size: bytes charged, refs: live allocations, other: destroyed */
static vtab pool_ptrs;  /* pointer -> other: its pool (see "pools" below) */
static pthread_mutex_t vm_lock = PTHREAD_MUTEX_INITIALIZER;

static vref *vt_find(vtab *t, uint64_t key) {
    if (!t->cap || !key) return NULL;
    for (size_t i = hash_key(key, t->cap); t->e[i].key; i = (i + 1) & (t->cap - 1))
        if (t->e[i].key == key) return &t->e[i];
    return NULL;
}
static vref *vt_put(vtab *t, uint64_t key) {
    if ((t->len + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        vref *fresh = calloc(cap, sizeof(vref)), *old = t->e;
        if (!fresh) return NULL;
        size_t old_cap = t->cap;
        t->e = fresh; t->cap = cap; t->len = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].key) *vt_put(t, old[i].key) = old[i];
        free(old);
    }
    size_t i = hash_key(key, t->cap);
    while (t->e[i].key && t->e[i].key != key) i = (i + 1) & (t->cap - 1);
    if (!t->e[i].key) { t->len++; t->e[i] = (vref){key, 0, 0, 0}; }
    return &t->e[i];
}
static void vt_drop(vtab *t, uint64_t key) {
    vref *r = vt_find(t, key);
    if (!r) return;
    size_t hole = (size_t)(r - t->e);
    for (size_t j = (hole + 1) & (t->cap - 1); t->e[j].key; j = (j + 1) & (t->cap - 1)) {
        size_t home = hash_key(t->e[j].key, t->cap);
        int movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) { t->e[hole] = t->e[j]; hole = j; }
    }
    t->e[hole] = (vref){0, 0, 0, 0};
    t->len--;
}

/* one reference fewer on the allocation behind handle; the bytes to credit (0 while alive) */
static uint64_t vm_unref_locked(uint64_t handle) {
    vref *a = vt_find(&vm_allocs, handle);
    if (!a) return 0;
    if (--a->refs > 0) return 0;
    uint64_t bytes = a->size;
    vt_drop(&vm_allocs, handle);
    return bytes;
}
/* fork(): the child holds no device memory (see after_fork_child); nor do its books */
static void vm_after_fork(void) {
    vm_allocs = vm_maps = vm_alias = pool_books = pool_ptrs = (vtab){NULL, 0, 0};
    pthread_mutex_init(&vm_lock, NULL);
}
static void vm_credit(uint64_t bytes) {
    if (!bytes) return;
    if (U) __atomic_fetch_add(&U->free_calls, 1, __ATOMIC_RELAXED);
    unreserve(DEVICE, bytes);
}

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const void *,
                              unsigned long long);
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes, const void *prop,
                            unsigned long long flags) {
    create_fn f = REAL(cuMemCreate, create_fn);
    NOT_FOUND_IF_NULL(f);
    if (!reserve(DEVICE, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(handle, bytes, prop, flags);
    if (rc != CUDA_SUCCESS) { unreserve(DEVICE, bytes); return rc; }
    pthread_mutex_lock(&vm_lock);
    vref *a = vt_put(&vm_allocs, *handle);
    if (a) { a->size = bytes; a->refs = 1; }
    pthread_mutex_unlock(&vm_lock);
    return rc;
}

typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    release_fn f = REAL(cuMemRelease, release_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(handle);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&vm_lock);
    uint64_t target = handle;
    vref *alias = vt_find(&vm_alias, handle);
    if (alias) {
        target = alias->other;
        if (--alias->refs <= 0) vt_drop(&vm_alias, handle);
    }
    uint64_t bytes = vm_unref_locked(target);
    pthread_mutex_unlock(&vm_lock);
    vm_credit(bytes);
    return rc;
}

typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags) {
    map_fn f = REAL(cuMemMap, map_fn);
    NOT_FOUND_IF_NULL(f);
    if (!usable()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ptr, size, offset, handle, flags);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&vm_lock);
    vref *alias = vt_find(&vm_alias, handle);
    uint64_t target = alias ? alias->other : handle;
    vref *a = vt_find(&vm_allocs, target);
    if (a) {
        a->refs++;
        vref *m = vt_put(&vm_maps, ptr);
        if (m) { m->size = size; m->other = target; m->refs = 1; }
    }
    pthread_mutex_unlock(&vm_lock);
    return rc;
}

/* the driver unmaps whole mappings; a range may cover several laid end to end */
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    unmap_fn f = REAL(cuMemUnmap, unmap_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(ptr, size);
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t bytes = 0, at = ptr, end = (uint64_t)ptr + size;
    pthread_mutex_lock(&vm_lock);
    while (at < end) {
        vref *m = vt_find(&vm_maps, at);
        if (!m) break;
        uint64_t next = at + (m->size ? m->size : 1), target = m->other;
        vt_drop(&vm_maps, at);
        bytes += vm_unref_locked(target);
        at = next;
    }
    pthread_mutex_unlock(&vm_lock);
    vm_credit(bytes);
    return rc;
}

/* a new handle to mapped memory: one more reference until it is released */
typedef CUresult (*retain_handle_fn)(CUmemGenericAllocationHandle *, void *);
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    retain_handle_fn f = REAL(cuMemRetainAllocationHandle, retain_handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(handle, addr);
    if (rc != CUDA_SUCCESS || !handle) return rc;
    pthread_mutex_lock(&vm_lock);
    vref *a = vt_find(&vm_allocs, *handle);
    if (a) {
        a->refs++;
    } else { /* spelled differently: find the mapping that holds addr */
        uint64_t target = 0;
        for (size_t i = 0; i < vm_maps.cap && !target; i++) {
            vref *m = &vm_maps.e[i];
            if (m->key && (uint64_t)(uintptr_t)addr >= m->key &&
                (uint64_t)(uintptr_t)addr < m->key + m->size)
                target = m->other;
        }
        vref *orig = target ? vt_find(&vm_allocs, target) : NULL;
        vref *alias = orig ? vt_put(&vm_alias, *handle) : NULL;
        if (alias) {
            orig->refs++;
            alias->other = target;
            alias->refs++;
        }
    }
    pthread_mutex_unlock(&vm_lock);
    return rc;
}

/* ---- pools: stream-ordered memory is charged by what its pool holds -------------------------
 * cuMemFreeAsync gives memory back to its pool, not to the device: the pool keeps it until a
 * synchronisation finds it above the pool's release threshold (which a job may set to "keep
 * everything"), or cuMemPoolTrimTo. Crediting the quota at the free would let a job hold a
 * pool's cache and the same amount again elsewhere. So a pool is charged what it reserves
 * (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, the driver's own figure): an allocation is admitted
 * when the growth it may cause (its size less the pool's unused reserve) fits the quota, and
 * the charge is settled to the pool's reserve after every allocation, free, synchronisation and
 * trim. A destroyed pool is credited when its last allocation is freed. Without the pool
 * attributes (an old driver) each allocation is charged on its own, as before. */
#define POOL_RESERVED 5 /* CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT */
#define POOL_USED 7     /* CU_MEMPOOL_ATTR_USED_MEM_CURRENT */

typedef CUresult (*pool_attr_fn)(CUmemoryPool, int, void *);
static void *driver_symbol(const char *name) {
    pthread_once(&reals_once, open_libs);
    return libs[LIB_CUDA] && real_dlsym_fn ? real_dlsym_fn(libs[LIB_CUDA], name) : NULL;
}
static int pool_attr(CUmemoryPool pool, int attr, uint64_t *out) {
    static pool_attr_fn get;
    if (!get) get = (pool_attr_fn)driver_symbol("cuMemPoolGetAttribute");
    *out = 0;
    return get && pool && get(pool, attr, out) == CUDA_SUCCESS;
}

/* 1 when *pool (the current device's current pool if NULL) can be accounted by its reserve */
static int pool_accounted(CUmemoryPool *pool) {
    typedef CUresult (*get_device_fn)(CUdevice *);
    typedef CUresult (*get_pool_fn)(CUmemoryPool *, CUdevice);
    if (!*pool) {
        get_device_fn dev_of = (get_device_fn)driver_symbol("cuCtxGetDevice");
        get_pool_fn pool_of = (get_pool_fn)driver_symbol("cuDeviceGetMemPool");
        CUdevice dev = 0;
        if (!dev_of || !pool_of || dev_of(&dev) != CUDA_SUCCESS ||
            pool_of(pool, dev) != CUDA_SUCCESS)
            return 0;
    }
    uint64_t ignored;
    return pool_attr(*pool, POOL_RESERVED, &ignored);
}

/* charge pool what it reserves now; 0 if that growth does not fit the quota */
static int pool_settle(CUmemoryPool pool) {
    uint64_t reserved;
    if (!pool_attr(pool, POOL_RESERVED, &reserved)) return 1;
    pthread_mutex_lock(&vm_lock);
    vref *b = vt_put(&pool_books, (uint64_t)(uintptr_t)pool);
    int ok = 1;
    if (b && reserved > b->size) {
        ok = reserve(DEVICE, reserved - b->size);
        if (ok) b->size = reserved;
    } else if (b && reserved < b->size) {
        uint64_t give = b->size - reserved;
        b->size = reserved;
        pthread_mutex_unlock(&vm_lock);
        vm_credit(give);
        return 1;
    }
    pthread_mutex_unlock(&vm_lock);
    return ok;
}

static int pool_admit(CUmemoryPool pool, uint64_t bytes, uint64_t *want) {
    uint64_t reserved = 0, in_use = 0;
    pool_attr(pool, POOL_RESERVED, &reserved);
    pool_attr(pool, POOL_USED, &in_use);
    uint64_t slack = reserved > in_use ? reserved - in_use : 0;
    *want = bytes > slack ? bytes - slack : 0;
    return reserve(DEVICE, *want);
}

static CUresult pool_after(CUresult rc, CUmemoryPool pool, uint64_t want, CUdeviceptr dptr) {
    typedef CUresult (*free_async_fn2)(CUdeviceptr, CUstream);
    unreserve(DEVICE, want);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&vm_lock);
    vref *p = vt_put(&pool_ptrs, dptr);
    if (p) p->other = (uint64_t)(uintptr_t)pool;
    vref *b = vt_put(&pool_books, (uint64_t)(uintptr_t)pool);
    if (b) b->refs++;
    pthread_mutex_unlock(&vm_lock);
    if (pool_settle(pool)) return rc;
    /* someone else took the quota between admission and now: give it back, refuse */
    free_async_fn2 undo = (free_async_fn2)real_of(H_cuMemFreeAsync);
    if (undo) undo(dptr, NULL);
    pool_freed(dptr);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* 1 if dptr came from a pool (its charge is the pool's, settled here) */
static int pool_freed(uint64_t dptr) {
    pthread_mutex_lock(&vm_lock);
    vref *p = vt_find(&pool_ptrs, dptr);
    if (!p) { pthread_mutex_unlock(&vm_lock); return 0; }
    CUmemoryPool pool = (CUmemoryPool)(uintptr_t)p->other;
    vt_drop(&pool_ptrs, dptr);
    vref *b = vt_find(&pool_books, (uint64_t)(uintptr_t)pool);
    uint64_t give = 0;
    int destroyed = 0;
    if (b) {
        b->refs--;
        destroyed = b->other != 0;
        if (destroyed && b->refs <= 0) {
            give = b->size;
            vt_drop(&pool_books, (uint64_t)(uintptr_t)pool);
        }
    }
    pthread_mutex_unlock(&vm_lock);
    if (U) __atomic_fetch_add(&U->free_calls, 1, __ATOMIC_RELAXED);
    if (give) unreserve(DEVICE, give);
    if (!destroyed) pool_settle(pool);
    return 1;
}

static void pools_settle_all(void) {
    CUmemoryPool live[64];
    int n = 0;
    pthread_mutex_lock(&vm_lock);
    for (size_t i = 0; i < pool_books.cap && n < 64; i++)
        if (pool_books.e[i].key && !pool_books.e[i].other)
            live[n++] = (CUmemoryPool)(uintptr_t)pool_books.e[i].key;
    pthread_mutex_unlock(&vm_lock);
    for (int i = 0; i < n; i++) pool_settle(live[i]);
}

typedef CUresult (*trim_fn)(CUmemoryPool, size_t);
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    trim_fn f = REAL(cuMemPoolTrimTo, trim_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(pool, keep);
    if (rc == CUDA_SUCCESS) pool_settle(pool);
    return rc;
}
typedef CUresult (*pool_destroy_fn)(CUmemoryPool);
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    pool_destroy_fn f = REAL(cuMemPoolDestroy, pool_destroy_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(pool);
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t give = 0;
    pthread_mutex_lock(&vm_lock);
    vref *b = vt_find(&pool_books, (uint64_t)(uintptr_t)pool);
    if (b && b->refs <= 0) {
        give = b->size;
        vt_drop(&pool_books, (uint64_t)(uintptr_t)pool);
    } else if (b) {
        b->other = 1; /* its memory goes with its last allocation */
    }
    pthread_mutex_unlock(&vm_lock);
    vm_credit(give);
    return rc;
}

/* ---- routes the quota cannot follow: refused (fail closed), one stderr line each --------- */

/* Importing memory another process exported (legacy IPC, VMM shareable handles, pool exports)
 * yields a reference to physical memory that outlives the exporter's free, so the exporter's
 * quota is credited while the memory lives on in the importer. Graph memory nodes allocate at
 * graph launch, outside every call the quota sees. cuGetExportTable hands out private driver
 * entry points that nothing here can account for: only the tables the CUDA runtime itself
 * needs pass. */
static void refuse(int topic, const char *name, const char *why) {
    say_once(topic, "gpooling: %s refused: %s (fail closed)", name, why);
    if (U) __atomic_fetch_add(&U->denied_calls, 1, __ATOMIC_RELAXED);
}
#define IMPORT_WHY "imported memory outlives the exporter's quota"
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags) {
    (void)dptr; (void)h; (void)flags;
    refuse(SAY_IPC, "cuIpcOpenMemHandle", IMPORT_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags) {
    (void)dptr; (void)h; (void)flags;
    refuse(SAY_IPC, "cuIpcOpenMemHandle", IMPORT_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                               int type) {
    (void)h; (void)os_handle; (void)type;
    refuse(SAY_IMPORT, "cuMemImportFromShareableHandle", IMPORT_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os_handle, int type,
                                                   unsigned long long flags) {
    (void)pool; (void)os_handle; (void)type; (void)flags;
    refuse(SAY_POOL_IMPORT, "cuMemPoolImportFromShareableHandle", IMPORT_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool, void *data) {
    (void)dptr; (void)pool; (void)data;
    refuse(SAY_POOL_IMPORT, "cuMemPoolImportPointer", IMPORT_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
#define GRAPH_WHY "graph memory nodes allocate at launch, outside the quota"
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                       size_t n, CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    (void)node; (void)g; (void)deps; (void)n; (void)params;
    refuse(SAY_GRAPH, "cuGraphAddMemAllocNode", GRAPH_WHY);
    return CUDA_ERROR_NOT_PERMITTED;
}
typedef CUresult (*add_node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                CUgraphNodeParams *);
EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                               CUgraphNodeParams *params) {
    add_node_fn f = REAL(cuGraphAddNode, add_node_fn);
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        refuse(SAY_GRAPH, "cuGraphAddNode of a memory-allocation node", GRAPH_WHY);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    NOT_FOUND_IF_NULL(f);
    return f(node, g, deps, n, params);
}
typedef CUresult (*add_node2_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, const void *, size_t,
                                 CUgraphNodeParams *);
EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                  const void *edges, size_t n, CUgraphNodeParams *params) {
    add_node2_fn f = REAL(cuGraphAddNode_v2, add_node2_fn);
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        refuse(SAY_GRAPH, "cuGraphAddNode of a memory-allocation node", GRAPH_WHY);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    NOT_FOUND_IF_NULL(f);
    return f(node, g, deps, edges, n, params);
}

/* the export tables libcudart asks for (its module-registration interface, tools hooks and
 * TLS, context-local storage); any other table is refused: among them, as reverse-engineered by
 * ZLUDA, a context-creation bypass and a device-heap allocator */
static const unsigned char runtime_tables[][16] = {
    {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
    {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
    {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
    {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
};

/* The runtime interface (the first table) loads modules from fatbins: entries 1 and 6 write
 * the module through their first argument, entry 8 through its second. A module's static
 * device data is memory, so those three are handed out as thunks that charge what the load
 * took, as cuModuleLoad* are; the other entries pass as they are. */
static uint64_t device_free(void);
static CUresult module_loaded(CUresult rc, uint64_t key, uint64_t before, int hook_unload);
typedef CUresult (*rt_load_fn)(void *, void *, void *, void *, uint64_t);
enum { RT_SLOTS = 32 };
static const int rt_entry[3] = {1, 6, 8}, rt_out[3] = {0, 0, 1};
static rt_load_fn rt_real[3];
static const void *rt_copy[RT_SLOTS];
static const void *rt_original;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult rt_load(int i, void *a, void *b, void *c, void *d, uint64_t e) {
    if (!usable()) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t before = device_free();
    CUresult rc = rt_real[i](a, b, c, d, e);
    CUmodule *out = (CUmodule *)(rt_out[i] ? b : a);
    if (rc == CUDA_SUCCESS && !out) return rc;
    return module_loaded(rc, rc ? 0 : (uintptr_t)*out, before, H_cuModuleUnload);
}
static CUresult rt_load0(void *a, void *b, void *c, void *d, uint64_t e) {
    return rt_load(0, a, b, c, d, e);
}
static CUresult rt_load1(void *a, void *b, void *c, void *d, uint64_t e) {
    return rt_load(1, a, b, c, d, e);
}
static CUresult rt_load2(void *a, void *b, void *c, void *d, uint64_t e) {
    return rt_load(2, a, b, c, d, e);
}
static const void *runtime_interface(const void *table) {
    static rt_load_fn const thunks[3] = {rt_load0, rt_load1, rt_load2};
    const void *const *t = table;
    size_t n = t ? (size_t)(uintptr_t)t[0] / sizeof(void *) : 0;
    if (n < 2 || n > RT_SLOTS) return table; /* not the layout we know: as it is */
    pthread_mutex_lock(&rt_lock);
    if (rt_original != table) {
        for (size_t k = 0; k < n; k++) rt_copy[k] = t[k];
        for (int k = 0; k < 3; k++) {
            if ((size_t)rt_entry[k] >= n || !t[rt_entry[k]]) continue;
            rt_real[k] = (rt_load_fn)t[rt_entry[k]];
            rt_copy[rt_entry[k]] = (const void *)thunks[k];
        }
        rt_original = table;
    }
    pthread_mutex_unlock(&rt_lock);
    return rt_copy;
}

typedef CUresult (*export_table_fn)(const void **, const CUuuid *);
EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    export_table_fn f = REAL(cuGetExportTable, export_table_fn);
    NOT_FOUND_IF_NULL(f);
    for (size_t i = 0; id && i < sizeof runtime_tables / sizeof *runtime_tables; i++) {
        if (memcmp(id->bytes, runtime_tables[i], 16)) continue;
        CUresult rc = f(table, id);
        if (rc == CUDA_SUCCESS && table && i == 0) *table = runtime_interface(*table);
        return rc;
    }
    refuse(SAY_EXPORT, "cuGetExportTable of a table the CUDA runtime does not use",
           "its private entry points bypass the quota");
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_PERMITTED;
}

/* arrays: the size follows from the descriptor (conservatively for unknown formats) */
typedef CUresult (*array_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d) {
    array_fn f = REAL(cuArrayCreate_v2, array_fn);
    NOT_FOUND_IF_NULL(f);
    if (!d || !out) return f(out, d);
    GUARDED(DEVICE, gp_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0, 1),
            (uintptr_t)*out, f(out, d));
}
typedef CUresult (*array_v1_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
EXPORT CUresult cuArrayCreate(CUarray *out, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    array_v1_fn f = REAL(cuArrayCreate, array_v1_fn);
    NOT_FOUND_IF_NULL(f);
    if (!d || !out) return f(out, d);
    GUARDED(DEVICE, gp_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0, 1),
            (uintptr_t)*out, f(out, d));
}
typedef CUresult (*array3d_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    array3d_fn f = REAL(cuArray3DCreate_v2, array3d_fn);
    NOT_FOUND_IF_NULL(f);
    if (!d || !out) return f(out, d);
    GUARDED(DEVICE, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
                                   d->Flags, 1), (uintptr_t)*out, f(out, d));
}
typedef CUresult (*array3d_v1_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *);
EXPORT CUresult cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    array3d_v1_fn f = REAL(cuArray3DCreate, array3d_v1_fn);
    NOT_FOUND_IF_NULL(f);
    if (!d || !out) return f(out, d);
    GUARDED(DEVICE, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
                                   d->Flags, 1), (uintptr_t)*out, f(out, d));
}
typedef CUresult (*mipmap_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int levels) {
    mipmap_fn f = REAL(cuMipmappedArrayCreate, mipmap_fn);
    NOT_FOUND_IF_NULL(f);
    if (!d || !out) return f(out, d, levels);
    GUARDED(DEVICE, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
                                   d->Flags, levels), (uintptr_t)*out, f(out, d, levels));
}
typedef CUresult (*handle_fn)(void *);
EXPORT CUresult cuArrayDestroy(CUarray a) {
    handle_fn f = REAL(cuArrayDestroy, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(a);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)a);
    return rc;
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
    handle_fn f = REAL(cuMipmappedArrayDestroy, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(a);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)a);
    return rc;
}

/* pinned host memory: not device memory, counted against the host limit (0 = unlimited) */
typedef CUresult (*host_fn)(void **, size_t);
typedef CUresult (*host_v1_fn)(void **, unsigned int);
typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned int);
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
    host_fn f = REAL(cuMemAllocHost_v2, host_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(HOST, bytes, (uintptr_t)*p, f(p, bytes));
}
EXPORT CUresult cuMemAllocHost(void **p, unsigned int bytes) {
    host_v1_fn f = REAL(cuMemAllocHost, host_v1_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(HOST, bytes, (uintptr_t)*p, f(p, bytes));
}
EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
    host_alloc_fn f = REAL(cuMemHostAlloc, host_alloc_fn);
    NOT_FOUND_IF_NULL(f);
    GUARDED(HOST, bytes, (uintptr_t)*p, f(p, bytes, flags));
}
EXPORT CUresult cuMemFreeHost(void *p) {
    handle_fn f = REAL(cuMemFreeHost, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(p);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)p);
    return rc;
}

/* what the job is told: the virtual device, not the card */
static void clamp_info(uint64_t *free_b, uint64_t *total) {
    if (!usable()) { *free_b = 0; return; }
    uint64_t limit = __atomic_load_n(&L->memory_limit, __ATOMIC_ACQUIRE);
    if (!limit) return;
    uint64_t used = __atomic_load_n(&U->memory_used, __ATOMIC_ACQUIRE);
    uint64_t left = used >= limit ? 0 : limit - used;
    if (*total > limit) *total = limit;
    if (*free_b > left) *free_b = left;
}

typedef CUresult (*info_fn)(size_t *, size_t *);
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    info_fn f = REAL(cuMemGetInfo_v2, info_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS || !free_bytes || !total_bytes) return rc;
    uint64_t fr = *free_bytes, to = *total_bytes;
    clamp_info(&fr, &to);
    *free_bytes = fr; *total_bytes = to;
    return rc;
}
typedef CUresult (*info_v1_fn)(unsigned int *, unsigned int *);
EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
    info_v1_fn f = REAL(cuMemGetInfo, info_v1_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS || !free_bytes || !total_bytes) return rc;
    uint64_t fr = *free_bytes, to = *total_bytes;
    clamp_info(&fr, &to);
    *free_bytes = (unsigned)fr; *total_bytes = (unsigned)to;
    return rc;
}
typedef CUresult (*total_fn)(size_t *, CUdevice);
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    total_fn f = REAL(cuDeviceTotalMem_v2, total_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes) return rc;
    uint64_t fr = UINT64_MAX, to = *bytes;
    clamp_info(&fr, &to);
    *bytes = to;
    return rc;
}
typedef CUresult (*total_v1_fn)(unsigned int *, CUdevice);
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    total_v1_fn f = REAL(cuDeviceTotalMem, total_v1_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes) return rc;
    uint64_t fr = UINT64_MAX, to = *bytes;
    clamp_info(&fr, &to);
    *bytes = (unsigned)to;
    return rc;
}

/* NVML: nvidia-smi and NVML clients see the virtual device's memory */
static void clamp_nvml(unsigned long long *total, unsigned long long *free_b,
                       unsigned long long *used) {
    if (!usable()) { *free_b = 0; return; }
    uint64_t limit = __atomic_load_n(&L->memory_limit, __ATOMIC_ACQUIRE);
    if (!limit) return;
    uint64_t mine = __atomic_load_n(&U->memory_used, __ATOMIC_ACQUIRE);
    *total = limit;
    *used = mine;
    *free_b = mine >= limit ? 0 : limit - mine;
}
typedef nvmlReturn_t (*nvml_mem_fn)(nvmlDevice_t, nvmlMemory_t *);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    nvml_mem_fn f = REAL(nvmlDeviceGetMemoryInfo, nvml_mem_fn);
    if (!f) return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */
    nvmlReturn_t rc = f(dev, m);
    if (rc == NVML_SUCCESS && m) clamp_nvml(&m->total, &m->free, &m->used);
    return rc;
}
typedef nvmlReturn_t (*nvml_mem2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    nvml_mem2_fn f = REAL(nvmlDeviceGetMemoryInfo_v2, nvml_mem2_fn);
    if (!f) return 13;
    nvmlReturn_t rc = f(dev, m);
    if (rc == NVML_SUCCESS && m) {
        clamp_nvml(&m->total, &m->free, &m->used);
        if (__atomic_load_n(&L->memory_limit, __ATOMIC_ACQUIRE)) m->reserved = 0;
    }
    return rc;
}

/* ---- contexts and modules: memory the application never asked for by size ---------------- */

#define PRIMARY_KEY(dev) (0xC7C7000000000000ULL | (uint64_t)(unsigned)(dev))
static int primary_refs[64];

static int charge_context(void) {
    return usable() ? reserve(DEVICE, __atomic_load_n(&L->context_bytes, __ATOMIC_ACQUIRE)) : 0;
}
static void context_made(uint64_t key, CUresult rc) {
    uint64_t bytes = __atomic_load_n(&L->context_bytes, __ATOMIC_ACQUIRE);
    if (rc == CUDA_SUCCESS) {
        remember(key, bytes, DEVICE);
        __atomic_fetch_add(&U->context_bytes, bytes, __ATOMIC_RELAXED);
    } else {
        unreserve(DEVICE, bytes);
    }
}

typedef CUresult (*ctx_fn)(CUcontext *, unsigned int, CUdevice);
EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev) {
    ctx_fn f = REAL(cuCtxCreate_v2, ctx_fn);
    NOT_FOUND_IF_NULL(f);
    if (!charge_context()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ctx, flags, dev);
    context_made(rc ? 0 : (uintptr_t)*ctx, rc);
    return rc;
}
EXPORT CUresult cuCtxCreate(CUcontext *ctx, unsigned int flags, CUdevice dev) {
    ctx_fn f = REAL(cuCtxCreate, ctx_fn);
    NOT_FOUND_IF_NULL(f);
    if (!charge_context()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ctx, flags, dev);
    context_made(rc ? 0 : (uintptr_t)*ctx, rc);
    return rc;
}
typedef CUresult (*ctx3_fn)(CUcontext *, void *, int, unsigned int, CUdevice);
EXPORT CUresult cuCtxCreate_v3(CUcontext *ctx, void *params, int n, unsigned int flags,
                               CUdevice dev) {
    ctx3_fn f = REAL(cuCtxCreate_v3, ctx3_fn);
    NOT_FOUND_IF_NULL(f);
    if (!charge_context()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ctx, params, n, flags, dev);
    context_made(rc ? 0 : (uintptr_t)*ctx, rc);
    return rc;
}
typedef CUresult (*ctx4_fn)(CUcontext *, void *, unsigned int, CUdevice);
EXPORT CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev) {
    ctx4_fn f = REAL(cuCtxCreate_v4, ctx4_fn);
    NOT_FOUND_IF_NULL(f);
    if (!charge_context()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ctx, params, flags, dev);
    context_made(rc ? 0 : (uintptr_t)*ctx, rc);
    return rc;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    handle_fn f = REAL(cuCtxDestroy_v2, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(ctx);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)ctx);
    return rc;
}
EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
    handle_fn f = REAL(cuCtxDestroy, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(ctx);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)ctx);
    return rc;
}
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    retain_fn f = REAL(cuDevicePrimaryCtxRetain, retain_fn);
    NOT_FOUND_IF_NULL(f);
    int first = dev >= 0 && dev < 64 && __atomic_load_n(&primary_refs[dev], __ATOMIC_ACQUIRE) == 0;
    if (first && !charge_context()) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(ctx, dev);
    if (first) context_made(PRIMARY_KEY(dev), rc);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < 64)
        __atomic_fetch_add(&primary_refs[dev], 1, __ATOMIC_ACQ_REL);
    return rc;
}
static void primary_dropped(CUdevice dev, int reset) {
    if (dev < 0 || dev >= 64) return;
    int refs = __atomic_load_n(&primary_refs[dev], __ATOMIC_ACQUIRE);
    if (refs <= 0) return;
    if (reset || __atomic_sub_fetch(&primary_refs[dev], 1, __ATOMIC_ACQ_REL) == 0) {
        __atomic_store_n(&primary_refs[dev], 0, __ATOMIC_RELEASE);
        forget(PRIMARY_KEY(dev));
    }
}
typedef CUresult (*dev_fn)(CUdevice);
#define PRIMARY_DROP(name, reset)                                                              \
    EXPORT CUresult name(CUdevice dev) {                                                       \
        dev_fn f = REAL(name, dev_fn);                                                         \
        NOT_FOUND_IF_NULL(f);                                                                  \
        CUresult rc = f(dev);                                                                  \
        if (rc == CUDA_SUCCESS) primary_dropped(dev, reset);                                   \
        return rc;                                                                             \
    }
PRIMARY_DROP(cuDevicePrimaryCtxRelease, 0)
PRIMARY_DROP(cuDevicePrimaryCtxRelease_v2, 0)
PRIMARY_DROP(cuDevicePrimaryCtxReset, 1)
PRIMARY_DROP(cuDevicePrimaryCtxReset_v2, 1)

/* modules and libraries: charged what the driver's free memory dropped by across the load */
static uint64_t device_free(void) {
    info_fn f = REAL(cuMemGetInfo_v2, info_fn);
    size_t fr = 0, to = 0;
    return f && f(&fr, &to) == CUDA_SUCCESS ? fr : 0;
}
static CUresult module_loaded(CUresult rc, uint64_t key, uint64_t before, int hook_unload) {
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t after = device_free(), cost = before > after ? before - after : 0;
    if (cost && !reserve(DEVICE, cost)) {
        handle_fn undo = (handle_fn)real_of(hook_unload);
        if (undo) undo((void *)(uintptr_t)key);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    remember(key, cost, DEVICE);
    if (U) __atomic_fetch_add(&U->context_bytes, cost, __ATOMIC_RELAXED);
    return rc;
}
#define MODULE_LOAD(name, unload, params, args)                                                \
    typedef CUresult(*name##_fn) params;                                                       \
    EXPORT CUresult name params {                                                              \
        name##_fn f = REAL(name, name##_fn);                                                   \
        NOT_FOUND_IF_NULL(f);                                                                  \
        if (!usable()) return CUDA_ERROR_OUT_OF_MEMORY;                                        \
        uint64_t before = device_free();                                                       \
        CUresult rc = f args;                                                                  \
        return module_loaded(rc, rc ? 0 : (uintptr_t)*out, before, H_##unload);                \
    }
MODULE_LOAD(cuModuleLoad, cuModuleUnload, (CUmodule * out, const char *fname), (out, fname))
MODULE_LOAD(cuModuleLoadData, cuModuleUnload, (CUmodule * out, const void *image), (out, image))
MODULE_LOAD(cuModuleLoadDataEx, cuModuleUnload,
            (CUmodule * out, const void *image, unsigned int n, void *opts, void **vals),
            (out, image, n, opts, vals))
MODULE_LOAD(cuModuleLoadFatBinary, cuModuleUnload, (CUmodule * out, const void *fatbin),
            (out, fatbin))
MODULE_LOAD(cuLibraryLoadData, cuLibraryUnload,
            (CUlibrary * out, const void *code, void *jo, void **jv, unsigned int nj, void *lo,
             void **lv, unsigned int nl),
            (out, code, jo, jv, nj, lo, lv, nl))
MODULE_LOAD(cuLibraryLoadFromFile, cuLibraryUnload,
            (CUlibrary * out, const char *file, void *jo, void **jv, unsigned int nj, void *lo,
             void **lv, unsigned int nl),
            (out, file, jo, jv, nj, lo, lv, nl))
EXPORT CUresult cuModuleUnload(CUmodule m) {
    handle_fn f = REAL(cuModuleUnload, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(m);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)m);
    return rc;
}
EXPORT CUresult cuLibraryUnload(CUlibrary l) {
    handle_fn f = REAL(cuLibraryUnload, handle_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(l);
    if (rc == CUDA_SUCCESS) forget((uintptr_t)l);
    return rc;
}

/* ---- launch and synchronisation wrappers: every family through the token bucket ---------- */

#define SLICED(call)                                                                           \
    do {                                                                                       \
        if (!usable()) return CUDA_ERROR_NOT_PERMITTED;                                        \
        gpooling_usage *u_ = U;                                                                \
        __atomic_fetch_add(&u_->launch_calls, 1, __ATOMIC_RELAXED);                            \
        if (!throttled()) return (call);                                                       \
        acquire_tokens(u_);                                                                    \
        uint64_t start_ = now_ns();                                                            \
        CUresult rc_ = (call);                                                                 \
        charge(u_, now_ns() - start_);                                                         \
        return rc_;                                                                            \
    } while (0)

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
EXPORT CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **p,
                               void **e) {
    launch_fn f = REAL(cuLaunchKernel, launch_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, gx, gy, gz, bx, by, bz, shmem, s, p, e));
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                    CUstream s, void **p, void **e) {
    launch_fn f = REAL(cuLaunchKernel_ptsz, launch_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, gx, gy, gz, bx, by, bz, shmem, s, p, e));
}
typedef CUresult (*launch_ex_fn)(const void *, CUfunction, void **, void **);
EXPORT CUresult cuLaunchKernelEx(const void *c, CUfunction fn, void **p, void **e) {
    launch_ex_fn f = REAL(cuLaunchKernelEx, launch_ex_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(c, fn, p, e));
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const void *c, CUfunction fn, void **p, void **e) {
    launch_ex_fn f = REAL(cuLaunchKernelEx_ptsz, launch_ex_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(c, fn, p, e));
}
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **);
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                          CUstream s, void **p) {
    coop_fn f = REAL(cuLaunchCooperativeKernel, coop_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, gx, gy, gz, bx, by, bz, shmem, s, p));
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction fn, unsigned gx, unsigned gy,
                                               unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                               unsigned shmem, CUstream s, void **p) {
    coop_fn f = REAL(cuLaunchCooperativeKernel_ptsz, coop_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, gx, gy, gz, bx, by, bz, shmem, s, p));
}
typedef CUresult (*coop_multi_fn)(CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int);
EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                     unsigned int flags) {
    coop_multi_fn f = REAL(cuLaunchCooperativeKernelMultiDevice, coop_multi_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(list, n, flags));
}
typedef CUresult (*graph_fn)(CUgraphExec, CUstream);
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    graph_fn f = REAL(cuGraphLaunch, graph_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(g, s));
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    graph_fn f = REAL(cuGraphLaunch_ptsz, graph_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(g, s));
}
EXPORT CUresult cuLaunch(CUfunction fn) {
    handle_fn f = REAL(cuLaunch, handle_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn));
}
typedef CUresult (*grid_fn)(CUfunction, int, int);
EXPORT CUresult cuLaunchGrid(CUfunction fn, int w, int h) {
    grid_fn f = REAL(cuLaunchGrid, grid_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, w, h));
}
typedef CUresult (*grid_async_fn)(CUfunction, int, int, CUstream);
EXPORT CUresult cuLaunchGridAsync(CUfunction fn, int w, int h, CUstream s) {
    grid_async_fn f = REAL(cuLaunchGridAsync, grid_async_fn);
    NOT_FOUND_IF_NULL(f);
    SLICED(f(fn, w, h, s));
}

/* synchronisation: asynchronous kernels' device time surfaces here */
#define TIMED_SYNC(call)                                                                       \
    do {                                                                                       \
        if (!usable()) return (call);                                                          \
        gpooling_usage *u_ = U;                                                                \
        __atomic_fetch_add(&u_->sync_calls, 1, __ATOMIC_RELAXED);                              \
        uint64_t start_ = now_ns();                                                            \
        CUresult rc_ = (call);                                                                 \
        charge(u_, now_ns() - start_);                                                         \
        pools_settle_all(); /* pools above their release threshold trimmed */                 \
        return rc_;                                                                            \
    } while (0)
typedef CUresult (*ctx_sync_fn)(void);
EXPORT CUresult cuCtxSynchronize(void) {
    ctx_sync_fn f = REAL(cuCtxSynchronize, ctx_sync_fn);
    NOT_FOUND_IF_NULL(f);
    TIMED_SYNC(f());
}
EXPORT CUresult cuStreamSynchronize(CUstream s) {
    handle_fn f = REAL(cuStreamSynchronize, handle_fn);
    NOT_FOUND_IF_NULL(f);
    TIMED_SYNC(f(s));
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
    handle_fn f = REAL(cuStreamSynchronize_ptsz, handle_fn);
    NOT_FOUND_IF_NULL(f);
    TIMED_SYNC(f(s));
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    handle_fn f = REAL(cuEventSynchronize, handle_fn);
    NOT_FOUND_IF_NULL(f);
    TIMED_SYNC(f(e));
}

/* ---- symbol lookup: every route hands out our wrappers ------------------------------------ */

EXPORT void *dlsym(void *handle, const char *name);
EXPORT void *dlvsym(void *handle, const char *name, const char *version);
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int flags);
EXPORT void *dlopen(const char *file, int flags);

static hook *find_by_name(const char *name) {
    for (int i = 0; i < H_COUNT; i++)
        if (!strcmp(hooks[i].name, name)) return &hooks[i];
    return NULL;
}

/* the variant cuGetProcAddress means for (base, version, per-thread stream) */
static hook *find_by_base(const char *base, int ptsz, int version) {
    hook *best = NULL;
    for (int i = 0; i < H_COUNT; i++) {
        hook *h = &hooks[i];
        if (!h->base || strcmp(h->base, base) || h->min_version > version) continue;
        if (h->ptsz && !ptsz) continue;
        if (!best || h->min_version > best->min_version ||
            (h->min_version == best->min_version && h->ptsz && !best->ptsz))
            best = h;
    }
    return best;
}

static hook *find_by_address(void *f) {
    for (int i = 0; i < H_COUNT; i++)
        if (f && __atomic_load_n(&hooks[i].real, __ATOMIC_ACQUIRE) == f) return &hooks[i];
    return NULL;
}

static void *wrap(hook *h, void *f) {
    if (!h || !f || f == h->wrapper) return f;
    void *expected = NULL;
    __atomic_compare_exchange_n(&h->real, &expected, f, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return h->wrapper;
}

/* the answer of any dlsym/dlvsym: our own loader functions, or a wrapper if it is intercepted */
static void *swap_symbol(const char *name, void *f) {
    if (!f || !name) return f;
    if (!strcmp(name, "dlsym")) return (void *)dlsym;
    if (!strcmp(name, "dlvsym")) return (void *)dlvsym;
    if (!strcmp(name, "dlmopen")) return (void *)dlmopen;
    if (!strcmp(name, "dlopen")) return (void *)dlopen;
    if ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nvml", 4)) {
        pthread_once(name[0] == 'n' ? &nvml_once : &reals_once,
                     name[0] == 'n' ? open_nvml : open_libs);
        hook *h = find_by_name(name);
        if (h) return wrap(h, f);
        h = find_by_address(f); /* another name for an intercepted function */
        if (h) return h->wrapper;
    }
    return f;
}

/* RTLD_NEXT means "after the *caller's* object"; the real dlsym called from here would search
 * after the shim instead (and hand a later preloaded library its own symbol back). Walk the link
 * map from the caller's object on and ask each following object in turn. */
static void *next_after(const void *caller, const char *name, const char *version) {
    Dl_info info;
    struct link_map *lm = NULL;
    if (!caller || !dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm) return NULL;
    for (lm = lm->l_next; lm; lm = lm->l_next) {
        if (!lm->l_name || !lm->l_name[0]) continue;
        void *h = real_dlopen_fn ? real_dlopen_fn(lm->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (!h) continue;
        void *f = version ? real_dlvsym_fn(h, name, version) : real_dlsym_fn(h, name);
        dlclose(h);
        if (f) return f;
    }
    return NULL;
}

EXPORT void *dlsym(void *handle, const char *name) {
    libc_ready();
    if (!real_dlsym_fn) return NULL;
    if (handle == RTLD_NEXT) {
        void *f = next_after(__builtin_return_address(0), name, NULL);
        return swap_symbol(name, f ? f : real_dlsym_fn(handle, name));
    }
    return swap_symbol(name, real_dlsym_fn(handle, name));
}

EXPORT void *dlvsym(void *handle, const char *name, const char *version) {
    libc_ready();
    if (!real_dlvsym_fn) return NULL;
    if (handle == RTLD_NEXT) {
        void *f = next_after(__builtin_return_address(0), name, version);
        return swap_symbol(name, f ? f : real_dlvsym_fn(handle, name, version));
    }
    return swap_symbol(name, real_dlvsym_fn(handle, name, version));
}

/* ---- objects that bind to the driver without asking us: patch their relocations ---------- */

/* A library opened with RTLD_DEEPBIND (or one of its dependencies) looks its undefined symbols
 * up in its own dependencies first, so its calls to cu* bind to libcuda, and its calls to
 * dlsym to libc's, never to the shim that LD_PRELOAD put first in the global scope. After every
 * change to the set of loaded objects, each relocation of every other object that names an
 * intercepted function (or dlsym/dlvsym/dlopen/dlmopen) is pointed at the wrapper: the GOT and
 * PLT slots, and absolute data words (function-pointer tables). RELRO pages are made writable
 * for the write and read-only again. */
#if defined(__x86_64__)
#define R_SLOT(t) ((t) == R_X86_64_JUMP_SLOT || (t) == R_X86_64_GLOB_DAT || (t) == R_X86_64_64)
#elif defined(__aarch64__)
#define R_SLOT(t) ((t) == R_AARCH64_JUMP_SLOT || (t) == R_AARCH64_GLOB_DAT || (t) == R_AARCH64_ABS64)
#else
#define R_SLOT(t) 0
#endif

static void *loader_wrapper(const char *name) {
    if (name[0] != 'd' || name[1] != 'l') return NULL;
    if (!strcmp(name, "dlsym")) return (void *)dlsym;
    if (!strcmp(name, "dlvsym")) return (void *)dlvsym;
    if (!strcmp(name, "dlopen")) return (void *)dlopen;
    if (!strcmp(name, "dlmopen")) return (void *)dlmopen;
    return NULL;
}

static void *target_for(const char *name) {
    if (name[0] == 'd') return loader_wrapper(name);
    if ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nvml", 4)) {
        hook *h = find_by_name(name);
        if (h && h->lib == LIB_NVML) pthread_once(&nvml_once, open_nvml);
        return h ? h->wrapper : NULL;
    }
    return NULL;
}

static void write_slot(void **slot, void *value, ElfW(Addr) relro, size_t relro_len) {
    if (*slot == value) return;
    uintptr_t a = (uintptr_t)slot;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = a & ~(uintptr_t)(page - 1);
    /* the loader protects RELRO rounded down to whole pages; the page it ends in stays RW */
    uintptr_t relro_end = (relro + relro_len) & ~(uintptr_t)(page - 1);
    int in_relro = relro_len && a >= (relro & ~(uintptr_t)(page - 1)) && a < relro_end;
    if (in_relro && mprotect((void *)start, (size_t)page, PROT_READ | PROT_WRITE) != 0) return;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (in_relro) mprotect((void *)start, (size_t)page, PROT_READ);
}

typedef struct { ElfW(Addr) lo[8], hi[8]; int n; } writable;
static int in_writable(const writable *w, ElfW(Addr) a) {
    for (int i = 0; i < w->n; i++)
        if (a >= w->lo[i] && a + sizeof(void *) <= w->hi[i]) return 1;
    return 0;
}

static void patch_table(ElfW(Addr) base, const ElfW(Rela) *rel, size_t bytes,
                        const ElfW(Sym) *symtab, const char *strtab, ElfW(Addr) relro,
                        size_t relro_len, const writable *w) {
    for (size_t i = 0; rel && i < bytes / sizeof *rel; i++) {
        unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
        size_t sym = ELF64_R_SYM(rel[i].r_info);
        if (!sym || !R_SLOT(type) || rel[i].r_addend) continue;
        if (!in_writable(w, base + rel[i].r_offset)) continue; /* text relocations: leave */
        const char *name = strtab + symtab[sym].st_name;
        if (!((name[0] == 'c' && name[1] == 'u') || (name[0] == 'd' && name[1] == 'l') ||
              (name[0] == 'n' && name[1] == 'v')))
            continue;
        void *to = target_for(name);
        if (to) write_slot((void **)(base + rel[i].r_offset), to, relro, relro_len);
    }
}

static ElfW(Addr) skip_bases[4];
static unsigned long long patched_adds;
static pthread_mutex_t patch_lock = PTHREAD_MUTEX_INITIALIZER;

static int patch_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
    const char *n = info->dlpi_name ? info->dlpi_name : "";
    if (strstr(n, "libc.so") || strstr(n, "ld-linux") || strstr(n, "libdl.so") ||
        strstr(n, "linux-vdso"))
        return 0;
    for (int i = 0; i < 4; i++)
        if (skip_bases[i] && skip_bases[i] == info->dlpi_addr) return 0;
    const ElfW(Dyn) *dyn = NULL;
    ElfW(Addr) relro = 0;
    size_t relro_len = 0;
    writable w = {{0}, {0}, 0};
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && w.n < 8) {
            w.lo[w.n] = info->dlpi_addr + ph->p_vaddr;
            w.hi[w.n++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        }
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            relro = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            relro_len = info->dlpi_phdr[i].p_memsz;
        }
    }
    if (!dyn) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmp_bytes = 0, rela_bytes = 0;
    int pltrel = DT_RELA;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strtab = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr); break;
        case DT_JMPREL: jmprel = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmp_bytes = dyn->d_un.d_val; break;
        case DT_PLTREL: pltrel = (int)dyn->d_un.d_val; break;
        case DT_RELA: rela = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr); break;
        case DT_RELASZ: rela_bytes = dyn->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab) return 0;
    if (pltrel == DT_RELA)
        patch_table(info->dlpi_addr, jmprel, jmp_bytes, symtab, strtab, relro, relro_len, &w);
    patch_table(info->dlpi_addr, rela, rela_bytes, symtab, strtab, relro, relro_len, &w);
    return 0;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

/* the load bias of the object holding f (0 if none) */
static ElfW(Addr) bias_of(void *f) {
    Dl_info info;
    struct link_map *lm = NULL;
    return f && dladdr1(f, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm ? lm->l_addr : 0;
}

/* patch every loaded object if any was added since the last pass (the shim and the real
 * driver and NVML keep their own bindings) */
static void patch_loaded(void) {
    unsigned long long adds = 0;
    dl_iterate_phdr(count_adds, &adds);
    if (__atomic_load_n(&patched_adds, __ATOMIC_ACQUIRE) == adds) return;
    pthread_once(&reals_once, open_libs);
    pthread_mutex_lock(&patch_lock);
    skip_bases[0] = bias_of((void *)patch_loaded);
    skip_bases[1] = bias_of(__atomic_load_n(&hooks[H_cuMemAlloc_v2].real, __ATOMIC_ACQUIRE));
    skip_bases[2] = bias_of(__atomic_load_n(&hooks[H_nvmlDeviceGetMemoryInfo].real,
                                            __ATOMIC_ACQUIRE));
    dl_iterate_phdr(patch_object, NULL);
    __atomic_store_n(&patched_adds, adds, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&patch_lock);
}

/* RTLD_DEEPBIND is dropped as well: the patching above runs after dlopen returns, too late for
 * what the new objects' constructors call; without it they bind in the global scope, to us */
static int shallow(int flags) {
    if (!(flags & RTLD_DEEPBIND)) return flags;
    say_once(SAY_DEEPBIND, "gpooling: dlopen(RTLD_DEEPBIND) is loaded without RTLD_DEEPBIND "
             "(so that the quota applies to the library's driver calls)");
    return flags & ~RTLD_DEEPBIND;
}

EXPORT void *dlopen(const char *file, int flags) {
    libc_ready();
    void *h = real_dlopen_fn ? real_dlopen_fn(file, shallow(flags)) : NULL;
    if (h) patch_loaded();
    return h;
}

/* a new link-map namespace would get a libcuda of its own, without the shim: load in the base
 * namespace instead (where LD_PRELOAD put the shim first) */
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int flags) {
    libc_ready();
    void *h;
    if (lmid != LM_ID_BASE) {
        say_once(SAY_DLMOPEN, "gpooling: dlmopen into a new namespace is loaded in the base "
                 "namespace (the quota applies to every namespace)");
        h = real_dlopen_fn ? real_dlopen_fn(file, shallow(flags)) : NULL;
    } else {
        h = real_dlmopen_fn ? real_dlmopen_fn(lmid, file, shallow(flags)) : NULL;
    }
    if (h) patch_loaded();
    return h;
}

static void gpa_swap(const char *symbol, void **pfn, int version, unsigned long long flags) {
    if (!symbol || !pfn || !*pfn) return;
    hook *h = find_by_address(*pfn);
    if (!h) h = find_by_base(symbol, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0,
                             version);
    if (h) *pfn = wrap(h, *pfn);
}

typedef CUresult (*gpa_fn)(const char *, void **, int, unsigned long long);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                                 unsigned long long flags) {
    gpa_fn f = REAL(cuGetProcAddress, gpa_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS) gpa_swap(symbol, pfn, version, flags);
    return rc;
}

typedef CUresult (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    unsigned long long flags, int *status) {
    gpa2_fn f = REAL(cuGetProcAddress_v2, gpa2_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS) gpa_swap(symbol, pfn, version, flags);
    return rc;
}

#define AS_HOOK(n, b, v, p, l) hooks[H_##n] = (hook){#n, b, v, p, l, (void *)n, NULL};
__attribute__((constructor)) static void register_hooks(void) {
    HOOKS(AS_HOOK)
    pthread_atfork(NULL, NULL, after_fork_child);
    pthread_atfork(NULL, NULL, vm_after_fork);
}
