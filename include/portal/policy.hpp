// policy.hpp: job policies, `--policy KEY=VALUE` (repeatable) or PORTAL_POLICY
// (comma-separated) in the environment; the option wins over the environment.
//
// Supported: oom.on=true|false (false: every out-of-memory error fails at once, as
// under python); oom.exact=true|false (true: a loop where the failed iteration
// changed what a resume cannot roll back declines, python/_portal/fidelity/irreversible.py).  A policy is recorded with the job and kept on resume unless
// given again.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace portal {

struct PolicyError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Normalised settings ("oom.on" -> "false"); throws PolicyError naming the bad
// item and what is supported.
std::map<std::string, std::string> parse_policies(const std::vector<std::string>& items);

// "oom.on=false" (comma-separated): what the bootstrap reads (PORTAL_BOOT_POLICY).
std::string format_policies(const std::map<std::string, std::string>& policies);

// The policies given by PORTAL_POLICY, then by the options.
std::map<std::string, std::string> policies_from(const char* environment_value,
                                                 const std::vector<std::string>& options);

// Hands the policies to the bootstrap (PORTAL_BOOT_POLICY in the interpreter's
// environment, which it removes before the program starts); none: unset.
void set_boot_policy(const std::map<std::string, std::string>& policies);

}  // namespace portal
