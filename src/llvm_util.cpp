#include "llvm_util.h"

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

std::string print_type(LLVMTypeRef type) { return take_message(LLVMPrintTypeToString(type)); }

}  // namespace enzyme_py
