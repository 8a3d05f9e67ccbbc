#include "scatter_adds.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include <llvm/Analysis/AliasAnalysis.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/MemoryLocation.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/LoopUtils.h>
#include <llvm/Transforms/Utils/ScalarEvolutionExpander.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

#include "scatter_fusion.h"

namespace enzyme_py {
namespace {

using llvm::BasicBlock;
using llvm::Instruction;
using llvm::LoadInst;
using llvm::StoreInst;
using scatter::ReadAddWrite;
using scatter::Split;
using scatter::keep_only;
using scatter::settle_sums_of_the_last_iteration;

// Bytes [low, high) an access reaches over the whole loop, as integers.
struct Range {
  const llvm::SCEV *low;
  const llvm::SCEV *high;
};

bool is_vectorized(const llvm::Loop &loop) {
  llvm::MDNode *id = loop.getLoopID();
  if (!id) return false;
  for (unsigned k = 1; k < id->getNumOperands(); ++k) {
    auto *entry = llvm::dyn_cast<llvm::MDNode>(id->getOperand(k));
    if (!entry || entry->getNumOperands() == 0) continue;
    auto *name = llvm::dyn_cast<llvm::MDString>(entry->getOperand(0));
    if (name && name->getString() == "llvm.loop.isvectorized") return true;
  }
  return false;
}

const llvm::SCEVAddRecExpr *affine_address(llvm::Value *pointer, const llvm::Loop &loop,
                                           llvm::ScalarEvolution &se) {
  auto *rec = llvm::dyn_cast<llvm::SCEVAddRecExpr>(se.getSCEV(pointer));
  if (!rec || rec->getLoop() != &loop || !rec->isAffine()) return nullptr;
  auto *step = llvm::dyn_cast<llvm::SCEVConstant>(rec->getStepRecurrence(se));
  if (!step || step->getAPInt().isZero()) return nullptr;
  return rec;
}

// The leaves of the tree of reassociable fadds under `v`, each fadd in `block` and
// used once (v itself is one); false past a few fadds.
bool add_leaves(llvm::Value *v, BasicBlock *block, std::vector<llvm::Value *> &leaves,
                int &fadds) {
  auto *add = llvm::dyn_cast<llvm::BinaryOperator>(v);
  if (!add || add->getOpcode() != Instruction::FAdd || !add->hasAllowReassoc() ||
      !add->hasOneUse() || add->getParent() != block) {
    leaves.push_back(v);
    return true;
  }
  if (++fadds > 8) return false;
  return add_leaves(add->getOperand(0), block, leaves, fadds) &&
         add_leaves(add->getOperand(1), block, leaves, fadds);
}

std::optional<ReadAddWrite> read_add_write(StoreInst *store, const llvm::Loop &loop,
                                           llvm::ScalarEvolution &se) {
  auto *add = llvm::dyn_cast<llvm::BinaryOperator>(store->getValueOperand());
  if (!add || add->getOpcode() != Instruction::FAdd) return std::nullopt;
  // `load + v` as Enzyme writes it, or `(v + load) + w` as clang reassociates it.
  std::vector<llvm::Value *> leaves;
  int fadds = 0;
  if (!add_leaves(add, store->getParent(), leaves, fadds) || fadds == 0) return std::nullopt;
  LoadInst *read = nullptr;
  std::vector<llvm::Value *> added;
  for (llvm::Value *leaf : leaves) {
    auto *load = llvm::dyn_cast<LoadInst>(leaf);
    if (!read && load && load->isSimple() && load->hasOneUse() &&
        load->getParent() == store->getParent() &&
        load->getPointerOperand() == store->getPointerOperand() && load->comesBefore(store)) {
      read = load;
    } else {
      added.push_back(leaf);
    }
  }
  if (!read) return std::nullopt;
  const llvm::SCEVAddRecExpr *address = affine_address(store->getPointerOperand(), loop, se);
  if (!address) return std::nullopt;
  return ReadAddWrite{read, store, address, added};
}

llvm::MemoryLocation anywhere(Instruction *access) {
  // Any entry an access reaches in any iteration (with its alias tags: Enzyme's
  // shadows carry scoped noalias metadata).
  return llvm::MemoryLocation::getBeforeOrAfter(llvm::getLoadStorePointerOperand(access),
                                                access->getAAMetadata());
}

// Whether splitting `adds` (one shadow's read-add-write triples) out of the loop
// computes what the loop computed (see scatter_adds.h).
bool splittable(const std::vector<ReadAddWrite> &adds, const std::vector<LoadInst *> &loads,
                const std::vector<StoreInst *> &stores, llvm::ScalarEvolution &se,
                llvm::AAResults &aa, std::vector<Instruction *> &unproven) {
  std::set<Instruction *> in_adds;
  const llvm::SCEV *step = adds.front().address->getStepRecurrence(se);
  std::set<const llvm::SCEV *> starts;
  for (const ReadAddWrite &t : adds) {
    if (t.address->getStepRecurrence(se) != step) return false;
    starts.insert(t.address->getStart());
    in_adds.insert(t.load);
    in_adds.insert(t.store);
  }
  // Only adds that meet: two of them reach the same entry in different iterations
  // (their starts a non-zero multiple of the step apart). Adds at offsets that never
  // meet (an unrolled loop's 8 lanes, 8 bytes apart with a 64-byte step) vectorise
  // as they are.
  const llvm::APInt &stride = llvm::cast<llvm::SCEVConstant>(step)->getAPInt();
  bool meet = false;
  for (const llvm::SCEV *a : starts) {
    for (const llvm::SCEV *b : starts) {
      auto *apart = llvm::dyn_cast<llvm::SCEVConstant>(se.getMinusSCEV(a, b));
      if (a != b && apart && apart->getAPInt().getBitWidth() == stride.getBitWidth() &&
          apart->getAPInt().srem(stride).isZero())
        meet = true;
    }
  }
  if (!meet) return false;
  // No store of the shadow between the load and the store of an add: each add is
  // a whole read-add-write (a store in between would make it overwrite, not add).
  for (const ReadAddWrite &t : adds) {
    for (const ReadAddWrite &u : adds) {
      if (&t != &u && t.load->comesBefore(u.store) && u.store->comesBefore(t.store)) return false;
    }
  }
  // Every other access is to memory the shadow does not share: proven here, or
  // checked at run time (Enzyme's shadows of arrays it caches per iteration come
  // from its tape, where alias analysis cannot tell them apart).
  std::vector<Instruction *> others;
  for (LoadInst *load : loads)
    if (!in_adds.count(load)) others.push_back(load);
  for (StoreInst *store : stores)
    if (!in_adds.count(store)) others.push_back(store);
  unproven.clear();
  for (Instruction *other : others) {
    for (const ReadAddWrite &t : adds) {
      if (!aa.isNoAlias(anywhere(other), anywhere(t.store))) {
        unproven.push_back(other);
        break;
      }
    }
  }
  // The split loops run before the rest: every load must read what it read in the
  // loop, i.e. no store of the loop writes its memory, except at the same address
  // later in the same iteration.
  for (LoadInst *load : loads) {
    if (in_adds.count(load)) continue;
    for (StoreInst *store : stores) {
      if (in_adds.count(store) || aa.isNoAlias(anywhere(load), anywhere(store))) continue;
      const llvm::Loop *loop = adds.front().address->getLoop();
      const llvm::SCEVAddRecExpr *read = affine_address(load->getPointerOperand(), *loop, se);
      const llvm::SCEVAddRecExpr *written =
          affine_address(store->getPointerOperand(), *loop, se);
      const llvm::DataLayout &layout = load->getModule()->getDataLayout();
      if (!read || read != written || !load->comesBefore(store) ||
          layout.getTypeStoreSize(load->getType()) !=
              layout.getTypeStoreSize(store->getValueOperand()->getType()))
        return false;
    }
  }
  return true;
}

// The bytes an access reaches over the loop: it is affine in the loop or does not
// change in it, and the loop's trip count is known on entry.
std::optional<Range> range_of(Instruction *access, const llvm::Loop &loop,
                              llvm::ScalarEvolution &se) {
  const llvm::DataLayout &layout = access->getModule()->getDataLayout();
  llvm::Value *pointer = llvm::getLoadStorePointerOperand(access);
  llvm::Type *intptr = layout.getIntPtrType(pointer->getType());
  const llvm::SCEV *address = se.getPtrToIntExpr(se.getSCEV(pointer), intptr);
  const llvm::SCEV *trips = se.getBackedgeTakenCount(&loop);
  if (llvm::isa<llvm::SCEVCouldNotCompute>(address) ||
      llvm::isa<llvm::SCEVCouldNotCompute>(trips))
    return std::nullopt;
  const llvm::SCEV *first = address;
  const llvm::SCEV *last = address;
  if (auto *rec = llvm::dyn_cast<llvm::SCEVAddRecExpr>(address)) {
    if (rec->getLoop() != &loop || !rec->isAffine()) return std::nullopt;
    first = rec->getStart();
    last = rec->evaluateAtIteration(se.getTruncateOrZeroExtend(trips, intptr), se);
  } else if (!se.isLoopInvariant(address, &loop)) {
    return std::nullopt;
  }
  const llvm::SCEV *size = se.getConstant(
      intptr, layout.getTypeStoreSize(llvm::getLoadStoreType(access)).getFixedSize());
  return Range{se.getUMinExpr(first, last), se.getAddExpr(se.getUMaxExpr(first, last), size)};
}

// Whether the loop can be versioned on a run-time check of `unproven` against the
// adds: their ranges known on entry.
bool checkable(const Split &s, llvm::ScalarEvolution &se) {
  llvm::SCEVExpander expander(se, s.body->getModule()->getDataLayout(), "scatter");
  Instruction *at = s.outside->getTerminator();
  std::vector<Instruction *> accesses(s.unproven);
  for (const ReadAddWrite &t : s.adds) accesses.push_back(t.store);
  for (Instruction *access : accesses) {
    std::optional<Range> range = range_of(access, *s.loop, se);
    if (!range || !expander.isSafeToExpandAt(range->low, at) ||
        !expander.isSafeToExpandAt(range->high, at))
      return false;
  }
  return true;
}

// Whether the loop's values are used after it only by phis of its exit block (LCSSA
// form), where the values of a fallback copy can join them.
bool used_after_only_by_exit_phis(const Split &s) {
  for (Instruction &inst : *s.body) {
    for (llvm::User *user : inst.users()) {
      auto *use = llvm::cast<Instruction>(user);
      if (use->getParent() != s.body &&
          (!llvm::isa<llvm::PHINode>(use) || use->getParent() != s.exit))
        return false;
    }
  }
  return true;
}

std::optional<Split> find_split(llvm::Loop &loop, llvm::ScalarEvolution &se,
                                llvm::AAResults &aa) {
  if (!loop.isInnermost() || loop.getNumBlocks() != 1 || is_vectorized(loop))
    return std::nullopt;
  BasicBlock *body = loop.getHeader();
  auto *branch = llvm::dyn_cast<llvm::BranchInst>(body->getTerminator());
  if (!branch || !branch->isConditional() || branch->getSuccessor(0) == branch->getSuccessor(1))
    return std::nullopt;
  BasicBlock *outside = nullptr;
  for (BasicBlock *pred : llvm::predecessors(body)) {
    if (pred == body) continue;
    if (outside && outside != pred) return std::nullopt;
    outside = pred;
  }
  if (!outside) return std::nullopt;
  std::vector<LoadInst *> loads;
  std::vector<StoreInst *> stores;
  for (Instruction &inst : *body) {
    if (auto *load = llvm::dyn_cast<LoadInst>(&inst)) {
      if (!load->isSimple()) return std::nullopt;
      loads.push_back(load);
    } else if (auto *store = llvm::dyn_cast<StoreInst>(&inst)) {
      if (!store->isSimple()) return std::nullopt;
      stores.push_back(store);
    } else if (inst.mayReadOrWriteMemory() || inst.mayHaveSideEffects()) {
      return std::nullopt;  // calls, atomics, fences: not reordered
    }
  }
  // The read-add-write triples, by the object they add into.
  std::vector<std::pair<const llvm::SCEV *, std::vector<ReadAddWrite>>> by_base;
  for (StoreInst *store : stores) {
    std::optional<ReadAddWrite> t = read_add_write(store, loop, se);
    if (!t) continue;
    const llvm::SCEV *base = se.getPointerBase(t->address);
    auto group = std::find_if(by_base.begin(), by_base.end(),
                              [&](const auto &g) { return g.first == base; });
    if (group == by_base.end()) {
      by_base.push_back({base, {*t}});
    } else {
      group->second.push_back(*t);
    }
  }
  BasicBlock *exit = branch->getSuccessor(0) == body ? branch->getSuccessor(1)
                                                    : branch->getSuccessor(0);
  std::vector<Instruction *> unproven;
  for (auto &group : by_base) {
    if (group.second.size() < 2 || !splittable(group.second, loads, stores, se, aa, unproven))
      continue;
    Split found{&loop, body, outside, exit, group.second, unproven};
    if (!unproven.empty() && !checkable(found, se)) continue;
    return found;
  }
  return std::nullopt;
}

// A copy of the loop's block, before it. Its loop has no loop metadata (a loop ID
// names one loop); `keep_whole` (the fallback, rarely run) is not to be unrolled.
BasicBlock *clone_of(BasicBlock *body, const llvm::Twine &suffix, llvm::ValueToValueMapTy &map,
                     bool keep_whole = false) {
  BasicBlock *copy = llvm::CloneBasicBlock(body, map, suffix, body->getParent());
  copy->moveBefore(body);
  map[body] = copy;
  for (Instruction &inst : *copy) {
    llvm::RemapInstruction(&inst, map,
                           llvm::RF_IgnoreMissingLocals | llvm::RF_NoModuleLevelChanges);
  }
  llvm::MDNode *id = nullptr;
  if (keep_whole) {
    llvm::LLVMContext &context = body->getContext();
    llvm::MDNode *no_unroll =
        llvm::MDNode::get(context, llvm::MDString::get(context, "llvm.loop.unroll.disable"));
    id = llvm::MDNode::getDistinct(context, {nullptr, no_unroll});
    id->replaceOperandWith(0, id);
  }
  copy->getTerminator()->setMetadata(llvm::LLVMContext::MD_loop, id);
  return copy;
}

// "Every unproven access's bytes lie outside the adds' bytes", computed at the end
// of the block before the loop (before any block is added: the expander consults
// the loop analysis).
llvm::Value *disjoint(const Split &s, llvm::ScalarEvolution &se) {
  llvm::SCEVExpander expander(se, s.body->getModule()->getDataLayout(), "scatter");
  Instruction *at = s.outside->getTerminator();
  llvm::IRBuilder<> b(at);
  auto expand = [&](Instruction *access) {
    Range range = *range_of(access, *s.loop, se);  // checkable() made sure
    llvm::Type *intptr = range.low->getType();
    return std::make_pair(expander.expandCodeFor(range.low, intptr, at),
                          expander.expandCodeFor(range.high, intptr, at));
  };
  llvm::Value *low = nullptr;
  llvm::Value *high = nullptr;
  for (const ReadAddWrite &t : s.adds) {
    auto [l, h] = expand(t.store);
    low = low ? b.CreateSelect(b.CreateICmpULT(l, low), l, low) : l;
    high = high ? b.CreateSelect(b.CreateICmpUGT(h, high), h, high) : h;
  }
  llvm::Value *apart = b.getTrue();
  for (Instruction *access : s.unproven) {
    auto [l, h] = expand(access);
    apart = b.CreateAnd(apart, b.CreateOr(b.CreateICmpULE(high, l), b.CreateICmpULE(h, low)));
  }
  return apart;
}

// The loop's backedge-taken count as an i64, computed at the end of the block
// before the loop (before any block is added, as in `disjoint`); null where it cannot
// be computed there.
llvm::Value *backedges_before(const Split &s, const scatter::Fusion &f,
                              llvm::ScalarEvolution &se) {
  llvm::SCEVExpander expander(se, s.body->getModule()->getDataLayout(), "scatter");
  Instruction *at = s.outside->getTerminator();
  if (!expander.isSafeToExpandAt(f.backedges, at)) return nullptr;
  llvm::Value *count = expander.expandCodeFor(f.backedges, f.backedges->getType(), at);
  llvm::IRBuilder<> b(at);
  return b.CreateZExtOrTrunc(count, b.getInt64Ty());
}

// Returns the untouched copy of the loop that a run-time check, or the fused path's
// guard, falls back to, if any.
BasicBlock *split(const Split &s, llvm::ScalarEvolution &se) {
  BasicBlock *body = s.body;
  // The fused loop (scatter_fusion.h) where it computes the same, with the loop as
  // written for loops too short for it.
  std::optional<scatter::Fusion> fusion = scatter::fusable(s, se);
  llvm::Value *backedges = fusion ? backedges_before(s, *fusion, se) : nullptr;
  if (!backedges) fusion.reset();
  // The rest of the loop in the fused path too, where it can be (scatter_fusion.h).
  std::optional<scatter::Rest> rest = fusion ? scatter::rest_of(s, *fusion, se) : std::nullopt;
  // Where the adds' entries may be another access's, a run-time check chooses
  // between the split (or fused) loops and an untouched copy of the loop.
  llvm::Value *apart = s.unproven.empty() ? nullptr : disjoint(s, se);
  BasicBlock *fallback = nullptr;
  if (apart || fusion) {
    llvm::ValueToValueMapTy map;
    fallback = clone_of(body, ".scatter.fallback", map, /*keep_whole=*/true);
    for (llvm::PHINode &phi : s.exit->phis()) {
      llvm::Value *value = phi.getIncomingValueForBlock(body);
      auto mapped = map.find(value);
      phi.addIncoming(mapped == map.end() ? value : static_cast<llvm::Value *>(mapped->second),
                      fallback);
    }
  }
  // Without the fused loop: one copy of the loop per add, in order, each keeping
  // that add only; then the loop itself without them. (Keeping the last add in the
  // loop saves a pass, but LLVM 15's vectoriser refused heat's: its recurrence feeds
  // both that add and a reduction used after the loop.)
  std::vector<BasicBlock *> copies;
  for (size_t k = 0; !fusion && k < s.adds.size(); ++k) {
    llvm::ValueToValueMapTy map;
    BasicBlock *copy = clone_of(body, ".scatter" + llvm::Twine(k), map);
    keep_only(copy, {llvm::cast<Instruction>(map[s.adds[k].store]), copy->getTerminator()});
    copies.push_back(copy);
  }
  // The adds run from `adds` (the split loops, or the fused path's guard) and go on
  // to `after` (the rest of the loop, after a block the fused path ends in). A loop
  // too short for the fused one runs as written (the untouched copy): no split loops
  // to build (the first build's code generation) for the few iterations they would
  // take.
  BasicBlock *adds = fusion ? nullptr : copies.front();
  BasicBlock *after = body;
  BasicBlock *fused_end = nullptr;
  if (rest) {
    // The fused path goes on to the exit; the loop's block, now its last iteration
    // alone, runs before it (below).
    const scatter::FusedPath path =
        scatter::fused_path(s, *fusion, &*rest, backedges, fallback, s.exit);
    adds = path.guard;
    fused_end = path.end;
  } else if (fusion) {
    after = BasicBlock::Create(body->getContext(), body->getName() + ".scatter.join",
                               body->getParent(), body);
    llvm::BranchInst::Create(body, after);
    adds = scatter::fused_path(s, *fusion, nullptr, backedges, fallback, after).guard;
    body->replacePhiUsesWith(s.outside, after);
  }
  // The loop's entry edge now leads to the check, or straight to the adds.
  BasicBlock *entry = adds;
  if (apart) {
    entry = BasicBlock::Create(body->getContext(), body->getName() + ".scatter.check",
                               body->getParent(), fallback);
    llvm::BranchInst::Create(adds, fallback, apart, entry);
    if (!fusion) copies.front()->replacePhiUsesWith(s.outside, entry);
  }
  // The untouched copy is entered from the check and from the fused path's guard.
  if (fallback) {
    for (llvm::PHINode &phi : fallback->phis()) {
      const int from_outside = phi.getBasicBlockIndex(s.outside);
      llvm::Value *start = phi.getIncomingValue(from_outside);
      phi.setIncomingBlock(from_outside, apart ? entry : adds);
      if (apart && fusion) phi.addIncoming(start, adds);
    }
  }
  if (rest) {
    scatter::last_iteration_only(s, *fusion, backedges, entry);
    for (llvm::PHINode &phi : s.exit->phis()) phi.replaceIncomingBlockWith(body, fused_end);
    return fallback;
  }
  s.outside->getTerminator()->replaceSuccessorWith(body, entry);
  for (size_t k = 0; k < copies.size(); ++k) {
    BasicBlock *next = k + 1 < copies.size() ? copies[k + 1] : after;
    copies[k]->getTerminator()->replaceSuccessorWith(s.exit, next);
    next->replacePhiUsesWith(s.outside, copies[k]);
  }
  std::vector<Instruction *> roots = scatter::used_after(body);
  roots.push_back(body->getTerminator());
  std::set<Instruction *> moved;
  for (const ReadAddWrite &t : s.adds) moved.insert(t.store);
  for (Instruction &inst : *body)
    if (llvm::isa<StoreInst>(inst) && !moved.count(&inst)) roots.push_back(&inst);
  keep_only(body, roots);
  settle_sums_of_the_last_iteration(body);
  // Left with nothing to do (every add moved out, no other store, no value used after
  // it), the loop would still count its iterations: it runs once instead (finite: the
  // fused path knows its trip count).
  if (fusion && roots.size() == 1) {
    body->getTerminator()->eraseFromParent();
    for (llvm::PHINode &phi : body->phis()) phi.removeIncomingValue(body, false);
    llvm::BranchInst::Create(s.exit, body);
  }
  return fallback;
}

}  // namespace

llvm::PreservedAnalyses SplitScatterAdds::run(llvm::Function &fn,
                                              llvm::FunctionAnalysisManager &analyses) {
  bool changed = false;
  // Loops not to look at again: fallback copies (each loop is split once), and
  // loops LCSSA form did not make splittable.
  std::set<BasicBlock *> fallbacks;
  // Each split changes the function: analyses again, until no loop qualifies.
  for (;;) {
    auto &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
    auto &se = analyses.getResult<llvm::ScalarEvolutionAnalysis>(fn);
    auto &aa = analyses.getResult<llvm::AAManager>(fn);
    std::optional<Split> found;
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      if (fallbacks.count(loop->getHeader())) continue;
      found = find_split(*loop, se, aa);
      if (found) break;
    }
    if (!found) break;
    if (!found->unproven.empty() && !used_after_only_by_exit_phis(*found)) {
      // Versioning joins the two copies' values in the exit block: LCSSA form
      // first, then the loop is looked at again (once).
      fallbacks.insert(found->body);
      auto &tree = analyses.getResult<llvm::DominatorTreeAnalysis>(fn);
      if (llvm::formLCSSA(*found->loop, tree, &loops, &se)) {
        fallbacks.erase(found->body);
        changed = true;
        analyses.invalidate(fn, llvm::PreservedAnalyses::none());
      }
      continue;
    }
    fallbacks.insert(split(*found, se));
    changed = true;
    analyses.invalidate(fn, llvm::PreservedAnalyses::none());
  }
  return changed ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
