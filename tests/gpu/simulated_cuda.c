/* A simulated CUDA driver (libcuda.so) for testing enzyme_py's GPU path on machines
 * without a GPU.
 *
 * liboffload's CUDA plugin dlopens "libcuda.so" and resolves the driver API by name;
 * with this library first on LD_LIBRARY_PATH the plugin starts, lists one device
 * ("Simulated H200", compute capability 9.0) and drives it exactly as it would drive
 * a real one. Device memory is host memory; copies are memcpy; streams and events
 * complete at once. A launch records its parameter buffer and calls the hook the test
 * installed (sim_set_launch_hook), which plays the GPU: it reads the parameters and
 * runs the kernel's body on the host. So what is tested is everything between
 * enzyme_py and the driver (liboffload's calls, images, symbols, the parameter layout,
 * memory and its lifetime), not the execution of PTX.
 *
 * Written from the driver API's documented signatures; no CUDA header is needed.
 * SIM_TRACE=1 prints each call to stderr.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *Handle;

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kNotInitialized = 3,
  kInvalidImage = 200,
  kInvalidHandle = 400,
  kNotFound = 500,
  kLaunchFailed = 719,
  kNotSupported = 801,
};

#define EXPORT __attribute__((visibility("default")))

static int tracing(void) {
  static int on = -1;
  if (on < 0) {
    const char *env = getenv("SIM_TRACE");
    on = env && *env && *env != '0';
  }
  return on;
}
#define TRACE(...)                        \
  do {                                    \
    if (tracing()) {                      \
      fprintf(stderr, "[simulated cuda] "); \
      fprintf(stderr, __VA_ARGS__);       \
      fprintf(stderr, "\n");              \
    }                                     \
  } while (0)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- what the tests read back ---------------------------------------------------- */

#define MAX_ALLOCATIONS 4096
static struct {
  uintptr_t base;
  size_t size;
} allocations[MAX_ALLOCATIONS];
static int allocation_count;
static long long bytes_to_device, bytes_to_host;

static size_t limits[8];
static int initialised;

struct Module {
  void *image;
  size_t size;
};
#define MAX_PARAMS 64
struct Function {
  struct Module *module;
  char name[256];
  int param_count;
  size_t param_offset[MAX_PARAMS], param_size[MAX_PARAMS];
};

/* The test's GPU: runs kernel `name` over grid_x blocks of block_x threads, its
 * parameters in `params` at the offsets the image declares. Returns a CUresult. */
typedef int (*LaunchHook)(const char *name, unsigned grid_x, unsigned block_x,
                          const void *params, size_t params_size, int param_count,
                          const size_t *param_offsets, const size_t *param_sizes);
static LaunchHook launch_hook;
static CUresult next_launch_result;
static long long launches;

EXPORT void sim_set_launch_hook(LaunchHook hook) { launch_hook = hook; }
/* The next launch fails with `result` (a launch error, for the tests of errors). */
EXPORT void sim_fail_next_launch(int result) { next_launch_result = result; }
EXPORT long long sim_launches(void) { return launches; }
EXPORT size_t sim_limit(int which) { return which >= 0 && which < 8 ? limits[which] : 0; }
EXPORT int sim_live_allocations(void) { return allocation_count; }
EXPORT long long sim_bytes_to_device(void) { return bytes_to_device; }
EXPORT long long sim_bytes_to_host(void) { return bytes_to_host; }

/* 1 when [address, address + bytes) lies inside one live device allocation. */
EXPORT int sim_is_device_range(uintptr_t address, size_t bytes) {
  int inside = 0;
  pthread_mutex_lock(&lock);
  for (int k = 0; k < allocation_count; ++k) {
    if (address >= allocations[k].base &&
        address + bytes <= allocations[k].base + allocations[k].size) {
      inside = 1;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return inside;
}

static CUresult allocate(CUdeviceptr *out, size_t bytes) {
  if (!out) return kInvalidValue;
  void *memory = NULL;
  if (posix_memalign(&memory, 256, bytes ? bytes : 1) != 0) return 2; /* out of memory */
  memset(memory, 0xA5, bytes); /* device memory starts as garbage, not zeros */
  pthread_mutex_lock(&lock);
  if (allocation_count == MAX_ALLOCATIONS) {
    pthread_mutex_unlock(&lock);
    free(memory);
    return 2;
  }
  allocations[allocation_count].base = (uintptr_t)memory;
  allocations[allocation_count].size = bytes;
  ++allocation_count;
  pthread_mutex_unlock(&lock);
  *out = (CUdeviceptr)(uintptr_t)memory;
  return kSuccess;
}

static CUresult release(CUdeviceptr address) {
  pthread_mutex_lock(&lock);
  for (int k = 0; k < allocation_count; ++k) {
    if (allocations[k].base == (uintptr_t)address) {
      allocations[k] = allocations[--allocation_count];
      pthread_mutex_unlock(&lock);
      free((void *)(uintptr_t)address);
      return kSuccess;
    }
  }
  pthread_mutex_unlock(&lock);
  return kInvalidValue; /* not a live allocation: a double free or a stray pointer */
}

/* Copies touch device memory only inside live allocations, as a GPU's MMU enforces. */
static CUresult copy(void *dst, const void *src, size_t bytes, int dst_on_device,
                     int src_on_device) {
  if (dst_on_device && !sim_is_device_range((uintptr_t)dst, bytes)) return kInvalidValue;
  if (src_on_device && !sim_is_device_range((uintptr_t)src, bytes)) return kInvalidValue;
  memcpy(dst, src, bytes);
  pthread_mutex_lock(&lock);
  if (dst_on_device && !src_on_device) bytes_to_device += (long long)bytes;
  if (src_on_device && !dst_on_device) bytes_to_host += (long long)bytes;
  pthread_mutex_unlock(&lock);
  return kSuccess;
}

static void *new_handle(void) { return calloc(1, 16); }

/* ---- initialisation and devices --------------------------------------------------- */

/* Compute capability 9.0 (an H200), or ENZYME_PY_SIMULATED_GPU_ARCH (e.g. 80). */
static int device_arch = 90;

EXPORT CUresult cuInit(unsigned flags) {
  TRACE("cuInit(%u)", flags);
  const char *arch = getenv("ENZYME_PY_SIMULATED_GPU_ARCH");
  if (arch && atoi(arch) > 0) device_arch = atoi(arch);
  initialised = 1;
  return kSuccess;
}
EXPORT CUresult cuDriverGetVersion(int *version) {
  *version = 12080;
  return kSuccess;
}
EXPORT CUresult cuDeviceGetCount(int *count) {
  *count = initialised ? 1 : 0;
  return initialised ? kSuccess : kNotInitialized;
}
EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *device = 0;
  return kSuccess;
}
EXPORT CUresult cuDeviceGetName(char *name, int length, CUdevice device) {
  (void)device;
  snprintf(name, (size_t)length, "%s", "Simulated H200");
  return kSuccess;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice device) {
  (void)device;
  for (int k = 0; k < 16; ++k) uuid[k] = (unsigned char)(0x51 + k);
  return kSuccess;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice device) {
  return cuDeviceGetUuid(uuid, device);
}

static const size_t kMemory = 150ull << 30; /* 141 GiB as an H200 reports it, roughly */
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) {
  (void)device;
  *bytes = kMemory;
  return kSuccess;
}
EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice device) {
  return cuDeviceTotalMem_v2(bytes, device);
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  *free_bytes = kMemory / 2;
  *total = kMemory;
  return kSuccess;
}
EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) {
  return cuMemGetInfo_v2(free_bytes, total);
}

/* CUdevice_attribute values of an H100/H200 (but the compute capability); the rest are 0. */
EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  (void)device;
  switch (attribute) {
    case 1: *value = 1024; break;        /* max threads per block */
    case 2: *value = 1024; break;        /* max block dim x */
    case 3: *value = 1024; break;        /* y */
    case 4: *value = 64; break;          /* z */
    case 5: *value = 2147483647; break;  /* max grid dim x */
    case 6: *value = 65535; break;
    case 7: *value = 65535; break;
    case 8: *value = 49152; break;       /* shared memory per block */
    case 9: *value = 65536; break;       /* constant memory */
    case 10: *value = 32; break;         /* warp size */
    case 12: *value = 65536; break;      /* registers per block */
    case 13: *value = 1980000; break;    /* clock rate, kHz */
    case 16: *value = 132; break;        /* multiprocessors */
    case 36: *value = 2619000; break;    /* memory clock rate */
    case 37: *value = 6144; break;       /* memory bus width */
    case 39: *value = 2048; break;       /* max threads per multiprocessor */
    case 41: *value = 1; break;          /* unified addressing */
    case 75: *value = device_arch / 10; break; /* compute capability major */
    case 76: *value = device_arch % 10; break; /* minor */
    default: *value = 0; break;
  }
  return kSuccess;
}

static int primary_context_active;
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned *flags, int *active) {
  (void)device;
  *flags = 0;
  *active = primary_context_active;
  return kSuccess;
}
EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice device, unsigned flags) {
  (void)device;
  (void)flags;
  return kSuccess;
}
EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned flags) {
  return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}
static char the_context[16];
EXPORT CUresult cuDevicePrimaryCtxRetain(Handle *context, CUdevice device) {
  (void)device;
  primary_context_active = 1;
  *context = the_context;
  return kSuccess;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  (void)device;
  return kSuccess;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  return cuDevicePrimaryCtxRelease_v2(device);
}
EXPORT CUresult cuCtxSetCurrent(Handle context) {
  (void)context;
  return kSuccess;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
  *device = 0;
  return kSuccess;
}
EXPORT CUresult cuCtxGetLimit(size_t *value, int which) {
  if (which < 0 || which >= 8) return kInvalidValue;
  *value = limits[which];
  return kSuccess;
}
EXPORT CUresult cuCtxSetLimit(int which, size_t value) {
  TRACE("cuCtxSetLimit(%d, %zu)", which, value);
  if (which < 0 || which >= 8) return kInvalidValue;
  limits[which] = value;
  return kSuccess;
}
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
  (void)a;
  (void)b;
  *can = 0;
  return kSuccess;
}
EXPORT CUresult cuCtxEnablePeerAccess(Handle context, unsigned flags) {
  (void)context;
  (void)flags;
  return kNotSupported;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
  static char buffer[64];
  snprintf(buffer, sizeof buffer, "simulated driver error %d", error);
  *text = buffer;
  return kSuccess;
}
EXPORT CUresult cuGetErrorName(CUresult error, const char **text) {
  return cuGetErrorString(error, text);
}

/* ---- memory ------------------------------------------------------------------------ */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *address, size_t bytes) {
  CUresult r = allocate(address, bytes);
  TRACE("cuMemAlloc(%zu) -> %#llx", bytes, r == kSuccess ? *address : 0ull);
  return r;
}
EXPORT CUresult cuMemAlloc(CUdeviceptr *address, size_t bytes) {
  return cuMemAlloc_v2(address, bytes);
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *address, size_t bytes, unsigned flags) {
  (void)flags;
  return allocate(address, bytes);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *address, size_t bytes, Handle stream) {
  (void)stream;
  return allocate(address, bytes);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr address) {
  TRACE("cuMemFree(%#llx)", address);
  return release(address);
}
EXPORT CUresult cuMemFree(CUdeviceptr address) { return cuMemFree_v2(address); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr address, Handle stream) {
  (void)stream;
  return release(address);
}
/* Pinned host memory is host memory, not a device allocation. */
EXPORT CUresult cuMemAllocHost_v2(void **address, size_t bytes) {
  *address = malloc(bytes ? bytes : 1);
  return *address ? kSuccess : 2;
}
EXPORT CUresult cuMemAllocHost(void **address, size_t bytes) {
  return cuMemAllocHost_v2(address, bytes);
}
EXPORT CUresult cuMemFreeHost(void *address) {
  free(address);
  return kSuccess;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  TRACE("cuMemcpyHtoD(%#llx, %zu)", dst, bytes);
  return copy((void *)(uintptr_t)dst, src, bytes, 1, 0);
}
EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  return cuMemcpyHtoD_v2(dst, src, bytes);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                                     Handle stream) {
  (void)stream;
  return cuMemcpyHtoD_v2(dst, src, bytes);
}
EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                  Handle stream) {
  return cuMemcpyHtoDAsync_v2(dst, src, bytes, stream);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  TRACE("cuMemcpyDtoH(%#llx, %zu)", src, bytes);
  return copy(dst, (const void *)(uintptr_t)src, bytes, 0, 1);
}
EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  return cuMemcpyDtoH_v2(dst, src, bytes);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes,
                                     Handle stream) {
  (void)stream;
  return cuMemcpyDtoH_v2(dst, src, bytes);
}
EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, Handle stream) {
  return cuMemcpyDtoHAsync_v2(dst, src, bytes, stream);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                     Handle stream) {
  (void)stream;
  return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, 1, 1);
}
EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                  Handle stream) {
  return cuMemcpyDtoDAsync_v2(dst, src, bytes, stream);
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, Handle dst_context, CUdeviceptr src,
                                  Handle src_context, size_t bytes, Handle stream) {
  (void)dst_context;
  (void)src_context;
  return cuMemcpyDtoDAsync_v2(dst, src, bytes, stream);
}

static CUresult fill(CUdeviceptr dst, size_t pitch, const void *value, size_t element,
                     size_t width, size_t height) {
  if (!sim_is_device_range((uintptr_t)dst, pitch * (height - 1) + width * element))
    return kInvalidValue;
  for (size_t row = 0; row < height; ++row) {
    char *line = (char *)(uintptr_t)dst + row * pitch;
    for (size_t k = 0; k < width; ++k) memcpy(line + k * element, value, element);
  }
  return kSuccess;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, Handle s) {
  (void)s;
  return fill(dst, n, &value, 1, n, 1);
}
EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, Handle s) {
  (void)s;
  return fill(dst, 2 * n, &value, 2, n, 1);
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, Handle s) {
  (void)s;
  return fill(dst, 4 * n, &value, 4, n, 1);
}
EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value,
                                  size_t width, size_t height, Handle s) {
  (void)s;
  return fill(dst, pitch, &value, 1, width, height);
}
EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value,
                                   size_t width, size_t height, Handle s) {
  (void)s;
  return fill(dst, pitch, &value, 2, width, height);
}
EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned value,
                                   size_t width, size_t height, Handle s) {
  (void)s;
  return fill(dst, pitch, &value, 4, width, height);
}

/* Virtual memory management is not simulated; the plugin falls back to cuMemAlloc. */
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t s, size_t a, CUdeviceptr h,
                                    unsigned long long f) {
  (void)p, (void)s, (void)a, (void)h, (void)f;
  return kNotSupported;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t s) {
  (void)p, (void)s;
  return kNotSupported;
}
EXPORT CUresult cuMemCreate(Handle *h, size_t s, const void *prop, unsigned long long f) {
  (void)h, (void)s, (void)prop, (void)f;
  return kNotSupported;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t s, size_t o, Handle h, unsigned long long f) {
  (void)p, (void)s, (void)o, (void)h, (void)f;
  return kNotSupported;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t s) {
  (void)p, (void)s;
  return kNotSupported;
}
EXPORT CUresult cuMemRelease(Handle h) {
  (void)h;
  return kNotSupported;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t s, const void *desc, size_t count) {
  (void)p, (void)s, (void)desc, (void)count;
  return kNotSupported;
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
  (void)g, (void)prop, (void)option;
  return kNotSupported;
}

/* ---- streams and events: everything completes when issued ------------------------- */

EXPORT CUresult cuStreamCreate(Handle *stream, unsigned flags) {
  (void)flags;
  *stream = new_handle();
  return kSuccess;
}
EXPORT CUresult cuStreamDestroy_v2(Handle stream) {
  free(stream);
  return kSuccess;
}
EXPORT CUresult cuStreamDestroy(Handle stream) { return cuStreamDestroy_v2(stream); }
EXPORT CUresult cuStreamSynchronize(Handle stream) {
  (void)stream;
  return kSuccess;
}
EXPORT CUresult cuStreamQuery(Handle stream) {
  (void)stream;
  return kSuccess;
}
EXPORT CUresult cuStreamWaitEvent(Handle stream, Handle event, unsigned flags) {
  (void)stream, (void)event, (void)flags;
  return kSuccess;
}
EXPORT CUresult cuStreamAddCallback(Handle stream, void (*callback)(Handle, CUresult, void *),
                                    void *data, unsigned flags) {
  (void)flags;
  callback(stream, kSuccess, data);
  return kSuccess;
}
EXPORT CUresult cuLaunchHostFunc(Handle stream, void (*fn)(void *), void *data) {
  (void)stream;
  fn(data);
  return kSuccess;
}
EXPORT CUresult cuEventCreate(Handle *event, unsigned flags) {
  (void)flags;
  *event = new_handle();
  return kSuccess;
}
EXPORT CUresult cuEventDestroy_v2(Handle event) {
  free(event);
  return kSuccess;
}
EXPORT CUresult cuEventDestroy(Handle event) { return cuEventDestroy_v2(event); }
EXPORT CUresult cuEventRecord(Handle event, Handle stream) {
  (void)event, (void)stream;
  return kSuccess;
}
EXPORT CUresult cuEventQuery(Handle event) {
  (void)event;
  return kSuccess;
}
EXPORT CUresult cuEventSynchronize(Handle event) {
  (void)event;
  return kSuccess;
}

/* ---- modules and kernels ---------------------------------------------------------- */

/* A cubin runs only if it was built for the device's architecture (ptxas records the
 * target in e_flags: bits 8-15 from ELF ABI version 8 on, else the low byte); PTX is
 * compiled by the driver for any target up to the device's. */
EXPORT CUresult cuModuleLoadDataEx(Handle *module, const void *image, unsigned options,
                                   void *option_keys, void **option_values) {
  (void)options, (void)option_keys, (void)option_values;
  const unsigned char *bytes = image;
  size_t size;
  if (bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F') {
    /* A cubin: ELF64, the section headers end the file (as ptxas writes it). */
    uint64_t sections;
    uint16_t entry_size, count;
    uint32_t flags;
    memcpy(&sections, bytes + 0x28, 8);
    memcpy(&flags, bytes + 0x30, 4);
    memcpy(&entry_size, bytes + 0x3a, 2);
    memcpy(&count, bytes + 0x3c, 2);
    size = sections + (size_t)entry_size * count;
    int arch = bytes[8] >= 8 ? (int)((flags >> 8) & 0xff) : (int)(flags & 0xff);
    TRACE("cuModuleLoadDataEx(cubin for sm_%d, %zu bytes)", arch, size);
    if (arch != device_arch) return 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
  } else {
    size = strlen(image) + 1;
    const char *target = strstr(image, ".target sm_");
    int arch = target ? atoi(target + strlen(".target sm_")) : 0;
    TRACE("cuModuleLoadDataEx(PTX for sm_%d, %zu bytes)", arch, size);
    if (arch == 0 || arch > device_arch) return 218; /* CUDA_ERROR_INVALID_PTX */
  }
  struct Module *m = calloc(1, sizeof *m);
  m->image = malloc(size);
  memcpy(m->image, image, size);
  m->size = size;
  *module = m;
  return kSuccess;
}
EXPORT CUresult cuModuleUnload(Handle module) {
  struct Module *m = module;
  free(m->image);
  free(m);
  return kSuccess;
}
/* The parameter layout of kernel `name`, as the driver reads it from the image: in a
 * cubin, the EIATTR_KPARAM_INFO records (attribute 0x17) of section .nv.info.<name>;
 * in PTX, the .param list of `.entry name(`, each at its natural alignment. */
static int cubin_params(const struct Module *m, struct Function *f) {
  const unsigned char *b = m->image;
  uint64_t sections;
  uint16_t entry_size, count, names_index;
  memcpy(&sections, b + 0x28, 8);
  memcpy(&entry_size, b + 0x3a, 2);
  memcpy(&count, b + 0x3c, 2);
  memcpy(&names_index, b + 0x3e, 2);
  uint64_t names_offset;
  memcpy(&names_offset, b + sections + (size_t)names_index * entry_size + 0x18, 8);
  char wanted[300];
  snprintf(wanted, sizeof wanted, ".nv.info.%s", f->name);
  for (uint16_t k = 0; k < count; ++k) {
    const unsigned char *header = b + sections + (size_t)k * entry_size;
    uint32_t name;
    uint64_t offset, size;
    memcpy(&name, header, 4);
    memcpy(&offset, header + 0x18, 8);
    memcpy(&size, header + 0x20, 8);
    if (strcmp((const char *)b + names_offset + name, wanted) != 0) continue;
    for (uint64_t at = 0; at + 4 <= size;) {
      const unsigned char *record = b + offset + at;
      uint16_t length = 0;
      if (record[0] == 0x04) memcpy(&length, record + 2, 2); /* a value of `length` bytes */
      if (record[0] == 0x04 && record[1] == 0x17 && length >= 12) {
        uint16_t ordinal, param_offset;
        uint32_t word;
        memcpy(&ordinal, record + 8, 2);
        memcpy(&param_offset, record + 10, 2);
        memcpy(&word, record + 12, 4);
        if (ordinal >= MAX_PARAMS) return 0;
        f->param_offset[ordinal] = param_offset;
        f->param_size[ordinal] = (word >> 18) & 0x3fff;
        if (ordinal + 1 > f->param_count) f->param_count = ordinal + 1;
      }
      at += 4 + length;
    }
    return 1;
  }
  return 0;
}

static int ptx_params(const struct Module *m, struct Function *f) {
  char wanted[300];
  snprintf(wanted, sizeof wanted, ".entry %s(", f->name);
  const char *at = strstr(m->image, wanted);
  if (!at) return 0;
  at += strlen(wanted);
  const char *end = strchr(at, ')');
  size_t offset = 0;
  while ((at = strstr(at, ".param")) && at < end) {
    at += strlen(".param");
    static const struct {
      const char *type;
      size_t size;
    } types[] = {{".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8}, {".u32", 4},
                 {".s32", 4}, {".b32", 4}, {".f32", 4}, {".u16", 2}, {".s16", 2},
                 {".b16", 2}, {".u8", 1},  {".s8", 1},  {".b8", 1}};
    size_t size = 0;
    while (*at == ' ') ++at;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
      if (strncmp(at, types[t].type, strlen(types[t].type)) == 0) size = types[t].size;
    }
    if (size == 0 || f->param_count == MAX_PARAMS) return 0; /* aggregates: not needed */
    offset = (offset + size - 1) / size * size;
    f->param_offset[f->param_count] = offset;
    f->param_size[f->param_count] = size;
    ++f->param_count;
    offset += size;
  }
  return 1;
}

EXPORT CUresult cuModuleGetFunction(Handle *function, Handle module, const char *name) {
  TRACE("cuModuleGetFunction(%s)", name);
  struct Module *m = module;
  if (strlen(name) >= 256) return kNotFound;
  struct Function *f = calloc(1, sizeof *f);
  f->module = m;
  snprintf(f->name, sizeof f->name, "%s", name);
  const unsigned char *b = m->image;
  int found = b[0] == 0x7f ? cubin_params(m, f) : ptx_params(m, f);
  if (!found) {
    free(f);
    return kNotFound;
  }
  *function = f;
  return kSuccess;
}
/* Globals the runtime looks for (device environments) are not in our images. */
EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *address, size_t *bytes, Handle module,
                                     const char *name) {
  (void)address, (void)bytes, (void)module;
  TRACE("cuModuleGetGlobal(%s)", name);
  return kNotFound;
}
EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *address, size_t *bytes, Handle module,
                                  const char *name) {
  return cuModuleGetGlobal_v2(address, bytes, module, name);
}
EXPORT CUresult cuFuncGetAttribute(int *value, int attribute, Handle function) {
  (void)function;
  switch (attribute) {
    case 0: *value = 1024; break; /* max threads per block */
    case 4: *value = 32; break;   /* registers */
    default: *value = 0; break;
  }
  return kSuccess;
}
EXPORT CUresult cuFuncSetAttribute(Handle function, int attribute, int value) {
  (void)function, (void)attribute, (void)value;
  return kSuccess;
}
EXPORT CUresult cuFuncGetParamInfo(Handle function, size_t index, size_t *offset,
                                   size_t *size) {
  const struct Function *f = function;
  if (!f || index >= (size_t)f->param_count) return kInvalidValue; /* past the last one */
  *offset = f->param_offset[index];
  *size = f->param_size[index];
  return kSuccess;
}
EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, Handle function,
                                                 void *block_to_shared, size_t shared,
                                                 int limit) {
  (void)function, (void)block_to_shared, (void)shared;
  *min_grid = 264;
  *block = limit > 0 && limit < 1024 ? limit : 1024;
  return kSuccess;
}
EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, Handle function,
                                                            int block, size_t shared) {
  (void)function, (void)shared;
  *blocks = block > 0 ? 2048 / block : 0;
  return kSuccess;
}

/* kernelParams is not supported: liboffload passes one buffer through `extra`
 * (CU_LAUNCH_PARAM_BUFFER_POINTER = 1, CU_LAUNCH_PARAM_BUFFER_SIZE = 2, END = 0). */
EXPORT CUresult cuLaunchKernel(Handle function, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, unsigned shared,
                               Handle stream, void **kernel_params, void **extra) {
  (void)stream, (void)shared;
  struct Function *f = function;
  const void *params = NULL;
  size_t params_size = 0;
  for (void **option = extra; option && *option; option += 2) {
    if ((uintptr_t)option[0] == 1) params = option[1];
    if ((uintptr_t)option[0] == 2) params_size = *(size_t *)option[1];
  }
  TRACE("cuLaunchKernel(%s, grid %u x %u x %u, block %u x %u x %u, %zu bytes of params)",
        f ? f->name : "?", gx, gy, gz, bx, by, bz, params_size);
  if (!f || kernel_params || !params) return kInvalidValue;
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024) return kInvalidValue;
  ++launches;
  if (next_launch_result != kSuccess) {
    CUresult r = next_launch_result;
    next_launch_result = kSuccess;
    return r;
  }
  if (!launch_hook) return kSuccess;
  return launch_hook(f->name, gx, bx, params, params_size, f->param_count, f->param_offset,
                     f->param_size);
}
