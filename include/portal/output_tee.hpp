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
// Portal's own lines start on a line of their own: where the interpreter writes
// kLineMark to its stderr (python/_portal/run/lines.py: only when told that stderr is
// passed through here, kLineMarkVariable), the mark is taken out of the stream and
// replaced by a newline when the last byte passed on by that channel (the
// program's: a tqdm bar's `\r...` with no newline) was not one, by nothing
// otherwise; the log gets the same bytes.  A read that ends with the start of the
// mark keeps those bytes back until the next read says whether the mark follows.
//
// Differences a program can see: a file it writes to by stdout is a pipe to it
// (not seekable), a terminal is another one (ttyname).  Output a background
// grandchild writes after the program ended is lost (the channel closes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

// An escape sequence of the terminals' own form (a device control string, which
// a terminal that gets one ignores), never written by a program.
inline constexpr char kLineMark[] = "\x1bPportal;line\x1b\\";
inline constexpr const char* kLineMarkVariable = ::portal::contract::env::kLineMark;

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
    // Whether the child's fd (1 or 2) is passed through here.
    bool relays(int fd) const;
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
        char last = '\n';          // the last byte passed on (kLineMark)
        std::size_t marked = 0;    // bytes of kLineMark read and kept back
    };
    enum class Copied { Some, Nothing, Finished };
    // One read from the pipe, passed on to its destination and the log.
    Copied copy_once(Pipe& p);
    // `n` bytes read from the pipe, with kLineMark taken out, as they go on.
    std::string unmarked(Pipe& p, const char* buf, std::size_t n);
    // Passes `out` on to the destination and the log; false if the destination is gone.
    bool pass_on(Pipe& p, const std::string& out);
    int log_fd_ = -1;
    std::vector<Pipe> pipes_;
};

}  // namespace portal
