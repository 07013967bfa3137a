// log.hpp: Portal's own messages, on stderr, as `portal: <subject>: <problem>`.
//
// Kept apart from the program's output: Portal prints nothing on a normal run.
// PORTAL_LOG=debug shows the launcher's decisions.
#pragma once

#include <string>

namespace portal::log {

// `portal: <subject>: <problem>` (lower-case by convention; the caller writes it so).
void say(const std::string& subject, const std::string& problem);
// Only with PORTAL_LOG=debug.
void debug(const std::string& subject, const std::string& detail);
// Messages are lower-case: "Segmentation fault" -> "segmentation fault".
std::string lowercase_first(std::string text);

}  // namespace portal::log
