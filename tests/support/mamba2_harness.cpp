#include "support/mamba2_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace replayssm::test::m2 {

std::vector<DtypePair> dtype_pairs() {
  std::vector<DtypePair> v;
  for (DType s : {DType::f32, DType::bf16, DType::f16})
    for (DType a : {DType::f32, DType::bf16, DType::f16}) v.push_back({s, a});
  v.push_back({DType::f64, DType::f64});
  return v;
}

static std::string short_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    default: return "other";
  }
}
std::string pair_name(DtypePair p) { return "state_" + short_name(p.state) + "_act_" + short_name(p.act); }

Tol tolerance(DtypePair p) {
  // Outputs are rounded to the activation dtype (bf16: 2^-9 relative, f16: 2^-11). A 16-bit state
  // (rounded at every classic step / every flush) drifts from the emulated truth by one-ulp rounding
  // flips (bf16 2^-8, f16 2^-11) that compound over flushes: observed up to ~1e-2 for bf16.
  // f64 tensors still hold delta in the fp32 dt_ring and use fp32 weights, hence 1e-6 not 1e-12.
  double out = 1e-5, st = 1e-5;
  if (p.act == DType::f64) out = st = 1e-6;
  if (p.act == DType::bf16) out = 1e-2;
  if (p.act == DType::f16) out = 2e-3;
  if (p.state == DType::bf16) { st = 2e-2; out = std::max(out, 2e-2); }
  if (p.state == DType::f16) { st = 2e-3; out = std::max(out, 2e-3); }
  return {out, st};
}

SimWeights sim_weights(const Mamba2Geometry& geo, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  SimWeights sw{HostTensor(DType::f32, {geo.heads}), HostTensor(DType::f32, {geo.heads}),
                HostTensor(DType::f32, {geo.heads}), {}};
  sw.model.geo = geo;
  for (int h = 0; h < geo.heads; ++h) {
    sw.A.set({h}, double(float(-std::exp(unit(rng)))));
    sw.dt_bias.set({h}, double(float(0.5 * unit(rng))));
    sw.D.set({h}, double(float(unit(rng))));
    sw.model.A.push_back(sw.A.at({h}));
    sw.model.dt_bias.push_back(sw.dt_bias.at({h}));
    sw.model.D.push_back(sw.D.at({h}));
  }
  return sw;
}

Problem::Problem(const Config& s_) : s(s_), rng(s_.seed) {
  const Mamba2Geometry& g = s.geo;
  model.geo = g;
  A = HostTensor(DType::f32, {g.heads});
  dt_bias = HostTensor(DType::f32, {g.heads});
  D = HostTensor(DType::f32, {g.heads});
  std::uniform_real_distribution<double> u(-1.0, 1.5);
  for (int h = 0; h < g.heads; ++h) A.set_flat(h, -std::exp(u(rng)));  // A = -exp(A_log)
  dt_bias.fill_uniform(rng, -1.0, 0.5);
  D.fill_uniform(rng, 0.5, 1.5);
  model.A = A.to_f64();
  if (s.bias) model.dt_bias = dt_bias.to_f64();
  if (s.skip) model.D = D.to_f64();
  model.dt_softplus = true;
  // Distinct random slots for the rows; padding rows at random positions.
  std::vector<int> pool(size_t(s.slots));
  for (int i = 0; i < s.slots; ++i) pool[size_t(i)] = i;
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int> rows(size_t(s.rows));
  for (int r = 0; r < s.rows; ++r) rows[size_t(r)] = r < s.padding_rows ? -1 : pool[size_t(r)];
  std::shuffle(rows.begin(), rows.end(), rng);
  set_slots(rows);
}

void Problem::set_slots(const std::vector<int>& v) {
  slot_of_row = v;
  slot_idx = i32_tensor(v);
}

void Problem::new_tokens(int n) {
  const Mamba2Geometry& g = s.geo;
  const DType act = s.dt.act;
  // Token-major tensors with a padded token stride, as slices of a packed conv output would be.
  x = HostTensor(act, {n, g.heads, g.headdim}, s.pad);
  dt = HostTensor(s.dt_f32 ? DType::f32 : act, {n, g.heads}, s.pad);
  B = HostTensor(act, {n, g.groups, g.dstate}, s.pad);
  C = HostTensor(act, {n, g.groups, g.dstate}, s.pad);
  x.fill_uniform(rng, -1.0, 1.0);
  dt.fill_uniform(rng, -4.0, 1.0);
  B.fill_uniform(rng, -1.0, 1.0);
  C.fill_uniform(rng, -1.0, 1.0);
  if (s.gate) {
    z = HostTensor(act, {n, g.heads, g.headdim}, s.pad);
    z.fill_uniform(rng, -2.0, 2.0);
  } else {
    z = HostTensor();
  }
  out = HostTensor(act, {n, g.heads, g.headdim}, s.pad);
  out.fill(kSentinel);
}

mamba2::TokenInputs Problem::inputs() const {
  mamba2::TokenInputs in;
  in.x = x.view(); in.dt = dt.view(); in.B = B.view(); in.C = C.view();
  if (s.gate) in.z = z.view();
  return in;
}

mamba2::Weights Problem::weights() const {
  mamba2::Weights w;
  w.A = A.view();
  if (s.bias) w.dt_bias = dt_bias.view();
  if (s.skip) w.D = D.view();
  w.dt_softplus = true;
  return w;
}

reference::Mamba2Tokens Problem::ref_tokens() const {
  reference::Mamba2Tokens t;
  t.tokens = int(x.shape()[0]);
  t.x = x.to_f64(); t.dt = dt.to_f64(); t.B = B.to_f64(); t.C = C.to_f64();
  if (s.gate) t.z = z.to_f64();
  return t;
}

// Pools are dense within a slot: address slot elements directly (HostTensor::flat is per element).
static uint8_t* slot_ptr(const HostTensor& t, int slot) {
  return const_cast<uint8_t*>(t.bytes().data()) + int64_t(slot) * t.view().stride[0] * dtype_size(t.dtype());
}

void Problem::make_state() {
  const Mamba2Geometry& g = s.geo;
  state = HostTensor(s.dt.state, {s.slots, g.heads, g.headdim, g.dstate}, s.pad);
  state.fill_bytes(0x7f);  // padding bytes get a fixed pattern too
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const size_t per = model.state_size();
  const int es = dtype_size(s.dt.state);
  for (int sl = 0; sl < s.slots; ++sl) {
    uint8_t* b = slot_ptr(state, sl);
    for (size_t i = 0; i < per; ++i) store_from_f64(b + i * es, s.dt.state, u(rng));
  }
}

void Problem::make_replay_cache(int L) {
  const Mamba2Geometry& g = s.geo;
  make_state();
  // Ring entries beyond the cursor are never valid: NaN makes any stray read visible.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  x_ring = HostTensor(s.dt.act, {s.slots, g.heads, L, g.headdim}, s.pad);
  dt_ring = HostTensor(DType::f32, {s.slots, g.heads, L}, s.pad);
  B_ring = HostTensor(s.dt.act, {s.slots, g.groups, L, g.dstate}, s.pad);
  x_ring.fill(nan); dt_ring.fill(nan); B_ring.fill(nan);
  cursor = HostTensor(DType::i32, {s.slots});
  cursor.fill(0);
}

void Problem::make_spec_cache(const SpecConfig& spec) {
  make_replay_cache(spec.ring_len());
  cursor = HostTensor(DType::i32, {s.slots, 2});
  cursor.fill(0);
}

mamba2::ReplayCache Problem::replay_cache() const {
  return {state.view(), x_ring.view(), dt_ring.view(), B_ring.view(), cursor.view()};
}
mamba2::SpecCache Problem::spec_cache() const {
  return {state.view(), x_ring.view(), dt_ring.view(), B_ring.view(), cursor.view()};
}

reference::Mamba2States Problem::ref_states() const {
  reference::Mamba2States st(model, s.slots);
  for (int sl = 0; sl < s.slots; ++sl) {
    const std::vector<double> v = slot_state(sl);
    std::copy(v.begin(), v.end(), st.slot(sl));
  }
  return st;
}

std::vector<double> Problem::slot_state(int slot) const {
  const size_t per = model.state_size();
  const int es = dtype_size(state.dtype());
  const uint8_t* b = slot_ptr(state, slot);
  std::vector<double> v(per);
  for (size_t i = 0; i < per; ++i) v[i] = load_as_f64(b + i * es, state.dtype());
  return v;
}

void Problem::set_slot_state(int slot, const std::vector<double>& v) {
  const size_t per = model.state_size();
  const int es = dtype_size(state.dtype());
  uint8_t* b = slot_ptr(state, slot);
  for (size_t i = 0; i < per; ++i) store_from_f64(b + i * es, state.dtype(), v[i]);
}

HostTensor i32_tensor(const std::vector<int>& v) {
  HostTensor t(DType::i32, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set_flat(int64_t(i), v[i]);
  return t;
}
HostTensor i32_tensor(const std::vector<int>& v, int64_t rows, int64_t cols) {
  if (int64_t(v.size()) != rows * cols) throw std::invalid_argument("i32_tensor: size mismatch");
  HostTensor t(DType::i32, {rows, cols});
  for (size_t i = 0; i < v.size(); ++i) t.set_flat(int64_t(i), v[i]);
  return t;
}
std::vector<int> i32_values(const HostTensor& t) {
  std::vector<int> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = int(t.flat(i));
  return v;
}

double rel_err(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) throw std::invalid_argument("rel_err: size mismatch");
  if (ref.empty()) return 0.0;
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double rms = std::sqrt(ss / double(ref.size())) + 1e-30;
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - ref[i]);
    if (!std::isfinite(d)) return INFINITY;
    e = std::max(e, d / (std::fabs(ref[i]) + rms));
  }
  return e;
}

std::vector<double> gather_tokens(const std::vector<double>& all, const std::vector<int>& toks, int64_t per) {
  std::vector<double> v;
  v.reserve(toks.size() * size_t(per));
  for (int t : toks) v.insert(v.end(), all.begin() + int64_t(t) * per, all.begin() + int64_t(t + 1) * per);
  return v;
}

bool sentinel_kept(const HostTensor& out, const std::vector<int>& toks) {
  const int64_t per = out.numel() / std::max<int64_t>(out.shape()[0], 1);
  for (int t : toks)
    for (int64_t i = 0; i < per; ++i)
      if (out.flat(int64_t(t) * per + i) != kSentinel) return false;
  return true;
}

std::vector<uint8_t> slot_bytes(const HostTensor& pool, int slot) {
  const TensorView& v = pool.view();
  int64_t per = 1;
  for (int i = 1; i < v.ndim; ++i) per *= v.shape[i];
  const int64_t es = dtype_size(v.dtype);
  const uint8_t* b = pool.bytes().data() + int64_t(slot) * v.stride[0] * es;
  return std::vector<uint8_t>(b, b + per * es);
}

}  // namespace replayssm::test::m2
