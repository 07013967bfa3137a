// portal-run: a drop-in for `python3 SCRIPT ARGS` (include/portal/portal_run.hpp).
#include <exception>
#include <string>
#include <vector>

#include "portal/log.hpp"
#include "portal/portal_run.hpp"
#include "portal/supervisor.hpp"

namespace {
// What portal-run exits with when Portal itself fails before the program ran.
constexpr int kPortalFailed = 1;
}  // namespace

int main(int argc, char** argv) {
    // One top-level catch: an exception of Portal's own is one `portal:` line.
    // Otherwise it ends as the program ended: its exit status, or killed by the
    // same signal.
    try {
        return portal::end_as_the_program_did(
            portal::portal_run(std::vector<std::string>(argv + 1, argv + argc), "portal-run"));
    } catch (const std::exception& e) {
        portal::log::say("portal-run", std::string(e.what()) + " (this is a bug in Portal: please report it)");
    } catch (...) {
        portal::log::say("portal-run", "unknown exception (this is a bug in Portal: please report it)");
    }
    return kPortalFailed;
}
