// A process grid with named axes: the ranks of a job numbered with the first axis varying
// fastest, as data rather than an enum, so that a new kind of parallelism adds an axis (or a view)
// instead of editing every place that knows the axes. Pure arithmetic: the groups themselves
// are split by ProcessGroups (parallel/comm/process_groups.h).
//
//   axes tp 2, dp 2, pp 2 (fastest first):   rank = (pp * 2 + dp) * 2 + tp
//
//                 pp 0      pp 1
//          dp 0   [0 1]     [4 5]       groups({"tp"})       {0,1} {2,3} {4,5} {6,7}
//          dp 1   [2 3]     [6 7]       groups({"dp"})       {0,2} {1,3} {4,6} {5,7}
//                                       groups({"tp", "dp"}) {0,1,2,3} {4,5,6,7}
//
// A view factors a run of adjacent axes differently over the same ranks. Megatron's expert
// layout is one: the TP x CP x DP ranks of a pipeline stage seen as expert-TP x expert-parallel x
// expert-data-parallel (view({"tp", "cp", "dp"}, {{"etp", 1}, {"ep", 4}, {"edp", 2}}) on 8 ranks
// a stage), so an expert-parallel group is 4 consecutive ranks of a stage, whatever tp and cp are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

struct GridAxis {
  std::string name;
  int64_t size = 1;
};

class ProcessGrid {
 public:
  // `axes` fastest first; names unique and sizes at least 1 (checked).
  explicit ProcessGrid(std::vector<GridAxis> axes);

  const std::vector<GridAxis>& axes() const { return axes_; }
  int64_t world_size() const { return world_size_; }
  int64_t size(std::string_view axis) const;
  int64_t coordinate(int64_t rank, std::string_view axis) const;
  // The aligned blocks of consecutive ranks that hold the groups along `axes`: the stride of the
  // slowest of them times its size. The groups stay within nodes of n GPUs when it divides n.
  int64_t extent(const std::vector<std::string>& axes) const;

  // The groups whose members differ only along `axes` (any subset of the grid's, in any order):
  // one per rank at coordinate 0 on all of them, members in rank order, groups by first rank.
  std::vector<std::vector<int>> groups(const std::vector<std::string>& axes) const;

  // The same ranks with the adjacent axes `replaced` (named fastest first) factored as `by`,
  // whose sizes multiply to theirs.
  ProcessGrid view(const std::vector<std::string>& replaced, std::vector<GridAxis> by) const;

 private:
  size_t index_of(std::string_view axis) const;
  std::vector<size_t> indices_of(const std::vector<std::string>& axes) const;  // each named once
  int64_t stride(size_t index) const;

  std::vector<GridAxis> axes_;
  int64_t world_size_ = 1;
};

}  // namespace trident
