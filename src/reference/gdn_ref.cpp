// Float64 reference of the Gated DeltaNet step: plain loops, every value read through
// load_as_f64, no vectorisation or reassociation tricks, so that it is obviously the formula.
#include "replayssm/reference/gdn.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "replayssm/error.hpp"

namespace replayssm::reference::gdn {
namespace {

int64_t offset(const TensorView& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0;
  int d = 0;
  for (int64_t i : idx) off += i * t.stride[d++];
  return off;
}
double get(const TensorView& t, std::initializer_list<int64_t> idx) {
  return load_as_f64(static_cast<const char*>(t.data) + offset(t, idx) * dtype_size(t.dtype), t.dtype);
}
void put(const TensorView& t, std::initializer_list<int64_t> idx, double v) {
  store_from_f64(static_cast<char*>(t.data) + offset(t, idx) * dtype_size(t.dtype), t.dtype, v);
}
int32_t get_i32(const TensorView& t, int64_t i) { return static_cast<const int32_t*>(t.data)[i * t.stride[0]]; }

void need(bool ok, const char* arg, const std::string& msg) {
  if (!ok) throw Error(std::string("reference.") + arg, msg);
}

void run(const RefArgs& A, bool sequence) {
  const GdnGeometry& geo = A.geo;
  geo.validate("geo");
  const int H = geo.k_heads, HV = geo.v_heads, K = geo.head_k_dim, V = geo.head_v_dim, vpk = HV / H;
  need(A.slot_idx.ndim == 1 && A.slot_idx.dtype == DType::i32, "slot_idx", "expected [rows] int32");
  const int64_t rows = A.slot_idx.shape[0];
  const int64_t tokens = A.in.q.ndim == 3 ? A.in.q.shape[0] : -1;
  need(A.in.q.ndim == 3 && A.in.q.shape[1] == H && A.in.q.shape[2] == K, "in.q", "expected [tokens, H, K]");
  need(A.in.k.ndim == 3 && A.in.k.shape[0] == tokens && A.in.k.shape[1] == H && A.in.k.shape[2] == K, "in.k", "expected [tokens, H, K]");
  need(A.in.v.ndim == 3 && A.in.v.shape[0] == tokens && A.in.v.shape[1] == HV && A.in.v.shape[2] == V, "in.v", "expected [tokens, HV, V]");
  // Per-channel decay gates (Kimi-Delta-style): a [tokens, HV, K], dt_bias [HV] or [HV, K].
  const bool per_channel = A.in.a.ndim == 3;
  if (per_channel)
    need(A.in.a.shape[0] == tokens && A.in.a.shape[1] == HV && A.in.a.shape[2] == K, "in.a", "expected [tokens, HV, K]");
  else
    need(A.in.a.ndim == 2 && A.in.a.shape[0] == tokens && A.in.a.shape[1] == HV, "in.a", "expected [tokens, HV] or [tokens, HV, K]");
  need(A.in.b.ndim == 2 && A.in.b.shape[0] == tokens && A.in.b.shape[1] == HV, "in.b", "expected [tokens, HV]");
  need(A.out.ndim == 3 && A.out.shape[0] == tokens && A.out.shape[1] == HV && A.out.shape[2] == V, "out", "expected [tokens, HV, V]");
  need(A.state.ndim == 4 && A.state.shape[1] == HV && A.state.shape[2] == V && A.state.shape[3] == K, "state", "expected [slots, HV, V, K]");
  need(A.w.A_log.ndim == 1 && A.w.A_log.shape[0] == HV, "w.A_log", "expected [HV]");
  const bool bias_ch = A.w.dt_bias.ndim == 2;
  need((A.w.dt_bias.ndim == 1 && A.w.dt_bias.shape[0] == HV) ||
           (per_channel && bias_ch && A.w.dt_bias.shape[0] == HV && A.w.dt_bias.shape[1] == K),
       "w.dt_bias", "expected [HV] (or [HV, K] with per-channel gates)");
  if (sequence)
    need(A.query_start_loc.ndim == 1 && A.query_start_loc.shape[0] == rows + 1 && A.query_start_loc.dtype == DType::i32,
         "query_start_loc", "expected [rows + 1] int32");
  else
    need(tokens == rows, "in.q", "decode_step takes one token per row");
  if (A.state_trace.defined())
    need(A.state_trace.ndim == 4 && A.state_trace.shape[0] == tokens && A.state_trace.shape[1] == HV &&
             A.state_trace.shape[2] == V && A.state_trace.shape[3] == K, "state_trace", "expected [tokens, HV, V, K]");
  const double scale = A.w.scale != 0.f ? double(A.w.scale) : 1.0 / std::sqrt(double(K));

  std::vector<double> q(K), k(K), S(size_t(V) * K), al(K), sd(K);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t slot = get_i32(A.slot_idx, r);
    if (slot < 0) continue;
    need(slot < A.state.shape[0], "slot_idx", "slot " + std::to_string(slot) + " out of range");
    const int64_t t0 = sequence ? get_i32(A.query_start_loc, r) : r;
    const int64_t t1 = sequence ? get_i32(A.query_start_loc, r + 1) : r + 1;
    need(0 <= t0 && t0 <= t1 && t1 <= tokens, "query_start_loc", "window out of range");
    for (int hv = 0; hv < HV; ++hv) {
      const int h = hv / vpk;
      for (int i = 0; i < V; ++i)
        for (int c = 0; c < K; ++c) S[size_t(i) * K + c] = get(A.state, {slot, hv, i, c});
      for (int64_t t = t0; t < t1; ++t) {
        double nq = 0, nk = 0;
        for (int c = 0; c < K; ++c) {
          q[c] = get(A.in.q, {t, h, c});
          k[c] = get(A.in.k, {t, h, c});
          nq += q[c] * q[c];
          nk += k[c] * k[c];
        }
        const double rq = A.w.qk_l2norm ? 1.0 / std::sqrt(nq + 1e-6) : 1.0;
        const double rk = A.w.qk_l2norm ? 1.0 / std::sqrt(nk + 1e-6) : 1.0;
        double kq = 0;
        for (int c = 0; c < K; ++c) {
          q[c] = q[c] * rq * scale;
          k[c] = k[c] * rk;
          kq += k[c] * q[c];
        }
        if (per_channel) {
          // S' = S diag(alpha) (column c decays by alpha_c); d = beta (v - S' k); S = S' + d k^T; o = S q.
          double beta = 0;
          for (int c = 0; c < K; ++c) {
            const double bias = bias_ch ? get(A.w.dt_bias, {hv, c}) : get(A.w.dt_bias, {hv});
            const Gates gc = gates(get(A.in.a, {t, hv, c}), get(A.in.b, {t, hv}), get(A.w.A_log, {hv}), bias);
            al[c] = gc.alpha;
            beta = gc.beta;
          }
          for (int i = 0; i < V; ++i) {
            double* s = &S[size_t(i) * K];
            double sk = 0, sq = 0;
            for (int c = 0; c < K; ++c) {
              sd[c] = al[c] * s[c];
              sk += sd[c] * k[c];
              sq += sd[c] * q[c];
            }
            const double d = beta * (get(A.in.v, {t, hv, i}) - sk);
            put(A.out, {t, hv, i}, sq + d * kq);
            const double du = round_to(A.update_round, d);
            for (int c = 0; c < K; ++c) s[c] = sd[c] + du * round_to(A.update_round, k[c]);
          }
        } else {
        const Gates gt = gates(get(A.in.a, {t, hv}), get(A.in.b, {t, hv}), get(A.w.A_log, {hv}), get(A.w.dt_bias, {hv}));
        for (int i = 0; i < V; ++i) {
          double* s = &S[size_t(i) * K];
          double sk = 0, sq = 0;
          for (int c = 0; c < K; ++c) { sk += s[c] * k[c]; sq += s[c] * q[c]; }
          const double d = gt.beta * (get(A.in.v, {t, hv, i}) - gt.alpha * sk);
          put(A.out, {t, hv, i}, gt.alpha * sq + d * kq);
          const double du = round_to(A.update_round, d);
          for (int c = 0; c < K; ++c) s[c] = gt.alpha * s[c] + du * round_to(A.update_round, k[c]);
        }
        }
        // The carried state is what the pool holds: round it to the pool's dtype.
        for (int i = 0; i < V; ++i)
          for (int c = 0; c < K; ++c) {
            double& x = S[size_t(i) * K + c];
            x = round_to(A.state.dtype, x);
            if (A.state_trace.defined()) put(A.state_trace, {t, hv, i, c}, x);
          }
      }
      for (int i = 0; i < V; ++i)
        for (int c = 0; c < K; ++c) put(A.state, {slot, hv, i, c}, S[size_t(i) * K + c]);
    }
  }
}

}  // namespace

Gates gates(double a, double b, double A_log, double dt_bias) {
  const double u = a + dt_bias;
  const double sp = u > 20.0 ? u : std::log1p(std::exp(u));
  Gates g;
  g.g = -std::exp(A_log) * sp;
  g.alpha = std::exp(g.g);
  g.beta = 1.0 / (1.0 + std::exp(-b));
  return g;
}

void decode_step(const RefArgs& args) { run(args, false); }
void decode_sequence(const RefArgs& args) { run(args, true); }

}  // namespace replayssm::reference::gdn
