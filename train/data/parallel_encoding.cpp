#include "train/data/parallel_encoding.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

namespace {
constexpr size_t kBatchBytes = size_t(1) << 18;
}  // namespace

struct EncodingPool::Batch {
  std::vector<InputRecord> records;
  const std::vector<std::string>* files = nullptr;  // the reader's, for errors
  EncodedBatch encoded;
  std::exception_ptr error;
  bool taken = false, done = false;  // by a worker, under mutex_
};

namespace {

void encode_batch(std::vector<InputRecord>& records, const std::vector<std::string>& files, const Tokenizer& tokenizer,
                  const std::string& json_key, EncodedBatch& out) {
  out.records.resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    RecordDocument document = document_of(records[i], json_key, files);
    EncodedBatch::Record& record = out.records[i];
    record.kind = document.kind;
    record.error = std::move(document.error);
    if (document.kind != RecordDocument::document) continue;
    const std::vector<int64_t> ids = tokenizer.encode(document.text);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.tokens.push_back(tokenizer.end_of_document());
    record.bytes = document.text.size();
    record.tokens = ids.size() + 1;
  }
}

}  // namespace

EncodingPool::EncodingPool(const Tokenizer& tokenizer, int workers, std::string json_key)
    : workers_(workers), json_key_(std::move(json_key)) {
  TRIDENT_CHECK(workers >= 1, "encoding needs at least one worker, got ", workers);
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, &tokenizer] { work(tokenizer); });
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return ready_ == workers_ || clone_error_; });
  if (clone_error_) {
    lock.unlock();
    stop();  // a constructor that throws runs no destructor
    std::rethrow_exception(clone_error_);
  }
}

EncodingPool::~EncodingPool() { stop(); }

void EncodingPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& thread : threads_)
    if (thread.joinable()) thread.join();
}

void EncodingPool::work(const Tokenizer& original) {
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = original.clone();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!clone_error_) clone_error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++ready_;
  }
  changed_.notify_all();
  if (!tokenizer) return;
  for (;;) {
    Batch* batch = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch = queue_.front();
      queue_.pop_front();
      batch->taken = true;
    }
    try {
      encode_batch(batch->records, *batch->files, *tokenizer, json_key_, batch->encoded);
    } catch (...) {
      batch->error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch->done = true;
    }
    changed_.notify_all();
  }
}

void EncodingPool::encode_in_order(InputReader& reader,
                                   const std::function<void(const EncodedBatch& batch)>& consume) {
  std::deque<std::unique_ptr<Batch>> in_flight;
  // On an error the batches in flight go: those still queued leave the queue, those a worker
  // holds are waited for.
  struct Abandon {
    EncodingPool& pool;
    std::deque<std::unique_ptr<Batch>>& batches;
    ~Abandon() {
      std::unique_lock<std::mutex> lock(pool.mutex_);
      pool.queue_.clear();  // only this call's batches are ever queued
      for (const auto& batch : batches)
        if (batch->taken) pool.changed_.wait(lock, [&] { return batch->done; });
    }
  } abandon{*this, in_flight};
  bool more = true;
  for (;;) {
    while (more && in_flight.size() < 8 * size_t(workers_)) {
      auto batch = std::make_unique<Batch>();
      batch->files = &reader.files();
      more = reader.read(batch->records, kBatchBytes);
      if (!more) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(batch.get());
      }
      changed_.notify_all();
      in_flight.push_back(std::move(batch));
    }
    if (in_flight.empty()) return;
    Batch& next = *in_flight.front();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return next.done; });
    }
    if (next.error) std::rethrow_exception(next.error);
    consume(next.encoded);
    in_flight.pop_front();
  }
}

}  // namespace trident
