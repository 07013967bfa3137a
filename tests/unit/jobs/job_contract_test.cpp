// The job record is one contract between C++ and Python (contract/job_record.json):
// a record the C++ side writes is read by python/_portal/store/jobs.py, and one the
// Python side writes (as a suspension does) is read and accepted by C++.
#include <array>
#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <memory>

#include "portal/exit_status.hpp"
#include "portal/job_contract.hpp"
#include "portal/job_store.hpp"

namespace fs = std::filesystem;

namespace portal {
namespace {

// Runs `code` under the staged package; its stdout.
std::string python(const std::string& code, const fs::path& dir) {
    const fs::path script = dir / "probe.py";
    std::ofstream(script) << code;
    const std::string command = std::string("PYTHONPATH='") + PORTAL_TEST_PYDIR + "' PYTHONDONTWRITEBYTECODE=1 " +
                                PORTAL_TEST_PYTHON + " '" + script.string() + "' 2>&1";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    std::string out;
    std::array<char, 512> buf{};
    while (pipe && fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
    return out;
}

class JobContractTest : public ::testing::Test {
protected:
    fs::path home;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_contract_XXXXXX";
        home = mkdtemp(tmpl);
    }
    void TearDown() override { fs::remove_all(home); }
};

TEST_F(JobContractTest, BothSidesHaveTheSameConstantsFromOneFile) {
    const std::string out = python(
        "from _portal import job_contract as c\n"
        "from _portal.store import jobs\n"
        "assert jobs.EXPIRY_SECONDS is c.EXPIRY_SECONDS and jobs.RECORD_VERSION is c.RECORD_VERSION\n"
        "print(c.RECORD_VERSION, c.SUSPENDED_EXIT_STATUS, c.EXPIRY_SECONDS, c.ID_PATTERN, c.RECORD_MAX_BYTES)\n",
        home);
    EXPECT_EQ(out, std::to_string(contract::kRecordVersion) + " " + std::to_string(kSuspendedExit) + " " +
                       std::to_string(kExpirySeconds) + " " + contract::kIdPattern + " " +
                       std::to_string(kRecordMaxBytes) + "\n");
}

TEST_F(JobContractTest, CppWritesPythonReadsAndPythonWritesCppReads) {
    const Job job = create_job(home, "train", {{"state", "running"}, {"runs", nlohmann::json::array()},
                                               {"program", {{"kind", "script"}, {"target", "/w/train.py"}}}});
    // Python reads the C++ record, checks its id against the contract's pattern,
    // then records a suspension as python/_portal/rescue/suspend.py does.
    const std::string out = python(
        "import re, sys\n"
        "from _portal import job_contract as c\n"
        "from _portal.store import jobs\n"
        "job = jobs.Job(sys.argv[1] if len(sys.argv) > 1 else '" + job.dir.string() + "')\n"
        "r = job.read_record()\n"
        "assert r['state'] == 'running' and r['record_version'] == c.RECORD_VERSION, r\n"
        "assert re.match(c.ID_PATTERN, r['id']), r['id']\n"
        "kinds = {'string': str, 'integer': int, 'array': list, 'object': dict, 'null': type(None),"
        " 'boolean': bool}\n"
        "for name, types in c.FIELDS.items():\n"
        "    if name in r: assert isinstance(r[name], tuple(kinds[t] for t in types)), name\n"
        "job.update_record(state='suspended', script='/w/train.py', argv=['train.py'], cwd='/w',\n"
        "                  suspended_at=jobs.utc_iso(0), expires_at=jobs.utc_iso(c.EXPIRY_SECONDS),\n"
        "                  checkpoint_bytes=1234, error='MemoryError', error_at=None, loop='/w/train.py:12',\n"
        "                  iteration=4, suggested_mem_gib=8)\n"
        "print('ok')\n",
        home);
    EXPECT_EQ(out, "ok\n");
    const nlohmann::json r = job.read_record();  // parse_record: every field of its contract type
    EXPECT_EQ(r["state"], "suspended");
    EXPECT_EQ(r["iteration"], 4);
    EXPECT_EQ(r["expires_at"], utc_iso(kExpirySeconds));
    EXPECT_TRUE(r["error_at"].is_null());
    EXPECT_EQ(r["program"]["target"], "/w/train.py");  // the C++ side's fields kept
}

}  // namespace
}  // namespace portal
