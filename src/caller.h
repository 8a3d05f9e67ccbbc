// The fast call path of a derivative: Python arguments checked and packed into
// the entry point's slots, the call made without the GIL, results unpacked,
// all in C++ from a plan the Python side made once per derivative.
//
// The plan only accepts what it can check completely. Anything unexpected
// raises ArgumentsRejected, and the Python side redoes the call on its own
// path, which names the offending parameter in its error.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace enzyme_py {

struct ArgumentsRejected : std::runtime_error {
  ArgumentsRejected() : std::runtime_error("arguments rejected by the fast path") {}
};

// One Python argument, in calling order.
struct ArgStep {
  char kind;        // 's' scalar, 'a' array, 'h' shadow of the last array, 'l' lanes
  char code;        // slot code of the value ('d', 'f', 'q', 'i', 'h', 'b', '?', 'p')
  char dtype;       // for arrays: required NumPy dtype char, or 0 for any
  int lanes;        // shadows and lanes: the width
  bool self_shadow; // runtime activity: an array may be its own shadow
};

// How the output slots become the Python result.
struct ResultPlan {
  char shape;                   // 'r' reverse tuple, 'p' (y, dy), 't' dy, 'y' y, 'n' None
  int primal_fields;            // 0: no primal; 1: a scalar; n: a tuple of n
  std::vector<int> adjoints;    // reverse: lanes of each Active adjoint
  int tangent_fields;           // forward: values per lane of dy (0 if none)
  int tangent_lanes;
  bool tangent_struct;          // dy of a struct return: tuple / (k, fields) array
};

class Caller {
 public:
  Caller(uint64_t entry, std::string in_slots, std::string out_slots,
         std::vector<ArgStep> steps, ResultPlan result);
  pybind11::object call(pybind11::args args) const;

 private:
  pybind11::object slot_value(const uint64_t *slots, size_t index) const;

  void (*entry_)(void *);
  std::string in_slots_, out_slots_;
  std::vector<ArgStep> steps_;
  ResultPlan result_;
};

void register_caller(pybind11::module_ &m);

}  // namespace enzyme_py
