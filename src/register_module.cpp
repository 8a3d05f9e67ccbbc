#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "const_memory.h"
#include "enzyme_pass.h"
#include "enzyme_plugin.h"
#include "index_signs.h"
#include "jit.h"
#include "kernel_ir.h"
#include "llvm_util.h"
#include "numba_rewrites.h"
#include "register.h"
#include "rewrites.h"
#include "source_module.h"

namespace py = pybind11;

namespace enzyme_py {
namespace {

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
      params.append(print_type(LLVMTypeOf(p)));
      size_t plen = 0;
      const char *pname = LLVMGetValueName2(p, &plen);
      names.append(std::string(pname, plen));
    }
    py::dict entry;
    entry["name"] = std::string(name, length);
    entry["params"] = params;
    entry["param_names"] = names;
    entry["ret"] = print_type(LLVMGetReturnType(LLVMGlobalGetValueType(fn)));
    entry["linkage"] = static_cast<int>(LLVMGetLinkage(fn));
    out.append(entry);
  }
  return out;
}

}  // namespace

void register_module(py::module_ &m) {
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
          [](SourceModule &self, const std::string &passes,
             const std::vector<std::string> &leaving) {
            const HostJit &jit = the_engine().jit();
            jit.prepare(self.get());
            const FunctionsLeftAlone alone(self.get(), leaving);
            jit.optimize(self.get(), passes);
          },
          py::arg("passes"), py::arg("leaving") = std::vector<std::string>(),
          "Run an LLVM pass pipeline on the module in place; its function passes leave\n"
          "the functions `leaving` as they are.")
      .def(
          "simplify_for_enzyme",
          [](SourceModule &self, const std::vector<std::string> &leaving) {
            const FunctionsLeftAlone alone(self.get(), leaving);
            simplify_for_enzyme(self.get(), the_engine().jit());
          },
          py::arg("leaving") = std::vector<std::string>(),
          "Prepare Numba code for Enzyme in place: temporaries made provably distinct,\n"
          "linked-in callees inlined, loops simplified (see numba_rewrites.h); the pass\n"
          "pipelines leave the functions `leaving` as they are.")
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
          "reorder_loop_sums",
          [](SourceModule &self, const std::string &function) {
            return reorder_loop_sums(self.get(), function);
          },
          py::arg("function"),
          "The running sums of `function`'s outermost loops made reorderable, in\n"
          "place (a prange body's; see rewrites.h); returns how many.")
      .def(
          "assume_signs_of_calls",
          [](SourceModule &self, const std::string &callee, const std::string &function,
             const std::vector<std::pair<unsigned, unsigned>> &pairs,
             const std::vector<std::string> &stand_ins) {
            return assume_signs_of_calls(*llvm::unwrap(self.get()), callee, function, pairs,
                                         stand_ins);
          },
          py::arg("callee"), py::arg("function"), py::arg("pairs"), py::arg("stand_ins"),
          "For each (a, p) of `pairs`: `function`'s entry assumes its parameter p >= 0\n"
          "where every call of `callee` passes a value proven non-negative as argument a\n"
          "(see index_signs.h), calls from `stand_ins` counting where they pass a\n"
          "parameter of their own on; returns how many assumes it added.")
      .def(
          "reaches_recursion",
          [](const SourceModule &self, const std::string &function) {
            return reaches_recursion(self.get(), function);
          },
          py::arg("function"),
          "Whether `function` reaches recursion through direct calls (see rewrites.h).")
      .def(
          "const_params_carrying_derivatives",
          [](const SourceModule &self, const std::string &function,
             const std::vector<int> &activities, const std::vector<bool> &float_pointee) {
            return const_params_carrying_derivatives(self.get(), function, activities,
                                                     float_pointee);
          },
          py::arg("function"), py::arg("activities"), py::arg("float_pointee"),
          "Const float pointer parameters of `function` into which values carrying a\n"
          "derivative are stored and from which they are read back (see const_memory.h).")
      .def(
          "read_only_params",
          [](const SourceModule &self, const std::string &function) {
            ModuleOwner copy{LLVMCloneModule(self.get())};
            return read_only_params(copy.mod, function);
          },
          py::arg("function"),
          "Per parameter of `function`, whether LLVM infers it readonly or readnone\n"
          "(on a copy of the module: see kernel_ir.h).")
      .def(
          "keep_reached",
          [](SourceModule &self, const std::vector<std::string> &roots) {
            std::vector<LLVMValueRef> functions;
            for (const std::string &name : roots) {
              functions.push_back(defined_function(self.get(), name));
            }
            keep_reached(self.get(), functions);
          },
          py::arg("roots"),
          "In place: the bodies of the functions no root reaches through direct calls\n"
          "deleted (see kernel_ir.h).")
      .def(
          "copy", [](const SourceModule &self) {
            return std::make_unique<SourceModule>(LLVMCloneModule(self.get()));
          },
          "A copy of the module (in the same context).")
      .def(
          "drop_param_memory_attributes",
          [](SourceModule &self) { drop_param_memory_attributes(self.get()); },
          "In place: readonly, readnone and writeonly dropped from every definition's\n"
          "parameters (see kernel_ir.h).")
      .def(
          "settle_flags",
          [](SourceModule &self, const std::vector<std::pair<std::string, bool>> &flags) {
            settle_flags(self.get(), flags);
          },
          py::arg("flags"),
          "In place: each (name, value) of `flags`, an i1 variable, made an internal\n"
          "constant of that value (see kernel_ir.h).")
      .def("functions", &module_functions)
      .def(
          "after_enzyme_pass",
          [](const SourceModule &self, const std::string &passes) {
            // The GIL released while the child runs: other threads may ask about
            // this module meanwhile (their calls hold the GIL throughout).
            auto release_gil = [] { return std::shared_ptr<void>(new py::gil_scoped_release()); };
            return std::make_unique<SourceModule>(
                run_enzyme_pass_on(enzyme_api().path, self.get(), passes, release_gil));
          },
          py::arg("passes") = "enzyme",
          "A new module: this one after the Enzyme plugin's passes (run_enzyme_pass's,\n"
          "on this module in a forked child; see enzyme_pass.h), the GIL released while\n"
          "the child runs. RuntimeError with Enzyme's output when it fails.")
      .def(
          "function_ir",
          [](const SourceModule &self, const std::string &name) {
            LLVMValueRef fn = LLVMGetNamedFunction(self.get(), name.c_str());
            return fn && !LLVMIsDeclaration(fn) ? print_value(fn) : std::string();
          },
          py::arg("name"), "The text of the function `name`; \"\" where none is defined.")
      .def(
          "variables",
          [](const SourceModule &self) {
            std::vector<std::string> out;
            for (LLVMValueRef var = LLVMGetFirstGlobal(self.get()); var;
                 var = LLVMGetNextGlobal(var)) {
              size_t len = 0;
              const char *name = LLVMGetValueName2(var, &len);
              out.emplace_back(name, len);
            }
            return out;
          },
          "Names of the module's global variables, declarations included.")
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
}

}  // namespace enzyme_py
