#include "train/hooks.h"

#include <cstdlib>

#include "core/error.h"
#include "core/text.h"
#include "parallel/comm/failure.h"

namespace trident {

void run_hook(const char* name, int64_t iteration, int64_t world_size, const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    const Error error(str("the program's hook ", name, " at iteration ", iteration, ": ", describe(e)));
    if (world_size == 1) throw error;
    std::_Exit(report_failure(error, int(world_size)));  // ends the job (never returns)
  }
}

}  // namespace trident
