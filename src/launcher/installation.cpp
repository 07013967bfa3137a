// installation.cpp: see include/portal/installation.hpp.
#include "portal/installation.hpp"

#include <filesystem>
#include <system_error>

#include "portal/log.hpp"

#ifndef PORTAL_PYTHON_EXECUTABLE
#error "PORTAL_PYTHON_EXECUTABLE must be defined by the build (cmake/PortalPython.cmake)"
#endif
#ifndef PORTAL_INSTALL_PYDIR_FROM_BIN
#error "PORTAL_INSTALL_PYDIR_FROM_BIN must be defined by the build"
#endif

namespace fs = std::filesystem;

namespace portal {

std::string self_executable() {
    std::error_code ec;
    const fs::path p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : p.string();
}

std::optional<std::string> find_package_dir(const std::string& exe_path) {
    if (exe_path.empty()) {
        return std::nullopt;
    }
    const fs::path bin = fs::path(exe_path).parent_path();
    const fs::path candidate = bin / PORTAL_INSTALL_PYDIR_FROM_BIN;
    std::error_code ec;
    if (!fs::is_regular_file(candidate / "_portal" / "run" / "boot.py", ec)) {
        return std::nullopt;
    }
    return fs::weakly_canonical(candidate, ec).string();
}

std::optional<Installation> locate_installation(const std::string& exe_path) {
    auto package = find_package_dir(exe_path);
    if (!package) {
        log::say("installation", "cannot find Portal's Python package next to " +
                                     (exe_path.empty() ? std::string("this executable") : exe_path) +
                                     " (reinstall it: bash scripts/setup.sh)");
        return std::nullopt;
    }
    return Installation{PORTAL_PYTHON_EXECUTABLE, *package, /*pyc_magic: not probed*/ ""};
}

}  // namespace portal
