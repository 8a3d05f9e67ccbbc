#include "register_device_code.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernel_ir.h"
#include "offload.h"
#include "parfor_reductions.h"
#include "ptx.h"

namespace py = pybind11;

namespace enzyme_py {

void register_device_code(py::module_ &m, std::function<LLVMContextRef()> context) {
  m.def(
      "emit_ptx",
      [context](const std::string &ir_text, const std::string &kernel,
                const std::string &libdevice_path, const std::string &cpu) {
        return emit_ptx(context(), ir_text, kernel, libdevice_path, cpu);
      },
      py::arg("ir_text"), py::arg("kernel"), py::arg("libdevice_path"), py::arg("cpu"),
      "PTX for the kernel `kernel` of the module in `ir_text` (NVPTX backend).");

  m.def(
      "index_reach",
      [context](const std::string &ir_text, const std::string &function, unsigned index,
                const std::vector<unsigned> &params,
                const std::vector<std::pair<unsigned, int64_t>> &constants) {
        return index_reach(context(), ir_text, function, index, params, constants);
      },
      py::arg("ir_text"), py::arg("function"), py::arg("index"), py::arg("params"),
      py::arg("constants") = std::vector<std::pair<unsigned, int64_t>>{},
      "For each parameter in `params`: how far apart two indices may be and still\n"
      "touch the same byte of it (None when unknown), with the integer parameters of\n"
      "`constants` (position, value) held at those values; see kernel_ir.h.");
  m.def(
      "index_reaches",
      [context](const std::string &ir_text,
                const std::vector<std::tuple<std::string, unsigned, std::vector<unsigned>>>
                    &queries) {
        std::vector<ReachQuery> list;
        for (const auto &[function, index, params] : queries)
          list.push_back(ReachQuery{function, index, params, {}});
        return index_reaches(context(), ir_text, list);
      },
      py::arg("ir_text"), py::arg("queries"),
      "index_reach for each (function, index, params) of `queries`, the module parsed\n"
      "and simplified once; see kernel_ir.h.");
  m.def(
      "read_only_params",
      [context](const std::string &ir_text, const std::string &function) {
        return read_only_params(context(), ir_text, function);
      },
      py::arg("ir_text"), py::arg("function"),
      "Per parameter of `function`: whether it provably writes nothing through it.");
  m.def(
      "reductions_only_accumulated",
      [context](const std::string &ir_text, const std::string &function,
                const std::vector<unsigned> &params) {
        return reductions_only_accumulated(context(), ir_text, function, params);
      },
      py::arg("ir_text"), py::arg("function"), py::arg("params"),
      "Whether the values loaded through each pointer parameter in `params` are only\n"
      "added to and stored back there; see parfor_reductions.h.");

  m.def("gpu_alloc", &gpu_alloc, py::arg("device"), py::arg("bytes"));
  m.def("gpu_free", &gpu_free, py::arg("address"));
  m.def(
      "gpu_copy_to_device",
      [](int device, uint64_t dst, py::buffer src) {
        py::buffer_info info = src.request();
        gpu_copy_to_device(device, dst, info.ptr, info.size * info.itemsize);
      },
      py::arg("device"), py::arg("dst"), py::arg("src"));
  m.def(
      "gpu_copy_to_host",
      [](int device, py::buffer dst, uint64_t src) {
        py::buffer_info info = dst.request(/*writable=*/true);
        gpu_copy_to_host(device, info.ptr, src, info.size * info.itemsize);
      },
      py::arg("device"), py::arg("dst"), py::arg("src"));
  m.def(
      "gpu_kernel",
      [](int device, py::bytes image, const std::string &name) {
        return gpu_kernel(device, std::string(image), name);
      },
      py::arg("device"), py::arg("image"), py::arg("name"));
  m.def(
      "gpu_launch",
      [](int device, uint64_t kernel, py::bytes args, uint64_t groups, uint64_t group_size) {
        std::string packed(args);
        py::gil_scoped_release release;
        gpu_launch(device, kernel, packed, groups, group_size);
      },
      py::arg("device"), py::arg("kernel"), py::arg("args"), py::arg("groups"),
      py::arg("group_size"));

  m.def("offload_devices", []() {
    py::list out;
    for (const auto &d : offload_devices()) {
      py::dict entry;
      entry["name"] = d.name;
      entry["platform"] = d.platform;
      entry["type"] = d.type;
      entry["memory"] = d.memory;
      entry["uid"] = d.uid;
      out.append(entry);
    }
    return out;
  });
}

}  // namespace enzyme_py
