// Calling compiled entry points from Python: the arena of temporaries and Enzyme's
// tape (arena.h), `invoke` on a slots buffer (entry_abi.h's convention), split mode.
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "arena.h"
#include "caller.h"
#include "crash_report.h"
#include "parfor_runner.h"
#include "register.h"
#include "tape_prefault.h"

namespace py = pybind11;

namespace enzyme_py {
namespace {

// Runs `call(entry, slots' data)` without the GIL: the slots are a 1-D buffer of 8-byte
// items; an allocation inside that failed is a MemoryError (OutOfMemory).
template <typename Call>
void invoke_on_slots(uint64_t entry, py::buffer &slots, Call call) {
  py::buffer_info info = slots.request(/*writable=*/true);
  if (info.itemsize != 8 || info.ndim != 1) {
    throw std::invalid_argument("slots must be a 1-D buffer of 8-byte items");
  }
  auto fn = reinterpret_cast<void (*)(void *)>(entry);
  void *data = info.ptr;
  size_t failed_bytes = 0;
  {
    py::gil_scoped_release release;
    failed_bytes = call(fn, data);
  }
  throw_if_failed(failed_bytes);
}

}  // namespace

void register_calls(py::module_ &m) {
  m.def(
      "tape_bytes",
      []() {
        return py::make_tuple(tape_bytes_in_use(), tape_bytes_reserved(),
                              tape_bytes_last_call());
      },
      "(in use, reserved: kept faulted in between calls, most in use during the last\n"
      "call) bytes of this thread's stack for Enzyme's tapes.");
  m.def(
      "tape_prefault_counts",
      []() {
        const PrefaultCounts c = prefault_counts();
        return py::make_tuple(c.asked, c.done, c.refused);
      },
      "(bytes asked for, bytes faulted in, refused by the kernel) by the helper thread\n"
      "that faults fresh tape pages in while a call fills them, in this process.");
  m.def("give_back_tape", &tape_give_back,
        "Between calls: this thread's tape chunks back to the system.");
  m.def("release_arena", &arena_release,
        "Free this thread's temporaries and reset its tape (as after each derivative call).");
  m.def("nrt_data_offset", &nrt_data_offset, py::arg("align"),
        "Bytes from a MemInfo header of the arena to its data, for an alignment.");
  m.def("runtime_symbols", &arena_symbols,
        "Names the JIT resolves to enzyme_py's arena and tape functions -> addresses.");
  m.def("parfor_symbols", &parfor_symbols,
        "Names the JIT resolves to the prange runner's functions -> addresses.");
  m.def(
      "zero_in_shares",
      [](const std::vector<std::pair<uint64_t, uint64_t>> &spans, int64_t threads) {
        py::gil_scoped_release release;
        zero_in_shares(spans, threads);
      },
      py::arg("spans"), py::arg("threads"),
      "Zero each (address, bytes) span on up to `threads` of the prange pool's threads,\n"
      "thread w its w-th contiguous share (the caller's: the first).");
  m.def("set_parfor_grain_limit", &set_parfor_grain_limit, py::arg("limit"),
        "The most indices per chunk a prange launch may ask for (0: no limit); returns\n"
        "the previous limit. Tests set 1 to run short ranges on several threads.");

  m.def("install_crash_report", &install_crash_report,
        "On a fatal signal, write the faulting address, the derivative or library the\n"
        "instruction was in and the native stack to stderr, then run the previous handler.");

  m.def(
      "invoke",
      [](uint64_t entry, py::buffer slots) {
        invoke_on_slots(entry, slots, [](void (*fn)(void *), void *data) {
          return call_entry(fn, data);
        });
      },
      py::arg("entry"), py::arg("slots"),
      "Call a derivative's entry point on its argument slots, without the GIL.");

  py::class_<SplitTape>(m, "SplitTape",
                        "The memory of one augmented forward pass of split mode (Enzyme's "
                        "tape, temporaries and their shadows), freed when this dies.")
      .def(py::init<>())
      .def_property_readonly("bytes", &SplitTape::bytes, "Bytes its tape holds.");

  m.def(
      "invoke_split",
      [](uint64_t entry, py::buffer slots, SplitTape &split, bool forward) {
        invoke_on_slots(entry, slots, [&split, forward](void (*fn)(void *), void *data) {
          return call_entry_split(fn, data, split, forward);
        });
      },
      py::arg("entry"), py::arg("slots"), py::arg("tape"), py::arg("forward"),
      "invoke for split mode: the augmented forward pass (forward) allocating into\n"
      "`tape`, or its reverse pass reading it. The caller keeps `tape` alive meanwhile.");
}

}  // namespace enzyme_py
