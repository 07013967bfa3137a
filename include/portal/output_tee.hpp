// output_tee.hpp: the program's output, kept for `portal logs`.
//
// What the program writes to stdout and stderr goes on to where it went before,
// and is also appended to the job's output.log.  A stream on a file or pipe is
// passed through a pipe; a stream on a terminal through a pseudo-terminal with
// the real one's modes and size (kept in step on SIGWINCH) and output processing
// off, so that the program still sees a terminal and the real one gets the same
// bytes.  stdin is left alone: typing, Ctrl-C and job control reach the program
// from the real terminal as before.  When stdout and stderr are the same file,
// pipe or terminal (2>&1), one channel carries both, so that their order is kept.
//
// Differences a program can see: a file it writes to by stdout is a pipe to it
// (not seekable), a terminal is another one (ttyname).  Output a background
// grandchild writes after the program ended is lost (the channel closes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace portal {

class OutputTee {
public:
    // Opens `log` for appending (0600).  Nothing is passed through when neither
    // stream is open or the log cannot be opened; `kept()` says so.
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
    enum class Copied { Some, Nothing, Finished };
    // One read from the pipe, passed on to its destination and the log.
    Copied copy_once(Pipe& p);
    int log_fd_ = -1;
    std::vector<Pipe> pipes_;
};

}  // namespace portal
