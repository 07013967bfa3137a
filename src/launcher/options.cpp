// options.cpp: see include/portal/options.hpp.
#include "portal/options.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
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

bool all_digits(const std::string& text, std::size_t begin, std::size_t end) {
    if (begin >= end) return false;
    for (std::size_t i = begin; i < end; ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
    }
    return true;
}

// `text` with `prefix` at its start: the rest; nothing otherwise.
bool after_prefix(const std::string& text, const std::string& prefix, std::string& rest) {
    if (text.compare(0, prefix.size(), prefix) != 0) return false;
    rest = text.substr(prefix.size());
    return true;
}

}  // namespace

std::string shown(const std::string& value) {
    if (value.size() <= kShownMax) return value;
    return value.substr(0, kShownMax) + "... (" + std::to_string(value.size()) + " characters)";
}

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
                return shown(text) + ": " + problem + (too_much && !advice.empty() ? "; " + advice : "");
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
            return shown(text) + ": not a whole number from 1 up";
        },
        "");  // the option's type_name says what it takes
}

CLI::Validator non_negative_number() {
    return CLI::Validator(
        [](std::string& text) {
            // [0-9]{1,9}(.[0-9]{1,9})?, by hand: a regex match recurses per character.
            const std::size_t dot = text.find('.');
            const std::size_t whole = std::min(dot, text.size());
            const bool ok = whole <= 9 && all_digits(text, 0, whole) &&
                            (dot == std::string::npos || (text.size() - dot - 1 <= 9 && all_digits(text, dot + 1, text.size())));
            if (ok) return std::string();
            return shown(text) + ": not a number of days, 0 or more (e.g. 7, 0.5)";
        },
        "");  // the option's type_name says what it takes
}

CLI::Validator one_of(const std::vector<std::string>& names) {
    return CLI::Validator(
        [names](std::string& text) {
            return std::find(names.begin(), names.end(), text) != names.end() ? std::string()
                                                                                : shown(text) + ": not one of " + joined(names);
        },
        "{" + joined(names) + "}");
}

CLI::Validator existing_path() {
    return CLI::Validator(
        [](std::string& text) {
            struct stat st {};
            return stat(text.c_str(), &st) == 0 ? std::string() : shown(text) + ": no such file or directory";
        },
        "");  // the option's type_name says what it takes
}

std::optional<double> parse_seconds(const std::string& text) {
    // Digits and at most one point: never nan, inf, hex floats, exponents or a sign.
    const std::size_t dot = text.find('.');
    const std::size_t whole = std::min(dot, text.size());
    if (text.size() > 32 || text.empty() || text == ".") return std::nullopt;
    if (whole > 0 && !all_digits(text, 0, whole)) return std::nullopt;
    if (dot != std::string::npos && dot + 1 < text.size() && !all_digits(text, dot + 1, text.size())) {
        return std::nullopt;
    }
    if (dot != std::string::npos && text.find('.', dot + 1) != std::string::npos) return std::nullopt;
    errno = 0;
    const double value = std::strtod(text.c_str(), nullptr);
    if (errno != 0 || !std::isfinite(value) || value < 0 || value > kGraceSecondsMax) return std::nullopt;
    return value;
}

CLI::Validator grace_seconds() {
    return CLI::Validator(
        [](std::string& text) {
            if (parse_seconds(text)) return std::string();
            return shown(text) + ": not a number of seconds from 0 to " +
                   std::to_string(static_cast<long>(kGraceSecondsMax)) + " (e.g. 60, 2.5)";
        },
        "");  // the option's type_name says what it takes
}

std::optional<std::string> device_map_problem(const std::string& text) {
    if (text.size() > kDeviceMapMax) {
        return "longer than the " + std::to_string(kDeviceMapMax) + " characters a map of device indexes takes";
    }
    // FROM:TO[,FROM:TO...], each index at most 4 digits; by hand: a regex match
    // recurses per character (a long value overflowed the stack).
    std::size_t begin = 0;
    while (true) {
        const std::size_t end = std::min(text.find(',', begin), text.size());
        const std::size_t colon = text.find(':', begin);
        const bool ok = colon < end && colon - begin <= 4 && end - colon - 1 <= 4 && all_digits(text, begin, colon) &&
                        all_digits(text, colon + 1, end);
        if (!ok) return std::string("not FROM:TO[,FROM:TO...] of device indexes (e.g. 0:1)");
        if (end == text.size()) return std::nullopt;
        begin = end + 1;
    }
}

CLI::Validator device_map() {
    return CLI::Validator(
        [](std::string& text) {
            const auto problem = device_map_problem(text);
            return problem ? shown(text) + ": " + *problem : std::string();
        },
        "");  // the option's type_name says what it takes
}

std::string usage_problem(const CLI::ParseError& error) {
    // By hand, never std::regex: a regex match recurses per character, and the
    // text holds the user's values (a 50,000-character one overflowed the stack).
    const std::string text = error.what();
    std::string name, rest;
    if (dynamic_cast<const CLI::ValidationError*>(&error) != nullptr && split_subject(text, name, rest)) {
        return name + " " + rest;  // ours: "--mem" + "1M: below ..."
    }
    if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
        for (const char* prefix : {"The following argument was not expected: ",
                                   "The following arguments were not expected: "}) {
            if (after_prefix(text, prefix, rest)) {
                const std::string first = rest.substr(0, rest.find(' '));
                return shown(first) + (first.rfind('-', 0) == 0 ? ": not an option of this command"
                                                                : ": not expected here (one too many arguments?)");
            }
        }
    }
    if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
        const std::string suffix = " is required";
        if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
            const std::string what = text.substr(0, text.size() - suffix.size());
            return what == "A subcommand" ? "command: missing or unknown" : shown(what) + ": missing";
        }
    }
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
        // "NAME: N required TYPE missing", "Expected exactly N argument(s) to NAME, got M"
        if (split_subject(text, name, rest) && name.find(' ') == std::string::npos) {
            const std::size_t sp1 = rest.find(' ');
            const std::size_t sp2 = rest.find(' ', sp1 == std::string::npos ? rest.size() : sp1 + 1);
            const std::size_t sp3 = rest.find(' ', sp2 == std::string::npos ? rest.size() : sp2 + 1);
            if (sp3 != std::string::npos && all_digits(rest, 0, sp1) && rest.compare(sp1, sp2 - sp1, " required") == 0 &&
                rest.compare(sp3, std::string::npos, " missing") == 0) {
                return name + ": needs a value (" + rest.substr(sp2 + 1, sp3 - sp2 - 1) + ")";
            }
        }
        if (after_prefix(text, "Expected exactly ", rest)) {
            const std::size_t to = rest.find(" to ");
            const std::size_t comma = rest.rfind(", got ");
            if (to != std::string::npos && comma != std::string::npos && comma > to) {
                return shown(rest.substr(to + 4, comma - to - 4)) + ": needs a value";
            }
        }
        if (split_subject(text, name, rest)) return shown(name) + ": takes no value here";
    }
    if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
        if (after_prefix(text, "Could not convert: ", rest)) {
            const std::size_t eq = rest.find(" = ");
            if (eq != std::string::npos && eq > 0 && rest.find(' ') == eq) {
                return rest.substr(0, eq) + " " + shown(rest.substr(eq + 3)) + ": not a valid value";
            }
        }
        if (split_subject(text, name, rest)) return shown(name) + ": takes no value";
    }
    // Any other parse error: CLI11's words, lower-case, as a last resort.
    return "the command line: " + log::lowercase_first(shown(text));
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
