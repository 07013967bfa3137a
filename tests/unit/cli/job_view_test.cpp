#include "portal/job_view.hpp"

#include <gtest/gtest.h>

namespace portal {
namespace {

TEST(FormatDuration, PicksTheTwoLargestUnits) {
    EXPECT_EQ(format_duration(0), "0s");
    EXPECT_EQ(format_duration(45), "45s");
    EXPECT_EQ(format_duration(12 * 60 + 59), "12m");
    EXPECT_EQ(format_duration(5 * 3600 + 2 * 60), "5h 02m");
    EXPECT_EQ(format_duration(3 * 86400 - 1), "2d 23h");
    EXPECT_EQ(format_duration(-5), "0s");
}

TEST(ExpiresIn, OnlyASuspendedJobHasTimeLeft) {
    const std::time_t now = parse_utc_iso("2026-11-29T12:00:00Z");
    const nlohmann::json r = {{"expires_at", "2026-12-02T11:00:00Z"}};
    EXPECT_EQ(expires_in(r, "suspended", now), "2d 23h");
    EXPECT_EQ(expires_in(r, "completed", now), "-");
    EXPECT_EQ(expires_in(r, "suspended", parse_utc_iso("2026-12-02T11:00:00Z")), "due");
    EXPECT_EQ(expires_in(nlohmann::json::object(), "suspended", now), "-");
}

TEST(ShortTime, IsUtcToTheMinuteOrADash) {
    EXPECT_EQ(short_time({{"created", "2026-11-29T12:34:56Z"}}, "created"), "2026-11-29 12:34 UTC");
    EXPECT_EQ(short_time({{"created", "yesterday"}}, "created"), "-");
    EXPECT_EQ(short_time(nlohmann::json::object(), "created"), "-");
}

TEST(LoopAndIteration, FileNameLineAndIteration) {
    EXPECT_EQ(loop_and_iteration({{"loop", "/home/u/train.py:12"}, {"iteration", 4}}), "train.py:12 (4)");
    EXPECT_EQ(loop_and_iteration({{"loop", "/home/u/train.py:12"}, {"iteration", nullptr}}), "train.py:12");
    EXPECT_EQ(loop_and_iteration(nlohmann::json::object()), "-");
}

TEST(ProgramText, ScriptModuleAndCommand) {
    const nlohmann::json script = {{"program", {{"kind", "script"}, {"target", "/p/train.py"}}},
                                   {"args", {"--epochs", "3"}}};
    EXPECT_EQ(program_text(script, false), "train.py --epochs 3");
    EXPECT_EQ(program_text(script, true), "/p/train.py --epochs 3");
    EXPECT_EQ(program_text({{"program", {{"kind", "module"}, {"target", "pkg.mod"}}}}, false), "-m pkg.mod");
    EXPECT_EQ(program_text({{"program", {{"kind", "command"}, {"target", "print(1)"}}}}, false), "-c 'print(1)'");
}

TEST(SuggestedMem, TwiceTheLastRunsTripwireCapRoundedUp) {
    const std::uint64_t gib = std::uint64_t(1) << 30;
    // --mem 8G: cap 8 GiB - 819.2 MiB reserve; twice that is 14.4 GiB, so 15.
    EXPECT_EQ(suggested_mem_gib({{"runs", {{{"mem", 8 * gib}}}}}), 15u);
    // --mem 64G: the reserve is at most 1 GiB: 2 * 63 = 126.
    EXPECT_EQ(suggested_mem_gib({{"runs", {{{"mem", 64 * gib}}}}}), 126u);
    EXPECT_EQ(suggested_mem_gib({{"runs", {{{"mem", 100}}}}}), 2u);  // never below 2
    EXPECT_GE(suggested_mem_gib({{"runs", {{{"mem", nullptr}}}}}), 2u);  // the machine's memory
    EXPECT_EQ(suggested_mem_gib({{"suggested_mem_gib", 7}, {"runs", {{{"mem", 64 * gib}}}}}), 7u);
}

TEST(FormatTable, AlignsColumnsAndLeavesTheLastUnpadded) {
    EXPECT_EQ(format_table({{"ID", "STATE", "X"}, {"train-abc123", "suspended", "y"}, {"a", "b", "longer"}}),
              "ID            STATE      X\n"
              "train-abc123  suspended  y\n"
              "a             b          longer\n");
}

TEST(ViewJson, StateIsTheEffectiveOneAndTheRecordedOneIsKept) {
    JobView v{Job{"t-1", "/tmp/x/t-1"}, {{"state", "running"}, {"id", "t-1"}}, "lost", std::nullopt, ""};
    const auto j = view_json(v);
    EXPECT_EQ(j["state"], "lost");
    EXPECT_EQ(j["recorded_state"], "running");
    EXPECT_TRUE(j["held_by"].is_null());
    v.state = "running";
    v.holder = "pid 1, portal-run t.py, since now";
    const auto k = view_json(v);
    EXPECT_FALSE(k.contains("recorded_state"));
    EXPECT_EQ(k["held_by"], "pid 1, portal-run t.py, since now");
}

TEST(IsEnded, EndedStates) {
    for (const char* s : {"completed", "failed", "expired", "lost"}) EXPECT_TRUE(is_ended(s)) << s;
    for (const char* s : {"running", "suspended", "unreadable"}) EXPECT_FALSE(is_ended(s)) << s;
}

}  // namespace
}  // namespace portal
