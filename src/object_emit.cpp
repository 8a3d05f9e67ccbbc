#include "object_emit.h"

#include <mutex>
#include <stdexcept>

#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "llvm_options.h"

namespace enzyme_py {

namespace {

// Whether `mod` has a function of more than kLargeFunction instructions.
bool has_large_function(LLVMModuleRef mod) {
  for (const llvm::Function &fn : *llvm::unwrap(mod)) {
    if (fn.getInstructionCount() > kLargeFunction) return true;
  }
  return false;
}

}  // namespace

std::string emit_object_code(LLVMModuleRef mod, LLVMTargetMachineRef machine) {
  llvm::TargetMachine &target = *reinterpret_cast<llvm::TargetMachine *>(machine);
  llvm::Module &module = *llvm::unwrap(mod);
  module.setDataLayout(target.createDataLayout());
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream out(object);
  llvm::legacy::PassManager passes;
  {
    // -disable-lsr is read while the passes are added (TargetPassConfig), and it is
    // global: one thread at a time sets it and adds its passes.
    static std::mutex options;
    const std::lock_guard<std::mutex> lock(options);
    const OptionSet<bool> no_lsr("disable-lsr", has_large_function(mod));
    if (target.addPassesToEmitFile(passes, out, nullptr, llvm::CGFT_ObjectFile)) {
      throw std::runtime_error("code generation failed: the target cannot emit an object file");
    }
  }
  passes.run(module);
  return std::string(object.data(), object.size());
}

}  // namespace enzyme_py
