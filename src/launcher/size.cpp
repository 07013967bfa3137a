// size.cpp: see include/portal/size.hpp.
#include "portal/size.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace portal {

std::optional<std::uint64_t> parse_size(const std::string& text) {
    std::size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
        ++i;
    }
    if (i == 0) {
        return std::nullopt;
    }
    double value = 0;
    try {
        std::size_t used = 0;
        value = std::stod(text.substr(0, i), &used);
        if (used != i) return std::nullopt;
    } catch (...) {
        return std::nullopt;
    }
    std::string unit = text.substr(i);
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (unit.size() == 3 && unit.compare(1, 2, "IB") == 0) unit = unit.substr(0, 1);  // GiB -> G
    if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);                  // GB -> G
    double scale = 0;
    if (unit.empty() || unit == "G") scale = 1024.0 * 1024 * 1024;
    else if (unit == "M") scale = 1024.0 * 1024;
    else if (unit == "K") scale = 1024.0;
    else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
    else return std::nullopt;
    const double bytes = value * scale;
    if (!(bytes > 0) || bytes > 1.8e19) {
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(std::llround(bytes));
}

std::string format_size(std::uint64_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
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
