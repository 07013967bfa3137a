#include "portal/inspect.hpp"

#include "store_fixture.hpp"

namespace portal {
namespace {

using InspectTest = StoreTest;

TEST_F(InspectTest, AJobIdStandsForItsDirectory) {
    const Job job = make("train-abc123", {{"state", "suspended"}});
    add_checkpoint(job, 10);
    EXPECT_EQ(inspect_path(home, "train-a"), job.dir);
}

TEST_F(InspectTest, APathIsTakenAsItIs) {
    EXPECT_EQ(inspect_path(home, (home / "jobs").string()), home / "jobs");
    // With a slash it is a path even when missing: the reader names what is wrong.
    EXPECT_EQ(inspect_path(home, "./nowhere"), "./nowhere");
}

TEST_F(InspectTest, AJobWithoutACheckpointIsRefusedWithItsState) {
    make("train-abc123", {{"state", "completed"}});
    try {
        inspect_path(home, "train-abc123");
        FAIL() << "expected JobError";
    } catch (const JobError& e) {
        EXPECT_NE(std::string(e.what()).find("has no checkpoint (it is completed"), std::string::npos) << e.what();
    }
}

TEST(InspectArgv, RunsTheModuleIsolatedWithThePackageFirst) {
    const auto argv = inspect_argv(Installation{"/usr/bin/python3", "/opt/p/lib"}, "/j/ck", true);
    ASSERT_EQ(argv.size(), 8u);
    EXPECT_EQ(argv[0], "/usr/bin/python3");
    EXPECT_EQ(argv[1], "-I");
    EXPECT_EQ(argv[5], "/opt/p/lib");
    EXPECT_EQ(argv[6], "/j/ck");
    EXPECT_EQ(argv[7], "--json");
    EXPECT_NE(argv[4].find("_portal.checkpoint.inspect_checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace portal
