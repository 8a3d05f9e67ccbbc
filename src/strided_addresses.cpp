#include "strided_addresses.h"

#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

namespace enzyme_py {
namespace {

// The pointer P of the one `ptrtoint(P)` among the terms of the sum `value` (adds
// only, each used by the sum alone below the top), with the other terms in `terms`;
// null where there is none or more than one.
llvm::Value *pointer_of_sum(llvm::Value *value, std::vector<llvm::Value *> &terms,
                            bool top = true) {
  if (auto *cast = llvm::dyn_cast<llvm::PtrToIntOperator>(value)) {
    return cast->getPointerOperand();
  }
  auto *add = llvm::dyn_cast<llvm::BinaryOperator>(value);
  if (!add || add->getOpcode() != llvm::Instruction::Add) {
    terms.push_back(value);
    return nullptr;
  }
  if (!top && !add->hasOneUse()) {
    terms.push_back(value);
    return nullptr;
  }
  llvm::Value *left = pointer_of_sum(add->getOperand(0), terms, false);
  llvm::Value *right = pointer_of_sum(add->getOperand(1), terms, false);
  if (left && right) return nullptr;  // two pointers: not an address in one array
  return left ? left : right;
}

// Whether `value` is computed without any pointer (no ptrtoint among what it is made
// from, through instructions and loop-carried values): an offset, not a second
// address.
bool free_of_pointers(llvm::Value *value, std::vector<llvm::Value *> &seen) {
  if (llvm::isa<llvm::PtrToIntOperator>(value)) return false;
  auto *inst = llvm::dyn_cast<llvm::Instruction>(value);
  if (!inst || llvm::isa<llvm::LoadInst>(inst) || llvm::isa<llvm::CallBase>(inst)) {
    return true;  // an argument, a constant, a loaded or returned integer
  }
  for (llvm::Value *visited : seen) {
    if (visited == value) return true;  // a cycle through a phi: checked where it began
  }
  if (seen.size() > 64) return false;
  seen.push_back(value);
  for (llvm::Value *operand : inst->operands()) {
    if (!free_of_pointers(operand, seen)) return false;
  }
  return true;
}

}  // namespace

int addresses_from_pointers(LLVMModuleRef mod) {
  std::vector<llvm::IntToPtrInst *> casts;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    for (llvm::Instruction &inst : llvm::instructions(fn)) {
      if (auto *cast = llvm::dyn_cast<llvm::IntToPtrInst>(&inst)) casts.push_back(cast);
    }
  }
  int rewritten = 0;
  for (llvm::IntToPtrInst *cast : casts) {
    std::vector<llvm::Value *> terms;
    llvm::Value *base = pointer_of_sum(cast->getOperand(0), terms);
    if (!base || terms.empty()) continue;
    bool offsets_only = true;
    for (llvm::Value *term : terms) {
      std::vector<llvm::Value *> seen;
      offsets_only = offsets_only && free_of_pointers(term, seen);
    }
    if (!offsets_only) continue;  // pointer differences: another object's address
    auto *base_type = llvm::dyn_cast<llvm::PointerType>(base->getType());
    auto *cast_type = llvm::dyn_cast<llvm::PointerType>(cast->getType());
    if (!base_type || !cast_type ||
        base_type->getAddressSpace() != cast_type->getAddressSpace()) {
      continue;
    }
    llvm::IRBuilder<> b(cast);
    llvm::Value *offset = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) offset = b.CreateAdd(offset, terms[i]);
    llvm::Type *bytes = llvm::Type::getInt8PtrTy(cast->getContext(), base_type->getAddressSpace());
    llvm::Value *address = b.CreateGEP(b.getInt8Ty(), b.CreatePointerCast(base, bytes), offset);
    llvm::Value *typed = b.CreatePointerCast(address, cast_type);
    typed->takeName(cast);
    cast->replaceAllUsesWith(typed);
    cast->eraseFromParent();
    ++rewritten;
  }
  return rewritten;
}

}  // namespace enzyme_py
