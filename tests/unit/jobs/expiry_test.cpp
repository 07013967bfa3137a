#include "portal/expiry.hpp"

#include <fstream>
#include <gtest/gtest.h>

#include "portal/job_lock.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

class ExpiryTest : public ::testing::Test {
protected:
    fs::path home;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_ex_XXXXXX";
        home = mkdtemp(tmpl);
    }
    void TearDown() override { fs::remove_all(home); }
    // A suspended job with a checkpoint of two generations' leftovers.
    Job suspended(std::time_t expires) {
        Job job = create_job(home, "exp", {{"state", "suspended"}, {"expires_at", utc_iso(expires)}});
        fs::create_directories(job.dir / "checkpoint.3" / "blobs");
        std::ofstream(job.dir / "checkpoint.3" / "blobs" / "0000.bin") << std::string(1000, 'x');
        fs::create_directories(job.dir / ".checkpoint.tmp-1-abc");
        fs::create_directory_symlink("checkpoint.3", job.dir / "checkpoint");
        std::ofstream(job.dir / "output.log") << "kept\n";
        return job;
    }
};

TEST_F(ExpiryTest, DueJobBecomesExpiredAndLosesOnlyItsCheckpoint) {
    const std::time_t now = 1800000000;
    Job due = suspended(now - 1);
    Job later = suspended(now + 3600);
    const auto ids = expire_due_jobs(home, now);
    ASSERT_EQ(ids, std::vector<std::string>{due.id});
    const auto record = due.read_record();
    EXPECT_EQ(record["state"], "expired");
    EXPECT_EQ(record["expired_at"], utc_iso(now - 1));
    EXPECT_FALSE(fs::exists(fs::symlink_status(due.checkpoint_path())));
    EXPECT_FALSE(fs::exists(due.dir / "checkpoint.3"));
    EXPECT_FALSE(fs::exists(due.dir / ".checkpoint.tmp-1-abc"));
    EXPECT_TRUE(fs::exists(due.dir / "output.log"));
    EXPECT_TRUE(fs::exists(due.record_path()));
    EXPECT_EQ(later.read_record()["state"], "suspended");
    EXPECT_TRUE(fs::exists(later.dir / "checkpoint.3"));
}

TEST_F(ExpiryTest, AJobInUseIsLeftAlone) {
    const std::time_t now = 1800000000;
    Job job = suspended(now - 10);
    JobLock lock = JobLock::acquire(job, "portal resume");
    EXPECT_FALSE(expire_if_due(job, now));
    EXPECT_EQ(job.read_record()["state"], "suspended");
}

TEST_F(ExpiryTest, OnlySuspendedJobsExpire) {
    Job job = create_job(home, "done", {{"state", "completed"}, {"expires_at", utc_iso(1)}});
    EXPECT_FALSE(expire_if_due(job, 1800000000));
    EXPECT_EQ(job.read_record()["state"], "completed");
}

TEST_F(ExpiryTest, RemoveCheckpointCountsTheBytesFreed) {
    Job job = suspended(1);
    EXPECT_EQ(remove_checkpoint(job), 1000u);
}

}  // namespace
}  // namespace portal
