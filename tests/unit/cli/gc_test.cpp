#include "portal/gc.hpp"

#include "portal/job_lock.hpp"
#include "store_fixture.hpp"

namespace portal {
namespace {

const std::time_t kNow = parse_utc_iso("2026-11-29T12:00:00Z");

class GcTest : public StoreTest {
protected:
    std::vector<GcAction> plan(std::optional<std::time_t> older = std::nullopt) {
        std::vector<JobView> views;
        for (const Job& j : list_jobs(home)) views.push_back(view_job(j));
        return plan_gc(views, kNow, older);
    }
};

std::string kinds(const std::vector<GcAction>& plan) {
    std::string out;
    for (const auto& a : plan) {
        out += a.job.id + "=" + (a.kind == GcKind::Expire ? "expire" : a.kind == GcKind::Clean ? "clean" : "remove") + " ";
    }
    return out;
}

TEST_F(GcTest, ExpiresOnlySuspendedJobsThatAreDue) {
    make("due-000001", {{"state", "suspended"}, {"expires_at", "2026-11-29T11:59:59Z"}});
    make("fresh-000002", {{"state", "suspended"}, {"expires_at", "2026-11-29T12:00:01Z"}});
    make("done-000003", {{"state", "completed"}, {"expires_at", "2026-11-01T00:00:00Z"}});
    EXPECT_EQ(kinds(plan()), "due-000001=expire ");
}

TEST_F(GcTest, CleansCheckpointsOfEndedJobsButNotOfLostOnes) {
    add_checkpoint(make("done-000001", {{"state", "completed"}}), 10);
    add_checkpoint(make("failed-000002", {{"state", "failed"}}), 10);
    make("empty-000003", {{"state", "completed"}});
    // Recorded running, nobody holds it: lost; its checkpoint is its last state.
    add_checkpoint(make("lost-000004", {{"state", "running"}}), 10);
    add_checkpoint(make("susp-000005", {{"state", "suspended"}, {"expires_at", "2026-12-01T00:00:00Z"}}), 10);
    EXPECT_EQ(kinds(plan()), "done-000001=clean failed-000002=clean ");
}

TEST_F(GcTest, OlderThanRemovesEndedJobsUnchangedSinceThen) {
    make("old-000001", {{"state", "failed"}, {"updated", "2026-11-01T00:00:00Z"}});
    make("oldlost-000002", {{"state", "running"}, {"updated", "2026-11-01T00:00:00Z"}});
    make("new-000003", {{"state", "completed"}, {"updated", "2026-11-29T00:00:00Z"}});
    make("oldsusp-000004", {{"state", "suspended"}, {"updated", "2026-11-01T00:00:00Z"},
                            {"expires_at", "2026-12-01T00:00:00Z"}});
    EXPECT_EQ(kinds(plan(7 * 86400)), "old-000001=remove oldlost-000002=remove ");
    EXPECT_EQ(kinds(plan()), "");
}

TEST_F(GcTest, LeavesAJobInUseAlone) {
    const Job job = make("held-000001", {{"state", "suspended"}, {"expires_at", "2026-11-01T00:00:00Z"}});
    JobLock lock = JobLock::acquire(job, "portal resume held-000001");
    EXPECT_EQ(kinds(plan()), "");
}

TEST_F(GcTest, LeavesAnUnreadableRecordAlone) {
    const Job job = make("bad-000001", {{"state", "failed"}});
    std::ofstream(job.record_path()) << "{not json";
    EXPECT_EQ(kinds(plan(0)), "");
}

TEST_F(GcTest, HasCheckpointFilesSeesWhatAnInterruptedWriterLeft) {
    const Job job = make("t-000001", {{"state", "failed"}});
    EXPECT_FALSE(has_checkpoint_files(job));
    std::filesystem::create_directory(job.dir / ".checkpoint.tmp-12-ab");
    EXPECT_TRUE(has_checkpoint_files(job));
}

}  // namespace
}  // namespace portal
