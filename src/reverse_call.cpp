#include "reverse_call.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <utility>

namespace py = pybind11;

namespace enzyme_py {
namespace {

bool has_kind(PyObject *obj, const ArgKind &kind) {
  if (!kind.type.is_none()) {
    return Py_TYPE(obj) == reinterpret_cast<PyTypeObject *>(kind.type.ptr());
  }
  // Exactly np.ndarray, as plan_key: a subclass takes the Python path.
  static PyTypeObject *ndarray =
      reinterpret_cast<PyTypeObject *>(py::module_::import("numpy").attr("ndarray").ptr());
  if (Py_TYPE(obj) != ndarray) return false;
  const auto a = py::reinterpret_borrow<py::array>(obj);
  const int flags = a.flags();
  return a.dtype().num() == kind.dtype_num && a.ndim() == kind.ndim &&
         ((flags & py::array::c_style) != 0) == kind.c_contiguous &&
         ((flags & py::array::f_style) != 0) == kind.f_contiguous &&
         a.writeable() == kind.writeable;
}

}  // namespace

ReverseCall::ReverseCall(py::object caller, std::vector<ArgKind> kinds, std::vector<bool> shadowed,
                         std::vector<GradientPick> picks, bool single, bool with_value,
                         py::object seed, int64_t shadow_bytes_below)
    : caller_object_(std::move(caller)),
      caller_(&caller_object_.cast<const Caller &>()),
      kinds_(std::move(kinds)),
      shadowed_(std::move(shadowed)),
      picks_(std::move(picks)),
      single_(single),
      with_value_(with_value),
      seed_(std::move(seed)),
      shadow_bytes_below_(shadow_bytes_below) {
  if (shadowed_.size() != kinds_.size()) throw std::invalid_argument("one shadow flag per kind");
  shadows_ = 0;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    if (shadowed_[i] && !kinds_[i].type.is_none()) {
      throw std::invalid_argument("only arrays take a shadow here");
    }
    shadows_ += shadowed_[i];
  }
  for (const GradientPick &pick : picks_) {
    if (pick.index < 0 || (pick.shadow && (static_cast<size_t>(pick.index) >= kinds_.size() ||
                                           !shadowed_[pick.index]))) {
      throw std::invalid_argument("a gradient picked from nowhere");
    }
  }
  if (single_ && picks_.size() != 1) throw std::invalid_argument("single: one gradient");
}

py::object ReverseCall::call(py::args args) const {
  const size_t n = kinds_.size();
  if (args.size() != n) throw ArgumentsRejected();
  for (size_t i = 0; i < n; ++i) {
    if (!has_kind(args[i].ptr(), kinds_[i])) throw ArgumentsRejected();
  }
  py::tuple flat(n + shadows_ + 1);
  std::vector<py::object> shadows(n);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    flat[at++] = args[i];
    if (!shadowed_[i]) continue;
    const auto a = py::reinterpret_borrow<py::array>(args[i]);
    if (static_cast<int64_t>(a.nbytes()) >= shadow_bytes_below_) throw ArgumentsRejected();
    std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
    py::array zeros(a.dtype(), shape);  // C-contiguous, as np.zeros
    std::memset(zeros.mutable_data(), 0, static_cast<size_t>(zeros.nbytes()));
    flat[at++] = zeros;
    shadows[i] = std::move(zeros);
  }
  flat[at] = seed_;
  const py::tuple out = caller_->call(py::reinterpret_borrow<py::args>(flat));
  py::tuple grads(picks_.size());
  for (size_t k = 0; k < picks_.size(); ++k) {
    const GradientPick &pick = picks_[k];
    grads[k] = pick.shadow ? shadows[pick.index] : py::object(out[1 + pick.index]);
  }
  py::object found = single_ ? py::object(grads[0]) : py::object(grads);
  if (!with_value_) return found;
  return py::make_tuple(out[0], found);
}

void register_reverse_call(py::module_ &m) {
  py::class_<ReverseCall>(m, "ReverseCall")
      .def(py::init([](py::object caller, const py::list &kinds, std::vector<bool> shadowed,
                       const std::vector<std::pair<bool, int>> &picks, bool single,
                       bool with_value, py::object seed, int64_t shadow_bytes_below) {
             std::vector<ArgKind> arg_kinds;
             for (const py::handle kind : kinds) {
               ArgKind k;
               if (py::isinstance<py::tuple>(kind)) {
                 const auto t = kind.cast<std::tuple<int, int, bool, bool, bool>>();
                 k.type = py::none();
                 std::tie(k.dtype_num, k.ndim, k.c_contiguous, k.f_contiguous, k.writeable) = t;
               } else if (PyType_Check(kind.ptr())) {
                 k.type = py::reinterpret_borrow<py::object>(kind);
               } else {
                 throw std::invalid_argument("a kind is a type or (num, ndim, c, f, writeable)");
               }
               arg_kinds.push_back(std::move(k));
             }
             std::vector<GradientPick> gradient_picks;
             for (const auto &[shadow, index] : picks) gradient_picks.push_back({shadow, index});
             return ReverseCall(std::move(caller), std::move(arg_kinds), std::move(shadowed),
                                std::move(gradient_picks), single, with_value, std::move(seed),
                                shadow_bytes_below);
           }),
           py::arg("caller"), py::arg("kinds"), py::arg("shadowed"), py::arg("picks"),
           py::arg("single"), py::arg("with_value"), py::arg("seed"),
           py::arg("shadow_bytes_below"))
      .def("__call__", &ReverseCall::call);
}

}  // namespace enzyme_py
