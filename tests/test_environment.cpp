// What every test process runs with. CTest runs tests side by side on the same cores, so each
// test and each program it starts keeps to one thread (train.threads' default follows
// OMP_NUM_THREADS): OpenMP threads that wait spin, and spinning pools on shared cores slow each
// other down several times. A value set outside is kept.
#include <cstdlib>

namespace {
const bool one_thread = setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0) == 0;
}  // namespace
