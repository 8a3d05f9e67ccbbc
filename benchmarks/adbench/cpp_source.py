"""The four ADBench objectives in C++ (``ez.cpp``), written from the ADBench paper's
definitions (Srajer, Kukelova & Fitzgibbon 2018) as plain arrays: ``__restrict__``
pointers on the exported functions' parameters only, scratch from one ``malloc`` per
call or small stack arrays, no ``std::vector`` (whose allocator state Enzyme cannot
classify: "mixed activity").

No ``__restrict__`` on the parameters of the inlined helpers: clang turns those into
scoped ``noalias`` metadata at each inlined call, valid for one call only; inside a
loop, Enzyme v0.0.289's reverse pass takes it as valid across iterations and the LSTM's
gradient came out wrong without an error (relative errors up to 2%; right at -O0, with
-fno-inline, or without those ``__restrict__``; ``tests/test_adbench.py`` checks it).

Layouts (all row-major, float64):

- ``gmm_objective(d, k, n, alphas[k], means[k*d], icf[k*d(d+1)/2], x[n*d], gamma, m)``:
  the log-likelihood of a Gaussian mixture plus the Wishart prior (the parts that
  depend on the parameters), icf rows: log of the diagonal of the inverse covariance
  factor, then its strictly lower triangle column by column.
- ``ba_objective(n, m, p, cams[n*11], X[m*3], w[p], obs[p*2], feats[p*2],
  reproj_err[p*2], w_err[p])``: bundle adjustment; a camera is Rodrigues rotation (3),
  centre (3), focal length (1), principal point (2), radial distortion (2).
- ``hand_objective(theta[26], n_bones, parents[B], base_relatives[B*12],
  inverse_base_absolutes[B*12], n_verts, base_positions[V*3], weights[V*B],
  n_corr, correspondences[C], points[C*3], skinned[V*3], err[C*3])``: a skinned hand
  model (3x4 affine transforms, bones ordered parents first), ``skinned`` scratch.
- ``lstm_objective(l, c, b, main_params[8*l*b], extra_params[3*b], state[2*l*b],
  sequence[c*b])``: ADBench's LSTM (element-wise gates, ``l`` layers of hidden size
  ``b``), the mean cross-entropy of the next-step prediction; ``state`` is updated in
  place (pass a copy).
"""

SOURCE = r"""
#include <cmath>
#include <cstdlib>

namespace {

inline double logsumexp(const double *v, int n)
{
    double mx = v[0];
    for (int i = 1; i < n; ++i)
        if (v[i] > mx)
            mx = v[i];
    double s = 0.0;
    for (int i = 0; i < n; ++i)
        s += std::exp(v[i] - mx);
    return std::log(s) + mx;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- GMM
// The factors are unpacked once per call into dense lower-triangular rows Q (k x d x d,
// exp of the log-diagonal on the diagonal), so the loop over samples reads each row
// contiguously; the reverse pass adds into Q's shadow and carries it back to icf once.
double gmm_objective(int d, int k, int n, const double *__restrict__ alphas,
                     const double *__restrict__ means, const double *__restrict__ icf,
                     const double *__restrict__ x, double gamma, double m)
{
    const int icf_sz = d * (d + 1) / 2;
    double *Q = (double *)std::malloc(sizeof(double) * (size_t)(k * d * d));
    double *sum_qs = (double *)std::malloc(sizeof(double) * (size_t)k);
    double *main_term = (double *)std::malloc(sizeof(double) * (size_t)k);
    for (int c = 0; c < k; ++c) {
        const double *ic = icf + c * icf_sz;
        double *Qc = Q + c * d * d;
        double s = 0.0;
        for (int j = 0; j < d; ++j) {
            s += ic[j];
            for (int r = 0; r < d; ++r)
                Qc[r * d + j] = 0.0;
            Qc[j * d + j] = std::exp(ic[j]);
        }
        int idx = d;
        for (int j = 0; j < d; ++j)
            for (int r = j + 1; r < d; ++r)
                Qc[r * d + j] = ic[idx++];
        sum_qs[c] = s;
    }
    double slse = 0.0;
    for (int i = 0; i < n; ++i) {
        const double *xi = x + i * d;
        for (int c = 0; c < k; ++c) {
            const double *mc = means + c * d;
            const double *Qc = Q + c * d * d;
            double sq = 0.0;
            for (int r = 0; r < d; ++r) {
                const double *row = Qc + r * d;
                double t = 0.0;
                for (int j = 0; j <= r; ++j)
                    t += row[j] * (xi[j] - mc[j]);
                sq += t * t;
            }
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * sq;
        }
        slse += logsumexp(main_term, k);
    }
    const double cst = -n * d * 0.5 * std::log(2.0 * M_PI);
    double prior = 0.0;
    for (int c = 0; c < k; ++c) {
        double fro = 0.0;
        for (int j = 0; j < d; ++j) {
            const double e = Q[c * d * d + j * d + j];
            fro += e * e;
        }
        for (int j = d; j < icf_sz; ++j)
            fro += icf[c * icf_sz + j] * icf[c * icf_sz + j];
        prior += 0.5 * gamma * gamma * fro - m * sum_qs[c];
    }
    const double result = cst + slse - n * logsumexp(alphas, k) + prior;
    std::free(main_term);
    std::free(sum_qs);
    std::free(Q);
    return result;
}

// ---------------------------------------------------------------- BA
static inline void ba_reproj(const double *cam, const double *X,
                             double w, const double *feat,
                             double *err)
{
    const double *rot = cam;
    double p0 = X[0] - cam[3], p1 = X[1] - cam[4], p2 = X[2] - cam[5];
    double sqtheta = rot[0] * rot[0] + rot[1] * rot[1] + rot[2] * rot[2];
    double x0, x1, x2;
    if (sqtheta != 0.0) {
        double theta = std::sqrt(sqtheta);
        double ct = std::cos(theta), st = std::sin(theta), inv = 1.0 / theta;
        double w0 = rot[0] * inv, w1 = rot[1] * inv, w2 = rot[2] * inv;
        double c0 = w1 * p2 - w2 * p1, c1 = w2 * p0 - w0 * p2, c2 = w0 * p1 - w1 * p0;
        double tmp = (w0 * p0 + w1 * p1 + w2 * p2) * (1.0 - ct);
        x0 = p0 * ct + c0 * st + w0 * tmp;
        x1 = p1 * ct + c1 * st + w1 * tmp;
        x2 = p2 * ct + c2 * st + w2 * tmp;
    } else {
        x0 = p0 + (rot[1] * p2 - rot[2] * p1);
        x1 = p1 + (rot[2] * p0 - rot[0] * p2);
        x2 = p2 + (rot[0] * p1 - rot[1] * p0);
    }
    double u0 = x0 / x2, u1 = x1 / x2;
    double rsq = u0 * u0 + u1 * u1;
    double L = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
    err[0] = w * (u0 * L * cam[6] + cam[7] - feat[0]);
    err[1] = w * (u1 * L * cam[6] + cam[8] - feat[1]);
}

void ba_objective(int n, int m, int p, const double *__restrict__ cams,
                  const double *__restrict__ X, const double *__restrict__ w,
                  const int *__restrict__ obs, const double *__restrict__ feats,
                  double *__restrict__ reproj_err, double *__restrict__ w_err)
{
    (void)n;
    (void)m;
    for (int i = 0; i < p; ++i)
        ba_reproj(cams + 11 * obs[2 * i], X + 3 * obs[2 * i + 1], w[i], feats + 2 * i,
                  reproj_err + 2 * i);
    for (int i = 0; i < p; ++i)
        w_err[i] = 1.0 - w[i] * w[i];
}

// ---------------------------------------------------------------- HAND
// A rotation from three angles: R = Rz(a2) Ry(a1) Rx(a0), row-major 3x3.
static inline void euler_to_matrix(const double *a, double *R)
{
    double cx = std::cos(a[0]), sx = std::sin(a[0]);
    double cy = std::cos(a[1]), sy = std::sin(a[1]);
    double cz = std::cos(a[2]), sz = std::sin(a[2]);
    R[0] = cz * cy; R[1] = cz * sy * sx - sz * cx; R[2] = cz * sy * cx + sz * sx;
    R[3] = sz * cy; R[4] = sz * sy * sx + cz * cx; R[5] = sz * sy * cx - cz * sx;
    R[6] = -sy;     R[7] = cy * sx;                R[8] = cy * cx;
}

// out = A * B for 3x4 affine transforms (an implicit last row 0 0 0 1).
static inline void affine_mul(const double *A, const double *B,
                              double *out)
{
    for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) {
            double s = A[4 * r + 0] * B[c] + A[4 * r + 1] * B[4 + c] + A[4 * r + 2] * B[8 + c];
            out[4 * r + c] = c == 3 ? s + A[4 * r + 3] : s;
        }
    }
}

void hand_objective(const double *__restrict__ theta, int n_bones,
                    const int *__restrict__ parents,
                    const double *__restrict__ base_relatives,
                    const double *__restrict__ inverse_base_absolutes, int n_verts,
                    const double *__restrict__ base_positions,
                    const double *__restrict__ weights, int n_corr,
                    const int *__restrict__ correspondences,
                    const double *__restrict__ points, double *__restrict__ skinned,
                    double *__restrict__ err)
{
    enum { MAXB = 32 };
    double pose[3 * MAXB];
    double rel[12 * MAXB], absl[12 * MAXB], tr[12 * MAXB];
    for (int i = 0; i < 3 * n_bones; ++i)
        pose[i] = 0.0;
    // bone 0 is the palm, finger f has bones 1 + 4f .. 4 + 4f (metacarpal to distal):
    // the proximal bone bends and spreads, the middle and distal bones bend.
    for (int f = 0; f < 5; ++f) {
        const int b = 1 + 4 * f;
        pose[3 * (b + 1) + 0] = theta[6 + 4 * f + 0];
        pose[3 * (b + 1) + 2] = theta[6 + 4 * f + 1];
        pose[3 * (b + 2) + 0] = theta[6 + 4 * f + 2];
        pose[3 * (b + 3) + 0] = theta[6 + 4 * f + 3];
    }
    for (int b = 0; b < n_bones; ++b) {
        double R[9], T[12];
        euler_to_matrix(pose + 3 * b, R);
        for (int r = 0; r < 3; ++r) {
            T[4 * r + 0] = R[3 * r + 0];
            T[4 * r + 1] = R[3 * r + 1];
            T[4 * r + 2] = R[3 * r + 2];
            T[4 * r + 3] = 0.0;
        }
        affine_mul(base_relatives + 12 * b, T, rel + 12 * b);
        if (parents[b] < 0) {
            for (int j = 0; j < 12; ++j)
                absl[12 * b + j] = rel[12 * b + j];
        } else {
            affine_mul(absl + 12 * parents[b], rel + 12 * b, absl + 12 * b);
        }
        affine_mul(absl + 12 * b, inverse_base_absolutes + 12 * b, tr + 12 * b);
    }
    // global rotation (angle-axis theta[0:3], Rodrigues) and translation theta[3:6]
    double G[9];
    {
        double sq = theta[0] * theta[0] + theta[1] * theta[1] + theta[2] * theta[2];
        double t = std::sqrt(sq);
        double ct = std::cos(t), st = std::sin(t);
        double x = theta[0] / t, y = theta[1] / t, z = theta[2] / t;
        const double u = 1.0 - ct;
        G[0] = ct + x * x * u;     G[1] = x * y * u - z * st; G[2] = x * z * u + y * st;
        G[3] = y * x * u + z * st; G[4] = ct + y * y * u;     G[5] = y * z * u - x * st;
        G[6] = z * x * u - y * st; G[7] = z * y * u + x * st; G[8] = ct + z * z * u;
    }
    for (int v = 0; v < n_verts; ++v) {
        const double px = base_positions[3 * v], py = base_positions[3 * v + 1],
                     pz = base_positions[3 * v + 2];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0;
        for (int b = 0; b < n_bones; ++b) {
            const double wb = weights[v * n_bones + b];
            const double *M = tr + 12 * b;
            s0 += wb * (M[0] * px + M[1] * py + M[2] * pz + M[3]);
            s1 += wb * (M[4] * px + M[5] * py + M[6] * pz + M[7]);
            s2 += wb * (M[8] * px + M[9] * py + M[10] * pz + M[11]);
        }
        skinned[3 * v + 0] = G[0] * s0 + G[1] * s1 + G[2] * s2 + theta[3];
        skinned[3 * v + 1] = G[3] * s0 + G[4] * s1 + G[5] * s2 + theta[4];
        skinned[3 * v + 2] = G[6] * s0 + G[7] * s1 + G[8] * s2 + theta[5];
    }
    for (int i = 0; i < n_corr; ++i) {
        const int v = correspondences[i];
        for (int j = 0; j < 3; ++j)
            err[3 * i + j] = points[3 * i + j] - skinned[3 * v + j];
    }
}

// ---------------------------------------------------------------- LSTM
static inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One layer: element-wise gates (ADBench's model), hidden and cell updated in place.
static inline void lstm_model(int h, const double *w, const double *bias,
                              double *hidden, double *cell,
                              const double *input)
{
    for (int i = 0; i < h; ++i) {
        double forget = sigmoid(input[i] * w[i] + bias[i]);
        double ingate = sigmoid(hidden[i] * w[h + i] + bias[h + i]);
        double outgate = sigmoid(input[i] * w[2 * h + i] + bias[2 * h + i]);
        double change = std::tanh(hidden[i] * w[3 * h + i] + bias[3 * h + i]);
        cell[i] = cell[i] * forget + ingate * change;
        hidden[i] = outgate * std::tanh(cell[i]);
    }
}

double lstm_objective(int l, int c, int b, const double *__restrict__ main_params,
                      const double *__restrict__ extra_params, double *__restrict__ state,
                      const double *__restrict__ sequence)
{
    enum { MAXH = 128 };
    double x2[MAXH], ynorm[MAXH];
    double total = 0.0;
    int count = 0;
    const double *input = sequence;
    for (int t = 0; t < c - 1; ++t) {
        for (int i = 0; i < b; ++i)
            x2[i] = input[i] * extra_params[i];
        const double *xp = x2;
        for (int layer = 0; layer < l; ++layer) {
            double *hidden = state + 2 * layer * b;
            lstm_model(b, main_params + 8 * layer * b, main_params + 8 * layer * b + 4 * b,
                       hidden, hidden + b, xp);
            xp = hidden;
        }
        for (int i = 0; i < b; ++i)
            ynorm[i] = xp[i] * extra_params[b + i] + extra_params[2 * b + i];
        const double lse = logsumexp(ynorm, b);
        const double *target = sequence + (t + 1) * b;
        for (int i = 0; i < b; ++i)
            total += target[i] * (ynorm[i] - lse);
        count += b;
        input = target;
    }
    return -total / count;
}

}  // extern "C"
"""
