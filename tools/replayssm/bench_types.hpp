// Plain types shared by the benchmark front end (bench.cpp, any build) and its CUDA part
// (bench_cuda.cu, CUDA builds only).
#pragma once
#include <string>
#include <vector>

#include "replayssm/dtype.hpp"
#include "replayssm/geometry.hpp"

namespace replayssm::tools::bench {

struct Options {
  std::vector<std::string> models;  // preset names
  std::vector<int> tp{1};
  std::vector<int> batches{1, 8, 32, 64, 128, 256, 512};
  std::vector<std::pair<DType, DType>> dtypes;  // (state, act)
  std::vector<int> ring_lens{16};
  bool state_route = false;  // also time Route::state_and_output (amortised)
  int replays = 9;           // timed graph replays per measurement (median)
  double rotate_mb = 256;    // input/cache sets rotated so that each pass is >= this many MB
  bool dt_act = false;       // dt in the activation dtype (as engines often pass it) instead of fp32
  bool pdl = false;          // classic and replay decode launched as programmatic dependents (DecodeArgs::pdl, ReplayDecodeArgs::pdl)
};

struct Timing {
  double us = 0;      // median per step
  double bytes = 0;   // by the kernel's own count, per step
  double tbps() const { return us > 0 ? bytes / us * 1e-6 : 0; }
};

struct Result {
  std::string model;
  Mamba2Geometry geo;
  int tp = 1, batch = 0, L = 0;
  DType sd = DType::f32, ad = DType::bf16;
  Timing classic, append_w0, append_mid, append_last, append_avg, flush, amortised, amortised_state;
  // amortised_model: per layer step of `layers` layers sharing one cursor tensor, advanced once per
  // model step (cursor.hpp); advance: one cursor_advance launch alone.
  Timing amortised_model, advance;
  Timing materialize;  // the small-batch route's switch (mamba2::materialize), every row at fill level (L-1)/2
  Timing export_state;  // mamba2::export_state of every row (fill level (L-1)/2) into another pool of the state dtype
  int layers = 1;
  double bound_us = 0;  // amortised bytes / copy bandwidth
};

struct Report {
  std::string device;
  double copy_tbps = 0;  // device-to-device copy, bytes read + written
  double read_tbps = 0;  // a read-only stream (context for the output-only steps; ratios stay against copy)
  bool dt_act = false;   // dt in the activation dtype
  bool pdl = false;      // the classic and replay launches were programmatic dependents (--pdl, or REPLAYSSM_PDL=1)
  std::vector<Result> results;
};

Report run_cuda(const Options& o);  // bench_cuda.cu
double copy_bandwidth_tbps();        // bench_cuda.cu: the measured copy ceiling, TB/s (read + write)

}  // namespace replayssm::tools::bench
