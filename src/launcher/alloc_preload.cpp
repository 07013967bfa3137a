// alloc_preload.cpp: see include/portal/alloc_preload.hpp.
#include "portal/alloc_preload.hpp"

#include <filesystem>
#include <system_error>

#include "portal/installation.hpp"

namespace portal::tripwire {

std::optional<std::string> alloc_library_path(const std::string& exe_path) {
    const auto package = find_package_dir(exe_path);
    if (!package) return std::nullopt;
    const std::filesystem::path library = std::filesystem::path(*package) / "_portal" / kAllocLibrary;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(library, ec)) return std::nullopt;
    const std::string text = library.string();
    if (text.find_first_of(" :\t\n") != std::string::npos) return std::nullopt;
    return text;
}

std::string preload_with(const std::string& library, const char* user_value) {
    if (user_value == nullptr || *user_value == '\0') return library;
    return library + " " + user_value;
}

std::string saved_user_preload(const char* user_value) {
    return user_value == nullptr ? std::string() : std::string("=") + user_value;
}

}  // namespace portal::tripwire
