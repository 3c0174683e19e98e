// What every test process runs with, by CTest or by hand (values set outside are kept):
//  - one thread: CTest runs tests side by side on the same cores, so each test and each program
//    it starts keeps to one thread (train.threads' default follows OMP_NUM_THREADS): OpenMP threads
//    that wait spin, and spinning pools on shared cores slow each other down several times;
//  - MKL_CBWR=COMPATIBLE: MKL (in pip's LibTorch) rounds differently with memory alignment unless
//    asked for reproducible results, and the bit-exact and 1e-10 comparisons need them. Debian's
//    OpenBLAS ignores the variable.
#include <cstdlib>

namespace {
const bool one_thread = setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0) == 0;
const bool reproducible_mkl = setenv("MKL_CBWR", "COMPATIBLE", /*overwrite=*/0) == 0;
}  // namespace
