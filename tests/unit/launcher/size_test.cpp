#include "portal/size.hpp"

#include <gtest/gtest.h>

namespace portal {
namespace {

constexpr std::uint64_t GiB = 1024ull * 1024 * 1024;

TEST(ParseSize, BareNumberIsGiB) {
    EXPECT_EQ(parse_size("64"), 64 * GiB);
    EXPECT_EQ(parse_size("1.5"), 3 * GiB / 2);
}

TEST(ParseSize, Units) {
    EXPECT_EQ(parse_size("512M"), 512ull * 1024 * 1024);
    EXPECT_EQ(parse_size("2G"), 2 * GiB);
    EXPECT_EQ(parse_size("2g"), 2 * GiB);
    EXPECT_EQ(parse_size("8GiB"), 8 * GiB);
    EXPECT_EQ(parse_size("8GB"), 8 * GiB);
    EXPECT_EQ(parse_size("1T"), 1024 * GiB);
    EXPECT_EQ(parse_size("64K"), 64ull * 1024);
}

TEST(ParseSize, RejectsMalformed) {
    EXPECT_FALSE(parse_size(""));
    EXPECT_FALSE(parse_size("G"));
    EXPECT_FALSE(parse_size("-1"));
    EXPECT_FALSE(parse_size("0"));
    EXPECT_FALSE(parse_size("12X"));
    EXPECT_FALSE(parse_size("1.2.3"));
    EXPECT_FALSE(parse_size("64 G"));
    for (const char* text : {"1e3", "1e400", "nan", "inf", "+1", "0x10", ".", "1.", "0.0", "10Q"}) {
        if (std::string(text) == "1.") {
            EXPECT_EQ(parse_size(text), GiB) << text;  // "1." is 1
            continue;
        }
        EXPECT_FALSE(parse_size(text)) << text;
    }
    EXPECT_FALSE(parse_size("99999999999999999999T"));  // beyond 2^64 bytes: no wrap-around
}

// --mem, for portal-run and portal resume alike: a size, or a refusal in words.
std::string mem_problem(const std::string& text, std::uint64_t machine = 16 * GiB) {
    try {
        parse_mem_option(text, machine);
        return "";
    } catch (const MemOptionError& e) {
        return e.what();
    }
}

TEST(ParseMemOption, AcceptsWhatTheMachineHas) {
    EXPECT_EQ(parse_mem_option("8G", 16 * GiB), 8 * GiB);
    EXPECT_EQ(parse_mem_option("256M", 16 * GiB), kMinMem);
    EXPECT_EQ(parse_mem_option("16", 16 * GiB), 16 * GiB);
    EXPECT_EQ(parse_mem_option("100", 0), 100 * GiB);  // a machine of unknown size: not checked
}

TEST(ParseMemOption, RefusesBelowTheFloorSayingIt) {
    for (const char* text : {"1K", "1M", "10M", "255M", "0.000000000001", "0.2"}) {
        EXPECT_EQ(mem_problem(text), "below the 256 MiB Portal needs to start python") << text;
    }
    EXPECT_NE(mem_problem("0").find("no memory at all"), std::string::npos);
    EXPECT_NE(mem_problem("0.0").find("no memory at all"), std::string::npos);
}

TEST(ParseMemOption, RefusesMoreThanTheMachineHasWithTheNumbers) {
    EXPECT_EQ(mem_problem("100"), "this machine has 16.0 GiB of memory, less than the 100 GiB asked for");
    EXPECT_EQ(mem_problem("9000000000"),
              "this machine has 16.0 GiB of memory, less than the 9000000000 GiB asked for");
    EXPECT_EQ(mem_problem("2T"), "this machine has 16.0 GiB of memory, less than the 2T asked for");
    EXPECT_EQ(mem_problem("99999999999999999999T", 0), "more bytes than a size can hold");
}

TEST(ParseMemOption, RefusesWhatIsNotASize) {
    for (const char* text : {"", "1e400", "-1", "nan", "inf", "10Q", "1.2.3", " 8G", "8G ", "0x8"}) {
        EXPECT_EQ(mem_problem(text).rfind("not a size", 0), 0u) << text;
    }
}

TEST(FormatSize, RoundTripsReadably) {
    EXPECT_EQ(format_size(512), "512 bytes");
    EXPECT_EQ(format_size(3 * GiB / 2), "1.5 GiB");
    EXPECT_EQ(parse_size("1.5G"), 3 * GiB / 2);
}

TEST(PhysicalMemory, IsKnown) {
    EXPECT_GT(physical_memory(), 256ull * 1024 * 1024);
}

}  // namespace
}  // namespace portal
