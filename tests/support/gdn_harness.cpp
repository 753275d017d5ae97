#include "support/gdn_harness.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace replayssm::test::gdn {

replayssm::gdn::Weights Weights::view() const {
  replayssm::gdn::Weights w;
  w.A_log = A_log.view();
  w.dt_bias = dt_bias.view();
  w.scale = scale;
  w.qk_l2norm = qk_l2norm;
  return w;
}

Weights make_weights(const GdnGeometry& geo, std::mt19937_64& rng) {
  Weights w{HostTensor(DType::f32, {geo.v_heads}), HostTensor(DType::f32, {geo.v_heads})};
  std::uniform_real_distribution<double> A(0.0, std::log(16.0)), dt(std::log(1e-3), std::log(0.1));
  for (int h = 0; h < geo.v_heads; ++h) {
    w.A_log.set({h}, A(rng));
    const double d = std::exp(dt(rng));
    w.dt_bias.set({h}, std::log(std::expm1(d)));  // inverse softplus
  }
  return w;
}

replayssm::gdn::TokenInputs Tokens::view() const {
  const int64_t H = geo.k_heads, HV = geo.v_heads, K = geo.head_k_dim, V = geo.head_v_dim;
  const TensorView& p = qkv.view();
  const int64_t T = p.shape[0], rs = p.stride[0], es = dtype_size(p.dtype);
  char* base = static_cast<char*>(p.data);
  replayssm::gdn::TokenInputs in;
  in.q = TensorView::strided(base, p.dtype, {T, H, K}, {rs, K, 1});
  in.k = TensorView::strided(base + H * K * es, p.dtype, {T, H, K}, {rs, K, 1});
  in.v = TensorView::strided(base + 2 * H * K * es, p.dtype, {T, HV, V}, {rs, V, 1});
  in.a = a.view();
  in.b = b.view();
  return in;
}

Tokens make_tokens(const GdnGeometry& geo, DType act, int64_t tokens, std::mt19937_64& rng) {
  const int64_t width = 2LL * geo.k_heads * geo.head_k_dim + int64_t(geo.v_heads) * geo.head_v_dim;
  Tokens t{geo, HostTensor(act, {tokens, width}, kRowPad), HostTensor(act, {tokens, geo.v_heads}),
           HostTensor(act, {tokens, geo.v_heads})};
  t.qkv.fill_bytes(0xff);  // padding is NaN: reading it shows
  t.qkv.fill_uniform(rng, -1.0, 1.0);
  t.a.fill_uniform(rng, -2.0, 2.0);
  t.b.fill_uniform(rng, -3.0, 3.0);
  return t;
}

void make_per_channel(Tokens& t, std::mt19937_64& rng) {
  t.a = HostTensor(t.a.dtype(), {t.tokens(), t.geo.v_heads, t.geo.head_k_dim});
  t.a.fill_uniform(rng, -2.0, 2.0);
}
void make_per_channel(Weights& w, const GdnGeometry& geo, std::mt19937_64& rng) {
  w.dt_bias = HostTensor(DType::f32, {geo.v_heads, geo.head_k_dim});
  std::uniform_real_distribution<double> dt(std::log(1e-3), std::log(0.1));
  for (int h = 0; h < geo.v_heads; ++h)
    for (int c = 0; c < geo.head_k_dim; ++c) w.dt_bias.set({h, c}, std::log(std::expm1(std::exp(dt(rng)))));
}
void make_per_channel(ReplayCaches& c, const GdnGeometry& geo) {
  const TensorView& g = c.g_ring.view();
  c.g_ring = HostTensor(g.dtype, {g.shape[0], geo.v_heads, g.shape[2], geo.head_k_dim}, kSlotPad / 2);
  c.g_ring.fill_bytes(0xff);
}

TensorView slice(TensorView v, int64_t t0, int64_t n) {
  v.data = static_cast<char*>(v.data) + t0 * v.stride[0] * dtype_size(v.dtype);
  v.shape[0] = n;
  return v;
}
replayssm::gdn::TokenInputs slice(const replayssm::gdn::TokenInputs& in, int64_t t0, int64_t n) {
  return {slice(in.q, t0, n), slice(in.k, t0, n), slice(in.v, t0, n), slice(in.a, t0, n), slice(in.b, t0, n)};
}

HostTensor make_state(const GdnGeometry& geo, DType dtype, int64_t slots, std::mt19937_64& rng) {
  HostTensor s(dtype, {slots, geo.v_heads, geo.head_v_dim, geo.head_k_dim}, kSlotPad);
  s.fill_bytes(0x5a);
  s.fill_uniform(rng, -0.5, 0.5);
  return s;
}

HostTensor i32(const std::vector<int32_t>& v) {
  HostTensor t(DType::i32, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set({int64_t(i)}, v[i]);
  return t;
}
HostTensor i32_2d(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
  HostTensor t(DType::i32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.set_flat(i, v[size_t(i)]);
  return t;
}

HostTensor make_out(const GdnGeometry& geo, DType dtype, int64_t tokens, double sentinel) {
  HostTensor o(dtype, {tokens, geo.v_heads, geo.head_v_dim});
  o.fill(sentinel);
  return o;
}

replayssm::gdn::ReplayCache ReplayCaches::view() const {
  return {checkpoint.view(), d_ring.view(), k_ring.view(), g_ring.view(), cursor.view()};
}
replayssm::gdn::SpecCache ReplayCaches::spec_view() const {
  return {checkpoint.view(), d_ring.view(), k_ring.view(), g_ring.view(), cursor.view()};
}

ReplayCaches make_caches(const GdnGeometry& geo, DType state, DType ring, int64_t slots, int R, int cursor_cols,
                         std::mt19937_64& rng) {
  const DType g = state == DType::f64 ? DType::f64 : DType::f32;
  ReplayCaches c{make_state(geo, state, slots, rng),
                 HostTensor(ring, {slots, geo.v_heads, R, geo.head_v_dim}, kSlotPad),
                 HostTensor(ring, {slots, geo.k_heads, R, geo.head_k_dim}, kSlotPad),
                 HostTensor(g, {slots, geo.v_heads, R}, kSlotPad / 2),
                 cursor_cols == 1 ? HostTensor(DType::i32, {slots}) : HostTensor(DType::i32, {slots, 2})};
  c.d_ring.fill_bytes(0xff);
  c.k_ring.fill_bytes(0xff);
  c.g_ring.fill_bytes(0xff);
  c.cursor.fill(0);
  return c;
}

replayssm::reference::gdn::RefArgs ref_args(const GdnGeometry& geo, const replayssm::gdn::TokenInputs& in,
                                            const Weights& w, HostTensor& state, const HostTensor& slot_idx,
                                            HostTensor& out) {
  replayssm::reference::gdn::RefArgs r;
  r.geo = geo;
  r.in = in;
  r.w = w.view();
  r.state = state.view();
  r.slot_idx = slot_idx.view();
  r.out = out.view();
  return r;
}

HostTensor to_f64_pool(const HostTensor& state) {
  HostTensor t(DType::f64, state.shape());
  t.from_f64(state.to_f64());
  return t;
}

HostTensor clone(const HostTensor& t) {
  HostTensor c(t.dtype(), t.shape());
  c.from_f64(t.to_f64());
  return c;
}

static int64_t slot_elems(const HostTensor& t) { return t.numel() / t.shape()[0]; }

void round_slot(HostTensor& state, int slot, DType dtype) {
  const int64_t n = slot_elems(state);
  for (int64_t i = 0; i < n; ++i) state.set_flat(slot * n + i, round_to(dtype, state.flat(slot * n + i)));
}

std::vector<double> slot_values(const HostTensor& t, int slot) {
  const int64_t n = slot_elems(t);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.flat(slot * n + i);
  return v;
}

std::vector<double> rows_values(const HostTensor& out, const std::vector<int>& rows) {
  std::vector<double> v;
  for (int r : rows) {
    auto s = slot_values(out, r);
    v.insert(v.end(), s.begin(), s.end());
  }
  return v;
}

void copy_slot(const HostTensor& src, int src_slot, HostTensor& dst, int dst_slot) {
  const int64_t n = slot_elems(src);
  if (slot_elems(dst) != n) throw std::invalid_argument("copy_slot: slot sizes differ");
  for (int64_t i = 0; i < n; ++i) dst.set_flat(dst_slot * n + i, src.flat(src_slot * n + i));
}

double max_err(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) throw std::invalid_argument("max_err: size mismatch");
  double e = 0, m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e = std::max(e, std::fabs(got[i] - ref[i]));
    m = std::max(m, std::fabs(ref[i]));
  }
  return m > 0 ? e / m : e;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::bf16: return 1.0 / 256;
    case DType::f16: return 1.0 / 2048;
    case DType::f32: return 6e-8;
    default: return 1.2e-16;
  }
}

}  // namespace replayssm::test::gdn
