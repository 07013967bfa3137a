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
