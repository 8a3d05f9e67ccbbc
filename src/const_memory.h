// Const arrays that carry derivatives Enzyme would drop.
//
// Enzyme takes the memory of a Const pointer argument for constant: a value stored
// there and loaded back later has no derivative, whatever it was computed from.
// `s += x[i] * x[i]; out[i] = s` in one loop, then `np.sum(out * out)`, with `out`
// Const gives a zero gradient and a zero tangent, without an error. enzyme_py refuses
// such a request before Enzyme sees it (python/enzyme_py/_build.py), naming the
// array and saying to give it a shadow.
//
// What is asked of the IR Enzyme is given (after enzyme_py's own rewrites: a scratch
// array whose loads scratch_forwarding.h replaced by the values stored is read no
// more, and is right):
// - where pointers go: a unification points-to analysis (one class of memory per
//   set of pointers that may meet, each class with one class for the pointers stored
//   in it) over `function` and the functions it calls directly, through addresses,
//   phis, selects, loads and stores of pointers, memcpy and calls; and into callbacks
//   (a definition whose address is given to a function without a body: a prange
//   launch's chunk, an OpenMP region), each pointer parameter meeting every argument
//   of its type, with pointers passed as integers in slots at constant offsets (how
//   enzyme_py's launches give each chunk its arguments) followed slot by slot;
// - which values depend on a differentiated argument: its value, anything loaded
//   from the memory of a Duplicated argument or from memory such a value was stored
//   in, and anything computed from those (compares and branch conditions carry no
//   derivative); a call to a function without a body passes it on to its result and
//   to the memory of every pointer argument it may write;
// - a Const float parameter is reported when such a value is stored into its class,
//   a non-pointer value of 32 bits or more is loaded from it anywhere, and a value so
//   loaded may carry a derivative somewhere other than back into that class (a store
//   elsewhere, a return, a call): an array only accumulated into (`out[i] += x[i]`,
//   a histogram) is not reported, as nothing the results need is lost.
// Order is not considered otherwise: an array read before it is written and whose
// reads reach a result is reported even if no read sees a write; a refusal there
// costs a zero shadow, where missing the case costs a wrong derivative. Not seen: an array loaded only
// inside a function without a body; an array in one class with a shadowed one (an
// OpenMP region's arguments of one type meet), which is left to Enzyme's own
// refusal of mixed activity.
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// Indices of the parameters of `function` in `mod` whose activity (Enzyme's
// CDIFFE_TYPE, per parameter) is Const, that point at floats (`float_pointee`) and
// whose memory receives values depending on a differentiated argument and is read
// back. Throws std::invalid_argument where `function` is not defined in `mod` or the
// lists do not match its parameters.
std::vector<unsigned> const_params_carrying_derivatives(LLVMModuleRef mod,
                                                         const std::string &function,
                                                         const std::vector<int> &activities,
                                                         const std::vector<bool> &float_pointee);

}  // namespace enzyme_py
