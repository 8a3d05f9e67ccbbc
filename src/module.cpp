// enzyme_py._native: the Python face of the C++ core (the engine, modules, builds
// and calls here; kernels and devices in register_device_code.cpp, the fast caller in
// caller.cpp). Its Python interface is typed in python/enzyme_py/_native.pyi.
//
// Ownership: one Engine per process (created by `load`), SourceModule objects
// owned by Python, compiled derivatives owned by the JIT for the process.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <llvm/Config/llvm-config.h>

#include <map>
#include <memory>
#include <stdexcept>

#include "arena.h"
#include "caller.h"
#include "engine.h"
#include "enzyme_pass.h"
#include "enzyme_plugin.h"
#include "jit.h"
#include "register_device_code.h"
#include "rewrites.h"

namespace py = pybind11;
using namespace enzyme_py;

namespace {

std::unique_ptr<Engine> engine;

Engine &the_engine() {
  if (!engine) throw std::runtime_error("enzyme_py._native.load() was not called");
  return *engine;
}

std::string type_string(LLVMTypeRef type) {
  char *text = LLVMPrintTypeToString(type);
  std::string result = text;
  LLVMDisposeMessage(text);
  return result;
}

py::list module_functions(const SourceModule &source) {
  py::list out;
  for (LLVMValueRef fn = LLVMGetFirstFunction(source.get()); fn;
       fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn)) continue;
    size_t length = 0;
    const char *name = LLVMGetValueName2(fn, &length);
    py::list params, names;
    for (unsigned i = 0, n = LLVMCountParams(fn); i < n; ++i) {
      LLVMValueRef p = LLVMGetParam(fn, i);
      params.append(type_string(LLVMTypeOf(p)));
      size_t plen = 0;
      const char *pname = LLVMGetValueName2(p, &plen);
      names.append(std::string(pname, plen));
    }
    py::dict entry;
    entry["name"] = std::string(name, length);
    entry["params"] = params;
    entry["param_names"] = names;
    entry["ret"] = type_string(LLVMGetReturnType(LLVMGlobalGetValueType(fn)));
    entry["linkage"] = static_cast<int>(LLVMGetLinkage(fn));
    out.append(entry);
  }
  return out;
}

// One type tree as Enzyme prints it, for `kind` (and `pointee`) built the way
// the engine builds argument trees. Exercises the TypeTree entry points.
std::string type_tree_string(int kind, int pointee) {
  const EnzymeApi &api = enzyme_api();
  LLVMContextRef ctx = the_engine().context();
  capi::CTypeTreeRef tree = api.NewTypeTreeCT(static_cast<capi::CConcreteType>(kind), ctx);
  api.TypeTreeOnlyEq(tree, -1);
  if (pointee >= 0) {
    capi::CTypeTreeRef inner =
        api.NewTypeTreeCT(static_cast<capi::CConcreteType>(pointee), ctx);
    api.TypeTreeOnlyEq(inner, -1);
    api.TypeTreeOnlyEq(inner, -1);
    api.MergeTypeTree(tree, inner);
    api.FreeTypeTree(inner);
  }
  const char *text = api.TypeTreeToString(tree);
  std::string result = text;
  api.StringFree(text);
  api.FreeTypeTree(tree);
  return result;
}

// Runs `call(entry, slots' data)` without the GIL: the slots are a 1-D buffer of 8-byte
// items; an allocation inside that failed is a MemoryError (OutOfMemory).
template <typename Call>
void invoke_on_slots(uint64_t entry, py::buffer &slots, Call call) {
  py::buffer_info info = slots.request(/*writable=*/true);
  if (info.itemsize != 8 || info.ndim != 1) {
    throw std::invalid_argument("slots must be a 1-D buffer of 8-byte items");
  }
  auto fn = reinterpret_cast<void (*)(void *)>(entry);
  void *data = info.ptr;
  size_t failed_bytes = 0;
  {
    py::gil_scoped_release release;
    failed_bytes = call(fn, data);
  }
  if (failed_bytes) throw OutOfMemory(failed_bytes);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "enzyme_py's C++ core: Enzyme in-process, LLVM 15, ORC JIT, liboffload";
  m.attr("llvm_version") = LLVM_VERSION_STRING;
  m.attr("codegen_revision") = kCodegenRevision;
  py::register_exception<EnzymeFailure>(m, "EnzymeFailure", PyExc_RuntimeError);
  py::register_exception<MissingSymbols>(m, "MissingSymbols", PyExc_RuntimeError);
  py::register_exception<BuildCrashed>(m, "BuildCrashed", m.attr("EnzymeFailure").ptr());

  m.def(
      "tape_bytes",
      []() {
        return py::make_tuple(tape_bytes_in_use(), tape_bytes_reserved(),
                              tape_bytes_last_call());
      },
      "(in use, reserved, most in use during the last call) bytes of this thread's\n"
      "stack for Enzyme's tapes.");
  m.def("release_arena", &arena_release,
        "Free this thread's temporaries and reset its tape (as after each derivative call).");
  m.def("nrt_data_offset", &nrt_data_offset, py::arg("align"),
        "Bytes from a MemInfo header of the arena to its data, for an alignment.");
  m.def("runtime_symbols", &arena_symbols,
        "Names the JIT resolves to enzyme_py's arena and tape functions -> addresses.");

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
      [](const std::string &ir_text) { return run_enzyme_pass(enzyme_api().path, ir_text); },
      py::arg("ir_text"),
      "IR text after Enzyme's own pass (-passes=enzyme), run in a forked child: what\n"
      "__enzyme_autodiff / __enzyme_fwddiff calls in C code become. RuntimeError with\n"
      "Enzyme's output when it fails.");
  m.def("loaded", []() { return static_cast<bool>(engine); });
  m.def("plugin_path", []() { return enzyme_api().path; });
  m.def("host", []() {
    const HostJit &jit = the_engine().jit();
    return py::make_tuple(jit.triple(), jit.cpu(), jit.features(),
                          jit.vector_math() ? "libmvec" : "");
  });
  m.def(
      "define_symbols",
      [](const std::map<std::string, uint64_t> &symbols) {
        HostJit &jit = the_engine().jit();
        for (const auto &[name, address] : symbols) jit.define_symbol(name, address);
      },
      py::arg("symbols"), "Make each name resolve to its address in code loaded later.");
  m.def("type_tree_string", &type_tree_string, py::arg("kind"), py::arg("pointee") = -1);

  py::class_<SourceModule>(m, "Module")
      .def(py::init([](const std::string &text) {
             return std::make_unique<SourceModule>(the_engine().context(), text);
           }),
           py::arg("ir_text"))
      .def("ir", &SourceModule::ir)
      .def(
          "with_rules",
          [](const SourceModule &self, const std::vector<py::tuple> &rules) {
            std::vector<SourceModule::Rule> list;
            for (const auto &r : rules) {
              list.push_back({r[0].cast<std::string>(), r[1].cast<std::string>(),
                              r[2].cast<std::string>(), r[3].cast<const SourceModule *>()});
            }
            return self.with_rules(list);
          },
          py::arg("rules"),
          "A new module with each (target, kind, rule, rule_module) linked in and\n"
          "attached as Enzyme's custom-derivative metadata.")
      .def(
          "optimize",
          [](SourceModule &self, const std::string &passes) {
            const HostJit &jit = the_engine().jit();
            jit.prepare(self.get());
            jit.optimize(self.get(), passes);
          },
          py::arg("passes"), "Run an LLVM pass pipeline on the module in place.")
      .def(
          "simplify_for_enzyme",
          [](SourceModule &self) { simplify_for_enzyme(self.get(), the_engine().jit()); },
          "Prepare Numba code for Enzyme in place: temporaries made provably distinct,\n"
          "linked-in callees inlined, loops simplified (see rewrites.h).")
      .def(
          "make_adds_plain",
          [](SourceModule &self, const std::string &function,
             const std::vector<unsigned> &params) {
            return make_adds_plain(self.get(), function, params);
          },
          py::arg("function"), py::arg("params"),
          "Atomic float adds of `function` into memory based on the parameters\n"
          "`params` made plain, in place (see rewrites.h); returns how many.")
      .def(
          "reaches_recursion",
          [](const SourceModule &self, const std::string &function) {
            return reaches_recursion(self.get(), function);
          },
          py::arg("function"),
          "Whether `function` reaches recursion through direct calls (see rewrites.h).")
      .def("functions", &module_functions)
      .def(
          "names",
          [](const SourceModule &self) {
            // Every function, defined or declared.
            py::list out;
            for (LLVMValueRef fn = LLVMGetFirstFunction(self.get()); fn;
                 fn = LLVMGetNextFunction(fn)) {
              size_t len = 0;
              const char *name = LLVMGetValueName2(fn, &len);
              out.append(std::string(name, len));
            }
            return out;
          },
          "Names of every function of the module, declarations included.");

  m.def(
      "build",
      [](const SourceModule &source, const std::string &function, bool forward,
         const std::vector<int> &args, int ret, bool return_primal, unsigned width,
         const std::vector<int> &pointee, bool runtime_activity, bool strong_zero,
         const std::string &passes, const std::string &entry_name, bool isolate,
         bool mincut, bool atomic_add, bool primal_only, int split) {
        DerivativeRequest req;
        req.function = function;
        req.forward = forward;
        for (int a : args) req.args.push_back(static_cast<capi::CDIFFE_TYPE>(a));
        req.ret = static_cast<capi::CDIFFE_TYPE>(ret);
        req.return_primal = return_primal;
        req.width = width;
        for (int p : pointee) req.pointee.push_back(static_cast<capi::CConcreteType>(p));
        req.runtime_activity = runtime_activity;
        req.strong_zero = strong_zero;
        req.passes = passes;
        req.mincut = mincut;
        req.atomic_add = atomic_add;
        req.primal_only = primal_only;
        req.split = split;
        Engine &e = the_engine();
        Artifact art;
        if (isolate) {
          // The GIL is held while Python's signal handlers run, every ~10 ms, and
          // released in between (a progress timer and other threads run then).
          auto release_gil = [] { return std::shared_ptr<void>(new py::gil_scoped_release()); };
          try {
            art = e.build_isolated(
                source, req, entry_name, []() { return PyErr_CheckSignals() != 0; },
                release_gil);
          } catch (const BuildInterrupted &) {
            throw py::error_already_set();  // the handler's exception (KeyboardInterrupt)
          }
        } else {
          art = e.build(source, req, entry_name);
        }
        py::dict out;
        if (art.interrupted) {
          // Finished as the interrupt came: the caller keeps it, then raises this.
          py::error_already_set pending;
          out["interrupt"] = pending.value();
        }
        out["object"] = py::bytes(art.object);
        out["entry_name"] = art.entry_name;
        out["in_slots"] = art.in_slots;
        out["out_slots"] = art.out_slots;
        out["enzyme_ir"] = art.enzyme_ir;
        out["derivative_module"] = art.derivative_module;
        out["optimized_ir"] = art.optimized_ir;
        return out;
      },
      py::arg("module"), py::arg("function"), py::arg("forward"), py::arg("args"),
      py::arg("ret"), py::arg("return_primal"), py::arg("width"), py::arg("pointee"),
      py::arg("runtime_activity"), py::arg("strong_zero"), py::arg("passes"),
      py::arg("entry_name"), py::arg("isolate"), py::arg("mincut") = false,
      py::arg("atomic_add") = false, py::arg("primal_only") = false, py::arg("split") = 0,
      "Ask Enzyme for one derivative of `function`, optimize and compile it to object\n"
      "code whose only exported symbol is `entry_name`; with `isolate`, in a forked child\n"
      "(where `mincut` turns on Enzyme's min-cut caching).");

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

  register_caller(m);

  m.def(
      "invoke",
      [](uint64_t entry, py::buffer slots) {
        invoke_on_slots(entry, slots, [](void (*fn)(void *), void *data) {
          return call_entry(fn, data);
        });
      },
      py::arg("entry"), py::arg("slots"),
      "Call a derivative's entry point on its argument slots, without the GIL.");

  py::class_<SplitTape>(m, "SplitTape",
                        "The memory of one augmented forward pass of split mode (Enzyme's "
                        "tape, temporaries and their shadows), freed when this dies.")
      .def(py::init<>())
      .def_property_readonly("bytes", &SplitTape::bytes, "Bytes its tape holds.");

  m.def(
      "invoke_split",
      [](uint64_t entry, py::buffer slots, SplitTape &split, bool forward) {
        invoke_on_slots(entry, slots, [&split, forward](void (*fn)(void *), void *data) {
          return call_entry_split(fn, data, split, forward);
        });
      },
      py::arg("entry"), py::arg("slots"), py::arg("tape"), py::arg("forward"),
      "invoke for split mode: the augmented forward pass (forward) allocating into\n"
      "`tape`, or its reverse pass reading it. The caller keeps `tape` alive meanwhile.");

  register_device_code(m, [] { return the_engine().context(); });
}
