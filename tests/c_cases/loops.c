/* Loops and nested loops. Each case: double NAME(double *x, int n). */
#include <math.h>

/* a loop adding the same two inputs 100 times: d/dx = (100, 100) */
double loop_sum(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < 100; i++) s += x[0] + x[1];
    return s;
}

double loop_double_nested(double *x, int n) {
    double s0 = 0.0;
    for (int i = 0; i < 30; i++) {
        double s1 = 0.0;
        for (int j = 0; j < 30; j++) s1 += x[0] * x[1] + j * x[0];
        s0 += s1 * (i + 1);
    }
    return s0;
}

/* three nested constant loops: d/dx = (20^3, 20^3) */
double loop_triple(double *x, int n) {
    double s0 = 0.0;
    for (int i = 0; i < 20; i++) {
        double s1 = 0.0;
        for (int j = 0; j < 20; j++) {
            double s2 = 0.0;
            for (int k = 0; k < 20; k++) s2 += x[0] + x[1];
            s1 += s2;
        }
        s0 += s1;
    }
    return s0;
}

/* a triangular nest whose inner bound is the outer index */
double loop_triangular(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) s += x[i] * x[j] * cos(x[j]);
    return s;
}

/* an early exit on a running sum; the input is zeroed as it is read */
double sum_until(double *x, int n) {
    double r = 0.0;
    for (int i = 0; i < n; i++) {
        r += x[i] * x[i];
        if (r > 3.0) break;
        r += x[i] * x[i];
        x[i] = 0;
    }
    return r;
}

/* the same, its exit tested before the second add on a data-dependent count */
double sum_until_while(double *x, int n) {
    double r = 0.0;
    int i = 0;
    while (i < n && r < 2.5) {
        r += x[i] * exp(x[i]);
        ++i;
    }
    return r * r;
}

/* read, write, read: squares summed then overwritten with zeros */
double read_write_loop(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n / 2; i++)
        for (int j = 0; j < 2; j++) {
            s += x[2 * i + j] * x[2 * i + j];
            x[2 * i + j] = 0.0;
        }
    return s;
}

/* a loop whose trip count is read from memory the loop then overwrites */
double count_from_memory(double *x, int n) {
    int len[1] = {n};
    double s = 0.0;
    for (int i = 0; i < len[0]; i++) {
        s += sin(x[i]) * x[i];
        if (i == n - 1) len[0] = 0;
    }
    return s;
}

/* Taylor series of log(1 - t): -sum t^i / i, t = x[0] */
double taylor_log(double *x, int n) {
    double s = 0.0, p = 1.0;
    for (int i = 1; i <= 40; i++) {
        p *= x[0];
        s -= p / i;
    }
    return s;
}

/* cos by its series, factorial and power built in loops */
double series_cos(double *x, int n) {
    double s = 0.0;
    for (int k = 0; k < 12; k++) {
        double p = 1.0, f = 1.0;
        for (int i = 1; i <= 2 * k; i++) {
            p *= x[0];
            f *= i;
        }
        s += (k % 2 ? -1.0 : 1.0) * p / f;
    }
    return s;
}

/* explicit Euler for y' = -a y + sin(t), y(0) = y0 */
double integrate_euler(double *x, int n) {
    double y = x[1], a = x[0], dt = 0.01;
    for (int k = 0; k < 200; k++) y += dt * (-a * y + sin(k * dt));
    return y;
}

/* explicit RK4 for the logistic equation, rate x[0], start x[1] */
double integrate_rk4(double *x, int n) {
    double y = x[1], r = x[0], h = 0.05;
    for (int k = 0; k < 60; k++) {
        double k1 = r * y * (1 - y);
        double y2 = y + 0.5 * h * k1, k2 = r * y2 * (1 - y2);
        double y3 = y + 0.5 * h * k2, k3 = r * y3 * (1 - y3);
        double y4 = y + h * k3, k4 = r * y4 * (1 - y4);
        y += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
    }
    return y;
}

/* forward substitution: L y = b with L's diagonal 2 + x, below it 0.1 x_i x_j */
double forward_solve(double *x, int n) {
    double y[16];
    for (int i = 0; i < n; i++) {
        double r = 1.0 + i;
        for (int j = 0; j < i; j++) r -= 0.1 * x[i] * x[j] * y[j];
        y[i] = r / (2.0 + x[i]);
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) s += y[i] * y[i];
    return s;
}

/* insertion sort in place (descending), then a weighted sum of the sorted values */
double insertion_sort_sum(double *x, int n) {
    for (int i = 1; i < n; i++) {
        double key = x[i];
        int j = i - 1;
        while (j >= 0 && x[j] < key) {
            x[j + 1] = x[j];
            j--;
        }
        x[j + 1] = key;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (i + 1) * x[i] * x[i];
    return s;
}

/* the largest element, found by comparisons, times the smallest */
double vector_max_min(double *x, int n) {
    double hi = x[0], lo = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] > hi) hi = x[i];
        if (x[i] < lo) lo = x[i];
    }
    return hi * lo + hi;
}

/* fmax over many pairs */
double many_max(double *x, int n) {
    double s = 0.0;
    for (int i = 0; i + 1 < n; i++) s += fmax(x[i], x[i + 1]) * fmin(x[i], 0.5);
    return s;
}

/* nested divisions */
double many_div(double *x, int n) {
    double r = x[0];
    for (int i = 1; i < n; i++) r = x[i] / (1.0 + r / (x[i] + 2.0));
    return r;
}
