// What the build compiled in. The CUDA variant (configured with TRIDENT_REQUIRE_CUDA, as
// scripts/setup_torch2 does) must hold every piece of its CUDA code, so that a CUDA-only source
// or #if branch cannot drop out of it unnoticed on machines where no GPU ever runs it.
#include <gtest/gtest.h>
#include <torch/version.h>

#include "core/error.h"
#include "model/fused_kernels.h"
#include "parallel/comm/communicator.h"
#include "tests/helpers.h"
#include "tests/launchers.h"
#include "train/device.h"

using namespace trident;
using namespace trident::testing;

TEST(Build, DescribesWhatItWasBuiltWith) {
  const BuildInfo info = build_info();
  EXPECT_EQ(info.torch_version, TORCH_VERSION);
  EXPECT_EQ(info.backends, available_backends());
  // trident's CUDA code is compiled exactly when LibTorch has CUDA (CMakeLists.txt's c10_cuda).
  EXPECT_EQ(info.torch_cuda_api, !info.torch_cuda.empty()) << describe(info);
  EXPECT_NE(describe(info).find(str("on LibTorch ", TORCH_VERSION)), std::string::npos) << describe(info);
}

TEST(Build, TheCudaVariantHasItsCudaCode) {
#ifndef TRIDENT_EXPECT_CUDA_VARIANT
  GTEST_SKIP() << "not the CUDA variant (configure with -DTRIDENT_REQUIRE_CUDA=ON, as scripts/setup_torch2 does)";
#else
  const BuildInfo info = build_info();
  EXPECT_FALSE(info.torch_cuda.empty()) << describe(info);
  EXPECT_TRUE(info.torch_cuda_api) << describe(info);
  EXPECT_NE((" " + info.backends + " ").find(" nccl "), std::string::npos) << describe(info);
  EXPECT_TRUE(info.nccl_streams) << describe(info);
  EXPECT_TRUE(fused::built()) << "the CUDA variant was built without its fused kernels (model/fused_kernels.cu)";
#endif
}

// The programs that need no LibTorch (trident_core's: CMakeLists.txt) do not load it, and so
// start without its 0.45 s of start-up.
TEST(Build, ThePlanningAndDataProgramsDoNotLoadLibTorch) {
  for (const std::string program : {"preprocess", "plan", "plot"}) {
    const auto r = run_command("ldd " + kBin + "/" + program);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("libtorch"), std::string::npos) << program << ":\n" << r.output;
    EXPECT_EQ(r.output.find("libc10"), std::string::npos) << program << ":\n" << r.output;
  }
}
