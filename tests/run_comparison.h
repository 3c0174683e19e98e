// Comparing training runs: the losses a metrics file records and the final weights a
// checkpoint holds, one run against another (a parallel layout, or a resumed run, against the
// single process).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace trident::testing {

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
};

// The loss of every iteration in a metrics file (as printed: equal files give equal vectors).
inline std::vector<double> read_losses(const std::filesystem::path& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);)
    losses.push_back(std::stod(line.substr(line.find("\"loss\": ") + 8)));
  return losses;
}

// fp64 runs must agree to rounding (1e-10 relative, loss and every parameter tensor). fp32
// runs: the loss of every step and the whole model to 1e-5 relative; single tensors to 1e-4,
// because AdamW's m / sqrt(v) turns last-bit differences of near-zero gradients into larger
// relative changes of small tensors (biases after a few steps).
inline void expect_equal_runs(const RunResult& serial, const RunResult& parallel, bool fp64) {
  const double tolerance = fp64 ? 1e-10 : 1e-5;
  const double tensor_tolerance = fp64 ? 1e-10 : 1e-4;
  ASSERT_EQ(parallel.losses.size(), serial.losses.size());
  for (size_t i = 0; i < serial.losses.size(); ++i)
    EXPECT_NEAR(parallel.losses[i], serial.losses[i], tolerance * std::abs(serial.losses[i]))
        << "step " << i;
  double difference = 0, norm = 0, worst_tensor = 0;
  for (const auto& [name, value] : serial.params) {
    const auto delta = (parallel.params.at(name) - value).norm().item<double>();
    const double size = value.norm().item<double>();
    EXPECT_LT(delta / size, tensor_tolerance) << name;
    worst_tensor = std::max(worst_tensor, delta / size);
    difference += delta * delta;
    norm += size * size;
  }
  EXPECT_LT(std::sqrt(difference / norm), tolerance);
  std::printf("relative parameter difference: model %.3g, worst tensor %.3g\n",
              std::sqrt(difference / norm), worst_tensor);
}

}  // namespace trident::testing
