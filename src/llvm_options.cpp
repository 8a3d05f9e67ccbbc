#include "llvm_options.h"

#include <llvm/Support/CommandLine.h>

namespace enzyme_py {

template <typename T>
OptionSet<T>::OptionSet(const char *name, T value) {
  auto &options = llvm::cl::getRegisteredOptions();
  auto found = options.find(name);
  if (found == options.end()) return;
  auto *option = static_cast<llvm::cl::opt<T> *>(found->second);
  option_ = option;
  before_ = option->getValue();
  option->setValue(value);
}

template <typename T>
OptionSet<T>::~OptionSet() {
  if (option_) static_cast<llvm::cl::opt<T> *>(option_)->setValue(before_);
}

template class OptionSet<bool>;
template class OptionSet<unsigned>;

StoreLoadConflictsIgnored::StoreLoadConflictsIgnored()
    : OptionSet<bool>("store-to-load-forwarding-conflict-detection", false) {}

EpilogueLanesForced::EpilogueLanesForced(unsigned lanes)
    : OptionSet<unsigned>("epilogue-vectorization-force-VF", lanes) {}

}  // namespace enzyme_py
