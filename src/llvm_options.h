// LLVM's own command-line options, set for a span of code.
#pragma once

namespace enzyme_py {

// While it lives, LLVM's loop access analysis does not refuse a loop whose
// forward dependence "could prevent store-to-load forwarding"
// (-store-to-load-forwarding-conflict-detection=false). That refusal is a cost
// heuristic, not a legality rule: a forward dependence is safe to vectorise.
// It misfires on loops that run downwards (Enzyme's reverse loops: the
// Rosenbrock gradient's writes to grad[i] and grad[i+1]), whose accesses it
// reorders as if the loop ran upwards. Without the option (another LLVM), a no-op.
class StoreLoadConflictsIgnored {
 public:
  StoreLoadConflictsIgnored();
  ~StoreLoadConflictsIgnored();
  StoreLoadConflictsIgnored(const StoreLoadConflictsIgnored &) = delete;
  StoreLoadConflictsIgnored &operator=(const StoreLoadConflictsIgnored &) = delete;

 private:
  void *option_ = nullptr;  // llvm::cl::opt<bool>*
  bool before_ = true;
};

// While it lives, LLVM's loop vectoriser also vectorises the remainder of each loop
// it vectorises, with `lanes` lanes (-epilogue-vectorization-force-VF=lanes, whose
// default, 1, leaves it to the cost model). Without the option, a no-op.
class EpilogueLanesForced {
 public:
  explicit EpilogueLanesForced(unsigned lanes);
  ~EpilogueLanesForced();
  EpilogueLanesForced(const EpilogueLanesForced &) = delete;
  EpilogueLanesForced &operator=(const EpilogueLanesForced &) = delete;

 private:
  void *option_ = nullptr;  // llvm::cl::opt<unsigned>*
  unsigned before_ = 0;
};

}  // namespace enzyme_py
