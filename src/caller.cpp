#include "caller.h"

#include "arena.h"
#include "entry_abi.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace enzyme_py {
namespace {

void put(uint64_t *slot, char code, double f, long long i) {
  switch (code) {
    case slot::kDouble: std::memcpy(slot, &f, sizeof f); break;
    case slot::kFloat: { float v = static_cast<float>(f); std::memcpy(slot, &v, sizeof v); break; }
    case slot::kI64: { int64_t v = i; std::memcpy(slot, &v, sizeof v); break; }
    case slot::kI32: { int32_t v = static_cast<int32_t>(i); std::memcpy(slot, &v, sizeof v); break; }
    case slot::kI16: { int16_t v = static_cast<int16_t>(i); std::memcpy(slot, &v, sizeof v); break; }
    case slot::kI8: { int8_t v = static_cast<int8_t>(i); std::memcpy(slot, &v, sizeof v); break; }
    case slot::kBool: { uint8_t v = i != 0; std::memcpy(slot, &v, sizeof v); break; }
    default: throw ArgumentsRejected();
  }
}

// NumPy's real scalar types (np.floating, np.integer, np.bool_), kept for the
// process (a new reference, never released: the module outlives calls).
PyObject *numpy_real_scalar_types() {
  static PyObject *types = []() -> PyObject * {
    py::module_ np = py::module_::import("numpy");
    return py::make_tuple(np.attr("floating"), np.attr("integer"), np.attr("bool_"))
        .release()
        .ptr();
  }();
  return types;
}

double as_float(PyObject *obj) {
  // Real numbers only: arrays and sequences are not scalars, even of size 1, and
  // complex numbers (NumPy's convert with a warning, dropping the imaginary part)
  // and strings are refused, so that the checked path says what is wrong.
  if (PyFloat_CheckExact(obj)) return PyFloat_AS_DOUBLE(obj);
  if (!PyFloat_Check(obj) && !PyLong_Check(obj)) {
    int real = PyObject_IsInstance(obj, numpy_real_scalar_types());
    if (real != 1) {
      if (real < 0) PyErr_Clear();
      throw ArgumentsRejected();
    }
  }
  double v = PyFloat_AsDouble(obj);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw ArgumentsRejected();
  }
  return v;
}

long long as_int(PyObject *obj, char code) {
  PyObject *index = PyNumber_Index(obj);
  if (!index) {
    PyErr_Clear();
    throw ArgumentsRejected();
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw ArgumentsRejected();
  }
  long long lo = std::numeric_limits<long long>::min(), hi = std::numeric_limits<long long>::max();
  switch (code) {
    case slot::kI32: lo = INT32_MIN; hi = INT32_MAX; break;
    case slot::kI16: lo = INT16_MIN; hi = INT16_MAX; break;
    case slot::kI8: lo = INT8_MIN; hi = INT8_MAX; break;
    case slot::kBool: return v != 0;
    default: break;
  }
  if (v < lo || v > hi) throw ArgumentsRejected();
  return v;
}

// The bytes an array's elements span: from its lowest element to the end of its
// highest (below the data pointer along negative strides, gaps included); 0 when
// it has no elements.
void byte_span(const py::array &a, uint64_t &begin, uint64_t &bytes) {
  int64_t low = 0, high = 0;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.shape(d) == 0) {
      begin = reinterpret_cast<uint64_t>(a.data());
      bytes = 0;
      return;
    }
    const int64_t extent = static_cast<int64_t>(a.shape(d) - 1) * a.strides(d);
    (extent < 0 ? low : high) += extent;
  }
  begin = reinterpret_cast<uint64_t>(a.data()) + low;
  bytes = static_cast<uint64_t>(high - low + a.itemsize());
}

// Whether two elements of `a` may share memory, as _arguments.overlaps_itself:
// with the axes of more than one element taken from the smallest stride up, each
// stride must step over everything the smaller ones span.
bool overlaps_itself(const py::array &a) {
  std::vector<std::pair<int64_t, int64_t>> axes;  // (|stride|, extent)
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.shape(d) > 1) axes.emplace_back(std::llabs(a.strides(d)), a.shape(d));
  }
  std::sort(axes.begin(), axes.end());
  int64_t span = a.itemsize();
  for (const auto &[stride, n] : axes) {
    if (stride < span) return true;
    span += stride * (n - 1);
  }
  return false;
}

bool native_order(const py::dtype &dt) {
  char order = dt.byteorder();
  return order == '=' || order == '|' || order == '<';
}

py::object scalar_object(char code, const uint64_t *slot) {
  switch (code) {
    case slot::kDouble: { double v; std::memcpy(&v, slot, sizeof v); return py::float_(v); }
    case slot::kFloat: { float v; std::memcpy(&v, slot, sizeof v); return py::float_(v); }
    case slot::kI64: { int64_t v; std::memcpy(&v, slot, sizeof v); return py::int_(v); }
    case slot::kI32: { int32_t v; std::memcpy(&v, slot, sizeof v); return py::int_(v); }
    case slot::kI16: { int16_t v; std::memcpy(&v, slot, sizeof v); return py::int_(v); }
    case slot::kI8: { int8_t v; std::memcpy(&v, slot, sizeof v); return py::int_(v); }
    case slot::kBool: { uint8_t v; std::memcpy(&v, slot, sizeof v); return py::bool_(v != 0); }
    default: break;
  }
  uint64_t v;
  std::memcpy(&v, slot, sizeof v);
  return py::int_(v);
}

// k float values from consecutive slots, as a NumPy array of the slot type.
py::array float_array(char code, const uint64_t *slots, std::vector<py::ssize_t> shape) {
  py::ssize_t count = 1;
  for (auto d : shape) count *= d;
  if (code == slot::kFloat) {
    py::array_t<float> out(shape);
    float *dst = out.mutable_data();
    for (py::ssize_t i = 0; i < count; ++i) std::memcpy(dst + i, slots + i, sizeof(float));
    return std::move(out);
  }
  py::array_t<double> out(shape);
  double *dst = out.mutable_data();
  for (py::ssize_t i = 0; i < count; ++i) std::memcpy(dst + i, slots + i, sizeof(double));
  return std::move(out);
}

}  // namespace

Caller::Caller(uint64_t entry, std::string in_slots, std::string out_slots,
               std::vector<ArgStep> steps, ResultPlan result, bool disjoint)
    : entry_(reinterpret_cast<void (*)(void *)>(entry)),
      in_slots_(std::move(in_slots)),
      out_slots_(std::move(out_slots)),
      steps_(std::move(steps)),
      result_(std::move(result)) {
  disjoint_ = disjoint;
  arity_ = 0;
  for (const ArgStep &step : steps_) {
    arity_ += step.kind != step::kShape && step.kind != step::kStride &&
              step.kind != step::kErrors && step.kind != step::kBytes;
    // An array's rank is the number of its hidden dimensions (frontends pass all).
    if (step.kind == step::kShape) {
      if (ranks_.size() <= static_cast<size_t>(step.source)) ranks_.resize(step.source + 1, 0);
      ++ranks_[step.source];
    }
  }
}

py::object Caller::slot_value(const uint64_t *slots, size_t index) const {
  return scalar_object(out_slots_[index], slots + in_slots_.size() + index);
}

py::object Caller::call(py::args args) const {
  if (args.size() != arity_) throw ArgumentsRejected();
  int64_t errors[2] = {0, 0};
  const size_t n_slots = in_slots_.size() + out_slots_.size();
  uint64_t small[32];
  std::vector<uint64_t> large;
  uint64_t *slots = small;
  if (n_slots > 32) {
    large.assign(n_slots, 0);
    slots = large.data();
  } else {
    std::memset(small, 0, sizeof small);
  }

  size_t s = 0;  // next input slot
  PyObject *last_array_obj = nullptr;
  py::array last_array;
  // Byte ranges of the arrays passed, for the disjointness promise.
  uint64_t ranges[64][2];
  size_t n_ranges = 0;
  auto note_range = [&](uint64_t begin, uint64_t bytes) {
    if (!disjoint_ || bytes == 0) return;
    if (n_ranges == 64) throw ArgumentsRejected();
    ranges[n_ranges][0] = begin;
    ranges[n_ranges][1] = begin + bytes;
    ++n_ranges;
  };
  size_t next_arg = 0;
  for (const ArgStep &step : steps_) {
    if (step.kind == step::kShape || step.kind == step::kStride) {
      PyObject *source = args[step.source].ptr();
      if (!py::isinstance<py::array>(source)) throw ArgumentsRejected();
      auto a = py::reinterpret_borrow<py::array>(source);
      if (a.ndim() != ranks_[step.source]) throw ArgumentsRejected();
      const py::ssize_t value =
          step.kind == step::kShape ? a.shape(step.lanes) : a.strides(step.lanes);
      put(slots + s++, step.code, 0, static_cast<long long>(value));
      continue;
    }
    if (step.kind == step::kBytes) {
      PyObject *source = args[step.source].ptr();
      if (!py::isinstance<py::array>(source)) throw ArgumentsRejected();
      const auto a = py::reinterpret_borrow<py::array>(source);
      put(slots + s++, step.code, 0, static_cast<long long>(a.nbytes()));
      continue;
    }
    if (step.kind == step::kErrors) {
      uint64_t p = reinterpret_cast<uint64_t>(&errors[0]);
      std::memcpy(slots + s++, &p, sizeof p);
      continue;
    }
    PyObject *obj = args[next_arg++].ptr();
    switch (step.kind) {
      case step::kScalar:
        if (step.code == slot::kDouble || step.code == slot::kFloat) {
          put(slots + s++, step.code, as_float(obj), 0);
        } else {
          put(slots + s++, step.code, 0, as_int(obj, step.code));
        }
        break;
      case step::kArray: {
        if (!py::isinstance<py::array>(obj)) throw ArgumentsRejected();
        auto a = py::reinterpret_borrow<py::array>(obj);
        if (step.dtype && (a.dtype().char_() != step.dtype || !native_order(a.dtype()))) {
          throw ArgumentsRejected();
        }
        const bool contiguous = (a.flags() & py::array::c_style) != 0;
        // Views of any strides (their strides are hidden parameters) and read-only
        // arrays where the parameter takes them, as the checked path does.
        if (!contiguous && !(step.strided && step.source < 0)) throw ArgumentsRejected();
        // Elements sharing memory (a stride of 0): the checked path copies or refuses
        // such an array where it has a shadow (_arguments.apart).
        if (!contiguous && overlaps_itself(a)) throw ArgumentsRejected();
        if (!a.writeable() && !step.readonly) throw ArgumentsRejected();
        if (step.source >= 0) {
          // A derivative's shadow parameter, indexed with the shape and strides of
          // the (earlier, already checked) array `source`: both C-contiguous here,
          // so the same shape and itemsize give the same element offsets.
          auto like = py::reinterpret_borrow<py::array>(args[step.source].ptr());
          if (like.ndim() != a.ndim() || like.itemsize() != a.itemsize() ||
              !(like.flags() & py::array::c_style)) {
            throw ArgumentsRejected();
          }
          for (py::ssize_t d = 0; d < a.ndim(); ++d) {
            if (like.shape(d) != a.shape(d)) throw ArgumentsRejected();
          }
        }
        uint64_t ptr = reinterpret_cast<uint64_t>(a.data());
        std::memcpy(slots + s++, &ptr, sizeof ptr);
        uint64_t begin = 0, bytes = 0;
        byte_span(a, begin, bytes);
        note_range(begin, bytes);
        last_array_obj = obj;
        last_array = a;
        break;
      }
      case slot::kI16: {
        const uint64_t base = reinterpret_cast<uint64_t>(last_array.data());
        if (step.self_shadow && obj == last_array_obj) {
          for (int lane = 0; lane < step.lanes; ++lane) std::memcpy(slots + s++, &base, 8);
          break;
        }
        if (!py::isinstance<py::array>(obj)) throw ArgumentsRejected();
        auto h = py::reinterpret_borrow<py::array>(obj);
        if (!h.dtype().equal(last_array.dtype()) || !h.writeable()) throw ArgumentsRejected();
        const py::ssize_t nd = last_array.ndim();
        if (!(last_array.flags() & py::array::c_style)) {
          // A strided array: the derivative indexes its shadow with the array's
          // strides, so the shadow must have them (else the checked path passes a
          // stand-in laid out like the array). One lane only.
          if (step.lanes != 1 || h.ndim() != nd) throw ArgumentsRejected();
          for (py::ssize_t d = 0; d < nd; ++d) {
            if (h.shape(d) != last_array.shape(d) || h.strides(d) != last_array.strides(d)) {
              throw ArgumentsRejected();
            }
          }
          uint64_t a_begin = 0, a_bytes = 0, h_begin = 0, h_bytes = 0;
          byte_span(last_array, a_begin, a_bytes);
          byte_span(h, h_begin, h_bytes);
          if (a_bytes && h_bytes && h_begin < a_begin + a_bytes && a_begin < h_begin + h_bytes) {
            throw ArgumentsRejected();  // overlaps its array
          }
          const uint64_t p = reinterpret_cast<uint64_t>(h.data());
          std::memcpy(slots + s++, &p, sizeof p);
          note_range(h_begin, h_bytes);
          break;
        }
        if (!(h.flags() & py::array::c_style)) throw ArgumentsRejected();
        const py::ssize_t extra = step.lanes > 1 ? 1 : 0;
        if (h.ndim() != nd + extra || (extra && h.shape(0) != step.lanes)) {
          throw ArgumentsRejected();
        }
        for (py::ssize_t d = 0; d < nd; ++d) {
          if (h.shape(d + extra) != last_array.shape(d)) throw ArgumentsRejected();
        }
        const uint64_t shadow = reinterpret_cast<uint64_t>(h.data());
        const uint64_t bytes = static_cast<uint64_t>(last_array.nbytes());
        const uint64_t shadow_bytes = static_cast<uint64_t>(h.nbytes());
        if (bytes && shadow < base + bytes && base < shadow + shadow_bytes) {
          throw ArgumentsRejected();  // overlaps its array
        }
        for (int lane = 0; lane < step.lanes; ++lane) {
          uint64_t p = shadow + lane * bytes;
          std::memcpy(slots + s++, &p, sizeof p);
        }
        note_range(shadow, shadow_bytes);
        break;
      }
      case step::kLanes: {
        if (step.lanes == 1) {
          put(slots + s++, step.code, as_float(obj), 0);
          break;
        }
        bool vector = py::isinstance<py::array>(obj) && py::reinterpret_borrow<py::array>(obj).ndim() == 1;
        if (!PyList_Check(obj) && !PyTuple_Check(obj) && !vector) {
          throw ArgumentsRejected();
        }
        py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
        if (static_cast<int>(py::len(seq)) != step.lanes) throw ArgumentsRejected();
        for (int lane = 0; lane < step.lanes; ++lane) {
          py::object item = seq[lane];
          put(slots + s++, step.code, as_float(item.ptr()), 0);
        }
        break;
      }
      default:
        throw ArgumentsRejected();
    }
  }
  if (s != in_slots_.size()) throw ArgumentsRejected();
  for (size_t i = 0; i < n_ranges; ++i) {
    for (size_t j = i + 1; j < n_ranges; ++j) {
      if (ranges[i][0] < ranges[j][1] && ranges[j][0] < ranges[i][1]) throw ArgumentsRejected();
    }
  }

  size_t failed_bytes = 0;
  {
    py::gil_scoped_release release;
    failed_bytes = call_entry(entry_, slots);
  }
  throw_if_failed(failed_bytes);
  if (errors[0] != 0) throw CalleeFailed(errors[0], errors[1]);

  const uint64_t *out = slots + in_slots_.size();
  size_t o = 0;
  py::object primal = py::none();
  if (result_.primal_fields == 1) {
    primal = slot_value(slots, o++);
  } else if (result_.primal_fields > 1) {
    py::tuple t(result_.primal_fields);
    for (int f = 0; f < result_.primal_fields; ++f) t[f] = slot_value(slots, o++);
    primal = std::move(t);
  }
  switch (result_.shape) {
    case result_shape::kReverse: {
      py::tuple t(1 + result_.adjoints.size());
      t[0] = primal;
      for (size_t a = 0; a < result_.adjoints.size(); ++a) {
        int lanes = result_.adjoints[a];
        if (lanes == 1) {
          t[1 + a] = slot_value(slots, o++);
        } else {
          t[1 + a] = float_array(out_slots_[o], out + o, {lanes});
          o += lanes;
        }
      }
      return std::move(t);
    }
    case result_shape::kPair:
    case result_shape::kTangent: {
      py::object tangent;
      const int fields = result_.tangent_fields, lanes = result_.tangent_lanes;
      if (result_.tangent_struct && lanes == 1) {
        py::tuple t(fields);
        for (int f = 0; f < fields; ++f) t[f] = slot_value(slots, o++);
        tangent = std::move(t);
      } else if (result_.tangent_struct) {
        tangent = float_array(out_slots_[o], out + o, {lanes, fields});
      } else if (lanes == 1) {
        tangent = slot_value(slots, o++);
      } else {
        tangent = float_array(out_slots_[o], out + o, {lanes});
      }
      if (result_.shape == result_shape::kTangent) return tangent;
      return py::make_tuple(primal, tangent);
    }
    case result_shape::kPrimal:
      return primal;
    default:
      return py::none();
  }
}

void throw_if_failed(size_t failed_bytes) {
  int64_t loop_status = 0, loop_detail = 0;
  if (failed_bytes == kLoopFailed && take_loop_failure(loop_status, loop_detail)) {
    throw CalleeFailed(loop_status, loop_detail);
  }
  if (failed_bytes) throw OutOfMemory(failed_bytes);
}

// For compiled callers (Numba): call an entry point, then release the arena;
// the bytes an allocation inside failed to get, else 0 (see call_entry).
// kLoopFailed (all ones): a prange loop's chunk raised; its exception is not kept.
extern "C" uint64_t enzyme_py_call(uint64_t entry, uint64_t slots) {
  const size_t failed =
      call_entry(reinterpret_cast<void (*)(void *)>(entry), reinterpret_cast<void *>(slots));
  int64_t status = 0, detail = 0;
  if (failed == kLoopFailed) take_loop_failure(status, detail);
  return failed;
}

void register_caller(py::module_ &m) {
  m.def("call_address", []() { return reinterpret_cast<uint64_t>(&enzyme_py_call); },
        "Address of `uint64 enzyme_py_call(uint64 entry, uint64 slots)`, for compiled\n"
        "callers: 0, or the bytes an allocation inside the derivative failed to get.");
  py::register_exception<ArgumentsRejected>(m, "ArgumentsRejected", PyExc_Exception);
  py::register_exception<CalleeFailed>(m, "CalleeFailed", PyExc_Exception);
  py::register_exception<OutOfMemory>(m, "OutOfMemory", PyExc_MemoryError);
  py::class_<ArgStep>(m, "ArgStep")
      .def(py::init([](const std::string &kind, const std::string &code,
                       const std::string &dtype, int lanes, bool self_shadow, int source,
                       bool strided, bool readonly) {
             return ArgStep{kind.at(0), code.empty() ? '\0' : code[0],
                            dtype.empty() ? '\0' : dtype[0], lanes, self_shadow, source,
                            strided, readonly};
           }),
           py::arg("kind"), py::arg("code"), py::arg("dtype"), py::arg("lanes"),
           py::arg("self_shadow"), py::arg("source") = -1, py::arg("strided") = false,
           py::arg("readonly") = false);
  py::class_<Caller>(m, "Caller")
      .def(py::init([](uint64_t entry, std::string in_slots, std::string out_slots,
                       std::vector<ArgStep> steps, const std::string &shape,
                       int primal_fields, std::vector<int> adjoints, int tangent_fields,
                       int tangent_lanes, bool tangent_struct, bool disjoint) {
             return Caller(entry, std::move(in_slots), std::move(out_slots), std::move(steps),
                           ResultPlan{shape.at(0), primal_fields, std::move(adjoints),
                                      tangent_fields, tangent_lanes, tangent_struct},
                           disjoint);
           }),
           py::arg("entry"), py::arg("in_slots"), py::arg("out_slots"), py::arg("steps"),
           py::arg("shape"), py::arg("primal_fields"), py::arg("adjoints"),
           py::arg("tangent_fields"), py::arg("tangent_lanes"), py::arg("tangent_struct"),
           py::arg("disjoint"))
      .def("__call__", &Caller::call);
}

}  // namespace enzyme_py
