// output_tee.hpp: the program's output, kept for `portal logs`.
//
// What the program writes to stdout and stderr goes on to where it went before,
// and is also appended to the job's output.log.  Only a stream that is not a
// terminal is passed through a pipe: a program on a terminal keeps the terminal
// itself (isatty, its size, line buffering, Ctrl-C), and that stream is not kept.
// When stdout and stderr are the same file or pipe (2>&1), one pipe carries both,
// so that their order is kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace portal {

class OutputTee {
public:
    // Opens `log` for appending (0600).  Nothing is passed through when neither
    // stream can be kept (both on a terminal, or the log cannot be opened);
    // `kept()` says so.
    explicit OutputTee(const std::filesystem::path& log);
    ~OutputTee();
    OutputTee(const OutputTee&) = delete;
    OutputTee& operator=(const OutputTee&) = delete;

    bool kept() const { return !pipes_.empty(); }
    // In the child, before exec: the pipes become its stdout/stderr.
    void attach_child();
    // In the parent, after fork: it keeps only the reading ends.
    void attach_parent();
    // The reading ends to poll(2).
    std::vector<int> fds() const;
    // Copies what is ready on `fd` on; false once that pipe is finished (EOF, or
    // its destination closed: the pipe is closed too, so that the program gets
    // EPIPE as it would have).
    bool pump(int fd);
    // After the child ended: copies what is left without waiting for writers that
    // outlive it (a background grandchild).
    void drain();
    // The log's size now: where the next run's output starts in it.
    std::uint64_t log_size() const;

private:
    struct Pipe {
        int read_end = -1;
        int write_end = -1;
        std::vector<int> targets;  // the fds in the child: 1, 2 or both
        int destination = -1;      // where its bytes went before: our own 1 or 2
        bool open = true;
    };
    int log_fd_ = -1;
    std::vector<Pipe> pipes_;
};

}  // namespace portal
