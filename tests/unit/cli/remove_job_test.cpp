#include "portal/remove_job.hpp"

#include "portal/job_lock.hpp"
#include "store_fixture.hpp"

namespace portal {
namespace {

using RemoveJobTest = StoreTest;

TEST_F(RemoveJobTest, RemovesTheWholeDirectoryAndCountsItsBytes) {
    const Job job = make("t-000001", {{"state", "suspended"}});
    add_checkpoint(job, 1000);
    const std::uintmax_t before = bytes_under(job.dir);
    EXPECT_GT(before, 1000u);
    const RemoveResult r = remove_job(job, "portal rm t-000001");
    EXPECT_EQ(r.state, "suspended");
    EXPECT_EQ(r.freed, before);
    EXPECT_FALSE(std::filesystem::exists(job.dir));
}

TEST_F(RemoveJobTest, RefusesAJobInUseNamingTheHolder) {
    const Job job = make("t-000001", {{"state", "running"}});
    JobLock lock = JobLock::acquire(job, "portal-run t.py");
    try {
        remove_job(job, "portal rm t-000001");
        FAIL() << "expected JobBusy";
    } catch (const JobBusy& e) {
        EXPECT_NE(std::string(e.what()).find("portal-run t.py"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(std::filesystem::exists(job.record_path()));
}

TEST_F(RemoveJobTest, ARunningRecordNobodyHoldsIsRemovedAsLost) {
    const Job job = make("t-000001", {{"state", "running"}});
    EXPECT_EQ(remove_job(job, "portal rm t-000001").state, "lost");
}

}  // namespace
}  // namespace portal
