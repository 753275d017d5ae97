// The check every op on CUDA tensors makes before its first launch (src/cuda/device_support.cu): this GPU runs the
// build; a device that does not exist is named. The last test runs only where the GPU cannot run the build:
// tools/device-queue STAGE=G40P links these tests against the library without its PTX and runs them under
// CUDA_FORCE_PTX_JIT=1, which is what a Blackwell GPU sees of an sm_90a-only build (the first test then fails, printing
// the message an engine would get).
#include <gtest/gtest.h>

#include <string>

#include "device_tensor.hpp"
#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/error.hpp"
#include "support/mamba2_harness.hpp"

using namespace replayssm;
using replayssm::test::DeviceTensor;
using replayssm::test::HostTensor;
using replayssm::test::m2::i32_tensor;

TEST(CudaDevice, ThisGpuRunsTheBuild) {
  ASSERT_GT(cuda_device_count(), 0);
  EXPECT_EQ(cuda_device_problem(0), "");
  EXPECT_EQ(cuda_device_problem(0), "");  // the cached answer
}

TEST(CudaDevice, ADeviceThatDoesNotExistIsNamed) {
  const int missing = cuda_device_count();
  const std::string why = cuda_device_problem(missing);
  EXPECT_NE(why.find("CUDA device " + std::to_string(missing) + " cannot be queried"), std::string::npos) << why;
}

TEST(CudaDevice, OpsOnAGpuTheBuildCannotRunThrowThatProblem) {
  const std::string why = cuda_device_problem(0);
  if (why.empty()) GTEST_SKIP() << "this GPU runs the build";
  const HostTensor cursor = i32_tensor({3, 5, 7, 1}), slots = i32_tensor({2, -1, 0});
  DeviceTensor d_cursor(cursor), d_slots(slots);
  try {
    advance_cursors(d_cursor.view(), d_slots.view(), 8);
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "cursor") << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  HostTensor after = cursor;
  d_cursor.download(after);
  EXPECT_EQ(after.bytes(), cursor.bytes()) << "the cursors changed";
}
