// The float64 reference: SPEC.md evaluated step by step, one (batch, head) at a time.
//
// This is the oracle every other backend is tested against, so it favours being obviously
// the formulas over being fast. Inputs of any dtype are read as double; outputs are rounded
// to their dtype once, at the end.
//
// The backward needs R_t at every step in reverse order. Storing all of them would cost
// T·L·E per (b,h), so the forward sweep keeps a checkpoint every S = ceil(sqrt(T)) steps and
// each segment is recomputed from its checkpoint when the reverse sweep reaches it: memory
// O(sqrt(T)·L·E), work 2x the forward.
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"

namespace rhoscan::detail {
namespace {

constexpr double eps = kEps;

// Strided element access: offset of index (i0, i1, ...) under stride array s.
inline int64_t off2(const int64_t* s, int64_t a, int64_t b) { return a * s[0] + b * s[1]; }
inline int64_t off3(const int64_t* s, int64_t a, int64_t b, int64_t c) {
  return a * s[0] + b * s[1] + c * s[2];
}
inline int64_t off4(const int64_t* s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * s[0] + b * s[1] + c * s[2] + d * s[3];
}

struct HeadInputs {
  std::vector<double> decay;  // [L]
  std::vector<double> R;      // [L*E] state, row-major
  std::vector<double> N;      // [L]
};

std::vector<double> read_decay(const void* decay, const int64_t* stride, DType dtype, int64_t h,
                               int64_t L) {
  std::vector<double> a(L);
  for (int64_t l = 0; l < L; ++l) a[l] = load_as_double(decay, dtype, off2(stride, h, l));
  return a;
}

// Initial state of head (b,h): the given tensors, or zeros.
void read_state(const void* rho0, const int64_t* rs, const void* n0, const int64_t* ns, DType dtype,
                int64_t b, int64_t h, int64_t L, int64_t E, std::vector<double>& R,
                std::vector<double>& N) {
  R.assign(L * E, 0.0);
  N.assign(L, 0.0);
  if (rho0)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e) R[l * E + e] = load_as_double(rho0, dtype, off4(rs, b, h, l, e));
  if (n0)
    for (int64_t l = 0; l < L; ++l) N[l] = load_as_double(n0, dtype, off3(ns, b, h, l));
}

// One token: context read from the state before the update, then the update.
// q [L], v [E] as double; c [E] out.
void token(const double* q, const double* v, const double* a, int64_t L, int64_t E,
           std::vector<double>& R, std::vector<double>& N, double* c) {
  double s = eps;
  for (int64_t l = 0; l < L; ++l) s += q[l];
  for (int64_t e = 0; e < E; ++e) c[e] = 0.0;
  for (int64_t l = 0; l < L; ++l) {
    double w = q[l] / s;
    if (w == 0.0) continue;
    double scale = w / (N[l] + eps);
    for (int64_t e = 0; e < E; ++e) c[e] += scale * R[l * E + e];
  }
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t e = 0; e < E; ++e) R[l * E + e] = a[l] * R[l * E + e] + q[l] * v[e];
    N[l] = a[l] * N[l] + q[l];
  }
}

class ReferenceBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::reference; }
  Device device() const override { return Device::cpu; }

  void forward(const ForwardParams& f) const override {
    const Problem& p = f.p;
    const int64_t L = p.L, E = p.E;
    std::vector<double> R, N, q(L), v(E), c(E);
    for (int64_t h = 0; h < p.H; ++h) {
      std::vector<double> a = read_decay(f.decay, f.decay_stride, p.decay_dtype, h, L);
      for (int64_t b = 0; b < p.B; ++b) {
        read_state(f.rho0, f.rho0_stride, f.rho_norm0, f.rho_norm0_stride, p.state_dtype, b, h, L, E, R, N);
        for (int64_t t = 0; t < p.T; ++t) {
          for (int64_t l = 0; l < L; ++l) q[l] = load_as_double(f.q, p.dtype, off4(f.q_stride, b, h, t, l));
          for (int64_t e = 0; e < E; ++e) v[e] = load_as_double(f.v, p.dtype, off4(f.v_stride, b, h, t, e));
          token(q.data(), v.data(), a.data(), L, E, R, N, c.data());
          for (int64_t e = 0; e < E; ++e)
            store_from_double(f.context, p.dtype, off4(f.context_stride, b, h, t, e), c[e]);
        }
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t e = 0; e < E; ++e)
            store_from_double(f.rho, p.state_dtype, off4(f.rho_stride, b, h, l, e), R[l * E + e]);
          store_from_double(f.rho_norm, p.state_dtype, off3(f.rho_norm_stride, b, h, l), N[l]);
        }
      }
    }
  }

  void step(const StepParams& s) const override {
    const Problem& p = s.p;
    const int64_t L = p.L, E = p.E;
    std::vector<double> R, N, q(L), v(E), c(E);
    for (int64_t h = 0; h < p.H; ++h) {
      std::vector<double> a = read_decay(s.decay, s.decay_stride, p.decay_dtype, h, L);
      for (int64_t b = 0; b < p.B; ++b) {
        read_state(s.rho, s.rho_stride, s.rho_norm, s.rho_norm_stride, p.state_dtype, b, h, L, E, R, N);
        for (int64_t l = 0; l < L; ++l) q[l] = load_as_double(s.q, p.dtype, off3(s.q_stride, b, h, l));
        for (int64_t e = 0; e < E; ++e) v[e] = load_as_double(s.v, p.dtype, off3(s.v_stride, b, h, e));
        token(q.data(), v.data(), a.data(), L, E, R, N, c.data());
        for (int64_t e = 0; e < E; ++e)
          store_from_double(s.context, p.dtype, off3(s.context_stride, b, h, e), c[e]);
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t e = 0; e < E; ++e)
            store_from_double(s.rho, p.state_dtype, off4(s.rho_stride, b, h, l, e), R[l * E + e]);
          store_from_double(s.rho_norm, p.state_dtype, off3(s.rho_norm_stride, b, h, l), N[l]);
        }
      }
    }
  }

  void backward(const BackwardParams& g) const override {
    const Problem& p = g.p;
    const int64_t B = p.B, H = p.H, Hv = p.Hv, T = p.T, L = p.L, E = p.E;
    const int64_t S = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(T)))));
    // Accumulators that sum over heads (dv when Hv = 1) or batch (da) stay in double until the end.
    std::vector<double> dv_acc(B * Hv * T * E, 0.0);
    std::vector<double> da_acc(H * L, 0.0);
    std::vector<double> R, N, A(L * E), Bn(L), qt(L), vt(E), Gt(E), w(L), gw(L), c(E);
    std::vector<double> Q(T * L), V(T * E), Nt(T * L);  // this head's q, v, and N_t for all t
    std::vector<std::vector<double>> checkpoints;
    std::vector<double> segment;  // R_t for t in the current segment, [S][L*E]
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> a = read_decay(g.decay, g.decay_stride, p.decay_dtype, h, L);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t l = 0; l < L; ++l) Q[t * L + l] = load_as_double(g.q, p.dtype, off4(g.q_stride, b, h, t, l));
          for (int64_t e = 0; e < E; ++e) V[t * E + e] = load_as_double(g.v, p.dtype, off4(g.v_stride, b, h, t, e));
        }
        // Forward sweep: N_t for every t, R_t at every checkpoint t = k·S.
        read_state(g.rho0, g.rho0_stride, g.rho_norm0, g.rho_norm0_stride, p.state_dtype, b, h, L, E, R, N);
        checkpoints.clear();
        for (int64_t t = 0; t < T; ++t) {
          if (t % S == 0) checkpoints.push_back(R);
          for (int64_t l = 0; l < L; ++l) Nt[t * L + l] = N[l];
          token(&Q[t * L], &V[t * E], a.data(), L, E, R, N, c.data());
        }
        // Reverse sweep. A, Bn hold A_{t+1}, B_{t+1}; they start at the upstream gradients.
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t e = 0; e < E; ++e)
            A[l * E + e] = g.grad_rho_out ? load_as_double(g.grad_rho_out, p.state_dtype, off4(g.grad_rho_out_stride, b, h, l, e)) : 0.0;
          Bn[l] = g.grad_rho_norm_out ? load_as_double(g.grad_rho_norm_out, p.state_dtype, off3(g.grad_rho_norm_out_stride, b, h, l)) : 0.0;
        }
        const int64_t hv = Hv == 1 ? 0 : h;
        for (int64_t k = static_cast<int64_t>(checkpoints.size()) - 1; k >= 0; --k) {
          const int64_t t0 = k * S, t1 = std::min(T, t0 + S);
          // Recompute R_t for t in [t0, t1) from the checkpoint.
          segment.resize((t1 - t0) * L * E);
          std::vector<double> Rs = checkpoints[k], Ns(L);
          for (int64_t l = 0; l < L; ++l) Ns[l] = Nt[t0 * L + l];
          for (int64_t t = t0; t < t1; ++t) {
            std::copy(Rs.begin(), Rs.end(), segment.begin() + (t - t0) * L * E);
            token(&Q[t * L], &V[t * E], a.data(), L, E, Rs, Ns, c.data());
          }
          for (int64_t t = t1 - 1; t >= t0; --t) {
            const double* Rt = &segment[(t - t0) * L * E];
            const double* Nn = &Nt[t * L];
            const double* q = &Q[t * L];
            const double* v = &V[t * E];
            for (int64_t e = 0; e < E; ++e)
              Gt[e] = load_as_double(g.grad_context, p.dtype, off4(g.grad_context_stride, b, h, t, e));
            double s = eps;
            for (int64_t l = 0; l < L; ++l) s += q[l];
            double gw_dot_w = 0.0;
            for (int64_t l = 0; l < L; ++l) {
              w[l] = q[l] / s;
              double acc = 0.0;
              for (int64_t e = 0; e < E; ++e) acc += Gt[e] * Rt[l * E + e];
              gw[l] = acc / (Nn[l] + eps);  // sum_e G[e] X[l,e]
              gw_dot_w += gw[l] * w[l];
            }
            for (int64_t l = 0; l < L; ++l) {
              double av = 0.0, ar = 0.0;
              for (int64_t e = 0; e < E; ++e) {
                av += A[l * E + e] * v[e];
                ar += A[l * E + e] * Rt[l * E + e];
              }
              double dq = (gw[l] - gw_dot_w) / s + av + Bn[l];
              store_from_double(g.grad_q, p.dtype, off4(g.grad_q_stride, b, h, t, l), dq);
              da_acc[h * L + l] += ar + Bn[l] * Nn[l];
            }
            double* dv = &dv_acc[((b * Hv + hv) * T + t) * E];
            for (int64_t l = 0; l < L; ++l)
              for (int64_t e = 0; e < E; ++e) dv[e] += A[l * E + e] * q[l];
            // A_t = D_t + a ⊙ A_{t+1},  B_t = Dn_t + a ⊙ B_{t+1}
            for (int64_t l = 0; l < L; ++l) {
              double inv = 1.0 / (Nn[l] + eps);
              for (int64_t e = 0; e < E; ++e) A[l * E + e] = Gt[e] * w[l] * inv + a[l] * A[l * E + e];
              Bn[l] = -w[l] * gw[l] * inv + a[l] * Bn[l];
            }
          }
        }
        for (int64_t l = 0; l < L; ++l) {
          if (g.grad_rho0)
            for (int64_t e = 0; e < E; ++e)
              store_from_double(g.grad_rho0, p.state_dtype, off4(g.grad_rho0_stride, b, h, l, e), A[l * E + e]);
          if (g.grad_rho_norm0)
            store_from_double(g.grad_rho_norm0, p.state_dtype, off3(g.grad_rho_norm0_stride, b, h, l), Bn[l]);
        }
      }
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hv = 0; hv < Hv; ++hv)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = 0; e < E; ++e)
            store_from_double(g.grad_v, p.dtype, off4(g.grad_v_stride, b, hv, t, e),
                              dv_acc[((b * Hv + hv) * T + t) * E + e]);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        store_from_double(g.grad_decay, p.decay_dtype, off2(g.grad_decay_stride, h, l), da_acc[h * L + l]);
  }
};

}  // namespace

const BackendImpl& reference_backend() {
  static const ReferenceBackend backend;
  return backend;
}

}  // namespace rhoscan::detail
