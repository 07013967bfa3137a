#include "portal/output_tee.hpp"

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "portal/supervisor.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// Runs `script` under supervise() with a tee, in a forked process whose stdout
// and stderr are the files given (the same file for both: 2>&1).
int run_teed(const std::string& script, const fs::path& out, const fs::path& err, const fs::path& log) {
    const pid_t pid = fork();
    if (pid == 0) {
        const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int e = out == err ? o : open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(o, 1);
        dup2(e, 2);
        OutputTee tee(log);
        _exit(supervise({"/bin/sh", "-c", script}, std::nullopt, &tee));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WEXITSTATUS(status);
}

class OutputTeeTest : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_tee_XXXXXX";
        dir = mkdtemp(tmpl);
    }
    void TearDown() override { fs::remove_all(dir); }
};

TEST_F(OutputTeeTest, MergedStreamsKeepTheirOrderInBothPlaces) {
    const std::string script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 3";
    EXPECT_EQ(run_teed(script, dir / "all", dir / "all", dir / "log"), 3);
    const std::string expected = "out1\nerr1\nout2\nerr2\nout3\nerr3\n";
    EXPECT_EQ(slurp(dir / "all"), expected);
    EXPECT_EQ(slurp(dir / "log"), expected);
}

TEST_F(OutputTeeTest, SeparateStreamsGoToTheirOwnPlaces) {
    EXPECT_EQ(run_teed("echo o; echo e >&2", dir / "out", dir / "err", dir / "log"), 0);
    EXPECT_EQ(slurp(dir / "out"), "o\n");
    EXPECT_EQ(slurp(dir / "err"), "e\n");
    const std::string log = slurp(dir / "log");
    EXPECT_EQ(log.size(), 4u);
    EXPECT_NE(log.find("o\n"), std::string::npos);
    EXPECT_NE(log.find("e\n"), std::string::npos);
}

TEST_F(OutputTeeTest, AppendsAcrossRunsAndReportsWhereEachStarts) {
    run_teed("echo first", dir / "out", dir / "out", dir / "log");
    {
        OutputTee tee(dir / "log");
        EXPECT_EQ(tee.log_size(), 6u);
    }
    run_teed("echo second", dir / "out", dir / "out", dir / "log");
    EXPECT_EQ(slurp(dir / "log"), "first\nsecond\n");
}

TEST_F(OutputTeeTest, ABackgroundWriterDoesNotKeepTheSupervisorWaiting) {
    // The child exits at once; its background grandchild holds the pipe 3 s.
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(run_teed("echo now; (sleep 3; echo late) & exit 0", dir / "out", dir / "out", dir / "log"), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_EQ(slurp(dir / "out"), "now\n");
}

// output.log is never written through a symbolic link, nor a FIFO or a file others
// may change: the output is then not kept, and the program still runs.
TEST_F(OutputTeeTest, AnUntrustedLogIsNotWritten) {
    const fs::path target = dir / "elsewhere";
    { std::ofstream(target) << "keep\n"; }
    fs::create_symlink(target, dir / "link.log");
    EXPECT_FALSE(OutputTee(dir / "link.log").kept());
    EXPECT_EQ(fs::file_size(target), 5u);
    ASSERT_EQ(mkfifo((dir / "fifo.log").c_str(), 0600), 0);
    EXPECT_FALSE(OutputTee(dir / "fifo.log").kept());  // and did not block
    { std::ofstream(dir / "open.log") << ""; }
    fs::permissions(dir / "open.log", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write);
    EXPECT_FALSE(OutputTee(dir / "open.log").kept());
    EXPECT_TRUE(OutputTee(dir / "fine.log").kept());
}

// Portal's mark (kLineMark) becomes a newline after an unfinished line, nothing
// after a finished one, in both places; split over two reads it is still the
// mark; another device control string of the program's passes through.
TEST_F(OutputTeeTest, TheLineMarkStartsALineOfItsOwn) {
    const std::string mark = "printf '\\033Pportal;line\\033\\\\'";
    const std::string script = "printf '\\rstep 1\\rstep 2'; " + mark + "; echo 'portal: a'; " + mark +
                               "; echo 'portal: b'; printf 'bar\\033Pport'; sleep 0.3; "
                               "printf 'al;line\\033\\\\'; echo 'portal: c'; printf '\\033Pq#1\\033\\\\x'; "
                               "printf '\\033Pportal'";
    EXPECT_EQ(run_teed(script, dir / "all", dir / "all", dir / "log"), 0);
    const std::string expected =
        "\rstep 1\rstep 2\nportal: a\nportal: b\nbar\nportal: c\n\x1bPq#1\x1b\\x\x1bPportal";
    EXPECT_EQ(slurp(dir / "all"), expected);
    EXPECT_EQ(slurp(dir / "log"), expected);
}

}  // namespace
}  // namespace portal
