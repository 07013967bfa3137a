// job_view.cpp: see include/portal/job_view.hpp.
#include "portal/job_view.hpp"

#include <algorithm>
#include <cstdio>

#include "portal/expiry.hpp"
#include "portal/job_lock.hpp"
#include "portal/job_recovery.hpp"
#include "portal/store_trust.hpp"
#include "portal/size.hpp"
#include "portal/tripwire.hpp"

namespace fs = std::filesystem;

namespace portal {

namespace {

// The reason, short, for a table cell (the whole message is for `portal show`):
// "job.lock: a symlink" from "job X: <dir>/job.lock: a symlink; it cannot be
// trusted (...)"; "field 'state' is null, ..." from "job X: <dir>/job.json: field
// 'state' is null, ...".  A refusal keeps the file's name; a damaged record's
// reason is about job.json already.
std::string short_reason(const std::string& what, const Job& job, bool refused) {
    std::string text = what;
    std::vector<std::string> prefixes{"job " + job.id + ": "};
    if (!refused) prefixes.push_back(job.record_path().string() + ": ");
    prefixes.push_back(job.dir.string() + "/");
    prefixes.push_back(job.dir.string() + ": ");
    for (const std::string& prefix : prefixes) {
        if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
    }
    const auto cut = text.find("; it cannot be trusted");
    if (cut != std::string::npos) text = text.substr(0, cut);
    constexpr std::size_t kReasonMax = 100;
    if (text.size() <= kReasonMax) return text;
    std::size_t end = kReasonMax;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;  // whole UTF-8 characters
    return text.substr(0, end) + "...";
}

// A view that shows only why the job cannot be shown.
JobView not_shown(JobView view, const std::string& state, const std::string& problem, const std::string& what) {
    view.state = state;
    view.record = nlohmann::json::object();
    view.problem = problem;
    view.reason = short_reason(what, view.job, state == "refused");
    return view;
}

}  // namespace

JobView view_job(const Job& job) {
    JobView view{job, nlohmann::json::object(), "unreadable", std::nullopt, ""};
    try {
        open_private_dir(job.dir);  // another user's, group/other-writable, a symlink: refused
        view.holder = lock_holder(job);
        view.record = job.read_record();
        view.state = effective_state(view.record, view.holder.has_value());
    } catch (const StoreUntrusted& e) {
        return not_shown(std::move(view), "refused", "job " + job.id + ": " + e.what(), e.what());
    } catch (const std::exception& e) {
        // read_record names the job itself; the other steps do not.
        const std::string what = e.what();
        const std::string named = what.rfind("job " + job.id + ": ", 0) == 0 ? what : "job " + job.id + ": " + what;
        return not_shown(std::move(view), "unreadable", named, what);
    }
    if (is_recovered(view.record)) {
        view.recovered = true;
    } else if (!view.holder) {
        if (const auto recovery = recovered_checkpoint(job, view.record, view.state)) {
            // Shown as what it is; the record itself is repaired under the lock
            // by the next command that takes it (repair_job, portal resume).
            apply_recovery(view.record, *recovery);
            view.state = "suspended";
            view.recovered = true;
        }
    }
    return view;
}

std::string state_text(const JobView& view) {
    if (!view.reason.empty()) return view.state + " (" + view.reason + ")";
    if (view.recovered && view.state == "suspended") return "suspended (recovered from its checkpoint)";
    return view.state;
}

std::string printable(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    static const char hex[] = "0123456789abcdef";
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                        static_cast<unsigned char>(text[i + 1]) <= 0x9f;  // U+0080..U+009F in UTF-8
        if (c < 0x20 || c == 0x7f) {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        } else if (c1) {
            const auto d = static_cast<unsigned char>(text[++i]);
            out += "\\xc2\\x";
            out += hex[d >> 4];
            out += hex[d & 0xf];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::vector<JobView> view_jobs(const fs::path& home) {
    std::vector<JobView> views;
    for (const Job& job : list_jobs(home)) {
        views.push_back(view_job(job));
    }
    // ISO times sort as text; an unreadable record ("") goes last.
    std::stable_sort(views.begin(), views.end(), [](const JobView& a, const JobView& b) {
        const std::string ca = a.record.value("created", ""), cb = b.record.value("created", "");
        return ca != cb ? ca > cb : a.job.id > b.job.id;
    });
    return views;
}

nlohmann::json view_json(const JobView& view) {
    nlohmann::json out = view.record;
    out["id"] = view.job.id;
    const std::string recorded = view.record.value("state", "");
    if (recorded != view.state) {
        out["recorded_state"] = recorded;
    }
    out["state"] = view.state;
    out["held_by"] = view.holder ? nlohmann::json(*view.holder) : nlohmann::json(nullptr);
    out["dir"] = view.job.dir.string();
    if (!view.problem.empty()) {
        out["problem"] = view.problem;
    }
    if (view.recovered) {
        out["recovered"] = true;
    }
    return out;
}

std::optional<std::uint64_t> json_uint(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number_integer()) return std::nullopt;
    if (it->is_number_unsigned()) return it->get<std::uint64_t>();
    const auto value = it->get<std::int64_t>();
    return value >= 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(value)) : std::nullopt;
}

bool is_ended(const std::string& state) {
    return state == "completed" || state == "failed" || state == "expired" || state == "lost";
}

std::string short_time(const nlohmann::json& record, const char* key) {
    const auto it = record.find(key);
    if (it == record.end() || !it->is_string()) return "-";
    const std::time_t t = parse_utc_iso(it->get<std::string>());
    if (t < 0) return "-";
    std::tm tm{};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
    return text;
}

std::string format_duration(std::time_t seconds) {
    if (seconds < 0) seconds = 0;
    const long long s = static_cast<long long>(seconds);
    char text[32];
    if (s >= 86400) {
        std::snprintf(text, sizeof text, "%lldd %lldh", s / 86400, s % 86400 / 3600);
    } else if (s >= 3600) {
        std::snprintf(text, sizeof text, "%lldh %02lldm", s / 3600, s % 3600 / 60);
    } else if (s >= 60) {
        std::snprintf(text, sizeof text, "%lldm", s / 60);
    } else {
        std::snprintf(text, sizeof text, "%llds", s);
    }
    return text;
}

std::string expires_in(const nlohmann::json& record, const std::string& state, std::time_t now) {
    if (state != "suspended") return "-";
    const std::time_t due = expires_at(record);
    if (due < 0) return "-";
    return due <= now ? "due" : format_duration(due - now);
}

std::string loop_and_iteration(const nlohmann::json& record) {
    const auto loop = record.find("loop");
    if (loop == record.end() || !loop->is_string()) return "-";
    std::string text = fs::path(loop->get<std::string>()).filename().string();
    const auto it = record.find("iteration");
    if (it != record.end() && it->is_number_integer()) {
        text += " (" + std::to_string(it->get<long long>()) + ")";
    }
    return text;
}

std::string program_text(const nlohmann::json& record, bool full_path) {
    // Each field read only if it has the type Portal writes (a planted record may not).
    const auto text_at = [](const nlohmann::json& object, const char* key, const std::string& otherwise) {
        const auto it = object.is_object() ? object.find(key) : object.end();
        return it != object.end() && it->is_string() ? it->get<std::string>() : otherwise;
    };
    const auto program_it = record.find("program");
    const nlohmann::json program = program_it != record.end() && program_it->is_object() ? *program_it
                                                                                         : nlohmann::json::object();
    const std::string kind = text_at(program, "kind", "");
    std::string target = text_at(program, "target", text_at(record, "script", "?"));
    std::string text;
    if (kind == "module") {
        text = "-m " + target;
    } else if (kind == "command") {
        text = "-c '" + target + "'";
    } else {
        text = full_path ? target : fs::path(target).filename().string();
    }
    const auto args = record.find("args");
    if (args != record.end() && args->is_array()) {
        for (const auto& arg : *args) {
            if (arg.is_string()) text += " " + arg.get<std::string>();
        }
    }
    return text;
}

std::uint64_t suggested_mem_gib(const nlohmann::json& record) {
    // Recorded by the suspension itself, when it does: exactly what it reported.
    if (const auto suggested = json_uint(record, "suggested_mem_gib")) {
        return *suggested;
    }
    std::uint64_t had = 0;
    const auto runs = record.find("runs");
    if (runs != record.end() && runs->is_array() && !runs->empty() && runs->back().is_object()) {
        had = json_uint(runs->back(), "mem").value_or(0);
    }
    // The program ran under the memory tripwire's cap for that memory, and the
    // suspension report suggests twice that cap (python/_portal/rescue/suspend.py).
    had = tripwire::cap_for(had != 0 ? had : tripwire::machine_memory());
    const std::uint64_t gib = std::uint64_t(1) << 30;
    return std::max<std::uint64_t>(2, (2 * had + gib - 1) / gib);
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> width;
    for (const auto& row : rows) {
        if (width.size() < row.size()) width.resize(row.size(), 0);
        for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            line += row[i];
            if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
        }
        out += line + "\n";
    }
    return out;
}

void expire_opportunistically() {
    try {
        if (!trust_store(portal_home(), StoreUse::Read).exists()) return;
        expire_due_jobs(portal_home(), std::time(nullptr));
    } catch (const std::exception&) {
        // A store that cannot be read is reported by the command itself.
    }
}

}  // namespace portal
