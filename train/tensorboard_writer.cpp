#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "train/tensorboard_event.pb.h"

namespace trident {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TensorBoard lists the files of a folder whose names hold "tfevents", in the order of the
// seconds and host they name.
std::string event_file_name() {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return str("events.out.tfevents.", int64_t(now_seconds()), ".", host, ".", getpid(), ".trident");
}

std::string little_endian(uint64_t value, int bytes) {
  std::string out(size_t(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[size_t(i)] = char((value >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

uint32_t masked_crc32c(const std::string& bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  const uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resumed_at) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) fail("train.tensorboard_dir '", dir, "' cannot be created: ", error.message());
  path_ = (std::filesystem::path(dir) / event_file_name()).string();
  file_.open(path_, std::ios::binary | std::ios::trunc);
  if (!file_) fail("train.tensorboard_dir '", dir, "': ", path_, " cannot be written: ", std::strerror(errno));
  tensorboard::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  bool written = append(version.SerializeAsString());
  if (resumed_at > 0) {
    tensorboard::Event restart;
    restart.set_wall_time(now_seconds());
    restart.set_step(resumed_at + 1);
    restart.mutable_session_log()->set_status(tensorboard::SessionLog::START);
    written = written && append(restart.SerializeAsString());
  }
  if (!written) fail("train.tensorboard_dir '", dir, "': ", path_, " cannot be written: ", std::strerror(errno));
}

bool TensorBoardWriter::write(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (!file_.is_open()) return false;
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  if (append(event.SerializeAsString())) return true;
  file_.close();
  return false;
}

bool TensorBoardWriter::append(const std::string& event) {
  const std::string length = little_endian(event.size(), 8);
  errno = 0;
  file_ << length << little_endian(masked_crc32c(length), 4) << event << little_endian(masked_crc32c(event), 4)
        << std::flush;
  return bool(file_);
}

}  // namespace trident
