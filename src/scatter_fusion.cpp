#include "scatter_fusion.h"

#include "fused_threads.h"

#include <algorithm>
#include <climits>
#include <set>

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

namespace enzyme_py::scatter {
namespace {

using llvm::BasicBlock;
using llvm::Instruction;
using llvm::PHINode;

// Shifts further apart than this, and more adds than this, stay split (the ends
// would be long straight-line code).
constexpr int64_t kMostShift = 4;
constexpr size_t kMostAdds = 8;
// The fused loop runs where it has at least this many iterations; shorter loops
// run as written.
constexpr int64_t kFewestFused = 8;

}  // namespace

bool slice_of(llvm::Value *root, BasicBlock *body, std::vector<Instruction *> &slice,
              std::set<PHINode *> &phis) {
  std::set<Instruction *> needed;
  std::vector<Instruction *> work;
  if (auto *inst = llvm::dyn_cast<Instruction>(root); inst && inst->getParent() == body)
    work.push_back(inst);
  while (!work.empty()) {
    Instruction *inst = work.back();
    work.pop_back();
    if (auto *phi = llvm::dyn_cast<PHINode>(inst)) {
      phis.insert(phi);
      continue;
    }
    if (!needed.insert(inst).second) continue;
    if (inst->mayWriteToMemory() || inst->mayHaveSideEffects()) return false;
    if (auto *load = llvm::dyn_cast<llvm::LoadInst>(inst); load && !load->isSimple()) return false;
    for (llvm::Value *operand : inst->operands()) {
      auto *def = llvm::dyn_cast<Instruction>(operand);
      if (def && def->getParent() == body) work.push_back(def);
    }
  }
  slice.clear();
  for (Instruction &inst : *body)
    if (needed.count(&inst)) slice.push_back(&inst);
  return true;
}

std::optional<Affine> affine_phi(PHINode *phi, const Split &s, llvm::ScalarEvolution &se) {
  llvm::Type *type = phi->getType();
  if (!(type->isIntegerTy() && type->getIntegerBitWidth() <= 64) && !type->isPointerTy())
    return std::nullopt;
  auto *rec = llvm::dyn_cast<llvm::SCEVAddRecExpr>(se.getSCEV(phi));
  if (!rec || rec->getLoop() != s.loop || !rec->isAffine()) return std::nullopt;
  auto *step = llvm::dyn_cast<llvm::SCEVConstant>(rec->getStepRecurrence(se));
  if (!step || step->getAPInt().getBitWidth() > 64) return std::nullopt;
  return Affine{phi->getIncomingValueForBlock(s.outside), step->getAPInt()};
}

llvm::Value *affine_at(llvm::IRBuilder<> &b, PHINode *phi, const Affine &a, llvm::Value *t) {
  llvm::Type *type = phi->getType();
  if (type->isIntegerTy()) {
    const unsigned bits = type->getIntegerBitWidth();
    llvm::Value *steps = b.CreateMul(b.CreateSExtOrTrunc(t, type),
                                     llvm::ConstantInt::get(type, a.step.sextOrTrunc(bits)));
    return b.CreateAdd(a.start, steps);
  }
  llvm::Value *bytes = b.CreateMul(t, b.getInt64(a.step.getSExtValue()));
  llvm::Type *bytes_pointer = b.getInt8PtrTy(type->getPointerAddressSpace());
  llvm::Value *moved =
      b.CreateGEP(b.getInt8Ty(), b.CreatePointerCast(a.start, bytes_pointer), bytes);
  return b.CreatePointerCast(moved, type);
}

namespace {

// Copies of the loop's instructions at a given iteration, in a new block.
class AtIteration {
 public:
  AtIteration(const Fusion &f, BasicBlock *body) : f_(f), body_(body) {}

  // `root` as the loop computes it at iteration `t` (an i64), from copies of `slice`
  // emitted at b's insertion point.
  // Where `clones` is given, each copied instruction's copy goes there, keyed by the
  // instruction it copies.
  llvm::Value *value(llvm::IRBuilder<> &b, const std::vector<Instruction *> &slice,
                     llvm::Value *root, llvm::Value *t,
                     std::map<Instruction *, Instruction *> *clones = nullptr) const {
    llvm::ValueToValueMapTy map;
    auto phi_value = [&](llvm::Value *v) {
      auto *phi = llvm::dyn_cast<PHINode>(v);
      if (phi && phi->getParent() == body_ && !map.count(phi)) map[phi] = at(b, phi, t);
    };
    phi_value(root);
    for (Instruction *inst : slice) {
      for (llvm::Value *operand : inst->operands()) phi_value(operand);
      Instruction *copy = inst->clone();
      copy->setName(inst->getName() + ".fused");
      b.Insert(copy);
      map[inst] = copy;
      if (clones) (*clones)[inst] = copy;
      llvm::RemapInstruction(copy, map,
                             llvm::RF_IgnoreMissingLocals | llvm::RF_NoModuleLevelChanges);
    }
    auto found = map.find(root);
    return found == map.end() ? root : static_cast<llvm::Value *>(found->second);
  }

  // Term j's contribution at iteration t, added into its add's entry as the loop
  // adds it (at iteration t + late).
  void add(llvm::IRBuilder<> &b, const Split &s, const Term &term, llvm::Value *t) const {
    const ReadAddWrite &rw = s.adds[term.add];
    llvm::Value *v = value(b, term.slice, term.root, t);
    llvm::Value *when = term.late ? b.CreateAdd(t, b.getInt64(term.late)) : t;
    llvm::Value *p = value(b, f_.address_slice[term.add], rw.store->getPointerOperand(), when);
    write(b, rw, p, v);
  }

  // Rest store k as the loop makes it at iteration t (`in_loop`: marked for
  // fused_threads.h, which leaves it out of the loop it runs on threads).
  void zero(llvm::IRBuilder<> &b, const Rest &rest, size_t k, llvm::Value *t, bool in_loop) const {
    llvm::StoreInst *original = rest.zeroes[k];
    llvm::Value *p = value(b, rest.slices[k], original->getPointerOperand(), t);
    auto *store = llvm::cast<llvm::StoreInst>(original->clone());
    store->setOperand(1, p);
    b.Insert(store);
    if (in_loop) store->setMetadata(kFusedZeroMark, llvm::MDNode::get(b.getContext(), {}));
  }

  // *p = *p + v with `rw`'s load, fadd (its fast-math flags) and store.
  static void write(llvm::IRBuilder<> &b, const ReadAddWrite &rw, llvm::Value *p, llvm::Value *v) {
    auto *load = llvm::cast<llvm::LoadInst>(rw.load->clone());
    load->setOperand(0, p);
    b.Insert(load, rw.load->getName() + ".fused");
    auto *sum = b.CreateFAddFMF(load, v, llvm::cast<Instruction>(rw.store->getValueOperand()));
    auto *store = llvm::cast<llvm::StoreInst>(rw.store->clone());
    store->setOperand(0, sum);
    store->setOperand(1, p);
    b.Insert(store);
  }

 private:
  // A header phi's value at iteration t.
  llvm::Value *at(llvm::IRBuilder<> &b, PHINode *phi, llvm::Value *t) const {
    return affine_at(b, phi, f_.phis.at(phi), t);
  }

  const Fusion &f_;
  BasicBlock *body_;
};

// The float phi `v` is, where it carries a value from the iteration before (0.0
// before the first): that value's instruction.
Instruction *carried(llvm::Value *v, const Split &s) {
  auto *phi = llvm::dyn_cast<PHINode>(v);
  if (!phi || phi->getParent() != s.body || !phi->getType()->isFloatingPointTy() ||
      phi->getNumIncomingValues() != 2)
    return nullptr;
  auto *init = llvm::dyn_cast<llvm::ConstantFP>(phi->getIncomingValueForBlock(s.outside));
  auto *x = llvm::dyn_cast<Instruction>(phi->getIncomingValueForBlock(s.body));
  if (!init || !init->isZero() || !x || x->getParent() != s.body) return nullptr;
  return x;
}

// The terms add k adds (see Term): each leaf of its sum but the load, a float phi
// carrying a value from the iteration before that value, a step late.
std::vector<Term> terms_of(const Split &s, size_t k, int64_t shift) {
  std::vector<Term> terms;
  for (llvm::Value *leaf : s.adds[k].added) {
    if (Instruction *x = carried(leaf, s)) {
      terms.push_back(Term{k, x, shift + 1, 1, {}});
    } else {
      terms.push_back(Term{k, leaf, shift, 0, {}});
    }
  }
  return terms;
}

// The order the fused loop takes the original's iterations in. The original's own
// where that walks add 0's entries upwards in memory; else the opposite order
// (`flipped`), so that the loop still walks memory upwards: a reverse pass's loops
// run downwards, and vectorised so, each vector of loads and stores was reversed by
// a permute (Rosenbrock's fused loop: 6 permutes per 8 entries, 2 flipped, those of
// its carried loads). Either order computes every entry from the same terms in the
// same order: the same bits. Heat's gradient 2-4% faster (A/B in one process, 2-core
// AMD EPYC), Rosenbrock's, bound by memory, within noise.
struct Direction {
  bool flipped;
  llvm::Value *last;  // the loop's last w (count - 1)

  // The original's iteration, less the term's offset, that the loop's w runs.
  llvm::Value *at(llvm::IRBuilder<> &b, llvm::Value *w) const {
    return flipped ? b.CreateSub(last, w, "scatter.u") : w;
  }
  // The original's iteration at the loop's first w, plus `offset`.
  llvm::Value *first(llvm::IRBuilder<> &b, int64_t offset) const {
    return flipped ? b.CreateAdd(last, b.getInt64(offset)) : b.getInt64(offset);
  }
};

// The copies of the loop's loads in the fused loop, by the load they copy and the
// iteration they run at (u + offset, u the loop's iteration: Direction::at).
using LoadCopies = std::map<std::pair<Instruction *, int64_t>, std::vector<Instruction *>>;

// A load the fused loop makes at iteration w + d that it also makes at w + d + 1
// reads at w what it read the iteration before: a phi carries it instead (a
// first-order recurrence, which the loop vectoriser takes: one load of the two
// left, Rosenbrock's x[u], x[u+1] from x[u+1], x[u+2] the iteration before). Not
// from a load itself carried: LLVM 15's vectoriser refuses second-order
// recurrences. As sound as the fused loop itself: the loads it copies read memory it
// does not write. `low` (the loop's preheader) loads the first iteration's values.
void carry_loads(const Split &s, const Fusion &f, const AtIteration &at, const LoadCopies &loads,
                 const Direction &direction, BasicBlock *low, BasicBlock *loop) {
  // The loop's w runs the original's iteration w + offset (last - w + offset where
  // flipped): what a load makes at offset d, the iteration before made at offset
  // d + 1 (d - 1 where flipped).
  const int64_t before = direction.flipped ? -1 : 1;
  std::set<std::pair<Instruction *, int64_t>> carried;
  for (Instruction &original : *s.body) {
    std::vector<int64_t> offsets;  // those of the iteration before's copies first
    for (auto it = loads.lower_bound({&original, INT64_MIN});
         it != loads.end() && it->first.first == &original; ++it)
      offsets.push_back(it->first.second);
    if (!direction.flipped) std::reverse(offsets.begin(), offsets.end());
    for (const int64_t offset : offsets) {
      const auto &copies = loads.at({&original, offset});
      auto source = loads.find({&original, offset + before});
      if (source == loads.end() || carried.count(source->first)) continue;
      std::vector<Instruction *> slice;
      std::set<PHINode *> phis;
      if (!slice_of(&original, s.body, slice, phis)) continue;
      if (std::any_of(phis.begin(), phis.end(), [&](PHINode *p) { return !f.phis.count(p); }))
        continue;
      llvm::IRBuilder<> b(low->getTerminator());
      llvm::Value *first = at.value(b, slice, &original, direction.first(b, offset));
      PHINode *phi = PHINode::Create(original.getType(), 2, original.getName() + ".carried",
                                     loop->getFirstNonPHI());
      phi->addIncoming(first, low);
      phi->addIncoming(source->second.front(), loop);
      for (Instruction *copy : copies) {  // (their addresses left to later passes)
        copy->replaceAllUsesWith(phi);
        copy->eraseFromParent();
      }
      carried.insert({&original, offset});
    }
  }
}

// The last iterations of each term whose entry the fused loop does not reach (a late
// term's last is the one before the loop's last).
void last_adds(llvm::IRBuilder<> &b, const Split &s, const Fusion &f, const AtIteration &at,
               llvm::Value *backedges) {
  for (const Term &term : f.terms)
    for (int64_t m = term.late; m < f.behind + term.shift; ++m)
      at.add(b, s, term, b.CreateSub(backedges, b.getInt64(m)));
}

}  // namespace

std::optional<Fusion> fusable(const Split &s, llvm::ScalarEvolution &se) {
  if (s.adds.size() > kMostAdds) return std::nullopt;
  const ReadAddWrite &first = s.adds.front();
  const llvm::APInt &stride =
      llvm::cast<llvm::SCEVConstant>(first.address->getStepRecurrence(se))->getAPInt();
  llvm::Type *value_type = first.store->getValueOperand()->getType();
  Fusion f;
  std::set<PHINode *> phis;
  for (size_t k = 0; k < s.adds.size(); ++k) {
    const ReadAddWrite &t = s.adds[k];
    // Every add on add 0's lattice of entries, a few steps from it.
    if (t.store->getValueOperand()->getType() != value_type) return std::nullopt;
    auto *apart = llvm::dyn_cast<llvm::SCEVConstant>(
        se.getMinusSCEV(t.address->getStart(), first.address->getStart()));
    if (!apart || apart->getAPInt().getBitWidth() != stride.getBitWidth() ||
        !apart->getAPInt().srem(stride).isZero())
      return std::nullopt;
    const llvm::APInt shift = apart->getAPInt().sdiv(stride);
    if (shift.sgt(kMostShift) || shift.slt(-kMostShift)) return std::nullopt;
    // Its terms and address computable at any iteration.
    for (Term &term : terms_of(s, k, shift.getSExtValue())) {
      if (!slice_of(term.root, s.body, term.slice, phis)) return std::nullopt;
      f.terms.push_back(std::move(term));
    }
    f.address_slice.emplace_back();
    if (!slice_of(t.store->getPointerOperand(), s.body, f.address_slice.back(), phis))
      return std::nullopt;
  }
  for (const Term &term : f.terms) {
    f.ahead = std::max(f.ahead, term.shift);
    f.behind = std::max(f.behind, term.late - term.shift);
  }
  if (f.ahead + f.behind > 2 * kMostShift) return std::nullopt;
  // The counters the slices read: integers or pointers, start + constant step per
  // iteration (a value carried otherwise, such as a recurrence, is not).
  for (PHINode *phi : phis) {
    std::optional<Affine> a = affine_phi(phi, s, se);
    if (!a) return std::nullopt;
    f.phis.emplace(phi, *a);
  }
  f.backedges = se.getBackedgeTakenCount(s.loop);
  if (llvm::isa<llvm::SCEVCouldNotCompute>(f.backedges) ||
      f.backedges->getType()->getIntegerBitWidth() > 64)
    return std::nullopt;
  return f;
}

FusedPath fused_path(const Split &s, const Fusion &f, const Rest *rest, llvm::Value *backedges,
                     BasicBlock *short_path, BasicBlock *join) {
  llvm::LLVMContext &context = s.body->getContext();
  llvm::Function *fn = s.body->getParent();
  const std::string name = s.body->getName().str();
  auto block = [&](const char *suffix) {
    return BasicBlock::Create(context, name + suffix, fn, short_path);
  };
  BasicBlock *guard = block(".scatter.guard");
  BasicBlock *low = block(".scatter.fused.low");
  BasicBlock *loop = block(".scatter.fused");
  BasicBlock *high = block(".scatter.fused.high");
  const AtIteration at(f, s.body);
  const int64_t ends = f.ahead + f.behind;

  llvm::IRBuilder<> b(guard);
  b.CreateCondBr(b.CreateICmpUGE(backedges, b.getInt64(ends + kFewestFused - 1)), low,
                 short_path);

  // The first iterations of each term whose entry the fused loop does not reach.
  b.SetInsertPoint(low);
  for (const Term &term : f.terms)
    for (int64_t t = 0; t < f.ahead - term.shift; ++t) at.add(b, s, term, b.getInt64(t));
  // With the rest's zeros, the last iterations' too (below), before the loop zeroes
  // what they read. Their entries are neither the loop's nor those above.
  if (rest) last_adds(b, s, f, at, backedges);
  llvm::Value *count = b.CreateAdd(b.CreateSub(backedges, b.getInt64(ends)), b.getInt64(1));
  const ReadAddWrite &reference = s.adds.front();
  const auto *stride = llvm::cast<llvm::SCEVConstant>(reference.address->getOperand(1));
  const Direction direction{stride->getAPInt().isNegative(),
                            b.CreateSub(count, b.getInt64(1), "scatter.last")};
  b.CreateBr(loop);

  // Entry `u` of add 0 (u from ahead on), every term's value for it.
  b.SetInsertPoint(loop);
  PHINode *w = b.CreatePHI(b.getInt64Ty(), 2, "scatter.w");
  w->addIncoming(b.getInt64(0), low);
  llvm::Value *u = direction.at(b, w);
  auto *flags = llvm::cast<Instruction>(reference.store->getValueOperand());
  // Terms at later iterations first, so that a load carried to the next iteration
  // (carry_loads) comes before the uses of the value it carries.
  std::vector<size_t> order(f.terms.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    return direction.flipped ? f.terms[i].shift > f.terms[j].shift
                             : f.terms[i].shift < f.terms[j].shift;
  });
  std::vector<llvm::Value *> values(f.terms.size());
  LoadCopies loads;
  for (size_t j : order) {
    const Term &term = f.terms[j];
    const int64_t offset = f.ahead - term.shift;
    std::map<Instruction *, Instruction *> clones;
    values[j] = at.value(b, term.slice, term.root, b.CreateAdd(u, b.getInt64(offset)), &clones);
    for (const auto &[original, copy] : clones)
      if (llvm::isa<llvm::LoadInst>(original)) loads[{original, offset}].push_back(copy);
  }
  llvm::Value *sum = nullptr;
  for (llvm::Value *v : values) sum = sum ? b.CreateFAddFMF(sum, v, flags) : v;
  llvm::Value *entry = at.value(b, f.address_slice[0], reference.store->getPointerOperand(),
                                b.CreateAdd(u, b.getInt64(f.ahead)));
  AtIteration::write(b, reference, entry, sum);
  // The rest's zeros of the original iteration this one read for the last time: the
  // loop reads iteration u + (ahead - shift) for each term, at this u and at u's after
  // it (before it where flipped).
  int64_t zeroed = 0;  // the offset of the iteration zeroed, from u
  if (rest) {
    int64_t least = INT64_MAX, most = INT64_MIN;
    for (const Term &term : f.terms) {
      least = std::min(least, f.ahead - term.shift);
      most = std::max(most, f.ahead - term.shift);
    }
    zeroed = direction.flipped ? most : least;
    llvm::Value *t = b.CreateAdd(u, b.getInt64(zeroed));
    for (size_t k = 0; k < rest->zeroes.size(); ++k) at.zero(b, *rest, k, t, true);
  }
  llvm::Value *next = b.CreateAdd(w, b.getInt64(1), "scatter.w.next");
  w->addIncoming(next, loop);
  llvm::BranchInst *latch = b.CreateCondBr(b.CreateICmpEQ(next, count), high, loop);
  // For fused_threads.h, which may run the loop's iterations on several threads.
  latch->setMetadata(kFusedLoopMark, llvm::MDNode::get(context, {}));
  carry_loads(s, f, at, loads, direction, low, loop);

  b.SetInsertPoint(high);
  if (!rest) {
    last_adds(b, s, f, at, backedges);
  } else {
    // The iterations the loop did not zero: [0, zeroed) and the last ends - zeroed
    // (the loop zeroed count = backedges + 1 - ends from `zeroed` on).
    for (int64_t t = 0; t < zeroed; ++t)
      for (size_t k = 0; k < rest->zeroes.size(); ++k) at.zero(b, *rest, k, b.getInt64(t), false);
    for (int64_t m = 0; m < ends - zeroed; ++m) {
      llvm::Value *t = b.CreateSub(backedges, b.getInt64(m));
      for (size_t k = 0; k < rest->zeroes.size(); ++k) at.zero(b, *rest, k, t, false);
    }
  }
  b.CreateBr(join);
  return FusedPath{guard, high};
}

}  // namespace enzyme_py::scatter
