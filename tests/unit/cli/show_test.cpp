#include "portal/show.hpp"
#include "portal/tripwire.hpp"

#include "portal/job_lock.hpp"
#include "store_fixture.hpp"

namespace portal {
namespace {

using ShowTest = StoreTest;

const std::uint64_t kGiB = std::uint64_t(1) << 30;

nlohmann::json suspended_record() {
    return {{"state", "suspended"},
            {"created", "2026-11-29T10:00:00Z"},
            {"updated", "2026-11-29T11:00:00Z"},
            {"program", {{"kind", "script"}, {"target", "/p/train.py"}}},
            {"args", {"--lr", "0.1"}},
            {"cwd", "/p"},
            {"policies", {{"oom.on", "true"}}},
            {"suspended_at", "2026-11-29T11:00:00Z"},
            {"expires_at", "2026-12-02T11:00:00Z"},
            {"checkpoint_bytes", 5 * 1024 * 1024},
            {"error", "MemoryError: out of memory"},
            {"error_at", "/p/model.py:40"},
            {"loop", "/p/train.py:12"},
            {"iteration", 4},
            {"will_differ", {"the failed iteration had already stepped optimizer 'opt' (step 75): it will step again"}},
            {"runs",
             {{{"kind", "run"}, {"command", {"portal-run", "--mem", "8G", "train.py"}},
               {"started", "2026-11-29T10:00:00Z"}, {"ended", "2026-11-29T11:00:00Z"}, {"mem", 8 * kGiB},
               {"output_kept", false}, {"exit_status", 75}, {"outcome", "suspended"},
               {"error", "MemoryError: out of memory"}, {"error_at", "/p/model.py:40"},
               {"loop", "/p/train.py:12"}, {"iteration", 4}, {"checkpoint_bytes", 5 * 1024 * 1024}}}}};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(ShowTest, ASuspendedJobSaysWhereWhatHowLongAndHowToResume) {
    const std::string text = show_text(view_job(make("train-aaaaaa", suspended_record())),
                                       parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_TRUE(has(text, "state       suspended\n")) << text;
    EXPECT_TRUE(has(text, "program     /p/train.py --lr 0.1\n")) << text;
    EXPECT_TRUE(has(text, "policies    oom.on=true\n")) << text;
    EXPECT_TRUE(has(text, "error       MemoryError: out of memory at /p/model.py:40\n")) << text;
    EXPECT_TRUE(has(text, "loop        /p/train.py:12, iteration 4 (0-based; runs again from its start)\n")) << text;
    EXPECT_TRUE(has(text, "loop        /p/train.py:12, iteration 4 (0-based; runs again from its start)\n"
                          "will differ the failed iteration had already stepped optimizer 'opt' (step 75): "
                          "it will step again\n")) << text;
    EXPECT_TRUE(has(text, "checkpoint  5.0 MiB in " + (home / "jobs/train-aaaaaa/checkpoint").string())) << text;
    EXPECT_TRUE(has(text, "expires     2026-12-02 11:00 UTC (2d 23h left)\n")) << text;
    // Twice the tripwire's cap under --mem 8G, as the suspension report suggests.
    // A size this machine does not have is said to be for another one.
    const bool fits_here = tripwire::machine_memory() >= 15 * kGiB;
    EXPECT_TRUE(has(text, "resume      portal resume train-aaaaaa --mem 15G" +
                              std::string(fits_here ? "\n" : " (this machine has "))) << text;
    EXPECT_TRUE(has(text, "  1. run, 2026-11-29 10:00 UTC to 2026-11-29 11:00 UTC: suspended (exit status 75)\n"))
        << text;
    EXPECT_TRUE(has(text, "     command     portal-run --mem 8G train.py\n")) << text;
    EXPECT_TRUE(has(text, "     output      went to a terminal, not kept\n")) << text;
}

TEST_F(ShowTest, AHugeSuggestionIsForAnotherMachineAndAGpuShortageAsksForAGpu) {
    nlohmann::json record = suspended_record();
    record["suggested_mem_gib"] = 1 << 20;  // 1 PiB: no machine here has it
    std::string text = show_text(view_job(make("train-bbbbbb", record)), parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_TRUE(has(text, "resume      portal resume train-bbbbbb --mem 1048576G (this machine has "))
        << text;
    record["suggested_gpu"] = true;  // a CUDA out-of-memory error (python/_portal/rescue/hint.py)
    text = show_text(view_job(make("train-cccccc", record)), parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_TRUE(has(text, "resume      portal resume train-cccccc --gpu MODEL")) << text;
    EXPECT_FALSE(has(text, "resume      portal resume train-cccccc --mem")) << text;
}

TEST_F(ShowTest, TheCheckpointsWriteAndReadFiguresAreShown) {
    nlohmann::json r = suspended_record();
    r["checkpoint_write"] = {{"bytes", 5 * kGiB}, {"seconds", 6.25}};
    r["checkpoint_read"] = {{"bytes", 2 * kGiB}, {"seconds", 2.0}};
    const std::string text = show_text(view_job(make("train-aaaaaa", r)), parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_TRUE(has(text, "/checkpoint\nwritten     5.0 GiB in 6.2 s (819.2 MiB/s)\nexpires ")) << text;
    EXPECT_TRUE(has(text, "restored    2.0 GiB in 2.0 s (1.0 GiB/s) (the last resume's checkpoint, verified and "
                          "loaded)\n")) << text;
    r["checkpoint_write"] = {{"bytes", "a lot"}, {"seconds", 1}};      // malformed: not shown
    r["checkpoint_read"] = "fast";
    const std::string plain = show_text(view_job(make("train-bbbbbb", r)), parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_FALSE(has(plain, "written ")) << plain;
    EXPECT_FALSE(has(plain, "restored ")) << plain;
}

TEST_F(ShowTest, ACompletedJobHasNoResumeCommandNorExpiry) {
    nlohmann::json r = suspended_record();
    r["state"] = "completed";
    r["ended"] = "2026-11-29T11:30:00Z";
    r["exit_status"] = 0;
    const std::string text = show_text(view_job(make("train-aaaaaa", r)), parse_utc_iso("2026-11-29T12:00:00Z"));
    EXPECT_TRUE(has(text, "ended       2026-11-29 11:30 UTC, exit status 0\n")) << text;
    EXPECT_FALSE(has(text, "portal resume")) << text;
    EXPECT_FALSE(has(text, "expires")) << text;
}

TEST_F(ShowTest, ARunningJobNamesItsHolderAndALostOneSaysWhy) {
    nlohmann::json r = suspended_record();
    r["state"] = "running";
    const Job job = make("train-aaaaaa", r);
    EXPECT_TRUE(has(show_text(view_job(job), 0), "state       lost (recorded as running, but no process holds it"));
    JobLock lock = JobLock::acquire(job, "portal resume train-aaaaaa");
    EXPECT_TRUE(has(show_text(view_job(job), 0), "state       running (pid "));
    EXPECT_TRUE(has(show_text(view_job(job), 0), ", portal resume train-aaaaaa, since "));
}

TEST_F(ShowTest, AnExpiredJobSaysWhen) {
    nlohmann::json r = suspended_record();
    r["state"] = "expired";
    r["expired_at"] = "2026-12-02T11:00:00Z";
    const std::string text = show_text(view_job(make("train-aaaaaa", r)), 0);
    EXPECT_TRUE(has(text, "expired     2026-12-02 11:00 UTC (its checkpoint was kept 3 days and is deleted")) << text;
    EXPECT_FALSE(has(text, "portal resume")) << text;
}

}  // namespace
}  // namespace portal
