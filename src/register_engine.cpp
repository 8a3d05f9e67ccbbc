#include <pybind11/stl.h>

#include <llvm/Config/llvm-config.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "enzyme_pass.h"
#include "enzyme_plugin.h"
#include "jit.h"
#include "register.h"
#include "type_trees.h"

namespace py = pybind11;

namespace enzyme_py {
namespace {

// One per process: created by `load`, never destroyed before the process ends.
std::unique_ptr<Engine> engine;

}  // namespace

Engine &the_engine() {
  if (!engine) throw std::runtime_error("enzyme_py._native.load() was not called");
  return *engine;
}

void register_engine(py::module_ &m) {
  m.attr("llvm_version") = LLVM_VERSION_STRING;
  m.attr("codegen_revision") = kCodegenRevision;
  py::register_exception<EnzymeFailure>(m, "EnzymeFailure", PyExc_RuntimeError);
  py::register_exception<MissingSymbols>(m, "MissingSymbols", PyExc_RuntimeError);
  py::register_exception<BuildCrashed>(m, "BuildCrashed", m.attr("EnzymeFailure").ptr());

  m.def(
      "load",
      [](const std::string &plugin_path) {
        if (engine) {
          if (enzyme_api().path != plugin_path) {
            throw std::runtime_error("the Enzyme plugin is already loaded from " +
                                     enzyme_api().path);
          }
          return;
        }
        engine = std::make_unique<Engine>(plugin_path);
      },
      py::arg("plugin_path"),
      "Load the Enzyme plugin at `plugin_path` and create the engine (once per process).");
  m.def(
      "run_enzyme_pass",
      [](const std::string &ir_text, const std::string &passes) {
        return run_enzyme_pass(enzyme_api().path, ir_text, passes);
      },
      py::arg("ir_text"), py::arg("passes") = "enzyme",
      "IR text after the plugin's passes (-passes=enzyme: what __enzyme_autodiff /\n"
      "__enzyme_fwddiff calls in C code become; preserve-nvvm: rule globals to Enzyme's\n"
      "metadata), run in a forked child. RuntimeError with Enzyme's output when it fails.");
  m.def("loaded", []() { return static_cast<bool>(engine); });
  m.def("plugin_path", []() { return enzyme_api().path; });
  m.def("host", []() {
    const HostJit &jit = the_engine().jit();
    return py::make_tuple(jit.triple(), jit.cpu(), jit.features(),
                          jit.vector_math() ? "libmvec" : "",
                          jit.wide_vectors() ? "512-bit streaming loops" : "");
  });
  m.def(
      "define_symbols",
      [](const std::map<std::string, uint64_t> &symbols) {
        HostJit &jit = the_engine().jit();
        for (const auto &[name, address] : symbols) jit.define_symbol(name, address);
      },
      py::arg("symbols"), "Make each name resolve to its address in code loaded later.");
  m.def(
      "type_tree_string",
      [](int kind, int pointee) {
        const EnzymeApi &api = enzyme_api();
        return type_tree_string(api, the_engine().context(), kind, pointee);
      },
      py::arg("kind"), py::arg("pointee") = -1);
}

}  // namespace enzyme_py
