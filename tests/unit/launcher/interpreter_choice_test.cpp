// The choice of interpreter (src/launcher/interpreter_choice.cpp): the order
// --python, PORTAL_PYTHON, VIRTUAL_ENV, CONDA_PREFIX, PATH, each over the next.
#include "portal/interpreter_choice.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

class Machine : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/portal_choice_XXXXXX";
        root = mkdtemp(tmpl);
        for (const char* dir : {"opt/bin", "pp/bin", "venv/bin", "conda/bin", "path1", "path2", "empty"}) {
            fs::create_directories(root / dir);
        }
        for (const char* exe : {"opt/bin/python3", "pp/bin/python3", "conda/bin/python3", "path2/python3",
                                "path2/python3.13"}) {
            make(root / exe, true);
        }
        make(root / "path1/python3", false);  // not executable: passed over, as execvp does
        make(root / "venv/real-python", true);
        fs::create_symlink(root / "venv/real-python", root / "venv/bin/python3");
        env = {{"PORTAL_PYTHON", (root / "pp/bin/python3").string()},
               {"VIRTUAL_ENV", (root / "venv").string()},
               {"CONDA_PREFIX", (root / "conda").string()},
               {"PATH", (root / "path1").string() + ":" + (root / "path2").string()}};
    }
    void TearDown() override { fs::remove_all(root); }

    static void make(const fs::path& path, bool executable) {
        std::ofstream(path) << "#!/bin/sh\n";
        fs::permissions(path, executable ? fs::perms::owner_all : fs::perms::owner_read);
    }
    EnvLookup lookup() const {
        return [this](const std::string& name) -> std::optional<std::string> {
            const auto it = env.find(name);
            return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        };
    }
    std::string path(const char* rel) const { return (root / rel).string(); }

    fs::path root;
    std::map<std::string, std::string> env;
};

TEST_F(Machine, EachSourceWinsOverTheNext) {
    auto choice = choose_interpreter(path("opt/bin/python3"), lookup());
    EXPECT_EQ(choice.path, path("opt/bin/python3"));
    EXPECT_EQ(choice.source, InterpreterSource::Option);

    choice = choose_interpreter(std::nullopt, lookup());
    EXPECT_EQ(choice.path, path("pp/bin/python3"));
    EXPECT_EQ(choice.source, InterpreterSource::PortalPython);

    env.erase("PORTAL_PYTHON");
    choice = choose_interpreter(std::nullopt, lookup());
    EXPECT_EQ(choice.path, path("venv/bin/python3"));
    EXPECT_EQ(choice.source, InterpreterSource::VirtualEnv);

    env.erase("VIRTUAL_ENV");
    choice = choose_interpreter(std::nullopt, lookup());
    EXPECT_EQ(choice.path, path("conda/bin/python3"));
    EXPECT_EQ(choice.source, InterpreterSource::CondaPrefix);

    env.erase("CONDA_PREFIX");
    choice = choose_interpreter(std::nullopt, lookup());
    EXPECT_EQ(choice.path, path("path2/python3"));  // path1's is not executable
    EXPECT_EQ(choice.source, InterpreterSource::Path);
    EXPECT_STREQ(source_name(choice.source), "PATH");
}

TEST_F(Machine, AnEmptyOptionOrVariableIsUnset) {
    env["PORTAL_PYTHON"] = "";
    const auto choice = choose_interpreter(std::string(), lookup());
    EXPECT_EQ(choice.source, InterpreterSource::VirtualEnv);
}

TEST_F(Machine, TheVenvPathIsKeptNotResolved) {
    // CPython finds pyvenv.cfg from the path it was started by: the symlink's own.
    env.erase("PORTAL_PYTHON");
    const auto choice = choose_interpreter(std::nullopt, lookup());
    EXPECT_EQ(choice.path, path("venv/bin/python3"));
    EXPECT_NE(choice.path, fs::canonical(choice.path).string());
}

TEST_F(Machine, ABareNameIsLookedUpOnPath) {
    const auto choice = choose_interpreter(std::string("python3.13"), lookup());
    EXPECT_EQ(choice.path, path("path2/python3.13"));
    try {
        choose_interpreter(std::string("python9.9"), lookup());
        FAIL() << "python9.9 is on no PATH";
    } catch (const NoInterpreter& e) {
        EXPECT_NE(std::string(e.what()).find("--python names 'python9.9', which is not on PATH"), std::string::npos)
            << e.what();
    }
}

TEST_F(Machine, ARelativePathIsMadeAbsolute) {
    const fs::path here = fs::current_path();
    fs::current_path(root / "opt");
    const auto choice = choose_interpreter(std::string("./bin/python3"), lookup());
    fs::current_path(here);
    EXPECT_EQ(choice.path, path("opt/bin/python3"));
}

TEST_F(Machine, ANamedInterpreterThatIsMissingIsNeverPassedOver) {
    env["PORTAL_PYTHON"] = path("nowhere/python3");
    try {
        choose_interpreter(std::nullopt, lookup());
        FAIL() << "a missing PORTAL_PYTHON must not fall to the venv";
    } catch (const NoInterpreter& e) {
        EXPECT_NE(std::string(e.what()).find("PORTAL_PYTHON names " + path("nowhere/python3") +
                                             ", which is not an executable file"),
                  std::string::npos)
            << e.what();
    }
    env.erase("PORTAL_PYTHON");
    env["VIRTUAL_ENV"] = path("empty");
    try {
        choose_interpreter(std::nullopt, lookup());
        FAIL() << "a VIRTUAL_ENV without python3 must not fall to PATH";
    } catch (const NoInterpreter& e) {
        EXPECT_NE(std::string(e.what()).find("VIRTUAL_ENV=" + path("empty") + " has no executable bin/python3"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("--python PATH"), std::string::npos) << e.what();
    }
}

TEST_F(Machine, NoPython3AnywhereIsSaid) {
    env = {{"PATH", path("empty") + ":" + path("path1")}};
    EXPECT_THROW(choose_interpreter(std::nullopt, lookup()), NoInterpreter);
}

TEST(SearchPath, AnEmptyEntryIsTheWorkingDirectory) {
    char tmpl[] = "/tmp/portal_search_XXXXXX";
    const fs::path dir = mkdtemp(tmpl);
    std::ofstream(dir / "python3") << "#!/bin/sh\n";
    fs::permissions(dir / "python3", fs::perms::owner_all);
    const fs::path here = fs::current_path();
    fs::current_path(dir);
    const auto found = search_path("python3", "/nonexistent::/also-not");
    fs::current_path(here);
    ASSERT_TRUE(found);
    EXPECT_EQ(*found, (dir / "python3").string());
    EXPECT_FALSE(search_path("python3", "/nonexistent"));
    fs::remove_all(dir);
}

}  // namespace
}  // namespace portal
