"""The LLVM pipeline that optimises a derivative after Enzyme (``_build.PASSES``).

LLVM 15's ``default<O2>``, spelled out (``opt-15 -passes='default<O2>'
-print-pipeline-passes``, the leading and trailing ``verify`` left out) with two
changes to where loads are carried across loop iterations (GVN's load PRE):

- the function simplification's GVN runs without load PRE. With it, a stencil that
  reads ``a[i-1], a[i], a[i+1]`` (the heat kernel's forward pass inside its
  derivative) carries two of the three loads from iteration to iteration: a
  second-order recurrence, which LLVM 15's loop vectoriser refuses ("value that could
  not be identified as reduction is used outside the loop"), so the loop stayed
  scalar (enzyme_py's rewrites before Enzyme already carry one of them);
- a GVN with load PRE runs after the loop vectoriser (beside ``loop-load-elim``) and
  before the SLP vectoriser. Without any load PRE, a reverse loop adding into
  ``grad[i]`` and ``grad[i+1]`` (Rosenbrock's) reloads what the iteration before
  stored, and the SLP vectoriser pairs those loads and stores into overlapping
  two-element vectors that the CPU cannot forward: 16 ms instead of 1.4 ms for
  n = 10^6. Carried in a register instead, as ``default<O2>`` does.

Heat 1000 x 1000: reverse / primal 8.8 -> 6.2 on a 2-core AMD EPYC (its forward
stencil vectorised again, 4 of the derivative's loops as at commit 7619c85, 3 with
``default<O2>`` after the rewrites before Enzyme lost their load PRE).

Then a second pipeline (after ``|``, run by ``src/jit.cpp``): the loop vectoriser again,
with LLVM's store-to-load forwarding heuristic off (``src/llvm_options.cpp``). By then
the load PRE has carried a reverse loop's neighbour in a register (Rosenbrock's
``grad[i+1]``), and only that heuristic refused the loop: a cost rule, not a legality
rule, which misreads loops that run downwards. Rosenbrock 10^6 gradient / primal
1.2-1.9 -> 0.44-0.65 on the 2-core AMD EPYC (load 2-5); heat's and GMM's derivatives
vectorise the same loops as before.

The first pipeline does not unroll loops by a run-time count (``loop-unroll<O2;
no-runtime>``); the second does, after its vectoriser. Where LLVM tunes for a named
CPU that unrolls so (an Intel Rocket Lake: a prologue loop and an unrolled body), the
unrolled reverse loop was no longer one the second vectoriser takes ("value that could
not be identified as reduction is used outside the loop"), and Rosenbrock's reverse
loop stayed scalar there; for "generic" hosts (the AMD EPYC above) nothing changes.
The second's run-time unrolling takes only the loops its vectoriser left scalar
(``enzyme-py-keep-vector-loops-rolled``, ``src/unroll_hints.h``, right before it):
unrolling the vector bodies again sped no suite kernel up and cost heat's first call
about 20 ms (its module 60% larger).

After the first loop vectoriser and before the SLP vectoriser, enzyme_py's own pass
``enzyme-py-split-scatter-adds`` (``src/scatter_adds.h``, registered by name in
``src/jit.cpp``): a reverse stencil loop adds into neighbouring entries of one shadow
(heat's ``da[i-1]``, ``da[i]``, ``da[i+1]``), each iteration reading what the one
before stored, which no vectoriser takes; their adds commute, so the loop is split into
one loop per add (each touching every entry once) and the rest, and the second
pipeline's vectoriser takes each. Heat 1000 x 1000 on the 2-core AMD EPYC: reverse
1.06-1.2 ms -> 0.65-0.79 ms (5.9-6.1x -> 2.9-3.7x its primal, two suite runs); the C and
Cython heat derivatives too (1.15 -> 0.69-0.75 ms, 1.52 -> 0.64-0.81 ms). Where each
add's value can be computed at any iteration, the same pass makes one loop that gathers
every add's value into each entry instead (``src/scatter_fusion.h``): one pass over the
shadow, not one per add (Rosenbrock prange's reverse chunks on two threads 185-197 ->
110-127 us; heat 3-4% faster). The pass runs right after the first vectoriser, before
loop-load elimination and the GVN with load PRE: these would otherwise carry serial
Rosenbrock's ``grad[i+1]`` from one iteration to the next first (a loop that then stores
every entry twice), which the pass does not take. Once the fused loop carried its own
loads (one load of ``x`` fewer per vector), that order won on the same source (A/B in
one process, 2-core AMD EPYC): ``ez.grad`` of serial Rosenbrock 257-265 -> 243-244 us,
the C one into a reused gradient 200-204 -> 181-185 us, Rosenbrock prange 173-202 ->
161-162 us; serial Rosenbrock into a reused gradient 186-189 -> 191-193 us, heat equal.

Part of the derivative cache's key (``_build.environment_parts``).
"""

from __future__ import annotations

_LLVM15_O2 = (
    "annotation2metadata,forceattrs,inferattrs,coro-early,function<eager-inv>(lower-expect,"
    "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;no-switch-range-to-icmp;"
    "no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts>,sroa,"
    "early-cse<>),openmp-opt,ipsccp,called-value-propagation,globalopt,function(mem2reg),"
    "deadargelim,function<eager-inv>(instcombine,simplifycfg<bonus-inst-threshold=1;"
    "no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;"
    "no-hoist-common-insts;no-sink-common-insts>),require<globals-aa>,"
    "function(invalidate<aa>),require<profile-summary>,"
    "cgscc(devirt<4>(inline<only-mandatory>,inline,function-attrs,openmp-opt-cgscc,"
    "function<eager-inv>(sroa,early-cse<memssa>,speculative-execution,jump-threading,"
    "correlated-propagation,simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;"
    "switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;"
    "no-sink-common-insts>,instcombine,libcalls-shrinkwrap,tailcallelim,"
    "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"
    "no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts>,"
    "reassociate,require<opt-remark-emit>,loop-mssa(loop-instsimplify,loop-simplifycfg,"
    "licm<no-allowspeculation>,loop-rotate,licm<allowspeculation>,"
    "simple-loop-unswitch<no-nontrivial;trivial>),simplifycfg<bonus-inst-threshold=1;"
    "no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;"
    "no-hoist-common-insts;no-sink-common-insts>,instcombine,loop(loop-idiom,indvars,"
    "loop-deletion,loop-unroll-full),sroa,mldst-motion<no-split-footer-bb>,gvn<>,sccp,bdce,"
    "instcombine,jump-threading,correlated-propagation,adce,memcpyopt,dse,"
    "loop-mssa(licm<allowspeculation>),coro-elide,simplifycfg<bonus-inst-threshold=1;"
    "no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;"
    "hoist-common-insts;sink-common-insts>,instcombine),coro-split)),coro-cleanup,"
    "globalopt,globaldce,elim-avail-extern,rpo-function-attrs,recompute-globalsaa,"
    "function<eager-inv>(float2int,lower-constant-intrinsics,loop(loop-rotate,"
    "loop-deletion),loop-distribute,inject-tli-mappings,"
    "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>,loop-load-elim,"
    "instcombine,simplifycfg<bonus-inst-threshold=1;forward-switch-cond;"
    "switch-range-to-icmp;switch-to-lookup;no-keep-loops;hoist-common-insts;"
    "sink-common-insts>,slp-vectorizer,vector-combine,instcombine,loop-unroll<O2>,"
    "transform-warning,instcombine,require<opt-remark-emit>,"
    "loop-mssa(licm<allowspeculation>),alignment-from-assumptions,loop-sink,instsimplify,"
    "div-rem-pairs,tailcallelim,simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;"
    "switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;"
    "no-sink-common-insts>),globaldce,constmerge,cg-profile,rel-lookup-table-converter,"
    "function(annotation-remarks)"
)

# After the first pipeline (its load PRE has carried Rosenbrock's grad[i+1] in a
# register), the loop vectoriser again, with LLVM's store-to-load forwarding heuristic
# off ("|", src/jit.cpp), then the runtime unrolling the first pipeline left out; then
# the clean-up default<O2> runs after it.
_SECOND = (
    "function(loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>,"
    "loop-load-elim,instcombine,loop-unroll<O2>,simplifycfg<bonus-inst-threshold=1;forward-switch-cond;"
    "switch-range-to-icmp;switch-to-lookup;no-keep-loops;hoist-common-insts;"
    "sink-common-insts>,instcombine,loop-mssa(licm<allowspeculation>),instsimplify,"
    "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"
    "no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts>)"
)

# src/unroll_hints.h: loops the vectoriser made or visited, loops that make calls (libm's
# too), and the loops around them, are not unrolled again by a run-time count (the
# second pipeline's loop-unroll, right after it, unrolls the other loops left scalar
# only). Heat's module 1716 -> 1064 lines, its first call 117 -> 99 ms; C++ GMM's
# gradient on a Zen 3 host 50 -> 28 ms; GMM prange's module 6970 -> 5659 lines.
KEEP_VECTOR_LOOPS_ROLLED = "enzyme-py-keep-vector-loops-rolled"

# src/scatter_adds.h: reverse stencil loops the loop vectoriser refused, split into
# loops it takes (in the second pipeline), before the SLP vectoriser pairs their adds.
SPLIT_SCATTER_ADDS = "enzyme-py-split-scatter-adds"

# src/shadow_zeroing.h: a shadow the derivative zeroes itself (a helper's fresh one)
# zeroed only where its loops do not write it, its loads of those zeros folded. Right
# after the scatter pass, whose fused loop it then finds as written, before the
# second vectoriser takes that loop.
SINK_SHADOW_ZEROING = "enzyme-py-sink-shadow-zeroing"

# src/fused_threads.h: each fused loop (src/scatter_fusion.h) in a function of its own,
# called through the CPU thread pool, which runs its iterations on every core where
# there are enough of them. After the shadow-zeroing pass, which finds the fused loop
# as written; the new function gets the function passes after it, vectorisers included.
THREAD_FUSED_LOOPS = "enzyme-py-thread-fused-loops"

# src/wide_vectors.h: streaming loops (innermost, short, no reduction, no calls) get
# the loop vectoriser's width hint for 512-bit vectors, where the host has AVX-512 and
# keeps its clock with it (nothing changes elsewhere). Before the second loop
# vectoriser only, the first the scatter pass's loops meet (heat's fused gather, which
# also zeroes the adjoint it consumed): widening Numba's own loops too (before the
# first) cost GMM prange's gradient 4-10%.
WIDEN_STREAMING_LOOPS = "enzyme-py-widen-streaming-loops"

# src/index_signs.h: Numba's negative-index tests of indices proven non-negative,
# folded. It runs before Enzyme, in the simplification of Numba's code (kSimplifyPasses
# in src/numba_rewrites.cpp); named here for tests that run it alone.
FOLD_INDEX_SIGNS = "enzyme-py-fold-index-signs"

_VECTORIZE = "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>"

# src/tape_scopes.h: Enzyme's cache loads in a combined reverse derivative scoped apart
# from the stores that cannot write the tape, so that LICM hoists them out of the
# loops (a stencil's temporaries swapped each step: their shadows reloaded from the
# cache at every iteration hid the reverse loop from the scatter pass). After the
# first SROA and early CSE, which make the cache pointers values.
SCOPE_TAPE_LOADS = "enzyme-py-scope-tape-loads"

# src/unread_stores.h: stores into fresh memory (an allocator's noalias result) that
# nothing reads, dropped: a prange reduction's sum that ez.grad does not want, stored
# by Numba into an array of its own, kept a whole forward loop alive in the combined
# derivative of a serial twin. In the function simplification, before ADCE, which
# then drops the loop's work (loop deletion, after the CGSCC pipeline, the loop).
DROP_UNREAD_STORES = "enzyme-py-drop-unread-stores"

PASSES = (
    _LLVM15_O2.replace(",sroa,early-cse<>),", f",sroa,early-cse<>,{SCOPE_TAPE_LOADS}),", 1)
    .replace(
        ",correlated-propagation,adce,", f",correlated-propagation,{DROP_UNREAD_STORES},adce,", 1
    )
    .replace(",gvn<>,", ",gvn<no-load-pre>,")
    .replace(
        ",loop-load-elim,",
        f",{SPLIT_SCATTER_ADDS},{SINK_SHADOW_ZEROING},{THREAD_FUSED_LOOPS},loop-load-elim,gvn<>,",
    )
    .replace(",loop-unroll<O2>,", ",loop-unroll<O2;no-runtime>,")
    + "|"
    + _SECOND.replace(
        f"function({_VECTORIZE},", f"function({WIDEN_STREAMING_LOOPS},{_VECTORIZE},"
    ).replace(",loop-unroll<O2>,", f",{KEEP_VECTOR_LOOPS_ROLLED},loop-unroll<O2>,")
)
