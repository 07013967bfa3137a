// store_trust.hpp: the job store is used only once it is the user's own.
//
// The rule (docs/security.md, "The store"; python/_portal/store/trust.py holds the
// same one): PORTAL_HOME and every directory and file under it that Portal reads
// or writes is owned by the effective uid, not group/other-writable, and not a
// symlink (the `checkpoint` link Portal made itself excepted).  Each existing
// parent of PORTAL_HOME up to / is owned by the user or root; a parent that
// others can write into must be sticky (/tmp), and then PORTAL_HOME itself must
// be private (no group/other permission at all): the ssh rule, a store of yours
// and private is fine even inside /tmp.  Missing levels are created 0700 whatever
// the umask, missing parents included.
//
// Every check is made on an open descriptor (fstat), never by path then open:
// directories are opened O_DIRECTORY|O_NOFOLLOW, files O_NOFOLLOW|O_NONBLOCK with
// an S_ISREG check (a planted FIFO or device is refused, never waited on).  Once
// PORTAL_HOME and the directories below it are checked, no other user can change
// a name in them, so a path under them names what was checked.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "portal/job_store.hpp"

namespace portal {

// Why the store (or a directory or file in it) is refused.  what() is
// "<path>: <why>; it cannot be trusted (<what to do>)": print it as
// log::say("store", e.what()) -> `portal: store: <path>: ...`.
struct StoreUntrusted : JobError {
    using JobError::JobError;
};

enum class StoreUse {
    Read,    // list, show, ...: a missing store is an empty one; nothing is created
    Create,  // a run: missing levels are created 0700, and PORTAL_HOME made 0700
};

// An open, checked directory (O_DIRECTORY|O_NOFOLLOW, fstat'ed); closes on destruction.
class CheckedDir {
public:
    CheckedDir() = default;
    CheckedDir(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
    CheckedDir(CheckedDir&& other) noexcept;
    CheckedDir& operator=(CheckedDir&& other) noexcept;
    CheckedDir(const CheckedDir&) = delete;
    CheckedDir& operator=(const CheckedDir&) = delete;
    ~CheckedDir();

    const std::filesystem::path& path() const { return path_; }
    int fd() const { return fd_; }
    bool exists() const { return fd_ >= 0; }  // false: a missing store under StoreUse::Read

private:
    std::filesystem::path path_;
    int fd_ = -1;
};

// Checks the store at `home` (made absolute) by the rule above, creating missing
// levels under StoreUse::Create.  Throws StoreUntrusted.  The launcher calls it
// before anything is written: trust_store(portal_home(), StoreUse::Create).
CheckedDir trust_store(const std::filesystem::path& home, StoreUse use);

// The same check on a directory inside a checked store (jobs/, jobs/<JOB>/):
// opened O_DIRECTORY|O_NOFOLLOW, owned by us, not group/other-writable.
// Throws StoreUntrusted; a missing one throws JobError.
CheckedDir open_private_dir(const std::filesystem::path& path);

// make_private_dir (job_store.hpp) with the check: creates `path` 0700 whatever
// the umask, or opens the existing one, and checks it as open_private_dir.
CheckedDir make_checked_dir(const std::filesystem::path& path);

// Why the open descriptor `fd` (of `path`) is not ours to trust, or "" when it is:
// "owned by uid N", "writable by group or others (mode 0777)", "not a regular file".
std::string distrust_reason(int fd, bool want_directory);

// Opens a regular file of the store relative to its directory (opened and checked
// as open_private_dir first): O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC
// plus `flags` (O_RDONLY, O_RDWR|O_CREAT, O_WRONLY|O_APPEND|O_CREAT...), then
// fstat: regular, owned by us, not group/other-writable; O_NONBLOCK is cleared
// after.  New files are 0600 whatever the umask.  Returns the descriptor
// (close-on-exec); -1 with errno ENOENT when it does not exist (and no O_CREAT).
// Throws StoreUntrusted for a symlink, FIFO, device or another user's file.
int open_store_file(const std::filesystem::path& path, int flags);

// Reads a whole file of the store through open_store_file, refusing one larger
// than `max_bytes`.  Throws StoreUntrusted / JobError with the reason
// ("larger than 1 MiB", "a symlink", "a FIFO, not a regular file").
std::string read_store_file(const std::filesystem::path& path, std::size_t max_bytes);

// Why `path`, which Portal runs code from without having made it (the
// interpreter a job recorded, its virtual environment), could have been
// replaced or changed by another user since: "" when it could not.  `path`
// (looked at without following a final symlink) and each directory above it up
// to and including `inner_root` (when given: a venv's sys.prefix) are owned by
// you or root and not writable by group or others; the directories above that,
// up to /, by the rule of the store's parents (owned by you or root; one that
// others can write into is sticky, as /tmp).  The answer names the path:
// "/tmp/venv is owned by uid 1001, neither you nor root".
std::string others_could_change(const std::filesystem::path& path,
                                const std::filesystem::path& inner_root = {});

// The one atomic write of the C++ side, relative to the checked directory of
// `path` (open_private_dir): `<path>.tmp<pid>` opened
// O_NOFOLLOW|O_CREAT|O_EXCL, fchmod 0600, written, fsync'ed when `durable`,
// renamed over `path`, and the directory fsync'ed when `durable`.  On any failure
// (a full disk) the temporary file is removed and `path` is left as it was.
void write_file_atomically(const std::filesystem::path& path, const std::string& text, bool durable);

// The suffix of write_file_atomically's temporary files ("job.json.tmp1234"),
// which the next command under the job's lock removes.
bool is_record_temp(const std::string& name);

}  // namespace portal
