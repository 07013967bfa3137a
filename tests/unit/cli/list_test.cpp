#include "portal/list.hpp"

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
