// portal-run: a drop-in for `python3 SCRIPT ARGS` (include/portal/portal_run.hpp).
#include <string>
#include <vector>

#include "portal/portal_run.hpp"

int main(int argc, char** argv) {
    return portal::portal_run(std::vector<std::string>(argv + 1, argv + argc), "portal-run");
}
