/* A plugin for the RTLD_DEEPBIND routes of bypass_vmm.c, linked against libcuda.so.1: opened
 * with RTLD_DEEPBIND, its undefined symbols resolve in its own dependencies (libcuda, libc)
 * before the global scope where LD_PRELOAD put the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef int CUresult;
CUresult cuMemAlloc_v2(unsigned long long *, size_t);

/* a direct call, bound at load */
CUresult plugin_alloc(size_t bytes) {
    unsigned long long d = 0;
    return cuMemAlloc_v2(&d, bytes);
}

/* dlsym called from inside the plugin: libc's own, under DEEPBIND */
CUresult plugin_dlsym_alloc(size_t bytes) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*f)(unsigned long long *, size_t) =
        (CUresult(*)(unsigned long long *, size_t))dlsym(lib ? lib : RTLD_DEFAULT,
                                                          "cuMemAlloc_v2");
    unsigned long long d = 0;
    return f ? f(&d, bytes) : -1;
}

/* built with -DWITH_CTOR: an allocation in the constructor, while dlopen still runs */
int plugin_ctor_rc = -1;
#ifdef WITH_CTOR
__attribute__((constructor)) static void at_load(void) {
    unsigned long long d = 0;
    plugin_ctor_rc = cuMemAlloc_v2(&d, 600ULL << 20);
}
#endif
