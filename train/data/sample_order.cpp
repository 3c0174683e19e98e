#include "train/data/sample_order.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/hash.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'D', 'O', 'R', 'D', '1'};
constexpr size_t kHeaderBytes = 32;

struct Header {
  char magic[8];
  uint64_t samples, key, reserved;
};
static_assert(sizeof(Header) == kHeaderBytes, "the order file's header is 32 bytes");

// An open file descriptor, closed when it goes.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void cannot(const std::string& what, const std::string& path) {
  fail("the sample order file '", path, "' cannot be ", what, ": ", std::strerror(errno),
       " (orders of many samples are kept beside the dataset; set data.cache_dir to a writable folder)");
}

// Maps `path` read-only if it holds this order; nullptr if it does not exist or holds another.
void* map_if_valid(const std::string& path, const Header& expected, size_t bytes) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return nullptr;
  struct stat status {};
  Header found{};
  if (::fstat(file.fd, &status) != 0 || size_t(status.st_size) != bytes ||
      ::pread(file.fd, &found, sizeof found, 0) != ssize_t(sizeof found) || std::memcmp(&found, &expected, sizeof found) != 0)
    return nullptr;
  void* mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, file.fd, 0);
  if (mapped == MAP_FAILED) cannot("mapped", path);
  return mapped;
}

void build(const std::string& path, const Header& header, size_t bytes, uint64_t seed, int64_t epoch) {
  const std::string partial = path + ".partial";
  Descriptor file{::open(partial.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (file.fd < 0) cannot("written", partial);
  if (::ftruncate(file.fd, off_t(bytes)) != 0) cannot("written", partial);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
  if (mapped == MAP_FAILED) cannot("written", partial);
  std::memcpy(mapped, &header, sizeof header);
  shuffle_order(reinterpret_cast<int64_t*>(static_cast<char*>(mapped) + kHeaderBytes), int64_t(header.samples), seed,
                epoch);
  ::munmap(mapped, bytes);
  if (::fsync(file.fd) != 0) cannot("written", partial);
  if (std::rename(partial.c_str(), path.c_str()) != 0) cannot("renamed into place", partial);
}

}  // namespace

void shuffle_order(int64_t* order, int64_t samples, uint64_t seed, int64_t epoch) {
  std::iota(order, order + samples, int64_t(0));
  for (int64_t i = samples - 1; i > 0; --i) {
    const uint64_t r = splitmix64(seed ^ splitmix64(uint64_t(epoch) * 0x100000001B3ull + uint64_t(i)));
    std::swap(order[i], order[r % uint64_t(i + 1)]);
  }
}

SampleOrder::SampleOrder(int64_t samples, uint64_t seed, int64_t epoch, const std::string& cache_prefix,
                         int64_t in_memory_limit) {
  if (samples <= in_memory_limit || cache_prefix.empty()) {
    memory_.resize(size_t(samples));
    shuffle_order(memory_.data(), samples, seed, epoch);
    order_ = memory_.data();
    return;
  }
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.samples = uint64_t(samples);
  header.key = splitmix64(splitmix64(uint64_t(samples)) ^ splitmix64(seed ^ splitmix64(uint64_t(epoch) + 1)));
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(header.key));
  file_ = str(cache_prefix, ".order-", key, ".bin");
  const size_t bytes = kHeaderBytes + size_t(samples) * sizeof(int64_t);
  mapped_ = map_if_valid(file_, header, bytes);
  if (!mapped_) {
    // One process builds it; the others wait for the lock, then find it built.
    const fs::path folder = fs::path(file_).has_parent_path() ? fs::path(file_).parent_path() : fs::path(".");
    std::error_code ignored;  // a folder that cannot be made fails to open just below, with errno
    fs::create_directories(folder, ignored);
    const Descriptor lock{::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (lock.fd < 0) cannot("written", file_);
    if (::flock(lock.fd, LOCK_EX) != 0) cannot("locked", file_);
    mapped_ = map_if_valid(file_, header, bytes);
    if (!mapped_) {
      build(file_, header, bytes, seed, epoch);
      mapped_ = map_if_valid(file_, header, bytes);
      if (!mapped_) cannot("read back", file_);
    }
  }
  mapped_bytes_ = bytes;
  order_ = reinterpret_cast<const int64_t*>(static_cast<const char*>(mapped_) + kHeaderBytes);
}

SampleOrder::~SampleOrder() {
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
}

}  // namespace trident
