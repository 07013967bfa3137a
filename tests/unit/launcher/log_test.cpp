#include "portal/log.hpp"

#include <gtest/gtest.h>

namespace portal::log {
namespace {

TEST(LowercaseFirst, LowersAWordButNotAnAcronym) {
    EXPECT_EQ(lowercase_first("Segmentation fault"), "segmentation fault");
    EXPECT_EQ(lowercase_first("JOB is required"), "JOB is required");
    EXPECT_EQ(lowercase_first("already lower"), "already lower");
    EXPECT_EQ(lowercase_first(""), "");
    EXPECT_EQ(lowercase_first("A"), "a");
}

}  // namespace
}  // namespace portal::log
