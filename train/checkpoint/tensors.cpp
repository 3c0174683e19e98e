#include "train/checkpoint/tensors.h"

#include <filesystem>

#include "core/error.h"
#include "train/checkpoint/safetensors.h"

namespace fs = std::filesystem;

namespace trident {
namespace {

std::string shape_text(torch::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

FileRecord write_pieces(const std::string& folder, const std::string& file, std::vector<StoredPiece> pieces,
                        std::vector<TensorPiece>& index, Progress* progress) {
  Safetensors out;
  for (auto& [piece, value] : pieces) {
    TRIDENT_CHECK(value.numel() == piece.numel, piece.name, ": ", value.numel(), " values for ", piece.numel);
    piece.file = file;
    piece.key = str(name(piece.kind), "/", piece.name, "/", piece.offset);
    out.tensors.emplace_back(piece.key, value.reshape({-1}));
    index.push_back(piece);
  }
  return {file, write_safetensors((fs::path(folder) / file).string(), out, progress)};
}

CheckpointTensors::CheckpointTensors(std::string folder)
    : folder_(std::move(folder)), manifest_(Manifest::read(folder_)) {
  for (const auto& piece : manifest_.pieces()) pieces_[{piece.name, piece.kind}].push_back(piece);
}

CheckpointTensors::~CheckpointTensors() = default;

std::vector<std::string> CheckpointTensors::names(StateKind kind) const {
  std::vector<std::string> out;
  for (const auto& [key, pieces] : pieces_)
    if (key.second == kind) out.push_back(key.first);
  return out;  // the map's order: sorted by name
}

bool CheckpointTensors::has(const std::string& name, StateKind kind) const { return pieces_.count({name, kind}) != 0; }

const SafetensorsFile& CheckpointTensors::file(const std::string& name) const {
  auto& opened = files_[name];
  if (!opened) {
    manifest_.verify(name);
    opened = std::make_unique<SafetensorsFile>((fs::path(folder_) / name).string());
  }
  return *opened;
}

std::string CheckpointTensors::describe(const std::string& name, StateKind kind) const {
  return str("checkpoint '", folder_, "': ", trident::name(kind), " of '", name, "'");
}

const std::vector<TensorPiece>& CheckpointTensors::pieces_of(const std::string& name, StateKind kind) const {
  const auto found = pieces_.find({name, kind});
  if (found == pieces_.end()) fail(describe(name, kind), " is not stored");
  const auto& pieces = found->second;
  for (const auto& piece : pieces)
    if (piece.parts != pieces.front().parts || piece.dim != pieces.front().dim || piece.part < 0 || piece.part >= piece.parts)
      fail(describe(name, kind), " has pieces of different layouts");
  return pieces;
}

torch::Tensor CheckpointTensors::saved_part(const std::string& name, StateKind kind, int64_t part) const {
  torch::Tensor out;
  int64_t filled = 0;
  for (const auto& piece : pieces_of(name, kind)) {
    if (piece.part != part) continue;
    const torch::Tensor value = file(piece.file).read(piece.key);
    if (!out.defined()) out = torch::empty(piece.part_shape, value.options());
    if (out.sizes() != torch::IntArrayRef(piece.part_shape) || value.numel() != piece.numel || piece.offset < 0 ||
        piece.offset + piece.numel > out.numel())
      fail(describe(name, kind), ": piece '", piece.key, "' of ", piece.file, " does not fit its part ",
           shape_text(out.sizes()));
    out.view({-1}).narrow(0, piece.offset, piece.numel).copy_(value);
    filled += piece.numel;
  }
  // Pieces never overlap (each element has one owner), so a count tells a complete part.
  if (!out.defined() || filled != out.numel())
    fail(describe(name, kind), ": part ", part, " holds ", filled, " of its ", out.defined() ? out.numel() : 0,
         " elements");
  return out;
}

torch::Tensor CheckpointTensors::global(const std::string& name, StateKind kind) const {
  const TensorPiece& first = pieces_of(name, kind).front();
  if (first.dim < 0) return saved_part(name, kind, 0);
  std::vector<torch::Tensor> parts;
  for (int64_t p = 0; p < first.parts; ++p) parts.push_back(saved_part(name, kind, p));
  return torch::cat(parts, first.dim);
}

void CheckpointTensors::read_part(const std::string& name, StateKind kind, const PartPlace& place,
                                  torch::Tensor& local) const {
  const TensorPiece& first = pieces_of(name, kind).front();
  const bool same_split = first.dim == place.dim && first.parts == place.parts;
  PartPlace experts_only;  // within the saved part, only the experts remain to be cut
  experts_only.expert_part = place.expert_part;
  experts_only.expert_parts = place.expert_parts;
  place_part(same_split ? saved_part(name, kind, place.part) : global(name, kind),
             same_split ? experts_only : place, local, describe(name, kind));
}

void place_part(const torch::Tensor& whole, const PartPlace& place, torch::Tensor& local, const std::string& what) {
  torch::NoGradGuard no_grad;
  const int64_t dim = place.dim;
  const auto mismatch = [&] {
    fail(what, ": the checkpoint holds ", shape_text(whole.sizes()), ", which does not fit this model's ",
         shape_text(local.sizes()), dim < 0 ? "" : str(" (part ", place.part, " of ", place.parts, " along dimension ", dim, ")"),
         place.expert_parts == 1 ? "" : str(" (experts ", place.expert_part, " of ", place.expert_parts, ")"));
  };
  if (whole.dim() != local.dim()) mismatch();
  TRIDENT_CHECK(place.expert_parts == 1 || dim != 0, "experts split along tensor parallelism's dimension");
  torch::Tensor global = whole;
  if (place.expert_parts > 1) {
    if (global.size(0) != place.expert_parts * local.size(0)) mismatch();
    global = global.narrow(0, place.expert_part * local.size(0), local.size(0));
  }
  if (dim < 0) {
    if (global.sizes() != local.sizes()) mismatch();
    local.copy_(global);  // to local's dtype and device
    return;
  }
  for (int64_t d = 0; d < local.dim(); ++d)
    if (d != dim && global.size(d) != local.size(d)) mismatch();
  const int64_t size = local.size(dim), begin = place.part * size;
  if (!place.padded && global.size(dim) != place.parts * size) mismatch();
  const int64_t available = std::min(size, std::max<int64_t>(0, global.size(dim) - begin));
  if (available > 0) local.narrow(dim, 0, available).copy_(global.narrow(dim, begin, available));
}

PartPlace part_place(const ParameterRole& role, const TensorParallelPlace& tp, const ExpertParallelPlace& ep) {
  PartPlace place;
  if (!role.replicated()) place = {role.partition_dim, tp.rank, tp.size, role.layout_padded};
  if (role.expert) {
    place.expert_part = ep.rank;
    place.expert_parts = ep.size;
  }
  return place;
}

void place_parameters(const std::map<std::string, torch::Tensor>& weights, const PlacedParameters& local,
                      const std::string& source) {
  for (const auto& p : local.params) {
    const auto found = weights.find(p.name);
    if (found == weights.end()) fail(source, " has no weight '", p.name, "'");
    torch::Tensor part = p.tensor;
    place_part(found->second, part_place(p.role, local.tp, local.ep), part, str(source, ": '", p.name, "'"));
  }
}

}  // namespace trident
