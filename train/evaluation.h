// Validation: the mean loss over a fixed set of global batches of each validation dataset,
// forward only, cut short by a stop signal.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/comm/communicator.h"
#include "train/data/samples.h"
#include "train/stage_forward.h"

namespace trident {

// The mean loss over `eval_iters` global batches of `global_batch` samples (the same batches
// every call) of each of `validation`'s datasets, in order, computed by `forward`. Before each
// batch every rank agrees over `cpu_world` whether a stop signal came (train/stop_signals.h):
// then the validation of `iteration` is cut short, with a warning, and the result is empty, so
// that a run stops within one step or one validation batch of the signal. Collective.
std::vector<double> evaluate_datasets(const std::vector<DatasetPart>& validation, int64_t eval_iters,
                                      int64_t global_batch, StageForward& forward, Communicator& cpu_world,
                                      int64_t iteration);

}  // namespace trident
