#include "portal/logs.hpp"

#include <gtest/gtest.h>

namespace portal {
namespace {

TEST(RunLogRange, EachRunFromItsOffsetToTheNextOrTheEnd) {
    const nlohmann::json runs = {{{"log_offset", 0}}, {{"log_offset", 10}}, {{"log_offset", 25}}};
    EXPECT_EQ(run_log_range(runs, 0, 40), (std::pair<std::uint64_t, std::uint64_t>{0, 10}));
    EXPECT_EQ(run_log_range(runs, 1, 40), (std::pair<std::uint64_t, std::uint64_t>{10, 25}));
    EXPECT_EQ(run_log_range(runs, 2, 40), (std::pair<std::uint64_t, std::uint64_t>{25, 40}));
}

TEST(RunLogRange, ARunThatKeptNothingIsEmpty) {
    // Run 2's output went to a terminal: run 3 starts where run 2 did.
    const nlohmann::json runs = {{{"log_offset", 0}}, {{"log_offset", 7}}, {{"log_offset", 7}}};
    EXPECT_EQ(run_log_range(runs, 1, 9), (std::pair<std::uint64_t, std::uint64_t>{7, 7}));
}

TEST(RunLogRange, ALogShorterThanRecordedIsClamped) {
    const nlohmann::json runs = {{{"log_offset", 0}}, {{"log_offset", 50}}};
    EXPECT_EQ(run_log_range(runs, 1, 20), (std::pair<std::uint64_t, std::uint64_t>{20, 20}));
    EXPECT_EQ(run_log_range(runs, 0, 20), (std::pair<std::uint64_t, std::uint64_t>{0, 20}));
    const nlohmann::json no_offset = {nlohmann::json::object()};
    EXPECT_EQ(run_log_range(no_offset, 0, 20), (std::pair<std::uint64_t, std::uint64_t>{20, 20}));
}

}  // namespace
}  // namespace portal
