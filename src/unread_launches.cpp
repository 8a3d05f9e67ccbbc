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

// Whether `fn` runs chunks through __enzyme_py_parfor_run: a prange launch.
bool is_launch(const Function &fn) {
  for (const Instruction &inst : instructions(fn)) {
    const auto *call = dyn_cast<CallBase>(&inst);
    const Function *callee = call ? call->getCalledFunction() : nullptr;
    if (callee && callee->getName() == kRun) return true;
  }
  return false;
}

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

// Whether the stack memory `slots` (an alloca) is only written, and given to the
// runner's functions (__enzyme_py_parfor_*): a launch's slots, which nothing in the
// caller reads back.
bool only_for_the_runner(const AllocaInst *slots) {
  SmallVector<const Value *, 8> work{slots};
  SmallPtrSet<const Value *, 16> seen;
  while (!work.empty()) {
    const Value *value = work.pop_back_val();
    if (!seen.insert(value).second) continue;
    for (const User *user : value->users()) {
      if (isa<GetElementPtrInst>(user) || isa<BitCastInst>(user)) {
        work.push_back(user);
        continue;
      }
      if (const auto *store = dyn_cast<StoreInst>(user)) {
        if (store->getPointerOperand() == value) continue;
        return false;
      }
      const auto *call = dyn_cast<CallBase>(user);
      const Function *callee = call ? call->getCalledFunction() : nullptr;
      if (!callee) return false;
      if (const auto *intrinsic = dyn_cast<IntrinsicInst>(call)) {
        if (intrinsic->isLifetimeStartOrEnd()) continue;
        if (const auto *set = dyn_cast<MemSetInst>(intrinsic)) {
          if (set->getRawDest() == value) continue;
        }
        return false;
      }
      if (!callee->getName().startswith("__enzyme_py_parfor_")) return false;
    }
  }
  return true;
}

// Whether the memory allocated at `base` is never read, other than by `launch`:
// its address (through casts and GEPs) is only stored to, memset, compared, given
// to lifetime markers, released, or stored as an integer into a launch's slots
// (only_for_the_runner: the runner's reverse pass reads, through them, the snapshot
// taken before the launch, or nothing of that memory).
bool only_written_but_by(const Value *base, const CallBase *launch) {
  SmallVector<const Value *, 8> work{base};
  SmallPtrSet<const Value *, 16> seen;
  while (!work.empty()) {
    const Value *value = work.pop_back_val();
    if (!seen.insert(value).second) continue;
    for (const User *user : value->users()) {
      if (user == launch) continue;
      if (isa<GetElementPtrInst>(user) || isa<BitCastInst>(user) ||
          isa<AddrSpaceCastInst>(user)) {
        work.push_back(user);
        continue;
      }
      if (const auto *store = dyn_cast<StoreInst>(user)) {
        if (store->getPointerOperand() == value && store->getValueOperand() != value) continue;
        return false;
      }
      if (isa<ICmpInst>(user)) continue;
      if (const auto *set = dyn_cast<MemSetInst>(user)) {
        if (set->getRawDest() == value) continue;
        return false;
      }
      if (const auto *intrinsic = dyn_cast<IntrinsicInst>(user)) {
        if (intrinsic->isLifetimeStartOrEnd()) continue;
        return false;
      }
      if (const auto *call = dyn_cast<CallBase>(user)) {
        if (is_release(*call)) continue;
        return false;
      }
      if (isa<PtrToIntInst>(user)) {
        for (const User *stored : user->users()) {
          const auto *store = dyn_cast<StoreInst>(stored);
          const auto *slots =
              store ? dyn_cast<AllocaInst>(getUnderlyingObject(store->getPointerOperand()))
                    : nullptr;
          if (!slots || store->getValueOperand() != user || !only_for_the_runner(slots)) {
            return false;
          }
        }
        continue;
      }
      return false;
    }
  }
  return true;
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
  std::vector<CallBase *> dead;
  for (Function &launch : module) {
    if (launch.isDeclaration() || !is_launch(launch)) continue;
    for (User *user : launch.users()) {
      auto *call = dyn_cast<CallBase>(user);
      if (call && call->getCalledFunction() == &launch &&
          runs_reverse_of(*call->getFunction(), launch) && writes_only_unread_memory(*call)) {
        dead.push_back(call);
      }
    }
  }
  for (CallBase *call : dead) call->eraseFromParent();
  return static_cast<int>(dead.size());
}

}  // namespace enzyme_py
