// store_fixture.hpp: a job store in a fresh temporary directory, with jobs made
// from records, for the tests of the commands that read it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "portal/job_store.hpp"

namespace portal {

class StoreTest : public ::testing::Test {
protected:
    std::filesystem::path home;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_cli_XXXXXX";
        home = mkdtemp(tmpl);
        std::filesystem::create_directories(home / "jobs");
    }
    void TearDown() override { std::filesystem::remove_all(home); }
    Job make(const std::string& id, nlohmann::json record) {
        std::filesystem::create_directories(home / "jobs" / id);
        Job job{id, home / "jobs" / id};
        record["id"] = id;
        job.write_record(record);
        return job;
    }
    // A checkpoint as the writer lays it out: checkpoint -> checkpoint.1/.
    void add_checkpoint(const Job& job, std::size_t bytes) {
        std::filesystem::create_directories(job.dir / "checkpoint.1");
        std::ofstream(job.dir / "checkpoint.1" / "state.pickle") << std::string(bytes, 'x');
        std::filesystem::create_directory_symlink("checkpoint.1", job.dir / "checkpoint");
    }
};

}  // namespace portal
