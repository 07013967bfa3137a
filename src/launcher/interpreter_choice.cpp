// interpreter_choice.cpp: see include/portal/interpreter_choice.hpp.
#include "portal/interpreter_choice.hpp"

#include <cstdlib>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace fs = std::filesystem;

namespace portal {

namespace {

constexpr const char* kPython3 = "python3";
// execvp's search list when PATH is unset (confstr(_CS_PATH) on glibc).
constexpr const char* kDefaultPath = "/bin:/usr/bin";
constexpr const char* kHowToChoose = "choose one with --python PATH or PORTAL_PYTHON";

bool is_executable_file(const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string absolute_kept(const std::string& path) {
    std::error_code ec;
    const fs::path abs = fs::absolute(path, ec);
    return ec ? path : abs.lexically_normal().string();
}

// A path given by the user (--python, PORTAL_PYTHON): with a slash it is a path,
// without one a name looked up on PATH, as a shell runs it.
std::string named_interpreter(const std::string& given, const std::string& what, const EnvLookup& env) {
    if (given.find('/') == std::string::npos) {
        const auto found = search_path(given, env("PATH").value_or(kDefaultPath));
        if (!found) {
            throw NoInterpreter(what + " names '" + given + "', which is not on PATH; give its full path");
        }
        return *found;
    }
    const std::string path = absolute_kept(given);
    if (!is_executable_file(path)) {
        throw NoInterpreter(what + " names " + path + ", which is not an executable file; " + kHowToChoose);
    }
    return path;
}

std::string env_bin_python(const std::string& variable, const std::string& root) {
    const std::string path = absolute_kept((fs::path(root) / "bin" / kPython3).string());
    if (!is_executable_file(path)) {
        throw NoInterpreter(variable + "=" + root + " has no executable bin/python3 (an environment "
                            "deactivated or deleted?); unset " + variable + " or " + kHowToChoose);
    }
    return path;
}

}  // namespace

const char* source_name(InterpreterSource source) {
    switch (source) {
        case InterpreterSource::Option: return "--python";
        case InterpreterSource::PortalPython: return ::portal::contract::env::kPython;
        case InterpreterSource::VirtualEnv: return "VIRTUAL_ENV";
        case InterpreterSource::CondaPrefix: return "CONDA_PREFIX";
        case InterpreterSource::Path: return "PATH";
    }
    return "?";
}

std::optional<std::string> process_env(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
}

std::optional<std::string> search_path(const std::string& name, const std::string& path_list) {
    std::size_t start = 0;
    while (start <= path_list.size()) {
        std::size_t end = path_list.find(':', start);
        if (end == std::string::npos) end = path_list.size();
        const std::string dir = path_list.substr(start, end - start);
        const std::string candidate = absolute_kept(((dir.empty() ? fs::path(".") : fs::path(dir)) / name).string());
        if (is_executable_file(candidate)) return candidate;
        start = end + 1;
    }
    return std::nullopt;
}

InterpreterChoice choose_interpreter(const std::optional<std::string>& option, const EnvLookup& lookup) {
    // An empty variable is an unset one, whatever the lookup says (as a shell's `X= cmd`).
    const EnvLookup env = [&lookup](const std::string& name) -> std::optional<std::string> {
        auto value = lookup(name);
        return value && !value->empty() ? value : std::nullopt;
    };
    if (option && !option->empty()) {
        return {named_interpreter(*option, "--python", env), InterpreterSource::Option};
    }
    if (const auto chosen = env(::portal::contract::env::kPython)) {
        return {named_interpreter(*chosen, ::portal::contract::env::kPython, env), InterpreterSource::PortalPython};
    }
    if (const auto venv = env("VIRTUAL_ENV")) {
        return {env_bin_python("VIRTUAL_ENV", *venv), InterpreterSource::VirtualEnv};
    }
    if (const auto conda = env("CONDA_PREFIX")) {
        return {env_bin_python("CONDA_PREFIX", *conda), InterpreterSource::CondaPrefix};
    }
    if (const auto found = search_path(kPython3, env("PATH").value_or(kDefaultPath))) {
        return {*found, InterpreterSource::Path};
    }
    throw NoInterpreter(std::string("no python3 on PATH; ") + kHowToChoose);
}

}  // namespace portal
