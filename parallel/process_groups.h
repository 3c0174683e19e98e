// The Megatron process grid: tensor-parallel ranks vary fastest, then data-parallel, then
// pipeline (rank = pp * (tp_size * dp_size) + dp * tp_size + tp), and the groups cut from it.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "parallel/layout.h"

namespace trident {

// The rank lists of every group, for a world of tp * dp * pp ranks. Pure arithmetic.
struct GridGroups {
  std::vector<std::vector<int>> tensor;    // same (dp, pp): tp consecutive ranks
  std::vector<std::vector<int>> data;      // same (tp, pp)
  std::vector<std::vector<int>> pipeline;  // same (tp, dp): one rank per stage
  std::vector<std::vector<int>> embedding; // first and last stage of each pipeline group
  std::vector<std::vector<int>> model;     // same dp: the tp * pp ranks holding one replica
};
GridGroups grid_groups(int world_size, int tensor, int pipeline);

struct GridCoordinates {
  int tp = 0, dp = 0, pp = 0;
};
GridCoordinates grid_coordinates(int rank, int tensor, int data);

class ProcessGroups {
 public:
  // Collective over `world`: every rank splits out its groups.
  ProcessGroups(std::shared_ptr<Communicator> world, const Layout& layout);

  Communicator& world() const { return *world_; }
  Communicator& tensor() const { return *tensor_; }
  Communicator& data() const { return *data_; }
  Communicator& pipeline() const { return *pipeline_; }
  Communicator& embedding() const { return *embedding_; }
  Communicator& model() const { return *model_; }
  // Shared ownership for layers that keep their group (the tensor-parallel layers).
  std::shared_ptr<Communicator> tensor_group() const { return tensor_; }

  const GridCoordinates& coordinates() const { return coordinates_; }
  bool first_stage() const { return coordinates_.pp == 0; }
  bool last_stage() const { return coordinates_.pp == layout_.pipeline - 1; }

 private:
  Layout layout_;
  GridCoordinates coordinates_;
  std::shared_ptr<Communicator> world_, tensor_, data_, pipeline_, embedding_, model_;
};

}  // namespace trident
