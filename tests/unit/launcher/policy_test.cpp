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
        EXPECT_NE(std::string(e.what()).find("supported: oom.action=suspend|retry|skip, oom.exact=true|false, "
                                             "oom.max_skips=N, oom.on=true|false, oom.retries=N"),
                  std::string::npos);
    }
    EXPECT_THROW(parse_policies({"oom.on=maybe"}), PolicyError);
    EXPECT_THROW(parse_policies({"oom.on"}), PolicyError);
}

TEST(Policies, OomActionAndCounts) {
    EXPECT_EQ(parse_policies({"oom.action=retry"}).at("oom.action"), "retry");
    EXPECT_EQ(parse_policies({"oom.action=skip"}).at("oom.action"), "skip");
    EXPECT_EQ(parse_policies({"oom.retries=007"}).at("oom.retries"), "7");
    EXPECT_EQ(parse_policies({"oom.max_skips=0"}).at("oom.max_skips"), "0");
    try {
        parse_policies({"oom.action=1"});  // not turned into "true": the action's own values are named
        FAIL() << "expected PolicyError";
    } catch (const PolicyError& e) {
        EXPECT_EQ(std::string(e.what()), "'oom.action=1': oom.action takes suspend|retry|skip");
    }
    for (const char* bad : {"oom.retries=-1", "oom.retries=x", "oom.max_skips=", "oom.max_skips=10000000"}) {
        try {
            parse_policies({bad});
            FAIL() << bad;
        } catch (const PolicyError& e) {
            EXPECT_NE(std::string(e.what()).find("takes a whole number, 0 or more"), std::string::npos) << bad;
        }
    }
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
