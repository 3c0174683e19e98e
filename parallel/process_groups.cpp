#include "parallel/process_groups.h"

#include <algorithm>

#include "core/error.h"

namespace trident {
namespace {

// The group of `groups` holding `rank`, as (color, key) for Communicator::split. A rank in none
// of them (a middle pipeline stage for the embedding group) gets a group of its own.
std::pair<int, int> color_and_key(const std::vector<std::vector<int>>& groups, int rank) {
  for (size_t g = 0; g < groups.size(); ++g) {
    auto at = std::find(groups[g].begin(), groups[g].end(), rank);
    if (at != groups[g].end()) return {int(g), int(at - groups[g].begin())};
  }
  return {int(groups.size()) + rank, 0};
}

}  // namespace

GridCoordinates grid_coordinates(int rank, int tensor, int data) {
  return {rank % tensor, rank / tensor % data, rank / (tensor * data)};
}

GridGroups grid_groups(int world_size, int tensor, int pipeline) {
  if (world_size % (tensor * pipeline) != 0)
    fail("world size ", world_size, " is not divisible by tensor * pipeline = ", tensor * pipeline);
  const int data = world_size / (tensor * pipeline);
  auto rank_of = [&](int tp, int dp, int pp) { return pp * tensor * data + dp * tensor + tp; };
  GridGroups g;
  for (int pp = 0; pp < pipeline; ++pp)
    for (int dp = 0; dp < data; ++dp) {
      g.tensor.emplace_back();
      for (int tp = 0; tp < tensor; ++tp) g.tensor.back().push_back(rank_of(tp, dp, pp));
    }
  for (int pp = 0; pp < pipeline; ++pp)
    for (int tp = 0; tp < tensor; ++tp) {
      g.data.emplace_back();
      for (int dp = 0; dp < data; ++dp) g.data.back().push_back(rank_of(tp, dp, pp));
    }
  for (int dp = 0; dp < data; ++dp)
    for (int tp = 0; tp < tensor; ++tp) {
      g.pipeline.emplace_back();
      for (int pp = 0; pp < pipeline; ++pp) g.pipeline.back().push_back(rank_of(tp, dp, pp));
      const auto& stages = g.pipeline.back();
      g.embedding.push_back(pipeline == 1 ? std::vector<int>{stages.front()}
                                          : std::vector<int>{stages.front(), stages.back()});
    }
  // Pipeline groups are ordered by (dp, tp); a replica is every pipeline group of one dp.
  for (int dp = 0; dp < data; ++dp) {
    g.model.emplace_back();
    for (int pp = 0; pp < pipeline; ++pp)
      for (int tp = 0; tp < tensor; ++tp) g.model.back().push_back(rank_of(tp, dp, pp));
  }
  return g;
}

ProcessGroups::ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout)
    : layout_(layout), world_(std::move(world)) {
  if (world_->size() != layout.world_size)
    fail("the communicator has ", world_->size(), " ranks but the layout expects ", layout.world_size);
  const int rank = world_->rank();
  coordinates_ = grid_coordinates(rank, int(layout.tensor), int(layout.data));
  const GridGroups groups = grid_groups(int(layout.world_size), int(layout.tensor), int(layout.pipeline));
  auto split = [&](const std::vector<std::vector<int>>& lists, const char* name) {
    auto [color, key] = color_and_key(lists, rank);
    auto group = world_->split(color, key);
    group->set_name(name);
    return group;
  };
  tensor_ = split(groups.tensor, "tensor-parallel");
  data_ = split(groups.data, "data-parallel");
  pipeline_ = split(groups.pipeline, "pipeline");
  embedding_ = split(groups.embedding, "embedding");
  model_ = split(groups.model, "model-parallel");
}

}  // namespace trident
