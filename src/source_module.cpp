#include "source_module.h"

#include <algorithm>
#include <stdexcept>

#include <llvm-c/Analysis.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>

#include "llvm_util.h"

namespace enzyme_py {

SourceModule::SourceModule(LLVMContextRef ctx, const std::string &ir_text) {
  LLVMMemoryBufferRef buffer =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(ir_text.data(), ir_text.size(), "ir");
  char *error = nullptr;
  // Takes ownership of the buffer.
  if (LLVMParseIRInContext(ctx, buffer, &mod_, &error)) {
    std::string text = error ? error : "unknown parse error";
    LLVMDisposeMessage(error);
    throw std::invalid_argument("invalid LLVM IR: " + text);
  }
  if (LLVMVerifyModule(mod_, LLVMReturnStatusAction, &error)) {
    std::string text = error ? error : "";
    LLVMDisposeMessage(error);
    LLVMDisposeModule(mod_);
    mod_ = nullptr;
    throw std::invalid_argument("invalid LLVM IR: " + text);
  }
  LLVMDisposeMessage(error);
}

SourceModule::~SourceModule() {
  if (mod_) LLVMDisposeModule(mod_);
}

std::string SourceModule::ir() const { return print_module(mod_); }

std::unique_ptr<SourceModule> SourceModule::with_rules(const std::vector<Rule> &rules) const {
  ModuleOwner linked{LLVMCloneModule(mod_)};
  std::vector<const SourceModule *> done;
  for (const Rule &r : rules) {
    // A rule written in the function's own module is there already.
    if (r.rule_module == this) continue;
    if (std::find(done.begin(), done.end(), r.rule_module) != done.end()) continue;
    // Linked in already: a derivative made with these rules, differentiated again.
    LLVMValueRef existing = LLVMGetNamedFunction(linked.mod, r.rule.c_str());
    if (existing && !LLVMIsDeclaration(existing)) continue;
    done.push_back(r.rule_module);
    // The linker consumes its source: link a clone.
    if (LLVMLinkModules2(linked.mod, LLVMCloneModule(r.rule_module->get()))) {
      throw std::invalid_argument("the rules for '" + r.target +
                                  "' cannot be linked with the function's module "
                                  "(a name defined in both?)");
    }
  }
  LLVMContextRef ctx = LLVMGetModuleContext(linked.mod);
  for (const Rule &r : rules) {
    LLVMValueRef target = LLVMGetNamedFunction(linked.mod, r.target.c_str());
    LLVMValueRef rule = LLVMGetNamedFunction(linked.mod, r.rule.c_str());
    if (!target) throw std::invalid_argument("no function '" + r.target + "' to attach a rule to");
    if (!rule || LLVMIsDeclaration(rule)) {
      throw std::invalid_argument("the rule '" + r.rule + "' is not defined");
    }
    LLVMMetadataRef node_ops[] = {LLVMValueAsMetadata(rule)};
    LLVMMetadataRef node = LLVMMDNodeInContext2(ctx, node_ops, 1);
    unsigned kind = LLVMGetMDKindIDInContext(ctx, r.kind.c_str(),
                                             static_cast<unsigned>(r.kind.size()));
    LLVMGlobalSetMetadata(target, kind, node);
    // Kept for Enzyme until it has made the derivative.
    LLVMSetLinkage(rule, LLVMExternalLinkage);
  }
  return std::make_unique<SourceModule>(linked.release());
}

}  // namespace enzyme_py
