#include "offload.h"

#include <dlfcn.h>

#include <cstdlib>
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
  resolve(resolved, resolved.Init, "olInit");
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
};

bool collect(ol_device_handle_t device, void *user) {
  auto &c = *static_cast<Collector *>(user);
  OffloadDevice d;
  d.name = device_string(*c.api, device, OL_DEVICE_INFO_NAME);
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
  return true;  // keep iterating
}

}  // namespace

std::vector<OffloadDevice> offload_devices() {
  const OffloadApi &api = offload_api();
  Collector collector{&api, {}};
  check(api.IterateDevices(&collect, &collector), "olIterateDevices");
  return collector.devices;
}

}  // namespace enzyme_py
