// Built when liboffload's header was not found: listing devices says why.
#include <stdexcept>

#include "offload.h"

namespace enzyme_py {

std::vector<OffloadDevice> offload_devices() {
  throw std::runtime_error(
      "enzyme_py was built without liboffload's header (apt-get install "
      "liboffload-22-dev, then rebuild)");
}

}  // namespace enzyme_py
