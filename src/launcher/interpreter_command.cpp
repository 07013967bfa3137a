// interpreter_command.cpp: see include/portal/interpreter_command.hpp.
#include "portal/interpreter_command.hpp"

#include <array>
#include <fstream>
#include <sys/stat.h>

namespace portal {

namespace {

// A Python string literal for `s` (single-quoted, backslash-escaped).
std::string python_literal(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\\' || c == '\'') {
            out += '\\';
        }
        out += c;
    }
    return out + "'";
}

bool has_zip_end_record(std::ifstream& in, std::streamoff size) {
    // The end-of-central-directory record is within the last 65,557 bytes.
    const std::streamoff tail = std::min<std::streamoff>(size, 65557);
    std::string buf(static_cast<std::size_t>(tail), '\0');
    in.seekg(size - tail);
    in.read(buf.data(), tail);
    return buf.find(std::string("PK\x05\x06", 4)) != std::string::npos;
}

std::string hex_of(char a, char b) {
    constexpr const char* kDigits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : {static_cast<unsigned char>(a), static_cast<unsigned char>(b)}) {
        out += kDigits[c >> 4];
        out += kDigits[c & 0xf];
    }
    return out;
}

}  // namespace

// python's -P: the working directory is never put on sys.path, so that nothing
// python or the bootstrap imports before the program starts (the -c runner's
// linecache from 3.13 on, Portal's own modules and theirs) can come from it.
// boot.py gives the program python's own sys.path and sys.flags.safe_path.
const char* const kSafePath = "-P";

std::string bootstrap_line(const std::string& package_dir) {
    return "__import__('sys').path.insert(0, " + python_literal(package_dir) +
           ");__import__('_portal.run.boot').run.boot.main()";
}

bool runs_as_source(const std::string& path, const std::string& pyc_magic) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return false;
    }
    if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".pyc") == 0) {
        return false;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return true;  // unreadable: the bootstrap reports it as python does
    }
    std::array<char, 4> head{};
    in.read(head.data(), head.size());
    // The interpreter's bytecode magic (3.11: 3495 = a7 0d), then \r\n.
    if (in.gcount() == static_cast<std::streamsize>(head.size()) && head[2] == '\r' && head[3] == '\n' &&
        (pyc_magic.empty() || hex_of(head[0], head[1]) == pyc_magic)) {
        return false;
    }
    in.clear();
    return !has_zip_end_record(in, st.st_size);
}

std::vector<std::string> interpreter_argv(const ProgramSpec& program, const Installation& where) {
    std::vector<std::string> argv{where.python};
    const char* mode = nullptr;
    switch (program.kind) {
        case ProgramKind::Script:
            if (!runs_as_source(program.target, where.pyc_magic)) {
                argv.push_back(program.target);
                argv.insert(argv.end(), program.args.begin(), program.args.end());
                return argv;
            }
            mode = "script";
            break;
        case ProgramKind::Module:
            mode = "module";
            break;
        case ProgramKind::Command:
            mode = "command";
            break;
        case ProgramKind::None:
            return argv;
    }
    argv.insert(argv.end(), {kSafePath, "-c", bootstrap_line(where.package_dir), mode, program.target,
                             std::to_string(program.spelling.size())});
    argv.insert(argv.end(), program.spelling.begin(), program.spelling.end());
    argv.insert(argv.end(), program.args.begin(), program.args.end());
    return argv;
}

bool runs_bootstrap(const std::vector<std::string>& argv, const Installation& where) {
    return argv.size() > 3 && argv[1] == kSafePath && argv[2] == "-c" && argv[3] == bootstrap_line(where.package_dir);
}

std::vector<std::string> resume_argv(const std::string& job_dir, const Installation& where) {
    return {where.python, kSafePath, "-c", bootstrap_line(where.package_dir), "resume", job_dir};
}

}  // namespace portal
