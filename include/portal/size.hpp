// size.hpp: memory sizes as users write them: "64" (GiB), "512M", "2G", "1.5T", "8GiB",
// and the one check of a --mem value that portal-run and `portal resume` share.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace portal {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

// The least --mem Portal accepts.  Measured (docs/security.md, "Options"): under
// `--mem 12M` (a 6 MiB data cap) python with Portal's bootstrap still starts, at
// `--mem 1M` it segfaults; a suspension needs `--mem 24M`, a resume (its restore
// starts a thread) failed now and then below `--mem 128M`; `import torch` fails
// with a MemoryError at `--mem 256M` and works from `--mem 512M`.  256 MiB leaves
// every one of these either working or failing as a Python error.
constexpr std::uint64_t kMinMem = 256 * kMiB;

// Bytes for `text`: digits with at most one decimal point, then an optional unit
// K, M, G, T (also KiB/KB ..., any case); a bare number is GiB.  nullopt for
// anything else (signs, exponents, nan, inf, spaces), for 0, and for more than
// 2^64 bytes.
std::optional<std::uint64_t> parse_size(const std::string& text);
// "23.5 GiB".
std::string format_size(std::uint64_t bytes);
// The physical memory of this machine.
std::uint64_t physical_memory();

// What is wrong with a --mem value, in words ("below the 256 MiB Portal needs to
// start python"); the caller names the option and the value.
struct MemOptionError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// The bytes `--mem TEXT` asks for, for a machine that has `machine` bytes (the
// tripwire's machine_memory(); 0: unknown, not checked).  Throws MemOptionError
// for a value that is not a size, is 0 or below kMinMem, or is more than the
// machine has.  Never gives "no cap": every value is either a size or refused.
std::uint64_t parse_mem_option(const std::string& text, std::uint64_t machine);

}  // namespace portal
