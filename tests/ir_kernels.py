"""Kernels written in LLVM IR, shared by the CPU-device tests and the GPU tests (which
run on the device machine without clang or Numba)."""

# horner(i, x, c, m, out): out[i] = c[0] x^(m-1) + ... + c[m-1], by Horner's rule. Its
# reverse needs the partial sums of the loop: a tape per index (malloc; on a GPU the
# device heap).
HORNER = """
define void @horner(i64 %i, double* %x, double* %c, i64 %m, double* %out) {
entry:
  %px = getelementptr double, double* %x, i64 %i
  %xi = load double, double* %px
  br label %loop
loop:
  %j = phi i64 [0, %entry], [%j1, %loop]
  %s = phi double [0.0, %entry], [%s1, %loop]
  %pc = getelementptr double, double* %c, i64 %j
  %cj = load double, double* %pc
  %sx = fmul double %s, %xi
  %s1 = fadd double %sx, %cj
  %j1 = add i64 %j, 1
  %done = icmp eq i64 %j1, %m
  br i1 %done, label %exit, label %loop
exit:
  %po = getelementptr double, double* %out, i64 %i
  store double %s1, double* %po
  ret void
}
"""

# scaled(i, k, x, a, out): out[i] = a * k * x[i], x float32. The kernel's parameters
# (n, k, x, a, out) are 8, 4, 8, 4 and 8 bytes: the buffer has padding before x and
# before out, which a wrong layout would misplace.
SCALED = """
define void @scaled(i64 %i, i32 %k, float* %x, float %a, double* %out) {
  %px = getelementptr float, float* %x, i64 %i
  %v = load float, float* %px
  %kf = sitofp i32 %k to float
  %ak = fmul float %a, %kf
  %r = fmul float %ak, %v
  %rd = fpext float %r to double
  %po = getelementptr double, double* %out, i64 %i
  store double %rd, double* %po
  ret void
}
"""
