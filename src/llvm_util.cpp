#include "llvm_util.h"

#include <cstring>

namespace enzyme_py {
namespace {

// LLVM's message, copied and disposed of.
std::string take_message(char *text) {
  std::string result = text ? text : "";
  LLVMDisposeMessage(text);
  return result;
}

}  // namespace

std::string print_value(LLVMValueRef value) { return take_message(LLVMPrintValueToString(value)); }

std::string print_module(LLVMModuleRef mod) { return take_message(LLVMPrintModuleToString(mod)); }

std::string function_text(const std::string &module_text, const std::string &name) {
  const std::string needle = " @" + name + "(";
  for (size_t at = module_text.find(needle); at != std::string::npos;
       at = module_text.find(needle, at + 1)) {
    size_t start = module_text.rfind('\n', at);
    start = start == std::string::npos ? 0 : start + 1;
    if (module_text.compare(start, 7, "define ") != 0) continue;  // a call, a declare
    // The comment LLVM prints above a definition (its attributes) belongs to it.
    const std::string comment = "; Function Attrs:";
    if (start > 0) {
      size_t above = module_text.rfind('\n', start - 2);
      above = above == std::string::npos ? 0 : above + 1;
      if (module_text.compare(above, comment.size(), comment) == 0) start = above;
    }
    const size_t end = module_text.find("\n}\n", at);
    if (end == std::string::npos) return "";
    return module_text.substr(start, end + 3 - start);  // with its last newline
  }
  return "";
}

std::string print_type(LLVMTypeRef type) { return take_message(LLVMPrintTypeToString(type)); }

FunctionsLeftAlone::FunctionsLeftAlone(LLVMModuleRef mod, const std::vector<std::string> &names)
    : mod_(mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  for (const std::string &name : names) {
    LLVMValueRef fn = LLVMGetNamedFunction(mod, name.c_str());
    if (!fn || LLVMIsDeclaration(fn)) continue;
    // optnone asks for noinline (the verifier's rule).
    for (const char *spelled : {"noinline", "optnone"}) {
      const unsigned kind = LLVMGetEnumAttributeKindForName(spelled, std::strlen(spelled));
      if (LLVMGetEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, kind)) continue;
      LLVMAttributeRef attribute = LLVMCreateEnumAttribute(ctx, kind, 0);
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, attribute);
      added_.emplace_back(name, kind);
    }
  }
}

FunctionsLeftAlone::~FunctionsLeftAlone() {
  // Looked up again: a pipeline may have deleted one (globaldce).
  for (const auto &[name, kind] : added_) {
    LLVMValueRef fn = LLVMGetNamedFunction(mod_, name.c_str());
    if (fn) LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, kind);
  }
}

}  // namespace enzyme_py
