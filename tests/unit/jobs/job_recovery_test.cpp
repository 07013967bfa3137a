#include "portal/job_recovery.hpp"

#include <fstream>
#include <gtest/gtest.h>

#include "portal/job_lock.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

class JobRecoveryTest : public ::testing::Test {
protected:
    fs::path home;
    Job job;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_recover_XXXXXX";
        home = mkdtemp(tmpl);
        fs::create_directories(home / "jobs" / "train-abc123");
        job = Job{"train-abc123", home / "jobs" / "train-abc123"};
    }
    void TearDown() override { fs::remove_all(home); }
    // A committed checkpoint as the writer leaves it: checkpoint -> checkpoint.<G>/manifest.json.
    void commit(int generation, const std::string& job_id, const std::string& created) {
        const std::string name = "checkpoint." + std::to_string(generation);
        fs::create_directories(job.dir / name);
        std::ofstream(job.dir / name / "manifest.json")
            << nlohmann::json{{"format_version", 1}, {"job_id", job_id}, {"created", created},
                              {"loop", {{"file", "/w/train.py"}, {"line", 12}, {"iteration", 7}}}}
                   .dump();
        fs::remove(job.checkpoint_path());
        fs::create_directory_symlink(name, job.checkpoint_path());
    }
};

TEST_F(JobRecoveryTest, ALostJobWithANewerCheckpointOfItsOwnIsSuspendedAgain) {
    job.write_record({{"state", "running"}, {"suspended_at", "2026-11-30T10:00:00Z"}});
    commit(2, job.id, "2026-11-30T11:00:00.250Z");
    const auto recovery = recovered_checkpoint(job, job.read_record(), "lost");
    ASSERT_TRUE(recovery);
    EXPECT_EQ(recovery->generation, "checkpoint.2");
    EXPECT_TRUE(repair_job(job));
    const nlohmann::json r = job.read_record();
    EXPECT_EQ(r["state"], "suspended");
    EXPECT_EQ(r["suspended_at"], "2026-11-30T11:00:00Z");
    EXPECT_EQ(r["expires_at"], "2026-12-03T11:00:00Z");  // its 3 days, from the checkpoint
    EXPECT_EQ(r["loop"], "/w/train.py:12");
    EXPECT_EQ(r["iteration"], 7);
    EXPECT_TRUE(is_recovered(r));
}

TEST_F(JobRecoveryTest, ALostJobIsJudgedFromItsCheckpointWhateverItsAge) {
    // A resume marked the job running, then its supervisor and program were killed:
    // the checkpoint it started from (the one the record knows) is still the job's.
    job.write_record({{"state", "running"}, {"suspended_at", "2026-11-30T11:00:05Z"}});
    commit(1, job.id, "2026-11-30T11:00:00.900Z");
    const auto recovery = recovered_checkpoint(job, job.read_record(), "lost");
    ASSERT_TRUE(recovery);
    EXPECT_EQ(recovery->generation, "checkpoint.1");
    EXPECT_TRUE(repair_job(job));
    EXPECT_EQ(job.read_record()["state"], "suspended");
    // ... but not another job's, nor one a failed program left behind.
    job.write_record({{"state", "running"}});
    commit(2, "other-aaaaaa", "2026-11-30T12:00:00Z");
    EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "lost"));
}

TEST_F(JobRecoveryTest, AnOlderCheckpointAnotherJobsOrAPlantedLinkRecoverNothing) {
    job.write_record({{"state", "failed"}, {"suspended_at", "2026-11-30T11:00:00Z"}});
    commit(1, job.id, "2026-11-30T11:00:00.900Z");  // the suspension the record knows (same second)
    EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "failed"));
    commit(2, "other-aaaaaa", "2026-11-30T12:00:00Z");  // replayed from another job
    EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "failed"));
    fs::remove(job.checkpoint_path());
    fs::create_directory_symlink(home, job.checkpoint_path());  // not checkpoint.<G>
    EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "failed"));
    commit(3, job.id, "2026-11-30T13:00:00Z");
    EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "completed"));  // it ended well: nothing to do
    EXPECT_TRUE(recovered_checkpoint(job, job.read_record(), "failed"));
}

TEST_F(JobRecoveryTest, ADamagedManifestRecoversNothingAndNeverThrows) {
    job.write_record({{"state", "failed"}});
    fs::create_directories(job.dir / "checkpoint.1");
    fs::create_directory_symlink("checkpoint.1", job.checkpoint_path());
    for (const std::string& text : {std::string("[") + std::string(1000, '['), std::string("{\"job_id\": 5}"),
                                    std::string("\xff"), std::string("null")}) {
        std::ofstream(job.dir / "checkpoint.1" / "manifest.json") << text;
        EXPECT_FALSE(recovered_checkpoint(job, job.read_record(), "failed")) << text;
    }
}

TEST_F(JobRecoveryTest, LeftoversAreRemovedUnderTheLockAndKeptWhileItIsHeld) {
    job.write_record({{"state", "suspended"}});
    fs::create_directories(job.dir / ".checkpoint.tmp-42-abcd");
    std::ofstream(job.dir / "job.json.tmp42") << "{";
    {
        JobLock held = JobLock::acquire(job, "portal resume train-abc123");
        EXPECT_FALSE(repair_job(job));  // a running writer's files are not leftovers
        EXPECT_TRUE(fs::exists(job.dir / ".checkpoint.tmp-42-abcd"));
    }
    EXPECT_TRUE(repair_job(job));
    EXPECT_FALSE(fs::exists(job.dir / ".checkpoint.tmp-42-abcd"));
    EXPECT_FALSE(fs::exists(job.dir / "job.json.tmp42"));
    EXPECT_EQ(job.read_record()["state"], "suspended");
}

}  // namespace
}  // namespace portal
