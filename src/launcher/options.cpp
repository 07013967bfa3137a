// options.cpp: see include/portal/options.hpp.
#include "portal/options.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <regex>
#include <sys/stat.h>

#include "portal/log.hpp"
#include "portal/size.hpp"
#include "portal/tripwire.hpp"

namespace portal::options {

namespace {

std::string joined(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
    return text;
}

// "NAME: REST" -> {"NAME", "REST"}; nothing when `text` is not of that form.
bool split_subject(const std::string& text, std::string& name, std::string& rest) {
    const auto colon = text.find(": ");
    if (colon == std::string::npos) return false;
    name = text.substr(0, colon);
    rest = text.substr(colon + 2);
    return true;
}

}  // namespace

CLI::Validator mem_size(const std::string& advice, bool this_machine) {
    return CLI::Validator(
        [advice, this_machine](std::string& text) {
            try {
                // Not this machine's (`portal resume --on slurm`): 0, no machine check.
                parse_mem_option(text, this_machine ? tripwire::machine_memory() : 0);
                return std::string();
            } catch (const MemOptionError& e) {
                const std::string problem = e.what();
                const bool too_much = problem.rfind("this machine has", 0) == 0;
                return text + ": " + problem + (too_much && !advice.empty() ? "; " + advice : "");
            }
        },
        "");  // the option's type_name says what it takes
}

CLI::Validator positive_integer() {
    return CLI::Validator(
        [](std::string& text) {
            if (!text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == std::string::npos) {
                const long long value = std::atoll(text.c_str());
                if (value >= 1 && value <= INT_MAX) return std::string();
            }
            return text + ": not a whole number from 1 up";
        },
        "");  // the option's type_name says what it takes
}

CLI::Validator non_negative_number() {
    return CLI::Validator(
        [](std::string& text) {
            static const std::regex number("[0-9]{1,9}(\\.[0-9]{1,9})?");
            if (std::regex_match(text, number)) return std::string();
            return text + ": not a number of days, 0 or more (e.g. 7, 0.5)";
        },
        "");  // the option's type_name says what it takes
}

CLI::Validator one_of(const std::vector<std::string>& names) {
    return CLI::Validator(
        [names](std::string& text) {
            return std::find(names.begin(), names.end(), text) != names.end() ? std::string() : text + ": not one of " + joined(names);
        },
        "{" + joined(names) + "}");
}

CLI::Validator existing_path() {
    return CLI::Validator(
        [](std::string& text) {
            struct stat st {};
            return stat(text.c_str(), &st) == 0 ? std::string() : text + ": no such file or directory";
        },
        "");  // the option's type_name says what it takes
}

std::string usage_problem(const CLI::ParseError& error) {
    const std::string text = error.what();
    std::string name, rest;
    std::smatch m;
    if (dynamic_cast<const CLI::ValidationError*>(&error) != nullptr && split_subject(text, name, rest)) {
        return name + " " + rest;  // ours: "--mem" + "1M: below ..."
    }
    if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
        static const std::regex extras("The following arguments? (?:was|were) not expected: (.*)");
        if (std::regex_match(text, m, extras)) {
            const std::string first = m[1].str().substr(0, m[1].str().find(' '));
            return first + (first.rfind('-', 0) == 0 ? ": not an option of this command"
                                                     : ": not expected here (one too many arguments?)");
        }
    }
    if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
        static const std::regex required("(.*) is required");
        if (std::regex_match(text, m, required)) {
            const std::string what = m[1].str();
            return what == "A subcommand" ? "command: missing or unknown"
                                           : what + ": missing";
        }
    }
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
        static const std::regex typed("(\\S+): \\d+ required (\\S+) missing");
        static const std::regex exact("Expected exactly \\d+ arguments? to (\\S+), got \\d+");
        if (std::regex_match(text, m, typed)) return m[1].str() + ": needs a value (" + m[2].str() + ")";
        if (std::regex_match(text, m, exact)) return m[1].str() + ": needs a value";
        if (split_subject(text, name, rest)) return name + ": takes no value here";
    }
    if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
        static const std::regex convert("Could not convert: (\\S+) = (.*)");
        if (std::regex_match(text, m, convert)) return m[1].str() + " " + m[2].str() + ": not a valid value";
        if (split_subject(text, name, rest)) return name + ": takes no value";
    }
    // Any other parse error: CLI11's words, lower-case, as a last resort.
    return "the command line: " + log::lowercase_first(text);
}

void say_usage_problem(const CLI::ParseError& error, const std::string& command) {
    std::string subject, problem;
    const std::string line = usage_problem(error);
    if (!split_subject(line, subject, problem)) {
        subject = "usage";
        problem = line;
    }
    log::say(subject, problem + " (see " + command + " --help)");
}

}  // namespace portal::options
