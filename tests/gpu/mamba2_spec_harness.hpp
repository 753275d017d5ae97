// Shared by the CUDA Mamba-2 speculative tests (test_mamba2_spec.cpp, test_mamba2_spec_stream.cpp,
// test_mamba2_tree_cuda.cpp): device mirrors of host views, a backend whose spec_verify / classic_spec / accept_tree
// run on the GPU and are compared call by call with the CPU backend (CpuDiff), the pdl switch for those calls (a late
// producer writes what the op may read only after its wait), and the configuration / clean-run checks of the streams.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "device_tensor.hpp"
#include "late_writer.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/mamba2.hpp"
#include "support/mamba2_drivers.hpp"
#include "support/mamba2_harness.hpp"

namespace replayssm::test::m2spec {

using namespace replayssm::test::m2;

inline bool have_gpu() { return cuda_device_count() > 0; }
#define NEED_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

// Device mirrors of host views: the same bytes (the whole strided extent), the same strides.
int64_t extent_elems(const TensorView& v);

class Mirrors {
 public:
  ~Mirrors();
  TensorView up(const TensorView& h);
  // Copy every mirror whose host pointer is `h.data` back to the host.
  void down(const TensorView& h);

 private:
  struct M {
    TensorView h;
    void* d = nullptr;
    size_t bytes = 0;
  };
  std::vector<M> m_;
};

mamba2::TokenInputs up(Mirrors& m, const mamba2::TokenInputs& in);
mamba2::Weights up(Mirrors& m, const mamba2::Weights& w);

std::vector<uint8_t> bytes_of(const TensorView& v);
void restore(const TensorView& v, const std::vector<uint8_t>& b);
std::vector<double> values_of(const TensorView& v);  // the extent, element by element (padding incl.)
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b);  // NaN == NaN

// GPU-vs-CPU statistics gathered by the mirrored backend.
struct CpuDiff {
  double out = 0, state = 0, dt_ring = 0;
  bool rings_exact = true;  // x / B rings after each verify, all three rings after each accept_tree
  int calls = 0;
  int tree_verifies = 0, accept_calls = 0;  // verify calls with a tree_parent; accept_tree calls
};

// While true, every GPU call of gpu_backend() runs with pdl on a stream of its own, behind a late producer.
extern bool g_pdl_on;

// spec_verify / classic_spec / accept_tree on the GPU (device mirrors), each call also run by the CPU backend on the
// same inputs and compared; the host tensors end up holding the GPU results. replay_decode and decode stay on the CPU.
Backend gpu_backend(CpuDiff* diff);

// A Problem's speculative cache and weights on the device, with fixed-size per-step inputs of rows * T tokens (so a
// captured graph can replay them): the base of the device-resident streams (test_mamba2_spec_stream.cpp DualStream,
// test_mamba2_tree_cuda.cpp TreeStream), each step mirrored by the CPU backend on the host tensors.
struct DeviceSpecProblem {
  Problem pb;
  SpecConfig spec;
  int rows, T;
  DeviceTensor ck, xr, dr, br, cu, sidx, A, bias, D;
  DeviceTensor x, dt, B, C, z, out;
  std::vector<int> qv;  // the step's query_start_loc (windows packed at the front of the token buffers)

  DeviceSpecProblem(const Config& cfg, SpecConfig sc);
  // The device mirrors' (dev) or the host tensors' verify arguments; qsl on the same side.
  mamba2::VerifyArgs verify_args(bool dev, const TensorView& qsl) const;
  // Fresh random inputs for all rows * T tokens on the device; the host views then keep the used tokens (qv) only.
  void new_tokens();
  // GPU against CPU after a step: live rows' outputs (INFINITY where a padding row's out lost the sentinel), the
  // checkpoint, the cursors.
  double out_diff() const;
  double state_diff() const;
  bool cursors_equal() const;
  HostTensor down(const DeviceTensor& d, const HostTensor& like) const;
};

const char* dn(DType t);
Config setup(Mamba2Geometry geo, DtypePair dt, int rows, int pad_rows, uint64_t seed, int slots = 0);
void expect_spec_clean(const RunLog& log, const CpuDiff& d, const Tol& tol_in, const char* what);

}  // namespace replayssm::test::m2spec
