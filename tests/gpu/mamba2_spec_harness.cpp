// The CUDA Mamba-2 speculative tests' shared harness (mamba2_spec_harness.hpp).
#include "mamba2_spec_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "replayssm/error.hpp"

namespace replayssm::test::m2spec {

int64_t extent_elems(const TensorView& v) {
  if (!v.defined() || v.numel() == 0) return 0;
  int64_t e = 1;
  for (int i = 0; i < v.ndim; ++i) e += (v.shape[i] - 1) * v.stride[i];
  return e;
}

Mirrors::~Mirrors() {
  for (auto& m : m_) cudaFree(m.d);
}
TensorView Mirrors::up(const TensorView& h) {
  if (!h.defined()) return h;
  M m;
  m.h = h;
  m.bytes = size_t(extent_elems(h)) * dtype_size(h.dtype);
  cuda_ok(cudaMalloc(&m.d, std::max<size_t>(m.bytes, 16)), "cudaMalloc");
  if (m.bytes) cuda_ok(cudaMemcpy(m.d, h.data, m.bytes, cudaMemcpyHostToDevice), "H2D");
  m_.push_back(m);
  TensorView d = h;
  d.data = m.d;
  d.device = Device::cuda(0);
  return d;
}
void Mirrors::down(const TensorView& h) {
  for (auto& m : m_)
    if (m.h.data == h.data && m.bytes) cuda_ok(cudaMemcpy(h.data, m.d, m.bytes, cudaMemcpyDeviceToHost), "D2H");
}

mamba2::TokenInputs up(Mirrors& m, const mamba2::TokenInputs& in) {
  return {m.up(in.x), m.up(in.dt), m.up(in.B), m.up(in.C), m.up(in.z)};
}
mamba2::Weights up(Mirrors& m, const mamba2::Weights& w) {
  mamba2::Weights d = w;
  d.A = m.up(w.A); d.dt_bias = m.up(w.dt_bias); d.D = m.up(w.D);
  return d;
}

std::vector<uint8_t> bytes_of(const TensorView& v) {
  const size_t b = size_t(extent_elems(v)) * dtype_size(v.dtype);
  const uint8_t* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p, p + b);
}
void restore(const TensorView& v, const std::vector<uint8_t>& b) { std::memcpy(v.data, b.data(), b.size()); }
std::vector<double> values_of(const TensorView& v) {  // the extent, element by element (padding incl.)
  const int64_t n = extent_elems(v);
  std::vector<double> o(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) o[size_t(i)] = load_as_f64(static_cast<const char*>(v.data) + i * dtype_size(v.dtype), v.dtype);
  return o;
}
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {  // NaN == NaN
  double rms = 0;
  size_t cnt = 0;
  for (double v : b)
    if (std::isfinite(v)) { rms += v * v; ++cnt; }
  rms = std::sqrt(rms / double(std::max<size_t>(cnt, 1))) + 1e-30;
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    const double d = std::fabs(a[i] - b[i]);
    if (!std::isfinite(d)) return INFINITY;
    e = std::max(e, d / (std::fabs(b[i]) + rms));
  }
  return e;
}

// spec_verify / classic_spec / accept_tree on the GPU (device mirrors), each call also run by the CPU backend on
// the same inputs and compared; the host tensors end up holding the GPU results. replay_decode and
// decode stay on the CPU (the "standard ReplaySSM decode of the same window" comparator).
// The ops' pdl flag: while g_pdl_on, every GPU call runs with it on a stream of its own, and the buffers it may read
// only after its griddepcontrol.wait (`late`) are NaN bytes until a producer kernel (late_writer.hpp), which lets the
// op start at once, writes the true ones 100 us later.
bool g_pdl_on = false;

namespace {
// The CPU op run on the host tensors: the values it leaves in `mut`, whose bytes are then put back, so that the GPU
// run starts from the same inputs.
template <class Op>
std::vector<std::vector<double>> cpu_values(const std::vector<TensorView>& mut, Op cpu_op) {
  std::vector<std::vector<uint8_t>> before;
  for (auto& v : mut) before.push_back(bytes_of(v));
  cpu_op();
  std::vector<std::vector<double>> cpu;
  for (auto& v : mut) cpu.push_back(values_of(v));
  for (size_t i = 0; i < mut.size(); ++i) restore(mut[i], before[i]);
  return cpu;
}

// Element by element equal, NaN == NaN (the rings may hold NaN poison).
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

template <class Args, class Op>
void run_on_device(Args& d, const std::vector<TensorView>& late, Op op) {
  if (!g_pdl_on) {
    op(d, nullptr);
  } else {
    std::vector<std::pair<void*, size_t>> bufs;
    for (const TensorView& v : late)  // every one written late (LateCopies throws past its kMax)
      if (v.defined())
        bufs.emplace_back(v.data, size_t(extent_elems(v)) * dtype_size(v.dtype));
    const PdlStream s(true);
    const BehindProducer producer(bufs, 100000, s.get());
    d.pdl = true;
    op(d, s.get());
    cuda_ok(cudaStreamSynchronize(s.get()), "pdl op");
  }
  cuda_ok(cudaDeviceSynchronize(), "op");
}
}  // namespace

Backend gpu_backend(CpuDiff* diff) {
  Backend b = cpu_backend();
  b.spec_verify = [diff](const mamba2::VerifyArgs& a) {
    const std::vector<TensorView> mut = {a.out, a.cache.checkpoint, a.cache.x_ring, a.cache.dt_ring, a.cache.B_ring};
    const auto cpu = cpu_values(mut, [&] { mamba2::spec_verify(a); });
    {
      Mirrors m;
      mamba2::VerifyArgs d = a;
      d.in = up(m, a.in); d.w = up(m, a.w);
      d.cache = {m.up(a.cache.checkpoint), m.up(a.cache.x_ring), m.up(a.cache.dt_ring), m.up(a.cache.B_ring),
                 m.up(a.cache.cursor)};
      d.slot_idx = m.up(a.slot_idx); d.query_start_loc = m.up(a.query_start_loc); d.out = m.up(a.out);
      d.tree_parent = m.up(a.tree_parent);  // undefined stays undefined: a chain
      run_on_device(d,
                    {d.tree_parent, d.in.x, d.in.dt, d.in.B, d.in.C, d.in.z, d.query_start_loc, d.cache.cursor,
                     d.cache.x_ring, d.cache.dt_ring, d.cache.B_ring},
                    [](const mamba2::VerifyArgs& x, Stream s) { mamba2::spec_verify(x, s); });
      for (auto& v : mut) m.down(v);
    }
    if (diff) {
      ++diff->calls;
      if (a.tree_parent.defined()) ++diff->tree_verifies;
      diff->out = std::max(diff->out, max_rel_diff(values_of(a.out), cpu[0]));
      diff->state = std::max(diff->state, max_rel_diff(values_of(a.cache.checkpoint), cpu[1]));
      diff->dt_ring = std::max(diff->dt_ring, max_rel_diff(values_of(a.cache.dt_ring), cpu[3]));
      if (!same_values(values_of(a.cache.x_ring), cpu[2]) || !same_values(values_of(a.cache.B_ring), cpu[4]))
        diff->rings_exact = false;
    }
  };
  // accept_tree_path only copies ring entries: the GPU rings must equal the CPU's bit for bit, dt_ring included. The
  // op has no pdl flag, so it runs plainly even while g_pdl_on.
  b.accept_tree = [diff](const mamba2::TreeAcceptArgs& a) {
    const std::vector<TensorView> mut = {a.cache.x_ring, a.cache.dt_ring, a.cache.B_ring};
    const auto cpu = cpu_values(mut, [&] { mamba2::accept_tree_path(a); });
    {
      Mirrors m;
      mamba2::TreeAcceptArgs d = a;
      d.cache = {m.up(a.cache.checkpoint), m.up(a.cache.x_ring), m.up(a.cache.dt_ring), m.up(a.cache.B_ring),
                 m.up(a.cache.cursor)};
      d.slot_idx = m.up(a.slot_idx); d.query_start_loc = m.up(a.query_start_loc); d.tree_parent = m.up(a.tree_parent);
      d.accepted_leaf = m.up(a.accepted_leaf); d.num_accepted = m.up(a.num_accepted);
      mamba2::accept_tree_path(d);
      cuda_ok(cudaDeviceSynchronize(), "accept_tree_path");
      for (auto& v : mut) m.down(v);
    }
    if (diff) {
      ++diff->calls;
      ++diff->accept_calls;
      for (size_t i = 0; i < mut.size(); ++i)
        if (!same_values(values_of(mut[i]), cpu[i])) diff->rings_exact = false;
    }
  };
  b.classic_spec = [diff](const mamba2::ClassicSpecArgs& a) {
    const std::vector<TensorView> mut = {a.out, a.state};
    const auto cpu = cpu_values(mut, [&] { mamba2::classic_spec_decode(a); });
    {
      Mirrors m;
      mamba2::ClassicSpecArgs d = a;
      d.in = up(m, a.in); d.w = up(m, a.w);
      d.state = m.up(a.state); d.state_indices = m.up(a.state_indices); d.num_accepted = m.up(a.num_accepted);
      d.query_start_loc = m.up(a.query_start_loc); d.out = m.up(a.out);
      run_on_device(d, {d.in.x, d.in.dt, d.in.B, d.in.C, d.in.z, d.query_start_loc},
                    [](const mamba2::ClassicSpecArgs& x, Stream s) { mamba2::classic_spec_decode(x, s); });
      for (auto& v : mut) m.down(v);
    }
    if (diff) {
      ++diff->calls;
      diff->out = std::max(diff->out, max_rel_diff(values_of(a.out), cpu[0]));
      diff->state = std::max(diff->state, max_rel_diff(values_of(a.state), cpu[1]));
    }
  };
  return b;
}

const char* dn(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

Config setup(Mamba2Geometry geo, DtypePair dt, int rows, int pad_rows, uint64_t seed, int slots) {
  Config s;
  s.geo = geo;
  s.dt = dt;
  s.rows = rows;
  s.padding_rows = pad_rows;
  s.slots = slots > 0 ? slots : rows + 3;
  s.pad = 8;  // padded (paged / packed) strides that keep the state slots 16-byte aligned
  s.seed = seed;
  return s;
}

void expect_spec_clean(const RunLog& log, const CpuDiff& d, const Tol& tol_in, const char* what) {
  // A 16-bit checkpoint is rounded once per flush and drifts by rounding flips over many flushes:
  // the CPU suite sits right at tolerance(...).state there (0.01001 vs 0.01 seen), so allow 1.5x.
  Tol tol = tol_in;
  if (tol.state >= 2e-3) tol.state *= 1.5;
  EXPECT_LE(log.max_out(), tol.out) << what << ": outputs vs float64";
  EXPECT_LE(log.max_state(), tol.state) << what << ": checkpoint after each flush vs float64";
  EXPECT_GT(log.flushes, 0) << what;
  EXPECT_TRUE(log.cursor_ok) << what;
  EXPECT_TRUE(log.padding_ok) << what << ": padding rows' outputs were written";
  EXPECT_TRUE(log.unused_ok) << what << ": slots no row uses were touched";
  EXPECT_LE(d.out, 2 * tol.out) << what << ": outputs vs CPU backend";
  EXPECT_LE(d.state, 2 * tol.state + 1e-6) << what << ": checkpoint vs CPU backend";
  EXPECT_LE(d.dt_ring, 1e-6) << what << ": delta ring vs CPU backend";
  EXPECT_TRUE(d.rings_exact) << what << ": x / B rings differ from the CPU backend";
}

DeviceSpecProblem::DeviceSpecProblem(const Config& cfg, SpecConfig sc) : pb(cfg), spec(sc), rows(cfg.rows), T(sc.window) {
  pb.make_spec_cache(sc);
  ck.assign(pb.state); xr.assign(pb.x_ring); dr.assign(pb.dt_ring); br.assign(pb.B_ring); cu.assign(pb.cursor);
  sidx.assign(pb.slot_idx); A.assign(pb.A); bias.assign(pb.dt_bias); D.assign(pb.D);
  pb.new_tokens(rows * T);
  x.assign(pb.x); dt.assign(pb.dt); B.assign(pb.B); C.assign(pb.C); z.assign(pb.z); out.assign(pb.out);
  qv.assign(size_t(rows) + 1, 0);
}

mamba2::VerifyArgs DeviceSpecProblem::verify_args(bool dev, const TensorView& qsl) const {
  mamba2::VerifyArgs a;
  a.geo = pb.s.geo; a.spec = spec; a.query_start_loc = qsl;
  if (dev) {
    a.in = {x.view(), dt.view(), B.view(), C.view(), pb.s.gate ? z.view() : TensorView{}};
    a.w.A = A.view();
    if (pb.s.bias) a.w.dt_bias = bias.view();
    if (pb.s.skip) a.w.D = D.view();
    a.cache = {ck.view(), xr.view(), dr.view(), br.view(), cu.view()};
    a.slot_idx = sidx.view(); a.out = out.view();
  } else {
    a.in = pb.inputs(); a.w = pb.weights(); a.cache = pb.spec_cache();
    a.slot_idx = pb.slot_idx.view(); a.out = pb.out.view();
  }
  return a;
}

void DeviceSpecProblem::new_tokens() {
  pb.new_tokens(rows * T);  // the tail past qv[rows] is unused
  x.upload(pb.x); dt.upload(pb.dt); B.upload(pb.B); C.upload(pb.C);
  if (pb.s.gate) z.upload(pb.z);
  out.upload(pb.out);
  const int used = qv[size_t(rows)];  // the CPU's inputs are only the used tokens: shrink the host views' token count
  for (HostTensor* t : {&pb.x, &pb.dt, &pb.B, &pb.C, &pb.z, &pb.out})
    if (t->view().defined()) t->view().shape[0] = used;
}

HostTensor DeviceSpecProblem::down(const DeviceTensor& d, const HostTensor& like) const {
  HostTensor h = like;
  d.download(h);
  return h;
}

double DeviceSpecProblem::out_diff() const {
  HostTensor g(pb.s.dt.act, {rows * T, pb.s.geo.heads, pb.s.geo.headdim}, pb.s.pad);
  out.download(g);
  std::vector<double> a, b;
  const int64_t per = int64_t(pb.s.geo.heads) * pb.s.geo.headdim;
  for (int r = 0; r < rows; ++r)
    for (int t = qv[size_t(r)]; t < qv[size_t(r) + 1]; ++t)
      for (int64_t i = 0; i < per; ++i) {
        if (pb.slot_of_row[size_t(r)] < 0) {
          if (g.flat(t * per + i) != kSentinel) return INFINITY;  // padding row written
          continue;
        }
        a.push_back(g.flat(t * per + i));
        b.push_back(pb.out.flat(t * per + i));
      }
  return rel_err(a, b);
}

double DeviceSpecProblem::state_diff() const { return rel_err(down(ck, pb.state).to_f64(), pb.state.to_f64()); }
bool DeviceSpecProblem::cursors_equal() const { return down(cu, pb.cursor).bytes() == pb.cursor.bytes(); }

}  // namespace replayssm::test::m2spec
