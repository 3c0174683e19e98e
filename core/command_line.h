// Command lines of trident's programs, through CLI11: --help on every program, options checked
// by the same rules as config keys (core/values.h) with the option named, unknown options and
// missing values reported as such.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/values.h"

namespace trident {

// A CLI11 check from a value rule, e.g. "--gpus: expected a positive integer, got 'abc'".
template <typename T>
CLI::Validator checked(const Rule<T>& rule) {
  return CLI::Validator(
      [rule](std::string& text) {
        T value{};
        return check_value(text, rule, value);
      },
      "");
}

// Parses argv into `app`, after making writes past the file-size limit fail as errors (core/files.h). Returns false when --help (or a program's --version) was asked for,
// after the primary rank printed the answer (the program then exits 0); throws Error with CLI11's message and a
// pointer to --help when the arguments are wrong.
inline bool parse_command_line(CLI::App& app, int argc, char** argv) {
  fail_writes_past_the_file_size_limit();
  try {
    app.parse(argc, argv);
    return true;
  } catch (const CLI::CallForHelp&) {
    if (log::primary()) std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::CallForVersion& e) {
    if (log::primary()) std::puts(e.what());
    return false;
  } catch (const CLI::ParseError& e) {
    fail(e.what(), " (see ", app.get_name(), " --help)");
  }
}

}  // namespace trident
