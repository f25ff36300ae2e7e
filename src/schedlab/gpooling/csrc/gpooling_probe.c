/* A driver-API client for testing and benchmarking the gPooling shim without a GPU.
 *
 * It behaves like the CUDA runtime: it dlopens libcuda.so.1 and finds the driver's functions by
 * dlsym, or (with --gpa [--gpa-version V], default 12040) through cuGetProcAddress, so both
 * lookup paths of the shim are used. Each argument is one operation; one JSON line each:
 *   alloc BYTES | alloc1 BYTES (pre-3.2 cuMemAlloc) | pool BYTES (cuMemAllocFromPoolAsync)
 *   array BYTES (cuArrayCreate_v2) | mipmap BYTES (cuMipmappedArrayCreate, 1 level)
 *   free | freeall | pitch WIDTH HEIGHT | create BYTES | release | managed BYTES
 *   async BYTES | info | total | launch N MICROSECONDS | launchex N MICROSECONDS | sync
 *   bench-alloc N | bench-launch N | stats | sleep MILLISECONDS
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*pitch_t)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*create_t)(unsigned long long *, size_t, const void *, unsigned long long);
typedef CUresult (*release_t)(unsigned long long);
typedef CUresult (*managed_t)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*async_t)(CUdeviceptr *, size_t, void *);
typedef CUresult (*info_t)(size_t *, size_t *);
typedef CUresult (*total_t)(size_t *, int);
typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void *, void **, void **);
typedef CUresult (*launch_ex_t)(const void *, void *, void **, void **);
typedef CUresult (*sync_t)(void);
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
typedef void (*stats_t)(uint64_t *);

static void *lib;
static gpa_t gpa;
static int gpa_version = 12040;

static void *fn(const char *base, const char *exported) {
    void *f = NULL;
    if (gpa) {
        int status = 0;
        if (gpa(base, &f, gpa_version, 0, &status) != 0) f = NULL;
    } else {
        f = dlsym(lib, exported);
    }
    if (!f) {
        fprintf(stderr, "probe: cannot resolve %s\n", exported);
        exit(3);
    }
    return f;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#define MAX_HELD 4096
static CUdeviceptr held[MAX_HELD];
static int held_kind[MAX_HELD]; /* 0 pointer, 1 VMM handle */
static int n_held;

static void keep(CUdeviceptr p, int kind) {
    if (n_held < MAX_HELD) { held[n_held] = p; held_kind[n_held++] = kind; }
}

static CUresult drop_last(void) {
    if (!n_held) return 1;
    n_held--;
    if (held_kind[n_held]) return ((release_t)fn("cuMemRelease", "cuMemRelease"))(held[n_held]);
    return ((free_t)fn("cuMemFree", "cuMemFree_v2"))(held[n_held]);
}

static void report_alloc(const char *op, unsigned long long bytes, CUresult rc) {
    printf("{\"op\":\"%s\",\"bytes\":%llu,\"rc\":%d}\n", op, bytes, rc);
}

static int step(char **argv, int i, int argc) {
    const char *op = argv[i];
    unsigned long long a = i + 1 < argc ? strtoull(argv[i + 1], NULL, 10) : 0;
    unsigned long long b = i + 2 < argc ? strtoull(argv[i + 2], NULL, 10) : 0;
    CUdeviceptr p = 0;
    CUresult rc;
    if (!strcmp(op, "alloc")) {
        rc = ((alloc_t)fn("cuMemAlloc", "cuMemAlloc_v2"))(&p, a);
        if (!rc) keep(p, 0);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "alloc1")) { /* not kept: the legacy pointer is 32-bit */
        unsigned d1 = 0;
        rc = ((CUresult(*)(unsigned *, unsigned))fn("cuMemAlloc", "cuMemAlloc"))(&d1,
                                                                                 (unsigned)a);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "pool")) { /* from the device's default pool */
        void *pool = NULL;
        ((CUresult(*)(void **, int))fn("cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool"))(
            &pool, 0);
        rc = ((CUresult(*)(CUdeviceptr *, size_t, void *, void *))fn(
            "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"))(&p, a, pool, NULL);
        if (!rc) keep(p, 0);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "array") || !strcmp(op, "mipmap")) { /* float, one channel, 16384 wide */
        void *h = NULL;
        size_t desc[4] = {16384, a / 65536, 0x20, 1}; /* Width, Height, Format|NumChannels */
        size_t desc3[4] = {16384, a / 65536, 0, 0};   /* Width, Height, Depth, Format... */
        unsigned fmt[4] = {0x20, 1, 0, 0};            /* Format, NumChannels, Flags */
        if (op[0] == 'a') {
            unsigned *tail = (unsigned *)&desc[2];
            tail[0] = 0x20; tail[1] = 1;              /* int Format; unsigned NumChannels */
            rc = ((CUresult(*)(void **, const void *))fn("cuArrayCreate", "cuArrayCreate_v2"))(
                &h, desc);
        } else {
            unsigned char buf[40] = {0};
            memcpy(buf, desc3, 24);
            memcpy(buf + 24, fmt, 12);
            rc = ((CUresult(*)(void **, const void *, unsigned))fn(
                "cuMipmappedArrayCreate", "cuMipmappedArrayCreate"))(&h, buf, 1);
        }
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "managed")) {
        rc = ((managed_t)fn("cuMemAllocManaged", "cuMemAllocManaged"))(&p, a, 1);
        if (!rc) keep(p, 0);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "async")) {
        rc = ((async_t)fn("cuMemAllocAsync", "cuMemAllocAsync"))(&p, a, NULL);
        if (!rc) keep(p, 0);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "create")) {
        rc = ((create_t)fn("cuMemCreate", "cuMemCreate"))(&p, a, NULL, 0);
        if (!rc) keep(p, 1);
        report_alloc(op, a, rc);
        return 1;
    }
    if (!strcmp(op, "pitch")) {
        size_t pitch = 0;
        rc = ((pitch_t)fn("cuMemAllocPitch", "cuMemAllocPitch_v2"))(&p, &pitch, a, b, 4);
        if (!rc) keep(p, 0);
        printf("{\"op\":\"pitch\",\"bytes\":%llu,\"pitch\":%zu,\"rc\":%d}\n", a * b, pitch, rc);
        return 2;
    }
    if (!strcmp(op, "free") || !strcmp(op, "release")) {
        printf("{\"op\":\"%s\",\"rc\":%d}\n", op, drop_last());
        return 0;
    }
    if (!strcmp(op, "freeall")) {
        int bad = 0;
        while (n_held) bad |= drop_last();
        printf("{\"op\":\"freeall\",\"rc\":%d}\n", bad);
        return 0;
    }
    if (!strcmp(op, "info")) {
        size_t free_b = 0, total = 0;
        rc = ((info_t)fn("cuMemGetInfo", "cuMemGetInfo_v2"))(&free_b, &total);
        printf("{\"op\":\"info\",\"free\":%zu,\"total\":%zu,\"rc\":%d}\n", free_b, total, rc);
        return 0;
    }
    if (!strcmp(op, "total")) {
        size_t total = 0;
        rc = ((total_t)fn("cuDeviceTotalMem", "cuDeviceTotalMem_v2"))(&total, 0);
        printf("{\"op\":\"total\",\"total\":%zu,\"rc\":%d}\n", total, rc);
        return 0;
    }
    if (!strcmp(op, "launch") || !strcmp(op, "launchex")) {
        int ex = op[6] == 'e';
        launch_t l = ex ? NULL : (launch_t)fn("cuLaunchKernel", "cuLaunchKernel");
        launch_ex_t le = ex ? (launch_ex_t)fn("cuLaunchKernelEx", "cuLaunchKernelEx") : NULL;
        unsigned config[16] = {(unsigned)b};
        uint64_t t0 = now_ns();
        int bad = 0;
        for (unsigned long long k = 0; k < a; k++)
            bad |= ex ? le(config, NULL, NULL, NULL)
                      : l(NULL, (unsigned)b, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        printf("{\"op\":\"%s\",\"n\":%llu,\"us\":%llu,\"elapsed_ns\":%llu,\"rc\":%d}\n", op, a, b,
               (unsigned long long)(now_ns() - t0), bad);
        return 2;
    }
    if (!strcmp(op, "sync")) {
        printf("{\"op\":\"sync\",\"rc\":%d}\n", ((sync_t)fn("cuCtxSynchronize", "cuCtxSynchronize"))());
        return 0;
    }
    if (!strcmp(op, "bench-alloc")) {
        alloc_t al = (alloc_t)fn("cuMemAlloc", "cuMemAlloc_v2");
        free_t fr = (free_t)fn("cuMemFree", "cuMemFree_v2");
        uint64_t t0 = now_ns();
        for (unsigned long long k = 0; k < a; k++) {
            if (al(&p, 256) == 0) fr(p);
        }
        printf("{\"op\":\"bench-alloc\",\"n\":%llu,\"ns_per_pair\":%.1f}\n", a,
               (double)(now_ns() - t0) / (double)(a ? a : 1));
        return 1;
    }
    if (!strcmp(op, "bench-launch")) {
        launch_t l = (launch_t)fn("cuLaunchKernel", "cuLaunchKernel");
        uint64_t t0 = now_ns();
        for (unsigned long long k = 0; k < a; k++) l(NULL, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        printf("{\"op\":\"bench-launch\",\"n\":%llu,\"ns_per_call\":%.1f}\n", a,
               (double)(now_ns() - t0) / (double)(a ? a : 1));
        return 1;
    }
    if (!strcmp(op, "stats")) {
        uint64_t s[6] = {0};
        stats_t st = (stats_t)dlsym(lib, "fakecuStats");
        if (st) st(s);
        printf("{\"op\":\"stats\",\"driver_used\":%llu,\"driver_allocs\":%llu,"
               "\"driver_frees\":%llu,\"driver_launches\":%llu,\"driver_syncs\":%llu,"
               "\"driver_host\":%llu}\n",
               (unsigned long long)s[0], (unsigned long long)s[1], (unsigned long long)s[2],
               (unsigned long long)s[3], (unsigned long long)s[4], (unsigned long long)s[5]);
        return 0;
    }
    if (!strcmp(op, "sleep")) {
        usleep((useconds_t)(a * 1000ULL));
        return 1;
    }
    fprintf(stderr, "probe: unknown operation %s\n", op);
    exit(2);
}

int main(int argc, char **argv) {
    int first = 1;
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 4;
    }
    if (argc > 1 && !strcmp(argv[1], "--gpa")) {
        gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
        first = 2;
        if (argc > 3 && !strcmp(argv[2], "--gpa-version")) {
            gpa_version = atoi(argv[3]);
            first = 4;
        }
    }
    ((CUresult(*)(unsigned))dlsym(lib, "cuInit"))(0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = first; i < argc; i++) i += step(argv, i, argc);
    return 0;
}
