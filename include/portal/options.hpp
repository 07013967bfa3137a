// options.hpp: the command-line options portal-run and `portal` share, checked
// once and worded as Portal's own messages.
//
// Every option's value is checked by a validator of this file, never by one of
// CLI11's (whose messages read `Value 0 not in range 0.000000 to 1797693...`),
// and every CLI11 parse error becomes one `<option> <value>: <problem>` line
// (usage_problem), printed as `portal: <that line> (see CMD --help)` with exit
// status 2 by both commands.  A validator's message starts with the value it
// refused ("1M: below ..."), so that the line reads `--mem 1M: below ...`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace portal::options {

// The exit status of a usage error, on every command (as python's own).
constexpr int kUsageExit = 2;

// --mem SIZE (size.hpp's parse_mem_option against this machine's memory, the
// tripwire's machine_memory()).  `advice` follows a refusal for being more than
// the machine has (e.g. "resume the job on a larger machine: it stays suspended").
// `this_machine` false: the size is for another machine (a Slurm node), not checked
// against this one.
CLI::Validator mem_size(const std::string& advice, bool this_machine = true);
// A whole number from 1 to INT_MAX ("--run 0: not a number from 1 up").
CLI::Validator positive_integer();
// A number of days, 0 or more, finite ("--older-than nan: not a number of days").
CLI::Validator non_negative_number();
// One of `names` ("--state x: not one of running, suspended, ...").
CLI::Validator one_of(const std::vector<std::string>& names);
// An existing file or directory.
CLI::Validator existing_path();

// --preempt-grace SECONDS: digits with at most one point, 0 to kGraceSecondsMax;
// never nan or inf (nan passed a range check, and the signal never came).
constexpr double kGraceSecondsMax = 1e6;
std::optional<double> parse_seconds(const std::string& text);
CLI::Validator grace_seconds();

// --device-map FROM:TO[,FROM:TO...] (portal resume), at most kDeviceMapMax
// characters; the problem with `text`, nothing when it is one.
constexpr std::size_t kDeviceMapMax = 1024;
std::optional<std::string> device_map_problem(const std::string& text);
CLI::Validator device_map();

// A value as a message shows it: cut after kShownMax characters, saying its length.
constexpr std::size_t kShownMax = 80;
std::string shown(const std::string& value);

// The problem in `error` as `<subject>: <problem>`, for `portal: ` to precede:
// "--mem 1M: below the 256 MiB Portal needs to start python",
// "--no-such-option: not an option of this command", "JOB: missing".
std::string usage_problem(const CLI::ParseError& error);
// Prints `portal: <usage_problem> (see <command> --help)` on stderr.
void say_usage_problem(const CLI::ParseError& error, const std::string& command);

}  // namespace portal::options
