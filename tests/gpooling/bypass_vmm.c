/* Outside bypass routes round a 1 GiB quota through memory whose lifetime is not one call's:
 * VMM handles released while mapped, retained handles, pools that keep freed memory,
 * shareable-handle imports, legacy IPC,
 * graph memory nodes, private export tables and libraries opened with RTLD_DEEPBIND. Each route
 * holds BYTES (default 600 MiB) and then tries to hold BYTES more; the driver's own count of
 * what it holds (fakecuStats of the stand-in libcuda) is the yardstick: under the shim it must
 * never pass the quota. Prototypes are cuda.h's; nothing here knows the shim's sources.
 *
 *   bypass_vmm ROUTE [PLUGIN]
 *
 * One JSON line: {"route", "first", "escape", "second", "driver_used", "driver_peak"}: first is
 * the rc of taking the first BYTES, escape the rc of the route's own step, second the rc of the
 * second BYTES, driver_peak the most the driver held at once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUhandle;
typedef struct { char reserved[64]; } IPC;
typedef struct { unsigned char bytes[16]; } UUID;
typedef struct {
    unsigned char pool_props[88];
    const void *access;
    size_t access_count, bytesize;
    CUdeviceptr dptr;
} MEM_ALLOC_NODE;
typedef struct { int type; int reserved0[3]; MEM_ALLOC_NODE alloc; char rest[128]; } NODE_PARAMS;

static size_t BYTES = 600ULL << 20;
static void *lib;
static unsigned long long peak;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) { fprintf(stderr, "bypass_vmm: no %s\n", name); exit(3); }
    return f;
}
static unsigned long long driver_used(void) {
    uint64_t s[6] = {0};
    ((void (*)(uint64_t *))sym("fakecuStats"))(s);
    if (s[0] > peak) peak = s[0];
    return (unsigned long long)s[0];
}
static CUresult alloc(CUdeviceptr *d) {
    CUresult rc = ((CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2"))(d, BYTES);
    driver_used();
    return rc;
}
static CUresult create(CUhandle *h) {
    CUresult rc = ((CUresult(*)(CUhandle *, size_t, const void *, unsigned long long))sym(
        "cuMemCreate"))(h, BYTES, NULL, 0);
    driver_used();
    return rc;
}
static CUresult reserve_va(CUdeviceptr *va) {
    return ((CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))sym(
        "cuMemAddressReserve"))(va, BYTES, 0, 0, 0);
}
static CUresult map(CUdeviceptr va, CUhandle h) {
    return ((CUresult(*)(CUdeviceptr, size_t, size_t, CUhandle, unsigned long long))sym(
        "cuMemMap"))(va, BYTES, 0, h, 0);
}
static CUresult unmap(CUdeviceptr va) {
    return ((CUresult(*)(CUdeviceptr, size_t))sym("cuMemUnmap"))(va, BYTES);
}
static CUresult release(CUhandle h) {
    CUresult rc = ((CUresult(*)(CUhandle))sym("cuMemRelease"))(h);
    driver_used();
    return rc;
}
static int report(const char *route, CUresult first, CUresult escape, CUresult second) {
    unsigned long long now = driver_used();
    printf("{\"route\":\"%s\",\"first\":%d,\"escape\":%d,\"second\":%d,\"driver_used\":%llu,"
           "\"driver_peak\":%llu}\n", route, first, escape, second, now, peak);
    return 0;
}

/* the CUDA samples' and NCCL's order: create, map, release the handle at once */
static int release_while_mapped(void) {
    CUhandle h = 0;
    CUdeviceptr va = 0, d = 0;
    CUresult first = create(&h);
    reserve_va(&va);
    CUresult escape = map(va, h);
    release(h); /* the memory lives on: it is mapped */
    return report("vmm-release-mapped", first, escape, alloc(&d));
}

/* a second handle to mapped memory, released: the first handle and the mapping still hold it */
static int retain_release(void) {
    CUhandle h = 0, again = 0;
    CUdeviceptr va = 0, d = 0;
    CUresult first = create(&h);
    reserve_va(&va);
    map(va, h);
    CUresult escape = ((CUresult(*)(CUhandle *, void *))sym("cuMemRetainAllocationHandle"))(
        &again, (void *)(uintptr_t)va);
    release(again);
    return report("vmm-retain-release", first, escape, alloc(&d));
}

/* the whole lifetime: after the unmap the memory is gone and the quota whole again */
static int full_cycle(void) {
    CUhandle h = 0;
    CUdeviceptr va = 0, d = 0, e = 0;
    CUresult first = create(&h);
    reserve_va(&va);
    map(va, h);
    release(h);
    CUresult escape = unmap(va);
    CUresult second = alloc(&d);
    CUresult third = alloc(&e); /* 1,200 MiB: over the quota */
    printf("{\"route\":\"vmm-cycle\",\"first\":%d,\"escape\":%d,\"second\":%d,\"third\":%d,"
           "\"driver_used\":%llu}\n", first, escape, second, third, driver_used());
    return 0;
}

/* export to a file descriptor and import it back: one more reference the exporter never sees */
static int import_shareable(void) {
    CUhandle h = 0, imported = 0;
    CUdeviceptr d = 0;
    int fd = -1;
    CUresult first = create(&h);
    ((CUresult(*)(void *, CUhandle, int, unsigned long long))sym("cuMemExportToShareableHandle"))(
        &fd, h, 1, 0);
    CUresult escape = ((CUresult(*)(CUhandle *, void *, int))sym(
        "cuMemImportFromShareableHandle"))(&imported, (void *)(intptr_t)fd, 1);
    release(h); /* the exporter lets go; the import holds the memory */
    return report("vmm-import", first, escape, alloc(&d));
}

/* legacy IPC: open the exporter's handle, the exporter frees, the opened copy lives on */
static int ipc_open(void) {
    CUdeviceptr d = 0, opened = 0, e = 0;
    IPC handle;
    CUresult first = alloc(&d);
    ((CUresult(*)(IPC *, CUdeviceptr))sym("cuIpcGetMemHandle"))(&handle, d);
    CUresult escape = ((CUresult(*)(CUdeviceptr *, IPC, unsigned))sym("cuIpcOpenMemHandle_v2"))(
        &opened, handle, 1);
    ((CUresult(*)(CUdeviceptr))sym("cuMemFree_v2"))(d);
    driver_used();
    return report("ipc-open", first, escape, alloc(&e));
}

/* graph memory nodes, added directly and through the generic cuGraphAddNode */
static int graph_node(int generic) {
    CUdeviceptr d = 0;
    void *graph = NULL, *node = NULL;
    CUresult first = alloc(&d), escape;
    ((CUresult(*)(void **, unsigned))sym("cuGraphCreate"))(&graph, 0);
    if (generic) {
        NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.type = 10; /* CU_GRAPH_NODE_TYPE_MEM_ALLOC */
        p.alloc.bytesize = BYTES;
        escape = ((CUresult(*)(void **, void *, const void *, size_t, NODE_PARAMS *))sym(
            "cuGraphAddNode"))(&node, graph, NULL, 0, &p);
    } else {
        MEM_ALLOC_NODE p;
        memset(&p, 0, sizeof p);
        p.bytesize = BYTES;
        escape = ((CUresult(*)(void **, void *, const void *, size_t, MEM_ALLOC_NODE *))sym(
            "cuGraphAddMemAllocNode"))(&node, graph, NULL, 0, &p);
    }
    driver_used();
    return report(generic ? "graph-add-node" : "graph-mem-node", first, escape, escape);
}

/* a private export table whose entry allocates (the stand-in's stand-in for hidden entry
 * points) */
static int export_table(void) {
    static const UUID id = {{0xa1, 0x11, 0x0c, 0xa7, 0xe0, 0x00, 0x40, 0x00, 0x80, 0x00, 0x00,
                             0x00, 0x00, 0x00, 0x00, 0x01}};
    CUdeviceptr d = 0, e = 0;
    const void **table = NULL;
    CUresult first = alloc(&d);
    CUresult escape = ((CUresult(*)(const void ***, const UUID *))sym("cuGetExportTable"))(
        &table, &id);
    CUresult second = escape;
    if (!escape && table) second = ((CUresult(*)(CUdeviceptr *, size_t))table[1])(&e, BYTES);
    driver_used();
    return report("export-table", first, escape, second);
}

/* the runtime's own module loader (libcudart's private interface): a module's static device
 * data is memory too */
static int runtime_module(void) {
    static const UUID id = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9,
                             0x39, 0x12, 0xfd, 0x9d, 0xf9}};
    struct { unsigned magic, version; const uint64_t *data; const void *more; } wrapper;
    uint64_t bytes = BYTES;
    CUdeviceptr d = 0;
    void *module = NULL;
    const void **table = NULL;
    CUresult first = alloc(&d);
    CUresult escape = ((CUresult(*)(const void ***, const UUID *))sym("cuGetExportTable"))(
        &table, &id);
    wrapper.magic = 0x466243B1u;
    wrapper.version = 1;
    wrapper.data = &bytes;
    wrapper.more = NULL;
    CUresult second = escape || !table ? escape
                                       : ((CUresult(*)(void **, const void *))table[1])(&module,
                                                                                        &wrapper);
    return report("runtime-module", first, escape, second);
}

/* a pool that keeps what is freed into it (release threshold: everything) */
static void *keeping_pool(void) {
    void *pool = NULL;
    uint64_t keep = UINT64_MAX;
    ((CUresult(*)(void **, int))sym("cuDeviceGetDefaultMemPool"))(&pool, 0);
    ((CUresult(*)(void *, int, void *))sym("cuMemPoolSetAttribute"))(pool, 4, &keep);
    return pool;
}
static CUresult alloc_async(CUdeviceptr *d) {
    CUresult rc = ((CUresult(*)(CUdeviceptr *, size_t, void *))sym("cuMemAllocAsync"))(d, BYTES,
                                                                                    NULL);
    driver_used();
    return rc;
}
static CUresult free_async_and_sync(CUdeviceptr d) {
    CUresult rc = ((CUresult(*)(CUdeviceptr, void *))sym("cuMemFreeAsync"))(d, NULL);
    ((CUresult(*)(void *))sym("cuStreamSynchronize"))(NULL);
    driver_used();
    return rc;
}

/* freed into a pool that keeps it: the device still holds it, so it still counts */
static int pool_keeps(void) {
    CUdeviceptr d = 0, e = 0;
    keeping_pool();
    CUresult first = alloc_async(&d);
    CUresult escape = free_async_and_sync(d);
    return report("pool-keeps", first, escape, alloc(&e));
}

/* the pool's reserve is reused without a new charge, and a trim gives the quota back */
static int pool_reuse(void) {
    CUdeviceptr d = 0, e = 0, f = 0;
    void *pool = keeping_pool();
    CUresult first = alloc_async(&d);
    free_async_and_sync(d);
    CUresult again = alloc_async(&e); /* from the pool's reserve: no new memory */
    free_async_and_sync(e);
    CUresult trim = ((CUresult(*)(void *, size_t))sym("cuMemPoolTrimTo"))(pool, 0);
    driver_used();
    CUresult after = alloc(&f); /* the reserve is gone: 600 MiB fit again */
    printf("{\"route\":\"pool-reuse\",\"first\":%d,\"again\":%d,\"trim\":%d,\"after\":%d,"
           "\"driver_used\":%llu,\"driver_peak\":%llu}\n", first, again, trim, after,
           driver_used(), peak);
    return 0;
}

/* a plugin opened with RTLD_DEEPBIND binds cu* (and dlsym) inside its own dependencies first */
static int deepbind(const char *plugin, const char *entry) {
    CUdeviceptr d = 0;
    CUresult first = alloc(&d);
    void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) { fprintf(stderr, "bypass_vmm: %s\n", dlerror()); return 4; }
    CUresult second;
    if (!strcmp(entry, "ctor")) second = *(int *)dlsym(h, "plugin_ctor_rc");
    else second = ((CUresult(*)(size_t))dlsym(h, entry))(BYTES);
    driver_used();
    char route[64];
    snprintf(route, sizeof route, "deepbind:%s", entry);
    return report(route, first, 0, second);
}

/* libc's own dlopen, found by walking libc's dynamic symbol table (no dlsym, nothing a
 * preloaded library sees): a loader the shim cannot interpose */
struct raw_query { const char *name; void *found; };
static int raw_find(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct raw_query *q = data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libc.so")) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gh = NULL;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        ElfW(Addr) p = dyn->d_un.d_ptr;
        if (p < info->dlpi_addr) p += info->dlpi_addr;
        if (dyn->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)p;
        if (dyn->d_tag == DT_STRTAB) strtab = (const char *)p;
        if (dyn->d_tag == DT_GNU_HASH) gh = (const uint32_t *)p;
    }
    if (!symtab || !strtab || !gh) return 0;
    /* every symbol the GNU hash table covers: from symoffset to the end of the last chain */
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom = gh[2], last = 0;
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gh + 4) + bloom);
    const uint32_t *chain = buckets + nbuckets;
    for (uint32_t b = 0; b < nbuckets; b++) if (buckets[b] > last) last = buckets[b];
    while (last >= symoffset && !(chain[last - symoffset] & 1)) last++;
    for (uint32_t i = symoffset; i <= last; i++)
        if (symtab[i].st_value && !strcmp(strtab + symtab[i].st_name, q->name)) {
            q->found = (void *)(info->dlpi_addr + symtab[i].st_value);
            return 1;
        }
    return 0;
}
/* a DEEPBIND plugin opened behind the shim's back: the shim re-patches the new object's
 * driver bindings at the job's next allocation through it (here a 1 MiB one, 50 ms later: the
 * shim looks at most once per tick of the coarse clock) */
static int deepbind_raw(const char *plugin) {
    struct raw_query q = {"dlopen", NULL};
    CUdeviceptr d = 0, small = 0;
    CUresult first = alloc(&d);
    dl_iterate_phdr(raw_find, &q);
    if (!q.found) { fprintf(stderr, "bypass_vmm: no raw dlopen\n"); return 4; }
    void *h = ((void *(*)(const char *, int))q.found)(plugin, RTLD_NOW | RTLD_LOCAL |
                                                               RTLD_DEEPBIND);
    if (!h) { fprintf(stderr, "bypass_vmm: %s\n", dlerror()); return 4; }
    struct timespec tick = {0, 50 * 1000000L}; /* past the shim's next coarse-clock tick */
    nanosleep(&tick, NULL);
    CUresult escape = ((CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2"))(&small, 1 << 20);
    CUresult second = ((CUresult(*)(size_t))dlsym(h, "plugin_alloc"))(BYTES);
    return report("deepbind-raw", first, escape, second);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bypass_vmm ROUTE [PLUGIN]\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "bypass_vmm: %s\n", dlerror()); return 4; }
    ((CUresult(*)(unsigned))sym("cuInit"))(0);
    const char *r = argv[1];
    if (!strcmp(r, "vmm-release-mapped")) return release_while_mapped();
    if (!strcmp(r, "vmm-retain-release")) return retain_release();
    if (!strcmp(r, "vmm-cycle")) return full_cycle();
    if (!strcmp(r, "vmm-import")) return import_shareable();
    if (!strcmp(r, "ipc-open")) return ipc_open();
    if (!strcmp(r, "graph-mem-node")) return graph_node(0);
    if (!strcmp(r, "graph-add-node")) return graph_node(1);
    if (!strcmp(r, "export-table")) return export_table();
    if (!strcmp(r, "pool-keeps")) return pool_keeps();
    if (!strcmp(r, "runtime-module")) return runtime_module();
    if (!strcmp(r, "pool-reuse")) return pool_reuse();
    if (!strncmp(r, "deepbind:", 9) && argc > 2) return deepbind(argv[2], r + 9);
    if (!strcmp(r, "deepbind-raw") && argc > 2) return deepbind_raw(argv[2]);
    fprintf(stderr, "bypass_vmm: unknown route %s\n", r);
    return 2;
}
