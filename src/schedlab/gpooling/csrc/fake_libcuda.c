/* STAND-IN DRIVER, NOT CUDA: a tiny libcuda.so.1 exporting the driver-API symbols the gPooling
 * shim intercepts (with cuda.h's CUDA 12 signatures, including the pre-3.2 unversioned entry
 * points), so interception, quota enforcement and accounting run for real on machines without a
 * GPU (CI). It models one device:
 *   - memory: FAKE_CUDA_MEMORY bytes (default 16 GiB) handed out as unique fake addresses; the
 *     driver's own CUDA_ERROR_OUT_OF_MEMORY when the physical device is full. Arrays take the
 *     size their descriptor implies; a context takes FAKE_CUDA_CONTEXT_BYTES (default 0), a
 *     module FAKE_CUDA_MODULE_BYTES (default 1 MiB); pinned host memory is counted apart;
 *   - kernels: every launch family busy-waits gridDimX microseconds, synchronously, so device
 *     time is wall time (cuGraphLaunch: the graph handle points at an unsigned microsecond count;
 *     cuLaunch: 0; cuLaunchGrid*: grid width);
 *   - cuGetProcAddress resolves a base name, version and per-thread-stream flag to the variant,
 *     as the real driver does (cuMemAlloc at 3010 is the legacy entry point);
 *   - fakecuStats() exposes what the driver really saw, so tests prove a refused allocation never
 *     reached it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpooling_cuda.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t capacity, used, host_used, next_address = 0x7f0000000000ULL;
static uint64_t next_small = 0x10000000ULL; /* 32-bit addresses for the legacy entry points */
static uint64_t allocs, frees, launches, syncs;

typedef struct { uint64_t key, size; int host; int refs; int pool; } entry;
/* refs: IPC opens + 1; pool: 1 + index of the stream-ordered pool it came from, 0 if none */
static entry live[1 << 16]; /* enough for tests; a full table is reported as out of memory */

static uint64_t env_bytes(const char *name, uint64_t fallback) {
    const char *text = getenv(name);
    return text && *text ? strtoull(text, NULL, 10) : fallback;
}

static void init_capacity(void) {
    if (!capacity) capacity = env_bytes("FAKE_CUDA_MEMORY", 16ULL << 30);
}

static CUresult take_kind(unsigned long long *out, uint64_t bytes, int host, int small) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    init_capacity();
    allocs++;
    if (!host && bytes > capacity - used) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < sizeof live / sizeof *live; i++) {
        if (live[i].key) continue;
        uint64_t *next = small ? &next_small : &next_address;
        live[i].key = *next;
        live[i].size = bytes;
        live[i].host = host;
        live[i].refs = 1;
        live[i].pool = 0;
        *out = *next;
        *next += ((bytes ? bytes : 1) + 511) & ~511ULL;
        if (host) host_used += bytes; else used += bytes;
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult take(unsigned long long *out, uint64_t bytes) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    return take_kind(out, bytes, 0, 0);
}
static CUresult take_ptr(void **out, uint64_t bytes, int host) {
    unsigned long long key = 0;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take_kind(&key, bytes, host, 0);
    if (rc == CUDA_SUCCESS) *out = (void *)(uintptr_t)key;
    return rc;
}

static entry *live_of(uint64_t key) {
    for (size_t i = 0; key && i < sizeof live / sizeof *live; i++)
        if (live[i].key == key) return &live[i];
    return NULL;
}
/* one reference fewer; the memory goes with the last (an IPC import keeps it alive) */
static void pool_returned_locked(int pool, uint64_t bytes);
static CUresult drop_live_locked(entry *e) {
    frees++;
    if (--e->refs > 0) return CUDA_SUCCESS;
    if (e->pool) pool_returned_locked(e->pool - 1, e->size); /* back to its pool, still held */
    else if (e->host) host_used -= e->size;
    else used -= e->size;
    e->key = 0;
    return CUDA_SUCCESS;
}
static CUresult give_back(uint64_t key) {
    pthread_mutex_lock(&lock);
    entry *e = live_of(key);
    CUresult rc = e ? drop_live_locked(e) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuInit(unsigned int flags) { (void)flags; init_capacity(); return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (!d || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}

/* ---- linear memory ---- */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { return take(d, n); }
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *d, unsigned int n) {
    unsigned long long key = 0;
    if (!d || !n) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take_kind(&key, n, 0, 1);
    if (rc == CUDA_SUCCESS) *d = (CUdeviceptr_v1)key;
    return rc;
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *d, size_t n, unsigned f) { (void)f; return take(d, n); }
/* ---- stream-ordered allocation: the driver API's pool rules ----
 * A pool holds physical memory ("reserved"); an allocation takes from what it holds and grows it
 * when short. cuMemFreeAsync gives the memory back to the pool, not to the device: the pool
 * keeps it until a synchronisation (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize)
 * finds it holding more than its release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default
 * 0), or cuMemPoolTrimTo asks. A destroyed pool's memory goes once its last allocation is
 * freed. cuMemAllocAsync takes from the device's current pool (cuDeviceSetMemPool; the
 * default pool unless changed). Streams are not modelled: everything happens at the call. */
typedef struct {
    uint64_t reserved, used, threshold, reserved_high, used_high;
    int live, destroyed;
} pool_t;
#define POOLS 64
static pool_t pools[POOLS] = {{0, 0, 0, 0, 0, 1, 0}}; /* pools[0]: device 0's default pool */
static int current_pool;

static int pool_index(CUmemoryPool p) {
    ptrdiff_t i = (pool_t *)p - pools;
    return p && i >= 0 && i < POOLS && pools[i].live && !pools[i].destroyed ? (int)i : -1;
}
/* give the pool's unused memory above keep back to the device */
static void pool_trim_locked(pool_t *q, uint64_t keep) {
    uint64_t floor = q->used > keep ? q->used : keep;
    if (q->reserved <= floor) return;
    used -= q->reserved - floor;
    q->reserved = floor;
}
static void pool_returned_locked(int pool, uint64_t bytes) {
    pool_t *q = &pools[pool];
    q->used -= bytes;
    if (q->destroyed && !q->used) { pool_trim_locked(q, 0); q->live = 0; }
}
static CUresult pool_take(CUdeviceptr *d, size_t n, int pool) {
    if (!d || !n || pool < 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    init_capacity();
    allocs++;
    pool_t *q = &pools[pool];
    uint64_t slack = q->reserved - q->used, grow = n > slack ? n - slack : 0;
    if (grow > capacity - used) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < sizeof live / sizeof *live; i++) {
        if (live[i].key) continue;
        live[i] = (entry){next_address, n, 0, 1, pool + 1};
        *d = next_address;
        next_address += (n + 511) & ~511ULL;
        q->reserved += grow;
        used += grow;
        q->used += n;
        if (q->reserved > q->reserved_high) q->reserved_high = q->reserved;
        if (q->used > q->used_high) q->used_high = q->used;
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) {
    (void)s;
    return pool_take(d, n, __atomic_load_n(&current_pool, __ATOMIC_RELAXED));
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) {
    return cuMemAllocAsync(d, n, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) {
    (void)s;
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    pthread_mutex_unlock(&lock);
    return pool_take(d, n, i);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p,
                                             CUstream s) {
    return cuMemAllocFromPoolAsync(d, n, p, s);
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice dev) {
    if (!p || dev != 0) return CUDA_ERROR_INVALID_VALUE;
    *p = &pools[0];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *p, CUdevice dev) {
    if (!p || dev != 0) return CUDA_ERROR_INVALID_VALUE;
    *p = &pools[__atomic_load_n(&current_pool, __ATOMIC_RELAXED)];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool p) {
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    if (i >= 0 && dev == 0) current_pool = i;
    pthread_mutex_unlock(&lock);
    return i >= 0 && dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    *dev = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *p, const void *props) {
    if (!p || !props) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 1; i < POOLS; i++) {
        if (pools[i].live) continue;
        pools[i] = (pool_t){0, 0, 0, 0, 0, 1, 0};
        *p = &pools[i];
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) {
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    if (i > 0) {
        pools[i].destroyed = 1;
        if (current_pool == i) current_pool = 0;
        pool_trim_locked(&pools[i], 0);
        if (!pools[i].used) pools[i].live = 0;
    }
    pthread_mutex_unlock(&lock);
    return i > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* the default pool is not destroyed */
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    if (i >= 0) pool_trim_locked(&pools[i], keep);
    pthread_mutex_unlock(&lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* attributes: 1-3 reuse flags (int), 4 release threshold, 5/6 reserved current/high, 7/8 used
 * current/high (cuuint64_t); the high-water marks may only be reset to 0 */
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool p, int attr, void *value) {
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    if (i >= 0 && value) {
        uint64_t v = attr >= 4 ? *(uint64_t *)value : 0;
        rc = CUDA_SUCCESS;
        if (attr == 4) pools[i].threshold = v;
        else if (attr == 6 && !v) pools[i].reserved_high = pools[i].reserved;
        else if (attr == 8 && !v) pools[i].used_high = pools[i].used;
        else if (attr < 1 || attr > 3) rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool p, int attr, void *value) {
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    int i = pool_index(p);
    if (i < 0 || !value) rc = CUDA_ERROR_INVALID_VALUE;
    else if (attr >= 1 && attr <= 3) *(int *)value = 1;
    else if (attr == 4) *(uint64_t *)value = pools[i].threshold;
    else if (attr == 5) *(uint64_t *)value = pools[i].reserved;
    else if (attr == 6) *(uint64_t *)value = pools[i].reserved_high;
    else if (attr == 7) *(uint64_t *)value = pools[i].used;
    else if (attr == 8) *(uint64_t *)value = pools[i].used_high;
    else rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}
/* a synchronisation: every pool above its release threshold gives back what it does not use */
static void pools_at_sync(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < POOLS; i++)
        if (pools[i].live && pools[i].reserved > pools[i].threshold)
            pool_trim_locked(&pools[i], pools[i].threshold);
    pthread_mutex_unlock(&lock);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *d, size_t *pitch, size_t w, size_t h,
                                   unsigned e) {
    (void)e;
    *pitch = (w + 511) & ~(size_t)511; /* rows padded to 512 bytes, as real drivers pad */
    return take(d, (uint64_t)*pitch * h);
}
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *d, unsigned int *pitch, unsigned int w,
                                unsigned int h, unsigned int e) {
    (void)e;
    unsigned long long key = 0;
    *pitch = (w + 511) & ~511U;
    CUresult rc = take_kind(&key, (uint64_t)*pitch * h, 0, 1);
    if (rc == CUDA_SUCCESS) *d = (CUdeviceptr_v1)key;
    return rc;
}
/* cuMemFree synchronises the device (cudaFree's implicit synchronisation), so pools trim */
static void pools_at_sync(void);
EXPORT CUresult cuMemFree_v2(CUdeviceptr d) {
    CUresult rc = give_back(d);
    pools_at_sync();
    return rc;
}
EXPORT CUresult cuMemFree(CUdeviceptr_v1 d) { return cuMemFree_v2(d); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { (void)s; return give_back(d); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { (void)s; return give_back(d); }

/* ---- virtual memory management: the driver API's documented lifetime rules ----
 * cuMemCreate makes a physical allocation with one reference (its handle). cuMemMap adds one
 * per mapping, cuMemRetainAllocationHandle one per handle it returns (the same value), an import
 * of an exported handle one more; cuMemRelease and cuMemUnmap each drop one. The memory is
 * freed when the last goes: "memory is not freed until all mappings are unmapped" (cuMemRelease).
 * Mappings must lie in a reserved range and not overlap; cuMemUnmap takes whole mappings (several
 * laid end to end are fine); cuMemAddressFree refuses a range that is still mapped. */
typedef struct { uint64_t handle, size; int64_t refs; } vmm_alloc;
typedef struct { uint64_t va, size, handle; } vmm_map;
typedef struct { uint64_t va, size; } vmm_range;
#define VMM_MAX 4096
static vmm_alloc vallocs[VMM_MAX];
static vmm_map vmaps[VMM_MAX];
static vmm_range vranges[VMM_MAX];

static vmm_alloc *valloc_of(uint64_t h) {
    for (int i = 0; h && i < VMM_MAX; i++)
        if (vallocs[i].handle == h) return &vallocs[i];
    return NULL;
}
static void vunref_locked(vmm_alloc *a) {
    if (--a->refs > 0) return;
    used -= a->size;
    frees++;
    a->handle = 0;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const void *p,
                            unsigned long long f) {
    (void)p; (void)f;
    if (!h || !n) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    init_capacity();
    allocs++;
    vmm_alloc *slot = valloc_of(0);
    for (int i = 0; !slot && i < VMM_MAX; i++)
        if (!vallocs[i].handle) slot = &vallocs[i];
    if (n > capacity - used || !slot) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *slot = (vmm_alloc){next_small, n, 1};
    next_small += 4096; /* handles are opaque ids, not addresses */
    used += n;
    *h = slot->handle;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    pthread_mutex_lock(&lock);
    vmm_alloc *a = valloc_of(h);
    if (a) vunref_locked(a);
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags) {
    (void)align; (void)addr; (void)flags;
    if (!ptr || !size) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < VMM_MAX; i++) {
        if (vranges[i].size) continue;
        vranges[i] = (vmm_range){next_address, size};
        *ptr = next_address;
        next_address += (size + 0x1fffff) & ~0x1fffffULL;
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static int range_mapped_locked(uint64_t va, uint64_t size) {
    for (int i = 0; i < VMM_MAX; i++)
        if (vmaps[i].size && vmaps[i].va < va + size && va < vmaps[i].va + vmaps[i].size)
            return 1;
    return 0;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < VMM_MAX; i++)
        if (vranges[i].size && vranges[i].va == ptr && vranges[i].size == size &&
            !range_mapped_locked(ptr, size)) {
            vranges[i].size = 0;
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle h, unsigned long long flags) {
    (void)flags;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    vmm_alloc *a = valloc_of(h);
    int reserved = 0;
    for (int i = 0; i < VMM_MAX && !reserved; i++)
        reserved = vranges[i].size && ptr >= vranges[i].va &&
                   ptr + size <= vranges[i].va + vranges[i].size;
    if (!a) rc = CUDA_ERROR_INVALID_HANDLE;
    else if (reserved && size && offset + size <= a->size && !range_mapped_locked(ptr, size))
        for (int i = 0; i < VMM_MAX; i++) {
            if (vmaps[i].size) continue;
            vmaps[i] = (vmm_map){ptr, size, h};
            a->refs++;
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&lock);
    uint64_t at = ptr, end = (uint64_t)ptr + size;
    int whole = size > 0;
    while (whole && at < end) { /* whole mappings only, end to end */
        int found = 0;
        for (int i = 0; i < VMM_MAX && !found; i++)
            if (vmaps[i].size && vmaps[i].va == at && at + vmaps[i].size <= end) {
                at += vmaps[i].size;
                found = 1;
            }
        whole = found;
    }
    if (whole)
        for (int i = 0; i < VMM_MAX; i++)
            if (vmaps[i].size && vmaps[i].va >= ptr && vmaps[i].va < end) {
                vmm_alloc *a = valloc_of(vmaps[i].handle);
                vmaps[i].size = 0;
                if (a) vunref_locked(a);
            }
    pthread_mutex_unlock(&lock);
    return whole ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    uint64_t va = (uint64_t)(uintptr_t)addr;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; h && i < VMM_MAX; i++)
        if (vmaps[i].size && va >= vmaps[i].va && va < vmaps[i].va + vmaps[i].size) {
            vmm_alloc *a = valloc_of(vmaps[i].handle);
            if (a) { a->refs++; *h = a->handle; rc = CUDA_SUCCESS; }
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}
/* shareable handles (POSIX file descriptor type): the descriptor names the allocation; an
 * import in this process takes one more reference (another process's stand-in has no memory
 * to share: the stand-in models one process's view) */
static int export_fd[VMM_MAX];
static uint64_t export_handle[VMM_MAX];
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
                                             unsigned long long flags) {
    (void)type; (void)flags;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (out && valloc_of(h))
        for (int i = 0; i < VMM_MAX; i++) {
            if (export_handle[i]) continue;
            int fd = dup(2);
            if (fd < 0) break;
            export_fd[i] = fd;
            export_handle[i] = h;
            *(int *)out = fd;
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                               int type) {
    (void)type;
    int fd = (int)(intptr_t)os_handle;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; h && i < VMM_MAX; i++)
        if (export_handle[i] && export_fd[i] == fd) {
            vmm_alloc *a = valloc_of(export_handle[i]);
            if (a) { a->refs++; *h = a->handle; rc = CUDA_SUCCESS; }
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- legacy IPC: the handle carries the allocation's address. Opening one takes a
 * reference: the memory outlives the exporter's cuMemFree until cuIpcCloseMemHandle (the stand-in
 * lets a process open its own handle, which the real driver refuses; there is no second process
 * in the stand-in's model) ---- */
static uint64_t ipc_open[VMM_MAX];
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *out, CUdeviceptr d) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, &d, sizeof d);
    return CUDA_SUCCESS;
}
static entry *live_of(uint64_t key);
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *d, CUipcMemHandle h, unsigned int flags) {
    (void)flags;
    uint64_t key;
    memcpy(&key, h.reserved, sizeof key);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    entry *e = live_of(key);
    for (int i = 0; d && e && i < VMM_MAX; i++) {
        if (ipc_open[i]) continue;
        ipc_open[i] = key;
        e->refs++;
        *d = key;
        rc = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *d, CUipcMemHandle h, unsigned int flags) {
    return cuIpcOpenMemHandle_v2(d, h, flags);
}
static CUresult drop_live_locked(entry *e);
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr d) {
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < VMM_MAX; i++)
        if (ipc_open[i] == d && d) {
            ipc_open[i] = 0;
            entry *e = live_of(d);
            rc = e ? drop_live_locked(e) : CUDA_ERROR_INVALID_VALUE;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- graph memory nodes: the node owns an allocation from when it is added (the real driver
 * reserves the address there and backs it at the graph's launch) until cuGraphDestroy ---- */
static CUresult take(unsigned long long *out, uint64_t bytes);
EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int flags) {
    static unsigned zero_us;
    (void)flags;
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    *g = &zero_us; /* cuGraphLaunch reads a microsecond count through the handle */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                       size_t n, CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    (void)g; (void)deps; (void)n;
    if (!node || !params) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take(&params->dptr, params->bytesize);
    if (rc == CUDA_SUCCESS) *node = (CUgraphNode)(uintptr_t)params->dptr;
    return rc;
}
EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                               CUgraphNodeParams *params) {
    if (!params || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_NOT_SUPPORTED;
    /* the union that follows the type starts with CUDA_MEM_ALLOC_NODE_PARAMS */
    return cuGraphAddMemAllocNode(node, g, deps, n, (CUDA_MEM_ALLOC_NODE_PARAMS *)(params + 1));
}

/* ---- cuGetExportTable: one private table, standing in for the driver's hidden entry points,
 * whose first function allocates device memory ({0xa1, 0x11, ...} below) ---- */
static CUresult hidden_alloc(CUdeviceptr *d, size_t n) { return take(d, n); }
static const void *hidden_table[2] = {(void *)(sizeof(void *) * 2), (void *)hidden_alloc};
static const unsigned char hidden_id[16] = {0xa1, 0x11, 0x0c, 0xa7, 0xe0, 0x00, 0x40, 0x00,
                                            0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
/* and the runtime's module-registration interface (its id as libcudart asks for it): entry 1
 * loads a module from a fatbin wrapper {magic, version, data, ...}; the stand-in's "fatbin"
 * data is the module's static device memory in bytes */
typedef struct { unsigned magic, version; const uint64_t *data; const void *more; } fatbin_wrapper;
static CUresult module_from_fatbin(CUmodule *m, const fatbin_wrapper *w) {
    if (!m || !w || w->magic != 0x466243B1u) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = w->data ? *w->data : env_bytes("FAKE_CUDA_MODULE_BYTES", 1 << 20);
    return take_ptr(m, bytes, 0);
}
static const void *runtime_table[10] = {(void *)(sizeof(void *) * 10), (void *)module_from_fatbin};
static const unsigned char runtime_id[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                             0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
    if (!memcmp(id->bytes, runtime_id, 16)) *table = runtime_table;
    else if (!memcmp(id->bytes, hidden_id, 16)) *table = hidden_table;
    else return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/* ---- arrays ---- */
static CUresult take_array(void **out, uint64_t bytes) {
    if (!out || bytes == UINT64_MAX || !bytes) return CUDA_ERROR_INVALID_VALUE;
    return take_ptr(out, bytes, 0);
}
EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return take_array(out, gp_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0, 1));
}
EXPORT CUresult cuArrayCreate(CUarray *out, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return take_array(out, gp_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0, 1));
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return take_array(out, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format,
                                          d->NumChannels, d->Flags, 1));
}
EXPORT CUresult cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return take_array(out, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format,
                                          d->NumChannels, d->Flags, 1));
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int levels) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return take_array(out, gp_array_bytes(d->Width, d->Height, d->Depth, d->Format,
                                          d->NumChannels, d->Flags, levels));
}
EXPORT CUresult cuArrayDestroy(CUarray a) { return give_back((uintptr_t)a); }
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) { return give_back((uintptr_t)a); }

/* ---- pinned host memory ---- */
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n) { return take_ptr(p, n, 1); }
EXPORT CUresult cuMemAllocHost(void **p, unsigned int n) { return take_ptr(p, n, 1); }
EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned int f) { (void)f; return take_ptr(p, n, 1); }
EXPORT CUresult cuMemFreeHost(void *p) { return give_back((uintptr_t)p); }

/* ---- contexts and modules ---- */
static CUresult new_context(CUcontext *ctx) {
    return take_ptr(ctx, env_bytes("FAKE_CUDA_CONTEXT_BYTES", 0), 0);
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d) { (void)f; (void)d; return new_context(c); }
EXPORT CUresult cuCtxCreate(CUcontext *c, unsigned f, CUdevice d) { (void)f; (void)d; return new_context(c); }
EXPORT CUresult cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned f, CUdevice d) {
    (void)p; (void)n; (void)f; (void)d;
    return new_context(c);
}
EXPORT CUresult cuCtxCreate_v4(CUcontext *c, void *p, unsigned f, CUdevice d) {
    (void)p; (void)f; (void)d;
    return new_context(c);
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return give_back((uintptr_t)c); }
EXPORT CUresult cuCtxDestroy(CUcontext c) { return give_back((uintptr_t)c); }
static CUcontext primary;
static int primary_refs;
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    if (d != 0 || !c) return CUDA_ERROR_INVALID_VALUE;
    if (!primary_refs) {
        CUresult rc = new_context(&primary);
        if (rc != CUDA_SUCCESS) return rc;
    }
    primary_refs++;
    *c = primary;
    return CUDA_SUCCESS;
}
static CUresult drop_primary(CUdevice d, int reset) {
    if (d != 0 || !primary_refs) return CUDA_ERROR_INVALID_VALUE;
    if (reset || --primary_refs == 0) {
        primary_refs = 0;
        return give_back((uintptr_t)primary);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return drop_primary(d, 0); }
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return drop_primary(d, 0); }
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { return drop_primary(d, 1); }
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return drop_primary(d, 1); }
static CUresult new_module(void **m) { return take_ptr(m, env_bytes("FAKE_CUDA_MODULE_BYTES", 1 << 20), 0); }
EXPORT CUresult cuModuleLoad(CUmodule *m, const char *f) { (void)f; return new_module(m); }
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *i) { (void)i; return new_module(m); }
EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *i, unsigned n, void *o, void **v) {
    (void)i; (void)n; (void)o; (void)v;
    return new_module(m);
}
EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *i) { (void)i; return new_module(m); }
EXPORT CUresult cuModuleUnload(CUmodule m) { return give_back((uintptr_t)m); }
EXPORT CUresult cuLibraryLoadData(CUlibrary *l, const void *c, void *jo, void **jv, unsigned nj,
                                  void *lo, void **lv, unsigned nl) {
    (void)c; (void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl;
    return new_module(l);
}
EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *f, void *jo, void **jv,
                                      unsigned nj, void *lo, void **lv, unsigned nl) {
    (void)f; (void)jo; (void)jv; (void)nj; (void)lo; (void)lv; (void)nl;
    return new_module(l);
}
EXPORT CUresult cuLibraryUnload(CUlibrary l) { return give_back((uintptr_t)l); }

/* ---- memory queries ---- */
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    pthread_mutex_lock(&lock);
    init_capacity();
    *free_bytes = capacity - used;
    *total = capacity;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total) {
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    *free_bytes = f > 0xffffffffULL ? 0xffffffffU : (unsigned)f;
    *total = t > 0xffffffffULL ? 0xffffffffU : (unsigned)t;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    (void)dev;
    init_capacity();
    *bytes = capacity;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    (void)dev;
    init_capacity();
    *bytes = capacity > 0xffffffffULL ? 0xffffffffU : (unsigned)capacity;
    return CUDA_SUCCESS;
}

/* ---- launches ---- */
static void busy_us(unsigned us) {
    if (!us) return;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ULL + (uint64_t)b.tv_nsec -
               (uint64_t)a.tv_nsec < (uint64_t)us * 1000ULL);
}

static CUresult run_kernel(unsigned gx) {
    __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
    busy_us(gx);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned sm, CUstream s, void **p,
                               void **e) {
    (void)f; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sm; (void)s; (void)p;
    (void)e;
    return run_kernel(gx);
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned sm, CUstream s,
                                    void **p, void **e) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sm, s, p, e);
}
/* the first field of CUlaunchConfig is gridDimX */
EXPORT CUresult cuLaunchKernelEx(const void *c, CUfunction f, void **p, void **e) {
    (void)f; (void)p; (void)e;
    return run_kernel(c ? *(const unsigned *)c : 0);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const void *c, CUfunction f, void **p, void **e) {
    return cuLaunchKernelEx(c, f, p, e);
}
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned sm,
                                          CUstream s, void **p) {
    (void)f; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sm; (void)s; (void)p;
    return run_kernel(gx);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                               unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                               unsigned sm, CUstream s, void **p) {
    return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, sm, s, p);
}
EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *l, unsigned n,
                                                     unsigned flags) {
    (void)flags;
    for (unsigned i = 0; l && i < n; i++) run_kernel(l[i].gridDimX);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    (void)s;
    return run_kernel(g ? *(const unsigned *)g : 0);
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return cuGraphLaunch(g, s); }
EXPORT CUresult cuLaunch(CUfunction f) { (void)f; return run_kernel(0); }
EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h) {
    (void)f; (void)h;
    return run_kernel(w > 0 ? (unsigned)w : 0);
}
EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) {
    (void)s;
    return cuLaunchGrid(f, w, h);
}
EXPORT CUresult cuCtxSynchronize(void) {
    __atomic_fetch_add(&syncs, 1, __ATOMIC_RELAXED);
    pools_at_sync();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return cuCtxSynchronize(); }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { (void)s; return cuCtxSynchronize(); }
EXPORT CUresult cuEventSynchronize(CUevent e) { (void)e; return cuCtxSynchronize(); }

/* what the driver really saw: device bytes used, allocation calls, frees, launches, syncs,
 * pinned host bytes */
EXPORT void fakecuStats(uint64_t out[6]) {
    pthread_mutex_lock(&lock);
    out[0] = used; out[1] = allocs; out[2] = frees; out[3] = launches; out[4] = syncs;
    out[5] = host_used;
    pthread_mutex_unlock(&lock);
}

EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version,
                                 unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version,
                                    unsigned long long flags, int *status);

#define SYM(n) {#n, (void *)n}
typedef struct { const char *name; void *fn; } symbol;
static const symbol symbols[] = {
    SYM(cuInit), SYM(cuDriverGetVersion), SYM(cuDeviceGetCount), SYM(cuDeviceGet),
    SYM(cuMemAlloc), SYM(cuMemAlloc_v2), SYM(cuMemAllocManaged), SYM(cuMemAllocAsync),
    SYM(cuMemAllocAsync_ptsz), SYM(cuMemAllocFromPoolAsync), SYM(cuMemAllocFromPoolAsync_ptsz),
    SYM(cuMemAllocPitch), SYM(cuMemAllocPitch_v2), SYM(cuMemFree), SYM(cuMemFree_v2),
    SYM(cuMemFreeAsync), SYM(cuMemFreeAsync_ptsz), SYM(cuDeviceGetDefaultMemPool),
    SYM(cuDeviceGetMemPool), SYM(cuDeviceSetMemPool), SYM(cuCtxGetDevice), SYM(cuMemPoolCreate),
    SYM(cuMemPoolDestroy), SYM(cuMemPoolTrimTo), SYM(cuMemPoolSetAttribute),
    SYM(cuMemPoolGetAttribute), SYM(cuMemCreate), SYM(cuMemRelease),
    SYM(cuMemAddressReserve), SYM(cuMemAddressFree), SYM(cuMemMap), SYM(cuMemUnmap),
    SYM(cuMemRetainAllocationHandle), SYM(cuMemExportToShareableHandle),
    SYM(cuMemImportFromShareableHandle), SYM(cuIpcGetMemHandle), SYM(cuIpcOpenMemHandle),
    SYM(cuIpcOpenMemHandle_v2), SYM(cuIpcCloseMemHandle), SYM(cuGraphCreate),
    SYM(cuGraphAddMemAllocNode), SYM(cuGraphAddNode), SYM(cuGetExportTable), SYM(cuArrayCreate),
    SYM(cuArrayCreate_v2), SYM(cuArray3DCreate), SYM(cuArray3DCreate_v2),
    SYM(cuMipmappedArrayCreate), SYM(cuArrayDestroy), SYM(cuMipmappedArrayDestroy),
    SYM(cuMemAllocHost), SYM(cuMemAllocHost_v2), SYM(cuMemHostAlloc), SYM(cuMemFreeHost),
    SYM(cuCtxCreate), SYM(cuCtxCreate_v2), SYM(cuCtxCreate_v3), SYM(cuCtxCreate_v4),
    SYM(cuCtxDestroy), SYM(cuCtxDestroy_v2), SYM(cuDevicePrimaryCtxRetain),
    SYM(cuDevicePrimaryCtxRelease), SYM(cuDevicePrimaryCtxRelease_v2),
    SYM(cuDevicePrimaryCtxReset), SYM(cuDevicePrimaryCtxReset_v2), SYM(cuModuleLoad),
    SYM(cuModuleLoadData), SYM(cuModuleLoadDataEx), SYM(cuModuleLoadFatBinary),
    SYM(cuModuleUnload), SYM(cuLibraryLoadData), SYM(cuLibraryLoadFromFile),
    SYM(cuLibraryUnload), SYM(cuMemGetInfo), SYM(cuMemGetInfo_v2), SYM(cuDeviceTotalMem),
    SYM(cuDeviceTotalMem_v2), SYM(cuLaunchKernel), SYM(cuLaunchKernel_ptsz),
    SYM(cuLaunchKernelEx), SYM(cuLaunchKernelEx_ptsz), SYM(cuLaunchCooperativeKernel),
    SYM(cuLaunchCooperativeKernel_ptsz), SYM(cuLaunchCooperativeKernelMultiDevice),
    SYM(cuGraphLaunch), SYM(cuGraphLaunch_ptsz), SYM(cuLaunch), SYM(cuLaunchGrid),
    SYM(cuLaunchGridAsync), SYM(cuCtxSynchronize), SYM(cuStreamSynchronize),
    SYM(cuStreamSynchronize_ptsz), SYM(cuEventSynchronize), SYM(cuGetProcAddress),
    SYM(cuGetProcAddress_v2),
};

/* base name -> (suffix, first version): the real driver's per-version variants */
typedef struct { const char *base, *suffix; int version; } variant;
static const variant variants[] = {
    {"cuMemAlloc", "_v2", 3020}, {"cuMemAllocPitch", "_v2", 3020}, {"cuMemFree", "_v2", 3020},
    {"cuMemGetInfo", "_v2", 3020}, {"cuDeviceTotalMem", "_v2", 3020},
    {"cuMemAllocHost", "_v2", 3020}, {"cuArrayCreate", "_v2", 3020},
    {"cuArray3DCreate", "_v2", 3020}, {"cuCtxCreate", "_v2", 3020},
    {"cuCtxCreate", "_v3", 11040}, {"cuCtxCreate", "_v4", 12050}, {"cuCtxDestroy", "_v2", 4000},
    {"cuDevicePrimaryCtxRelease", "_v2", 11000}, {"cuDevicePrimaryCtxReset", "_v2", 11000},
    {"cuGetProcAddress", "_v2", 12000}, {"cuIpcOpenMemHandle", "_v2", 11000},
};
static const char *const ptsz_names[] = {
    "cuLaunchKernel", "cuLaunchKernelEx", "cuStreamSynchronize", "cuMemAllocAsync",
    "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuLaunchCooperativeKernel", "cuGraphLaunch"};

static CUresult lookup(const char *name, void **pfn, int version, unsigned long long flags) {
    char full[96];
    const char *suffix = "";
    int best = -1;
    if (!name || !pfn) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
        if (!strcmp(name, variants[i].base) && version >= variants[i].version &&
            variants[i].version > best) {
            suffix = variants[i].suffix;
            best = variants[i].version;
        }
    for (size_t i = 0; i < sizeof ptsz_names / sizeof *ptsz_names; i++)
        if (!strcmp(name, ptsz_names[i]) && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
            suffix = "_ptsz";
    if (strlen(name) + strlen(suffix) >= sizeof full) return CUDA_ERROR_NOT_FOUND;
    strcpy(full, name);
    strcat(full, suffix);
    for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++)
        if (!strcmp(full, symbols[i].name)) { *pfn = symbols[i].fn; return CUDA_SUCCESS; }
    *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version,
                                 unsigned long long flags) {
    return lookup(name, pfn, version, flags);
}
EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version,
                                    unsigned long long flags, int *status) {
    CUresult rc = lookup(name, pfn, version, flags);
    if (status) *status = rc == CUDA_SUCCESS ? 0 : 1; /* SUCCESS, SYMBOL_NOT_FOUND */
    return rc;
}
