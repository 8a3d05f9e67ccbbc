// The fused form of a reverse stencil loop that scatter_adds.cpp splits: one loop
// that gathers, for each entry of the shadow, every add's contribution to it.
//
// The split loops (one per add, scatter_adds.h) each read, add to and write back the
// whole shadow: K passes over it for K adds. Where each add's value is computed from
// the loop's counters (affine header phis), memory the loop does not write and
// values from before the loop, the value add k adds at iteration t can be computed at
// any other iteration just as well; add k at iteration t reaches the entry that add 0
// reaches at iteration t + shift[k] (their addresses a constant multiple of the step
// apart). So one loop over u adds into add 0's entry at u the values of add k at
// iterations u - shift[k], each entry read and written once. (A value carried from
// the iteration before in a phi, as Enzyme's reverse of a stencil carries the
// neighbour's adjoint, is that value computed one iteration earlier: a term of its
// own, `Term`.) The few iterations at
// either end whose entry that loop does not cover (at most the spread of the shifts
// per add) run as straight-line code before and after it. A loop too short to have
// such a middle runs as written (an untouched copy of it). A load the fused loop makes for two
// terms one iteration apart is made once, the other copy carried in a phi from the
// iteration before (a first-order recurrence the loop vectoriser takes).
//
// What the loop does besides its adds, its rest, runs after them as a loop of its own
// (heat's: Enzyme zeroing each entry of the other shadow after reading it, 20% of the
// gradient in a pass of its own over the shadow) unless it joins the fused path
// (scatter_rest.cpp): where it stores only zeros, at an affine address each
// iteration, and what it leaves for after the loop is its last iteration's values,
// those values are computed first (the loads the rest makes read what they read in
// the loop: no other iteration and no add writes their bytes), the adds of the last
// iterations run before the fused loop too, and the fused loop zeroes, each iteration,
// the entry of the original iteration it has just read for the last time; the few
// entries left are zeroed after it.
//
// Internal to scatter_adds.cpp (the pass), scatter_fusion.cpp and scatter_rest.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <llvm/ADT/APInt.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>

namespace enzyme_py::scatter {

// `*p = *p + v1 + v2 + ...` in one block: the stored value a tree of reassociable
// fadds, each used once, with the load of the same address as one of its leaves
// (used once too), the address affine in the loop with a constant non-zero step (each
// iteration its own entry). `added`: the other leaves.
struct ReadAddWrite {
  llvm::LoadInst *load;
  llvm::StoreInst *store;
  const llvm::SCEVAddRecExpr *address;
  std::vector<llvm::Value *> added;
};

struct Split {
  llvm::Loop *loop;
  llvm::BasicBlock *body;     // the loop's only block
  llvm::BasicBlock *outside;  // its only predecessor outside the loop
  llvm::BasicBlock *exit;
  std::vector<ReadAddWrite> adds;
  // Accesses alias analysis cannot tell apart from the shadow's: checked at run
  // time (their address ranges over the loop against the shadow's).
  std::vector<llvm::Instruction *> unproven;
};

// A header phi's value at iteration t: start + step * t (bytes for a pointer).
struct Affine {
  llvm::Value *start;
  llvm::APInt step;
};

// What one add adds at iteration t: `root` computed at iteration t. An add whose value
// is `r + p`, p a float phi carrying x from the iteration before (0 before the first),
// adds two terms: r at t, and x at t - 1 (`late` = 1) into that add's entry at t.
struct Term {
  size_t add;
  llvm::Value *root;
  int64_t shift;  // lands in the entry add 0 reaches at iteration t + shift
  int64_t late;   // 1: computed at iteration t, added by the add at t + 1
  std::vector<llvm::Instruction *> slice;  // the loop's instructions root needs
};

struct Fusion {
  std::vector<Term> terms;
  std::vector<std::vector<llvm::Instruction *>> address_slice;  // per add
  int64_t ahead = 0;   // the largest shift (0 or more)
  int64_t behind = 0;  // the largest late - shift (0 or more)
  std::map<llvm::PHINode *, Affine> phis;  // the header phis the slices read
  const llvm::SCEV *backedges = nullptr;   // the loop's backedge-taken count
};

// The rest's stores the fused path takes (zeros, one entry an iteration), with the
// loop's instructions each one's address needs.
struct Rest {
  std::vector<llvm::StoreInst *> zeroes;
  std::vector<std::vector<llvm::Instruction *>> slices;
};

// Header phi `phi` of `s`'s loop as start + constant step per iteration, where it is.
std::optional<Affine> affine_phi(llvm::PHINode *phi, const Split &s, llvm::ScalarEvolution &se);

// A header phi's value at iteration t (an i64), computed at b.
llvm::Value *affine_at(llvm::IRBuilder<> &b, llvm::PHINode *phi, const Affine &a, llvm::Value *t);

// The instructions of `body` that `root` needs, in block order, into `slice`; the
// header phis it reads into `phis`. False where one of them may not run at another
// iteration than its own (anything that writes memory or has side effects).
bool slice_of(llvm::Value *root, llvm::BasicBlock *body, std::vector<llvm::Instruction *> &slice,
              std::set<llvm::PHINode *> &phis);

// The fused form of `s`'s adds, where it computes what they computed (above).
std::optional<Fusion> fusable(const Split &s, llvm::ScalarEvolution &se);

// The rest of `s`'s loop as the fused path takes it (above), where it has zeros to
// store and can; the counters it reads are added to `f.phis`.
std::optional<Rest> rest_of(const Split &s, Fusion &f, llvm::ScalarEvolution &se);

// The instructions of the loop's block used after it, stores aside.
std::vector<llvm::Instruction *> used_after(llvm::BasicBlock *body);

// Deletes the instructions of `block` that nothing in `roots` needs (through operands
// within the block, phis included).
void keep_only(llvm::BasicBlock *block, const std::vector<llvm::Instruction *> &roots);

// Enzyme's sums of what the last iteration adds (scatter_rest.cpp): `phi` carries
// nothing from one iteration to the next, its value is its first.
bool settled_sum(llvm::PHINode &phi, llvm::BasicBlock *body);
// Makes each such phi of `body` carry nothing.
void settle_sums_of_the_last_iteration(llvm::BasicBlock *body);

// Makes the loop's block compute once, straight through to `next`, the values its last
// iteration leaves for after the loop, and nothing else (its stores gone). For a
// `rest_of` rest; `backedges` computed before the loop.
void last_iteration_only(const Split &s, const Fusion &f, llvm::Value *backedges,
                         llvm::BasicBlock *next);

// The fused path, in new blocks: a guard that goes to `short_path` (an untouched copy
// of the loop) where the loop is too short, else the fused loop with its ends (and
// `rest`'s zeros, where given), then to `join`. `backedges` is the loop's
// backedge-taken count as an i64, computed before the loop.
struct FusedPath {
  llvm::BasicBlock *guard;
  llvm::BasicBlock *end;  // the block that goes on to `join`
};
FusedPath fused_path(const Split &s, const Fusion &f, const Rest *rest, llvm::Value *backedges,
                     llvm::BasicBlock *short_path, llvm::BasicBlock *join);

}  // namespace enzyme_py::scatter
