// slurm.cpp: see include/portal/slurm.hpp.
#include "portal/slurm.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <algorithm>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "portal/exit_status.hpp"
#include "portal/log.hpp"

extern char** environ;

namespace portal::slurm {

namespace {

constexpr const char* kPreempted = "preempted";
constexpr int kPollMillis = 200;
constexpr std::size_t kReadChunk = 1 << 16;

std::string env_or_empty(const char* name) {
    const char* value = std::getenv(name);
    return value ? value : "";
}

struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) close(fd);
        fd = -1;
    }
};

// Reads what is ready on `fd` into `out`; false at EOF or on an error.
bool drain(int fd, std::string& out) {
    char buf[kReadChunk];
    const ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (got <= 0) return false;
    out.append(buf, static_cast<std::size_t>(got));
    return true;
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input, int timeout_seconds) {
    CommandResult result;
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0) return result;
    Fd in_r{in[0]}, in_w{in[1]};
    if (pipe2(out, O_CLOEXEC) != 0) return result;
    Fd out_r{out[0]}, out_w{out[1]};
    if (pipe2(err, O_CLOEXEC) != 0) return result;
    Fd err_r{err[0]}, err_w{err[1]};

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_r.fd, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out_w.fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_w.fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    in_r.reset();
    out_w.reset();
    err_w.reset();
    if (spawned != 0) {
        result.status = kNotFound;
        return result;
    }
    // The input is small (a batch script): written whole, then EOF.  A client that
    // does not read it gets EPIPE, not us a SIGPIPE (MSG_NOSIGNAL is for sockets).
    struct sigaction ignore {}, old {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old);
    std::size_t written = 0;
    while (written < input.size()) {
        const ssize_t n = write(in_w.fd, input.data() + written, input.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        written += static_cast<std::size_t>(n);
    }
    sigaction(SIGPIPE, &old, nullptr);
    in_w.reset();

    const std::time_t deadline = std::time(nullptr) + timeout_seconds;
    bool out_open = true, err_open = true;
    while (out_open || err_open) {
        if (std::time(nullptr) > deadline) {
            kill(pid, SIGKILL);
            result.timed_out = true;
            break;
        }
        pollfd fds[2] = {{out_open ? out_r.fd : -1, POLLIN, 0}, {err_open ? err_r.fd : -1, POLLIN, 0}};
        const int ready = poll(fds, 2, kPollMillis);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) out_open = drain(out_r.fd, result.out);
        if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) err_open = drain(err_r.fd, result.err);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.status = WIFEXITED(status) && !result.timed_out ? WEXITSTATUS(status) : -1;
    while (!result.err.empty() && (result.err.back() == '\n' || result.err.back() == '\r')) result.err.pop_back();
    return result;
}

bool installed(const std::string& name) {
    const std::string path = env_or_empty("PATH");
    std::size_t begin = 0;
    while (begin <= path.size()) {
        const std::size_t end = std::min(path.find(':', begin), path.size());
        const std::string dir = end > begin ? path.substr(begin, end - begin) : ".";
        if (access((dir + "/" + name).c_str(), X_OK) == 0) return true;
        begin = end + 1;
    }
    return false;
}

std::optional<std::string> requeue_key() {
    const std::string job_id = env_or_empty("SLURM_JOB_ID");
    if (job_id.empty()) return std::nullopt;
    const std::string cluster = env_or_empty("SLURM_CLUSTER_NAME");
    const std::string array_job = env_or_empty("SLURM_ARRAY_JOB_ID");
    const std::string array_task = env_or_empty("SLURM_ARRAY_TASK_ID");
    // An array task keeps its ARRAYJOB_TASK name across requeues; SLURM_JOB_ID
    // too, but the pair is what squeue shows and users know.
    const std::string id = !array_job.empty() && !array_task.empty() ? array_job + "_" + array_task : job_id;
    return (cluster.empty() ? std::string("slurm") : cluster) + "/" + id;
}

std::optional<Job> find_requeued_job(const std::filesystem::path& home, const std::string& key) {
    std::optional<Job> found;
    std::string found_created;
    for (const Job& job : list_jobs(home)) {
        nlohmann::json record;
        try {
            record = job.read_record();
        } catch (const std::exception&) {
            continue;  // refused or unreadable: `portal show` says why; never ours to resume
        }
        const auto slurm = record.find(kRecordField);
        if (slurm == record.end() || !slurm->is_object()) continue;
        const auto k = slurm->find("requeue_key");
        if (k == slurm->end() || !k->is_string() || k->get<std::string>() != key) continue;
        const std::string created = record.value("created", "");
        if (!found || created > found_created) {
            found = job;
            found_created = created;
        }
    }
    return found;
}

bool suspended_by_preemption(const nlohmann::json& record) {
    const auto says_preempted = [](const nlohmann::json& object) {
        if (!object.is_object()) return false;
        for (const char* key : {"reason", "error"}) {
            const auto it = object.find(key);
            if (it != object.end() && it->is_string() && it->get<std::string>().rfind(kPreempted, 0) == 0) {
                return true;
            }
        }
        return false;
    };
    if (says_preempted(record)) return true;
    const auto runs = record.find("runs");
    return runs != record.end() && runs->is_array() && !runs->empty() && says_preempted(runs->back());
}

void requeue_if_preempted(const Job& job, int exit_code) {
    if (exit_code != kSuspendedExit) return;
    const std::string slurm_job = env_or_empty("SLURM_JOB_ID");
    if (slurm_job.empty()) return;
    nlohmann::json record;
    try {
        record = job.read_record();
    } catch (const std::exception& e) {
        log::say("requeue", "job " + job.id + ": " + e.what() + ": Slurm job " + slurm_job + " is not requeued");
        return;
    }
    if (!suspended_by_preemption(record)) {
        // An out-of-memory suspension would run out of memory again on the same
        // node: it waits for `portal resume --mem ...` instead.
        log::say("requeue", "job " + job.id + " is suspended (not preempted): Slurm job " + slurm_job +
                                " ends; resume it with portal resume " + job.id + " --on slurm --mem SIZE");
        return;
    }
    const CommandResult r = run_command({"scontrol", "requeue", slurm_job});
    if (r.status == 0) {
        log::say("requeue", "job " + job.id + " preempted and suspended: Slurm job " + slurm_job +
                                " requeued, it resumes the job when it starts again");
    } else if (r.status == kNotFound) {
        log::say("requeue", "job " + job.id + " preempted and suspended, but scontrol is not installed: Slurm job " +
                                slurm_job + " is not requeued (portal resume " + job.id + ")");
    } else {
        log::say("requeue", "scontrol requeue " + slurm_job + " failed" +
                                (r.err.empty() ? std::string() : ": " + r.err) + " (was it submitted with "
                                "--no-requeue?); job " + job.id + " stays suspended (portal resume " + job.id + ")");
    }
}

std::string shell_quote(const std::string& text) {
    std::string out = "'";
    for (const char c : text) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out += c;
        }
    }
    return out + "'";
}

}  // namespace portal::slurm
