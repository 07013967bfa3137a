// portal-run: a drop-in for `python3 SCRIPT ARGS` (include/portal/portal_run.hpp).
#include <string>
#include <vector>

#include "portal/portal_run.hpp"
#include "portal/supervisor.hpp"

int main(int argc, char** argv) {
    // Ended as the program ended: its exit status, or killed by the same signal.
    return portal::end_as_the_program_did(
        portal::portal_run(std::vector<std::string>(argv + 1, argv + argc), "portal-run"));
}
