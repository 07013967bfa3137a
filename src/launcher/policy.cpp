// policy.cpp: see include/portal/policy.hpp.
#include "portal/policy.hpp"

#include "portal/options.hpp"

#include <cstdlib>
#include <sstream>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

namespace {

// A value list of just this word takes a whole number 0..kMaxCount (docs/policies.md).
const std::string kCount = "N";
constexpr std::size_t kMaxCountDigits = 6;

const std::map<std::string, std::vector<std::string>> kSupported{
    {"oom.on", {"true", "false"}},
    {"oom.exact", {"true", "false"}},  // true: a point where something will differ declines
    // What the rescue does at the loop it found (python/_portal/rescue/policy.py).
    {"oom.action", {"suspend", "retry", "skip"}},
    {"oom.retries", {kCount}},    // retries of one item before suspending (default 1)
    {"oom.max_skips", {kCount}},  // skipped items per job before suspending (default 10)
};

bool is_count(const std::string& value) {
    return !value.empty() && value.size() <= kMaxCountDigits &&
           value.find_first_not_of("0123456789") == std::string::npos;
}

std::string supported_list() {
    std::string out;
    for (const auto& [key, values] : kSupported) {
        out += (out.empty() ? "" : ", ") + key + "=";
        for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "|" : "") + values[i];
    }
    return out;
}

}  // namespace

std::map<std::string, std::string> parse_policies(const std::vector<std::string>& items) {
    std::map<std::string, std::string> out;
    for (const auto& item : items) {
        const auto eq = item.find('=');
        const std::string key = item.substr(0, eq);
        const auto known = kSupported.find(key);
        if (eq == std::string::npos || known == kSupported.end()) {
            throw PolicyError("'" + options::shown(item) + "' is not a policy; supported: " + supported_list());
        }
        std::string value = item.substr(eq + 1);
        if (known->second == std::vector<std::string>{kCount}) {
            if (!is_count(value)) {
                throw PolicyError("'" + options::shown(item) + "': " + key + " takes a whole number, 0 or more (e.g. " + key +
                                  "=3)");
            }
            out[key] = std::to_string(std::stoul(value));
            continue;
        }
        if (known->second.front() == "true") {
            if (value == "0" || value == "off" || value == "no") value = "false";
            if (value == "1" || value == "on" || value == "yes") value = "true";
        }
        std::string allowed;
        bool ok = false;
        for (const auto& v : known->second) {
            ok = ok || v == value;
            allowed += (allowed.empty() ? "" : "|") + v;
        }
        if (!ok) {
            throw PolicyError("'" + options::shown(item) + "': " + key + " takes " + allowed);
        }
        out[key] = value;
    }
    return out;
}

std::string format_policies(const std::map<std::string, std::string>& policies) {
    std::string out;
    for (const auto& [key, value] : policies) out += (out.empty() ? "" : ",") + key + "=" + value;
    return out;
}

std::map<std::string, std::string> policies_from(const char* environment_value,
                                                 const std::vector<std::string>& options) {
    std::vector<std::string> items;
    if (environment_value != nullptr) {
        std::stringstream in(environment_value);
        std::string item;
        while (std::getline(in, item, ',')) {
            if (!item.empty()) items.push_back(item);
        }
    }
    items.insert(items.end(), options.begin(), options.end());
    return parse_policies(items);
}

void set_boot_policy(const std::map<std::string, std::string>& policies) {
    if (policies.empty()) {
        unsetenv(::portal::contract::env::kBootPolicy);
    } else {
        setenv(::portal::contract::env::kBootPolicy, format_policies(policies).c_str(), 1);
    }
}

}  // namespace portal
