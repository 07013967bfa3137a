// size.hpp: memory sizes as users write them: "64" (GiB), "512M", "2G", "1.5T", "8GiB".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace portal {

// Bytes for `text`; a bare number is GiB.  nullopt for anything malformed.
std::optional<std::uint64_t> parse_size(const std::string& text);
// "23.5 GiB".
std::string format_size(std::uint64_t bytes);
// The physical memory of this machine.
std::uint64_t physical_memory();

}  // namespace portal
