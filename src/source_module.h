// An LLVM IR module given by a frontend (Python: _native.Module); derivatives are
// built on clones, custom derivative rules linked into new modules.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// An LLVM IR module given by a frontend; derivatives are built on clones.
class SourceModule {
 public:
  SourceModule(LLVMContextRef ctx, const std::string &ir_text);
  // Takes ownership of `mod`.
  explicit SourceModule(LLVMModuleRef mod) : mod_(mod) {}
  ~SourceModule();
  SourceModule(const SourceModule &) = delete;
  SourceModule &operator=(const SourceModule &) = delete;

  LLVMModuleRef get() const { return mod_; }
  std::string ir() const;

  // A custom derivative rule for Enzyme: the function `target` (defined or
  // declared here) gets its derivative from `rule` of `rule_module`.
  // kind: "enzyme_augment" / "enzyme_gradient" (reverse) or
  // "enzyme_derivative" (forward).
  struct Rule {
    std::string target, kind, rule;
    const SourceModule *rule_module;
  };
  // A new module: this one, each rule's module linked in, the rules attached
  // as the function metadata Enzyme reads. Throws std::invalid_argument.
  std::unique_ptr<SourceModule> with_rules(const std::vector<Rule> &rules) const;

 private:
  LLVMModuleRef mod_ = nullptr;
};

}  // namespace enzyme_py
