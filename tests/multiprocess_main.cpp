// main() of the multi-process test binary: joins the job the launcher started (mpirun or
// tests/launch_env.sh), runs every test on every rank, and fails if any rank failed.
#include <gtest/gtest.h>

#include "core/logging.h"
#include "parallel/comm/failure.h"
#include "parallel/comm/launch.h"
#include "tests/multiprocess.h"

namespace trident::testing {
namespace {
std::shared_ptr<Communicator> the_world;
}

Communicator& world() { return *the_world; }
std::shared_ptr<Communicator> world_shared() { return the_world; }

}  // namespace trident::testing

int main(int argc, char** argv) {
  using namespace trident;
  ::testing::InitGoogleTest(&argc, argv);
  try {
    const LaunchInfo launch = detect_launch();
    log::set_process(int(launch.rank), int(launch.world_size));
    trident::testing::the_world = make_world_communicator(launch, CommOptions{});
  } catch (const std::exception& e) {
    log::error(describe(e));
    return 2;
  }
  Communicator& world = trident::testing::world();
  std::printf("rank %d of %d, backend %s\n", world.rank(), world.size(), world.backend().c_str());
  // Only rank 0 prints the report; every rank's failures still print and fail the exit status.
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  auto any_failed = torch::full({1}, double(failed != 0), torch::kDouble);
  world.all_reduce(any_failed, ReduceOp::max);
  trident::testing::the_world.reset();
  return any_failed.item<double>() > 0 ? 1 : 0;
}
