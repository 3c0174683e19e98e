// Console output of a training run: one rank (the primary) speaks, every rank may warn.
#pragma once

#include <string>

namespace trident::log {

void set_primary(bool primary);
bool primary();
// A line on stdout from the primary rank, flushed.
void info(const std::string& line);
// "warning: ..." on stderr from the primary rank.
void warn(const std::string& line);

}  // namespace trident::log
