// LLVM's own command-line options, set for a span of code.
#pragma once

namespace enzyme_py {

// While it lives, LLVM's command-line option `name`, of type T (bool or unsigned:
// LLVM 15 declares the options below as cl::opt<T>), has `value`; then the value it
// had before. Without the option (another LLVM), a no-op.
template <typename T>
class OptionSet {
 public:
  OptionSet(const char *name, T value);
  ~OptionSet();
  OptionSet(const OptionSet &) = delete;
  OptionSet &operator=(const OptionSet &) = delete;

 private:
  void *option_ = nullptr;  // llvm::cl::opt<T>*
  T before_{};
};

// While it lives, LLVM's loop access analysis does not refuse a loop whose
// forward dependence "could prevent store-to-load forwarding"
// (-store-to-load-forwarding-conflict-detection=false). That refusal is a cost
// heuristic, not a legality rule: a forward dependence is safe to vectorise.
// It misfires on loops that run downwards (Enzyme's reverse loops: the
// Rosenbrock gradient's writes to grad[i] and grad[i+1]), whose accesses it
// reorders as if the loop ran upwards.
class StoreLoadConflictsIgnored : OptionSet<bool> {
 public:
  StoreLoadConflictsIgnored();
};

// While it lives, LLVM's loop vectoriser also vectorises the remainder of each loop
// it vectorises, with `lanes` lanes (-epilogue-vectorization-force-VF=lanes, whose
// default, 1, leaves it to the cost model).
class EpilogueLanesForced : OptionSet<unsigned> {
 public:
  explicit EpilogueLanesForced(unsigned lanes);
};

}  // namespace enzyme_py
