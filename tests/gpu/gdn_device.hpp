// Device twins of the GDN test harness's host tensors (tests/support/gdn_harness.hpp), shared by the GDN GPU
// suites: token inputs, weights and caches whose views point at device copies of the same bytes.
#pragma once
#include <memory>

#include "device_tensor.hpp"
#include "support/gdn_harness.hpp"

namespace replayssm::test::gdn_device {

namespace G = replayssm::gdn;
using gdn::ReplayCaches;
using gdn::Tokens;
using gdn::Weights;

// A host tensor with a device twin.
struct Mir {
  HostTensor h;
  DeviceTensor d;
  explicit Mir(HostTensor x) : h(std::move(x)), d(h) {}
  void up() { d.upload(h); }
  void down() { d.download(h); }
};
// The device view matching a (sub-)view of host tensor h.
inline TensorView dview(const TensorView& hv, const HostTensor& h, const DeviceTensor& d) {
  TensorView v = hv;
  v.data = static_cast<char*>(d.data()) + (static_cast<const uint8_t*>(hv.data) - h.bytes().data());
  v.device = Device::cuda(0);
  return v;
}

struct DevTokens {
  Tokens t;
  DeviceTensor qkv, a, b;
  explicit DevTokens(Tokens x) : t(std::move(x)), qkv(t.qkv), a(t.a), b(t.b) {}
  G::TokenInputs view() const {
    const G::TokenInputs h = t.view();
    return {dview(h.q, t.qkv, qkv), dview(h.k, t.qkv, qkv), dview(h.v, t.qkv, qkv), dview(h.a, t.a, a), dview(h.b, t.b, b)};
  }
};

struct DevWeights {
  Weights w;
  DeviceTensor A, dt;
  explicit DevWeights(Weights x) : w(std::move(x)), A(w.A_log), dt(w.dt_bias) {}
  G::Weights view() const {
    G::Weights v = w.view();
    v.A_log = A.view();
    v.dt_bias = dt.view();
    return v;
  }
};

struct DevCaches {
  std::unique_ptr<Mir> ck, d, k, g, cur;
  explicit DevCaches(const ReplayCaches& c)
      : ck(new Mir(c.checkpoint)), d(new Mir(c.d_ring)), k(new Mir(c.k_ring)), g(new Mir(c.g_ring)), cur(new Mir(c.cursor)) {}
  G::ReplayCache view() const { return {ck->d.view(), d->d.view(), k->d.view(), g->d.view(), cur->d.view()}; }
  G::SpecCache spec_view() const { return {ck->d.view(), d->d.view(), k->d.view(), g->d.view(), cur->d.view()}; }
  void down() { ck->down(); d->down(); k->down(); g->down(); cur->down(); }
  void up() { ck->up(); d->up(); k->up(); g->up(); cur->up(); }
};

}  // namespace replayssm::test::gdn_device
