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
