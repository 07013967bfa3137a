// show.cpp: see include/portal/show.hpp.
#include "portal/show.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "portal/interpreter_probe.hpp"
#include "portal/log.hpp"
#include "portal/size.hpp"
#include "portal/slurm.hpp"
#include "portal/slurm_status.hpp"
#include "portal/tripwire.hpp"

namespace portal {

namespace {

// Every value shown goes through printable(): a record's text may hold escapes.
std::string text_of(const nlohmann::json& value) {
    if (value.is_string()) return printable(value.get<std::string>());
    if (value.is_null()) return "-";
    return printable(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string field(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() ? "-" : text_of(*it);
}

std::string words(const nlohmann::json& list) {
    std::string out;
    if (!list.is_array()) return text_of(list);
    for (const auto& w : list) out += (out.empty() ? "" : " ") + text_of(w);
    return out;
}

std::string size_of(const nlohmann::json& object) {
    const auto bytes = json_uint(object, "checkpoint_bytes");
    return bytes ? format_size(*bytes) : "-";
}

// A checkpoint transfer recorded by the runtime ("checkpoint_write" at a suspension,
// "checkpoint_read" at a resume: {bytes, seconds}) as "5.0 GiB in 6.1 s (840.0 MiB/s)";
// empty when absent or malformed.
std::string transfer_of(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_object()) return "";
    const auto bytes = json_uint(*it, "bytes");
    const auto seconds = it->find("seconds");
    if (!bytes || seconds == it->end() || !seconds->is_number() || seconds->get<double>() < 0) return "";
    const double s = seconds->get<double>();
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(1);
    out << format_size(*bytes) << " in " << s << " s";
    if (s > 0) out << " (" << format_size(static_cast<std::uint64_t>(static_cast<double>(*bytes) / s)) << "/s)";
    return out.str();
}

// Where a suspension happened and where it continues, from a record or a run entry.
void describe_suspension(std::ostream& out, const nlohmann::json& s, const std::string& indent) {
    out << indent << "error       " << field(s, "error");
    if (s.contains("error_at") && s["error_at"].is_string()) out << " at " << text_of(s["error_at"]);
    out << "\n" << indent << "loop        " << field(s, "loop");
    if (s.contains("iteration") && s["iteration"].is_number_integer()) {
        out << ", iteration " << s["iteration"].get<long long>() << " (0-based; runs again from its start)";
    }
    out << "\n";
    if (s.contains("will_differ") && s["will_differ"].is_array()) {
        for (const auto& item : s["will_differ"]) {
            if (item.is_string()) out << indent << "will differ " << item.get<std::string>() << "\n";
        }
    }
}

// The Slurm job the record follows (a `portal resume --on slurm` submission, or
// the batch job of portal-run --requeue) and its state now, as squeue/sacct say.
void describe_slurm(std::ostream& out, const nlohmann::json& r) {
    const auto slurm_job = recorded_slurm_job(r);
    if (!slurm_job) return;
    const nlohmann::json& s = r[slurm::kRecordField];
    out << "slurm       job " << *slurm_job;
    if (s.contains("partition") && s["partition"].is_string()) out << " on partition " << text_of(s["partition"]);
    if (s.contains("submitted")) out << ", submitted " << short_time(s, "submitted");
    if (s.contains("requeue_key")) {
        out << " (portal-run --requeue";
        if (s.contains("restart_count") && s["restart_count"].is_number_integer()) {
            out << ", started " << s["restart_count"].get<long long>() + 1 << " time"
                << (s["restart_count"].get<long long>() == 0 ? "" : "s");
        }
        out << ")";
    }
    out << ": " << printable(slurm_job_state(*slurm_job)) << "\n";
    if (s.contains("output") && s["output"].is_string()) {
        out << "slurm out   " << text_of(s["output"]) << "\n";
    }
}

}  // namespace

std::string resume_command(const JobView& view) {
    // A GPU's memory ran short (python/_portal/rescue/hint.py): a larger GPU, not --mem.
    const auto gpu = view.record.find("suggested_gpu");
    if (gpu != view.record.end() && gpu->is_boolean() && gpu->get<bool>()) {
        return "portal resume " + printable(view.job.id) + " --gpu MODEL (a GPU with more memory, e.g. A100)";
    }
    const std::uint64_t gib = suggested_mem_gib(view.record);
    const std::uint64_t machine = tripwire::machine_memory();
    std::string there;
    if (machine != 0 && gib * (std::uint64_t(1) << 30) > machine) {
        // `portal resume --mem` here refuses more than this machine has: said.
        there = " (this machine has " + format_size(machine) + ": on another one, or with --on slurm)";
    }
    // In GiB, written as the suspension report writes it (python/_portal/rescue/hint.py).
    return "portal resume " + printable(view.job.id) + " --mem " + std::to_string(gib) + "G" + there;
}

std::string show_text(const JobView& view, std::time_t now) {
    const nlohmann::json& r = view.record;
    std::ostringstream out;
    out << "job         " << printable(view.job.id) << "\n";
    out << "state       " << state_text(view);
    if (view.state == "lost") {
        out << " (recorded as running, but no process holds it: its supervisor was killed or the "
               "machine restarted)";
    } else if (view.state == "running" && view.holder) {
        out << " (" << printable(*view.holder) << ")";
    } else if (view.holder) {
        out << " (in use by " << printable(*view.holder) << ")";
    }
    out << "\n";
    out << "program     " << printable(program_text(r, true)) << "\n";
    out << "cwd         " << field(r, "cwd") << "\n";
    if (const auto python = from_record(r)) {
        out << "python      " << printable(describe(*python)) << "\n";
    }
    std::string policies;
    const nlohmann::json recorded_policies = r.value("policies", nlohmann::json::object());
    for (const auto& [key, value] : recorded_policies.items()) {
        policies += (policies.empty() ? "" : " ") + printable(key) + "=" + text_of(value);
    }
    out << "policies    " << (policies.empty() ? "(defaults)" : policies) << "\n";
    out << "created     " << short_time(r, "created") << "\n";
    out << "updated     " << short_time(r, "updated") << "\n";
    out << "directory   " << printable(view.job.dir.string()) << "\n";
    describe_slurm(out, r);

    if (view.state == "suspended") {
        out << "suspended   " << short_time(r, "suspended_at") << "\n";
        describe_suspension(out, r, "");
        out << "checkpoint  " << size_of(r) << " in " << printable(view.job.checkpoint_path().string()) << "\n";
        if (const std::string written = transfer_of(r, "checkpoint_write"); !written.empty()) {
            out << "written     " << written << "\n";
        }
        const std::string left = expires_in(r, view.state, now);
        out << "expires     " << short_time(r, "expires_at")
            << (left == "due" ? " (due: deleted by the next portal command)" : " (" + left + " left)") << "\n";
        out << "resume      " << resume_command(view) << "\n";
    } else if (view.state == "expired") {
        describe_suspension(out, r, "");
        out << "expired     " << short_time(r, "expired_at")
            << " (its checkpoint was kept 3 days and is deleted; nothing to resume)\n";
    } else if (view.state == "completed" || view.state == "failed") {
        out << "ended       " << short_time(r, "ended") << ", exit status " << field(r, "exit_status") << "\n";
    }

    // --policy oom.action=skip: the items dropped (python/_portal/rescue/skip.py).
    const nlohmann::json skipped = r.value("skipped", nlohmann::json::array());
    if (skipped.is_array() && !skipped.empty()) {
        // The record lists the last items only; its count says how many there were.
        const std::uint64_t count = std::max<std::uint64_t>(json_uint(r, "skipped_count").value_or(0), skipped.size());
        out << "skipped     " << count << " item" << (count == 1 ? "" : "s");
        if (count > skipped.size()) out << " (the last " << skipped.size() << " listed)";
        out << "\n";
        for (const auto& item : skipped) {
            if (!item.is_object()) continue;
            out << "  " << field(item, "loop") << ", "
                << (item.contains("iteration_text") && item["iteration_text"].is_string()
                        ? text_of(item["iteration_text"]) : "iteration " + field(item, "iteration"))
                << ": " << field(item, "error");
            if (item.contains("error_at") && item["error_at"].is_string()) out << " at " << text_of(item["error_at"]);
            out << " (" << short_time(item, "at") << ")\n";
        }
    }

    if (const std::string read = transfer_of(r, "checkpoint_read"); !read.empty()) {
        out << "restored    " << read << " (the last resume's checkpoint, verified and loaded)\n";
    }
    const nlohmann::json runs = r.value("runs", nlohmann::json::array());
    out << "runs        " << runs.size() << "\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const nlohmann::json& run = runs[i];
        out << "  " << i + 1 << ". " << field(run, "kind") << ", " << short_time(run, "started");
        if (run.contains("ended")) out << " to " << short_time(run, "ended");
        out << ": " << (run.contains("outcome") ? field(run, "outcome") : std::string("did not end"));
        if (run.contains("exit_status")) out << " (exit status " << field(run, "exit_status") << ")";
        out << "\n     command     " << words(run.value("command", nlohmann::json::array())) << "\n";
        if (run.contains("reason")) out << "     reason      " << field(run, "reason") << "\n";
        if (run.value("outcome", "") == "suspended" || run.value("outcome", "") == "retried") {
            describe_suspension(out, run, "     ");
            out << "     checkpoint  " << size_of(run) << "\n";
        }
        if (!run.value("output_kept", true)) {
            out << "     output      went to a terminal, not kept\n";
        }
    }
    return out.str();
}

int portal_show(const ShowRequest& request) {
    JobView view;
    try {
        view = view_job(find_job(portal_home(), request.job));
    } catch (const JobError& e) {
        log::say("show", printable(e.what()));
        return kCliRefused;
    }
    if (!view.problem.empty()) {
        log::say("show", printable(view.problem) +
                             (view.state == "unreadable" ? " (portal rm " + printable(view.job.id) + " deletes it)" : ""));
        return kCliRefused;
    }
    if (request.json) {
        nlohmann::json out = view_json(view);
        if (const auto slurm_job = recorded_slurm_job(view.record)) {
            out[slurm::kRecordField]["state"] = slurm_job_state(*slurm_job);  // now, not recorded
        }
        std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
        std::cout << show_text(view, std::time(nullptr));
    }
    return kCliOk;
}

}  // namespace portal
