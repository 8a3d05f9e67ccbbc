#include "shadow_zeroing.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <llvm/Analysis/AliasAnalysis.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/MemoryLocation.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>
#include <llvm/Transforms/Utils/ScalarEvolutionExpander.h>

namespace enzyme_py {
namespace {

using llvm::BasicBlock;
using llvm::ICmpInst;
using llvm::Instruction;
using llvm::SCEV;

constexpr const char kMark[] = "enzyme_py.zeroed_shadow";
// With more pieces than this, or more blocks walked, the walk zeroes what it has.
constexpr size_t kMostPieces = 16;
constexpr unsigned kMostBlocks = 256;

struct Span {
  const SCEV *lo;
  const SCEV *hi;
};

struct State {
  std::vector<Span> pieces;   // still to be zeroed
  std::vector<Span> written;  // stored since the memset
};

// Where pieces are zeroed: before `at`, or on the edge from -> to.
struct Emission {
  Instruction *at = nullptr;
  BasicBlock *from = nullptr;
  BasicBlock *to = nullptr;
  std::vector<Span> pieces;
};

// Whether `inst` writes zeros and reads nothing (a zero memset, a store of zero).
// Wherever it writes, zeros before or after the memset's pieces are the same bytes:
// the walk passes it even where alias analysis cannot tell it apart from the shadow
// (Numba's error slots, zeroed through a pointer loaded from the slots).
bool writes_zeros_only(const Instruction &inst) {
  if (const auto *set = llvm::dyn_cast<llvm::MemSetInst>(&inst)) {
    const auto *value = llvm::dyn_cast<llvm::ConstantInt>(set->getValue());
    return !set->isVolatile() && value && value->isZero();
  }
  if (const auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
    const auto *value = llvm::dyn_cast<llvm::Constant>(store->getValueOperand());
    return store->isSimple() && value && value->isNullValue();
  }
  return false;
}

uint64_t store_size(const llvm::DataLayout &layout, llvm::Type *type) {
  return layout.getTypeStoreSize(type).getFixedSize();
}

// One marked memset, walked on from (see shadow_zeroing.h).
class Walk {
 public:
  Walk(llvm::MemSetInst &zeroing, llvm::AAResults &aa, llvm::ScalarEvolution &se,
       llvm::LoopInfo &loops, llvm::DominatorTree &dt)
      : zeroing_(zeroing),
        where_(llvm::MemoryLocation::getForDest(&zeroing)),
        dest_(zeroing.getRawDest()),
        layout_(zeroing.getModule()->getDataLayout()),
        i64_(llvm::Type::getInt64Ty(zeroing.getContext())),
        aa_(aa),
        se_(se),
        loops_(loops),
        dt_(dt) {}

  // Walks; true where that found something to gain (a store or a load of zeros).
  bool plan() {
    BasicBlock *bb = zeroing_.getParent();
    if (loops_.getLoopFor(bb) || zeroing_.isVolatile()) return false;
    auto *value = llvm::dyn_cast<llvm::ConstantInt>(zeroing_.getValue());
    if (!value || !value->isZero()) return false;
    State start;
    start.pieces.push_back(
        {se_.getZero(i64_), se_.getNoopOrZeroExtend(se_.getSCEV(zeroing_.getLength()), i64_)});
    walk_block(bb, std::next(zeroing_.getIterator()), std::move(start));
    // Joins: a block every predecessor of which the walk reached with the same
    // pieces is walked on from (each value in them dominates every predecessor, so
    // the block too); the pieces reaching any other are zeroed on their edges.
    for (bool joined = true; joined;) {
      joined = false;
      for (auto it = arrivals_.begin(); it != arrivals_.end(); ++it) {
        if (!all_arrived(it->first, it->second)) continue;
        BasicBlock *block = it->first;
        State state = it->second.front().second;
        arrivals_.erase(it);
        walked_.insert(block);
        walk_block(block, block->begin(), std::move(state));
        joined = true;
        break;
      }
    }
    for (auto &[block, reached] : arrivals_) {
      for (auto &[from, state] : reached) emit_on_edge(from, block, state);
    }
    return gained_;
  }

  // The memset replaced by the zeroing of the pieces where the walk ended, the loads
  // of zeros by zero.
  void apply() {
    llvm::SCEVExpander expander(se_, layout_, "zeroing");
    llvm::Type *i8 = llvm::Type::getInt8Ty(zeroing_.getContext());
    for (Emission &e : emissions_) {
      Instruction *at = e.at;
      if (!at) at = llvm::SplitEdge(e.from, e.to, &dt_, &loops_)->getTerminator();
      for (const Span &piece : e.pieces) {
        if (se_.isKnownPredicateAt(ICmpInst::ICMP_SGE, piece.lo, piece.hi, at)) continue;
        const SCEV *length =
            se_.getSMaxExpr(se_.getMinusSCEV(piece.hi, piece.lo), se_.getZero(i64_));
        llvm::Value *lo = expander.expandCodeFor(piece.lo, i64_, at);
        llvm::Value *bytes = expander.expandCodeFor(length, i64_, at);
        llvm::IRBuilder<> b(at);
        b.CreateMemSet(b.CreateGEP(i8, dest_, lo), b.getInt8(0), bytes, llvm::MaybeAlign(1));
      }
    }
    for (llvm::LoadInst *load : zero_loads_) {
      se_.forgetValue(load);
      load->replaceAllUsesWith(llvm::Constant::getNullValue(load->getType()));
      load->eraseFromParent();
    }
    zeroing_.eraseFromParent();
  }

 private:
  void walk_block(BasicBlock *bb, BasicBlock::iterator it, State state) {
    if (++blocks_ > kMostBlocks) {
      return emit_before(llvm::isa<llvm::PHINode>(*it) ? bb->getFirstNonPHI() : &*it, state);
    }
    for (; !it->isTerminator(); ++it) {
      Instruction &inst = *it;
      if (llvm::isa<llvm::PHINode>(inst) || inst.isDebugOrPseudoInst()) continue;
      if (!inst.mayReadOrWriteMemory() || llvm::isNoModRef(aa_.getModRefInfo(&inst, where_)) ||
          writes_zeros_only(inst))
        continue;
      if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst); load && load->isSimple()) {
        const SCEV *at = offset(load->getPointerOperand(), true);
        if (at && apart(span_at(at, load->getType()), state, &inst)) {
          zero_loads_.push_back(load);
          gained_ = true;
          continue;
        }
      } else if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst); store && store->isSimple()) {
        const SCEV *at = offset(store->getPointerOperand(), true);
        if (at && subtract(state, span_at(at, store->getValueOperand()->getType()), &inst))
          continue;
      }
      return emit_before(&inst, state);
    }
    Instruction *end = bb->getTerminator();
    auto *branch = llvm::dyn_cast<llvm::BranchInst>(end);
    if (!branch) return emit_before(end, state);
    if (branch->isUnconditional()) return go_to(bb, branch->getSuccessor(0), std::move(state));
    if (branch->getSuccessor(0) == branch->getSuccessor(1)) return emit_before(end, state);
    go_to(bb, branch->getSuccessor(0), state);
    go_to(bb, branch->getSuccessor(1), std::move(state));
  }

  void go_to(BasicBlock *from, BasicBlock *to, State state) {
    if (llvm::Loop *loop = loops_.getLoopFor(to)) {
      if (loop->getHeader() != to || !take_loop(loop, from, state)) emit_on_edge(from, to, state);
      return;
    }
    if (to->getSinglePredecessor() == from) return walk_block(to, to->begin(), std::move(state));
    if (walked_.count(to)) return emit_on_edge(from, to, state);
    arrivals_[to].emplace_back(from, std::move(state));
  }

  // Whether every predecessor of `block` reached it, all with the same state.
  static bool all_arrived(BasicBlock *block,
                          const std::vector<std::pair<BasicBlock *, State>> &reached) {
    std::set<BasicBlock *> preds(llvm::pred_begin(block), llvm::pred_end(block));
    std::set<BasicBlock *> from;
    for (const auto &[pred, state] : reached) {
      from.insert(pred);
      if (!same(state, reached.front().second)) return false;
    }
    return from == preds && reached.size() == preds.size();
  }

  static bool same(const State &a, const State &b) {
    auto equal = [](const std::vector<Span> &x, const std::vector<Span> &y) {
      return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const Span &p, const Span &q) {
        return p.lo == q.lo && p.hi == q.hi;
      });
    };
    return equal(a.pieces, b.pieces) && equal(a.written, b.written);
  }

  // The loop, if it fits (see shadow_zeroing.h): its span written, its loads zeros, the
  // walk gone on at its exit. False (nothing done) where it does not fit.
  bool take_loop(llvm::Loop *loop, BasicBlock *from, const State &state) {
    if (loop->getParentLoop() || !loop->isInnermost() || loop->getLoopPredecessor() != from)
      return false;
    BasicBlock *latch = loop->getLoopLatch();
    BasicBlock *exit = loop->getExitBlock();
    if (!latch || !exit || loop->getExitingBlock() != latch) return false;
    const SCEV *trips = se_.getBackedgeTakenCount(loop);  // exact, or could-not-compute
    if (llvm::isa<llvm::SCEVCouldNotCompute>(trips) ||
        trips->getType()->getIntegerBitWidth() > 64)
      return false;
    llvm::StoreInst *store = nullptr;
    std::vector<llvm::LoadInst *> loads;
    for (BasicBlock *bb : loop->blocks()) {
      for (Instruction &inst : *bb) {
        if (!inst.mayReadOrWriteMemory() || llvm::isNoModRef(aa_.getModRefInfo(&inst, where_)) ||
            writes_zeros_only(inst))
          continue;
        auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst);
        auto *st = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (load && load->isSimple()) {
          loads.push_back(load);
        } else if (st && st->isSimple() && !store) {
          store = st;
        } else {
          return false;
        }
      }
    }
    if (!store || !dt_.dominates(store->getParent(), latch)) return false;
    const SCEV *at = offset(store->getPointerOperand(), false);
    const auto *rec = llvm::dyn_cast_or_null<llvm::SCEVAddRecExpr>(at);
    if (!rec || rec->getLoop() != loop || !rec->isAffine()) return false;
    const uint64_t size = store_size(layout_, store->getValueOperand()->getType());
    const auto *step = llvm::dyn_cast<llvm::SCEVConstant>(rec->getStepRecurrence(se_));
    if (!step) return false;
    const int64_t stride = step->getAPInt().getSExtValue();
    if (stride != static_cast<int64_t>(size) && stride != -static_cast<int64_t>(size))
      return false;
    for (llvm::LoadInst *load : loads) {
      if (load->getParent() != store->getParent() || !load->comesBefore(store) ||
          offset(load->getPointerOperand(), false) != at ||
          store_size(layout_, load->getType()) != size)
        return false;
    }
    const SCEV *start = rec->getStart();
    if (se_.containsAddRecurrence(start)) return false;
    const SCEV *reach = se_.getMulExpr(se_.getNoopOrZeroExtend(trips, i64_), step);
    const SCEV *bytes = se_.getConstant(i64_, size);
    const Span span = stride > 0
                          ? Span{start, se_.getAddExpr(se_.getAddExpr(start, reach), bytes)}
                          : Span{se_.getAddExpr(start, reach), se_.getAddExpr(start, bytes)};
    Instruction *context = from->getTerminator();
    if (!loads.empty() && !apart(span, state, context)) return false;
    State after = state;
    if (!subtract(after, span, context)) return false;
    zero_loads_.insert(zero_loads_.end(), loads.begin(), loads.end());
    if (exit->getSinglePredecessor() == latch && !loops_.getLoopFor(exit)) {
      walk_block(exit, exit->begin(), std::move(after));
    } else {
      emit_on_edge(latch, exit, after);
    }
    return true;
  }

  // The byte offset of `ptr` from the memset's destination, or null where SCEV cannot
  // tell it; at the top level (outside loops) only values SCEV knows there.
  const SCEV *offset(llvm::Value *ptr, bool top_level) {
    const SCEV *at = se_.getMinusSCEV(se_.getSCEV(ptr), se_.getSCEV(dest_));
    if (llvm::isa<llvm::SCEVCouldNotCompute>(at) || !at->getType()->isIntegerTy(64))
      return nullptr;
    if (!top_level) return at;
    at = se_.getSCEVAtScope(at, nullptr);
    if (llvm::isa<llvm::SCEVCouldNotCompute>(at) || se_.containsAddRecurrence(at)) return nullptr;
    return at;
  }

  Span span_at(const SCEV *at, llvm::Type *type) {
    return {at, se_.getAddExpr(at, se_.getConstant(i64_, store_size(layout_, type)))};
  }

  // Whether `span` is proven apart from everything stored since the memset.
  bool apart(const Span &span, const State &state, const Instruction *context) {
    for (const Span &w : state.written) {
      if (!se_.isKnownPredicateAt(ICmpInst::ICMP_SLE, span.hi, w.lo, context) &&
          !se_.isKnownPredicateAt(ICmpInst::ICMP_SLE, w.hi, span.lo, context))
        return false;
    }
    return true;
  }

  // `span` written: every piece loses it. False (state unchanged) past kMostPieces.
  bool subtract(State &state, const Span &span, const Instruction *context) {
    std::vector<Span> pieces;
    for (const Span &p : state.pieces) {
      if (se_.isKnownPredicateAt(ICmpInst::ICMP_SLE, span.hi, p.lo, context) ||
          se_.isKnownPredicateAt(ICmpInst::ICMP_SLE, p.hi, span.lo, context)) {
        pieces.push_back(p);
        continue;
      }
      for (const Span &part : {Span{p.lo, se_.getSMinExpr(p.hi, span.lo)},
                               Span{se_.getSMaxExpr(p.lo, span.hi), p.hi}}) {
        if (!se_.isKnownPredicateAt(ICmpInst::ICMP_SGE, part.lo, part.hi, context))
          pieces.push_back(part);
      }
    }
    if (pieces.size() > kMostPieces) return false;
    state.pieces = std::move(pieces);
    state.written.push_back(span);
    gained_ = true;
    return true;
  }

  void emit_before(Instruction *at, const State &state) {
    emissions_.push_back({at, nullptr, nullptr, state.pieces});
  }

  void emit_on_edge(BasicBlock *from, BasicBlock *to, const State &state) {
    if (from->getTerminator()->getNumSuccessors() == 1)
      return emit_before(from->getTerminator(), state);
    emissions_.push_back({nullptr, from, to, state.pieces});
  }

  llvm::MemSetInst &zeroing_;
  llvm::MemoryLocation where_;
  llvm::Value *dest_;
  const llvm::DataLayout &layout_;
  llvm::IntegerType *i64_;
  llvm::AAResults &aa_;
  llvm::ScalarEvolution &se_;
  llvm::LoopInfo &loops_;
  llvm::DominatorTree &dt_;
  std::vector<Emission> emissions_;
  // Blocks with several predecessors, as the walk reached them: edge and state.
  std::map<BasicBlock *, std::vector<std::pair<BasicBlock *, State>>> arrivals_;
  std::set<BasicBlock *> walked_;
  std::vector<llvm::LoadInst *> zero_loads_;
  unsigned blocks_ = 0;
  bool gained_ = false;
};

}  // namespace

namespace {

// `old` with `count` i64 parameters more, after its own: the same body, attributes
// and name; `old` is erased (it has no callers yet).
llvm::Function *with_trailing_sizes(llvm::Function *old, unsigned count) {
  if (count == 0) return old;
  llvm::FunctionType *type = old->getFunctionType();
  std::vector<llvm::Type *> params(type->param_begin(), type->param_end());
  params.insert(params.end(), count, llvm::Type::getInt64Ty(old->getContext()));
  auto *fn = llvm::Function::Create(
      llvm::FunctionType::get(type->getReturnType(), params, type->isVarArg()),
      old->getLinkage(), old->getAddressSpace(), "", old->getParent());
  fn->copyAttributesFrom(old);
  fn->getBasicBlockList().splice(fn->begin(), old->getBasicBlockList());
  for (unsigned i = 0; i < old->arg_size(); ++i) {
    old->getArg(i)->replaceAllUsesWith(fn->getArg(i));
    fn->getArg(i)->takeName(old->getArg(i));
  }
  fn->takeName(old);
  if (!old->use_empty()) {
    throw std::logic_error("the derivative is called before its entry point is made");
  }
  old->eraseFromParent();
  return fn;
}

}  // namespace

LLVMValueRef zero_shadows_on_entry(LLVMValueRef derivative,
                                   const std::vector<ZeroedShadow> &shadows) {
  auto *fn = llvm::unwrap<llvm::Function>(derivative);
  unsigned sized = 0;
  for (const ZeroedShadow &s : shadows) sized += s.dims.empty();
  const unsigned first_size = fn->arg_size();
  fn = with_trailing_sizes(fn, sized);
  llvm::LLVMContext &ctx = fn->getContext();
  llvm::BasicBlock &entry = fn->getEntryBlock();
  llvm::IRBuilder<> b(&entry, entry.getFirstInsertionPt());
  const unsigned mark = ctx.getMDKindID(kMark);
  unsigned next_size = first_size;
  for (const ZeroedShadow &s : shadows) {
    if (s.shadow >= first_size || !fn->getArg(s.shadow)->getType()->isPointerTy()) {
      throw std::invalid_argument("no pointer parameter " + std::to_string(s.shadow) +
                                  " to zero in the derivative");
    }
    llvm::Value *bytes = nullptr;
    if (s.dims.empty()) {
      bytes = fn->getArg(next_size++);  // the caller passes the byte size
      bytes->setName("zeroed.bytes");
    } else {
      bytes = b.getInt64(s.itemsize);
      for (unsigned d : s.dims) {
        if (d >= first_size || !fn->getArg(d)->getType()->isIntegerTy()) {
          throw std::invalid_argument("no integer parameter " + std::to_string(d) +
                                      " to size a zeroed shadow by");
        }
        bytes = b.CreateMul(bytes, b.CreateZExtOrTrunc(fn->getArg(d), b.getInt64Ty()));
      }
    }
    llvm::Value *dest = b.CreateBitCast(fn->getArg(s.shadow), b.getInt8PtrTy());
    llvm::CallInst *zero = b.CreateMemSet(dest, b.getInt8(0), bytes, llvm::MaybeAlign(1));
    zero->setMetadata(mark, llvm::MDNode::get(ctx, {}));
    // The caller's fresh array: nothing else reaches its memory during the call.
    fn->addParamAttr(s.shadow, llvm::Attribute::NoAlias);
  }
  return llvm::wrap(fn);
}

llvm::PreservedAnalyses SinkShadowZeroing::run(llvm::Function &fn,
                                               llvm::FunctionAnalysisManager &analyses) {
  const unsigned mark = fn.getContext().getMDKindID(kMark);
  std::vector<llvm::MemSetInst *> marked;
  for (BasicBlock &bb : fn) {
    for (Instruction &inst : bb) {
      auto *zeroing = llvm::dyn_cast<llvm::MemSetInst>(&inst);
      if (zeroing && zeroing->getMetadata(mark)) marked.push_back(zeroing);
    }
  }
  if (marked.empty()) return llvm::PreservedAnalyses::all();
  // Edges split where pieces are zeroed keep the dominator tree and loops up to date.
  llvm::PreservedAnalyses kept;
  kept.preserve<llvm::DominatorTreeAnalysis>();
  kept.preserve<llvm::LoopAnalysis>();
  bool changed = false;
  for (llvm::MemSetInst *zeroing : marked) {
    auto &aa = analyses.getResult<llvm::AAManager>(fn);
    auto &se = analyses.getResult<llvm::ScalarEvolutionAnalysis>(fn);
    auto &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
    auto &dt = analyses.getResult<llvm::DominatorTreeAnalysis>(fn);
    Walk walk(*zeroing, aa, se, loops, dt);
    if (!walk.plan()) continue;
    walk.apply();
    changed = true;
    // What the next memset's walk asks is asked of the IR as it is now.
    analyses.invalidate(fn, kept);
  }
  return changed ? kept : llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
