/* STAND-IN DRIVER, NOT CUDA: a tiny libcuda.so.1 exporting the driver-API symbols the gPooling
 * shim intercepts, so interception, quota enforcement and accounting run for real on machines
 * without a GPU (CI). It models one device:
 *   - memory: FAKE_CUDA_MEMORY bytes (default 16 GiB) handed out as unique fake addresses; the
 *     driver's own CUDA_ERROR_OUT_OF_MEMORY when the physical device is full;
 *   - kernels: cuLaunchKernel busy-waits gridDimX microseconds, synchronously, so device time is
 *     wall time (a real GPU launches asynchronously; the shim charges that at synchronisation);
 *   - fakecuStats() exposes what the driver really saw, so tests can prove a refused allocation
 *     never reached it.
 * Symbols and signatures follow cuda.h (CUDA 12); nothing here touches real memory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUfunction;
#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define NOT_FOUND 500
#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t capacity, used, next_address = 0x7f0000000000ULL;
static uint64_t allocs, frees, launches, syncs;

typedef struct { uint64_t key, size; } entry;
static entry live[1 << 16]; /* enough for tests; a full table is reported as out of memory */

static void init_capacity(void) {
    if (capacity) return;
    const char *text = getenv("FAKE_CUDA_MEMORY");
    capacity = text && *text ? strtoull(text, NULL, 10) : (16ULL << 30);
}

static CUresult take(unsigned long long *out, uint64_t bytes) {
    if (!out) return INVALID_VALUE;
    if (!bytes) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    init_capacity();
    allocs++;
    if (bytes > capacity - used) { pthread_mutex_unlock(&lock); return OUT_OF_MEMORY; }
    for (size_t i = 0; i < sizeof live / sizeof *live; i++) {
        if (live[i].key) continue;
        live[i].key = next_address;
        live[i].size = bytes;
        *out = next_address;
        next_address += (bytes + 511) & ~511ULL;
        used += bytes;
        pthread_mutex_unlock(&lock);
        return OK;
    }
    pthread_mutex_unlock(&lock);
    return OUT_OF_MEMORY;
}

static CUresult give_back(uint64_t key) {
    pthread_mutex_lock(&lock);
    frees++;
    for (size_t i = 0; i < sizeof live / sizeof *live; i++) {
        if (live[i].key != key || !key) continue;
        used -= live[i].size;
        live[i].key = 0;
        pthread_mutex_unlock(&lock);
        return OK;
    }
    pthread_mutex_unlock(&lock);
    return INVALID_VALUE;
}

EXPORT CUresult cuInit(unsigned int flags) { (void)flags; init_capacity(); return OK; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return OK; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { return take(d, n); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *d, size_t n, unsigned f) { (void)f; return take(d, n); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { (void)s; return take(d, n); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) {
    (void)s;
    return take(d, n);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *d, size_t *pitch, size_t w, size_t h,
                                   unsigned e) {
    (void)e;
    *pitch = (w + 511) & ~(size_t)511; /* rows padded to 512 bytes, as real drivers pad */
    return take(d, (uint64_t)*pitch * h);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr d) { return give_back(d); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { (void)s; return give_back(d); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { (void)s; return give_back(d); }
EXPORT CUresult cuMemCreate(unsigned long long *h, size_t n, const void *p, unsigned long long f) {
    (void)p; (void)f;
    return take(h, n);
}
EXPORT CUresult cuMemRelease(unsigned long long h) { return give_back(h); }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    pthread_mutex_lock(&lock);
    init_capacity();
    *free_bytes = capacity - used;
    *total = capacity;
    pthread_mutex_unlock(&lock);
    return OK;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    (void)dev;
    init_capacity();
    *bytes = capacity;
    return OK;
}

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
    return OK;
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
EXPORT CUresult cuCtxSynchronize(void) { __atomic_fetch_add(&syncs, 1, __ATOMIC_RELAXED); return OK; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return cuCtxSynchronize(); }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { (void)s; return cuCtxSynchronize(); }

/* what the driver really saw: used bytes, allocation calls, frees, launches, syncs */
EXPORT void fakecuStats(uint64_t out[5]) {
    pthread_mutex_lock(&lock);
    out[0] = used; out[1] = allocs; out[2] = frees; out[3] = launches; out[4] = syncs;
    pthread_mutex_unlock(&lock);
}

typedef struct { const char *name; void *fn; } symbol;
EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version,
                                 unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version,
                                    unsigned long long flags, int *status);

static const symbol symbols[] = {
    {"cuInit", (void *)cuInit}, {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount}, {"cuMemAlloc_v2", (void *)cuMemAlloc_v2},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemAllocAsync_ptsz", (void *)cuMemAllocAsync_ptsz},
    {"cuMemAllocPitch_v2", (void *)cuMemAllocPitch_v2}, {"cuMemFree_v2", (void *)cuMemFree_v2},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync}, {"cuMemFreeAsync_ptsz", (void *)cuMemFreeAsync_ptsz},
    {"cuMemCreate", (void *)cuMemCreate}, {"cuMemRelease", (void *)cuMemRelease},
    {"cuMemGetInfo_v2", (void *)cuMemGetInfo_v2},
    {"cuDeviceTotalMem_v2", (void *)cuDeviceTotalMem_v2},
    {"cuLaunchKernel", (void *)cuLaunchKernel}, {"cuLaunchKernel_ptsz", (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
    {"cuLaunchKernelEx_ptsz", (void *)cuLaunchKernelEx_ptsz},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
    {"cuStreamSynchronize_ptsz", (void *)cuStreamSynchronize_ptsz},
    {"cuGetProcAddress", (void *)cuGetProcAddress},
    {"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2},
};

static const char *const v2_names[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                                       "cuDeviceTotalMem"};
static const char *const ptsz_names[] = {"cuLaunchKernel", "cuLaunchKernelEx", "cuStreamSynchronize",
                                         "cuMemAllocAsync", "cuMemFreeAsync"};

/* like the real driver: a base name plus the caller's CUDA version picks the exported variant */
static CUresult lookup(const char *name, void **pfn, int version, unsigned long long flags) {
    char full[96];
    const char *suffix = "";
    for (size_t i = 0; i < sizeof v2_names / sizeof *v2_names; i++)
        if (!strcmp(name, v2_names[i]) && version >= 3020) suffix = "_v2";
    for (size_t i = 0; i < sizeof ptsz_names / sizeof *ptsz_names; i++)
        if (!strcmp(name, ptsz_names[i]) && (flags & 2ULL)) suffix = "_ptsz";
    if (!strcmp(name, "cuGetProcAddress") && version >= 12000) suffix = "_v2";
    if (strlen(name) + strlen(suffix) >= sizeof full) return NOT_FOUND;
    strcpy(full, name);
    strcat(full, suffix);
    for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++)
        if (!strcmp(full, symbols[i].name)) { *pfn = symbols[i].fn; return OK; }
    *pfn = NULL;
    return NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version,
                                 unsigned long long flags) {
    return lookup(name, pfn, version, flags);
}
EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version,
                                    unsigned long long flags, int *status) {
    CUresult rc = lookup(name, pfn, version, flags);
    if (status) *status = rc == OK ? 0 : 1; /* SUCCESS, SYMBOL_NOT_FOUND */
    return rc;
}
