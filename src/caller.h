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

// The called code reported an error through its `errors` parameter
// (status, detail); Python turns it into the frontend's exception.
struct CalleeFailed : std::runtime_error {
  CalleeFailed(int64_t status, int64_t detail)
      : std::runtime_error(std::to_string(status) + " " + std::to_string(detail)) {}
};

// An allocation inside the called code failed (see call_entry in arena.h);
// a MemoryError in Python.
struct OutOfMemory : std::runtime_error {
  explicit OutOfMemory(size_t bytes)
      : std::runtime_error("could not allocate " + std::to_string(bytes) +
                           " bytes (a temporary array, its shadow or Enzyme's tape)") {}
};

// What call_entry's result means for a Python caller: nothing (0), the exception a
// prange loop's chunk raised (CalleeFailed, from arena.h's kLoopFailed), or a failed
// allocation (OutOfMemory).
void throw_if_failed(size_t failed_bytes);

// What one ArgStep fills (python/enzyme_py/_convention.py: StepKind).
namespace step {
constexpr char kScalar = 's';  // a scalar argument
constexpr char kArray = 'a';   // an array argument: its data pointer
constexpr char kShadow = 'h';  // the shadow of the last array: one pointer per lane
constexpr char kLanes = 'l';   // a tangent or seed: one scalar per lane
constexpr char kShape = 'S';   // a dimension of an earlier array argument (hidden)
constexpr char kStride = 'T';  // a stride (bytes) of an earlier array argument (hidden)
constexpr char kErrors = 'E';  // the callee's errors buffer (hidden)
constexpr char kBytes = 'B';   // the byte size of an earlier array argument (hidden): of
                               // the shadow a derivative zeroes itself (shadow_zeroing.h)
}  // namespace step

// How the output slots become the result (_convention.py: ResultShape).
namespace result_shape {
constexpr char kReverse = 'r';  // (primal, *adjoints)
constexpr char kPair = 'p';     // (y, dy)
constexpr char kTangent = 't';  // dy
constexpr char kPrimal = 'y';   // y
constexpr char kNothing = 'n';  // None
}  // namespace result_shape

// One parameter of the entry point, in order (the plan of
// _convention.plan_call). Most take the next Python argument; kShape, kStride,
// kBytes and kErrors fill hidden parameters without one.
struct ArgStep {
  char kind;        // a step:: kind
  char code;        // slot code of the value (slot:: in entry_abi.h)
  char dtype;       // for arrays: required NumPy dtype char, or 0 for any
  int lanes;        // shadows and lanes: the width; kShape, kStride: the dimension
  bool self_shadow; // runtime activity: an array may be its own shadow
  int source;       // kShape, kStride, kBytes: index of the Python argument holding the array;
                    // kArray: the array whose shape and strides it is indexed with
                    // (a derivative's shadow parameter, Param.layout_of), or -1
  bool strided = false;   // kArray: takes arrays of any strides (Param.strided)
  bool readonly = false;  // kArray: takes read-only arrays (Param.readonly)
};

// How the output slots become the Python result.
struct ResultPlan {
  char shape;                   // a result_shape:: kind
  int primal_fields;            // 0: no primal; 1: a scalar; n: a tuple of n
  std::vector<int> adjoints;    // reverse: lanes of each Active adjoint
  int tangent_fields;           // forward: values per lane of dy (0 if none)
  int tangent_lanes;
  bool tangent_struct;          // dy of a struct return: tuple / (k, fields) array
};

class Caller {
 public:
  // `disjoint`: the code was built assuming its arrays do not overlap; calls
  // whose arrays do are rejected (the Python side then uses a safe build).
  Caller(uint64_t entry, std::string in_slots, std::string out_slots,
         std::vector<ArgStep> steps, ResultPlan result, bool disjoint);
  pybind11::object call(pybind11::args args) const;

 private:
  pybind11::object slot_value(const uint64_t *slots, size_t index) const;

  void (*entry_)(void *);
  size_t arity_;  // Python arguments taken
  bool disjoint_;
  std::string in_slots_, out_slots_;
  std::vector<ArgStep> steps_;
  std::vector<int> ranks_;  // per Python argument: its hidden dimensions ('S' steps)
  ResultPlan result_;
};

void register_caller(pybind11::module_ &m);

}  // namespace enzyme_py
