#include "llvm_options.h"

#include <llvm/Support/CommandLine.h>

namespace enzyme_py {
namespace {

const char *const kConflictDetection = "store-to-load-forwarding-conflict-detection";

const char *const kEpilogueLanes = "epilogue-vectorization-force-VF";

// LLVM 15 declares the options used here as cl::opt<T> (LoopAccessAnalysis.cpp:
// bool, LoopVectorize.cpp: unsigned).
template <typename T>
llvm::cl::opt<T> *registered(const char *name) {
  auto &options = llvm::cl::getRegisteredOptions();
  auto found = options.find(name);
  if (found == options.end()) return nullptr;
  return static_cast<llvm::cl::opt<T> *>(found->second);
}

}  // namespace

StoreLoadConflictsIgnored::StoreLoadConflictsIgnored() {
  llvm::cl::opt<bool> *option = registered<bool>(kConflictDetection);
  if (!option) return;
  option_ = option;
  before_ = option->getValue();
  option->setValue(false);
}

StoreLoadConflictsIgnored::~StoreLoadConflictsIgnored() {
  if (option_) static_cast<llvm::cl::opt<bool> *>(option_)->setValue(before_);
}

EpilogueLanesForced::EpilogueLanesForced(unsigned lanes) {
  llvm::cl::opt<unsigned> *option = registered<unsigned>(kEpilogueLanes);
  if (!option) return;
  option_ = option;
  before_ = option->getValue();
  option->setValue(lanes);
}

EpilogueLanesForced::~EpilogueLanesForced() {
  if (option_) static_cast<llvm::cl::opt<unsigned> *>(option_)->setValue(before_);
}

}  // namespace enzyme_py
