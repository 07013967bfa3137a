// log.cpp: see include/portal/log.hpp.  spdlog writes each message whole, so
// Portal's lines never interleave mid-line with each other.
#include "portal/log.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal::log {

namespace {

spdlog::logger& logger() {
    static std::shared_ptr<spdlog::logger> instance = [] {
        auto l = std::make_shared<spdlog::logger>("portal",
                                                  std::make_shared<spdlog::sinks::stderr_sink_mt>());
        l->set_pattern("portal: %v");
        const char* level = std::getenv(::portal::contract::env::kLog);
        l->set_level(level && std::strcmp(level, "debug") == 0 ? spdlog::level::debug
                                                                : spdlog::level::info);
        l->flush_on(spdlog::level::debug);
        return l;
    }();
    return *instance;
}

}  // namespace

void say(const std::string& subject, const std::string& problem) {
    logger().error("{}: {}", subject, problem);
}

std::string lowercase_first(std::string text) {
    // "Segmentation fault" -> "segmentation fault", but "JOB is required" stays.
    const bool acronym = text.size() > 1 && text[1] >= 'A' && text[1] <= 'Z';
    if (!text.empty() && !acronym && text[0] >= 'A' && text[0] <= 'Z') {
        text[0] = static_cast<char>(text[0] - 'A' + 'a');
    }
    return text;
}

void debug(const std::string& subject, const std::string& detail) {
    logger().debug("{}: {}", subject, detail);
}

}  // namespace portal::log
