// inspect.cpp: see include/portal/inspect.hpp.
#include "portal/inspect.hpp"

#include <cerrno>
#include <cstring>
#include <iostream>
#include <system_error>
#include <unistd.h>

#include "portal/installation.hpp"
#include "portal/job_view.hpp"
#include "portal/log.hpp"
#include "portal/store_trust.hpp"

namespace fs = std::filesystem;

namespace portal {

namespace {

constexpr const char* kModuleFile = "_portal/checkpoint/inspect_checkpoint.py";

}  // namespace

fs::path inspect_path(const fs::path& home, const std::string& target) {
    std::error_code ec;
    if (target.find('/') != std::string::npos || fs::symlink_status(target, ec).type() != fs::file_type::not_found) {
        return target;
    }
    const Job job = find_job(home, target);
    open_private_dir(job.dir);  // another user's job is not inspected for you
    if (!fs::exists(fs::symlink_status(job.checkpoint_path(), ec))) {
        std::string state = "unreadable";
        try {
            state = job.read_record().value("state", "unknown");
        } catch (const JobError&) {
        }
        throw JobError("job " + job.id + " has no checkpoint (it is " + state +
                       "; a job keeps one only while it is suspended)");
    }
    return job.dir;
}

std::vector<std::string> inspect_argv(const Installation& where, const std::string& path, bool json) {
    // The package dir travels as an argument, not spliced into the code line.
    std::vector<std::string> argv{where.python, "-I", "-B", "-c",
                                  "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                                  "from _portal.checkpoint.inspect_checkpoint import main; sys.exit(main(sys.argv[1:]))",
                                  where.package_dir, path};
    if (json) argv.push_back("--json");
    return argv;
}

int portal_inspect(const InspectRequest& request) {
    fs::path path;
    try {
        path = inspect_path(portal_home(), request.target);
    } catch (const JobError& e) {
        log::say("inspect", printable(e.what()));
        return kCliRefused;
    }
    const auto installation = locate_installation(self_executable());
    if (!installation) {
        return kCliRefused;
    }
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(installation->package_dir) / kModuleFile, ec)) {
        log::say("inspect", "this installation has no " + std::string(kModuleFile) + " in " +
                                installation->package_dir + " (reinstall Portal: bash scripts/setup.sh)");
        return kCliRefused;
    }
    const std::vector<std::string> argv = inspect_argv(*installation, path.string(), request.json);
    std::vector<char*> c_argv;
    for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    std::cout.flush();
    execv(c_argv[0], c_argv.data());
    log::say("inspect", "cannot run " + installation->python + ": " + std::strerror(errno));
    return kCliRefused;
}

}  // namespace portal
