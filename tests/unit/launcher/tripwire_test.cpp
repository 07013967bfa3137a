#include "portal/tripwire.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace portal::tripwire {
namespace {

constexpr std::uint64_t MiB = 1024ull * 1024;
constexpr std::uint64_t GiB = 1024 * MiB;

TEST(Reserve, TenPercentBetween256MiBAnd1GiB) {
    EXPECT_EQ(reserve_for(4 * GiB), 4 * GiB / 10);
    EXPECT_EQ(reserve_for(2 * GiB), 256 * MiB);   // 10% is 204.8 MiB: the floor
    EXPECT_EQ(reserve_for(24 * GiB), 1 * GiB);    // 10% is 2.4 GiB: the ceiling
    EXPECT_EQ(reserve_for(1024 * GiB), 1 * GiB);
}

TEST(Reserve, NeverMoreThanHalf) {
    EXPECT_EQ(reserve_for(300 * MiB), 150 * MiB);
    EXPECT_EQ(reserve_for(0), 0u);
}

TEST(Cap, MemoryLessReserve) {
    EXPECT_EQ(cap_for(2 * GiB), 2 * GiB - 256 * MiB);
    EXPECT_EQ(cap_for(8 * GiB), 8 * GiB - 8 * GiB / 10);
    EXPECT_EQ(cap_for(24 * GiB), 23 * GiB);
    EXPECT_EQ(cap_for(300 * MiB), 150 * MiB);
}

TEST(CgroupLimit, Numbers) {
    EXPECT_EQ(parse_cgroup_limit("8589934592\n"), 8 * GiB);
    EXPECT_EQ(parse_cgroup_limit("  536870912 "), 512 * MiB);
}

TEST(CgroupLimit, NoLimit) {
    EXPECT_EQ(parse_cgroup_limit("max\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), std::nullopt);  // v1 unlimited
    EXPECT_EQ(parse_cgroup_limit("99999999999999999999999"), std::nullopt);
    EXPECT_EQ(parse_cgroup_limit(""), std::nullopt);
    EXPECT_EQ(parse_cgroup_limit("-1"), std::nullopt);
}

TEST(ProcCgroup, V2) {
    const auto found = parse_proc_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n");
    ASSERT_TRUE(found);
    EXPECT_EQ(found->path, "/user.slice/user-1000.slice/session-2.scope");
    EXPECT_FALSE(found->v1);
    EXPECT_EQ(parse_proc_cgroup("0::/\n")->path, "/");
}

TEST(ProcCgroup, V1MemoryHierarchy) {
    const auto found = parse_proc_cgroup(
        "12:pids:/docker/abc\n"
        "7:cpu,cpuacct:/docker/abc\n"
        "4:memory:/docker/abc\n"
        "1:name=systemd:/docker/abc\n");
    ASSERT_TRUE(found);
    EXPECT_EQ(found->path, "/docker/abc");
    EXPECT_TRUE(found->v1);
    EXPECT_EQ(parse_proc_cgroup("3:cpu,memory:/a:b\n")->path, "/a:b");
}

// Hybrid: the memory controller is bound to the v1 hierarchy, the v2 one has none.
TEST(ProcCgroup, HybridUsesTheV1MemoryHierarchy) {
    const auto found = parse_proc_cgroup("4:memory:/v1path\n0::/\n");
    ASSERT_TRUE(found);
    EXPECT_EQ(found->path, "/v1path");
    EXPECT_TRUE(found->v1);
}

TEST(ProcCgroup, NoneFound) {
    EXPECT_EQ(parse_proc_cgroup(""), std::nullopt);
    EXPECT_EQ(parse_proc_cgroup("5:pids:/x\n"), std::nullopt);
}

TEST(MachineMemory, LeastOfPhysicalAndCgroup) {
    EXPECT_EQ(machine_memory_from(24 * GiB, std::nullopt), 24 * GiB);
    EXPECT_EQ(machine_memory_from(24 * GiB, 8 * GiB), 8 * GiB);
    EXPECT_EQ(machine_memory_from(24 * GiB, 64 * GiB), 24 * GiB);
}

TEST(MemoryCap, OffWithTheEnvironmentSwitch) {
    setenv("PORTAL_MEMORY_TRIPWIRE", "0", 1);
    EXPECT_EQ(memory_cap(2 * GiB), std::nullopt);
    unsetenv("PORTAL_MEMORY_TRIPWIRE");
}

bool no_gpu() { return false; }
bool a_gpu() { return true; }

TEST(MemoryCap, RequestedSizeReplacesTheMachine) {
    unsetenv("PORTAL_MEMORY_TRIPWIRE");
    EXPECT_EQ(memory_cap(2 * GiB, no_gpu), cap_for(2 * GiB));
    EXPECT_EQ(memory_cap(std::nullopt, no_gpu), cap_for(machine_memory()));
}

// The product page: "There is no cap on GPU machines", not even with --mem.
TEST(MemoryCap, NoneOnAMachineWithAGpu) {
    unsetenv("PORTAL_MEMORY_TRIPWIRE");
    EXPECT_EQ(memory_cap(2 * GiB, a_gpu), std::nullopt);
    EXPECT_EQ(memory_cap(std::nullopt, a_gpu), std::nullopt);
}

TEST(MemoryCap, TheRealProbeDecidesByDefault) {
    unsetenv("PORTAL_MEMORY_TRIPWIRE");
    EXPECT_EQ(memory_cap(2 * GiB), has_gpu() ? std::nullopt : std::optional(cap_for(2 * GiB)));
}

// A machine laid out under a temporary root: the device node, or the driver's list
// of GPUs when it names one.
class GpuProbeUnder : public ::testing::Test {
protected:
    void SetUp() override {
        root = std::filesystem::temp_directory_path() /
               ("portal-gpu-probe-" + std::to_string(::getpid()));
        std::filesystem::remove_all(root);
        std::filesystem::create_directories(root);
    }
    void TearDown() override { std::filesystem::remove_all(root); }
    void touch(const std::filesystem::path& relative) {
        std::filesystem::create_directories((root / relative).parent_path());
        std::ofstream(root / relative).put('\n');
    }
    std::filesystem::path root;
};

TEST_F(GpuProbeUnder, NothingThereIsNoGpu) { EXPECT_FALSE(has_gpu_under(root)); }

TEST_F(GpuProbeUnder, TheDeviceNodeIsAGpu) {
    touch("dev/nvidia0");  // a plain file stands for the character device
    EXPECT_TRUE(has_gpu_under(root));
}

TEST_F(GpuProbeUnder, TheDriverListCountsWhenItNamesOne) {
    std::filesystem::create_directories(root / "proc/driver/nvidia/gpus");
    EXPECT_FALSE(has_gpu_under(root));  // the driver is loaded, no GPU is listed
    std::filesystem::create_directories(root / "proc/driver/nvidia/gpus/0000:3b:00.0");
    EXPECT_TRUE(has_gpu_under(root));
}

TEST_F(GpuProbeUnder, OtherDevicesAreNot) {
    touch("dev/nvidiactl");
    touch("dev/dri/card0");
    EXPECT_FALSE(has_gpu_under(root));
}

}  // namespace
}  // namespace portal::tripwire
