/* Loop bodies for Numba's BLAS helpers (numba/_helperlib: numba_xxdot, numba_xxgemv,
   numba_xxgemm, numba_xxnrm2), for real kinds ('d', 's'), with BLAS's column-major
   semantics. Enzyme differentiates these loops. */
typedef long long idx;

#define DOT(T)                                                               \
  { const T *x = a, *y = b; T s = 0;                                         \
    for (idx i = 0; i < n; ++i) s += x[i] * y[i];                            \
    *(T *)out = s; }

int enzyme_py_numba_xxdot(char kind, char conjugate, idx n, void *a, void *b, void *out) {
  if (kind == 'd') DOT(double) else DOT(float)
  return 0;
}

#define GEMV(T)                                                              \
  { const T al = *(const T *)alpha, be = *(const T *)beta;                   \
    const T *A = a, *X = x; T *Y = y;                                        \
    if (trans == 'n' || trans == 'N') {                                      \
      for (idx i = 0; i < m; ++i) { T s = 0;                                 \
        for (idx j = 0; j < n; ++j) s += A[i + j * lda] * X[j];              \
        Y[i] = be == 0 ? al * s : al * s + be * Y[i]; }                      \
    } else {                                                                 \
      for (idx j = 0; j < n; ++j) { T s = 0;                                 \
        for (idx i = 0; i < m; ++i) s += A[i + j * lda] * X[i];              \
        Y[j] = be == 0 ? al * s : al * s + be * Y[j]; }                      \
    } }

int enzyme_py_numba_xxgemv(char kind, char trans, idx m, idx n, void *alpha, void *a,
                           idx lda, void *x, void *beta, void *y) {
  if (kind == 'd') GEMV(double) else GEMV(float)
  return 0;
}

#define GEMM(T)                                                              \
  { const T al = *(const T *)alpha, be = *(const T *)beta;                   \
    const T *A = a, *B = b; T *C = c;                                        \
    const int ta = !(transa == 'n' || transa == 'N');                        \
    const int tb = !(transb == 'n' || transb == 'N');                        \
    for (idx j = 0; j < n; ++j)                                              \
      for (idx i = 0; i < m; ++i) { T s = 0;                                 \
        for (idx p = 0; p < k; ++p)                                          \
          s += (ta ? A[p + i * lda] : A[i + p * lda]) *                      \
               (tb ? B[j + p * ldb] : B[p + j * ldb]);                       \
        C[i + j * ldc] = be == 0 ? al * s : al * s + be * C[i + j * ldc]; } }

int enzyme_py_numba_xxgemm(char kind, char transa, char transb, idx m, idx n, idx k,
                           void *alpha, void *a, idx lda, void *b, idx ldb, void *beta,
                           void *c, idx ldc) {
  if (kind == 'd') GEMM(double) else GEMM(float)
  return 0;
}

double llvm_sqrt_f64(double) __asm__("llvm.sqrt.f64");
float llvm_sqrt_f32(float) __asm__("llvm.sqrt.f32");

int enzyme_py_numba_xxnrm2(char kind, idx n, void *x, idx incx, void *result) {
  if (kind == 'd') {
    const double *X = x; double s = 0;
    for (idx i = 0; i < n; ++i) s += X[i * incx] * X[i * incx];
    *(double *)result = llvm_sqrt_f64(s);
  } else {
    const float *X = x; float s = 0;
    for (idx i = 0; i < n; ++i) s += X[i * incx] * X[i * incx];
    *(float *)result = llvm_sqrt_f32(s);
  }
  return 0;
}
