#include "llvm_options.h"

#include <llvm/Support/CommandLine.h>

namespace enzyme_py {
namespace {

const char *const kConflictDetection = "store-to-load-forwarding-conflict-detection";

llvm::cl::opt<bool> *conflict_detection() {
  auto &options = llvm::cl::getRegisteredOptions();
  auto found = options.find(kConflictDetection);
  if (found == options.end()) return nullptr;
  // LLVM 15 declares it as cl::opt<bool> (LoopAccessAnalysis.cpp).
  return static_cast<llvm::cl::opt<bool> *>(found->second);
}

}  // namespace

StoreLoadConflictsIgnored::StoreLoadConflictsIgnored() {
  llvm::cl::opt<bool> *option = conflict_detection();
  if (!option) return;
  option_ = option;
  before_ = option->getValue();
  option->setValue(false);
}

StoreLoadConflictsIgnored::~StoreLoadConflictsIgnored() {
  if (option_) static_cast<llvm::cl::opt<bool> *>(option_)->setValue(before_);
}

}  // namespace enzyme_py
