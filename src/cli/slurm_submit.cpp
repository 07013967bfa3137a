// slurm_submit.cpp: see include/portal/slurm_submit.hpp.
#include "portal/slurm_submit.hpp"

#include <cctype>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include <sys/vfs.h>
#include <unistd.h>

#include "portal/installation.hpp"
#include "portal/job_view.hpp"
#include "portal/log.hpp"
#include "portal/size.hpp"
#include "portal/slurm.hpp"
#include "portal/slurm_status.hpp"
#include "portal/version.hpp"

namespace portal {

namespace {

constexpr int kSubmitted = 0;
constexpr int kRefused = 1;
constexpr const char* kSubject = "resume";
constexpr const char* kOutputPattern = "slurm-%j.out";  // in the job's directory; %j: the Slurm job id

// statfs(2) f_type values (linux/magic.h) of the filesystems that decide what we say.
constexpr long kTmpfsMagic = 0x01021994;
constexpr long kRamfsMagic = 0x858458f6;
const std::map<long, const char*> kLocalDisks = {
    {0xEF53, "ext4"}, {0x58465342, "xfs"}, {0x9123683E, "btrfs"}, {0x794c7630, "overlayfs"},
    {0xF2F52010, "f2fs"}, {0x2FC12FC1, "zfs"}};

// Where the store lives, in words, when the nodes of a partition may not see it:
// "tmpfs" (memory: never shared), "ext4 (a local disk)", "/tmp (node-local)".
struct StorePlace {
    bool memory = false;  // tmpfs, ramfs
    std::string local;    // non-empty: a local disk or /tmp, in words
};

StorePlace store_place(const std::string& home) {
    StorePlace place;
    struct statfs fs {};
    if (statfs(home.c_str(), &fs) == 0) {
        const long type = static_cast<long>(fs.f_type);
        if (type == kTmpfsMagic || type == kRamfsMagic) {
            place.memory = true;
            place.local = type == kTmpfsMagic ? "tmpfs (this machine's memory)" : "ramfs (this machine's memory)";
            return place;
        }
        if (const auto it = kLocalDisks.find(type); it != kLocalDisks.end()) {
            place.local = std::string(it->second) + " (a local disk)";
        }
    }
    if (home == "/tmp" || home.rfind("/tmp/", 0) == 0 || home.rfind("/var/tmp/", 0) == 0) {
        place.local = (place.local.empty() ? std::string() : place.local + " under ") + "/tmp (node-local)";
    }
    return place;
}

struct Partition {
    std::string name;
    int nodes = 0;       // 0: unknown
    std::string hosts;   // its Nodes= (a hostlist: node[1-4])
};

// This machine's short host name, as slurm.conf's NodeName usually is.
std::string short_host_name() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return {};
    const std::string text = name;
    return text.substr(0, text.find('.'));
}

// The partition a submission goes to (the named one, else the default one) and
// its size, from `scontrol show partition -o` (one line per partition).
std::optional<Partition> partition_of(const std::string& wanted) {
    const slurm::CommandResult r = slurm::run_command({"scontrol", "show", "partition", "-o"});
    if (r.status != 0) return std::nullopt;
    static const std::regex name("(?:^| )PartitionName=(\\S+)"), nodes("(?:^| )TotalNodes=([0-9]+)"),
        is_default("(?:^| )Default=YES");
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, name)) continue;
        Partition p{m[1].str(), 0, {}};
        if (wanted.empty() ? !std::regex_search(line, is_default) : p.name != wanted) continue;
        if (std::regex_search(line, m, nodes)) p.nodes = std::atoi(m[1].str().c_str());
        static const std::regex hosts("(?:^| )Nodes=(\\S+)");
        if (std::regex_search(line, m, hosts)) p.hosts = m[1].str();
        return p;
    }
    return std::nullopt;
}

// The batch script: every word quoted, run by /bin/sh on the node.
std::string batch_script(const std::vector<std::string>& resume, const std::string& home, const std::string& job) {
    std::string script = "#!/bin/sh\n"
                         "# portal " + std::string(kVersion) + ": portal resume " + job +
                         " --on slurm (docs/slurm.md); the job store must be the same path on the node.\n"
                         "export PORTAL_HOME=" + slurm::shell_quote(home) + "\nexec";
    for (const auto& word : resume) script += " " + slurm::shell_quote(word);
    return script + "\n";
}

// `path` as sbatch's filename patterns read it back: every '%' doubled.
std::string slurm_pattern_escaped(const std::string& path) {
    std::string out;
    for (const char c : path) {
        out += c;
        if (c == '%') out += '%';
    }
    return out;
}

// "123" from sbatch --parsable's "123" or "123;cluster".
std::optional<std::string> parsed_job_id(const std::string& out) {
    static const std::regex parsable("\\s*([0-9]+)(;\\S*)?\\s*");
    std::smatch m;
    if (std::regex_match(out, m, parsable)) return m[1].str();
    return std::nullopt;
}

}  // namespace

std::optional<OnSpec> parse_on(const std::string& text) {
    if (text == "local") return OnSpec{};
    if (text == "slurm") return OnSpec{true, {}};
    // slurm:PARTITION, PARTITION = [A-Za-z0-9][A-Za-z0-9_.-]* (never an option: -p), at
    // most kPartitionMax characters.  By hand: a regex match recurses per character
    // (a 50,000-character value overflowed the stack).
    const std::string prefix = "slurm:";
    if (text.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    const std::string partition = text.substr(prefix.size());
    if (partition.empty() || partition.size() > kPartitionMax) return std::nullopt;
    for (std::size_t i = 0; i < partition.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(partition[i]);
        const bool ok = std::isalnum(c) != 0 || (i > 0 && (c == '_' || c == '.' || c == '-'));
        if (!ok || c > 127) return std::nullopt;
    }
    return OnSpec{true, partition};
}

bool submits_to_slurm(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string value = args[i] == "--on" && i + 1 < args.size() ? args[i + 1]
                                  : args[i].rfind("--on=", 0) == 0          ? args[i].substr(5)
                                                                             : std::string();
        if (const auto on = parse_on(value); on && on->slurm) return true;
    }
    return false;
}

int submit_resume_to_slurm(const ResumeRequest& request, const OnSpec& on, const Job& job,
                           const nlohmann::json& /*record: read again under the lock*/) {
    const std::string where = "--on slurm" + (on.partition.empty() ? std::string() : ":" + on.partition);
    if (!slurm::installed("sbatch")) {
        log::say(kSubject, where + ": sbatch is not installed here (Debian: apt-get install slurm-client; "
                           "a cluster's login node has it): the job stays suspended (portal resume " + job.id + ")");
        return kRefused;
    }
    const std::string home = portal_home().string();
    const auto partition = partition_of(on.partition);
    const std::string partition_name = partition ? partition->name : on.partition;
    const StorePlace place = store_place(home);
    // This machine as the partition's one node sees its own disk; any other node
    // needs the store on a filesystem it mounts.
    const bool only_here = partition && partition->nodes == 1 && partition->hosts == short_host_name();
    if (!place.local.empty() && !only_here) {
        const std::string nodes = partition && partition->nodes > 0
                                      ? std::to_string(partition->nodes) + " nodes"
                                      : std::string("nodes unknown");
        const std::string problem = "the job store PORTAL_HOME=" + home + " is on " + place.local + ", which " +
                                    (partition_name.empty() ? std::string("the default partition")
                                                            : "partition " + partition_name) +
                                    " (" + nodes + ") may not see: every node must mount it at the same path "
                                    "(NFS, Lustre, GPFS, ...; docs/slurm.md)";
        if (place.memory) {
            log::say(kSubject, where + ": " + problem + "; the job stays suspended (portal resume " + job.id + ")");
            return kRefused;
        }
        log::say(kSubject, where + ": warning: " + problem + "; submitted anyway");
    }

    // sbatch reads --output as a filename pattern: a '%' of the store's path is
    // written "%%"; a backslash anywhere turns every pattern off (%j included), so
    // such a store is refused.
    if (job.dir.string().find('\\') != std::string::npos) {
        log::say(kSubject, where + ": the job store PORTAL_HOME=" + printable(home) +
                               " holds a backslash, which sbatch's --output takes as \"no %j here\": "
                               "the Slurm job's output file could not be named; use a store path without one "
                               "(the job stays suspended: portal resume " + job.id + ")");
        return kRefused;
    }
    std::vector<std::string> resume{self_executable(), "resume"};
    std::vector<std::string> sbatch{"sbatch", "--parsable", "--job-name=portal-" + job.id,
                                    "--output=" + slurm_pattern_escaped(job.dir.string()) + "/" + kOutputPattern,
                                    // A requeued Slurm job appends: the earlier start's lines stay.
                                    "--open-mode=append", "--chdir=" + job.dir.string()};
    if (!on.partition.empty()) sbatch.push_back("--partition=" + on.partition);
    if (!request.mem.empty()) {
        // Checked while parsing (main.cpp): a size; the node checks it has it.
        const std::uint64_t bytes = parse_mem_option(request.mem, 0);
        sbatch.push_back("--mem=" + std::to_string((bytes + kMiB - 1) / kMiB) + "M");
        resume.insert(resume.end(), {"--mem", request.mem});
    }
    // Slurm's gres picks the GPU model; the node's resume does not check the name
    // again (nvidia-smi names it otherwise: "NVIDIA A100-SXM4-80GB").
    if (!request.gpu.empty()) sbatch.push_back("--gres=gpu:" + request.gpu + ":1");
    if (!request.time.empty()) sbatch.push_back("--time=" + request.time);
    if (!request.account.empty()) sbatch.push_back("--account=" + request.account);
    if (!request.device_map.empty()) resume.insert(resume.end(), {"--device-map", request.device_map});
    for (const auto& p : request.policies) resume.insert(resume.end(), {"--policy", p});
    resume.insert(resume.end(), {"--", job.id});  // an operand, never read as an option

    // One submission per job: the check, sbatch and the record's note are one step
    // under the record's lock, so that concurrent `portal resume --on slurm` of one
    // job submit it once, and the others name that Slurm job.
    std::optional<std::string> slurm_job;
    std::string output;
    std::string refusal;
    try {
        job.modify_record([&](nlohmann::json& rec) {
            if (const auto previous = recorded_slurm_job(rec)) {
                const std::string state = slurm_job_state(*previous);
                if (slurm_job_active(state) &&
                    rec.value(slurm::kRecordField, nlohmann::json::object()).contains("submitted")) {
                    refusal = "job " + job.id + " is already submitted as Slurm job " + *previous + " (" + state +
                              "): one resume at a time (portal show " + job.id + "; scancel " + *previous +
                              " withdraws it)";
                    return;
                }
            }
            const slurm::CommandResult r = slurm::run_command(sbatch, batch_script(resume, home, job.id));
            if (r.status == slurm::kNotFound) {
                refusal = where + ": sbatch is not installed here (Debian: apt-get install slurm-client; "
                                  "a cluster's login node has it): the job stays suspended (portal resume " + job.id + ")";
                return;
            }
            slurm_job = r.status == 0 ? parsed_job_id(r.out) : std::nullopt;
            if (!slurm_job) {
                const std::string said = r.err.empty() ? printable(r.out) : printable(r.err);
                refusal = where + ": sbatch " + (r.timed_out ? std::string("did not answer in time")
                                                             : "failed (exit status " + std::to_string(r.status) + ")") +
                          (said.empty() ? std::string() : ": " + said) + "; the job stays suspended (portal resume " +
                          job.id + ")";
                return;
            }
            output = (job.dir / ("slurm-" + *slurm_job + ".out")).string();
            nlohmann::json slurm = nlohmann::json::object();
            slurm["job_id"] = *slurm_job;
            slurm["partition"] = partition_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(partition_name);
            slurm["output"] = output;
            slurm["submitted"] = utc_iso(std::time(nullptr));
            slurm["command"] = sbatch;
            // A requeue key stays: the job remains that batch job's too.
            const auto old = rec.find(slurm::kRecordField);
            if (old != rec.end() && old->is_object() && old->contains("requeue_key")) {
                slurm["requeue_key"] = (*old)["requeue_key"];
            }
            rec[slurm::kRecordField] = slurm;
        });
    } catch (const JobError& e) {
        if (!slurm_job) {
            log::say(kSubject, printable(e.what()) + ": nothing was submitted (portal show " + job.id + ")");
            return kRefused;
        }
        log::say(kSubject, "Slurm job " + *slurm_job + " submitted, but job " + job.id + "'s record could not note it: " +
                               printable(e.what()) + " (portal show will not follow it; squeue -j " + *slurm_job + ")");
    }
    if (!refusal.empty()) {
        log::say(kSubject, refusal);
        return kRefused;
    }
    std::cout << *slurm_job << std::endl;
    log::say(kSubject, "job " + job.id + " submitted as Slurm job " + *slurm_job +
                           (partition_name.empty() ? std::string() : " (partition " + partition_name + ")") +
                           "; its output: " + output + " (portal show " + job.id + ", portal logs -f " + job.id + ")");
    return kSubmitted;
}

}  // namespace portal
