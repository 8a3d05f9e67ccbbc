#include "offload.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <stdexcept>

#include "offload_capi.h"

namespace enzyme_py {
namespace {

const char *const kDefaultLibraries[] = {
    "libLLVMOffload.so.22.1",
    "/usr/lib/llvm-22/lib/libLLVMOffload.so.22.1",
};

template <typename Fn>
void resolve(OffloadApi &api, Fn &slot, const char *name) {
  slot = reinterpret_cast<Fn>(dlsym(api.handle, name));
  if (!slot) {
    throw std::runtime_error("liboffload " + api.path + " does not export " + name);
  }
}

void check(ol_result_t result, const char *what) {
  if (result == nullptr) return;  // OL_SUCCESS is a null result
  std::string details = result->Details ? result->Details : "";
  throw std::runtime_error(std::string("liboffload: ") + what + " failed (code " +
                           std::to_string(static_cast<int>(result->Code)) + ")" +
                           (details.empty() ? "" : ": " + details));
}

const char *const kDeviceHeapBytes = "268435456";  // 256 MiB

// Loaded and initialised once; liboffload keeps its plugins for the process.
const OffloadApi &offload_api() {
  static OffloadApi api;
  static std::string load_error;
  if (api.Init) return api;
  if (!load_error.empty()) throw std::runtime_error(load_error);
  std::vector<std::string> candidates;
  if (const char *env = std::getenv("ENZYME_PY_OFFLOAD_LIB")) candidates.push_back(env);
  for (const char *lib : kDefaultLibraries) candidates.push_back(lib);
  std::string tried;
  for (const auto &candidate : candidates) {
    api.handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.handle) {
      api.path = candidate;
      break;
    }
    const char *why = dlerror();
    tried += "\n  " + candidate + ": " + (why ? why : "not found");
  }
  if (!api.handle) {
    load_error = "liboffload could not be loaded (install liboffload-22 or set "
                 "ENZYME_PY_OFFLOAD_LIB):" + tried;
    throw std::runtime_error(load_error);
  }
  OffloadApi resolved = api;
  resolve(resolved, resolved.IterateDevices, "olIterateDevices");
  resolve(resolved, resolved.GetDeviceInfo, "olGetDeviceInfo");
  resolve(resolved, resolved.GetDeviceInfoSize, "olGetDeviceInfoSize");
  resolve(resolved, resolved.GetPlatformInfo, "olGetPlatformInfo");
  resolve(resolved, resolved.MemAlloc, "olMemAlloc");
  resolve(resolved, resolved.MemFree, "olMemFree");
  resolve(resolved, resolved.Memcpy, "olMemcpy");
  resolve(resolved, resolved.CreateQueue, "olCreateQueue");
  resolve(resolved, resolved.SyncQueue, "olSyncQueue");
  resolve(resolved, resolved.CreateProgram, "olCreateProgram");
  resolve(resolved, resolved.GetSymbol, "olGetSymbol");
  resolve(resolved, resolved.LaunchKernel, "olLaunchKernel");
  resolve(resolved, resolved.Init, "olInit");
  // The device heap (CUDA's default is 8 MiB) holds the tapes of reverse
  // kernels whose body loops: one per GPU thread. liboffload's plugins size it
  // from this variable when they start; a value the user set is kept.
  setenv("LIBOMPTARGET_HEAP_SIZE", kDeviceHeapBytes, /*overwrite=*/0);
  check(resolved.Init(), "olInit");
  api = resolved;
  return api;
}

std::string device_string(const OffloadApi &api, ol_device_handle_t device,
                          ol_device_info_t what) {
  size_t size = 0;
  if (api.GetDeviceInfoSize(device, what, &size) != nullptr || size == 0) return "";
  std::string value(size, '\0');
  if (api.GetDeviceInfo(device, what, size, value.data()) != nullptr) return "";
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

const char *backend_name(ol_platform_backend_t backend) {
  switch (backend) {
    case OL_PLATFORM_BACKEND_CUDA: return "cuda";
    case OL_PLATFORM_BACKEND_AMDGPU: return "amdgpu";
    case OL_PLATFORM_BACKEND_LEVEL_ZERO: return "level_zero";
    case OL_PLATFORM_BACKEND_HOST: return "host";
    default: return "unknown";
  }
}

const char *type_name(ol_device_type_t type) {
  switch (type) {
    case OL_DEVICE_TYPE_GPU: return "gpu";
    case OL_DEVICE_TYPE_CPU: return "cpu";
    case OL_DEVICE_TYPE_HOST: return "host";
    default: return "unknown";
  }
}

struct Collector {
  const OffloadApi *api;
  std::vector<OffloadDevice> devices;
  std::vector<ol_device_handle_t> handles;
};

bool collect(ol_device_handle_t device, void *user) {
  auto &c = *static_cast<Collector *>(user);
  OffloadDevice d;
  d.name = device_string(*c.api, device, OL_DEVICE_INFO_NAME);
  d.uid = device_string(*c.api, device, OL_DEVICE_INFO_UID);
  ol_device_type_t type = OL_DEVICE_TYPE_DEFAULT;
  if (c.api->GetDeviceInfo(device, OL_DEVICE_INFO_TYPE, sizeof type, &type) == nullptr) {
    d.type = type_name(type);
  }
  ol_platform_handle_t platform = nullptr;
  ol_platform_backend_t backend = OL_PLATFORM_BACKEND_UNKNOWN;
  if (c.api->GetDeviceInfo(device, OL_DEVICE_INFO_PLATFORM, sizeof platform, &platform) ==
          nullptr &&
      c.api->GetPlatformInfo(platform, OL_PLATFORM_INFO_BACKEND, sizeof backend,
                             &backend) == nullptr) {
    d.platform = backend_name(backend);
  }
  uint64_t memory = 0;
  if (c.api->GetDeviceInfo(device, OL_DEVICE_INFO_GLOBAL_MEM_SIZE, sizeof memory,
                           &memory) == nullptr) {
    d.memory = memory;
  }
  c.devices.push_back(std::move(d));
  c.handles.push_back(device);
  return true;  // keep iterating
}

// Devices and their handles, found once (liboffload's list does not change).
const Collector &collected() {
  static Collector collector{nullptr, {}, {}};
  static bool done = false;
  if (!done) {
    const OffloadApi &api = offload_api();
    collector.api = &api;
    check(api.IterateDevices(&collect, &collector), "olIterateDevices");
    done = true;
  }
  return collector;
}

ol_device_handle_t gpu_handle(int device) {
  const Collector &c = collected();
  if (device < 0 || static_cast<size_t>(device) >= c.handles.size()) {
    throw std::runtime_error("no offload device " + std::to_string(device));
  }
  if (c.devices[device].type != "gpu") {
    throw std::runtime_error("offload device " + std::to_string(device) + " (" +
                             c.devices[device].name + ") is not a GPU");
  }
  return c.handles[device];
}

ol_device_handle_t host_handle() {
  const Collector &c = collected();
  for (size_t i = 0; i < c.devices.size(); ++i) {
    if (c.devices[i].type == "host") return c.handles[i];
  }
  throw std::runtime_error("liboffload lists no host device");
}

ol_queue_handle_t queue_for(int device) {
  static std::map<int, ol_queue_handle_t> queues;
  auto found = queues.find(device);
  if (found != queues.end()) return found->second;
  ol_queue_handle_t queue = nullptr;
  check(offload_api().CreateQueue(gpu_handle(device), &queue), "olCreateQueue");
  queues[device] = queue;
  return queue;
}

void sync(int device) { check(offload_api().SyncQueue(queue_for(device)), "olSyncQueue"); }

}  // namespace

std::vector<OffloadDevice> offload_devices() { return collected().devices; }

uint64_t gpu_alloc(int device, size_t bytes) {
  void *address = nullptr;
  check(offload_api().MemAlloc(gpu_handle(device), OL_ALLOC_TYPE_DEVICE, bytes ? bytes : 1,
                               &address),
        "olMemAlloc");
  return reinterpret_cast<uint64_t>(address);
}

void gpu_free(uint64_t address) {
  check(offload_api().MemFree(reinterpret_cast<void *>(address)), "olMemFree");
}

void gpu_copy_to_device(int device, uint64_t dst, const void *src, size_t bytes) {
  if (!bytes) return;
  check(offload_api().Memcpy(queue_for(device), reinterpret_cast<void *>(dst),
                             gpu_handle(device), src, host_handle(), bytes),
        "olMemcpy to the device");
  sync(device);
}

void gpu_copy_to_host(int device, void *dst, uint64_t src, size_t bytes) {
  if (!bytes) return;
  check(offload_api().Memcpy(queue_for(device), dst, host_handle(),
                             reinterpret_cast<const void *>(src), gpu_handle(device), bytes),
        "olMemcpy to the host");
  sync(device);
}

uint64_t gpu_kernel(int device, const std::string &image, const std::string &name) {
  ol_program_handle_t program = nullptr;
  check(offload_api().CreateProgram(gpu_handle(device), image.data(), image.size(), &program),
        "olCreateProgram");
  ol_symbol_handle_t kernel = nullptr;
  check(offload_api().GetSymbol(program, name.c_str(), OL_SYMBOL_KIND_KERNEL, &kernel),
        "olGetSymbol");
  return reinterpret_cast<uint64_t>(kernel);
}

void gpu_launch(int device, uint64_t kernel, const std::string &args, uint64_t groups,
                uint64_t group_size) {
  ol_kernel_launch_size_args_t size{};
  size.Dimensions = 1;
  size.NumGroups = {static_cast<uint32_t>(groups), 1, 1};
  size.GroupSize = {static_cast<uint32_t>(group_size), 1, 1};
  size.DynSharedMemory = 0;
  check(offload_api().LaunchKernel(queue_for(device), gpu_handle(device),
                                   reinterpret_cast<ol_symbol_handle_t>(kernel), args.data(),
                                   args.size(), &size),
        "olLaunchKernel");
  sync(device);
}

}  // namespace enzyme_py
