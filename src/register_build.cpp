// Build requests and their artifacts as Python classes (_native.BuildRequest,
// _native.BuildArtifact), `build`, and loading object code into the JIT.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine.h"
#include "register.h"
#include "source_module.h"

namespace py = pybind11;

namespace enzyme_py {
namespace {

// What Python asks `build` for: the derivative (DerivativeRequest, engine.h) and the
// name of the entry point to compile it behind.
struct BuildRequest : DerivativeRequest {
  std::string entry_name;
};

// What `build` returns: the artifact, and the exception of an interrupt (Ctrl-C) that
// came as an isolated build finished (None otherwise): the caller keeps the
// artifact, then raises it.
struct BuildArtifact {
  Artifact artifact;
  py::object interrupt = py::none();
};

std::vector<int> as_ints(const std::vector<capi::CDIFFE_TYPE> &codes) {
  return {codes.begin(), codes.end()};
}

std::vector<int> as_ints(const std::vector<capi::CConcreteType> &codes) {
  return {codes.begin(), codes.end()};
}

std::vector<capi::CDIFFE_TYPE> as_activities(const std::vector<int> &codes) {
  std::vector<capi::CDIFFE_TYPE> out;
  for (int a : codes) out.push_back(static_cast<capi::CDIFFE_TYPE>(a));
  return out;
}

std::vector<capi::CConcreteType> as_concrete_types(const std::vector<int> &codes) {
  std::vector<capi::CConcreteType> out;
  for (int p : codes) out.push_back(static_cast<capi::CConcreteType>(p));
  return out;
}

BuildArtifact build(const SourceModule &source, const BuildRequest &request, bool isolate) {
  Engine &e = the_engine();
  BuildArtifact out;
  if (isolate) {
    // The GIL is held while Python's signal handlers run, every ~10 ms, and
    // released in between (a progress timer and other threads run then).
    auto release_gil = [] { return std::shared_ptr<void>(new py::gil_scoped_release()); };
    try {
      out.artifact = e.build_isolated(
          source, request, request.entry_name, []() { return PyErr_CheckSignals() != 0; },
          release_gil);
    } catch (const BuildInterrupted &) {
      throw py::error_already_set();  // the handler's exception (KeyboardInterrupt)
    }
  } else {
    out.artifact = e.build(source, request, request.entry_name);
  }
  if (out.artifact.interrupted) {
    // Finished as the interrupt came: the caller keeps it, then raises this.
    py::error_already_set pending;
    out.interrupt = pending.value();
  }
  return out;
}

void register_request(py::module_ &m) {
  using R = BuildRequest;
  py::class_<R>(m, "BuildRequest",
                "One derivative asked of Enzyme, compiled behind the entry point `entry_name`\n"
                "(src/engine.h, DerivativeRequest). Activities and types are Enzyme's codes\n"
                "(CDIFFE_TYPE, CConcreteType in src/enzyme_capi.h).")
      .def(py::init([](const std::string &function, const std::string &entry_name, bool forward,
                       const std::vector<int> &args, int ret, bool return_primal, unsigned width,
                       const std::vector<int> &pointee, bool runtime_activity, bool strong_zero,
                       const std::string &passes, bool mincut, bool atomic_add,
                       bool primal_only, int split,
                       const std::vector<std::tuple<unsigned, std::vector<unsigned>, unsigned>>
                           &zeroed_shadows,
                       int64_t fused_workers) {
             auto r = std::make_unique<R>();
             r->function = function;
             r->entry_name = entry_name;
             r->forward = forward;
             r->args = as_activities(args);
             r->ret = static_cast<capi::CDIFFE_TYPE>(ret);
             r->return_primal = return_primal;
             r->width = width;
             r->pointee = as_concrete_types(pointee);
             r->runtime_activity = runtime_activity;
             r->strong_zero = strong_zero;
             r->passes = passes;
             r->mincut = mincut;
             r->atomic_add = atomic_add;
             r->primal_only = primal_only;
             r->split = split;
             r->fused_workers = fused_workers;
             for (const auto &[shadow, dims, itemsize] : zeroed_shadows) {
               r->zeroed.push_back({shadow, dims, itemsize});
             }
             return r;
           }),
           py::kw_only(), py::arg("function"), py::arg("entry_name"), py::arg("forward") = false,
           py::arg("args") = std::vector<int>{},
           py::arg("ret") = static_cast<int>(capi::DFT_CONSTANT), py::arg("return_primal") = true,
           py::arg("width") = 1u, py::arg("pointee") = std::vector<int>{},
           py::arg("runtime_activity") = false, py::arg("strong_zero") = false,
           py::arg("passes") = std::string("default<O2>"), py::arg("mincut") = false,
           py::arg("atomic_add") = false, py::arg("primal_only") = false, py::arg("split") = 0,
           py::arg("zeroed_shadows") =
               std::vector<std::tuple<unsigned, std::vector<unsigned>, unsigned>>{},
           py::arg("fused_workers") = int64_t{0})
      .def_readwrite("function", &R::function, "The function's name in the module.")
      .def_readwrite("entry_name", &R::entry_name, "The entry point's symbol.")
      .def_readwrite("forward", &R::forward, "Forward mode; else reverse.")
      .def_property(
          "args", [](const R &r) { return as_ints(r.args); },
          [](R &r, const std::vector<int> &v) { r.args = as_activities(v); },
          "One activity (CDIFFE_TYPE) per parameter.")
      .def_property(
          "ret", [](const R &r) { return static_cast<int>(r.ret); },
          [](R &r, int v) { r.ret = static_cast<capi::CDIFFE_TYPE>(v); },
          "The return value's activity (CDIFFE_TYPE).")
      .def_readwrite("return_primal", &R::return_primal, "The primal result is returned too.")
      .def_readwrite("width", &R::width, "Vector width (tangents or seeds per call).")
      .def_property(
          "pointee", [](const R &r) { return as_ints(r.pointee); },
          [](R &r, const std::vector<int> &v) { r.pointee = as_concrete_types(v); },
          "Per parameter, what a pointer points at (CConcreteType; DT_Unknown if none).")
      .def_readwrite("runtime_activity", &R::runtime_activity, "Enzyme's runtime activity.")
      .def_readwrite("strong_zero", &R::strong_zero, "Enzyme's strong zero.")
      .def_readwrite("passes", &R::passes, "The LLVM pipeline run on the derivative.")
      .def_readwrite("mincut", &R::mincut,
                     "Enzyme's min-cut caching; honoured by isolated builds only.")
      .def_readwrite("fused_workers", &R::fused_workers,
                     "The most threads a fused reverse stencil loop runs on; 0: one per core.")
      .def_readwrite("atomic_add", &R::atomic_add,
                     "Reverse mode: shadows accumulated with atomic adds (kernels).")
      .def_readwrite("primal_only", &R::primal_only,
                     "No differentiation: the function itself (kernel launchers).")
      .def_readwrite("split", &R::split,
                     "0 combined; 1 the augmented forward half of split mode, 2 its reverse.")
      .def("__repr__", [](const R &r) {
        return py::str("BuildRequest(function={!r}, entry_name={!r}, forward={}, args={}, "
                       "ret={}, width={}, primal_only={}, split={})")
            .format(r.function, r.entry_name, r.forward, as_ints(r.args),
                    static_cast<int>(r.ret), r.width, r.primal_only, r.split);
      });
}

void register_artifact(py::module_ &m) {
  using A = BuildArtifact;
  py::class_<A>(m, "BuildArtifact",
                "What `build` made (src/engine.h, Artifact): object code whose entry point\n"
                "is the one symbol callers use, and what the Python side needs to call it.")
      .def_property_readonly(
          "object", [](const A &a) { return py::bytes(a.artifact.object); },
          "Host object code: one object, or a bundle of objects compiled on several\n"
          "threads (src/split_codegen.h); load_object takes either.")
      .def_property_readonly(
          "entry_name", [](const A &a) { return a.artifact.entry_name; },
          "Its entry point's symbol (a bundle's parts also export their internal\n"
          "functions, under names made unique with it).")
      .def_property_readonly(
          "in_slots", [](const A &a) { return a.artifact.in_slots; },
          "Codes of the entry's input slots, in order (src/entry_abi.h).")
      .def_property_readonly(
          "out_slots", [](const A &a) { return a.artifact.out_slots; },
          "Codes of the slots the entry writes after them.")
      .def_property_readonly(
          "enzyme_ir", [](const A &a) { return a.artifact.enzyme_ir; },
          "The derivative function as Enzyme made it.")
      .def_property_readonly(
          "derivative_module", [](const A &a) { return a.artifact.derivative_module; },
          "The whole module after Enzyme, before the entry point (higher-order AD).")
      .def_property_readonly(
          "optimized_ir", [](const A &a) { return a.artifact.optimized_ir; },
          "The final module.")
      .def_readonly("interrupt", &A::interrupt,
                    "The interrupt that came as an isolated build finished, or None.");
}

}  // namespace

void register_build(py::module_ &m) {
  register_request(m);
  register_artifact(m);
  m.def("build", &build, py::arg("module"), py::arg("request"), py::arg("isolate"),
        "Ask Enzyme for the derivative `request` describes, optimize and compile it to\n"
        "object code entered at `request.entry_name`; with `isolate`,\n"
        "in a forked child (where `request.mincut` turns on Enzyme's min-cut caching).");

  m.def(
      "load_object",
      [](py::bytes object, const std::string &entry_name) {
        return the_engine().load(std::string(object), entry_name);
      },
      py::arg("object"), py::arg("entry_name"),
      "Load object code from `build` into the JIT; the address of its entry point.");
  m.def(
      "unload_object",
      [](const std::string &entry_name) { return the_engine().jit().unload(entry_name); },
      py::arg("entry_name"),
      "Remove the code `load_object` loaded for `entry_name` from the JIT (its memory is\n"
      "released; nothing may call it afterwards). False if none is loaded.");
  m.def(
      "loaded_objects", []() { return the_engine().jit().loaded(); },
      "How many objects `load_object` loaded are in the JIT.");
}

}  // namespace enzyme_py
