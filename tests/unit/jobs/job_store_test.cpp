#include "portal/job_store.hpp"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

class JobStoreTest : public ::testing::Test {
protected:
    fs::path home;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_js_XXXXXX";
        home = mkdtemp(tmpl);
        fs::create_directories(home / "jobs");
    }
    void TearDown() override { fs::remove_all(home); }
    Job make(const std::string& id) {
        fs::create_directories(home / "jobs" / id);
        Job job{id, home / "jobs" / id};
        job.write_record({{"id", id}, {"state", "suspended"}});
        return job;
    }
};

TEST_F(JobStoreTest, RecordRoundTripsAndIsPrivate) {
    Job job = make("train-abc123");
    job.update_record({{"state", "completed"}, {"exit_status", 0}});
    auto record = job.read_record();
    EXPECT_EQ(record["state"], "completed");
    EXPECT_EQ(record["exit_status"], 0);
    EXPECT_EQ(record["id"], "train-abc123");
    struct stat st {};
    ASSERT_EQ(stat(job.record_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE(fs::exists(job.record_path().string() + ".tmp" + std::to_string(getpid())));
}

TEST_F(JobStoreTest, FindsByIdOrUniquePrefix) {
    make("train-abc123");
    make("train-abd456");
    make("eval-000001");
    EXPECT_EQ(find_job(home, "train-abc123").id, "train-abc123");
    EXPECT_EQ(find_job(home, "train-abd").id, "train-abd456");
    EXPECT_EQ(find_job(home, "e").id, "eval-000001");
}

TEST_F(JobStoreTest, AmbiguousOrUnknownPrefixIsAClearError) {
    make("train-abc123");
    make("train-abd456");
    try {
        find_job(home, "train-ab");
        FAIL() << "expected JobError";
    } catch (const JobError& e) {
        EXPECT_NE(std::string(e.what()).find("train-abc123, train-abd456"), std::string::npos);
    }
    EXPECT_THROW(find_job(home, "nope"), JobError);
    EXPECT_THROW(find_job(home, "../etc"), JobError);
    EXPECT_THROW(find_job(home, ""), JobError);
}

TEST_F(JobStoreTest, AnIdLongerThanAnyIsRefusedWithoutEchoingItWhole) {
    try {
        find_job(home, std::string(50000, 'z'));
        FAIL() << "expected JobError";
    } catch (const JobError& e) {
        const std::string what = e.what();
        EXPECT_LT(what.size(), 200u) << what;
        EXPECT_NE(what.find("(50000 characters) is not a job id: an id has at most 39"), std::string::npos) << what;
    }
}

TEST_F(JobStoreTest, BrokenRecordIsAClearError) {
    Job job = make("x-1");
    { std::ofstream(job.record_path()) << "{not json"; }
    EXPECT_THROW(job.read_record(), JobError);
}

TEST_F(JobStoreTest, CreatedJobsArePrivateWithFreshIds) {
    const Job a = create_job(home, "my train.py", {{"state", "running"}});
    const Job b = create_job(home, "my train.py", {{"state", "running"}});
    EXPECT_NE(a.id, b.id);
    EXPECT_EQ(a.id.rfind("my_train_py-", 0), 0u) << a.id;
    EXPECT_EQ(a.id.size(), std::string("my_train_py-").size() + 6);
    struct stat st {};
    ASSERT_EQ(stat(a.dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    const auto record = a.read_record();
    EXPECT_EQ(record["id"], a.id);
    EXPECT_EQ(record["record_version"], kRecordVersion);
    EXPECT_EQ(record["state"], "running");
    EXPECT_GT(parse_utc_iso(record["created"]), 0);
}

TEST_F(JobStoreTest, ModifyKeepsOtherWritersFieldsAndSkipsNoChange) {
    Job job = make("m-1");
    job.update_record({{"loop", "x.py:3"}});
    const auto before = fs::last_write_time(job.record_path());
    const auto same = job.modify_record([](nlohmann::json&) {});
    EXPECT_EQ(fs::last_write_time(job.record_path()), before);
    EXPECT_EQ(same["loop"], "x.py:3");
    job.modify_record([](nlohmann::json& r) { r["state"] = "completed"; });
    const auto record = job.read_record();
    EXPECT_EQ(record["loop"], "x.py:3");
    EXPECT_EQ(record["state"], "completed");
}

TEST_F(JobStoreTest, NewerRecordVersionIsRefusedByName) {
    Job job = make("v-1");
    job.write_record({{"id", "v-1"}, {"record_version", kRecordVersion + 1}});
    try {
        job.read_record();
        FAIL() << "expected JobError";
    } catch (const JobError& e) {
        EXPECT_NE(std::string(e.what()).find("newer than this portal reads"), std::string::npos) << e.what();
    }
}

TEST(UtcIso, RoundTrips) {
    EXPECT_EQ(utc_iso(0), "1970-01-01T00:00:00Z");
    EXPECT_EQ(parse_utc_iso(utc_iso(1795000000)), 1795000000);
    EXPECT_EQ(parse_utc_iso("yesterday"), -1);
}

TEST(PortalHome, EnvironmentWins) {
    const char* old_home = std::getenv("HOME");
    const std::string saved = old_home ? old_home : "";
    setenv("PORTAL_HOME", "/tmp/somewhere", 1);
    EXPECT_EQ(portal_home(), fs::path("/tmp/somewhere"));
    unsetenv("PORTAL_HOME");
    setenv("HOME", "/home/u", 1);
    EXPECT_EQ(portal_home(), fs::path("/home/u/.portal"));
    if (old_home) setenv("HOME", saved.c_str(), 1); else unsetenv("HOME");
}

TEST(PortalHome, ARelativeOneIsMadeAbsoluteAgainstTheWorkingDirectory) {
    setenv("PORTAL_HOME", "rel/./store/", 1);
    EXPECT_EQ(portal_home(), fs::current_path() / "rel" / "store");
    EXPECT_TRUE(portal_home().is_absolute());
    unsetenv("PORTAL_HOME");
}

}  // namespace
}  // namespace portal
