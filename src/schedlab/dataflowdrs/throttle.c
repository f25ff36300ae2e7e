/* A bandwidth-throttled directory for unmodified programs (schedlab.dataflowdrs).
 *
 * Why: the DataFlowDrs evaluation needs a slow shared file system next to node-local tiers.
 * This LD_PRELOAD shim makes read/write on files under configured directory prefixes cost
 * latency + bytes/bandwidth *inside the system call*, so a tracer (dftracer) sees real, slow
 * calls. The bandwidth is shared by every process through a FIFO "server clock" kept in a
 * lock-protected state file, so concurrent readers contend as they would on a shared FS.
 *
 * SCHEDLAB_THROTTLE="PREFIX=BYTES_PER_S,LATENCY_S,STATEFILE;PREFIX2=..." (at most 8 tiers).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAX_TIERS 8
#define MAX_FD 65536

typedef struct { char prefix[512]; size_t len; double bw; double lat; int state_fd; } tier_t;

static tier_t tiers[MAX_TIERS];
static int n_tiers = 0;
static signed char fd_tier[MAX_FD];
static int ready = 0;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pread64)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_close)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);

static void resolve(void) {
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_read = dlsym(RTLD_NEXT, "read");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pread64 = dlsym(RTLD_NEXT, "pread64");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_close = dlsym(RTLD_NEXT, "close");
    real_dup2 = dlsym(RTLD_NEXT, "dup2");
    real_dup3 = dlsym(RTLD_NEXT, "dup3");
}

__attribute__((constructor)) static void init(void) {
    resolve();
    memset(fd_tier, -1, sizeof(fd_tier));
    const char *spec = getenv("SCHEDLAB_THROTTLE");
    if (!spec) { ready = 1; return; }
    char *copy = strdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ";", &save); item && n_tiers < MAX_TIERS;
         item = strtok_r(NULL, ";", &save)) {
        char prefix[512], state[512];
        double bw, lat;
        if (sscanf(item, "%511[^=]=%lf,%lf,%511s", prefix, &bw, &lat, state) != 4 || bw <= 0)
            continue;
        tier_t *t = &tiers[n_tiers];
        snprintf(t->prefix, sizeof(t->prefix), "%s", prefix);
        t->len = strlen(t->prefix);
        t->bw = bw;
        t->lat = lat;
        t->state_fd = real_open(state, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (t->state_fd >= 0) n_tiers++;
    }
    free(copy);
    ready = 1;
}

static int tier_of(const char *path) {
    if (!ready || !path) return -1;
    for (int i = 0; i < n_tiers; i++)
        if (strncmp(path, tiers[i].prefix, tiers[i].len) == 0) return i;
    return -1;
}

static void track(int fd, const char *path) {
    if (fd < 0 || fd >= MAX_FD || n_tiers == 0) return;
    if (path && path[0] != '/') {  /* relative (or dirfd-based): ask the kernel where it is */
        char link[64], full[4096];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, full, sizeof(full) - 1);
        if (n > 0) { full[n] = 0; fd_tier[fd] = (signed char)tier_of(full); return; }
    }
    fd_tier[fd] = (signed char)tier_of(path);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reserve the shared server for this request (FIFO) and sleep until it completes. */
static void throttle(int fd, ssize_t done) {
    if (fd < 0 || fd >= MAX_FD || fd_tier[fd] < 0 || done < 0) return;
    tier_t *t = &tiers[(int)fd_tier[fd]];
    double next = 0.0, start, end;
    flock(t->state_fd, LOCK_EX);
    if (pread(t->state_fd, &next, sizeof(next), 0) != sizeof(next)) next = 0.0;
    start = now_s();
    if (next > start) start = next;
    end = start + t->lat + (double)done / t->bw;
    pwrite(t->state_fd, &end, sizeof(end), 0);
    flock(t->state_fd, LOCK_UN);
    double wait = end - now_s();
    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
    }
}

#define MODE_ARG(flags) \
    mode_t mode = 0; \
    if ((flags) & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); \
        mode = va_arg(ap, int); va_end(ap); }

int open(const char *path, int flags, ...) {
    MODE_ARG(flags);
    if (!real_open) resolve();
    int fd = real_open(path, flags, mode);
    track(fd, path);
    return fd;
}

int open64(const char *path, int flags, ...) {
    MODE_ARG(flags);
    if (!real_open64) resolve();
    int fd = real_open64(path, flags, mode);
    track(fd, path);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags);
    if (!real_openat) resolve();
    int fd = real_openat(dirfd, path, flags, mode);
    track(fd, path);
    return fd;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags);
    if (!real_openat64) resolve();
    int fd = real_openat64(dirfd, path, flags, mode);
    track(fd, path);
    return fd;
}

int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }

ssize_t read(int fd, void *buf, size_t count) {
    if (!real_read) resolve();
    ssize_t done = real_read(fd, buf, count);
    throttle(fd, done);
    return done;
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (!real_write) resolve();
    ssize_t done = real_write(fd, buf, count);
    throttle(fd, done);
    return done;
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    if (!real_pread64) resolve();
    ssize_t done = real_pread64(fd, buf, count, offset);
    throttle(fd, done);
    return done;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    if (!real_pwrite64) resolve();
    ssize_t done = real_pwrite64(fd, buf, count, offset);
    throttle(fd, done);
    return done;
}

int close(int fd) {
    if (!real_close) resolve();
    if (fd >= 0 && fd < MAX_FD) fd_tier[fd] = -1;
    return real_close(fd);
}

/* dd and shells move descriptors onto 0/1: the copy keeps the original's tier. */
static int copy_tier(int from, int to) {
    if (to >= 0 && to < MAX_FD) fd_tier[to] = (from >= 0 && from < MAX_FD) ? fd_tier[from] : -1;
    return to;
}

int dup2(int oldfd, int newfd) {
    if (!real_dup2) resolve();
    return copy_tier(oldfd, real_dup2(oldfd, newfd));
}

int dup3(int oldfd, int newfd, int flags) {
    if (!real_dup3) resolve();
    return copy_tier(oldfd, real_dup3(oldfd, newfd, flags));
}
