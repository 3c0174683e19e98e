// Encoding a corpus on several threads, results in input order. This thread reads the inputs in
// batches of about 256 KB; the pool's threads each take a batch, take its documents out of their
// records (document_of) and encode them with a tokenizer of their own (Tokenizer::clone); this
// thread hands each batch's results to `consume` in input order, so what preprocess writes is
// the same for any number of workers. Up to 8 batches per worker are in memory at once, so that
// a slow batch at the front of the order does not leave the other workers idle.
//
//   InputReader ─ batch 0, 1, 2, ... ─▶ queue ─▶ worker 1 .. worker N ─▶ consume(batch 0), (1), ...
//                                                   (any order)             (input order)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "train/data/document_input.h"
#include "train/data/tokenizer.h"

namespace trident {

// One batch of records, encoded: the documents' ids in one array, so that a batch is a few
// allocations however many documents it holds.
struct EncodedBatch {
  struct Record {
    RecordDocument::Kind kind = RecordDocument::document;
    std::string error;  // for bad_line: document_of's message
    size_t bytes = 0;   // a document's text
    size_t tokens = 0;  // a document's ids in `tokens`, the end-of-document id included
  };
  std::vector<Record> records;  // in input order
  std::vector<int64_t> tokens;  // each document's ids, then the end-of-document id, in order
};

class EncodingPool {
 public:
  // `workers` threads, each cloning `tokenizer` for itself, all at once (a clone of a large
  // vocabulary takes a while); returns when every one is ready, rethrowing a failed clone's error.
  EncodingPool(const Tokenizer& tokenizer, int workers, std::string json_key);
  ~EncodingPool();  // stops and joins the threads
  EncodingPool(const EncodingPool&) = delete;
  EncodingPool& operator=(const EncodingPool&) = delete;

  // Encodes everything `reader` holds; an error on a worker (a tokenizer's) is rethrown here
  // when its batch's turn comes.
  void encode_in_order(InputReader& reader, const std::function<void(const EncodedBatch& batch)>& consume);

 private:
  struct Batch;
  void work(const Tokenizer& original);
  void stop();

  int workers_;
  std::string json_key_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable changed_;  // a batch queued or done, a worker ready, or stopping
  std::deque<Batch*> queue_;
  int ready_ = 0;
  std::exception_ptr clone_error_;
  bool stopping_ = false;
};

}  // namespace trident
