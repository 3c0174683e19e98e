# Which tests run in one lane only. scripts/test builds and tests two LibTorch versions (1.13 and
# pip's 2.x); lane 1.13 runs every test, lane 2.x every test whose result can depend on the
# LibTorch it is built against. The others are listed here, tests/CMakeLists.txt labels them
# `once` (CTest's LABELS), and lane 2.x leaves them out when lane 1.13 ran in the same
# scripts/test (docs/building.md, "CI: what each lane proves, and its time").
#
# Once: code that calls no LibTorch, or calls it only to hold bytes.
#  - the config, the layout and its process grid, the launch environment, errors, the flight
#    recorder and the watchdog's bookkeeping, the divergence guard's rule;
#  - the planner and its formulas (core/plan: no LibTorch at all), schedules on paper (core/schedule);
#  - data and tokenizers (train/data: no LibTorch) and the programs that only read, check and
#    write files or draw: preprocess, plan, plot and its report, train's input checks and dry run,
#    --help;
#  - the include order and the GPU report's trace summaries and table (Python);
#  - the Mixture-of-Experts sweeps' layouts beyond those that take every path (MoEOnce, below).
# Both lanes: every tensor computation (the model, attention: LibTorch 2.x runs
# scaled_dot_product_attention, the parallel layers, optimizers, ZeRO, mixed precision), checkpoints
# (LibTorch's serialisation and random state), the communicators (Gloo is LibTorch's own in 2.x),
# the failure path through them, the library's API and the installed package (C++17 against C++20
# headers), export, generate, the Hugging Face interop (only 2.x has transformers).
#
# The layout-equality sweep (DataParallelRuns/EqualsSerial, 66 layouts) proves trident's index
# arithmetic once per layout in lane 1.13; lane 2.x runs the layouts that together take every
# parallel path through LibTorch 2.x: each dimension (TP with SP, CP's ring and Ulysses, each pipeline
# schedule, the ends as layers, the split backward of the zero-bubble schedules), ZeRO 1, 2 and 3, offload, both recomputations, both families,
# fp32 and fp64, both launchers and simulated hosts. The Mixture-of-Experts sweeps are cut the same
# way (tests/test_moe.cpp): suite MoE holds the layouts that take the experts through every path
# (TP with SP, CP, ZB-H1's split backward, ZeRO 2 and 3 over expert copies, EP x TP x PP, EP from
# CP under DualPipe-V, the capacity over CP and over EP x PP), suite MoEOnce the rest.
set(TRIDENT_EQUALS_SERIAL_IN_BOTH_LANES
  FourDimensionalWithRecomputeFp64 FourDimensionalInterleavedFp32 LlamaFourDimensionalFp64
  ThreeDimensionalWithZeroThreeFp64 ThreeDimensionalWithZeroTwoFp32 ContextTwoPipelineTwoGPipeZeroThreeFp64
  ContextParallelFourZeroOneFp64 OffloadZeroTwoDataTwoFp64 OffloadZeroThreeDataTwoFp32
  TensorTwoByDataTwoWithSelectiveRecomputeFp64 PipelineFiveEndsAsLayersFp64
  LlamaZeroThreeDataTwoFullRecomputeFp32 HostsFourTensorByPipelineFp32 UlyssesContextTwoFp64
  ZeroBubbleH1ThreeDimensionalZeroTwoRecomputeFp64 ZeroBubbleVDataTwoZeroThreeSelectiveRecomputeFp64
  DualPipeVPipelineTwoFp64)
set(TRIDENT_ONCE_SUITES
  Config Layout ProcessGrid Launch Errors FlightRecorder AsyncWatchdog LossGuard
  Formulas Memory Plan TimeModel DeviceProfile PipelineSchedule
  Tokenizers HfTokenizer DocumentInput ParallelEncoding IndexedDataset GPTSamples GPTData SampleOrder
  DataBlend BlendedSamples PreprocessProgram PlanProgram PlotProgram PlotReport Programs TrainProgram MoEOnce)
set(TRIDENT_ONCE_TESTS include_order include_order_self_test overlap_summary kernel_sources gpu_table)
