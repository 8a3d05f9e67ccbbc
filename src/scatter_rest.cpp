// The rest of a fused stencil loop: what it does besides its adds (scatter_fusion.h).
#include <set>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "scatter_fusion.h"

namespace enzyme_py::scatter {

using llvm::BasicBlock;
using llvm::Instruction;
using llvm::PHINode;

std::vector<Instruction *> used_after(BasicBlock *body) {
  std::vector<Instruction *> used;
  for (Instruction &inst : *body) {
    if (llvm::isa<llvm::StoreInst>(inst) || inst.isTerminator()) continue;
    for (llvm::User *user : inst.users()) {
      if (llvm::cast<Instruction>(user)->getParent() != body) {
        used.push_back(&inst);
        break;
      }
    }
  }
  return used;
}

void keep_only(BasicBlock *block, const std::vector<Instruction *> &roots) {
  std::set<Instruction *> live;
  std::vector<Instruction *> work(roots.begin(), roots.end());
  while (!work.empty()) {
    Instruction *inst = work.back();
    work.pop_back();
    if (!live.insert(inst).second) continue;
    for (llvm::Value *operand : inst->operands()) {
      auto *def = llvm::dyn_cast<Instruction>(operand);
      if (def && def->getParent() == block) work.push_back(def);
    }
  }
  std::vector<Instruction *> dead;
  for (Instruction &inst : *block)
    if (!live.count(&inst)) dead.push_back(&inst);
  for (Instruction *inst : dead) inst->dropAllReferences();
  for (Instruction *inst : dead) inst->eraseFromParent();
}

// Enzyme carries a neighbour's adjoint out of a reverse stencil loop as a sum that adds
// only in the iteration that leaves: x = phi [init, before], [x + select(leave, t, 0),
// body], `leave` the condition on which the loop's only block leaves. Every earlier
// iteration adds a zero, so x is init throughout, and the sum after the loop is init +
// t of the last iteration. Left as it was, the vectoriser took it for a reduction and
// summed every iteration's t under a mask (the rest of heat's reverse loop, which
// zeroes the shadow it read: a quarter of the gradient). Where the zero is +0.0,
// adding it changes a -0.0 to +0.0: only under nsz, or from an init of +0.0.
bool settled_sum(PHINode &phi, BasicBlock *body) {
  auto *branch = llvm::dyn_cast<llvm::BranchInst>(body->getTerminator());
  if (!branch || !branch->isConditional()) return false;
  const bool leaves_on_true = branch->getSuccessor(1) == body;
  if (leaves_on_true == (branch->getSuccessor(0) == body)) return false;  // one way back, one out
  if (phi.getParent() != body || !phi.getType()->isFloatingPointTy() ||
      phi.getNumIncomingValues() != 2 || phi.getBasicBlockIndex(body) < 0 || !phi.hasOneUse()) {
    return false;
  }
  llvm::Value *from_body = phi.getIncomingValueForBlock(body);
  if (from_body == &phi) return true;  // settled already
  auto *sum = llvm::dyn_cast<llvm::BinaryOperator>(from_body);
  if (!sum || sum->getOpcode() != Instruction::FAdd || phi.user_back() != sum) return false;
  llvm::Value *other = sum->getOperand(sum->getOperand(0) == &phi ? 1 : 0);
  auto *select = llvm::dyn_cast<llvm::SelectInst>(other);
  if (!select || !select->hasOneUse() || select->getCondition() != branch->getCondition())
    return false;
  auto *zero = llvm::dyn_cast<llvm::ConstantFP>(leaves_on_true ? select->getFalseValue()
                                                               : select->getTrueValue());
  if (!zero || !zero->isZero()) return false;
  auto *init = llvm::dyn_cast<llvm::ConstantFP>(
      phi.getIncomingValue(phi.getBasicBlockIndex(body) == 0 ? 1 : 0));
  return zero->isNegative() || sum->hasNoSignedZeros() ||
         (init && init->isZero() && !init->isNegative());
}

// The phi's value from the loop made the phi itself: the loop carries nothing; the
// sum's value after the loop is what it was.
void settle_sums_of_the_last_iteration(BasicBlock *body) {
  for (PHINode &phi : body->phis())
    if (settled_sum(phi, body)) phi.setIncomingValueForBlock(body, &phi);
}

std::optional<Rest> rest_of(const Split &s, Fusion &f, llvm::ScalarEvolution &se) {
  std::set<Instruction *> in_adds;
  for (const ReadAddWrite &t : s.adds) {
    in_adds.insert(t.load);
    in_adds.insert(t.store);
  }
  const llvm::DataLayout &layout = s.body->getModule()->getDataLayout();
  Rest rest;
  std::set<PHINode *> phis;
  // Its stores: zeros (all bytes: stores of zeros that meet leave the same bytes in
  // any order), one entry an iteration (|step| at least the store's size), at an
  // address computed from the counters alone. The loads that read those bytes read
  // them in the same iteration only (splittable, scatter_adds.cpp).
  for (Instruction &inst : *s.body) {
    auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst);
    if (!store || in_adds.count(store)) continue;
    auto *value = llvm::dyn_cast<llvm::Constant>(store->getValueOperand());
    if (!value || !value->isNullValue()) return std::nullopt;
    auto *rec = llvm::dyn_cast<llvm::SCEVAddRecExpr>(se.getSCEV(store->getPointerOperand()));
    if (!rec || rec->getLoop() != s.loop || !rec->isAffine()) return std::nullopt;
    auto *step = llvm::dyn_cast<llvm::SCEVConstant>(rec->getStepRecurrence(se));
    const uint64_t size = layout.getTypeStoreSize(value->getType()).getFixedSize();
    if (!step || step->getAPInt().getBitWidth() > 64 || step->getAPInt().isZero() ||
        step->getAPInt().abs().getZExtValue() < size)
      return std::nullopt;
    std::vector<Instruction *> slice;
    if (!slice_of(store->getPointerOperand(), s.body, slice, phis)) return std::nullopt;
    for (Instruction *i : slice)
      if (llvm::isa<llvm::LoadInst>(i)) return std::nullopt;
    rest.zeroes.push_back(store);
    rest.slices.push_back(std::move(slice));
  }
  if (rest.zeroes.empty()) return std::nullopt;  // nothing to gain: the rest stays a loop
  // What it leaves for after the loop: computed from the counters, memory and the
  // sums that carry nothing, without side effects.
  for (Instruction *root : used_after(s.body)) {
    std::vector<Instruction *> slice;
    if (!slice_of(root, s.body, slice, phis)) return std::nullopt;
  }
  for (PHINode *phi : phis) {
    if (f.phis.count(phi) || settled_sum(*phi, s.body)) continue;
    std::optional<Affine> a = affine_phi(phi, s, se);
    if (!a) return std::nullopt;
    f.phis.emplace(phi, *a);
  }
  return rest;
}

void last_iteration_only(const Split &s, const Fusion &f, llvm::Value *backedges,
                         BasicBlock *next) {
  BasicBlock *body = s.body;
  // What is used after the loop; a phi among it is replaced by its value below.
  std::vector<Instruction *> roots;
  for (Instruction *inst : used_after(body))
    if (!llvm::isa<PHINode>(inst)) roots.push_back(inst);
  // Each phi's value at the last iteration: a counter's from its start and step, a
  // settled sum's its first; those the roots do not need, none (they go).
  std::vector<std::pair<PHINode *, llvm::Value *>> values;
  llvm::IRBuilder<> b(s.outside->getTerminator());
  for (PHINode &phi : body->phis()) {
    llvm::Value *v = llvm::PoisonValue::get(phi.getType());
    if (settled_sum(phi, body)) {
      v = phi.getIncomingValueForBlock(s.outside);
    } else if (auto found = f.phis.find(&phi); found != f.phis.end()) {
      v = affine_at(b, &phi, found->second, backedges);
    }
    values.emplace_back(&phi, v);
  }
  body->getTerminator()->eraseFromParent();
  roots.push_back(llvm::BranchInst::Create(next, body));
  for (auto &[phi, v] : values) {
    phi->replaceAllUsesWith(v);
    phi->eraseFromParent();
  }
  keep_only(body, roots);
}

}  // namespace enzyme_py::scatter
