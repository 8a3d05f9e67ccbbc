#include "parfor_reductions.h"

#include <stdexcept>

#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

#include "kernel_ir.h"

namespace enzyme_py {
namespace {

using namespace llvm;

// Whether `inst` adds something to `sum`: `sum + x`, `x + sum`, `sum - x`.
bool adds_to(const Instruction &inst, const Value *sum) {
  switch (inst.getOpcode()) {
    case Instruction::FAdd:
    case Instruction::Add:
      return true;
    case Instruction::FSub:
    case Instruction::Sub:
      return inst.getOperand(0) == sum;
    default:
      return false;
  }
}

// The addresses made from `param` (GEPs and casts) and its loads and stores; false
// where its memory is reached any other way (the pointer passed on, stored, compared).
bool accesses(Argument &param, SmallPtrSetImpl<const Value *> &addresses,
              SmallVectorImpl<Instruction *> &loads, SmallVectorImpl<StoreInst *> &stores) {
  SmallVector<Value *, 8> work{&param};
  while (!work.empty()) {
    Value *address = work.pop_back_val();
    if (!addresses.insert(address).second) continue;
    for (User *user : address->users()) {
      auto *store = dyn_cast<StoreInst>(user);
      if (isa<GetElementPtrInst>(user) || isa<BitCastInst>(user)) {
        work.push_back(user);
      } else if (auto *load = dyn_cast<LoadInst>(user)) {
        loads.push_back(load);
      } else if (store && store->getPointerOperand() == address) {
        stores.push_back(store);
      } else {
        return false;
      }
    }
  }
  return true;
}

bool only_accumulated(Argument &param) {
  SmallPtrSet<const Value *, 16> addresses;
  SmallVector<Instruction *, 8> pending;
  SmallVector<StoreInst *, 4> stores;
  if (!accesses(param, addresses, pending, stores)) return false;
  // The sums: what was loaded, and what the updates made of it.
  SmallPtrSet<const Value *, 32> sums;
  while (!pending.empty()) {
    Instruction *sum = pending.pop_back_val();
    if (!sums.insert(sum).second) continue;
    for (User *user : sum->users()) {
      auto *inst = dyn_cast<Instruction>(user);
      auto *store = dyn_cast_or_null<StoreInst>(inst);
      if (store) {
        if (store->getValueOperand() != sum || !addresses.contains(store->getPointerOperand())) {
          return false;  // the partial sum stored elsewhere (a running sum)
        }
      } else if (inst && (isa<PHINode>(inst) || adds_to(*inst, sum))) {
        pending.push_back(inst);
      } else {
        return false;  // read for anything else
      }
    }
  }
  for (const Value *sum : sums) {
    if (const auto *phi = dyn_cast<PHINode>(sum)) {
      // A value from elsewhere merged in (a reset) ends the sum.
      for (const Value *in : phi->incoming_values()) {
        if (!sums.contains(in)) return false;
      }
    } else if (const auto *op = dyn_cast<BinaryOperator>(sum)) {
      // sum + sum doubles it: no longer a sum of added values.
      if (sums.contains(op->getOperand(0)) && sums.contains(op->getOperand(1))) return false;
    }
  }
  for (const StoreInst *store : stores) {
    if (!sums.contains(store->getValueOperand())) return false;  // something else stored
  }
  return true;
}

}  // namespace

bool reductions_only_accumulated(LLVMContextRef ctx, const std::string &ir_text,
                                 const std::string &function,
                                 const std::vector<unsigned> &params) {
  ModuleOwner work;
  parse_kernel(ctx, ir_text, work);
  LLVMValueRef fn = defined_function(work.mod, function);
  // Numba keeps its variables in stack slots: SROA makes the sums values. Only the
  // body and what it calls keep their code for it (GMM prange: the Numba function's
  // simplification was most of the 3 ms).
  keep_reached(work.mod, {fn});
  run_passes(work.mod, "function(sroa,early-cse)", nullptr, "simplifying the prange body");
  Function &body = *unwrap<Function>(fn);
  for (unsigned index : params) {
    if (index >= body.arg_size()) throw std::runtime_error("no such parameter");
    Argument &param = *body.getArg(index);
    if (!param.getType()->isPointerTy() || !only_accumulated(param)) return false;
  }
  return true;
}

}  // namespace enzyme_py
