// libFuzzer target of the C++ job-record reader (parse_record, job_store.hpp):
// any input is a record or a JobError, never a crash, a hang, a sanitizer
// report or another exception (which escapes and fails the run).
// Built with Debian's clang by tests/fuzz/CMakeLists.txt; run by CTest as fuzz.record.
#include <cstddef>
#include <cstdint>
#include <string>

#include "portal/job_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const nlohmann::json record = portal::parse_record(text);
        // What the CLI does with a record it accepted must hold too.
        (void)record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        (void)record.value("state", std::string());
    } catch (const portal::JobError&) {
        // refused with a reason: what a damaged record must give
    }
    return 0;
}
