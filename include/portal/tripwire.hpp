// tripwire.hpp: the memory tripwire, a cap on the interpreter process's data
// segment (RLIMIT_DATA) set by the supervisor between fork and exec, or with
// PORTAL_MEMORY_TRIPWIRE=resident on its resident memory (memory_watch.hpp).
//
// Past the cap an allocation fails inside the program (MemoryError, or torch's
// "can't allocate memory" RuntimeError), which Portal can suspend, before the
// machine runs out and the kernel's OOM killer ends the process, which nothing can
// rescue.  The cap is M - reserve, where M is the memory the job may use (the
// machine's: physical memory or its cgroup's limit, whichever is less; or --mem) and
// the reserve, 10% of M clamped to [256 MiB, 1 GiB], is left for what the cap does
// not count (page cache, shared mappings, other processes).
//
// No cap with PORTAL_MEMORY_TRIPWIRE=0, nor on a machine with an NVIDIA GPU (the
// CUDA driver reserves huge private mappings that a data limit would refuse).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal::tripwire {

constexpr std::uint64_t kMinReserve = 256ull << 20;
constexpr std::uint64_t kMaxReserve = 1ull << 30;

// --- pure: the rules ----------------------------------------------------------------

// What is kept back from `memory`: 10% clamped to [256 MiB, 1 GiB], and never more
// than half of it, so that a tiny --mem still leaves the program something.
std::uint64_t reserve_for(std::uint64_t memory);
// The RLIMIT_DATA for a job that may use `memory` bytes.
std::uint64_t cap_for(std::uint64_t memory);

// The limit in a cgroup memory file's text (v2 memory.max, v1 memory.limit_in_bytes);
// nullopt for "max", values that mean no limit (v1 says 9223372036854771712) and
// anything unreadable.
std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text);

// The process's memory cgroup, from the text of /proc/self/cgroup: the path of the v1
// hierarchy that has the memory controller ("4:memory:/path", "7:cpu,memory:/path"),
// else the v2 line's ("0::/path"; on a hybrid system the controller is in v1).  `v1`
// says which one was found; nullopt when neither is there.
struct CgroupPath {
    std::string path;  // e.g. "/user.slice/x.scope"
    bool v1 = false;
};
std::optional<CgroupPath> parse_proc_cgroup(const std::string& text);

// Combines the findings: the least of physical memory and the cgroup limits.
std::uint64_t machine_memory_from(std::uint64_t physical, std::optional<std::uint64_t> cgroup);

// --- this machine -------------------------------------------------------------------

// The least of physical memory and the memory limits of the process's cgroup and
// of the cgroups above it (a parent's limit binds its children too).
std::uint64_t machine_memory();

// True when an NVIDIA GPU is present (/dev/nvidia0, or /proc/driver/nvidia/gpus
// not empty): cheap, no driver call.
bool has_gpu();
// The same probe with the file system rooted at `root` ("/" for has_gpu), so that
// tests can lay out a machine with a GPU.
bool has_gpu_under(const std::filesystem::path& root);

// The cap for the job (nullopt: none), after PORTAL_MEMORY_TRIPWIRE and the GPU
// check: `requested` (--mem) replaces the machine's memory when given.  Says its
// decision with PORTAL_LOG=debug.  `gpu_present` is the GPU probe (tests pass
// their own).
using GpuProbe = bool (*)();
std::optional<std::uint64_t> memory_cap(std::optional<std::uint64_t> requested,
                                        GpuProbe gpu_present = has_gpu);

// What the cap counts, from PORTAL_MEMORY_TRIPWIRE: by default (and "resident",
// "1") the memory the program really uses, watched by the supervisor
// (memory_watch.hpp) with big requests checked in the interpreter
// (alloc_preload.hpp); with "address" the program's data segment, address space
// it asked for, touched or not (RLIMIT_DATA at the cap).
enum class CapKind { kAddressSpace, kResident };
constexpr const char* kTripwireVariable = ::portal::contract::env::kMemoryTripwire;
constexpr const char* kResidentSetting = "resident";
// The old cap, RLIMIT_DATA at the cap itself (untouched memory counts).
constexpr const char* kAddressSetting = "address";
CapKind cap_kind();

}  // namespace portal::tripwire
