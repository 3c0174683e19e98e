#include "parallel/comm/process_groups.h"

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

std::shared_ptr<Communicator> split_as(Communicator& world, const std::vector<std::vector<int>>& groups,
                                       const std::string& name) {
  auto [color, key] = color_and_key(groups, world.rank());
  auto group = world.split(color, key);
  group->set_name(name);
  return group;
}

}  // namespace

std::vector<std::vector<int>> embedding_groups(const ProcessGrid& grid, bool ends_on_first_stage) {
  std::vector<std::vector<int>> ends;
  for (const auto& stages : grid.groups({"pp"}))
    ends.push_back(stages.size() == 1 || ends_on_first_stage ? std::vector<int>{stages.front()}
                                                             : std::vector<int>{stages.front(), stages.back()});
  return ends;
}

ProcessGroups::ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout)
    : layout_(layout), world_(std::move(world)) {
  TRIDENT_CHECK(world_->size() == layout.world_size(), "the communicator has ", world_->size(),
                " ranks but the layout expects ", layout.world_size());
  const ProcessGrid grid = layout.grid();
  const int rank = world_->rank();
  auto at = [&](const char* axis) { return int(grid.coordinate(rank, axis)); };
  coordinates_ = {at("tp"), at("cp"), at("dp"), at("pp")};
  tp_ = split(grid, {"tp"}, "tensor-parallel");
  cp_ = split(grid, {"cp"}, "context-parallel");
  // Context parallelism's two levels (USP): Ulysses' groups and the rings across them, each the
  // context-parallel group itself when the other level is one rank wide.
  const ProcessGrid context = layout.context_grid();
  auto level = [&](const char* axis, const char* other, const char* name) {
    if (context.size(other) == 1) return cp_;
    return context.size(axis) == 1 ? make_self_communicator() : split(context, {axis}, name);
  };
  ulysses_ = level("ulysses", "ring", "Ulysses");
  ring_ = level("ring", "ulysses", "ring-attention");
  dp_ = split(grid, {"dp"}, "data-parallel");
  // The ranks holding copies of a weight. Without context parallelism it is the data-parallel
  // group, and errors say so.
  dp_cp_ = split(grid, {"cp", "dp"}, layout.cp_size > 1 ? "data-and-context-parallel" : "data-parallel");
  pp_ = split(grid, {"pp"}, "pipeline");
  embedding_ = split_as(*world_, embedding_groups(grid, v_shaped(layout.schedule)), "embedding");
  mp_ = split(grid, {"tp", "pp"}, "model-parallel");  // one replica's ranks
  if (layout.ep_size == 1) {
    ep_ = make_self_communicator();
    edp_ = dp_cp_;
  } else {
    const ProcessGrid experts = layout.expert_grid();
    ep_ = split(experts, {"ep"}, "expert-parallel");
    edp_ = split(experts, {"edp"}, "expert-data-parallel");
  }
}

std::shared_ptr<Communicator> ProcessGroups::split(const ProcessGrid& grid, const std::vector<std::string>& axes,
                                                   const std::string& name) const {
  TRIDENT_CHECK(grid.world_size() == world_->size(), "a grid of ", grid.world_size(), " ranks for a world of ",
                world_->size());
  return split_as(*world_, grid.groups(axes), name);
}

}  // namespace trident
