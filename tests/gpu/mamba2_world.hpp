// Test world for the CUDA Mamba-2 ops: host tensors (paged, strided, random), their device copies,
// and a float64 oracle that tracks the same caches. One step runs the public API on the CUDA
// tensors and on the host copies (CPU backend), and the oracle, and reports the errors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "device_tensor.hpp"
#include "late_writer.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/mamba2.hpp"
#include "support/host_tensor.hpp"

namespace replayssm::test {

using HT = HostTensor;
using HTP = std::unique_ptr<HostTensor>;

inline HTP mk(DType t, std::vector<int64_t> shape, int64_t pad = 0) {
  return std::make_unique<HostTensor>(t, std::move(shape), pad);
}

inline double sp64(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }

struct Errs {
  double out_gpu_ref = 0, out_gpu_cpu = 0;  // rel L2 over live rows
  bool pad_untouched = true, finite = true;
};

inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct WorldConfig {
  Mamba2Geometry geo{8, 64, 128, 2};
  DType sd = DType::f32, ad = DType::bf16;
  int L = 16;  // 0: classic
  int rows = 8, slots = 0;  // slots 0: 2*rows + 3
  int pad_rows = 1;         // extra padding rows (slot -1) mixed in
  bool gate = true, dt_f32 = false, bias = true, skip = true;
  mamba2::Route route = mamba2::Route::output_only;
  uint64_t seed = 1;
  // The ops' pdl flag (DecodeArgs::pdl, ReplayDecodeArgs::pdl), on a stream of its own: every step's device inputs
  // (the replay op: also the cursors and the rings) are poisoned (NaN bytes) and written by a producer kernel
  // (late_writer.hpp) that lets the op start first and writes them pdl_spin_ns later.
  bool pdl = false;
  long long pdl_spin_ns = 100000;
};

// The oracle's per-slot caches (float64, holding exactly the values the kernels store).
struct Oracle {
  std::vector<double> S;               // [slots][H][P][N] checkpoint (or classic state)
  std::vector<double> xr, dtr, Br;     // [slots][H][L][P], [slots][H][L], [slots][G][L][N]
  std::vector<int> cur;                // [slots]
};

class World {
 public:
  WorldConfig c;
  int H, P, N, G, L, R, slots;
  std::mt19937_64 rng;
  HTP A, dtb, D, state, xr, dtr, Br, cursor, sidx;
  std::unique_ptr<DeviceTensor> dA, ddtb, dD, dstate, dxr, ddtr, dBr, dcursor, dsidx;
  std::vector<int> slot_of_row;  // per row (R rows incl. padding)
  Oracle o;

  explicit World(const WorldConfig& cfg) : c(cfg), rng(cfg.seed) {
    H = c.geo.heads; P = c.geo.headdim; N = c.geo.dstate; G = c.geo.groups; L = std::max(c.L, 1);
    R = c.rows + c.pad_rows;
    slots = c.slots > 0 ? c.slots : 2 * c.rows + 3;
    A = mk(DType::f32, {H}); dtb = mk(DType::f32, {H}); D = mk(DType::f32, {H});
    for (int h = 0; h < H; ++h) {
      A->set_flat(h, -std::exp(std::uniform_real_distribution<double>(-1.5, 1.0)(rng)));
    }
    dtb->fill_uniform(rng, -0.5, 0.5);
    D->fill_uniform(rng, -1, 1);
    // paged pools: every slot stride padded
    state = mk(c.sd, {slots, H, P, N}, 256);
    state->fill_uniform(rng, -1, 1);
    xr = mk(c.ad, {slots, H, L, P}, 64);
    xr->fill_uniform(rng, -1, 1);
    dtr = mk(DType::f32, {slots, H, L}, 8);
    dtr->fill_uniform(rng, 0.05, 1.2);
    Br = mk(c.ad, {slots, G, L, N}, 32);
    Br->fill_uniform(rng, -1, 1);
    cursor = mk(DType::i32, {slots});
    for (int s = 0; s < slots; ++s) cursor->set_flat(s, double(std::uniform_int_distribution<int>(0, L - 1)(rng)));
    // shuffled distinct slots for the live rows, padding rows (-1) mixed in
    std::vector<int> perm(slots);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    slot_of_row.assign(R, -1);
    std::vector<int> pos(R);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int i = 0; i < c.rows; ++i) slot_of_row[pos[i]] = perm[i];
    sidx = mk(DType::i32, {R});
    for (int r = 0; r < R; ++r) sidx->set_flat(r, slot_of_row[r]);

    o.S = state->to_f64(); o.xr = xr->to_f64(); o.dtr = dtr->to_f64(); o.Br = Br->to_f64();
    o.cur.resize(slots);
    for (int s = 0; s < slots; ++s) o.cur[s] = int(cursor->flat(s));

    dA = std::make_unique<DeviceTensor>(*A); ddtb = std::make_unique<DeviceTensor>(*dtb);
    dD = std::make_unique<DeviceTensor>(*D); dstate = std::make_unique<DeviceTensor>(*state);
    dxr = std::make_unique<DeviceTensor>(*xr); ddtr = std::make_unique<DeviceTensor>(*dtr);
    dBr = std::make_unique<DeviceTensor>(*Br); dcursor = std::make_unique<DeviceTensor>(*cursor);
    dsidx = std::make_unique<DeviceTensor>(*sidx);
  }

  // Per-step inputs (strided rows), host and device.
  struct Inputs {
    HTP x, dt, B, C, z, out;
    std::unique_ptr<DeviceTensor> dx, ddt, dB, dC, dz, dout;
  };
  Inputs make_inputs() {
    Inputs in;
    in.x = mk(c.ad, {R, H, P}, 40);
    in.x->fill_uniform(rng, -1, 1);
    in.dt = mk(c.dt_f32 ? DType::f32 : c.ad, {R, H}, 3);
    in.dt->fill_uniform(rng, -3, 1);
    in.B = mk(c.ad, {R, G, N}, 24);
    in.B->fill_uniform(rng, -1, 1);
    in.C = mk(c.ad, {R, G, N}, 16);
    in.C->fill_uniform(rng, -1, 1);
    if (c.gate) {
      in.z = mk(c.ad, {R, H, P}, 8);
      in.z->fill_uniform(rng, -2, 2);
    }
    in.out = mk(c.ad, {R, H, P}, 8);
    in.out->fill_bytes(0x5a);  // poison
    in.dx = std::make_unique<DeviceTensor>(*in.x); in.ddt = std::make_unique<DeviceTensor>(*in.dt);
    in.dB = std::make_unique<DeviceTensor>(*in.B); in.dC = std::make_unique<DeviceTensor>(*in.C);
    if (c.gate) in.dz = std::make_unique<DeviceTensor>(*in.z);
    in.dout = std::make_unique<DeviceTensor>(*in.out);
    return in;
  }

  mamba2::Weights weights(bool dev) const {
    mamba2::Weights w;
    w.A = dev ? dA->view() : A->view();
    if (c.bias) w.dt_bias = dev ? ddtb->view() : dtb->view();
    if (c.skip) w.D = dev ? dD->view() : D->view();
    return w;
  }
  mamba2::TokenInputs tokens(const Inputs& in, bool dev) const {
    mamba2::TokenInputs t;
    t.x = dev ? in.dx->view() : in.x->view();
    t.dt = dev ? in.ddt->view() : in.dt->view();
    t.B = dev ? in.dB->view() : in.B->view();
    t.C = dev ? in.dC->view() : in.C->view();
    if (c.gate) t.z = dev ? in.dz->view() : in.z->view();
    return t;
  }
  mamba2::ReplayDecodeArgs replay_args(const Inputs& in, bool dev) const {
    mamba2::ReplayDecodeArgs a;
    a.geo = c.geo; a.in = tokens(in, dev); a.w = weights(dev);
    a.cache.checkpoint = dev ? dstate->view() : state->view();
    a.cache.x_ring = dev ? dxr->view() : xr->view();
    a.cache.dt_ring = dev ? ddtr->view() : dtr->view();
    a.cache.B_ring = dev ? dBr->view() : Br->view();
    a.cache.cursor = dev ? dcursor->view() : cursor->view();
    a.slot_idx = dev ? dsidx->view() : sidx->view();
    a.out = dev ? in.dout->view() : in.out->view();
    a.route = c.route;
    return a;
  }
  mamba2::DecodeArgs classic_args(const Inputs& in, bool dev) const {
    mamba2::DecodeArgs a;
    a.geo = c.geo; a.in = tokens(in, dev); a.w = weights(dev);
    a.state = dev ? dstate->view() : state->view();
    a.slot_idx = dev ? dsidx->view() : sidx->view();
    a.out = dev ? in.dout->view() : in.out->view();
    return a;
  }

  // float64 oracle of one step; returns y [R][H][P] (padding rows NaN-free zeros, unused).
  std::vector<double> oracle_step(const Inputs& in, bool classic) {
    const int hpg = H / G;
    const size_t SS = size_t(H) * P * N;
    std::vector<double> y(size_t(R) * H * P, 0.0);
    std::vector<double> S(size_t(P) * N);
    for (int r = 0; r < R; ++r) {
      const int s = slot_of_row[r];
      if (s < 0) continue;
      const int w = classic ? 0 : o.cur[s];
      const bool flush = classic || w == L - 1;
      const bool gemm = flush || c.route == mamba2::Route::state_and_output;
      for (int h = 0; h < H; ++h) {
        const int g = h / hpg;
        double delta = in.dt->at({r, h}) + (c.bias ? dtb->flat(h) : 0.0);
        delta = sp64(delta);
        delta = double(float(delta));  // the ring stores fp32 delta
        const double Ah = A->flat(h);
        double* S0 = o.S.data() + s * SS + size_t(h) * P * N;
        std::vector<double> dk(w + 1), cs(w + 1), sc(w + 1);
        for (int k = 0; k < w; ++k) dk[k] = o.dtr[(size_t(s) * H + h) * L + k];
        dk[w] = delta;
        double acc = 0;
        for (int k = 0; k <= w; ++k) cs[k] = (acc += dk[k]);
        const double cw = cs[w];
        for (int k = 0; k <= w; ++k) sc[k] = dk[k] * std::exp(std::min(Ah * (cw - cs[k]), 0.0));
        const double decay = classic ? std::exp(Ah * delta) : std::exp(std::min(Ah * cw, 0.0));
        // gather the window: X [w+1][P], Bw [w+1][N], and C, as doubles
        std::vector<double> X(size_t(w + 1) * P), Bw(size_t(w + 1) * N), Cv(N), bc(w + 1, 0.0);
        for (int k = 0; k <= w; ++k) {
          for (int p = 0; p < P; ++p)
            X[size_t(k) * P + p] = k < w ? o.xr[((size_t(s) * H + h) * L + k) * P + p] : in.x->at({r, h, p});
          for (int n = 0; n < N; ++n)
            Bw[size_t(k) * N + n] = k < w ? o.Br[((size_t(s) * G + g) * L + k) * N + n] : in.B->at({r, g, n});
        }
        for (int n = 0; n < N; ++n) Cv[n] = in.C->at({r, g, n});
        for (int k = 0; k <= w; ++k)
          for (int n = 0; n < N; ++n) bc[k] += Bw[size_t(k) * N + n] * Cv[n];
        for (int p = 0; p < P; ++p) {
          double yp = 0;
          if (gemm) {
            double* Sp = S.data() + size_t(p) * N;
            const double* S0p = S0 + size_t(p) * N;
            for (int n = 0; n < N; ++n) Sp[n] = decay * S0p[n];
            for (int k = 0; k <= w; ++k) {
              const double f = sc[k] * X[size_t(k) * P + p];
              const double* Bk = Bw.data() + size_t(k) * N;
              for (int n = 0; n < N; ++n) Sp[n] += f * Bk[n];
            }
            for (int n = 0; n < N; ++n) yp += Sp[n] * Cv[n];
          } else {
            const double* S0p = S0 + size_t(p) * N;
            for (int n = 0; n < N; ++n) yp += S0p[n] * Cv[n];
            yp *= decay;
            for (int k = 0; k <= w; ++k) yp += sc[k] * bc[k] * X[size_t(k) * P + p];
          }
          const double xv = X[size_t(w) * P + p];
          if (c.skip) yp += D->flat(h) * xv;
          if (c.gate) {
            const double zv = in.z->at({r, h, p});
            yp *= zv / (1.0 + std::exp(-zv));
          }
          y[(size_t(r) * H + h) * P + p] = yp;
        }
        if (flush) {
          for (size_t i = 0; i < S.size(); ++i) S0[i] = round_to(c.sd, S[i]);
        } else {
          for (int p = 0; p < P; ++p) o.xr[((size_t(s) * H + h) * L + w) * P + p] = X[size_t(w) * P + p];
          o.dtr[(size_t(s) * H + h) * L + w] = delta;
          if (h % hpg == 0)
            for (int n = 0; n < N; ++n) o.Br[((size_t(s) * G + g) * L + w) * N + n] = Bw[size_t(w) * N + n];
        }
      }
    }
    return y;
  }

  void oracle_advance() {
    for (int r = 0; r < R; ++r)
      if (slot_of_row[r] >= 0) o.cur[slot_of_row[r]] = (o.cur[slot_of_row[r]] + 1) % L;
  }

  // Live rows of an out tensor [R][H][P].
  std::vector<double> live(const HostTensor& t) const {
    std::vector<double> v;
    for (int r = 0; r < R; ++r)
      if (slot_of_row[r] >= 0)
        for (int h = 0; h < H; ++h)
          for (int p = 0; p < P; ++p) v.push_back(t.at({r, h, p}));
    return v;
  }
  std::vector<double> live_ref(const std::vector<double>& y) const {
    std::vector<double> v;
    for (int r = 0; r < R; ++r)
      if (slot_of_row[r] >= 0)
        for (int i = 0; i < H * P; ++i) v.push_back(y[size_t(r) * H * P + i]);
    return v;
  }
  bool padding_untouched(const HostTensor& t) const {
    for (int r = 0; r < R; ++r)
      if (slot_of_row[r] < 0)
        for (int h = 0; h < H; ++h)
          for (int p = 0; p < P; ++p) {
            const uint8_t* b = t.bytes().data() + ((r * t.view().stride[0] + h * t.view().stride[1] + p) * dtype_size(t.dtype()));
            for (int i = 0; i < dtype_size(t.dtype()); ++i)
              if (b[i] != 0x5a) return false;
          }
    return true;
  }

  // pdl: the device inputs (replay: and the cursors and rings, which the kernel reads after its wait as well) become
  // NaN bytes; the producer kernel writes the true ones after the op has started.
  std::unique_ptr<BehindProducer> inputs_behind_producer(Inputs& in, bool replay) {
    std::vector<std::pair<void*, size_t>> bufs;
    for (auto* d : {in.dx.get(), in.ddt.get(), in.dB.get(), in.dC.get(), in.dz.get()})
      if (d) bufs.emplace_back(d->data(), d->bytes());
    if (replay)
      for (auto* d : {dcursor.get(), dxr.get(), ddtr.get(), dBr.get()}) bufs.emplace_back(d->data(), d->bytes());
    if (!pdl_stream) pdl_stream = std::make_unique<PdlStream>(true);
    return std::make_unique<BehindProducer>(bufs, c.pdl_spin_ns, pdl_stream->get());
  }
  std::unique_ptr<PdlStream> pdl_stream;  // made by the first pdl step

  // One full step: GPU (public API on CUDA tensors), CPU (same call on host copies), oracle.
  // Then advance cursors on both (replay only).
  Errs step(bool classic, bool with_cpu = true, bool advance = true) {
    Inputs in = make_inputs();
    std::unique_ptr<BehindProducer> producer;  // held until the step's synchronisation below
    if (c.pdl && classic) {
      producer = inputs_behind_producer(in, false);
      auto ca = classic_args(in, true);
      ca.pdl = true;
      mamba2::decode(ca, pdl_stream->get());
    } else if (c.pdl) {
      producer = inputs_behind_producer(in, true);
      auto ra = replay_args(in, true);
      ra.pdl = true;
      mamba2::replay_decode(ra, pdl_stream->get());
    } else if (classic) {
      mamba2::decode(classic_args(in, true));
    } else {
      mamba2::replay_decode(replay_args(in, true));
    }
    cuda_ok(cudaDeviceSynchronize(), "step");
    HTP gout = mk(c.ad, {R, H, P}, 8);
    in.dout->download(*gout);
    Errs e;
    if (with_cpu) {
      if (classic) mamba2::decode(classic_args(in, false));
      else mamba2::replay_decode(replay_args(in, false));
      e.out_gpu_cpu = rel_l2(live(*gout), live(*in.out));
    }
    const auto y = oracle_step(in, classic);
    e.out_gpu_ref = rel_l2(live(*gout), live_ref(y));
    e.pad_untouched = padding_untouched(*gout);
    if (!classic && advance) {
      advance_cursors(dcursor->view(), dsidx->view(), L);
      if (with_cpu) advance_cursors(cursor->view(), sidx->view(), L);
      oracle_advance();
    }
    return e;
  }

  // rel L2 of the GPU checkpoint (live slots) vs the oracle, and vs the CPU copy.
  std::pair<double, double> state_errors(bool with_cpu = true) {
    HTP g = mk(c.sd, {slots, H, P, N}, 256);
    dstate->download(*g);
    const auto gv = g->to_f64(), cv = state->to_f64();
    std::vector<double> a, b, cc;
    const size_t SS = size_t(H) * P * N;
    for (int r = 0; r < R; ++r) {
      const int s = slot_of_row[r];
      if (s < 0) continue;
      for (size_t i = 0; i < SS; ++i) {
        a.push_back(gv[s * SS + i]);
        b.push_back(o.S[s * SS + i]);
        cc.push_back(cv[s * SS + i]);
      }
    }
    return {rel_l2(a, b), with_cpu ? rel_l2(a, cc) : 0.0};
  }
  bool cursors_match() {
    HTP g = mk(DType::i32, {slots});
    dcursor->download(*g);
    for (int s = 0; s < slots; ++s)
      if (int(g->flat(s)) != o.cur[s]) return false;
    return true;
  }
  // Ring entries below each live slot's cursor: GPU vs oracle (exact, they are copies).
  bool rings_match() {
    HTP gx = mk(c.ad, {slots, H, L, P}, 64), gd = mk(DType::f32, {slots, H, L}, 8), gb = mk(c.ad, {slots, G, L, N}, 32);
    dxr->download(*gx); ddtr->download(*gd); dBr->download(*gb);
    for (int r = 0; r < R; ++r) {
      const int s = slot_of_row[r];
      if (s < 0) continue;
      for (int k = 0; k < o.cur[s]; ++k) {
        for (int h = 0; h < H; ++h) {
          if (std::abs(gd->at({s, h, k}) - o.dtr[(size_t(s) * H + h) * L + k]) > 1e-6 * (1 + std::abs(o.dtr[(size_t(s) * H + h) * L + k]))) return false;
          for (int p = 0; p < P; ++p)
            if (gx->at({s, h, k, p}) != o.xr[((size_t(s) * H + h) * L + k) * P + p]) return false;
        }
        for (int g = 0; g < G; ++g)
          for (int n = 0; n < N; ++n)
            if (gb->at({s, g, k, n}) != o.Br[((size_t(s) * G + g) * L + k) * N + n]) return false;
      }
    }
    return true;
  }
};

inline double out_tol(DType ad) { return ad == DType::bf16 ? 1.2e-2 : ad == DType::f16 ? 2e-3 : 1e-4; }
// With fp32 activations a 16-bit checkpoint dominates: the GPU's fp32 fold and the float64 oracle may round a
// state element to neighbouring 16-bit values (seen: 1.6e-4 with a bf16 checkpoint, headdim 37, dstate 64).
inline double out_tol(DType ad, DType sd) {
  const double st = sd == DType::bf16 ? 1e-3 : sd == DType::f16 ? 2e-4 : 0.0;
  return std::max(out_tol(ad), st);
}
inline double state_tol(DType sd) { return sd == DType::bf16 ? 1.2e-2 : sd == DType::f16 ? 2e-3 : 1e-5; }

}  // namespace replayssm::test
