#include "unread_launches.h"

#include <vector>

#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include "arena.h"

namespace enzyme_py {
namespace {

using namespace llvm;

constexpr const char *kRun = "__enzyme_py_parfor_run";
constexpr const char *kReverse = "__enzyme_py_parfor_reverse";

// Whether `caller` runs `launch`'s reverse pass (its chunks, `<launch>.reverse`,
// through __enzyme_py_parfor_reverse): a derivative's reverse of that launch, which
// raises what the launch would have raised (its chunks return the body's status).
bool runs_reverse_of(const Function &caller, const Function &launch) {
  const Function *reverse =
      launch.getParent()->getFunction((launch.getName() + ".reverse").str());
  if (!reverse) return false;
  for (const Instruction &inst : instructions(caller)) {
    const auto *call = dyn_cast<CallBase>(&inst);
    const Function *callee = call ? call->getCalledFunction() : nullptr;
    if (callee && callee->getName() == kReverse && call->arg_size() > 0 &&
        call->getArgOperand(0)->stripPointerCasts() == reverse) {
      return true;
    }
  }
  return false;
}

// Whether `base` is a fresh allocation: a call of an allocation function.
bool is_allocation(const Value *base) {
  const auto *call = dyn_cast<CallBase>(base);
  const Function *callee = call ? call->getCalledFunction() : nullptr;
  if (!callee) return false;
  StringRef name = callee->getName();
  return name == "malloc" || name == "calloc" || name.startswith("NRT_MemInfo_alloc");
}

// Whether `call` releases memory without reading it.
bool is_release(const CallBase &call) {
  const Function *callee = call.getCalledFunction();
  if (!callee) return false;
  StringRef name = callee->getName();
  return name == "free" || name == kArenaKeep || name == kTapeFree;
}

// Whether accept(user, address) holds for every user of `root`'s address and of the
// addresses made from it (GEPs and casts, followed rather than given to accept).
template <typename Accept>
bool every_use_of_address(const Value *root, Accept accept) {
  SmallVector<const Value *, 8> work{root};
  SmallPtrSet<const Value *, 16> seen;
  while (!work.empty()) {
    const Value *address = work.pop_back_val();
    if (!seen.insert(address).second) continue;
    for (const User *user : address->users()) {
      if (isa<GetElementPtrInst>(user) || isa<BitCastInst>(user) ||
          isa<AddrSpaceCastInst>(user)) {
        work.push_back(user);
      } else if (!accept(user, address)) {
        return false;
      }
    }
  }
  return true;
}

// Whether `user` stores to, or memsets, `address` (writes it, reading nothing).
bool only_writes(const User *user, const Value *address) {
  if (const auto *store = dyn_cast<StoreInst>(user)) {
    return store->getPointerOperand() == address && store->getValueOperand() != address;
  }
  if (const auto *set = dyn_cast<MemSetInst>(user)) return set->getRawDest() == address;
  return false;
}

bool is_lifetime_marker(const User *user) {
  const auto *intrinsic = dyn_cast<IntrinsicInst>(user);
  return intrinsic && intrinsic->isLifetimeStartOrEnd();
}

// Whether the stack memory `slots` (an alloca) is only written, and given to the
// runner's functions (__enzyme_py_parfor_*): a launch's slots, which nothing in the
// caller reads back.
bool only_for_the_runner(const AllocaInst *slots) {
  return every_use_of_address(slots, [](const User *user, const Value *address) {
    if (only_writes(user, address) || is_lifetime_marker(user)) return true;
    const auto *call = dyn_cast<CallBase>(user);
    const Function *callee = call ? call->getCalledFunction() : nullptr;
    return callee && !callee->isIntrinsic() &&
           callee->getName().startswith("__enzyme_py_parfor_");
  });
}

// Whether the memory allocated at `base` is never read, other than by `launch`:
// its address is only stored to, memset, compared, given to lifetime markers,
// released, or stored as an integer into a launch's slots (only_for_the_runner: the
// runner's reverse pass reads, through them, the snapshot taken before the launch,
// or nothing of that memory).
bool only_written_but_by(const Value *base, const CallBase *launch) {
  return every_use_of_address(base, [launch](const User *user, const Value *address) {
    if (user == launch || only_writes(user, address) || is_lifetime_marker(user) ||
        isa<ICmpInst>(user)) {
      return true;
    }
    if (const auto *call = dyn_cast<CallBase>(user)) {
      return !isa<IntrinsicInst>(call) && is_release(*call);
    }
    if (!isa<PtrToIntInst>(user)) return false;
    for (const User *stored : user->users()) {
      const auto *store = dyn_cast<StoreInst>(stored);
      const auto *slots =
          store ? dyn_cast<AllocaInst>(getUnderlyingObject(store->getPointerOperand()))
                : nullptr;
      if (!slots || store->getValueOperand() != user || !only_for_the_runner(slots)) {
        return false;
      }
    }
    return true;
  });
}

// Whether every pointer `call` passes where its launch may write is only written.
bool writes_only_unread_memory(const CallBase &call) {
  const Function *launch = call.getCalledFunction();
  for (unsigned i = 0; i < call.arg_size(); ++i) {
    const Value *arg = call.getArgOperand(i);
    if (!arg->getType()->isPointerTy()) continue;
    if (launch->hasParamAttribute(i, Attribute::ReadOnly) ||
        launch->hasParamAttribute(i, Attribute::ReadNone)) {
      continue;
    }
    const Value *base = getUnderlyingObject(arg);
    if (!is_allocation(base) || !only_written_but_by(base, &call)) return false;
  }
  return true;
}

}  // namespace

int drop_unread_launches(LLVMModuleRef mod) {
  Module &module = *unwrap(mod);
  Function *run = module.getFunction(kRun);
  if (!run) return 0;  // no prange launch in this module
  // The launches: the functions that call the runner.
  SmallPtrSet<Function *, 4> launches;
  for (User *user : run->users()) {
    auto *call = dyn_cast<CallBase>(user);
    if (call && call->getCalledFunction() == run) launches.insert(call->getFunction());
  }
  std::vector<CallBase *> dead;
  for (Function *launch : launches) {
    for (User *user : launch->users()) {
      auto *call = dyn_cast<CallBase>(user);
      if (call && call->getCalledFunction() == launch &&
          runs_reverse_of(*call->getFunction(), *launch) && writes_only_unread_memory(*call)) {
        dead.push_back(call);
      }
    }
  }
  for (CallBase *call : dead) call->eraseFromParent();
  return static_cast<int>(dead.size());
}

}  // namespace enzyme_py
