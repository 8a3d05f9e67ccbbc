#include "scratch_forwarding.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <llvm/Analysis/AliasAnalysis.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/MemoryLocation.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

namespace enzyme_py {
namespace {

using llvm::Instruction;
using llvm::Loop;
using llvm::Value;

// The most instructions of A that one forwarded load computes again.
constexpr size_t kMaxSlice = 24;

struct Analyses {
  llvm::LoopInfo &loops;
  llvm::DominatorTree &dominators;
  llvm::ScalarEvolution &scev;
  llvm::AAResults &aa;
  const llvm::DataLayout &layout;
};

// The instructions that may write memory in a parent loop's blocks (the function's,
// for loops at the top level), found once per parent.
class Writers {
 public:
  explicit Writers(llvm::Function &fn) : fn_(fn) {}

  const std::vector<Instruction *> &in(const Loop *parent) {
    auto found = found_.find(parent);
    if (found != found_.end()) return found->second;
    std::vector<Instruction *> &writers = found_[parent];
    auto add = [&](llvm::BasicBlock &block) {
      for (Instruction &inst : block) {
        if (inst.mayWriteToMemory()) writers.push_back(&inst);
      }
    };
    if (parent) {
      for (llvm::BasicBlock *block : parent->blocks()) add(*block);
    } else {
      for (llvm::BasicBlock &block : fn_) add(block);
    }
    return writers;
  }

 private:
  llvm::Function &fn_;
  std::map<const Loop *, std::vector<Instruction *>> found_;
};

// Whether no instruction of `writers` but `except` may write the object that
// `pointer` points into.
bool unwritten(const std::vector<Instruction *> &writers, const Instruction *except,
               const Value *pointer, llvm::AAResults &aa) {
  const Value *object = llvm::getUnderlyingObject(pointer, /*MaxLookup=*/0);
  const auto anywhere = llvm::MemoryLocation::getBeforeOrAfter(object);
  for (Instruction *writer : writers) {
    if (writer != except && llvm::isModSet(aa.getModRefInfo(writer, anywhere))) return false;
  }
  return true;
}

// `pointer` as {p0, +, size}<loop>, size the store size of `element`; null otherwise.
const llvm::SCEVAddRecExpr *element_walk(Value *pointer, llvm::Type *element, const Loop *loop,
                                         const Analyses &a) {
  const auto *walk = llvm::dyn_cast<llvm::SCEVAddRecExpr>(a.scev.getSCEV(pointer));
  if (!walk || walk->getLoop() != loop || !walk->isAffine()) return nullptr;
  const auto *step = llvm::dyn_cast<llvm::SCEVConstant>(walk->getStepRecurrence(a.scev));
  const uint64_t size = a.layout.getTypeStoreSize(element).getFixedSize();
  if (!step || step->getAPInt().getSExtValue() != static_cast<int64_t>(size)) return nullptr;
  return walk;
}

// A loop counted by a canonical induction variable, its backedge-taken count known:
// at its t-th iteration (from 0) the variable is t and t <= the count.
struct CountedLoop {
  Loop *loop = nullptr;
  llvm::PHINode *iv = nullptr;
  const llvm::SCEV *backedges = nullptr;
};

std::optional<CountedLoop> counted(Loop *loop, const Analyses &a) {
  if (!loop) return std::nullopt;
  llvm::PHINode *iv = loop->getCanonicalInductionVariable();
  const llvm::SCEV *backedges = a.scev.getBackedgeTakenCount(loop);
  if (!iv || llvm::isa<llvm::SCEVCouldNotCompute>(backedges)) return std::nullopt;
  return CountedLoop{loop, iv, backedges};
}

// A counted loop that, once entered, runs to its end: it leaves only at its latch,
// and its exit block is dedicated (reached from the loop only).
std::optional<CountedLoop> runs_to_end(Loop *loop, const Analyses &a) {
  if (!loop || !loop->isLoopSimplifyForm()) return std::nullopt;
  llvm::BasicBlock *latch = loop->getLoopLatch();
  if (!latch || loop->getExitingBlock() != latch || !loop->getExitBlock()) return std::nullopt;
  return counted(loop, a);
}

// A store that fills an array: one element per iteration of its loop, every iteration.
struct Fill {
  llvm::StoreInst *store = nullptr;
  CountedLoop a;
  const llvm::SCEVAddRecExpr *walk = nullptr;
};

std::optional<Fill> as_fill(llvm::StoreInst *store, const Analyses &a) {
  if (!store->isSimple()) return std::nullopt;
  auto a_loop = runs_to_end(a.loops.getLoopFor(store->getParent()), a);
  if (!a_loop) return std::nullopt;
  Loop *loop = a_loop->loop;
  if (a.loops.getLoopFor(loop->getExitBlock()) != loop->getParentLoop() ||
      !a.dominators.dominates(store->getParent(), loop->getLoopLatch())) {
    return std::nullopt;
  }
  const auto *walk = element_walk(store->getPointerOperand(),
                                  store->getValueOperand()->getType(), loop, a);
  if (!walk) return std::nullopt;
  return Fill{store, *a_loop, walk};
}

// Whether `condition` keeps its value through one iteration of `parent` (one run of
// the function where it is null): made outside every loop inside it.
bool fixed_per_iteration(const Value *condition, const Loop *parent, const llvm::LoopInfo &loops) {
  const auto *inst = llvm::dyn_cast<Instruction>(condition);
  if (!inst) return true;
  const Loop *made_in = loops.getLoopFor(inst->getParent());
  if (!parent) return made_in == nullptr;
  return made_in == parent || !parent->contains(made_in);
}

// Whether every path of one iteration of `parent` (of the function, where it is null)
// that reaches `target` passes `through` first. Along a path, branches on one condition
// that keeps its value through the iteration go the same way: LLVM leaves Numba's
// loops guarded by the same `count != 0` test, a fill's and the read loop's after it,
// with no block where the read is reached from the fill's exit alone.
bool always_passes(llvm::BasicBlock *through, llvm::BasicBlock *target, const Loop *parent,
                   llvm::Function &fn, const llvm::LoopInfo &loops) {
  using Known = std::vector<std::pair<Value *, bool>>;  // sorted by condition
  struct Step {
    llvm::BasicBlock *block;
    Known known;
  };
  llvm::BasicBlock *start = parent ? parent->getHeader() : &fn.getEntryBlock();
  std::set<std::pair<llvm::BasicBlock *, Known>> seen;
  std::vector<Step> work{{start, {}}};
  size_t budget = 4096;  // paths' states explored before giving up (no forwarding)
  while (!work.empty()) {
    Step step = std::move(work.back());
    work.pop_back();
    if (step.block == through) continue;
    if (step.block == target) return false;
    if (!seen.insert({step.block, step.known}).second) continue;
    if (--budget == 0) return false;
    auto follow = [&](llvm::BasicBlock *next, Known known) {
      if (parent && (next == parent->getHeader() || !parent->contains(next))) return;
      work.push_back({next, std::move(known)});
    };
    auto *branch = llvm::dyn_cast<llvm::BranchInst>(step.block->getTerminator());
    if (!branch || !branch->isConditional() ||
        !fixed_per_iteration(branch->getCondition(), parent, loops)) {
      for (llvm::BasicBlock *next : llvm::successors(step.block)) follow(next, step.known);
      continue;
    }
    Value *condition = branch->getCondition();
    auto at = std::lower_bound(step.known.begin(), step.known.end(),
                               std::make_pair(condition, false));
    if (at != step.known.end() && at->first == condition) {
      follow(branch->getSuccessor(at->second ? 0 : 1), step.known);
      continue;
    }
    for (const bool taken : {true, false}) {
      Known known = step.known;
      known.insert(known.begin() + (at - step.known.begin()), {condition, taken});
      follow(branch->getSuccessor(taken ? 0 : 1), std::move(known));
    }
  }
  return true;
}

// Whether `load`, at iteration t of its loop, reads what `fill` stored at iteration t
// of its own, with nothing written over it since (the conditions of the header).
bool reads_fill(llvm::LoadInst *load, const CountedLoop &b, const Fill &fill, Writers &writers,
                llvm::Function &fn, const Analyses &a) {
  const Loop *parent = fill.a.loop->getParentLoop();
  // B lies in A's parent (at any depth), not in A: each iteration of the parent runs A
  // to its end before it reaches B's loads.
  const bool in_parent = parent ? b.loop != parent && parent->contains(b.loop) : true;
  if (!in_parent || fill.a.loop->contains(b.loop) ||
      load->getType() != fill.store->getValueOperand()->getType() ||
      b.iv->getType() != fill.a.iv->getType()) {
    return false;
  }
  const auto *walk = element_walk(load->getPointerOperand(), load->getType(), b.loop, a);
  if (!walk || walk->getStart() != fill.walk->getStart()) return false;
  if (b.backedges != fill.a.backedges &&
      (b.backedges->getType() != fill.a.backedges->getType() ||
       !a.scev.isKnownPredicate(llvm::ICmpInst::ICMP_ULE, b.backedges, fill.a.backedges))) {
    return false;
  }
  // The path walk last: it is the costly check.
  return always_passes(fill.a.loop->getExitBlock(), load->getParent(), parent, fn, a.loops) &&
         unwritten(writers.in(parent), fill.store, fill.store->getPointerOperand(), a.aa);
}

bool recomputable(const Instruction &inst) {
  if (auto *call = llvm::dyn_cast<llvm::CallInst>(&inst)) {
    return call->doesNotAccessMemory() && call->doesNotThrow() && call->willReturn() &&
           !llvm::isa<llvm::InlineAsm>(call->getCalledOperand());
  }
  if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst)) return load->isSimple();
  return llvm::isa<llvm::BinaryOperator, llvm::UnaryOperator, llvm::CastInst,
                   llvm::GetElementPtrInst, llvm::CmpInst, llvm::SelectInst, llvm::FreezeInst>(
      inst);
}

// The instructions of A that the stored value is computed from, operands first; false
// where it reaches one that cannot be computed again at `at` (the load).
class Slice {
 public:
  Slice(const Fill &fill, Instruction *at, Writers &writers, const Analyses &a)
      : fill_(fill), at_(at), writers_(writers.in(fill.a.loop->getParentLoop())), a_(a) {}

  bool take(Value *value) {
    auto *inst = llvm::dyn_cast<Instruction>(value);
    if (!inst || inst == fill_.a.iv) return true;
    if (!fill_.a.loop->contains(inst)) {
      if (a_.dominators.dominates(inst, at_)) return true;
      // What A's preheader computed ran before A, in the same iteration: computed again.
      if (inst->getParent() != fill_.a.loop->getLoopPreheader()) return false;
    }
    if (seen_.count(inst)) return true;
    if (llvm::isa<llvm::PHINode>(inst) || !recomputable(*inst)) return false;
    auto *load = llvm::dyn_cast<llvm::LoadInst>(inst);
    if (load && !unwritten(writers_, nullptr, load->getPointerOperand(), a_.aa)) return false;
    seen_.insert(inst);
    if (seen_.size() > kMaxSlice) return false;
    for (Value *operand : inst->operands()) {
      if (!take(operand)) return false;
    }
    order.push_back(inst);
    return true;
  }

  std::vector<Instruction *> order;

 private:
  const Fill &fill_;
  Instruction *at_;
  const std::vector<Instruction *> &writers_;
  const Analyses &a_;
  std::set<Instruction *> seen_;
};

struct Forward {
  llvm::LoadInst *load = nullptr;
  llvm::PHINode *b_iv = nullptr;
  const Fill *fill = nullptr;
  std::vector<Instruction *> slice;
};

// The slice computed again before the load, with B's induction variable for A's.
void forward(const Forward &f) {
  std::map<Value *, Value *> now{{f.fill->a.iv, f.b_iv}};
  for (Instruction *inst : f.slice) {
    Instruction *copy = inst->clone();
    for (unsigned k = 0; k < copy->getNumOperands(); ++k) {
      auto found = now.find(copy->getOperand(k));
      if (found != now.end()) copy->setOperand(k, found->second);
    }
    // Scopes of an inlined call say nothing about another place in the function.
    copy->setMetadata(llvm::LLVMContext::MD_alias_scope, nullptr);
    copy->setMetadata(llvm::LLVMContext::MD_noalias, nullptr);
    copy->insertBefore(f.load);
    copy->setName(inst->getName() + ".again");
    now[inst] = copy;
  }
  Value *stored = f.fill->store->getValueOperand();
  auto found = now.find(stored);
  f.load->replaceAllUsesWith(found != now.end() ? found->second : stored);
  f.load->eraseFromParent();
}

}  // namespace

llvm::PreservedAnalyses ForwardScratchStores::run(llvm::Function &fn,
                                                  llvm::FunctionAnalysisManager &analyses) {
  if (fn.isDeclaration()) return llvm::PreservedAnalyses::all();
  Analyses a{analyses.getResult<llvm::LoopAnalysis>(fn),
             analyses.getResult<llvm::DominatorTreeAnalysis>(fn),
             analyses.getResult<llvm::ScalarEvolutionAnalysis>(fn),
             analyses.getResult<llvm::AAManager>(fn), fn.getParent()->getDataLayout()};
  std::vector<Fill> fills;
  std::vector<llvm::LoadInst *> loads;
  for (llvm::BasicBlock &block : fn) {
    for (Instruction &inst : block) {
      if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        if (auto fill = as_fill(store, a)) fills.push_back(*fill);
      } else if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
        if (load->isSimple() && a.loops.getLoopFor(&block)) loads.push_back(load);
      }
    }
  }
  if (fills.empty()) return llvm::PreservedAnalyses::all();
  Writers writers(fn);
  std::vector<Forward> forwards;
  for (llvm::LoadInst *load : loads) {
    auto b = counted(a.loops.getLoopFor(load->getParent()), a);
    if (!b) continue;
    for (const Fill &fill : fills) {
      if (!reads_fill(load, *b, fill, writers, fn, a)) continue;
      Slice slice(fill, load, writers, a);
      if (slice.take(fill.store->getValueOperand())) {
        forwards.push_back(Forward{load, b->iv, &fill, std::move(slice.order)});
      }
      break;
    }
  }
  // A slice holds no forwarded load: its loads read memory that nothing in the parent
  // loop writes, and a forwarded load reads memory that a fill there writes.
  for (const Forward &f : forwards) forward(f);
  return forwards.empty() ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
}

}  // namespace enzyme_py
