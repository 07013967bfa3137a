#include "portal/store_trust.hpp"

#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

constexpr uid_t kOtherUid = 65534;  // nobody: "another user" when the tests run as root

class StoreTrustTest : public ::testing::Test {
protected:
    fs::path root;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_trust_XXXXXX";
        root = mkdtemp(tmpl);  // 0700, ours
    }
    void TearDown() override { fs::remove_all(root); }
    static mode_t mode_of(const fs::path& p) {
        struct stat st {};
        EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
        return st.st_mode & 07777;
    }
    static std::string refusal(const fs::path& home, StoreUse use) {
        try {
            trust_store(home, use);
        } catch (const StoreUntrusted& e) {
            return e.what();
        }
        return "";
    }
};

TEST_F(StoreTrustTest, CreatesMissingLevelsPrivateWhateverTheUmask) {
    const mode_t old = umask(0);  // the most permissive umask: still 0700
    const fs::path home = root / "a" / "b" / "home";
    const CheckedDir dir = trust_store(home, StoreUse::Create);
    umask(old);
    EXPECT_TRUE(dir.exists());
    for (const fs::path& p : {root / "a", root / "a" / "b", home}) EXPECT_EQ(mode_of(p), 0700u) << p;
}

TEST_F(StoreTrustTest, AMissingStoreIsEmptyForReadersAndNothingIsCreated) {
    const CheckedDir dir = trust_store(root / "none" / "home", StoreUse::Read);
    EXPECT_FALSE(dir.exists());
    EXPECT_FALSE(fs::exists(root / "none"));
}

TEST_F(StoreTrustTest, RefusesASymlinkedStoreAndWritesNothingThrough) {
    fs::create_directory(root / "real");
    fs::create_directory_symlink(root / "real", root / "home");
    const std::string why = refusal(root / "home", StoreUse::Create);
    EXPECT_NE(why.find(": a symlink; it cannot be trusted ("), std::string::npos) << why;
    EXPECT_TRUE(fs::is_empty(root / "real"));
}

TEST_F(StoreTrustTest, RefusesAGroupWritableStoreSayingChmod) {
    fs::create_directory(root / "home");
    chmod((root / "home").c_str(), 0770);
    const std::string why = refusal(root / "home", StoreUse::Create);
    EXPECT_NE(why.find("writable by group or others (mode 0770); it cannot be trusted (chmod 700 "),
              std::string::npos)
        << why;
}

TEST_F(StoreTrustTest, TightensAStoreOfOursThatOthersCanOnlyRead) {
    fs::create_directory(root / "home");
    chmod((root / "home").c_str(), 0755);
    EXPECT_TRUE(trust_store(root / "home", StoreUse::Create).exists());
    EXPECT_EQ(mode_of(root / "home"), 0700u);
}

TEST_F(StoreTrustTest, ASharedStickyParentNeedsAPrivateStore) {
    fs::create_directory(root / "shared");
    chmod((root / "shared").c_str(), 01777);
    fs::create_directory(root / "shared" / "home");
    chmod((root / "shared" / "home").c_str(), 0755);
    const std::string why = refusal(root / "shared" / "home", StoreUse::Read);
    EXPECT_NE(why.find("inside a directory others can write into, and not private (mode 0755)"), std::string::npos)
        << why;
    chmod((root / "shared" / "home").c_str(), 0700);
    EXPECT_TRUE(trust_store(root / "shared" / "home", StoreUse::Read).exists());
}

TEST_F(StoreTrustTest, RefusesAParentOthersCanWriteThatIsNotSticky) {
    fs::create_directory(root / "open");
    chmod((root / "open").c_str(), 0777);
    const std::string why = refusal(root / "open" / "home", StoreUse::Create);
    EXPECT_NE(why.find("is writable by others (mode 0777) and not sticky"), std::string::npos) << why;
    EXPECT_FALSE(fs::exists(root / "open" / "home"));
}

TEST_F(StoreTrustTest, RefusesAnotherUsersStoreAndParent) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory another user's";
    fs::create_directory(root / "home");
    ASSERT_EQ(chown((root / "home").c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_NE(refusal(root / "home", StoreUse::Read).find("owned by uid 65534; it cannot be trusted (it is not yours"),
              std::string::npos);
    fs::create_directory(root / "theirs");
    chmod((root / "theirs").c_str(), 01777);
    ASSERT_EQ(chown((root / "theirs").c_str(), kOtherUid, kOtherUid), 0);
    const std::string why = refusal(root / "theirs" / "home", StoreUse::Create);
    EXPECT_NE(why.find("is owned by uid 65534, neither you nor root"), std::string::npos) << why;
    EXPECT_FALSE(fs::exists(root / "theirs" / "home"));
}

// others_could_change: a job's interpreter and venv, checked before resume runs them.
TEST_F(StoreTrustTest, AVenvOthersCanWriteIntoIsRefusedItsStickyParentIsNot) {
    fs::create_directory(root / "shared");
    chmod((root / "shared").c_str(), 01777);  // /tmp-like, above the venv: the parents' rule
    const fs::path venv = root / "shared" / "venv";
    fs::create_directories(venv / "bin");
    chmod(venv.c_str(), 0755);
    chmod((venv / "bin").c_str(), 0755);
    std::ofstream(venv / "pyvenv.cfg") << "home = /usr/bin\n";
    chmod((venv / "pyvenv.cfg").c_str(), 0644);
    fs::create_symlink("/usr/bin/python3", venv / "bin" / "python3");
    EXPECT_EQ(others_could_change(venv / "bin" / "python3", venv), "");
    EXPECT_EQ(others_could_change(venv / "pyvenv.cfg", venv), "");
    // Inside the venv nothing may be writable by others, sticky or not.
    chmod((venv / "bin").c_str(), 01777);
    EXPECT_EQ(others_could_change(venv / "bin" / "python3", venv),
              (venv / "bin").string() + " is writable by group or others (mode 1777)");
    chmod((venv / "bin").c_str(), 0755);
    chmod((venv / "pyvenv.cfg").c_str(), 0664);
    EXPECT_EQ(others_could_change(venv / "pyvenv.cfg", venv),
              (venv / "pyvenv.cfg").string() + " is writable by group or others (mode 0664)");
    // Above it, a directory others can write into that is not sticky.
    chmod((root / "shared").c_str(), 0777);
    EXPECT_EQ(others_could_change(venv / "bin" / "python3", venv),
              (root / "shared").string() + " is writable by others (mode 0777) and not sticky, so another user "
                                           "could replace it");
}

TEST_F(StoreTrustTest, AVenvIsCheckedWhereItReallyIsNotThroughALinkAbove) {
    fs::create_directory(root / "open");
    chmod((root / "open").c_str(), 0777);  // not sticky: another user could swap what is in it
    fs::create_directories(root / "open" / "real" / "venv" / "bin");
    chmod((root / "open" / "real").c_str(), 0755);
    chmod((root / "open" / "real" / "venv").c_str(), 0755);
    chmod((root / "open" / "real" / "venv" / "bin").c_str(), 0755);
    fs::create_directory(root / "mine");
    fs::create_directory_symlink(root / "open" / "real", root / "mine" / "link");
    const fs::path venv = root / "mine" / "link" / "venv";
    EXPECT_EQ(others_could_change(venv / "bin", venv),
              (root / "open").string() + " is writable by others (mode 0777) and not sticky, so another user "
                                         "could replace it");
}

TEST_F(StoreTrustTest, AVenvOfAnotherUserIsRefused) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory another user's";
    const fs::path venv = root / "venv";
    fs::create_directories(venv / "bin");
    chmod(venv.c_str(), 0755);
    ASSERT_EQ(chown(venv.c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_EQ(others_could_change(venv / "bin", venv),
              venv.string() + " is owned by uid 65534, neither you nor root");
    EXPECT_EQ(others_could_change("/usr/bin/env"), "");  // root's, below root's directories
}

TEST_F(StoreTrustTest, RelativeHomeIsMadeAbsolute) {
    const fs::path cwd = fs::current_path();
    fs::current_path(root);
    const CheckedDir dir = trust_store("rel/home", StoreUse::Create);
    fs::current_path(cwd);
    EXPECT_EQ(dir.path(), root / "rel" / "home");
    EXPECT_TRUE(fs::is_directory(root / "rel" / "home"));
}

TEST_F(StoreTrustTest, StoreFilesAreNeverFollowedNorWaitedOn) {
    std::ofstream(root / "target") << "victim";
    fs::create_symlink(root / "target", root / "link");
    EXPECT_THROW(open_store_file(root / "link", O_RDWR | O_CREAT), StoreUntrusted);
    EXPECT_THROW(read_store_file(root / "link", 100), StoreUntrusted);
    ASSERT_EQ(mkfifo((root / "fifo").c_str(), 0600), 0);
    try {
        read_store_file(root / "fifo", 100);  // would block forever if waited on
        FAIL() << "a FIFO was read";
    } catch (const StoreUntrusted& e) {
        EXPECT_NE(std::string(e.what()).find("a FIFO, not a regular file"), std::string::npos) << e.what();
    }
    EXPECT_THROW(open_store_file(root / "fifo", O_WRONLY | O_APPEND | O_CREAT), StoreUntrusted);
    std::ifstream in(root / "target");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "victim");
    std::ofstream(root / "big") << std::string(101, 'x');
    EXPECT_THROW(read_store_file(root / "big", 100), JobError);
    EXPECT_EQ(open_store_file(root / "missing", O_RDONLY), -1);
}

TEST_F(StoreTrustTest, AtomicWriteReplacesPrivatelyAndNeverThroughALink) {
    std::ofstream(root / "target") << "victim";
    fs::create_symlink(root / "target", root / ("f.tmp" + std::to_string(getpid())));
    write_file_atomically(root / "f", "new", true);  // the planted temp name is removed, not followed
    std::ifstream in(root / "target");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "victim");
    std::ifstream f(root / "f");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "new");
    EXPECT_EQ(mode_of(root / "f"), 0600u);
    EXPECT_FALSE(fs::exists(fs::symlink_status(root / ("f.tmp" + std::to_string(getpid())))));
}

}  // namespace
}  // namespace portal
