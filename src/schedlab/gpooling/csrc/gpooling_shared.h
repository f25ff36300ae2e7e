/* The region one virtual device's processes share with each other and with the control plane.
 *
 * gPooling (../shared/papers/14-gpooling.md) enforces a virtual device's quota across every
 * process attached to it, so the counters live in one mmap'ed file rather than in each process.
 * The Python side (schedlab/gpooling/shm.py) reads and writes the same layout: 64 little-endian
 * 64-bit slots. Keep the two in step.
 */
#ifndef GPOOLING_SHARED_H
#define GPOOLING_SHARED_H

#include <stdint.h>

#define GPOOLING_MAGIC 0x4d48534c4f4f5047ULL /* the bytes "GPOOLSHM" */
#define GPOOLING_INITIALISING 1ULL
#define GPOOLING_VERSION 1ULL
#define GPOOLING_SLOTS 64
#define GPOOLING_PROCS 20

typedef struct gpooling_region {
    uint64_t magic;          /* 0: GPOOLING_MAGIC once initialised */
    uint64_t version;        /* 1 */
    uint64_t lock;           /* 2: spinlock guarding the token bucket */
    uint64_t memory_limit;   /* 3: bytes; 0 = unlimited */
    uint64_t memory_used;    /* 4: bytes held by all attached processes */
    uint64_t memory_peak;    /* 5 */
    uint64_t share_ppm;      /* 6: compute share in parts per million; >= 1e6 = unthrottled */
    uint64_t window_ns;      /* 7: token-bucket window (burst = share * window) */
    int64_t tokens_ns;       /* 8: device-time allowance left, may go negative (debt) */
    uint64_t last_refill_ns; /* 9: CLOCK_MONOTONIC of the last refill */
    uint64_t alloc_calls;    /* 10 */
    uint64_t free_calls;     /* 11 */
    uint64_t launch_calls;   /* 12 */
    uint64_t oom_rejections; /* 13: allocations refused because of the quota */
    uint64_t throttle_ns;    /* 14: time launches waited for tokens */
    uint64_t busy_ns;        /* 15: device time charged to this virtual device */
    uint64_t attached;       /* 16: processes that ever attached */
    uint64_t live;           /* 17: processes attached now */
    uint64_t sync_calls;     /* 18 */
    uint64_t reaped_bytes;   /* 19: bytes given back on behalf of processes that died */
    uint64_t reserved[4];    /* 20..23 */
    /* 24..63: which process holds how much, so a killed process's memory can be given back */
    struct { uint64_t pid, bytes; } procs[GPOOLING_PROCS];
} gpooling_region;

#endif
