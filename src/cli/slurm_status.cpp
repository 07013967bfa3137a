// slurm_status.cpp: see include/portal/slurm_status.hpp.
#include "portal/slurm_status.hpp"

#include <regex>

#include "portal/slurm.hpp"

namespace portal {

namespace {

// The first word of the first line of `text` ("CANCELLED by 0" -> "CANCELLED").
std::string first_word(const std::string& text) {
    const auto begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return {};
    const auto end = text.find_first_of(" \t\r\n", begin);
    return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

std::optional<std::string> recorded_slurm_job(const nlohmann::json& record) {
    const auto slurm = record.find(slurm::kRecordField);
    if (slurm == record.end() || !slurm->is_object()) return std::nullopt;
    const auto id = slurm->find("job_id");
    if (id == slurm->end() || !id->is_string()) return std::nullopt;
    static const std::regex job_id("[0-9]{1,12}(_[0-9]{1,12})?");
    const std::string text = id->get<std::string>();
    return std::regex_match(text, job_id) ? std::optional<std::string>(text) : std::nullopt;
}

std::string slurm_job_state(const std::string& slurm_job) {
    const slurm::CommandResult queued = slurm::run_command({"squeue", "-h", "-t", "all", "-j", slurm_job, "-o", "%T"});
    if (queued.status == slurm::kNotFound) return "unknown (squeue is not installed here)";
    if (queued.status == 0 && !first_word(queued.out).empty()) return first_word(queued.out);
    // Past slurmctld's MinJobAge squeue forgets a job; accounting (if the cluster
    // keeps it) still knows.
    const slurm::CommandResult accounted =
        slurm::run_command({"sacct", "-n", "-X", "-P", "-j", slurm_job, "-o", "State"});
    if (accounted.status == 0 && !first_word(accounted.out).empty()) return first_word(accounted.out);
    if (queued.timed_out) return "unknown (squeue did not answer)";
    return "unknown (neither squeue nor sacct knows it any more)";
}

bool slurm_job_active(const std::string& state) {
    static const std::regex active(
        "PENDING|CONFIGURING|RUNNING|COMPLETING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|RESIZING|SUSPENDED|"
        "STOPPED|SIGNALING|STAGE_OUT|RESV_DEL_HOLD");
    return std::regex_match(state, active);
}

}  // namespace portal
