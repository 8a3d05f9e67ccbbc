// Enzyme's own LLVM pass (the plugin is also an LLVM pass plugin), run on a C
// module that asks for derivatives through Enzyme's markers
// (__enzyme_autodiff / __enzyme_fwddiff calls): what Enzyme's clang plugin does.
#pragma once

#include <string>

namespace enzyme_py {

// The IR text after `-passes=enzyme`, from a forked child: an abort inside
// Enzyme, or an error it reports, throws std::runtime_error with its output and
// leaves this process alone. Enzyme reports its errors itself there (no custom
// handler), so a marker it cannot honour is an error, never a skipped call.
std::string run_enzyme_pass(const std::string &plugin_path, const std::string &ir_text);

}  // namespace enzyme_py
