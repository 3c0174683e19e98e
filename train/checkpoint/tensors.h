// Tensors of a checkpoint by global name, in any layout (TensorPiece in manifest.h
// draws the scheme): the writer stores a rank's pieces in one safetensors file and indexes
// them; the reader assembles a global tensor from the pieces of whatever layout saved it, and
// place_part cuts out the part a rank of another layout holds.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/parameter_role.h"
#include "train/checkpoint/manifest.h"

namespace trident {

class Progress;
class SafetensorsFile;

struct StoredPiece {
  TensorPiece piece;    // file and key are filled in by write_pieces
  torch::Tensor value;  // piece.numel elements
};

// Writes `pieces` as <folder>/<file> (safetensors) and returns the file's record; `index`
// receives the pieces with their file and key; `progress` advances by their bytes.
FileRecord write_pieces(const std::string& folder, const std::string& file, std::vector<StoredPiece> pieces,
                        std::vector<TensorPiece>& index, Progress* progress = nullptr);

// Where a rank's tensor sits in the global one: part `part` of `parts` along `dim` (-1: whole).
// `padded`: dim is padded to a multiple that depends on the layout (the vocabulary).
// Stacked experts are moreover part `expert_part` of `expert_parts` along dimension 0 of that
// part: a contiguous run of its elements, so a checkpoint stores them as pieces of the
// tensor-parallel part and any expert-parallel layout reads them back.
struct PartPlace {
  int64_t dim = -1;
  int64_t part = 0, parts = 1;
  bool padded = false;
  int64_t expert_part = 0, expert_parts = 1;
};

class CheckpointTensors {
 public:
  // Reads the manifest of `folder`; files are checked against it when first read.
  explicit CheckpointTensors(std::string folder);
  ~CheckpointTensors();

  // Names of the stored tensors of `kind`, sorted.
  std::vector<std::string> names(StateKind kind) const;
  bool has(const std::string& name, StateKind kind) const;
  // The whole tensor as the saving layout held it (its padded vocabulary included), in the
  // stored dtype. Error naming the checkpoint and tensor when a piece is missing or the pieces
  // do not fit together.
  torch::Tensor global(const std::string& name, StateKind kind) const;
  // Fills `local`, the part at `place` (converting the dtype): when the saving layout split the
  // tensor the same way, from that part's pieces only; else cut from the whole tensor
  // (place_part).
  void read_part(const std::string& name, StateKind kind, const PartPlace& place, torch::Tensor& local) const;

 private:
  const std::vector<TensorPiece>& pieces_of(const std::string& name, StateKind kind) const;
  // Part `part` of the saved tensor, assembled from its pieces.
  torch::Tensor saved_part(const std::string& name, StateKind kind, int64_t part) const;
  std::string describe(const std::string& name, StateKind kind) const;
  const SafetensorsFile& file(const std::string& name) const;

  std::string folder_;
  Manifest manifest_;
  std::map<std::pair<std::string, StateKind>, std::vector<TensorPiece>> pieces_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // verified, opened
};

// Where a parameter of `role` sits on the tensor-parallel place `tp` and expert-parallel `ep`.
PartPlace part_place(const ParameterRole& role, const TensorParallelPlace& tp, const ExpertParallelPlace& ep);

// Copies into `local` its part of `global`. Shapes must fit, except along a padded dim: rows
// global lacks (padding of a layout with more TP ranks) are left as they are, rows past this
// layout's padding are dropped. `what` names the tensor in errors.
void place_part(const torch::Tensor& global, const PartPlace& place, torch::Tensor& local, const std::string& what);

// Sets every parameter to its part of the global weight of the same name in `weights` (from
// `source`, which errors name).
void place_parameters(const std::map<std::string, torch::Tensor>& weights, const PlacedParameters& local,
                      const std::string& source);

}  // namespace trident
