// size.cpp: see include/portal/size.hpp.
#include "portal/size.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace portal {

namespace {

constexpr long double kKiB = 1024.0L;
// More digits than any size needs: a longer number is refused before it is read.
constexpr std::size_t kMaxDigits = 40;
// 2^64: sizes at or beyond it do not fit in a byte count.
constexpr long double kByteCountLimit = 18446744073709551616.0L;

const char kExamples[] = "not a size (examples: 64 for 64 GiB, 512M, 2G, 1.5T)";

// The size `text` says, in bytes, exactly as written (any magnitude); nullopt when
// it is not written as a size.
std::optional<long double> read_size(const std::string& text) {
    std::size_t i = 0;
    bool dot = false;
    std::size_t digits = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (std::isdigit(static_cast<unsigned char>(c))) {
            ++digits;
        } else if (c == '.' && !dot) {
            dot = true;
        } else {
            break;
        }
        ++i;
    }
    if (digits == 0 || digits > kMaxDigits) {
        return std::nullopt;
    }
    std::string unit = text.substr(i);
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (unit.size() == 3 && unit.compare(1, 2, "IB") == 0) unit = unit.substr(0, 1);  // GiB -> G
    if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);                  // GB -> G
    long double scale = 0;
    if (unit.empty() || unit == "G") scale = kKiB * kKiB * kKiB;
    else if (unit == "M") scale = kKiB * kKiB;
    else if (unit == "K") scale = kKiB;
    else if (unit == "T") scale = kKiB * kKiB * kKiB * kKiB;
    else return std::nullopt;
    // Only digits and one point reach strtold: no sign, exponent, hex, nan or inf.
    const long double value = std::strtold(text.substr(0, i).c_str(), nullptr);
    return value * scale;
}

// The size as the user wrote it, with the unit a bare number has: "64 GiB", "2T".
std::string as_typed(const std::string& text) {
    return text.find_first_not_of("0123456789.") == std::string::npos ? text + " GiB" : text;
}

}  // namespace

std::optional<std::uint64_t> parse_size(const std::string& text) {
    const auto bytes = read_size(text);
    if (!bytes || !(*bytes >= 1.0L) || *bytes >= kByteCountLimit) {
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(std::llroundl(*bytes));
}

std::uint64_t parse_mem_option(const std::string& text, std::uint64_t machine) {
    const auto bytes = read_size(text);
    if (!bytes) {
        throw MemOptionError(kExamples);
    }
    if (*bytes == 0) {
        throw MemOptionError("no memory at all: give the memory the job may use (e.g. 8G); "
                             "PORTAL_MEMORY_TRIPWIRE=0 runs it without a cap");
    }
    if (*bytes < static_cast<long double>(kMinMem)) {
        throw MemOptionError("below the " + std::to_string(kMinMem / kMiB) + " MiB Portal needs to start python");
    }
    if (machine != 0 && *bytes > static_cast<long double>(machine)) {
        throw MemOptionError("this machine has " + format_size(machine) + " of memory, less than the " +
                             as_typed(text) + " asked for");
    }
    if (*bytes >= kByteCountLimit) {  // only with an unknown machine size
        throw MemOptionError("more bytes than a size can hold");
    }
    return static_cast<std::uint64_t>(std::llroundl(*bytes));
}

std::string format_size(std::uint64_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    constexpr int kLastUnit = 4;
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < kLastUnit) {
        v /= 1024;
        ++u;
    }
    char buf[64];
    if (u == 0) std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
    else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

std::uint64_t physical_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace portal
