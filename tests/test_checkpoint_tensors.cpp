// train/checkpoint/tensors.h: a global tensor stored as pieces of one layout (tensor-parallel
// parts cut into ZeRO segments) comes back whole, and as the parts of other layouts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/helpers.h"
#include "train/checkpoint/tensors.h"

using namespace trident;
using trident::testing::error_of;
using trident::testing::scratch_dir;

namespace {

// G [6, 4] split along dim 0 over 2 TP ranks (parts of [3, 4] = 12 elements), each part stored
// by 2 DP ranks as flat segments [0, 5) and [5, 12); plus a whole tensor from TP rank 0.
const torch::Tensor kGlobal = torch::arange(24, torch::kDouble).view({6, 4});
const torch::Tensor kWhole = torch::tensor({1.5, -2.5});

std::string save_pieces(bool drop_one = false) {
  const std::string folder = scratch_dir().string();
  for (int64_t tp = 0; tp < 2; ++tp) {
    const auto part = kGlobal.narrow(0, 3 * tp, 3).reshape({-1});
    for (int64_t dp = 0; dp < 2; ++dp) {
      const int64_t offset = dp == 0 ? 0 : 5, numel = dp == 0 ? 5 : 7;
      std::vector<StoredPiece> pieces = {
          {{"w", StateKind::exp_avg, 0, tp, 2, {3, 4}, offset, numel, "", ""}, part.narrow(0, offset, numel)}};
      if (tp == 0 && dp == 0) pieces.push_back({{"b", StateKind::exp_avg, -1, 0, 1, {2}, 0, 2, "", ""}, kWhole});
      std::vector<TensorPiece> index;
      const FileRecord file = write_pieces(folder, str("optimizer_tp", tp, "_dp", dp, ".safetensors"), pieces, index);
      if (drop_one && tp == 1 && dp == 0) index.clear();
      write_manifest_part(folder, int(2 * tp + dp), {file}, index);
    }
  }
  write_manifest(folder, 1, 0.5);
  return folder;
}

}  // namespace

TEST(CheckpointTensors, PiecesComeBackWholeAndAsOtherLayoutsParts) {
  const CheckpointTensors saved(save_pieces());
  EXPECT_EQ(saved.names(StateKind::exp_avg), (std::vector<std::string>{"b", "w"}));
  EXPECT_FALSE(saved.has("w", StateKind::weight));
  EXPECT_TRUE(torch::equal(saved.global("w", StateKind::exp_avg), kGlobal));
  EXPECT_TRUE(torch::equal(saved.global("b", StateKind::exp_avg), kWhole));

  // The same split: TP rank 1's part, in another dtype.
  auto same = torch::empty({3, 4}, torch::kFloat);
  saved.read_part("w", StateKind::exp_avg, {0, 1, 2}, same);
  EXPECT_TRUE(torch::equal(same, kGlobal.narrow(0, 3, 3).to(torch::kFloat)));
  // Three parts instead of two: rank 2 holds rows 4 and 5.
  auto third = torch::empty({2, 4}, torch::kDouble);
  saved.read_part("w", StateKind::exp_avg, {0, 2, 3}, third);
  EXPECT_TRUE(torch::equal(third, kGlobal.narrow(0, 4, 2)));
  // No split at all.
  auto whole = torch::empty({6, 4}, torch::kDouble);
  saved.read_part("w", StateKind::exp_avg, {}, whole);
  EXPECT_TRUE(torch::equal(whole, kGlobal));
}

TEST(CheckpointTensors, MissingPiecesAndMisfitsAreNamed) {
  const std::string folder = save_pieces(/*drop_one=*/true);
  const CheckpointTensors saved(folder);
  EXPECT_NE(error_of([&] { saved.global("w", StateKind::exp_avg); })
                .find("checkpoint '" + folder + "': exp_avg of 'w': part 1 holds 7 of its 12 elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] { saved.global("w", StateKind::main); }).find("main of 'w' is not stored"), std::string::npos);
  auto wrong = torch::empty({3}, torch::kDouble);
  EXPECT_NE(error_of([&] { saved.read_part("b", StateKind::exp_avg, {}, wrong); })
                .find("exp_avg of 'b': the checkpoint holds [2], which does not fit this model's [3]"),
            std::string::npos);
}

// A vocabulary padded for another TP size: rows the checkpoint lacks stay as they are, rows
// past this layout's padding are dropped; elsewhere a length mismatch is an error.
TEST(CheckpointTensors, PaddedRowsFollowTheLayout) {
  const auto global = torch::arange(8, torch::kDouble).view({4, 2});  // 4 rows saved
  auto local = torch::full({3, 2}, -1.0, torch::kDouble);             // part 1 of 2: rows 3 to 5
  place_part(global, {0, 1, 2, /*padded=*/true}, local, "wte");
  EXPECT_TRUE(torch::equal(local, torch::tensor({6.0, 7.0, -1.0, -1.0, -1.0, -1.0}, torch::kDouble).view({3, 2})));
  auto shorter = torch::empty({2, 2}, torch::kDouble);  // part 0 of 1, 2 rows: the rest dropped
  place_part(global, {0, 0, 1, true}, shorter, "wte");
  EXPECT_TRUE(torch::equal(shorter, global.narrow(0, 0, 2)));
  EXPECT_NE(error_of([&] { place_part(global, {0, 1, 2, false}, local, "fc"); })
                .find("fc: the checkpoint holds [4, 2], which does not fit this model's [3, 2] (part 1 of 2 along dimension 0)"),
            std::string::npos);
}
