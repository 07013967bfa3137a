// The record reader against damaged and planted input: every case is a JobError
// with its reason, never another exception, a crash or a hang.
#include "portal/job_store.hpp"

#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "portal/store_trust.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

std::string why_unreadable(const std::string& text) {
    try {
        parse_record(text);
    } catch (const JobError& e) {
        return e.what();
    }
    return "";
}

TEST(ParseRecord, EachWrongTypeSaysWhichFieldAndWhy) {
    EXPECT_EQ(why_unreadable(R"({"state": null})"), "field 'state' is null, not a string");
    EXPECT_EQ(why_unreadable(R"({"runs": {}})"), "field 'runs' is an object, not an array");
    EXPECT_EQ(why_unreadable(R"({"runs": [3]})"), "field 'runs[0]' is an integer, not an object");
    EXPECT_EQ(why_unreadable(R"({"runs": [{"output_kept": "yes"}]})"),
              "field 'runs[0].output_kept' is a string, not a boolean");
    EXPECT_EQ(why_unreadable(R"({"program": {"kind": 1}})"), "field 'program.kind' is an integer, not a string");
    EXPECT_EQ(why_unreadable(R"({"iteration": 1.5})"), "field 'iteration' is a number, not an integer or null");
    EXPECT_EQ(why_unreadable(R"({"record_version": 99999999999999999999})"),
              "field 'record_version' is a number, not an integer");
    EXPECT_EQ(why_unreadable(R"({"state": "hacked"})"), "field 'state' is not a state Portal writes");
    EXPECT_EQ(why_unreadable(R"([1, 2])"), "not a job record (an array, not an object)");
    EXPECT_EQ(why_unreadable(R"("text")"), "not a job record (a string, not an object)");
    EXPECT_EQ(why_unreadable("{\"cwd\": \"\xff\xfe\"}"), "not UTF-8 text");
    EXPECT_EQ(why_unreadable(std::string(100, '[') + std::string(100, ']')), "nested deeper than 32");
    EXPECT_EQ(why_unreadable(std::string(kRecordMaxBytes + 1, ' ')),
              "larger than " + std::to_string(kRecordMaxBytes) + " bytes");
    EXPECT_NE(why_unreadable("{\"state\": \"suspended\"").find("not valid json"), std::string::npos);
    EXPECT_NE(why_unreadable(R"({"record_version": 2})").find("newer than this portal reads"), std::string::npos);
    EXPECT_EQ(why_unreadable(R"({"state": "suspended", "new_field": [1, {"x": null}]})"), "");  // new fields: free
}

TEST(ParseRecord, SeededMutationsNeverThrowAnythingButJobError) {
    // Thousands of byte-level mutants of a real record (flips, deletions,
    // insertions of JSON punctuation and odd bytes): each parses or is a JobError.
    const std::string seed = nlohmann::json{
        {"record_version", 1}, {"id", "train-abc123"}, {"state", "suspended"},
        {"program", {{"kind", "script"}, {"target", "/w/train.py"}}}, {"args", {"--epochs", "3"}},
        {"runs", {{{"kind", "run"}, {"command", {"portal-run", "train.py"}}, {"pid", 42}, {"mem", nullptr},
                   {"log_offset", 0}, {"output_kept", true}, {"exit_status", 75}, {"outcome", "suspended"}}}},
        {"iteration", 4}, {"loop", "train.py:12"}, {"checkpoint_bytes", 1234},
        {"expires_at", "2026-12-04T12:00:00Z"}}.dump();
    std::mt19937 random(20261201);
    const std::string odd = "{}[]\",:0-9.eE\\u\xff\xc0\x80\x00 tnf";
    constexpr int kCases = 20000;
    int parsed = 0;
    for (int i = 0; i < kCases; ++i) {
        std::string text = seed;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const std::size_t at = random() % text.size();
            switch (random() % 3) {
                case 0: text[at] = odd[random() % odd.size()]; break;
                case 1: text.erase(at, 1 + random() % 8); break;
                default: text.insert(at, 1, odd[random() % odd.size()]); break;
            }
        }
        try {
            parse_record(text);
            ++parsed;
        } catch (const JobError&) {
        }  // anything else fails the test (uncaught)
    }
    EXPECT_GT(parsed, 0);             // some mutants are still records
    EXPECT_LT(parsed, kCases);        // and many are refused
}

class RecordFileTest : public ::testing::Test {
protected:
    fs::path home;
    Job job;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_rec_XXXXXX";
        home = mkdtemp(tmpl);
        fs::create_directories(home / "jobs" / "t-000001");
        job = Job{"t-000001", home / "jobs" / "t-000001"};
    }
    void TearDown() override {
        umount2((home / "small").c_str(), MNT_DETACH);
        fs::remove_all(home);
    }
    std::string why() {
        try {
            job.read_record();
        } catch (const JobError& e) {
            return e.what();
        }
        return "";
    }
};

TEST_F(RecordFileTest, ASymlinkOrFifoRecordIsRefusedUnreadAndUnfollowed) {
    std::ofstream(home / "victim") << R"({"state": "completed"})";
    fs::create_symlink(home / "victim", job.record_path());
    EXPECT_NE(why().find("job.json: a symlink; it cannot be trusted"), std::string::npos) << why();
    EXPECT_THROW(job.update_record({{"state", "failed"}}), JobError);
    std::ifstream in(home / "victim");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), R"({"state": "completed"})");
    fs::remove(job.record_path());
    ASSERT_EQ(mkfifo(job.record_path().c_str(), 0600), 0);
    EXPECT_NE(why().find("a FIFO, not a regular file"), std::string::npos) << why();
}

TEST_F(RecordFileTest, AHugeRecordIsRefusedBySize) {
    std::ofstream(job.record_path()) << std::string(kRecordMaxBytes + 10, ' ');
    EXPECT_NE(why().find("larger than 1048576 bytes"), std::string::npos) << why();
}

TEST_F(RecordFileTest, TempFilesOfAnInterruptedUpdateAreRemovedByTheNextOne) {
    job.write_record({{"state", "running"}});
    std::ofstream(job.dir / "job.json.tmp999999") << "{half";
    job.update_record({{"state", "failed"}});
    EXPECT_FALSE(fs::exists(job.dir / "job.json.tmp999999"));
    EXPECT_EQ(job.read_record()["state"], "failed");
}

TEST_F(RecordFileTest, AFullDiskAtTheRecordWriteLeavesTheOldRecordAndNoTemp) {
    fs::create_directory(home / "small");
    if (geteuid() != 0 || mount("tmpfs", (home / "small").c_str(), "tmpfs", 0, "size=16k") != 0) {
        GTEST_SKIP() << "needs root and mount(2) for a small tmpfs to fill";
    }
    fs::create_directory(home / "small" / "j-000001");
    const Job small{"j-000001", home / "small" / "j-000001"};
    small.write_record({{"state", "suspended"}, {"iteration", 3}});
    {
        std::ofstream fill(home / "small" / "fill");
        fill << std::string(64 * 1024, 'x');  // as much as fits
    }
    nlohmann::json big = {{"state", "completed"}, {"error", std::string(32 * 1024, 'e')}};
    EXPECT_THROW(small.write_record(big), JobError);
    EXPECT_EQ(small.read_record()["state"], "suspended");  // still resumable
    for (const auto& entry : fs::directory_iterator(small.dir)) {
        EXPECT_FALSE(is_record_temp(entry.path().filename().string())) << entry.path();
    }
}

}  // namespace
}  // namespace portal
