// trident's public API: what a program that trains with trident may include and rely on
// (docs/library.md). Every other header is internal and may change without notice.
#pragma once

#include "core/config.h"                 // Config: load, parse, overrides; the model.*, parallel.* ... sections
#include "core/error.h"                  // Error, fail(): trident's one exception type
#include "model/block.h"                 // TransformerBlock, BlockContext, register_block: blocks of one's own
#include "model/gpt.h"                   // SelfAttention, MLP: the built-in block's parts; TokenLoss
#include "model/layers.h"                // Norm, PositionEmbedding
#include "parallel/comm/failure.h"       // report_failure, join_job: how a rank's failure ends the job
#include "parallel/comm/launch.h"        // LaunchInfo, detect_launch: mpirun, torchrun-style, SLURM, one process
#include "parallel/comm/process_groups.h"  // ProcessGroups: Trainer::groups(), a rank's coordinates and groups
#include "parallel/parameter_role.h"     // ParameterRole, ParallelModule: parameters that say how they are split
#include "parallel/tensor_parallel.h"    // column/row-parallel linear layers, vocabulary-parallel cross-entropy
#include "train/data/program_samples.h"  // ProgramSamples, SampleSource: a program's own data
#include "train/families/family.h"      // Family, register_family, family_of: Hugging Face formats of one's own
#include "train/hooks.h"                 // Hooks: calls into train(), extra metrics, the program's loss
#include "train/layout_check.h"          // check_layouts: a model trains the same at every layout
#include "train/run_training.h"          // run_training: a program's main, as the train program's
#include "train/stop_signals.h"          // install_stop_signals: SIGTERM/SIGINT save and stop
#include "train/trainer.h"               // Trainer: train(), step(), evaluate(), save_checkpoint(), request_stop()
