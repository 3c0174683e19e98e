#include "train/data/parallel_encoding.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace trident {
namespace {

constexpr size_t kBatchBytes = size_t(1) << 18;

struct Batch {
  std::vector<InputRecord> records;
  EncodedBatch encoded;
  std::exception_ptr error;
  bool done = false;  // under Workers::mutex_
};

void encode_batch(Batch& batch, const Tokenizer& tokenizer, const std::string& json_key,
                  const std::vector<std::string>& files) {
  EncodedBatch& out = batch.encoded;
  out.records.resize(batch.records.size());
  for (size_t i = 0; i < batch.records.size(); ++i) {
    RecordDocument document = document_of(batch.records[i], json_key, files);
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

// Threads that encode batches, each with its own tokenizer; joined when destroyed.
class Workers {
 public:
  Workers(const Tokenizer& tokenizer, int count, const std::string& json_key, const std::vector<std::string>& files) {
    TRIDENT_CHECK(count >= 1, "encoding needs at least one worker, got ", count);
    for (int i = 0; i < count; ++i) tokenizers_.push_back(tokenizer.clone());
    for (auto& own : tokenizers_)
      threads_.emplace_back([this, &own, &json_key, &files] { work(*own, json_key, files); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& thread : threads_) thread.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void submit(Batch* batch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(batch);
    }
    work_ready_.notify_one();
  }
  void wait_for(const Batch& batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    batch_done_.wait(lock, [&] { return batch.done; });
  }

 private:
  void work(const Tokenizer& tokenizer, const std::string& json_key, const std::vector<std::string>& files) {
    for (;;) {
      Batch* batch = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        batch = queue_.front();
        queue_.pop_front();
      }
      try {
        encode_batch(*batch, tokenizer, json_key, files);
      } catch (...) {
        batch->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batch->done = true;
      }
      batch_done_.notify_all();
    }
  }

  std::vector<std::unique_ptr<Tokenizer>> tokenizers_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_ready_, batch_done_;
  std::deque<Batch*> queue_;
  bool stopping_ = false;
};

}  // namespace

void encode_in_order(InputReader& reader, const Tokenizer& tokenizer, int workers, const std::string& json_key,
                     const std::function<void(const EncodedBatch& batch)>& consume) {
  std::deque<std::unique_ptr<Batch>> in_flight;  // declared first: the workers stop before it goes
  Workers pool(tokenizer, workers, json_key, reader.files());
  bool more = true;
  for (;;) {
    while (more && in_flight.size() < 8 * size_t(workers)) {
      auto batch = std::make_unique<Batch>();
      more = reader.read(batch->records, kBatchBytes);
      if (!more) break;
      pool.submit(batch.get());
      in_flight.push_back(std::move(batch));
    }
    if (in_flight.empty()) return;
    Batch& next = *in_flight.front();
    pool.wait_for(next);
    if (next.error) std::rethrow_exception(next.error);
    consume(next.encoded);
    in_flight.pop_front();
  }
}

}  // namespace trident
