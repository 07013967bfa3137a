#include "portal/policy.hpp"

#include <gtest/gtest.h>

namespace portal {
namespace {

TEST(Policies, ParseAndNormalise) {
    auto p = parse_policies({"oom.on=false"});
    EXPECT_EQ(p.at("oom.on"), "false");
    EXPECT_EQ(parse_policies({"oom.on=off"}).at("oom.on"), "false");
    EXPECT_EQ(parse_policies({"oom.on=1"}).at("oom.on"), "true");
    EXPECT_TRUE(parse_policies({}).empty());
}

TEST(Policies, UnknownKeyOrValueIsRefusedNamingWhatIsSupported) {
    try {
        parse_policies({"gpu.fast=true"});
        FAIL() << "expected PolicyError";
    } catch (const PolicyError& e) {
        EXPECT_NE(std::string(e.what()).find("supported: oom.exact=true|false, oom.on=true|false"), std::string::npos);
    }
    EXPECT_THROW(parse_policies({"oom.on=maybe"}), PolicyError);
    EXPECT_THROW(parse_policies({"oom.on"}), PolicyError);
}

TEST(Policies, OptionsWinOverTheEnvironment) {
    auto p = policies_from("oom.on=false", {"oom.on=true"});
    EXPECT_EQ(p.at("oom.on"), "true");
    EXPECT_EQ(policies_from("oom.on=false,", {}).at("oom.on"), "false");
    EXPECT_TRUE(policies_from(nullptr, {}).empty());
}

TEST(Policies, FormatRoundTrips) {
    auto p = parse_policies({"oom.on=false"});
    EXPECT_EQ(format_policies(p), "oom.on=false");
    EXPECT_EQ(policies_from(format_policies(p).c_str(), {}), p);
}

}  // namespace
}  // namespace portal
