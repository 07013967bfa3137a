// Tests src/launcher/options.cpp: the values no option may take, checked without
// recursion whatever their length, and CLI11's errors in Portal's words.
#include "portal/options.hpp"

#include <gtest/gtest.h>

namespace portal::options {
namespace {

TEST(GraceSeconds, FiniteDecimalSecondsFromZeroToTheMaximumOnly) {
    EXPECT_EQ(parse_seconds("0"), 0.0);
    EXPECT_EQ(parse_seconds("60"), 60.0);
    EXPECT_EQ(parse_seconds("2.5"), 2.5);
    EXPECT_EQ(parse_seconds(".5"), 0.5);
    EXPECT_EQ(parse_seconds("1000000"), 1e6);
    // nan passed CLI11's range check (every comparison with nan is false), and
    // the preempted program then never got its signal.
    for (const char* bad : {"nan", "NaN", "inf", "-inf", "infinity", "-1", "1e3", "0x10", "1000000.5", "", ".",
                            "1.2.3", " 5", "5 ", "+5", "1,5"}) {
        EXPECT_EQ(parse_seconds(bad), std::nullopt) << bad;
    }
    EXPECT_EQ(parse_seconds(std::string(50000, '9')), std::nullopt);
}

TEST(GraceSeconds, TheValidatorSaysWhatItTakes) {
    std::string text = "nan";
    EXPECT_EQ(grace_seconds()(text), "nan: not a number of seconds from 0 to 1000000 (e.g. 60, 2.5)");
    text = "inf";
    EXPECT_EQ(grace_seconds()(text), "inf: not a number of seconds from 0 to 1000000 (e.g. 60, 2.5)");
    text = "30";
    EXPECT_EQ(grace_seconds()(text), "");
}

TEST(DeviceMap, PairsOfIndexesOfBoundedLength) {
    EXPECT_EQ(device_map_problem("0:1"), std::nullopt);
    EXPECT_EQ(device_map_problem("0:1,1:0,12:3"), std::nullopt);
    for (const char* bad : {"", "0", "0:", ":1", "0:1,", ",0:1", "a:b", "0:1:2", "0;1", "0:1,,1:0", "12345:1"}) {
        EXPECT_NE(device_map_problem(bad), std::nullopt) << bad;
    }
    // 50,000 characters segfaulted (a regex match's recursion): a length, said.
    std::string huge;
    while (huge.size() < 50000) huge += "0:1,";
    huge += "0:1";
    const auto problem = device_map_problem(huge);
    ASSERT_NE(problem, std::nullopt);
    EXPECT_EQ(*problem, "longer than the 1024 characters a map of device indexes takes");
    std::string fits = "0:1";
    while (fits.size() + 4 <= kDeviceMapMax) fits += ",1:0";
    EXPECT_EQ(device_map_problem(fits), std::nullopt);
}

TEST(Shown, ALongValueIsCutAndItsLengthSaid) {
    EXPECT_EQ(shown("abc"), "abc");
    EXPECT_EQ(shown(std::string(50000, 'x')), std::string(kShownMax, 'x') + "... (50000 characters)");
}

// The last resort's text is CLI11's: a huge extra argument or value is cut, and
// nothing recurses on it.
TEST(UsageProblem, HugeValuesInCli11sErrorsAreCutNeverRecursedOn) {
    EXPECT_EQ(usage_problem(CLI::ExtrasError({std::string(50000, 'y')})),
              std::string(kShownMax, 'y') + "... (50000 characters): not expected here (one too many arguments?)");
    EXPECT_EQ(usage_problem(CLI::ExtrasError({"--nope"})), "--nope: not an option of this command");
    EXPECT_EQ(usage_problem(CLI::ConversionError("--run", std::vector<std::string>{std::string(50000, 'z')})),
              "--run " + std::string(kShownMax, 'z') + "... (50000 characters): not a valid value");
    EXPECT_EQ(usage_problem(CLI::RequiredError("JOB")), "JOB: missing");
    EXPECT_EQ(usage_problem(CLI::RequiredError("A subcommand")), "command: missing or unknown");
    EXPECT_EQ(usage_problem(CLI::ArgumentMismatch::TypedAtLeast("--mem", 1, "SIZE")), "--mem: needs a value (SIZE)");
}

}  // namespace
}  // namespace portal::options
