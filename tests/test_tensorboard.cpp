// train.tensorboard_dir's event files, record by record: each framed with the masked CRC-32C
// TensorBoard checks (tests/hf_interop/test_tensorboard.py reads whole runs with TensorBoard's
// own reader); a folder that cannot be written is one error naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/files.h"
#include "tests/helpers.h"
#include "train/tensorboard_writer.h"

using namespace trident;
using namespace trident::testing;
namespace fs = std::filesystem;

namespace {

template <typename T>
T little_endian_at(const std::string& bytes, size_t at) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= T(uint8_t(bytes[at + i])) << (8 * i);
  return value;
}

// The events of an event file, each record's two CRCs checked.
std::vector<std::string> records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = little_endian_at<uint64_t>(bytes, at);
    EXPECT_EQ(little_endian_at<uint32_t>(bytes, at + 8), masked_crc32c(bytes.substr(at, 8)));
    EXPECT_LE(at + 16 + length, bytes.size());
    out.push_back(bytes.substr(at + 12, length));
    EXPECT_EQ(little_endian_at<uint32_t>(bytes, at + 12 + length), masked_crc32c(out.back()));
    at += 16 + length;
  }
  return out;
}

}  // namespace

// CRC-32C's check value (RFC 3720's polynomial; "123456789" gives 0xE3069283), masked as
// TensorBoard masks it.
TEST(TensorBoard, RecordsCarryTheMaskedCrc32c) {
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, AFileIsTheVersionThenARestartWhenResumedThenAnEventPerWrite) {
  const fs::path dir = scratch_dir() / "events";
  {
    TensorBoardWriter fresh((dir / "fresh").string(), 0);
    EXPECT_TRUE(fresh.write(1, {{"loss", 5.5}, {"lr", 0}}));
    EXPECT_TRUE(fresh.write(2, {{"loss", 5.25}}));
    const auto events = records(fresh.path());
    ASSERT_EQ(events.size(), 3u);
    EXPECT_NE(events[0].find("brain.Event:2"), std::string::npos);
    EXPECT_NE(events[1].find("loss"), std::string::npos);
    // A value of 0 is written too: tag "lr" (field 1), then simple_value (field 2, 32 bits) 0.
    EXPECT_NE(events[1].find(std::string("\x0a\x02lr\x15\0\0\0\0", 9)), std::string::npos);
    EXPECT_EQ(fs::path(fresh.path()).filename().string().rfind("events.out.tfevents.", 0), 0u);
  }
  TensorBoardWriter resumed((dir / "resumed").string(), 3);
  const auto events = records(resumed.path());
  ASSERT_EQ(events.size(), 2u);  // the version, the restart at step 4
  // step (field 2) 4, and a SessionLog (field 7) whose status (field 1) is START (1).
  EXPECT_NE(events[1].find(std::string("\x10\x04", 2)), std::string::npos);
  EXPECT_NE(events[1].find(std::string("\x3a\x02\x08\x01", 4)), std::string::npos);
}

TEST(TensorBoard, AFolderThatCannotBeWrittenIsOneErrorNamingTheKey) {
  const fs::path file = scratch_dir() / "a-file";
  write_text_file(file.string(), "");
  try {
    TensorBoardWriter((file / "tensorboard").string(), 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("train.tensorboard_dir '" + (file / "tensorboard").string() + "' cannot be created: ", 0), 0u)
        << e.what();
  }
}
