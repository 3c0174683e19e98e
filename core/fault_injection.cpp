#include "core/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace trident {
namespace {

struct FaultRequest {
  int64_t at = 0;  // 0: none
  bool kill = false;
};

FaultRequest read_request() {
  const char* text = std::getenv("TRIDENT_FAULT_AT");
  if (!text || !*text) return {};
  const std::string value = text;
  const size_t colon = value.find(':');
  FaultRequest request;
  try {
    const std::string number = value.substr(0, colon);
    size_t used = 0;
    request.at = std::stoll(number, &used);
    if (used != number.size()) request.at = -1;
  } catch (const std::exception&) {
    request.at = -1;
  }
  request.kill = colon != std::string::npos && value.substr(colon + 1) == "kill";
  if (request.at < 1 || (colon != std::string::npos && !request.kill))
    fail("TRIDENT_FAULT_AT='", value, "': expected N or N:kill, N a positive integer (the failure point to fail at)");
  return request;
}

FaultRequest& request() {
  static FaultRequest requested = read_request();
  return requested;
}
std::atomic<int64_t> reached{0};

}  // namespace

bool fault_point() {
  const FaultRequest& fault = request();
  if (fault.at == 0 || ++reached != fault.at) return false;
  if (fault.kill) ::kill(::getpid(), SIGKILL);
  return true;
}

void inject_fault_at(int64_t point) {
  request() = {point, false};
  reached = 0;
}

}  // namespace trident
