// A span of trident's own in LibTorch's profiler trace (train.profile_iteration's Chrome-trace
// JSON, train/profile.h): a user annotation around the enclosing scope, named by str(...) of the
// arguments, which are evaluated only while a profiler records. Costs a check otherwise.
#pragma once

#include <ATen/record_function.h>

#include "core/text.h"

#define TRIDENT_TRACE_SPAN(...)                                                              \
  RECORD_FUNCTION_WITH_SCOPE(at::RecordScope::USER_SCOPE, ::trident::str(__VA_ARGS__), \
                             c10::ArrayRef<const c10::IValue>{})
