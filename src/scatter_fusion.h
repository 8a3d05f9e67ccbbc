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
// Internal to scatter_adds.cpp (the pass) and scatter_fusion.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <llvm/ADT/APInt.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/Analysis/ScalarEvolutionExpressions.h>
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

// The fused form of `s`'s adds, where it computes what they computed (above).
std::optional<Fusion> fusable(const Split &s, llvm::ScalarEvolution &se);

// The fused path, in new blocks: a guard that goes to `short_path` (an untouched copy
// of the loop) where the loop is too short, else the fused loop with its ends, then to
// `join`. `backedges` is the loop's backedge-taken count as an i64, computed before
// the loop. Returns the guard.
llvm::BasicBlock *fused_path(const Split &s, const Fusion &f, llvm::Value *backedges,
                             llvm::BasicBlock *short_path, llvm::BasicBlock *join);

}  // namespace enzyme_py::scatter
