/* gPooling data plane: an LD_PRELOAD shim over the CUDA driver API.
 *
 * gPooling (../shared/papers/14-gpooling.md) builds elastic virtual devices by intercepting the
 * driver, below every framework, so one mechanism works for any CUDA program. This shim
 *   - refuses an allocation that would take the virtual device past its memory quota with the
 *     driver's own CUDA_ERROR_OUT_OF_MEMORY (the real driver is never asked, so a job can never
 *     take memory that belongs to another virtual device on the same GPU);
 *   - reports the quota, not the physical size, from cuMemGetInfo / cuDeviceTotalMem, so
 *     frameworks size their caches to the virtual device;
 *   - time-slices kernel launches with a token bucket: a virtual device with compute share s may
 *     be charged s seconds of device time per second (burst s * window);
 *   - counts everything in a region shared by all processes of the virtual device (mmap'ed file
 *     named by GPOOLING_SHM, see gpooling_shared.h), which the control plane reads as usage.
 *
 * Symbols reach the application three ways and all three are covered: direct linking (this
 * library's exported cu* functions interpose), dlopen + dlsym (dlsym is interposed), and
 * cuGetProcAddress (the CUDA runtime's path since 11.3; its answer is swapped for our wrapper).
 * The real functions come from GPOOLING_REAL_LIBCUDA (default libcuda.so.1).
 *
 * Charging model: a launch costs the wall time of the real call (the stand-in driver runs
 * kernels synchronously, so that is the kernel time) plus the time the next synchronisation
 * waits; on a real GPU launches are asynchronous and the device time shows up at the sync.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpooling_shared.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUfunction;
typedef int CUdevice;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_FOUND 500
#define GPA_PER_THREAD_STREAM (1ULL << 1)
#define EXPORT __attribute__((visibility("default")))
#define GPOOLING_REAPING ((uint64_t)-1)

/* ---- the shared region ------------------------------------------------------------------- */

static gpooling_region *region;
static gpooling_region private_region; /* used when GPOOLING_SHM is not set */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    return strtoull(text, NULL, 10);
}

static void fill_from_env(gpooling_region *r) {
    const char *share = getenv("GPOOLING_COMPUTE_SHARE");
    double s = share && *share ? strtod(share, NULL) : 1.0;
    if (!(s > 0.0)) s = 1.0;
    r->version = GPOOLING_VERSION;
    r->memory_limit = env_u64("GPOOLING_MEMORY_LIMIT", 0);
    r->share_ppm = s >= 1.0 ? 1000000ULL : (uint64_t)(s * 1e6 + 0.5);
    r->window_ns = env_u64("GPOOLING_WINDOW_MS", 100) * 1000000ULL;
    r->tokens_ns = (int64_t)((double)r->window_ns * s);
    r->last_refill_ns = now_ns();
}

static gpooling_region *map_shared(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_size < (off_t)sizeof(gpooling_region) &&
                                ftruncate(fd, sizeof(gpooling_region)) != 0)) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(gpooling_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return NULL;
    gpooling_region *r = p;
    uint64_t expected = 0;
    /* first process to arrive initialises from its environment; the others wait for it */
    if (__atomic_compare_exchange_n(&r->magic, &expected, GPOOLING_INITIALISING, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        fill_from_env(r);
        __atomic_store_n(&r->magic, GPOOLING_MAGIC, __ATOMIC_RELEASE);
    }
    while (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != GPOOLING_MAGIC) usleep(100);
    return r;
}

/* Give back what dead processes held: a SIGKILLed job runs no destructor, but its pid slot
 * still says how much it had. Only the process that clears a slot (CAS) subtracts its bytes. */
static uint64_t reap_region(gpooling_region *r) {
    uint64_t total = 0;
    for (int i = 0; i < GPOOLING_PROCS; i++) {
        uint64_t pid = __atomic_load_n(&r->procs[i].pid, __ATOMIC_ACQUIRE);
        if (!pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (!__atomic_compare_exchange_n(&r->procs[i].pid, &pid, GPOOLING_REAPING, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        uint64_t bytes = __atomic_exchange_n(&r->procs[i].bytes, 0, __ATOMIC_ACQ_REL);
        __atomic_fetch_sub(&r->memory_used, bytes, __ATOMIC_ACQ_REL);
        __atomic_fetch_add(&r->reaped_bytes, bytes, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&r->live, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&r->procs[i].pid, 0, __ATOMIC_RELEASE);
        total += bytes;
    }
    return total;
}

/* for the control plane (loaded with ctypes): reap the region at path; bytes given back or -1 */
EXPORT long long gpooling_reap(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    void *p = mmap(NULL, sizeof(gpooling_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    gpooling_region *r = p;
    long long bytes = r->magic == GPOOLING_MAGIC ? (long long)reap_region(r) : -1;
    munmap(p, sizeof(gpooling_region));
    return bytes;
}

static int my_slot = -1;

static void init_region(void) {
    const char *path = getenv("GPOOLING_SHM");
    if (path && *path) region = map_shared(path);
    if (!region) {
        fill_from_env(&private_region);
        private_region.magic = GPOOLING_MAGIC;
        region = &private_region;
    }
    reap_region(region);
    __atomic_fetch_add(&region->attached, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&region->live, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < GPOOLING_PROCS && my_slot < 0; i++) {
        uint64_t expected = 0;
        if (__atomic_compare_exchange_n(&region->procs[i].pid, &expected, (uint64_t)getpid(), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            my_slot = i;
    }
}

static inline gpooling_region *R(void) {
    pthread_once(&init_once, init_region);
    return region;
}

/* ---- per-process allocation table: pointer or handle -> bytes ------------------------------ */

typedef struct { uint64_t key; uint64_t size; } slot;
static slot *table;
static size_t table_cap, table_len;
static uint64_t process_bytes; /* what this process holds, returned to the quota at exit */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t hash_key(uint64_t key, size_t cap) {
    key ^= key >> 33; key *= 0xff51afd7ed558ccdULL; key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static void table_put_locked(uint64_t key, uint64_t size);

static int table_grow_locked(void) {
    size_t old_cap = table_cap;
    slot *old = table;
    size_t cap = old_cap ? old_cap * 2 : 1024;
    slot *fresh = calloc(cap, sizeof(slot));
    if (!fresh) return -1;
    table = fresh; table_cap = cap; table_len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) table_put_locked(old[i].key, old[i].size);
    free(old);
    return 0;
}

static void table_put_locked(uint64_t key, uint64_t size) {
    if ((table_len + 1) * 2 > table_cap && table_grow_locked() != 0) return;
    size_t i = hash_key(key, table_cap);
    while (table[i].key && table[i].key != key) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) table_len++;
    table[i].key = key; table[i].size = size;
}

/* removes key and returns its size (0 when unknown); backward-shift keeps probing chains intact */
static uint64_t table_take_locked(uint64_t key) {
    if (!table_cap || !key) return 0;
    size_t i = hash_key(key, table_cap);
    while (table[i].key && table[i].key != key) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) return 0;
    uint64_t size = table[i].size;
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

/* ---- quota accounting ------------------------------------------------------------------- */

static int reserve(uint64_t bytes) {
    gpooling_region *r = R();
    __atomic_fetch_add(&r->alloc_calls, 1, __ATOMIC_RELAXED);
    uint64_t limit = __atomic_load_n(&r->memory_limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&r->memory_used, __ATOMIC_RELAXED);
    for (;;) {
        if (limit && (bytes > limit || used > limit - bytes)) {
            __atomic_fetch_add(&r->oom_rejections, 1, __ATOMIC_RELAXED);
            return 0;
        }
        if (__atomic_compare_exchange_n(&r->memory_used, &used, used + bytes, 1,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            break;
    }
    uint64_t peak = __atomic_load_n(&r->memory_peak, __ATOMIC_RELAXED), now = used + bytes;
    while (peak < now && !__atomic_compare_exchange_n(&r->memory_peak, &peak, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return 1;
}

static void unreserve(uint64_t bytes) {
    if (bytes) __atomic_fetch_sub(&R()->memory_used, bytes, __ATOMIC_ACQ_REL);
}

static void remember(uint64_t key, uint64_t bytes) {
    pthread_mutex_lock(&table_lock);
    table_put_locked(key, bytes);
    process_bytes += bytes;
    pthread_mutex_unlock(&table_lock);
    if (my_slot >= 0) __atomic_fetch_add(&region->procs[my_slot].bytes, bytes, __ATOMIC_ACQ_REL);
}

static void forget(uint64_t key) {
    pthread_mutex_lock(&table_lock);
    uint64_t bytes = table_take_locked(key);
    process_bytes -= bytes;
    pthread_mutex_unlock(&table_lock);
    if (my_slot >= 0) __atomic_fetch_sub(&region->procs[my_slot].bytes, bytes, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&R()->free_calls, 1, __ATOMIC_RELAXED);
    unreserve(bytes);
}

__attribute__((destructor)) static void detach(void) {
    if (!region) return;
    unreserve(process_bytes); /* the driver frees a dead context's memory; so does the quota */
    process_bytes = 0;
    __atomic_fetch_sub(&region->live, 1, __ATOMIC_RELAXED);
    if (my_slot >= 0) {
        __atomic_store_n(&region->procs[my_slot].bytes, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&region->procs[my_slot].pid, 0, __ATOMIC_RELEASE);
    }
}

/* ---- token-bucket time slicing ------------------------------------------------------------ */

static void spin_lock(uint64_t *lock) {
    while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void spin_unlock(uint64_t *lock) { __atomic_store_n(lock, 0, __ATOMIC_RELEASE); }

static int throttled(gpooling_region *r) {
    return __atomic_load_n(&r->share_ppm, __ATOMIC_RELAXED) < 1000000ULL;
}

/* waits until the bucket is out of debt; refills at share ns of device time per ns */
static void acquire_tokens(gpooling_region *r) {
    for (;;) {
        spin_lock(&r->lock);
        uint64_t t = now_ns(), share = r->share_ppm ? r->share_ppm : 1;
        int64_t cap = (int64_t)(r->window_ns / 1000000ULL * share);
        int64_t gained = (int64_t)((t - r->last_refill_ns) / 1000000.0 * (double)share);
        r->tokens_ns = r->tokens_ns + gained > cap ? cap : r->tokens_ns + gained;
        r->last_refill_ns = t;
        int64_t debt = r->tokens_ns;
        spin_unlock(&r->lock);
        if (debt >= 0) return;
        uint64_t wait = (uint64_t)((double)(-debt) * 1e6 / (double)share);
        struct timespec ts = {(time_t)(wait / 1000000000ULL), (long)(wait % 1000000000ULL)};
        nanosleep(&ts, NULL);
        __atomic_fetch_add(&r->throttle_ns, wait, __ATOMIC_RELAXED);
    }
}

static void charge(gpooling_region *r, uint64_t cost) {
    __atomic_fetch_add(&r->busy_ns, cost, __ATOMIC_RELAXED);
    if (!throttled(r)) return;
    spin_lock(&r->lock);
    r->tokens_ns -= (int64_t)cost;
    spin_unlock(&r->lock);
}

/* ---- resolving the real driver -------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_fn;
static void *real_lib;

static dlsym_fn real_dlsym(void) {
    if (!real_dlsym_fn) {
        dlsym_fn f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&real_dlsym_fn, f, __ATOMIC_RELEASE);
    }
    return real_dlsym_fn;
}

static void *resolve_real(const char *name) {
    if (!real_lib) {
        const char *path = getenv("GPOOLING_REAL_LIBCUDA");
        real_lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!real_lib) return NULL;
    }
    return real_dlsym()(real_lib, name);
}

/* one entry per intercepted symbol: the wrapper we hand out and the real function behind it */
typedef struct hook {
    const char *name;      /* exported driver symbol */
    const char *base;      /* name cuGetProcAddress is asked for */
    int per_thread_stream; /* the _ptsz flavour returned for per-thread default streams */
    void *wrapper;
    void *real;
} hook;

enum {
    H_ALLOC, H_ALLOC_PITCH, H_ALLOC_MANAGED, H_ALLOC_ASYNC, H_ALLOC_ASYNC_PTSZ, H_FREE,
    H_FREE_ASYNC, H_FREE_ASYNC_PTSZ, H_CREATE, H_RELEASE, H_GET_INFO, H_TOTAL_MEM, H_LAUNCH,
    H_LAUNCH_PTSZ, H_LAUNCH_EX, H_LAUNCH_EX_PTSZ, H_CTX_SYNC, H_STREAM_SYNC,
    H_STREAM_SYNC_PTSZ, H_GPA, H_GPA_V2, H_COUNT
};
static hook hooks[H_COUNT];

static void *real_of(int id) {
    void *f = __atomic_load_n(&hooks[id].real, __ATOMIC_ACQUIRE);
    if (!f) {
        f = resolve_real(hooks[id].name);
        __atomic_store_n(&hooks[id].real, f, __ATOMIC_RELEASE);
    }
    return f;
}

#define REAL(id, type) ((type)real_of(id))
#define NOT_FOUND_IF_NULL(f) \
    if (!(f)) return CUDA_ERROR_NOT_FOUND

/* ---- memory wrappers ----------------------------------------------------------------------- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    alloc_fn f = REAL(H_ALLOC, alloc_fn);
    NOT_FOUND_IF_NULL(f);
    if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, bytes);
    if (rc == CUDA_SUCCESS) remember(*dptr, bytes); else unreserve(bytes);
    return rc;
}

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int element) {
    pitch_fn f = REAL(H_ALLOC_PITCH, pitch_fn);
    NOT_FOUND_IF_NULL(f);
    uint64_t guess = (uint64_t)width * height;
    if (!reserve(guess)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, pitch, width, height, element);
    if (rc != CUDA_SUCCESS) { unreserve(guess); return rc; }
    uint64_t actual = (uint64_t)*pitch * height;
    if (actual > guess && !reserve(actual - guess)) { /* padding took it past the quota */
        typedef CUresult (*free_fn)(CUdeviceptr);
        REAL(H_FREE, free_fn)(*dptr);
        unreserve(guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess) unreserve(guess - actual);
    remember(*dptr, actual);
    return rc;
}

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned int);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    managed_fn f = REAL(H_ALLOC_MANAGED, managed_fn);
    NOT_FOUND_IF_NULL(f);
    if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, bytes, flags);
    if (rc == CUDA_SUCCESS) remember(*dptr, bytes); else unreserve(bytes);
    return rc;
}

typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
static CUresult alloc_async(int id, CUdeviceptr *dptr, size_t bytes, CUstream stream) {
    async_fn f = REAL(id, async_fn);
    NOT_FOUND_IF_NULL(f);
    if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(dptr, bytes, stream);
    if (rc == CUDA_SUCCESS) remember(*dptr, bytes); else unreserve(bytes);
    return rc;
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) {
    return alloc_async(H_ALLOC_ASYNC, d, n, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) {
    return alloc_async(H_ALLOC_ASYNC_PTSZ, d, n, s);
}

typedef CUresult (*free_fn)(CUdeviceptr);
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    free_fn f = REAL(H_FREE, free_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(dptr);
    if (rc == CUDA_SUCCESS) forget(dptr);
    return rc;
}

typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
static CUresult free_async(int id, CUdeviceptr dptr, CUstream stream) {
    free_async_fn f = REAL(id, free_async_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(dptr, stream);
    if (rc == CUDA_SUCCESS) forget(dptr);
    return rc;
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { return free_async(H_FREE_ASYNC, d, s); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) {
    return free_async(H_FREE_ASYNC_PTSZ, d, s);
}

/* virtual-memory API (PyTorch's expandable segments): physical memory is created here */
typedef CUresult (*create_fn)(unsigned long long *, size_t, const void *, unsigned long long);
EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t bytes, const void *prop,
                            unsigned long long flags) {
    create_fn f = REAL(H_CREATE, create_fn);
    NOT_FOUND_IF_NULL(f);
    if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(handle, bytes, prop, flags);
    if (rc == CUDA_SUCCESS) remember(*handle, bytes); else unreserve(bytes);
    return rc;
}

typedef CUresult (*release_fn)(unsigned long long);
EXPORT CUresult cuMemRelease(unsigned long long handle) {
    release_fn f = REAL(H_RELEASE, release_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(handle);
    if (rc == CUDA_SUCCESS) forget(handle);
    return rc;
}

typedef CUresult (*info_fn)(size_t *, size_t *);
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    info_fn f = REAL(H_GET_INFO, info_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(free_bytes, total_bytes);
    gpooling_region *r = R();
    uint64_t limit = __atomic_load_n(&r->memory_limit, __ATOMIC_RELAXED);
    if (rc != CUDA_SUCCESS || !limit) return rc;
    uint64_t used = __atomic_load_n(&r->memory_used, __ATOMIC_RELAXED);
    uint64_t left = used >= limit ? 0 : limit - used;
    if (*total_bytes > limit) *total_bytes = limit;
    if (*free_bytes > left) *free_bytes = left;
    return rc;
}

typedef CUresult (*total_fn)(size_t *, CUdevice);
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    total_fn f = REAL(H_TOTAL_MEM, total_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(bytes, dev);
    uint64_t limit = __atomic_load_n(&R()->memory_limit, __ATOMIC_RELAXED);
    if (rc == CUDA_SUCCESS && limit && *bytes > limit) *bytes = limit;
    return rc;
}

/* ---- launch and synchronisation wrappers -------------------------------------------------- */

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
static CUresult launch(int id, CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **p, void **e) {
    launch_fn f = REAL(id, launch_fn);
    NOT_FOUND_IF_NULL(f);
    gpooling_region *r = R();
    __atomic_fetch_add(&r->launch_calls, 1, __ATOMIC_RELAXED);
    if (!throttled(r)) return f(fn, gx, gy, gz, bx, by, bz, shmem, s, p, e);
    acquire_tokens(r);
    uint64_t start = now_ns();
    CUresult rc = f(fn, gx, gy, gz, bx, by, bz, shmem, s, p, e);
    charge(r, now_ns() - start);
    return rc;
}
EXPORT CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **p,
                               void **e) {
    return launch(H_LAUNCH, fn, gx, gy, gz, bx, by, bz, shmem, s, p, e);
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                    CUstream s, void **p, void **e) {
    return launch(H_LAUNCH_PTSZ, fn, gx, gy, gz, bx, by, bz, shmem, s, p, e);
}

typedef CUresult (*launch_ex_fn)(const void *, CUfunction, void **, void **);
static CUresult launch_ex(int id, const void *config, CUfunction fn, void **p, void **e) {
    launch_ex_fn f = REAL(id, launch_ex_fn);
    NOT_FOUND_IF_NULL(f);
    gpooling_region *r = R();
    __atomic_fetch_add(&r->launch_calls, 1, __ATOMIC_RELAXED);
    if (!throttled(r)) return f(config, fn, p, e);
    acquire_tokens(r);
    uint64_t start = now_ns();
    CUresult rc = f(config, fn, p, e);
    charge(r, now_ns() - start);
    return rc;
}
EXPORT CUresult cuLaunchKernelEx(const void *c, CUfunction fn, void **p, void **e) {
    return launch_ex(H_LAUNCH_EX, c, fn, p, e);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const void *c, CUfunction fn, void **p, void **e) {
    return launch_ex(H_LAUNCH_EX_PTSZ, c, fn, p, e);
}

typedef CUresult (*ctx_sync_fn)(void);
EXPORT CUresult cuCtxSynchronize(void) {
    ctx_sync_fn f = REAL(H_CTX_SYNC, ctx_sync_fn);
    NOT_FOUND_IF_NULL(f);
    gpooling_region *r = R();
    __atomic_fetch_add(&r->sync_calls, 1, __ATOMIC_RELAXED);
    uint64_t start = now_ns();
    CUresult rc = f();
    charge(r, now_ns() - start); /* asynchronous kernels' device time surfaces here */
    return rc;
}

typedef CUresult (*stream_sync_fn)(CUstream);
static CUresult stream_sync(int id, CUstream s) {
    stream_sync_fn f = REAL(id, stream_sync_fn);
    NOT_FOUND_IF_NULL(f);
    gpooling_region *r = R();
    __atomic_fetch_add(&r->sync_calls, 1, __ATOMIC_RELAXED);
    uint64_t start = now_ns();
    CUresult rc = f(s);
    charge(r, now_ns() - start);
    return rc;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { return stream_sync(H_STREAM_SYNC, s); }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
    return stream_sync(H_STREAM_SYNC_PTSZ, s);
}

/* ---- symbol lookup: dlsym and cuGetProcAddress hand out our wrappers ----------------------- */

static hook *find_by_name(const char *name) {
    for (int i = 0; i < H_COUNT; i++)
        if (hooks[i].name && strcmp(hooks[i].name, name) == 0) return &hooks[i];
    return NULL;
}

static hook *find_by_base(const char *base, int per_thread_stream, int version) {
    if (version < 3020) return NULL; /* the pre-_v2 32-bit variants are passed through */
    if (strcmp(base, "cuGetProcAddress") == 0)
        return &hooks[version >= 12000 ? H_GPA_V2 : H_GPA];
    hook *plain = NULL;
    for (int i = 0; i < H_COUNT; i++) {
        if (!hooks[i].base || strcmp(hooks[i].base, base) != 0) continue;
        if (hooks[i].per_thread_stream == per_thread_stream) return &hooks[i];
        if (!hooks[i].per_thread_stream) plain = &hooks[i];
    }
    return plain;
}

static void adopt(hook *h, void **pfn) {
    if (!h || !*pfn || *pfn == h->wrapper) return;
    void *expected = NULL;
    __atomic_compare_exchange_n(&h->real, &expected, *pfn, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    *pfn = h->wrapper;
}

EXPORT void *dlsym(void *handle, const char *name) {
    void *f = real_dlsym()(handle, name);
    if (f && name[0] == 'c' && name[1] == 'u') {
        hook *h = find_by_name(name);
        if (h) adopt(h, &f);
    }
    return f;
}

typedef CUresult (*gpa_fn)(const char *, void **, int, unsigned long long);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                                 unsigned long long flags) {
    gpa_fn f = REAL(H_GPA, gpa_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && symbol)
        adopt(find_by_base(symbol, (flags & GPA_PER_THREAD_STREAM) != 0, version), pfn);
    return rc;
}

typedef CUresult (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    unsigned long long flags, int *status) {
    gpa2_fn f = REAL(H_GPA_V2, gpa2_fn);
    NOT_FOUND_IF_NULL(f);
    CUresult rc = f(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && symbol)
        adopt(find_by_base(symbol, (flags & GPA_PER_THREAD_STREAM) != 0, version), pfn);
    return rc;
}

#define HOOK(id, n, b, ptsz) hooks[id] = (hook){#n, b, ptsz, (void *)n, NULL}
__attribute__((constructor)) static void register_hooks(void) {
    HOOK(H_ALLOC, cuMemAlloc_v2, "cuMemAlloc", 0);
    HOOK(H_ALLOC_PITCH, cuMemAllocPitch_v2, "cuMemAllocPitch", 0);
    HOOK(H_ALLOC_MANAGED, cuMemAllocManaged, "cuMemAllocManaged", 0);
    HOOK(H_ALLOC_ASYNC, cuMemAllocAsync, "cuMemAllocAsync", 0);
    HOOK(H_ALLOC_ASYNC_PTSZ, cuMemAllocAsync_ptsz, "cuMemAllocAsync", 1);
    HOOK(H_FREE, cuMemFree_v2, "cuMemFree", 0);
    HOOK(H_FREE_ASYNC, cuMemFreeAsync, "cuMemFreeAsync", 0);
    HOOK(H_FREE_ASYNC_PTSZ, cuMemFreeAsync_ptsz, "cuMemFreeAsync", 1);
    HOOK(H_CREATE, cuMemCreate, "cuMemCreate", 0);
    HOOK(H_RELEASE, cuMemRelease, "cuMemRelease", 0);
    HOOK(H_GET_INFO, cuMemGetInfo_v2, "cuMemGetInfo", 0);
    HOOK(H_TOTAL_MEM, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 0);
    HOOK(H_LAUNCH, cuLaunchKernel, "cuLaunchKernel", 0);
    HOOK(H_LAUNCH_PTSZ, cuLaunchKernel_ptsz, "cuLaunchKernel", 1);
    HOOK(H_LAUNCH_EX, cuLaunchKernelEx, "cuLaunchKernelEx", 0);
    HOOK(H_LAUNCH_EX_PTSZ, cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 1);
    HOOK(H_CTX_SYNC, cuCtxSynchronize, "cuCtxSynchronize", 0);
    HOOK(H_STREAM_SYNC, cuStreamSynchronize, "cuStreamSynchronize", 0);
    HOOK(H_STREAM_SYNC_PTSZ, cuStreamSynchronize_ptsz, "cuStreamSynchronize", 1);
    HOOK(H_GPA, cuGetProcAddress, NULL, 0);
    HOOK(H_GPA_V2, cuGetProcAddress_v2, "cuGetProcAddress", 0);
    R();
}
