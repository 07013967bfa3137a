#include "portal/interpreter_command.hpp"

#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

namespace portal {
namespace {

struct TempFile {
    std::string path;
    explicit TempFile(const std::string& content, const std::string& suffix = ".py") {
        char tmpl[] = "/tmp/portal_ic_XXXXXX";
        int fd = mkstemp(tmpl);
        close(fd);
        path = std::string(tmpl) + suffix;
        std::rename(tmpl, path.c_str());
        std::ofstream(path, std::ios::binary) << content;
    }
    ~TempFile() { std::remove(path.c_str()); }
};

const Installation kWhere{"/usr/bin/python3", "/opt/portal/python", ""};

TEST(BootstrapLine, QuotesThePackageDirectory) {
    EXPECT_EQ(bootstrap_line("/a/b'c"),
              "__import__('sys').path.insert(0, '/a/b\\'c');__import__('_portal.run.boot').run.boot.main()");
}

TEST(RunsAsSource, OnlyRegularSourceFiles) {
    TempFile src("print('hi')\n");
    EXPECT_TRUE(runs_as_source(src.path));
    EXPECT_FALSE(runs_as_source("/nonexistent/x.py"));
    EXPECT_FALSE(runs_as_source("/tmp"));
    TempFile pyc(std::string("\xa7\x0d\x0d\x0a", 4) + std::string(12, '\0'), ".bin");
    EXPECT_FALSE(runs_as_source(pyc.path));
    // The chosen interpreter's own magic decides, as CPython decides (3.13's is f3 0d):
    // another version's bytecode is what that interpreter would read as source.
    EXPECT_FALSE(runs_as_source(pyc.path, "a70d"));
    EXPECT_TRUE(runs_as_source(pyc.path, "f30d"));
    TempFile named_pyc("anything", ".pyc");
    EXPECT_FALSE(runs_as_source(named_pyc.path));
    TempFile zip(std::string("PK\x03\x04", 4) + std::string(30, 'x') + std::string("PK\x05\x06", 4) +
                 std::string(18, '\0'));
    EXPECT_FALSE(runs_as_source(zip.path));
}

TEST(InterpreterArgv, ScriptGoesThroughTheBootstrap) {
    TempFile src("pass\n");
    ProgramSpec p{ProgramKind::Script, src.path, {"--help", "x"}, {"--", src.path}};
    auto argv = interpreter_argv(p, kWhere);
    ASSERT_EQ(argv.size(), 11u);
    EXPECT_EQ(argv[0], "/usr/bin/python3");
    EXPECT_EQ(argv[1], "-P");  // the working directory off sys.path while Portal starts
    EXPECT_EQ(argv[2], "-c");
    EXPECT_EQ(argv[3], bootstrap_line("/opt/portal/python"));
    EXPECT_EQ(argv[4], "script");
    EXPECT_EQ(argv[5], src.path);
    EXPECT_EQ(argv[6], "2");
    EXPECT_EQ(argv[7], "--");
    EXPECT_EQ(argv[8], src.path);
    EXPECT_EQ(argv[9], "--help");
    EXPECT_EQ(argv[10], "x");
}

TEST(InterpreterArgv, ResumeKeepsTheWorkingDirectoryOffSysPath) {
    EXPECT_EQ(resume_argv("/jobs/x", kWhere),
              (std::vector<std::string>{"/usr/bin/python3", "-P", "-c", bootstrap_line("/opt/portal/python"),
                                        "resume", "/jobs/x"}));
}

TEST(InterpreterArgv, MissingScriptIsHandedToPythonAsIs) {
    ProgramSpec p{ProgramKind::Script, "/nonexistent/x.py", {"a"}};
    EXPECT_EQ(interpreter_argv(p, kWhere),
              (std::vector<std::string>{"/usr/bin/python3", "/nonexistent/x.py", "a"}));
}

// Only the bootstrap hides PORTAL_LOCK_FD and PORTAL_JOB_DIR from the program:
// what python runs itself is not given them (job_run.hpp).
TEST(RunsBootstrap, OnlyTheBootstrapsCommandLines) {
    TempFile src("pass\n");
    EXPECT_TRUE(runs_bootstrap(interpreter_argv({ProgramKind::Script, src.path, {}, {src.path}}, kWhere), kWhere));
    EXPECT_TRUE(runs_bootstrap(resume_argv("/jobs/x", kWhere), kWhere));
    EXPECT_FALSE(runs_bootstrap(interpreter_argv({ProgramKind::Script, "/nonexistent/x.py", {}}, kWhere), kWhere));
    EXPECT_FALSE(runs_bootstrap({"/usr/bin/python3", "-c", "print(1)"}, kWhere));
    EXPECT_FALSE(runs_bootstrap({"/usr/bin/python3", "-c", bootstrap_line("/opt/portal/python")}, kWhere));
}

TEST(InterpreterArgv, ModuleAndCommand) {
    auto m = interpreter_argv({ProgramKind::Module, "json.tool", {"f"}, {"-mjson.tool"}}, kWhere);
    EXPECT_EQ(std::vector<std::string>(m.begin() + 4, m.end()),
              (std::vector<std::string>{"module", "json.tool", "1", "-mjson.tool", "f"}));
    auto c = interpreter_argv({ProgramKind::Command, "print(1)", {}, {"-c", "print(1)"}}, kWhere);
    EXPECT_EQ(std::vector<std::string>(c.begin() + 4, c.end()),
              (std::vector<std::string>{"command", "print(1)", "2", "-c", "print(1)"}));
}

}  // namespace
}  // namespace portal
