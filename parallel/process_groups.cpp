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

GridCoordinates grid_coordinates(int rank, int tp_size, int dp_size) {
  return {rank % tp_size, rank / tp_size % dp_size, rank / (tp_size * dp_size)};
}

GridGroups grid_groups(int world_size, int tp_size, int pp_size) {
  if (world_size % (tp_size * pp_size) != 0)
    fail("world size ", world_size, " is not divisible by tp_size * pp_size = ", tp_size * pp_size);
  const int dp_size = world_size / (tp_size * pp_size);
  auto rank_of = [&](int tp, int dp, int pp) { return pp * tp_size * dp_size + dp * tp_size + tp; };
  GridGroups g;
  for (int pp = 0; pp < pp_size; ++pp)
    for (int dp = 0; dp < dp_size; ++dp) {
      g.tp.emplace_back();
      for (int tp = 0; tp < tp_size; ++tp) g.tp.back().push_back(rank_of(tp, dp, pp));
    }
  for (int pp = 0; pp < pp_size; ++pp)
    for (int tp = 0; tp < tp_size; ++tp) {
      g.dp.emplace_back();
      for (int dp = 0; dp < dp_size; ++dp) g.dp.back().push_back(rank_of(tp, dp, pp));
    }
  for (int dp = 0; dp < dp_size; ++dp)
    for (int tp = 0; tp < tp_size; ++tp) {
      g.pp.emplace_back();
      for (int pp = 0; pp < pp_size; ++pp) g.pp.back().push_back(rank_of(tp, dp, pp));
      const auto& stages = g.pp.back();
      g.embedding.push_back(pp_size == 1 ? std::vector<int>{stages.front()}
                                         : std::vector<int>{stages.front(), stages.back()});
    }
  // pp groups are ordered by (dp, tp); a replica is every pp group of one dp.
  for (int dp = 0; dp < dp_size; ++dp) {
    g.mp.emplace_back();
    for (int pp = 0; pp < pp_size; ++pp)
      for (int tp = 0; tp < tp_size; ++tp) g.mp.back().push_back(rank_of(tp, dp, pp));
  }
  return g;
}

ProcessGroups::ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout)
    : layout_(layout), world_(std::move(world)) {
  if (world_->size() != layout.world_size())
    fail("the communicator has ", world_->size(), " ranks but the layout expects ", layout.world_size());
  const int rank = world_->rank();
  coordinates_ = grid_coordinates(rank, int(layout.tp_size), int(layout.dp_size));
  const GridGroups groups = grid_groups(int(layout.world_size()), int(layout.tp_size), int(layout.pp_size));
  auto split = [&](const std::vector<std::vector<int>>& lists, const char* name) {
    auto [color, key] = color_and_key(lists, rank);
    auto group = world_->split(color, key);
    group->set_name(name);
    return group;
  };
  tp_ = split(groups.tp, "tensor-parallel");
  dp_ = split(groups.dp, "data-parallel");
  pp_ = split(groups.pp, "pipeline");
  embedding_ = split(groups.embedding, "embedding");
  mp_ = split(groups.mp, "model-parallel");
}

}  // namespace trident
