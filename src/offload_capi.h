// LLVM's offload runtime (liboffload, the `ol*` C API), as enzyme_py uses it.
//
// The types come from the runtime's own header (offload/OffloadAPI.h of
// Debian's liboffload-22-dev); the library is dlopen'ed, never linked, so a
// machine without liboffload still imports enzyme_py. Each function is held
// as a pointer of exactly the header's type.
#pragma once

#include <string>

#include <offload/OffloadAPI.h>

namespace enzyme_py {

struct OffloadApi {
  void *handle = nullptr;
  std::string path;
  decltype(&olInit) Init = nullptr;
  decltype(&olIterateDevices) IterateDevices = nullptr;
  decltype(&olGetDeviceInfo) GetDeviceInfo = nullptr;
  decltype(&olGetDeviceInfoSize) GetDeviceInfoSize = nullptr;
  decltype(&olGetPlatformInfo) GetPlatformInfo = nullptr;
  decltype(&olMemAlloc) MemAlloc = nullptr;
  decltype(&olMemFree) MemFree = nullptr;
  decltype(&olMemcpy) Memcpy = nullptr;
  decltype(&olCreateQueue) CreateQueue = nullptr;
  decltype(&olSyncQueue) SyncQueue = nullptr;
  decltype(&olCreateProgram) CreateProgram = nullptr;
  decltype(&olGetSymbol) GetSymbol = nullptr;
  decltype(&olLaunchKernel) LaunchKernel = nullptr;
};

}  // namespace enzyme_py
