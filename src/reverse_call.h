// A helper's call of a reverse derivative (ez.grad, ez.value_and_grad) in C++, for
// arguments of the kinds its plan was made for (python/enzyme_py/_reverse_plan.py):
// the kinds checked, fresh zeroed shadows made and put after their arrays, the seed
// appended, the derivative's Caller called, the gradients picked out of the shadows
// and the adjoints. What the Python plan does per call, without its ~3-4 us of
// Python on small arrays.
//
// Any call it does not cover (other kinds of arguments, a shadow large enough that
// the Python side takes it from its pool or zeroes it on threads) raises
// ArgumentsRejected, and the Python side takes its own path.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "caller.h"

namespace enzyme_py {

// What one argument must be (_reverse_plan.plan_key): an exact np.ndarray of this
// dtype number, rank and layout flags, or an object of exactly this type.
struct ArgKind {
  pybind11::object type;  // the scalar's type; None for an array
  int dtype_num = 0;
  int ndim = 0;
  bool c_contiguous = false, f_contiguous = false, writeable = false;
};

// One gradient the call returns: the shadow made for argument `index` (shadow), or
// the derivative's adjoint number `index` (its result's item 1 + index).
struct GradientPick {
  bool shadow;
  int index;
};

class ReverseCall {
 public:
  ReverseCall(pybind11::object caller, std::vector<ArgKind> kinds, std::vector<bool> shadowed,
              std::vector<GradientPick> picks, bool single, bool with_value,
              pybind11::object seed, int64_t shadow_bytes_below);
  pybind11::object call(pybind11::args args) const;

 private:
  pybind11::object caller_object_;  // keeps caller_ alive
  const Caller *caller_;
  std::vector<ArgKind> kinds_;
  std::vector<bool> shadowed_;
  size_t shadows_;
  std::vector<GradientPick> picks_;
  bool single_, with_value_;
  pybind11::object seed_;
  int64_t shadow_bytes_below_;
};

void register_reverse_call(pybind11::module_ &m);

}  // namespace enzyme_py
