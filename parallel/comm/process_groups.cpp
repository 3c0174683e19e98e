#include "parallel/comm/process_groups.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/error.h"

namespace trident {
namespace {

// The grid's axes, fastest first.
enum Axis { kTp, kCp, kDp, kPp, kAxes };
using Sizes = std::array<int, kAxes>;

std::array<int, kAxes> coordinates_of(int rank, const Sizes& sizes) {
  std::array<int, kAxes> at{};
  for (int axis = 0; axis < kAxes; ++axis) {
    at[size_t(axis)] = rank % sizes[size_t(axis)];
    rank /= sizes[size_t(axis)];
  }
  return at;
}

// The groups whose members differ only along `varying` (axes listed fastest first): one per
// rank that is at 0 on all of them, its members in rank order.
std::vector<std::vector<int>> groups_along(const Sizes& sizes, std::vector<Axis> varying) {
  Sizes strides{};
  int world = 1;
  for (int axis = 0; axis < kAxes; ++axis) {
    strides[size_t(axis)] = world;
    world *= sizes[size_t(axis)];
  }
  std::vector<std::vector<int>> groups;
  for (int first = 0; first < world; ++first) {
    const auto at = coordinates_of(first, sizes);
    if (std::any_of(varying.begin(), varying.end(), [&](Axis a) { return at[size_t(a)] != 0; })) continue;
    std::vector<int> members = {first};
    for (Axis axis : varying) {  // each axis multiplies the members found so far
      std::vector<int> more;
      for (int step = 0; step < sizes[size_t(axis)]; ++step)
        for (int member : members) more.push_back(member + step * strides[size_t(axis)]);
      members = std::move(more);
    }
    std::sort(members.begin(), members.end());
    groups.push_back(std::move(members));
  }
  return groups;
}

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

GridCoordinates grid_coordinates(int rank, int tp_size, int cp_size, int dp_size) {
  // pp is what is left, whatever the pipeline's size.
  const auto at = coordinates_of(rank, {tp_size, cp_size, dp_size, std::numeric_limits<int>::max()});
  return {at[kTp], at[kCp], at[kDp], at[kPp]};
}

GridGroups grid_groups(int world_size, int tp_size, int cp_size, int pp_size) {
  TRIDENT_CHECK(world_size % (tp_size * cp_size * pp_size) == 0, "world size ", world_size,
                " is not divisible by tp_size * cp_size * pp_size = ", tp_size * cp_size * pp_size);
  const Sizes sizes = {tp_size, cp_size, world_size / (tp_size * cp_size * pp_size), pp_size};
  GridGroups g;
  g.tp = groups_along(sizes, {kTp});
  g.cp = groups_along(sizes, {kCp});
  g.dp = groups_along(sizes, {kDp});
  g.dp_cp = groups_along(sizes, {kCp, kDp});
  g.pp = groups_along(sizes, {kPp});
  for (const auto& stages : g.pp)
    g.embedding.push_back(pp_size == 1 ? std::vector<int>{stages.front()}
                                       : std::vector<int>{stages.front(), stages.back()});
  g.mp = groups_along(sizes, {kTp, kPp});
  return g;
}

ProcessGroups::ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout)
    : layout_(layout), world_(std::move(world)) {
  TRIDENT_CHECK(world_->size() == layout.world_size(), "the communicator has ", world_->size(),
                " ranks but the layout expects ", layout.world_size());
  const int rank = world_->rank();
  coordinates_ = grid_coordinates(rank, int(layout.tp_size), int(layout.cp_size), int(layout.dp_size));
  const GridGroups groups =
      grid_groups(int(layout.world_size()), int(layout.tp_size), int(layout.cp_size), int(layout.pp_size));
  auto split = [&](const std::vector<std::vector<int>>& lists, const char* name) {
    auto [color, key] = color_and_key(lists, rank);
    auto group = world_->split(color, key);
    group->set_name(name);
    return group;
  };
  tp_ = split(groups.tp, "tensor-parallel");
  cp_ = split(groups.cp, "context-parallel");
  dp_ = split(groups.dp, "data-parallel");
  // Without context parallelism it is the data-parallel group, and errors say so.
  dp_cp_ = split(groups.dp_cp, layout.cp_size > 1 ? "data-and-context-parallel" : "data-parallel");
  pp_ = split(groups.pp, "pipeline");
  embedding_ = split(groups.embedding, "embedding");
  mp_ = split(groups.mp, "model-parallel");
}

}  // namespace trident
