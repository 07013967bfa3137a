// slurm_submit.hpp: `portal resume JOB --on slurm[:PARTITION]` (docs/slurm.md).
//
// Submits the resume as a Slurm batch job: sbatch runs, on a node, the script
//     export PORTAL_HOME='<the store>'
//     exec '<this portal>' 'resume' '--mem' 'SIZE' ... '--' 'JOB'
// (every word single-quoted; it reaches sbatch on its stdin, never a shell of
// ours), with --mem=<MiB>M from --mem, --gres=gpu:TYPE:1 from --gpu, --time and
// --account as given, --output=<job dir>/slurm-%j.out.  The Slurm job id is
// printed (stdout, alone on its line) and recorded in the job's "slurm" field,
// which `portal show` and `portal logs` follow (slurm_status.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "portal/job_store.hpp"
#include "portal/resume.hpp"

namespace portal {

// Where --on says to run: this machine, or a Slurm partition ("" = the default one).
struct OnSpec {
    bool slurm = false;
    std::string partition;
};

// nullopt for a value that is neither "local" nor "slurm[:PARTITION]" (a partition
// name of at most kPartitionMax characters, [A-Za-z0-9][A-Za-z0-9_.-]*).
constexpr std::size_t kPartitionMax = 128;
std::optional<OnSpec> parse_on(const std::string& text);

// True when `portal`'s arguments `args` hold `--on slurm...` (`--on=slurm...`):
// --mem is then checked by the node, not against this machine.
bool submits_to_slurm(const std::vector<std::string>& args);

// The words --on takes, for its refusal and its help.
constexpr const char* kOnSupported = "local, slurm[:PARTITION]";

// Submits the resume of the suspended `job` (its record `record`); the exit
// status of `portal resume` (0: submitted, 1: refused, saying why).
int submit_resume_to_slurm(const ResumeRequest& request, const OnSpec& on, const Job& job,
                           const nlohmann::json& record);

}  // namespace portal
