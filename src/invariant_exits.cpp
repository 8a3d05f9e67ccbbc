#include "invariant_exits.h"

#include <vector>

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>

#include "numba_rewrites.h"

namespace enzyme_py {
namespace {

using llvm::BasicBlock;
using llvm::BranchInst;
using llvm::Instruction;
using llvm::Loop;
using llvm::PHINode;
using llvm::Value;

// Whether the iteration may skip `inst` where it leaves before the branch: nothing
// but the iteration's own values depends on it.
bool skippable(const Instruction &inst) {
  if (llvm::isa<PHINode>(inst)) return true;
  if (const auto *call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
    if (const llvm::Function *callee = call->getCalledFunction()) {
      if (is_numba_allocator(callee->getName().str())) return true;
      const auto id = callee->getIntrinsicID();
      if (id == llvm::Intrinsic::assume || id == llvm::Intrinsic::experimental_noalias_scope_decl)
        return true;
    }
  }
  return !inst.mayHaveSideEffects();
}

// A branch the pass can move: the first conditional branch of an iteration (in the
// header, or in a block after it that only the block before it enters), with its
// exit and in-loop successors.
struct InvariantExit {
  BranchInst *branch = nullptr;
  BasicBlock *exit = nullptr;
  BasicBlock *stay = nullptr;
};

InvariantExit find_exit(Loop &loop, const llvm::DominatorTree &dt) {
  BasicBlock *header = loop.getHeader();
  BasicBlock *preheader = loop.getLoopPreheader();
  if (!preheader) return {};
  auto *entering = llvm::dyn_cast<BranchInst>(preheader->getTerminator());
  if (!entering || entering->isConditional()) return {};
  // The blocks every iteration runs first, in order.
  std::vector<BasicBlock *> first{header};
  auto *branch = llvm::dyn_cast<BranchInst>(header->getTerminator());
  while (branch && !branch->isConditional()) {
    BasicBlock *next = branch->getSuccessor(0);
    if (next == header || !loop.contains(next) || next->getSinglePredecessor() != first.back())
      return {};
    first.push_back(next);
    branch = llvm::dyn_cast<BranchInst>(next->getTerminator());
  }
  if (!branch) return {};
  Value *condition = branch->getCondition();
  if (auto *inst = llvm::dyn_cast<Instruction>(condition)) {
    if (loop.contains(inst) || !dt.dominates(inst, entering)) return {};
  }
  InvariantExit found{branch, branch->getSuccessor(0), branch->getSuccessor(1)};
  if (loop.contains(found.exit)) std::swap(found.exit, found.stay);
  if (loop.contains(found.exit) || !loop.contains(found.stay)) return {};
  // What these blocks do may be skipped on the way out (skippable); outside the loop,
  // their values may be read only by the exit's phis, and there only the header's
  // phis (their values from the preheader): the exit is now also reached from the
  // preheader, which the rest does not dominate.
  for (BasicBlock *block : first) {
    for (const Instruction &inst : *block) {
      if (!inst.isTerminator() && !skippable(inst)) return {};
      for (const llvm::User *user : inst.users()) {
        const auto *use = llvm::cast<Instruction>(user);
        if (loop.contains(use)) continue;
        if (block != header || !llvm::isa<PHINode>(inst) || use->getParent() != found.exit ||
            !llvm::isa<PHINode>(use))
          return {};
      }
    }
  }
  return found;
}

void hoist(Loop &loop, const InvariantExit &found) {
  BasicBlock *header = loop.getHeader();
  BasicBlock *preheader = loop.getLoopPreheader();
  BasicBlock *from = found.branch->getParent();
  for (PHINode &phi : found.exit->phis()) {
    Value *value = phi.getIncomingValueForBlock(from);
    if (auto *header_phi = llvm::dyn_cast<PHINode>(value);
        header_phi && header_phi->getParent() == header) {
      value = header_phi->getIncomingValueForBlock(preheader);
    }
    phi.addIncoming(value, preheader);
    phi.removeIncomingValue(from, /*DeletePHIIfEmpty=*/false);
  }
  // The loop keeps a preheader of its own (the next check's move needs one).
  BasicBlock *entry = BasicBlock::Create(header->getContext(), preheader->getName() + ".checked",
                                         header->getParent(), header);
  BranchInst::Create(header, entry);
  header->replacePhiUsesWith(preheader, entry);
  const bool exit_when_true = found.branch->getSuccessor(0) == found.exit;
  Value *condition = found.branch->getCondition();
  preheader->getTerminator()->eraseFromParent();
  if (exit_when_true) {
    BranchInst::Create(found.exit, entry, condition, preheader);
  } else {
    BranchInst::Create(entry, found.exit, condition, preheader);
  }
  found.branch->eraseFromParent();
  BranchInst::Create(found.stay, from);
}

}  // namespace

llvm::PreservedAnalyses HoistInvariantExits::run(llvm::Function &fn,
                                                 llvm::FunctionAnalysisManager &) {
  bool changed = false;
  // One move at a time, the analyses made again after each (a few per function).
  for (int round = 0; round < 256; ++round) {
    llvm::DominatorTree dt(fn);
    llvm::LoopInfo loops(dt);
    bool moved = false;
    for (Loop *loop : loops.getLoopsInPreorder()) {
      const InvariantExit found = find_exit(*loop, dt);
      if (!found.branch) continue;
      hoist(*loop, found);
      moved = true;
      break;
    }
    if (!moved) break;
    changed = true;
  }
  return changed ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
