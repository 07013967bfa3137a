// The probe of the chosen interpreter (src/launcher/interpreter_probe.cpp): what a
// real interpreter says of itself, a shim resolved, the cache used only when its
// key matches and the store's checks pass, and the refusal's one line.
#include "portal/interpreter_probe.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

class TempDir {
public:
    TempDir() {
        char tmpl[] = "/tmp/portal_probe_XXXXXX";
        path = mkdtemp(tmpl);  // 0700: a private directory, as the store's cache is
    }
    ~TempDir() { fs::remove_all(path); }
    fs::path path;
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_executable(const fs::path& p, const std::string& text) {
    std::ofstream(p) << text;
    fs::permissions(p, fs::perms::owner_all);
}

TEST(InterpreterProbe, TheBuildsInterpreterSaysWhatItIs) {
    const Interpreter python = probe_interpreter({PORTAL_TEST_PYTHON, InterpreterSource::PortalPython}, std::nullopt);
    EXPECT_EQ(python.implementation, "cpython");
    EXPECT_EQ(major_minor(python.version), PORTAL_TEST_PYTHON_VERSION);
    EXPECT_EQ(python.path, PORTAL_TEST_PYTHON);  // a binary runs by the path chosen
    EXPECT_EQ(python.executable, PORTAL_TEST_PYTHON);
    EXPECT_EQ(python.real_path, fs::canonical(PORTAL_TEST_PYTHON).string());
    EXPECT_EQ(python.ext_suffix.rfind(std::string(".") + PORTAL_TEST_PYTHON_TAG, 0), 0u) << python.ext_suffix;
    EXPECT_EQ(python.prefix, python.base_prefix);
    EXPECT_EQ(python.build.find('\n'), std::string::npos);
    EXPECT_EQ(python.build.rfind(python.version, 0), 0u) << python.build;
    EXPECT_EQ(python.fingerprint, file_fingerprint(python.real_path));
    EXPECT_NE(python.fingerprint.find("inode "), std::string::npos);
    EXPECT_EQ(python.source, "PORTAL_PYTHON");
    EXPECT_EQ(python.pyc_magic, PORTAL_TEST_PYC_MAGIC);  // 3.11's "a70d" (3495), as importlib.util.MAGIC_NUMBER starts
}

TEST(InterpreterProbe, AShimRunsTheInterpreterItResolvesTo) {
    TempDir dir;
    const fs::path shim = dir.path / "python3";
    write_executable(shim, std::string("#!/bin/sh\nexec ") + PORTAL_TEST_PYTHON + " \"$@\"\n");
    const Interpreter python = probe_interpreter({shim.string(), InterpreterSource::Path}, std::nullopt);
    EXPECT_EQ(python.chosen, shim.string());
    EXPECT_EQ(python.path, PORTAL_TEST_PYTHON);
    EXPECT_NE(describe(python).find("via " + shim.string()), std::string::npos) << describe(python);
}

TEST(InterpreterProbe, WhatIsNoInterpreterIsSaid) {
    TempDir dir;
    const fs::path fails = dir.path / "fails";
    write_executable(fails, "#!/bin/sh\nexit 3\n");
    try {
        probe_interpreter({fails.string(), InterpreterSource::Option}, std::nullopt);
        FAIL() << "a script that exits 3 is no interpreter";
    } catch (const ProbeFailed& e) {
        EXPECT_NE(std::string(e.what()).find("does not run as a Python interpreter (asked for its version: exit "
                                             "status 3); choose another with --python PATH"),
                  std::string::npos)
            << e.what();
    }
    const fs::path chatty = dir.path / "chatty";
    write_executable(chatty, "#!/bin/sh\necho hello\n");
    EXPECT_THROW(probe_interpreter({chatty.string(), InterpreterSource::Option}, std::nullopt), ProbeFailed);
}

TEST(InterpreterProbe, TheCacheIsUsedOnlyWhenItsKeyMatchesAndItIsOurs) {
    TempDir cache;
    const InterpreterChoice choice{PORTAL_TEST_PYTHON, InterpreterSource::PortalPython};
    const Interpreter first = probe_interpreter(choice, cache.path);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(cache.path)) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(fs::status(files[0]).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);

    // The cache is what the second probe reads: an edited answer shows.
    nlohmann::json j = nlohmann::json::parse(slurp(files[0]));
    EXPECT_EQ(j["probe"]["version"], first.version);
    j["probe"]["version"] = "3.11.99";
    std::ofstream(files[0]) << j.dump();
    EXPECT_EQ(probe_interpreter(choice, cache.path).version, "3.11.99");

    // ... but not once another user could have written it (group-writable).
    chmod(files[0].c_str(), 0660);
    EXPECT_EQ(probe_interpreter(choice, cache.path).version, first.version);

    // ... nor under another key (another binary, venv, PYTHONHOME).
    j["key"] = "another";
    std::ofstream(files[0]) << j.dump();
    chmod(files[0].c_str(), 0600);
    EXPECT_EQ(probe_interpreter(choice, cache.path).version, first.version);
}

TEST(InterpreterProbe, AShimsAnswerIsNeverCached) {
    TempDir dir, cache;
    const fs::path shim = dir.path / "python3";
    write_executable(shim, std::string("#!/bin/sh\nexec ") + PORTAL_TEST_PYTHON + " \"$@\"\n");
    probe_interpreter({shim.string(), InterpreterSource::Path}, cache.path);
    EXPECT_TRUE(fs::is_empty(cache.path));
}

Interpreter fake(const std::string& version) {
    Interpreter p;
    p.chosen = p.path = p.real_path = "/x/bin/python3";
    p.source = "PATH";
    p.implementation = "cpython";
    p.version = version;
    p.ext_suffix = ".cpython-" + version.substr(0, 1) + version.substr(2, version.find('.', 2) - 2) +
                   "-x86_64-linux-gnu.so";
    p.build = version + " (main)";
    p.prefix = p.base_prefix = "/x";
    p.fingerprint = "size 1, modified 2.0, inode 3";
    return p;
}

TEST(Unsupported, AnotherVersionIsRefusedInOneLine) {
    TempDir pkg;
    fs::create_directories(pkg.path / "_portal");
    for (const char* so : {"_frames.cpython-311-x86_64-linux-gnu.so", "_toplevel.cpython-311-x86_64-linux-gnu.so"}) {
        std::ofstream(pkg.path / "_portal" / so) << "";
    }
    EXPECT_EQ(built_versions(pkg.path.string()), std::vector<std::string>{"3.11"});
    EXPECT_FALSE(unsupported_reason(fake("3.11.2"), pkg.path.string()));
    const auto reason = unsupported_reason(fake("3.10.13"), pkg.path.string());
    ASSERT_TRUE(reason);
    // The supported list is the build's one (PORTAL_SUPPORTED_PYTHONS); only 3.11 is built here.
    std::string supported;
    for (const auto& v : supported_versions()) supported += (supported.empty() ? "" : ", ") + v;
    ASSERT_NE(supported.find("3.11"), std::string::npos);
    EXPECT_EQ(*reason, "/x/bin/python3 (the first python3 on PATH) is CPython 3.10.13; Portal supports CPython " +
                           supported + " (built here for: 3.11); choose another with --python PATH or PORTAL_PYTHON");
    Interpreter pypy = fake("3.11.2");
    pypy.implementation = "pypy";
    ASSERT_TRUE(unsupported_reason(pypy, pkg.path.string()));
    EXPECT_NE(unsupported_reason(pypy, pkg.path.string())->find("is pypy 3.11.2; Portal supports CPython"),
              std::string::npos);
}

TEST(Unsupported, ASupportedVersionNotBuiltHereIsRefused) {
    TempDir pkg;
    fs::create_directories(pkg.path / "_portal");
    std::ofstream(pkg.path / "_portal" / "_frames.cpython-313-x86_64-linux-gnu.so") << "";
    EXPECT_EQ(built_versions(pkg.path.string()), std::vector<std::string>{"3.13"});
    const auto reason = unsupported_reason(fake("3.11.2"), pkg.path.string());
    ASSERT_TRUE(reason);
    EXPECT_NE(reason->find("is CPython 3.11.2, which Portal supports but was not built for here (no " +
                           (pkg.path / "_portal" / "_frames.cpython-311-x86_64-linux-gnu.so").string()),
              std::string::npos)
        << *reason;
    EXPECT_NE(reason->find("(built here for: 3.13)"), std::string::npos) << *reason;
}

TEST(BuiltVersions, SortedByMinorVersion) {
    TempDir pkg;
    fs::create_directories(pkg.path / "_portal");
    for (const char* so : {"_frames.cpython-314-x86_64-linux-gnu.so", "_frames.cpython-39-x86_64-linux-gnu.so",
                           "_frames.cpython-311-x86_64-linux-gnu.so", "_toplevel.cpython-312-x.so", "boot.py"}) {
        std::ofstream(pkg.path / "_portal" / so) << "";
    }
    EXPECT_EQ(built_versions(pkg.path.string()), (std::vector<std::string>{"3.9", "3.11", "3.14"}));
}

TEST(InterpreterRecord, RoundTripsAndNamesADifference) {
    const Interpreter recorded = fake("3.11.2");
    const auto back = from_record(nlohmann::json{{"interpreter", to_record(recorded)}});
    ASSERT_TRUE(back);
    EXPECT_EQ(difference(recorded, *back), "");
    EXPECT_EQ(back->chosen, recorded.chosen);
    EXPECT_EQ(back->fingerprint, recorded.fingerprint);

    Interpreter rebuilt = recorded;
    rebuilt.fingerprint = "size 1, modified 9.0, inode 4";
    EXPECT_EQ(difference(recorded, rebuilt),
              "it ran with CPython 3.11.2 at /x/bin/python3, size 1, modified 2.0, inode 3, prefix /x; "
              "it is now CPython 3.11.2 at /x/bin/python3, size 1, modified 9.0, inode 4, prefix /x");
    Interpreter other_venv = recorded;
    other_venv.prefix = "/y";
    EXPECT_NE(difference(recorded, other_venv), "");

    nlohmann::json broken = {{"interpreter", to_record(recorded)}};
    broken["interpreter"]["version"] = 3;
    EXPECT_FALSE(from_record(broken));
    EXPECT_FALSE(from_record(nlohmann::json::object()));
}

}  // namespace
}  // namespace portal
