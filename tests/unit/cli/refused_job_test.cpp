// A damaged, planted or foreign job in the store: shown as what it is, while
// every other job works.
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "portal/job_view.hpp"
#include "portal/list.hpp"
#include "portal/remove_job.hpp"
#include "portal/show.hpp"
#include "portal/store_trust.hpp"
#include "store_fixture.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

constexpr uid_t kOtherUid = 65534;

class RefusedJobTest : public StoreTest {};

// The table's row of job `id`, its columns single-spaced.
std::string row_of(const std::string& table, const std::string& id) {
    const auto at = table.find("\n" + id + " ");
    if (at == std::string::npos) return "";
    std::string row = table.substr(at + 1, table.find('\n', at + 1) - at - 1), out;
    for (char c : row) {
        if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
    }
    return out;
}

TEST_F(RefusedJobTest, DamagedRecordsAreUnreadableWithTheirReasonAndTheRestIsListed) {
    make("good-000001", {{"state", "completed"}, {"created", "2026-11-29T12:00:00Z"}});
    const std::vector<std::pair<std::string, std::string>> planted = {
        {"null-000002", R"({"state": null})"},
        {"array-000003", R"([1, 2, 3])"},
        {"str-000004", R"("suspended")"},
        {"int-000005", R"({"exit_status": 1e400})"},
        {"runs-000006", R"({"state": "failed", "runs": [null]})"},
    };
    for (const auto& [id, text] : planted) {
        fs::create_directories(home / "jobs" / id);
        std::ofstream(home / "jobs" / id / "job.json") << text;
    }
    const std::vector<JobView> views = view_jobs(home);
    ASSERT_EQ(views.size(), planted.size() + 1);
    const std::string table = list_table(views, 0);
    EXPECT_EQ(row_of(table, "good-000001").rfind("good-000001 completed ", 0), 0u) << table;
    EXPECT_NE(table.find("unreadable (field 'state' is null, not a string)"), std::string::npos) << table;
    EXPECT_NE(table.find("unreadable (not a job record (an array, not an object))"), std::string::npos) << table;
    EXPECT_NE(table.find("unreadable (field 'runs[0]' is null, not an object)"), std::string::npos) << table;
    for (const JobView& v : views) EXPECT_NO_THROW(view_json(v).dump());
}

TEST_F(RefusedJobTest, EscapeSequencesInARecordAreShownEscaped) {
    Job job = make("esc-000001", {{"state", "failed"},
                                  {"program", {{"kind", "script"}, {"target", "/w/\x1b[2J\x1b]0;pwned\x07.py"}}},
                                  {"cwd", "/w\x1b[31m"}, {"args", {"\x9b" "31m", "\xc2\x9b"}}});
    const std::string table = list_table(view_jobs(home), 0);
    const std::string shown = show_text(view_job(job), 0);
    for (const std::string& text : {table, shown}) {
        EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
        EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
        EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << text;
    }
    EXPECT_NE(shown.find("cwd         /w\\x1b[31m"), std::string::npos) << shown;
    EXPECT_NE(shown.find("\\x1b]0;pwned\\x07.py"), std::string::npos) << shown;
    EXPECT_EQ(printable("a\nb\x7f"), "a\\x0ab\\x7f");
}

TEST_F(RefusedJobTest, AnotherUsersOrAGroupWritableJobIsRefusedAndNotRemoved) {
    make("good-000001", {{"state", "completed"}});
    Job writable = make("open-000002", {{"state", "suspended"}});
    chmod(writable.dir.c_str(), 0777);
    const std::string table = list_table(view_jobs(home), 0);
    EXPECT_NE(table.find("refused (writable by group or others (mode 0777))"), std::string::npos) << table;
    EXPECT_THROW(remove_job(writable, "portal rm"), StoreUntrusted);
    EXPECT_TRUE(fs::exists(writable.record_path()));
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make a job another user's";
    Job theirs = make("theirs-000003", {{"state", "suspended"}});
    ASSERT_EQ(chown(theirs.dir.c_str(), kOtherUid, kOtherUid), 0);
    const JobView v = view_job(theirs);
    EXPECT_EQ(state_text(v), "refused (owned by uid 65534)");
    EXPECT_THROW(remove_job(theirs, "portal rm"), StoreUntrusted);
    EXPECT_TRUE(fs::exists(theirs.record_path()));
}

TEST_F(RefusedJobTest, ASymlinkedJobDirOrLockIsRefusedAndNeverWrittenThrough) {
    fs::create_directories(home / "elsewhere");
    std::ofstream(home / "elsewhere" / "job.json") << R"({"state": "suspended"})";
    fs::create_directory_symlink(home / "elsewhere", home / "jobs" / "link-000001");
    Job locked = make("lock-000002", {{"state", "suspended"}});
    std::ofstream(home / "victim") << "keep me";
    fs::create_symlink(home / "victim", locked.lock_path());
    const std::vector<JobView> views = view_jobs(home);
    const std::string table = list_table(views, 0);
    EXPECT_NE(table.find("link-000001  refused (a symlink)"), std::string::npos) << table;
    EXPECT_NE(table.find("lock-000002  refused (job.lock: a symlink)"), std::string::npos) << table;
    EXPECT_THROW(remove_job(locked, "portal rm"), StoreUntrusted);
    std::ifstream in(home / "victim");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
    EXPECT_TRUE(fs::exists(home / "elsewhere" / "job.json"));
}

TEST_F(RefusedJobTest, ARecoveredJobIsListedSuspendedFromItsCheckpoint) {
    Job job = make("rec-000001", {{"state", "failed"}, {"exit_status", 1}});
    fs::create_directories(job.dir / "checkpoint.1");
    std::ofstream(job.dir / "checkpoint.1" / "manifest.json")
        << nlohmann::json{{"job_id", job.id}, {"created", "2026-11-30T11:00:00.000Z"}}.dump();
    fs::create_directory_symlink("checkpoint.1", job.checkpoint_path());
    const JobView v = view_job(job);
    EXPECT_EQ(v.state, "suspended");
    EXPECT_EQ(state_text(v), "suspended (recovered from its checkpoint)");
    EXPECT_NE(show_text(v, 0).find("resume      portal resume rec-000001"), std::string::npos);
}

}  // namespace
}  // namespace portal
