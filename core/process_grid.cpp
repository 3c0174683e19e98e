#include "core/process_grid.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

std::string axis_names(const std::vector<GridAxis>& axes) {
  std::vector<std::string> names;
  for (const GridAxis& axis : axes) names.push_back(axis.name);
  return join(names, ", ");
}

}  // namespace

ProcessGrid::ProcessGrid(std::vector<GridAxis> axes) : axes_(std::move(axes)) {
  for (size_t i = 0; i < axes_.size(); ++i) {
    TRIDENT_CHECK(axes_[i].size >= 1, "grid axis ", axes_[i].name, " has size ", axes_[i].size);
    for (size_t j = 0; j < i; ++j)
      TRIDENT_CHECK(axes_[j].name != axes_[i].name, "grid axis ", axes_[i].name, " is named twice");
    world_size_ *= axes_[i].size;
  }
}

size_t ProcessGrid::index_of(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return i;
  TRIDENT_CHECK(false, "no grid axis ", axis, " among ", axis_names(axes_));
}

int64_t ProcessGrid::stride(size_t index) const {
  int64_t stride = 1;
  for (size_t i = 0; i < index; ++i) stride *= axes_[i].size;
  return stride;
}

int64_t ProcessGrid::size(std::string_view axis) const { return axes_[index_of(axis)].size; }

int64_t ProcessGrid::coordinate(int64_t rank, std::string_view axis) const {
  TRIDENT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " outside a grid of ", world_size_);
  const size_t i = index_of(axis);
  return rank / stride(i) % axes_[i].size;
}

std::vector<size_t> ProcessGrid::indices_of(const std::vector<std::string>& axes) const {
  std::vector<size_t> indices;
  for (const std::string& axis : axes) {
    indices.push_back(index_of(axis));
    TRIDENT_CHECK(std::count(axes.begin(), axes.end(), axis) == 1, "grid axis ", axis, " asked for twice");
  }
  return indices;
}

int64_t ProcessGrid::extent(const std::vector<std::string>& axes) const {
  size_t slowest = 0;
  for (size_t i : indices_of(axes)) slowest = std::max(slowest, i + 1);
  return stride(slowest);
}

std::vector<std::vector<int>> ProcessGrid::groups(const std::vector<std::string>& axes) const {
  const std::vector<size_t> varying = indices_of(axes);
  std::vector<std::vector<int>> groups;
  for (int64_t first = 0; first < world_size_; ++first) {
    if (std::any_of(varying.begin(), varying.end(),
                    [&](size_t i) { return first / stride(i) % axes_[i].size != 0; }))
      continue;
    std::vector<int> members = {int(first)};
    for (size_t i : varying) {  // each axis multiplies the members found so far
      std::vector<int> more;
      for (int64_t step = 0; step < axes_[i].size; ++step)
        for (int member : members) more.push_back(int(member + step * stride(i)));
      members = std::move(more);
    }
    std::sort(members.begin(), members.end());
    groups.push_back(std::move(members));
  }
  return groups;
}

ProcessGrid ProcessGrid::view(const std::vector<std::string>& replaced, std::vector<GridAxis> by) const {
  TRIDENT_CHECK(!replaced.empty(), "a grid view replaces no axes");
  const size_t first = index_of(replaced.front());
  int64_t product = 1;
  for (size_t k = 0; k < replaced.size(); ++k) {
    TRIDENT_CHECK(first + k < axes_.size() && axes_[first + k].name == replaced[k], "a grid view replaces ",
                  join(replaced, ", "), ", which are not adjacent axes (fastest first) of ", axis_names(axes_));
    product *= axes_[first + k].size;
  }
  int64_t by_product = 1;
  for (const GridAxis& axis : by) by_product *= axis.size;
  TRIDENT_CHECK(by_product == product, "a grid view factors ", join(replaced, ", "), " (", product, " ranks) as ",
                axis_names(by), " (", by_product, " ranks)");
  std::vector<GridAxis> axes(axes_.begin(), axes_.begin() + std::ptrdiff_t(first));
  axes.insert(axes.end(), by.begin(), by.end());
  axes.insert(axes.end(), axes_.begin() + std::ptrdiff_t(first + replaced.size()), axes_.end());
  return ProcessGrid(std::move(axes));
}

}  // namespace trident
