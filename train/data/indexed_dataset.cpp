#include "train/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;

template <typename T>
void write_pod(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
void write_array(std::string& out, const std::vector<T>& values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

constexpr size_t kBinBuffer = size_t(1) << 20;

template <typename T>
void read_exact(std::ifstream& in, T* out, size_t count, const std::string& path) {
  in.read(reinterpret_cast<char*>(out), std::streamsize(count * sizeof(T)));
  if (!in) fail("indexed dataset index '", path, "' is truncated");
}

template <typename T>
void widen(const uint8_t* from, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, from + i * sizeof(T), sizeof(T));
    out[i] = int64_t(value);
  }
}

}  // namespace

size_t token_bytes(TokenType type) {
  switch (type) {
    case TokenType::uint8:
    case TokenType::int8: return 1;
    case TokenType::int16:
    case TokenType::uint16: return 2;
    case TokenType::int32: return 4;
    case TokenType::int64: return 8;
  }
  fail("unknown token type code ", int(type));
}

TokenType token_type_for_vocab(int64_t vocab_size) {
  if (vocab_size <= 256) return TokenType::uint8;
  if (vocab_size < 65500) return TokenType::uint16;
  return TokenType::int32;
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenType type, Publication* files)
    : prefix_(std::move(prefix)), type_(type) {
  if (!files) own_files_ = std::make_unique<Publication>(prefix_ + ".publishing");
  files_ = files ? files : own_files_.get();
  bin_ = std::make_unique<FileWriter>(files_->stage(prefix_ + ".bin"));
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::add_document(const int64_t* tokens, size_t count) {
  const size_t width = token_bytes(type_);
  const size_t at = packed_.size();
  packed_.resize(at + count * width);
  for (size_t i = 0; i < count; ++i) {
    // Little-endian truncation to the token width (x86 and ARM are little endian).
    std::memcpy(packed_.data() + at + i * width, &tokens[i], width);
  }
  if (packed_.size() >= kBinBuffer) {
    bin_->write(packed_.data(), packed_.size());
    packed_.clear();
  }
  lengths_.push_back(int32_t(count));
  document_starts_.push_back(int64_t(lengths_.size()));
}

void IndexedDatasetWriter::finish() {
  bin_->write(packed_.data(), packed_.size());
  bin_->finish();
  std::vector<int64_t> pointers(lengths_.size());
  int64_t offset = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    pointers[i] = offset;
    offset += int64_t(lengths_[i]) * int64_t(token_bytes(type_));
  }
  std::string index(kMagic, sizeof kMagic);
  write_pod(index, kVersion);
  write_pod(index, uint8_t(type_));
  write_pod(index, uint64_t(lengths_.size()));
  write_pod(index, uint64_t(document_starts_.size()));
  write_array(index, lengths_);
  write_array(index, pointers);
  write_array(index, document_starts_);
  write_text_file(files_->stage(prefix_ + ".idx"), index);
  if (own_files_) own_files_->publish();
}

IndexedDataset::IndexedDataset(const std::string& prefix) : bin_path_(prefix + ".bin") {
  const std::string idx_path = prefix + ".idx";
  if (fs::exists(prefix + ".publishing"))
    fail("dataset '", prefix, "' is between two versions: a preprocess run was killed while publishing it (", prefix,
         ".publishing lists the files); preprocess --output ", prefix, " puts the previous ones back before it writes");
  std::ifstream in(idx_path, std::ios::binary);
  if (!in) fail("indexed dataset index '", idx_path, "' cannot be opened (make one with tools/preprocess)");
  char magic[9];
  read_exact(in, magic, 9, idx_path);
  if (std::memcmp(magic, kMagic, 9) != 0)
    fail("'", idx_path, "' is not a Megatron indexed dataset index (no MMIDIDX header)");
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  read_exact(in, &version, 1, idx_path);
  if (version != kVersion) fail("'", idx_path, "' has index version ", version, ", expected 1");
  read_exact(in, &code, 1, idx_path);
  if (code < 1 || code > 8 || code == 6 || code == 7)
    fail("'", idx_path, "' has token dtype code ", int(code), "; expected an integer type");
  type_ = TokenType(code);
  read_exact(in, &sequences, 1, idx_path);
  read_exact(in, &documents, 1, idx_path);
  if (documents < 1 || documents > sequences + 1)
    fail("'", idx_path, "' has ", documents, " document indices for ", sequences, " sequences");
  // The arrays follow: int32 lengths and int64 pointers per sequence, int64 per document index.
  // Checked against the file's size before anything is allocated for them.
  const uint64_t arrays = uint64_t(std::filesystem::file_size(idx_path)) - uint64_t(in.tellg());
  if (sequences > arrays / 12 || documents > (arrays - 12 * sequences) / 8)
    fail("indexed dataset index '", idx_path, "' is truncated: it claims ", sequences,
         " sequences and ", documents, " document indices, but its arrays hold only ", arrays, " bytes");
  lengths_.resize(sequences);
  std::vector<int64_t> pointers(sequences);
  document_starts_.resize(documents);
  read_exact(in, lengths_.data(), sequences, idx_path);
  read_exact(in, pointers.data(), sequences, idx_path);
  read_exact(in, document_starts_.data(), documents, idx_path);

  // The stream view needs the sequences packed end to end, as Megatron's writer lays them out.
  const int64_t width = int64_t(token_bytes(type_));
  for (size_t i = 0; i < sequences; ++i) {
    if (lengths_[i] < 0 || pointers[i] != num_tokens_ * width)
      fail("'", idx_path, "': sequence ", i, " is not packed after the previous one");
    num_tokens_ += lengths_[i];
  }

  int fd = ::open(bin_path_.c_str(), O_RDONLY);
  if (fd < 0) fail("indexed dataset data '", bin_path_, "' cannot be opened: ", std::strerror(errno));
  struct stat info {};
  ::fstat(fd, &info);
  bin_size_ = size_t(info.st_size);
  if (int64_t(bin_size_) != num_tokens_ * width) {
    ::close(fd);
    fail("'", bin_path_, "' holds ", bin_size_, " bytes but its index describes ",
         num_tokens_ * width, " (", num_tokens_, " tokens of ", width, " bytes)");
  }
  if (bin_size_ > 0) {
    void* mapped = ::mmap(nullptr, bin_size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped == MAP_FAILED) fail("cannot memory-map '", bin_path_, "': ", std::strerror(errno));
    bin_ = static_cast<const uint8_t*>(mapped);
  } else {
    ::close(fd);
  }
}

IndexedDataset::~IndexedDataset() {
  if (bin_) ::munmap(const_cast<uint8_t*>(bin_), bin_size_);
}

void IndexedDataset::read(int64_t offset, int64_t count, int64_t* out) const {
  if (offset < 0 || count < 0 || offset + count > num_tokens_)
    fail("read of tokens [", offset, ", ", offset + count, ") beyond the ", num_tokens_,
         " tokens of '", bin_path_, "'");
  const uint8_t* from = bin_ + offset * int64_t(token_bytes(type_));
  switch (type_) {
    case TokenType::uint8: return widen<uint8_t>(from, count, out);
    case TokenType::int8: return widen<int8_t>(from, count, out);
    case TokenType::int16: return widen<int16_t>(from, count, out);
    case TokenType::uint16: return widen<uint16_t>(from, count, out);
    case TokenType::int32: return widen<int32_t>(from, count, out);
    case TokenType::int64: return widen<int64_t>(from, count, out);
  }
}

double unigram_entropy_nats(const std::vector<int64_t>& counts) {
  double total = 0;
  for (int64_t c : counts) total += double(c);
  double entropy = 0;
  for (int64_t c : counts)
    if (c > 0) entropy -= double(c) / total * std::log(double(c) / total);
  return entropy;
}

}  // namespace trident
