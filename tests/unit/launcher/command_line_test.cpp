#include "portal/command_line.hpp"

#include <gtest/gtest.h>

namespace portal {
namespace {

const std::set<std::string> kWithValue{"--mem", "--policy"};

TEST(SplitCommandLine, ScriptAndItsArgumentsAreThePrograms) {
    auto s = split_command_line({"train.py", "--help", "-m", "x"}, kWithValue);
    EXPECT_TRUE(s.portal_args.empty());
    EXPECT_EQ(s.program.kind, ProgramKind::Script);
    EXPECT_EQ(s.program.target, "train.py");
    EXPECT_EQ(s.program.args, (std::vector<std::string>{"--help", "-m", "x"}));
    EXPECT_EQ(s.program.spelling, (std::vector<std::string>{"train.py"}));
}

TEST(SplitCommandLine, PortalOptionsComeBeforeTheScript) {
    auto s = split_command_line({"--mem", "2G", "--version", "--policy=oom.on=false", "a.py", "--mem"},
                                kWithValue);
    EXPECT_EQ(s.portal_args,
              (std::vector<std::string>{"--mem", "2G", "--version", "--policy=oom.on=false"}));
    EXPECT_EQ(s.program.target, "a.py");
    EXPECT_EQ(s.program.args, (std::vector<std::string>{"--mem"}));
}

TEST(SplitCommandLine, ModuleAndCommandInBothSpellings) {
    auto m = split_command_line({"-m", "pkg.mod", "x"}, kWithValue);
    EXPECT_EQ(m.program.kind, ProgramKind::Module);
    EXPECT_EQ(m.program.target, "pkg.mod");
    EXPECT_EQ(m.program.args, (std::vector<std::string>{"x"}));
    EXPECT_EQ(m.program.spelling, (std::vector<std::string>{"-m", "pkg.mod"}));
    auto joined = split_command_line({"-mpkg"}, kWithValue);
    EXPECT_EQ(joined.program.target, "pkg");
    EXPECT_EQ(joined.program.spelling, (std::vector<std::string>{"-mpkg"}));
    auto c = split_command_line({"-c", "print(1)", "-c"}, kWithValue);
    EXPECT_EQ(c.program.kind, ProgramKind::Command);
    EXPECT_EQ(c.program.target, "print(1)");
    EXPECT_EQ(c.program.args, (std::vector<std::string>{"-c"}));
}

TEST(SplitCommandLine, DoubleDashEndsPortalOptions) {
    auto s = split_command_line({"--", "-odd-name.py", "y"}, kWithValue);
    EXPECT_EQ(s.program.kind, ProgramKind::Script);
    EXPECT_EQ(s.program.target, "-odd-name.py");
    EXPECT_EQ(s.program.spelling, (std::vector<std::string>{"--", "-odd-name.py"}));
    EXPECT_EQ(s.program.args, (std::vector<std::string>{"y"}));
}

TEST(SplitCommandLine, DashAloneIsStandardInput) {
    auto s = split_command_line({"-", "a"}, kWithValue);
    EXPECT_EQ(s.program.kind, ProgramKind::Script);
    EXPECT_EQ(s.program.target, "-");
}

TEST(SplitCommandLine, NoProgram) {
    auto s = split_command_line({"--version"}, kWithValue);
    EXPECT_EQ(s.program.kind, ProgramKind::None);
    EXPECT_EQ(s.portal_args, (std::vector<std::string>{"--version"}));
}

TEST(SplitCommandLine, ModeWithoutValueIsAUsageError) {
    EXPECT_THROW(split_command_line({"-m"}, kWithValue), UsageError);
    EXPECT_THROW(split_command_line({"-c"}, kWithValue), UsageError);
}

TEST(SplitCommandLine, UnknownOptionsAreLeftForTheParserToRefuse) {
    auto s = split_command_line({"-u", "a.py"}, kWithValue);
    EXPECT_EQ(s.portal_args, (std::vector<std::string>{"-u"}));
    EXPECT_EQ(s.program.target, "a.py");
}

}  // namespace
}  // namespace portal
