// AddressSanitizer's defaults for the programs of a TRIDENT_SANITIZE=address build (the runtime
// asks for them before main; ASAN_OPTIONS set outside still override them):
//  - no leak report at exit: LibTorch, OpenMPI and the CUDA runtime keep global allocations
//    alive on purpose, and the report would fail every program that ends well;
//  - a report ends the process with an exit code no test takes for success.
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "detect_leaks=0:exitcode=86";
}
