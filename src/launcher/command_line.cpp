// command_line.cpp: see include/portal/command_line.hpp.
#include "portal/command_line.hpp"

namespace portal {

namespace {

// `-m MOD`, `-mMOD`, `-c CODE`, `-cCODE`: python's spelling, kept for muscle memory.
bool take_python_mode(const std::vector<std::string>& args, std::size_t& i, SplitCommandLine& out) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] != 'm' && arg[1] != 'c')) {
        return false;
    }
    const bool module = arg[1] == 'm';
    std::string value;
    if (arg.size() > 2) {
        value = arg.substr(2);
        out.program.spelling = {arg};
    } else if (i + 1 < args.size()) {
        value = args[++i];
        out.program.spelling = {arg, value};
    } else {
        throw UsageError(std::string("argument expected for the ") + arg + " option");
    }
    out.program.kind = module ? ProgramKind::Module : ProgramKind::Command;
    out.program.target = value;
    return true;
}

}  // namespace

SplitCommandLine split_command_line(const std::vector<std::string>& args,
                                    const std::set<std::string>& options_with_value) {
    SplitCommandLine out;
    std::size_t i = 0;
    for (; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {
            ++i;
            if (i < args.size()) {
                out.program.kind = ProgramKind::Script;
                out.program.target = args[i];
                out.program.spelling = {"--", args[i]};
            }
            break;
        }
        if (arg.size() < 2 || arg[0] != '-') {  // the script ("-" alone is stdin's name)
            out.program.kind = ProgramKind::Script;
            out.program.target = arg;
            out.program.spelling = {arg};
            break;
        }
        if (take_python_mode(args, i, out)) {
            break;
        }
        out.portal_args.push_back(arg);
        if (options_with_value.count(arg) && i + 1 < args.size()) {
            out.portal_args.push_back(args[++i]);
        }
    }
    if (out.program.kind != ProgramKind::None) {
        out.program.args.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i + 1, args.size())),
                                args.end());
    }
    return out;
}

}  // namespace portal
