// Devices of LLVM's offload runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace enzyme_py {

struct OffloadDevice {
  std::string name;
  std::string platform;  // "cuda", "amdgpu", "host", "level_zero", "unknown"
  std::string type;      // "gpu", "cpu", "host"
  uint64_t memory = 0;   // global memory in bytes, 0 when unknown
  std::string uid;       // "CUDA-<UUID in hex>" for CUDA devices: the driver's own key
};

// Devices liboffload reports. Throws std::runtime_error when liboffload cannot
// be loaded or initialised; the message says which library was tried.
std::vector<OffloadDevice> offload_devices();

// GPU memory and kernels on device `device` (an index into offload_devices(),
// which must be a GPU: liboffload's virtual host device cannot run programs).
// Each operation waits for completion. Throws std::runtime_error with
// liboffload's message.
uint64_t gpu_alloc(int device, size_t bytes);
void gpu_free(uint64_t address);
void gpu_copy_to_device(int device, uint64_t dst, const void *src, size_t bytes);
void gpu_copy_to_host(int device, void *dst, uint64_t src, size_t bytes);
// Loads a program image (cubin or PTX) and returns its kernel `name`.
uint64_t gpu_kernel(int device, const std::string &image, const std::string &name);
// Launches `kernel` with `groups` x `group_size` threads; `args` holds the
// kernel's parameters laid out as the kernel expects them.
void gpu_launch(int device, uint64_t kernel, const std::string &args, uint64_t groups,
                uint64_t group_size);

}  // namespace enzyme_py
