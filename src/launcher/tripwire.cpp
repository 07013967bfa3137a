// tripwire.cpp: see include/portal/tripwire.hpp.
#include "portal/tripwire.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "portal/log.hpp"
#include "portal/size.hpp"

namespace portal::tripwire {

namespace {

// cgroup v1 writes "no limit" as a page-rounded LONG_MAX; anything from 2^60 up is
// no limit in practice (no machine has an exabyte).
constexpr std::uint64_t kNoLimit = 1ull << 60;

std::string trim(const std::string& text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {};
    const auto last = text.find_last_not_of(" \t\r\n");
    return text.substr(first, last - first + 1);
}

std::optional<std::string> read_text(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

}  // namespace

std::uint64_t reserve_for(std::uint64_t memory) {
    const std::uint64_t tenth = std::clamp(memory / 10, kMinReserve, kMaxReserve);
    return std::min(tenth, memory / 2);
}

std::uint64_t cap_for(std::uint64_t memory) { return memory - reserve_for(memory); }

std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text) {
    const std::string value = trim(text);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
        return std::nullopt;  // "max", or not a limit at all
    }
    if (value.size() > 19) return std::nullopt;  // beyond 2^63: no limit
    const std::uint64_t bytes = std::stoull(value);
    if (bytes >= kNoLimit) return std::nullopt;
    return bytes;
}

std::optional<CgroupPath> parse_proc_cgroup(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    std::optional<CgroupPath> v2;
    while (std::getline(lines, line)) {
        // ID:CONTROLLERS:PATH; the path may itself contain ':'.
        const auto first = line.find(':');
        if (first == std::string::npos) continue;
        const auto second = line.find(':', first + 1);
        if (second == std::string::npos) continue;
        const std::string id = line.substr(0, first);
        const std::string controllers = line.substr(first + 1, second - first - 1);
        const std::string path = line.substr(second + 1);
        if (id == "0" && controllers.empty()) {
            v2 = CgroupPath{path, false};
            continue;
        }
        std::istringstream names(controllers);
        std::string name;
        while (std::getline(names, name, ',')) {
            // A controller is in one hierarchy only: on a hybrid system a v1 memory
            // hierarchy means the v2 one has no memory.max to read.
            if (name == "memory") return CgroupPath{path, true};
        }
    }
    return v2;
}

std::uint64_t machine_memory_from(std::uint64_t physical, std::optional<std::uint64_t> cgroup) {
    return cgroup && *cgroup < physical ? *cgroup : physical;
}

std::uint64_t machine_memory() {
    std::optional<std::uint64_t> least;
    const auto proc = read_text("/proc/self/cgroup");
    const auto where = proc ? parse_proc_cgroup(*proc) : std::nullopt;
    if (where) {
        const std::filesystem::path mount = where->v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
        const char* file = where->v1 ? "memory.limit_in_bytes" : "memory.max";
        // From the process's cgroup up to the mount's root: in a container the path
        // named may be the host's, absent here, and the limit is then the root's.
        std::filesystem::path dir = std::filesystem::path(where->path).relative_path();
        while (true) {
            if (const auto text = read_text(mount / dir / file)) {
                if (const auto limit = parse_cgroup_limit(*text)) {
                    least = least ? std::min(*least, *limit) : *limit;
                }
            }
            if (dir.empty()) break;
            dir = dir.parent_path();
        }
    }
    return machine_memory_from(physical_memory(), least);
}

bool has_gpu_under(const std::filesystem::path& root) {
    std::error_code ec;
    if (std::filesystem::exists(root / "dev/nvidia0", ec)) return true;
    const auto gpus = root / "proc/driver/nvidia/gpus";
    return std::filesystem::is_directory(gpus, ec) && !std::filesystem::is_empty(gpus, ec);
}

bool has_gpu() { return has_gpu_under("/"); }

CapKind cap_kind() {
    const char* setting = std::getenv(kTripwireVariable);
    return setting != nullptr && std::string(setting) == kAddressSetting ? CapKind::kAddressSpace
                                                                          : CapKind::kResident;
}

std::optional<std::uint64_t> memory_cap(std::optional<std::uint64_t> requested, GpuProbe gpu_present) {
    const char* setting = std::getenv(kTripwireVariable);
    if (setting != nullptr && std::string(setting) == "0") {
        log::debug("memory tripwire", "off (PORTAL_MEMORY_TRIPWIRE=0)");
        return std::nullopt;
    }
    if (gpu_present()) {
        log::debug("memory tripwire", "off: this machine has an NVIDIA GPU");
        return std::nullopt;
    }
    const std::uint64_t memory = requested ? *requested : machine_memory();
    if (memory == 0) {
        log::debug("memory tripwire", "off: this machine's memory is unknown");
        return std::nullopt;
    }
    const std::uint64_t cap = cap_for(memory);
    const bool resident = cap_kind() == CapKind::kResident;
    log::debug("memory tripwire", (resident ? "cap " : "data limit ") + format_size(cap) + " (" +
                                      std::to_string(cap) + " bytes) " + (resident ? "of resident memory " : "") +
                                      "for " + format_size(memory) +
                                      (requested ? " (--mem)" : " (this machine)"));
    return cap;
}

}  // namespace portal::tripwire
