// Enzyme's own LLVM pass (the plugin is also an LLVM pass plugin), run on a C
// module that asks for derivatives through Enzyme's markers
// (__enzyme_autodiff / __enzyme_fwddiff calls): what Enzyme's clang plugin does.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <llvm-c/Core.h>

namespace enzyme_py {

// The IR text after the plugin's `-passes=<passes>` ("enzyme": the marker calls;
// "preserve-nvvm": the rule and inactivity globals become the metadata and
// attributes Enzyme reads), from a forked child (isolation.h): an abort inside
// Enzyme, or an error it reports, throws std::runtime_error with its output and
// leaves this process alone. Enzyme reports its errors itself there (no custom
// handler), so a marker it cannot honour is an error, never a skipped call.
// Functions annotated "enzyme_inactive" (__attribute__((annotate(...)))) get
// Enzyme's enzyme_inactive function attribute first.
std::string run_enzyme_pass(const std::string &plugin_path, const std::string &ir_text,
                            const std::string &passes = "enzyme");
// The same on the module `mod`, unchanged here: a new module in `mod`'s context.
// The child runs the passes on its own copy of `mod` and sends it back as bitcode
// (no text printed and parsed on either side: GMM prange's ~15 ms).
// What `while_waiting` returns is held while the child runs: the binding releases the
// GIL so, letting another thread ask about `mod` meanwhile (read-only; this function
// touches no module while it is held).
LLVMModuleRef run_enzyme_pass_on(const std::string &plugin_path, LLVMModuleRef mod,
                                 const std::string &passes = "enzyme",
                                 const std::function<std::shared_ptr<void>()> &while_waiting = {});

}  // namespace enzyme_py
