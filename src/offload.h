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
};

// Devices liboffload reports. Throws std::runtime_error when liboffload cannot
// be loaded or initialised; the message says which library was tried.
std::vector<OffloadDevice> offload_devices();

}  // namespace enzyme_py
