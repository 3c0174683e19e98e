// Encoding a corpus on several threads, results in input order. This thread reads the inputs in
// batches of about 256 KB; `workers` threads each take a batch, take its documents out of their
// records (document_of) and encode them with a tokenizer of their own (Tokenizer::clone); this
// thread hands each batch's results to `consume` in input order, so what preprocess writes is
// the same for any number of workers. At most 2 x workers batches are in memory at once.
//
//   InputReader ─ batch 0, 1, 2, ... ─▶ queue ─▶ worker 1 .. worker N ─▶ consume(batch 0), (1), ...
//                                                   (any order)             (input order)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/data/document_input.h"
#include "train/data/tokenizer.h"

namespace trident {

struct EncodedRecord {
  RecordDocument::Kind kind = RecordDocument::document;
  std::string error;            // for bad_line: document_of's message
  size_t bytes = 0;             // the document's text
  std::vector<int64_t> tokens;  // its ids, then the end-of-document id
};

// An error on a worker (a tokenizer's) is rethrown here when its batch's turn comes.
void encode_in_order(InputReader& reader, const Tokenizer& tokenizer, int workers, const std::string& json_key,
                     const std::function<void(std::vector<EncodedRecord>& batch)>& consume);

}  // namespace trident
