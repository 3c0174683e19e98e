// train.tensorboard_dir: the metrics file's scalars as a TensorBoard event file, written by rank 0
// as the run goes (each iteration's event flushed, so that TensorBoard shows the run live). The
// file is a sequence of records, each a protobuf Event (train/tensorboard_event.proto) framed as
//
//   uint64 length | uint32 masked CRC-32C of the length's 8 bytes | the Event | uint32 masked CRC-32C of it
//
// little-endian, a CRC masked as ((crc >> 15) | (crc << 17)) + 0xa282ead8. A resumed run writes a
// new file into the same folder, which TensorBoard reads as the same run.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace trident {

class TensorBoardWriter {
 public:
  // A new event file in `dir` (created), its first record the file version. `resumed_at` > 0:
  // the run goes on after that iteration, and a restart marked there makes TensorBoard drop the
  // later steps a run before it wrote. Fails naming train.tensorboard_dir when the file cannot
  // be written.
  TensorBoardWriter(const std::string& dir, int64_t resumed_at);

  // One event of `scalars` at `step`, flushed. False when the write failed: the file is closed
  // then, and later writes do nothing.
  bool write(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  bool append(const std::string& event);
  std::string path_;
  std::ofstream file_;
};

// TensorBoard's masked CRC-32C (Castagnoli) of `bytes`.
uint32_t masked_crc32c(const std::string& bytes);

}  // namespace trident
