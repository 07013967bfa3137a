// portal: the command-line interface over jobs.  `portal run` is portal-run.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "portal/log.hpp"
#include "portal/portal_run.hpp"
#include "portal/version.hpp"

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    // `portal run ...` hands everything after `run` to portal-run untouched, so the
    // program's own options (--help included) never reach this parser.
    if (!args.empty() && args.front() == "run") {
        return portal::portal_run(std::vector<std::string>(args.begin() + 1, args.end()), "portal run");
    }

    CLI::App app{"Portal: suspend a Python job that runs out of memory, resume it on a larger machine.",
                 "portal"};
    app.require_subcommand(1);
    bool version = false;
    app.add_flag("--version", version, "Print Portal's version and exit");
    app.add_subcommand("run", "Run a program under Portal (same as portal-run); see `portal run --help`");
    try {
        std::vector<std::string> reversed(args.rbegin(), args.rend());
        if (!args.empty() && args.front() == "--version") {
            std::cout << "portal " << portal::kVersion << "\n";
            return 0;
        }
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return 0;
    } catch (const CLI::ParseError& e) {
        portal::log::say("portal", portal::log::lowercase_first(e.what()) + " (see portal --help)");
        return 2;
    }
    return 0;
}
