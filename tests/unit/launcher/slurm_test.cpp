// The Slurm helpers that need no cluster: quoting, the requeue key, the
// preemption test of a record, --on's values, and running a client without a shell.
#include "portal/slurm.hpp"
#include "portal/slurm_status.hpp"
#include "portal/slurm_submit.hpp"

#include <cstdlib>

#include <gtest/gtest.h>

namespace portal {
namespace {

// Sets an environment variable for one test, puts back what was there after.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        value ? setenv(name, value, 1) : unsetenv(name);
    }
    ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

TEST(SlurmShellQuote, EveryWordSingleQuotedAQuoteClosedAndReopened) {
    EXPECT_EQ(slurm::shell_quote("plain"), "'plain'");
    EXPECT_EQ(slurm::shell_quote(""), "''");
    EXPECT_EQ(slurm::shell_quote("it's $(touch x) `y` \"z\"\n"), "'it'\\''s $(touch x) `y` \"z\"\n'");
}

TEST(SlurmShellQuote, WhatShReadsBackIsTheWord) {
    const std::string word = "a'b $(echo no) ;|&<> \\ \"";
    const slurm::CommandResult r = slurm::run_command({"sh", "-c", "printf %s " + slurm::shell_quote(word)});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, word);
}

TEST(SlurmRunCommand, StdinOutErrAndStatus) {
    const slurm::CommandResult r = slurm::run_command({"sh", "-c", "cat; echo oops >&2; exit 3"}, "in\n");
    EXPECT_EQ(r.status, 3);
    EXPECT_EQ(r.out, "in\n");
    EXPECT_EQ(r.err, "oops");
    EXPECT_EQ(slurm::run_command({"portal-no-such-command-here"}).status, slurm::kNotFound);
}

TEST(SlurmRunCommand, KilledPastItsTimeout) {
    const slurm::CommandResult r = slurm::run_command({"sleep", "30"}, "", 1);
    EXPECT_TRUE(r.timed_out);
    EXPECT_EQ(r.status, -1);
}

TEST(SlurmRequeueKey, ClusterJobAndArrayTask) {
    ScopedEnv job("SLURM_JOB_ID", "4242"), cluster("SLURM_CLUSTER_NAME", "hpc"),
        array_job("SLURM_ARRAY_JOB_ID", nullptr), task("SLURM_ARRAY_TASK_ID", nullptr);
    EXPECT_EQ(slurm::requeue_key(), "hpc/4242");
    {
        ScopedEnv a("SLURM_ARRAY_JOB_ID", "4200"), t("SLURM_ARRAY_TASK_ID", "7");
        EXPECT_EQ(slurm::requeue_key(), "hpc/4200_7");
    }
    ScopedEnv none("SLURM_JOB_ID", nullptr);
    EXPECT_EQ(slurm::requeue_key(), std::nullopt);
}

TEST(SlurmPreemption, TheReasonOfTheRecordOrItsLastRun) {
    EXPECT_TRUE(slurm::suspended_by_preemption({{"state", "suspended"}, {"reason", "preempted"}}));
    EXPECT_TRUE(slurm::suspended_by_preemption(
        {{"runs", nlohmann::json::array({{{"outcome", "suspended"}}, {{"reason", "preempted (SIGUSR1)"}}})}}));
    EXPECT_FALSE(slurm::suspended_by_preemption({{"state", "suspended"}, {"error", "MemoryError"}}));
    EXPECT_FALSE(slurm::suspended_by_preemption({{"reason", 3}, {"runs", "x"}}));
}

TEST(SlurmOn, LocalAndSlurmWithAPartitionOnly) {
    EXPECT_FALSE(parse_on("local")->slurm);
    EXPECT_TRUE(parse_on("slurm")->slurm);
    EXPECT_EQ(parse_on("slurm:gpu-a100")->partition, "gpu-a100");
    for (const char* bad : {"", "bogus", "slurm:", "slurm:a b", "slurm;x", "SLURM", "slurm:-p"}) {
        EXPECT_EQ(parse_on(bad), std::nullopt) << bad;
    }
    EXPECT_TRUE(submits_to_slurm({"resume", "j", "--on", "slurm:x", "--mem", "9000"}));
    EXPECT_TRUE(submits_to_slurm({"resume", "j", "--on=slurm"}));
    EXPECT_FALSE(submits_to_slurm({"resume", "j", "--mem", "9000"}));
    EXPECT_FALSE(submits_to_slurm({"resume", "j", "--on", "local"}));
}

TEST(SlurmOn, AHugeValueIsRefusedWithoutRecursing) {
    // A regex match recursed per character: 50,000 characters overflowed the stack.
    EXPECT_EQ(parse_on("slurm:" + std::string(50000, 'a')), std::nullopt);
    EXPECT_EQ(parse_on(std::string(50000, 's')), std::nullopt);
    EXPECT_FALSE(submits_to_slurm({"resume", "j", "--on", "slurm:" + std::string(50000, 'a')}));
    EXPECT_EQ(parse_on("slurm:" + std::string(kPartitionMax, 'a'))->partition, std::string(kPartitionMax, 'a'));
    EXPECT_EQ(parse_on("slurm:" + std::string(kPartitionMax + 1, 'a')), std::nullopt);
    EXPECT_EQ(parse_on("slurm:a\xc3\xa9"), std::nullopt);
    EXPECT_EQ(parse_on("slurm:a.b_c-d")->partition, "a.b_c-d");
}

TEST(SlurmStatus, OnlyAJobIdIsHandedToACommand) {
    EXPECT_EQ(recorded_slurm_job({{"slurm", {{"job_id", "4242"}}}}), "4242");
    EXPECT_EQ(recorded_slurm_job({{"slurm", {{"job_id", "4200_7"}}}}), "4200_7");
    EXPECT_EQ(recorded_slurm_job({{"slurm", {{"job_id", "--all"}}}}), std::nullopt);
    EXPECT_EQ(recorded_slurm_job({{"slurm", {{"job_id", 4242}}}}), std::nullopt);
    EXPECT_EQ(recorded_slurm_job({{"slurm", "4242"}}), std::nullopt);
    EXPECT_TRUE(slurm_job_active("PENDING"));
    EXPECT_TRUE(slurm_job_active("RUNNING"));
    EXPECT_FALSE(slurm_job_active("COMPLETED"));
    EXPECT_FALSE(slurm_job_active("unknown (squeue is not installed here)"));
}

}  // namespace
}  // namespace portal

#include <filesystem>
#include <fstream>
#include <sys/stat.h>

#include "../cli/store_fixture.hpp"

namespace portal {
namespace {

// requeue_if_preempted and find_requeued_job on a real store, with a fake
// `scontrol` first on PATH that notes its arguments.
class SlurmRequeueTest : public StoreTest {
protected:
    std::filesystem::path bin, calls;
    void SetUp() override {
        StoreTest::SetUp();
        bin = home / "bin";
        calls = home / "scontrol-calls";
        std::filesystem::create_directories(bin);
        std::ofstream(bin / "scontrol") << "#!/bin/sh\necho \"$@\" >> '" << calls.string() << "'\n";
        chmod((bin / "scontrol").c_str(), 0755);
    }
    std::string called() {
        std::ifstream in(calls);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
};

TEST_F(SlurmRequeueTest, APreemptedSuspensionRequeuesItsSlurmJobAnOomOneDoesNot) {
    const std::string path = bin.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
    ScopedEnv p("PATH", path.c_str()), id("SLURM_JOB_ID", "4242");
    const Job oom = make("train-aaaaaa", {{"state", "suspended"}, {"reason", "oom"}, {"error", "MemoryError"}});
    slurm::requeue_if_preempted(oom, 75);
    EXPECT_EQ(called(), "");
    const Job preempted = make("train-bbbbbb", {{"state", "suspended"}, {"reason", "preempted"}});
    slurm::requeue_if_preempted(preempted, 0);  // not suspended by this run
    EXPECT_EQ(called(), "");
    slurm::requeue_if_preempted(preempted, 75);
    EXPECT_EQ(called(), "requeue 4242\n");
    ScopedEnv outside("SLURM_JOB_ID", nullptr);
    slurm::requeue_if_preempted(preempted, 75);
    EXPECT_EQ(called(), "requeue 4242\n");
}

TEST_F(SlurmRequeueTest, TheNewestJobOfTheKeyOthersAndUnreadableOnesPassedOver) {
    make("train-aaaaaa", {{"state", "failed"}, {"created", "2026-12-01T10:00:00Z"},
                          {"slurm", {{"requeue_key", "c/7"}}}});
    make("train-bbbbbb", {{"state", "suspended"}, {"created", "2026-12-01T11:00:00Z"},
                          {"slurm", {{"requeue_key", "c/7"}}}});
    make("train-cccccc", {{"state", "suspended"}, {"created", "2026-12-01T12:00:00Z"},
                          {"slurm", {{"requeue_key", "c/8"}}}});
    std::filesystem::create_directories(home / "jobs" / "train-dddddd");
    std::ofstream(home / "jobs" / "train-dddddd" / "job.json") << "{not json";
    EXPECT_EQ(slurm::find_requeued_job(home, "c/7")->id, "train-bbbbbb");
    EXPECT_EQ(slurm::find_requeued_job(home, "c/9"), std::nullopt);
}

}  // namespace
}  // namespace portal
