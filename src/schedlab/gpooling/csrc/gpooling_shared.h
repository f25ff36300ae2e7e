/* The two regions one virtual device's processes share with each other and with the agent.
 *
 * gPooling (../shared/papers/14-gpooling.md) enforces a virtual device's quota across every
 * process attached to it, so the state lives in shared memory rather than in each process. It is
 * split in two so that a job cannot raise its own quota:
 *
 *   - the LIMITS region (gpooling_limits, one page): quota, compute share, revocation. Written
 *     only by the agent / control plane. The shim opens it O_RDONLY and maps it PROT_READ; the
 *     agent hands it over as a sealed memfd (F_SEAL_FUTURE_WRITE: no process, root included, can
 *     get a writable mapping or write() it) or as a file the job's user cannot write.
 *   - the USAGE region (gpooling_usage): counters and the process table. Every process of the
 *     virtual device must write it, so it is writable by the job; the shim never reads a limit
 *     from it, and memory in use is the sum of the per-process slots, each re-asserted by its
 *     owner from process-private memory on every allocation.
 *
 * The Python side (schedlab/gpooling/shm.py) reads and writes the same layouts: little-endian
 * 64-bit slots. Keep the two in step.
 */
#ifndef GPOOLING_SHARED_H
#define GPOOLING_SHARED_H

#include <stdint.h>

#define GPOOLING_MAGIC 0x4d48534c4f4f5047ULL        /* the bytes "GPOOLSHM" */
#define GPOOLING_LIMITS_MAGIC 0x4d494c4c4f4f5047ULL /* the bytes "GPOOLLIM" */
#define GPOOLING_VERSION 2ULL
#define GPOOLING_HEADER_SLOTS 64
#define GPOOLING_PROCS 1024 /* processes per virtual device; the 1025th is refused, not lost */
#define GPOOLING_LIMITS_SIZE 4096

typedef struct gpooling_proc {
    uint64_t pid;   /* 0 = free */
    uint64_t bytes; /* device memory this process holds */
    uint64_t host;  /* pinned host memory this process holds */
    uint64_t spare;
} gpooling_proc;

typedef struct gpooling_usage {
    uint64_t magic;          /* 0: GPOOLING_MAGIC once initialised */
    uint64_t version;        /* 1: GPOOLING_VERSION */
    uint64_t lock;           /* 2: pid of the holder (0 = free); a dead holder's lock is taken over */
    uint64_t memory_limit;   /* 3: mirror of the limits region, for readers only */
    uint64_t memory_used;    /* 4: mirror: sum of procs[].bytes at the last change */
    uint64_t memory_peak;    /* 5 */
    uint64_t share_ppm;      /* 6: mirror of the limits region */
    uint64_t window_ns;      /* 7: mirror of the limits region */
    int64_t tokens_ns;       /* 8: device-time allowance left, may go negative (debt) */
    uint64_t last_refill_ns; /* 9: CLOCK_MONOTONIC of the last refill */
    uint64_t alloc_calls;    /* 10 */
    uint64_t free_calls;     /* 11 */
    uint64_t launch_calls;   /* 12 */
    uint64_t oom_rejections; /* 13: allocations refused because of the quota */
    uint64_t throttle_ns;    /* 14: time launches waited for tokens */
    uint64_t busy_ns;        /* 15: device time charged to this virtual device */
    uint64_t attached;       /* 16: processes that ever took a slot */
    uint64_t live;           /* 17: slots held now */
    uint64_t sync_calls;     /* 18 */
    uint64_t reaped_bytes;   /* 19: bytes given back on behalf of processes that died */
    uint64_t host_used;      /* 20: mirror: sum of procs[].host */
    uint64_t host_peak;      /* 21 */
    uint64_t slots_high;     /* 22: slots in use lie below this index */
    uint64_t denied_calls;   /* 23: calls refused because the device is revoked or unconfigured */
    uint64_t context_bytes;  /* 24: of memory_used, charged for contexts and modules */
    uint64_t reaped_procs;   /* 25 */
    uint64_t tampered;       /* 26: times a process found its own slot altered and restored it */
    uint64_t reserved[GPOOLING_HEADER_SLOTS - 27];
    gpooling_proc procs[GPOOLING_PROCS];
} gpooling_usage;

typedef struct gpooling_limits {
    uint64_t magic;         /* 0: GPOOLING_LIMITS_MAGIC */
    uint64_t version;       /* 1 */
    uint64_t memory_limit;  /* 2: bytes; 0 = unlimited */
    uint64_t share_ppm;     /* 3: compute share in parts per million; >= 1e6 = unthrottled */
    uint64_t window_ns;     /* 4: token-bucket window (burst = share * window) */
    uint64_t host_limit;    /* 5: pinned host bytes; 0 = unlimited */
    uint64_t revoked;       /* 6: 1 = released by its owner: refuse everything */
    uint64_t generation;    /* 7: bumped by every change */
    uint64_t context_bytes; /* 8: charged per CUDA context created */
    uint64_t reserved[7];
    char vdev[64];          /* 16..23: the virtual device's id, for messages */
} gpooling_limits;

#endif
