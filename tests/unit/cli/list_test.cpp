#include "portal/list.hpp"

#include <algorithm>
#include <unistd.h>

#include "store_fixture.hpp"

namespace portal {
namespace {

using ListTest = StoreTest;

TEST_F(ListTest, NewestFirstWithLoopCheckpointAndExpiryOnlyWhileSuspended) {
    make("train-aaaaaa", {{"state", "suspended"},
                          {"created", "2026-11-29T10:00:00Z"},
                          {"updated", "2026-11-29T11:00:00Z"},
                          {"program", {{"kind", "script"}, {"target", "/p/train.py"}}},
                          {"args", {"--lr", "0.1"}},
                          {"loop", "/p/train.py:12"},
                          {"iteration", 4},
                          {"checkpoint_bytes", 3 * 1024 * 1024},
                          {"expires_at", "2026-12-02T11:00:00Z"}});
    // Completed after a suspension: the suspension's fields stay in the record.
    make("eval-bbbbbb", {{"state", "completed"},
                         {"created", "2026-11-29T11:30:00Z"},
                         {"updated", "2026-11-29T11:31:00Z"},
                         {"program", {{"kind", "module"}, {"target", "pkg.eval"}}},
                         {"loop", "/p/eval.py:3"},
                         {"iteration", 2},
                         {"checkpoint_bytes", 100},
                         {"expires_at", "2026-12-02T11:00:00Z"}});
    std::vector<JobView> views = view_jobs(home);
    ASSERT_EQ(views.size(), 2u);
    EXPECT_EQ(views[0].job.id, "eval-bbbbbb");
    const std::string table = list_table(views, parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_EQ(table,
              "ID            STATE      PROGRAM            STARTED               UPDATED               "
              "LOOP (ITERATION)  CHECKPOINT  EXPIRES IN\n"
              "eval-bbbbbb   completed  -m pkg.eval        2026-11-29 11:30 UTC  2026-11-29 11:31 UTC  "
              "-                 -           -\n"
              "train-aaaaaa  suspended  train.py --lr 0.1  2026-11-29 10:00 UTC  2026-11-29 11:00 UTC  "
              "train.py:12 (4)   3.0 MiB     2d 23h\n");
}

TEST_F(ListTest, ALongProgramIsCutToTheWidthAndNotCutWithoutOne) {
    make("command-aaaaaa", {{"state", "completed"},
                            {"created", "2026-11-29T10:00:00Z"},
                            {"updated", "2026-11-29T11:00:00Z"},
                            {"program", {{"kind", "command"}, {"target", std::string(270, 'x')}}}});
    make("train-bbbbbb", {{"state", "failed"},
                          {"created", "2026-11-29T09:00:00Z"},
                          {"updated", "2026-11-29T09:30:00Z"},
                          {"program", {{"kind", "script"}, {"target", "/p/train.py"}}}});
    const std::vector<JobView> views = view_jobs(home);
    const std::time_t now = parse_utc_iso("2026-11-29T12:00:00Z");
    const std::string whole = list_table(views, now);
    EXPECT_NE(whole.find(std::string(270, 'x')), std::string::npos) << whole;  // no width: nothing cut
    for (const std::size_t columns : {std::size_t(140), std::size_t(200)}) {
        const std::string table = list_table(views, now, columns);
        std::size_t begin = 0, longest = 0;
        while (begin < table.size()) {
            const std::size_t end = table.find('\n', begin);
            longest = std::max(longest, end - begin);
            begin = end + 1;
        }
        EXPECT_LE(longest, columns) << table;
        EXPECT_NE(table.find("xxx...  "), std::string::npos) << table;   // cut, with an ellipsis
        EXPECT_NE(table.find("train.py  "), std::string::npos) << table;  // a short one whole
    }
    // Too narrow for the other columns: the program keeps kProgramMin characters.
    const std::string narrow = list_table(views, now, 20);
    EXPECT_NE(narrow.find("  -c '" + std::string(kProgramMin - 3 - 4, 'x') + "...  "), std::string::npos) << narrow;
}

TEST(ListColumns, ColumnsWinThenTheTerminalElseNoCut) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);  // not a terminal
    EXPECT_EQ(output_columns("80", fds[1]), 80u);
    EXPECT_EQ(output_columns(nullptr, fds[1]), 0u);
    EXPECT_EQ(output_columns("", fds[1]), 0u);
    EXPECT_EQ(output_columns("wide", fds[1]), 0u);
    EXPECT_EQ(output_columns("0", fds[1]), 0u);
    close(fds[0]);
    close(fds[1]);
}

TEST_F(ListTest, ARunningRecordNobodyHoldsIsLostAndADamagedOneIsListed) {
    make("a-000001", {{"state", "running"}, {"created", "2026-11-29T10:00:00Z"}});
    const Job bad = make("b-000002", {{"state", "failed"}});
    std::ofstream(bad.record_path()) << "{";
    std::vector<JobView> views = view_jobs(home);
    ASSERT_EQ(views.size(), 2u);
    EXPECT_EQ(views[0].state, "lost");
    EXPECT_EQ(views[1].state, "unreadable");
    EXPECT_NE(views[1].problem.find("not valid json"), std::string::npos) << views[1].problem;
}

}  // namespace
}  // namespace portal
