/* STAND-IN NVML, NOT NVIDIA's: a tiny libnvidia-ml.so.1 with the few entry points an NVML
 * client needs to ask for a device's memory (nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMemoryInfo(_v2), nvmlShutdown), so the shim's NVML
 * hooks can be checked without a GPU. One device of FAKE_CUDA_MEMORY bytes (default 16 GiB),
 * reported entirely free. Signatures follow nvml.h.
 */
#include <stdint.h>
#include <stdlib.h>

#include "gpooling_cuda.h"

#define EXPORT __attribute__((visibility("default")))

static int device_token;

static unsigned long long capacity(void) {
    const char *text = getenv("FAKE_CUDA_MEMORY");
    return text && *text ? strtoull(text, NULL, 10) : (16ULL << 30);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (i != 0 || !d) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &device_token;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (d != &device_token || !m) return 2;
    m->total = capacity();
    m->free = m->total;
    m->used = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (d != &device_token || !m) return 2;
    m->total = capacity();
    m->reserved = 0;
    m->free = m->total;
    m->used = 0;
    return NVML_SUCCESS;
}
