// alloc_preload.hpp: how the supervisor preloads the resident cap's allocation
// check (libportal_alloc.so, src/native/alloc_cap.c) into the interpreter, and
// how the bootstrap gives the program the user's own LD_PRELOAD back
// (python/_portal/run/boot.py), so that os.environ and exec'd children are as under
// python.
#pragma once

#include <optional>
#include <string>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal::tripwire {

constexpr const char* kPreloadVariable = "LD_PRELOAD";
// What LD_PRELOAD was before the shim was put first: "=VALUE" when it was set,
// "" when it was not.  boot.py restores it and removes this variable.
constexpr const char* kUserPreloadVariable = ::portal::contract::env::kUserLdPreload;
constexpr const char* kAllocLibrary = "libportal_alloc.so";

// The shim's path beside the package's native modules, from portal-run's own
// executable; nullopt when absent, or when the path cannot stand in LD_PRELOAD
// (the loader splits it at spaces and colons).
std::optional<std::string> alloc_library_path(const std::string& exe_path);

// LD_PRELOAD's value with the shim first, and the saved user value (see above).
std::string preload_with(const std::string& library, const char* user_value);
std::string saved_user_preload(const char* user_value);

}  // namespace portal::tripwire
