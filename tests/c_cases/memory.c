/* Recursion, heap temporaries (malloc, realloc, posix_memalign), structs, control
   flow. Each case: double NAME(double *x, int n). */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double rec_power(double x, int k) {
    if (k == 0) return 1.0;
    if (k % 2 == 0) {
        double h = rec_power(x, k / 2);
        return h * h;
    }
    return x * rec_power(x, k - 1);
}
/* x0^7 + x1^4 by recursive squaring */
double recursive_power(double *x, int n) { return rec_power(x[0], 7) + rec_power(x[1], 4); }

static double rec_sum(const double *x, int lo, int hi) {
    if (hi - lo == 1) return sin(x[lo]) * x[lo];
    int mid = (lo + hi) / 2;
    return rec_sum(x, lo, mid) + rec_sum(x, mid, hi);
}
/* divide and conquer over the array */
double recursive_sum(double *x, int n) { return rec_sum(x, 0, n); }

static double fib_like(double x, int k) {
    if (k < 2) return x;
    return fib_like(x, k - 1) * 0.5 + sin(fib_like(x, k - 2));
}
double recursive_tree(double *x, int n) { return fib_like(x[0], 8); }

/* a malloc'd temporary, freed before return */
double malloc_temporary(double *x, int n) {
    double *t = (double *)malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) t[i] = x[i] * x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += t[i] * t[(i + 1) % n];
    free(t);
    return s;
}

/* a buffer grown by realloc as it is filled */
double realloc_grow(double *x, int n) {
    int cap = 1, len = 0;
    double *buf = (double *)malloc(cap * sizeof(double));
    for (int i = 0; i < n; i++) {
        if (len == cap) {
            cap *= 2;
            buf = (double *)realloc(buf, cap * sizeof(double));
        }
        buf[len++] = exp(0.3 * x[i]);
    }
    double s = 0.0;
    for (int i = 0; i < len; i++) s += buf[i] * (i + 1);
    free(buf);
    return s;
}

/* one realloc to a larger size: what was there is kept */
double realloc_once(double *x, int n) {
    double *a = (double *)malloc(2 * sizeof(double));
    a[0] = x[0] * x[1];
    a[1] = x[1];
    a = (double *)realloc(a, 4 * sizeof(double));
    a[2] = a[0] * a[1];
    a[3] = sin(a[2]);
    double r = a[3] + a[0];
    free(a);
    return r;
}

/* an aligned temporary from posix_memalign */
double aligned_temporary(double *x, int n) {
    void *p = 0;
    if (posix_memalign(&p, 64, n * sizeof(double)) != 0) return 0.0;
    double *t = (double *)p;
    for (int i = 0; i < n; i++) t[i] = sqrt(x[i] + 1.0);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += t[i] * x[n - 1 - i];
    free(p);
    return s;
}

/* memcpy into a temporary, then in-place work on the copy */
double memcpy_copy(double *x, int n) {
    double t[16];
    memcpy(t, x, n * sizeof(double));
    for (int i = 1; i < n; i++) t[i] += t[i - 1] * 0.5;
    return t[n - 1] * t[n - 1];
}

struct vec {
    int len;
    double scale;
    double *data;
};
static double vec_norm2(const struct vec *v) {
    double s = 0.0;
    for (int i = 0; i < v->len; i++) s += v->data[i] * v->data[i];
    return v->scale * s;
}
/* a struct mixing an int, a double and a pointer to the array */
double struct_mixed(double *x, int n) {
    struct vec v = {n, x[0], x};
    return vec_norm2(&v);
}

struct meta {
    long count;
    double *values;
};
/* a struct holding a malloc'd array */
double struct_heap(double *x, int n) {
    struct meta m;
    m.count = n;
    m.values = (double *)malloc(n * sizeof(double));
    for (long i = 0; i < m.count; i++) m.values[i] = cos(x[i]) * x[0];
    double s = 0.0;
    for (long i = 0; i < m.count; i++) s += m.values[i];
    free(m.values);
    return s;
}

struct pair {
    double a, b;
};
static struct pair polar(double r, double t) {
    struct pair p = {r * cos(t), r * sin(t)};
    return p;
}
/* a struct of two doubles returned by value */
double struct_return(double *x, int n) {
    struct pair p = polar(x[0], x[1]);
    return p.a * p.a * p.b + p.b;
}

struct particle {
    double pos[3];
    double vel[3];
};
/* an array of structs built from the input, then stepped */
double struct_array(double *x, int n) {
    struct particle ps[4];
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < 3; d++) {
            ps[i].pos[d] = x[(3 * i + d) % n];
            ps[i].vel[d] = 0.1 * x[(3 * i + d + 1) % n];
        }
    double e = 0.0;
    for (int step = 0; step < 5; step++)
        for (int i = 0; i < 4; i++)
            for (int d = 0; d < 3; d++) {
                ps[i].pos[d] += 0.1 * ps[i].vel[d];
                ps[i].vel[d] -= 0.1 * ps[i].pos[d];
            }
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < 3; d++) e += ps[i].pos[d] * ps[i].pos[d] + ps[i].vel[d];
    return e;
}

/* a value read, the memory overwritten, the value needed in the reverse pass */
double cache_before_overwrite(double *x, int n) {
    double y = x[0] * x[0];
    x[0] = 0.0;
    double z = y * x[1];
    x[1] = z;
    return z * y + x[1];
}

static void step_a(double *x) {
    double t = 4 * cos(x[0] + x[1]);
    x[0] = 3 * sin(2 * x[0] + x[1]);
    x[1] = t;
}
static void step_b(double *x) {
    double t = 4 * sin(2 * x[0] + x[1]);
    x[0] = 4 * cos(x[0] + 2 * x[1]);
    x[1] = t;
}
/* goto-driven control flow between two in-place maps (a fixed number of steps) */
double goto_flow(double *x, int n) {
    int steps = 0;
A:
    step_a(x);
    if (++steps >= 6) goto done;
    if (x[0] * x[0] < x[1]) goto B;
    goto A;
B:
    step_b(x);
    if (++steps >= 6) goto done;
    if (x[0] > 0) goto A;
    goto B;
done:
    return x[0] + 2 * x[1];
}

/* nested predicates on the data */
double nested_branches(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        if (x[i] > 0.5) {
            if (x[i] > 0.75) s += x[i] * x[i] * x[i];
            else s += sin(x[i]);
        } else if (x[i] > 0.25) {
            s += exp(-x[i]);
        } else {
            s -= x[i] * 3.0;
        }
    }
    return s;
}

/* Newton's iteration for y^3 + y = x0 until converged: dy/dx = 1 / (3 y^2 + 1) */
double newton_inverse(double *x, int n) {
    double y = x[0];
    for (int it = 0; it < 100; it++) {
        double r = y * y * y + y - x[0];
        if (fabs(r) < 1e-14) break;
        y -= r / (3 * y * y + 1);
    }
    return y;
}

/* a fixed point iteration: y = cos(a y) + b */
double fixed_point(double *x, int n) {
    double y = 0.0;
    for (int it = 0; it < 200; it++) {
        double next = 0.5 * cos(x[0] * y) + x[1];
        if (fabs(next - y) < 1e-15) break;
        y = next;
    }
    return y;
}

/* frexp: the mantissa's derivative is 1 / 2^e */
double frexp_mantissa(double *x, int n) {
    int e;
    double m = frexp(x[0] * 5.0, &e);
    return m * m + e;
}

/* a table of constant weights read in a loop */
static const double weights[5] = {0.5, -1.25, 2.0, 0.75, -0.125};
double constant_table(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += weights[i % 5] * x[i] * x[(i + 2) % n];
    return s;
}

/* a mix of binary operations and libm calls */
double binops(double *x, int n) {
    double a = x[0], b = x[1];
    return a * b + a / b - pow(a, b) + fmod(a * 7.0, 1.3) + atan2(a, b) + hypot(a, b)
           + tanh(a - b) + log1p(a * b) + cbrt(a + 1.0) + expm1(b) - copysign(a, -1.0);
}
