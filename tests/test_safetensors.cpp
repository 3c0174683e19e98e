// train/checkpoint/safetensors.h against bytes checked independently of the reader: the header's length
// field, its JSON (dtype names, shapes, offsets), the alignment, and a tensor's raw values.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstring>
#include <fstream>

#include "tests/helpers.h"
#include "train/checkpoint/safetensors.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;

namespace {

std::string bytes_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Safetensors, BytesFollowTheFormat) {
  const auto path = scratch_dir() / "model.safetensors";
  Safetensors file;
  file.tensors = {{"h.0.w", torch::arange(6, torch::kFloat).view({2, 3})},
                  {"b", torch::tensor({1.5, -2.0}, torch::kBFloat16)},
                  {"n", torch::tensor({int64_t(7)}, torch::kLong)}};
  file.metadata = {{"format", "pt"}};
  write_safetensors(path.string(), file);

  const std::string bytes = bytes_of(path);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);  // the data starts 8-byte aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, length));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["h.0.w"]["dtype"], "F32");
  EXPECT_EQ(header["h.0.w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["h.0.w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["dtype"], "BF16");
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 28}));
  EXPECT_EQ(header["n"]["dtype"], "I64");
  EXPECT_EQ(header["n"]["data_offsets"], nlohmann::json({28, 36}));
  EXPECT_EQ(bytes.size(), 8 + length + 36);
  float values[6];
  std::memcpy(values, bytes.data() + 8 + length, sizeof values);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], float(i));
  uint16_t bf16 = 0;  // 1.5 in bfloat16: the upper half of the float 0x3FC00000
  std::memcpy(&bf16, bytes.data() + 8 + length + 24, 2);
  EXPECT_EQ(bf16, 0x3FC0);

  const Safetensors back = read_safetensors(path.string());
  ASSERT_EQ(back.tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.tensors[i].first, file.tensors[i].first);
    EXPECT_TRUE(torch::equal(back.tensors[i].second, file.tensors[i].second)) << back.tensors[i].first;
  }
  EXPECT_EQ(back.metadata, file.metadata);
}

TEST(Safetensors, MalformedFilesAreNamed) {
  const auto dir = scratch_dir();
  const auto path = (dir / "bad.safetensors").string();
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(error_of([&] { read_safetensors(path); }).find("bad.safetensors' is too short to hold a header"),
            std::string::npos);
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})";
  const uint64_t length = header.size();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << std::string(8, '\0');
  }
  const std::string message = error_of([&] { read_safetensors(path); });
  EXPECT_NE(message.find("gives tensor 'w' offsets that do not hold its 4 elements of F32"), std::string::npos)
      << message;
}
