// Built when liboffload's header was not found: listing devices says why.
#include <stdexcept>

#include "offload.h"

namespace enzyme_py {

namespace {
[[noreturn]] void missing() {
  throw std::runtime_error(
      "enzyme_py was built without liboffload's header (apt-get install "
      "liboffload-22-dev, then rebuild)");
}
}  // namespace

std::vector<OffloadDevice> offload_devices() { missing(); }
uint64_t gpu_alloc(int, size_t) { missing(); }
void gpu_free(uint64_t) { missing(); }
void gpu_copy_to_device(int, uint64_t, const void *, size_t) { missing(); }
void gpu_copy_to_host(int, void *, uint64_t, size_t) { missing(); }
uint64_t gpu_kernel(int, const std::string &, const std::string &) { missing(); }
void gpu_launch(int, uint64_t, const std::string &, uint64_t, uint64_t) { missing(); }

}  // namespace enzyme_py
