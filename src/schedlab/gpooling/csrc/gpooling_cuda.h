/* The slice of cuda.h / nvml.h that the shim and the stand-in driver share (CUDA 12 ABI).
 * No CUDA headers are needed to build either; the layouts below are the driver's own. */
#ifndef GPOOLING_CUDA_H
#define GPOOLING_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1; /* pre-3.2 entry points (cuMemAlloc, cuMemFree, ...) */
typedef void *CUstream;
typedef void *CUfunction;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUlibrary;
typedef void *CUarray;
typedef void *CUmipmappedArray;
typedef void *CUmemoryPool;
typedef void *CUgraphExec;
typedef void *CUevent;
typedef int CUdevice;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef struct CUuuid { unsigned char bytes[16]; } CUuuid;
typedef struct CUipcMemHandle { char reserved[64]; } CUipcMemHandle;
/* CUDA_MEM_ALLOC_NODE_PARAMS: poolProps (CUmemPoolProps, 88 bytes), accessDescs, count, size,
 * dptr; only bytesize and dptr are read here */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS {
    unsigned char poolProps[88];
    const void *accessDescs;
    size_t accessDescCount, bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
/* CUgraphNodeParams begins with its node type; CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10 */
typedef struct CUgraphNodeParams { int type; int reserved0[3]; } CUgraphNodeParams;
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_NOT_PERMITTED 800
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1ULL << 1)
#define CUDA_ARRAY3D_LAYERED 0x01

typedef struct CUDA_ARRAY_DESCRIPTOR {
    size_t Width, Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1 {
    unsigned int Width, Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR {
    size_t Width, Height, Depth;
    int Format;
    unsigned int NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
    unsigned int Width, Height, Depth;
    int Format;
    unsigned int NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;

typedef struct CUDA_LAUNCH_PARAMS {
    CUfunction function;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} CUDA_LAUNCH_PARAMS;

/* NVML */
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct nvmlMemory_t { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct nvmlMemory_v2_t {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_SUCCESS 0

/* bytes of one element of a CUarray_format (per channel); unknown formats count 16 (the most) */
static inline uint64_t gp_format_bytes(int format) {
    switch (format) {
    case 0x01: case 0x08: case 0xb0: case 0xc0: case 0xc6: return 1; /* (u)int8, NV12, unorm8 */
    case 0x02: case 0x09: case 0x10: case 0xc1: case 0xc3: case 0xc7: case 0xc9: return 2;
    case 0x03: case 0x0a: case 0x20: case 0xc2: case 0xc4: case 0xc8: case 0xca: return 4;
    case 0xc5: case 0xcb: return 8;
    default:
        if (format >= 0x91 && format <= 0x9e) return 1; /* block-compressed BC1..BC7: <= 1 B/px */
        return 16;
    }
}

/* bytes of a (mipmapped) array; UINT64_MAX when the arithmetic overflows (always refused) */
static inline uint64_t gp_array_bytes(uint64_t w, uint64_t h, uint64_t d, int format,
                                      unsigned channels, unsigned flags, unsigned levels) {
    uint64_t elem = gp_format_bytes(format) * (channels ? channels : 1), total = 0;
    if (!levels) levels = 1;
    for (unsigned l = 0; l < levels && l < 64; l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h ? (h >> l ? h >> l : 1) : 1;
        uint64_t ld = d ? ((flags & CUDA_ARRAY3D_LAYERED) ? d : (d >> l ? d >> l : 1)) : 1;
        uint64_t level;
        if (__builtin_mul_overflow(lw, lh, &level) || __builtin_mul_overflow(level, ld, &level) ||
            __builtin_mul_overflow(level, elem, &level) ||
            __builtin_add_overflow(total, level, &total))
            return UINT64_MAX;
    }
    return total;
}

#endif
