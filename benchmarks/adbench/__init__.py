"""ADBench's four objectives (GMM, bundle adjustment, hand tracking, LSTM) in C++ through
``ez.cpp`` (GMM and BA also in Numba), against JAX and PyTorch: ``python -m
benchmarks.adbench [--quick]``. Modules: ``cpp_source`` (the C++), ``numba_objectives``,
``data`` (inputs and sizes), ``enzyme_impl`` (enzyme_py's derivatives),
``contenders`` (JAX, PyTorch), ``run`` (timing and the report)."""
