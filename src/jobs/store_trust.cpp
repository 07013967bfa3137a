// store_trust.cpp: see include/portal/store_trust.hpp.
#include "portal/store_trust.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace portal {

namespace {

constexpr mode_t kPrivateDirMode = 0700;
constexpr mode_t kPrivateFileMode = 0600;
constexpr mode_t kOthersWrite = S_IWGRP | S_IWOTH;
constexpr mode_t kOthersAny = S_IRWXG | S_IRWXO;
constexpr uid_t kRootUid = 0;

std::string octal_mode(mode_t mode) {
    char text[16];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

[[noreturn]] void refuse(const fs::path& path, const std::string& why, const std::string& fix) {
    throw StoreUntrusted(path.string() + ": " + why + "; it cannot be trusted (" + fix + ")");
}

std::string fix_for_home() { return "set PORTAL_HOME to a directory of yours"; }

// What to do about a refused descriptor, by why it was refused.
std::string fix_for(const fs::path& path, const std::string& why, bool directory) {
    if (why.rfind("owned by", 0) == 0) return "it is not yours: " + fix_for_home();
    if (why.rfind("writable", 0) == 0) {
        return directory ? "chmod 700 " + path.string() : "chmod 600 " + path.string();
    }
    return "Portal makes no such thing there: remove it";
}

// The file type in words, for a refusal.
std::string type_name(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISLNK(mode)) return "a symlink";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISREG(mode)) return "a file";
    return "not a regular file";
}

// Refuses the symlink that made an O_NOFOLLOW open fail (ELOOP, or ENOTDIR for
// O_DIRECTORY on a link to a file).
[[noreturn]] void refuse_open_failure(const fs::path& path, int err, bool directory) {
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        refuse(path, "a symlink", "Portal makes no such link there: remove it, or " + fix_for_home());
    }
    if (err == ENOTDIR || (err == ENXIO && !directory)) {
        const std::string what = lstat(path.c_str(), &st) == 0 ? type_name(st.st_mode) : "not what Portal made";
        refuse(path, what + (directory ? ", not a directory" : ", not a regular file"),
               "Portal makes no such thing there: remove it");
    }
    throw JobError("cannot open " + path.string() + ": " + std::strerror(err));
}

fs::path absolute_clean(const fs::path& path) {
    std::error_code ec;
    fs::path abs = fs::absolute(path, ec).lexically_normal();
    if (ec) abs = path.lexically_normal();
    if (abs.has_relative_path() && abs.filename().empty()) abs = abs.parent_path();  // "a/b/" -> "a/b"
    return abs;
}

// The rule for a directory above what is trusted: "" when it is owned by us or
// root and, if others can write into it, sticky; else why not ("is owned by uid
// N, neither you nor root, who could replace it", "is writable by others (mode
// 0777) and not sticky, so another user could replace it").
std::string parent_problem(const struct stat& st) {
    if (st.st_uid != geteuid() && st.st_uid != kRootUid) {
        return "is owned by uid " + std::to_string(st.st_uid) + ", neither you nor root, who could replace it";
    }
    if ((st.st_mode & kOthersWrite) != 0 && (st.st_mode & S_ISVTX) == 0) {
        return "is writable by others (mode " + octal_mode(st.st_mode) +
               ") and not sticky, so another user could replace it";
    }
    return "";
}

// Each directory from `dir` (canonical) up to /: owned by us or root; one that
// others can write into must be sticky.  True when one such shared (sticky) dir
// is on the way, so that the store itself must be private.
bool check_parents(const fs::path& home, const fs::path& dir) {
    bool shared = false;
    for (fs::path p = dir;; p = p.parent_path()) {
        struct stat st {};
        if (stat(p.c_str(), &st) != 0) {
            throw JobError("cannot check " + p.string() + ": " + std::strerror(errno));
        }
        const std::string why = parent_problem(st);
        if (!why.empty()) refuse(home, "its parent " + p.string() + " " + why, fix_for_home());
        shared = shared || (st.st_mode & kOthersWrite) != 0;
        if (p == p.root_path() || p.parent_path() == p) break;
    }
    return shared;
}

// Opens `name` in the open directory `parent_fd`, creating it 0700 when asked;
// checks it on its descriptor.  -1 when missing and not created.
int open_level(int parent_fd, const fs::path& path, bool create) {
    const std::string name = path.filename().string();
    int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (!create) return -1;
        if (mkdirat(parent_fd, name.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) {
            throw JobError("cannot create " + path.string() + ": " + std::strerror(errno));
        }
        fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) refuse_open_failure(path, errno, true);
    const std::string why = distrust_reason(fd, true);
    if (!why.empty()) {
        close(fd);
        refuse(path, why, fix_for(path, why, true));
    }
    return fd;
}

}  // namespace

CheckedDir::CheckedDir(CheckedDir&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
    other.fd_ = -1;
}

CheckedDir& CheckedDir::operator=(CheckedDir&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) close(fd_);
        path_ = std::move(other.path_);
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

CheckedDir::~CheckedDir() {
    if (fd_ >= 0) close(fd_);
}

std::string distrust_reason(int fd, bool want_directory) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return std::string("cannot be examined: ") + std::strerror(errno);
    if (want_directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        return type_name(st.st_mode) + (want_directory ? ", not a directory" : ", not a regular file");
    }
    if (st.st_uid != geteuid()) return "owned by uid " + std::to_string(st.st_uid);
    if ((st.st_mode & kOthersWrite) != 0) {
        return "writable by group or others (mode " + octal_mode(st.st_mode) + ")";
    }
    // A second name for one of our files (made by whoever could link it there) is
    // not a file Portal made: a write through it lands in the other name too.
    if (!want_directory && st.st_nlink != 1) return std::to_string(st.st_nlink) + " hard links";
    return "";
}

std::string others_could_change(const fs::path& path, const fs::path& inner_root) {
    // The directories above are walked as they really are (symbolic links in
    // them resolved, as check_parents' canonical dir); `path` itself is not followed.
    const fs::path given = absolute_clean(path);
    std::error_code ec;
    fs::path parent = fs::weakly_canonical(given.parent_path(), ec);
    if (ec) parent = given.parent_path();
    const fs::path start = parent / given.filename();
    fs::path inner = inner_root.empty() ? fs::path() : fs::weakly_canonical(absolute_clean(inner_root), ec);
    if (ec) inner = absolute_clean(inner_root);
    // Strict from `path` up to `inner_root`, when `path` is inside it.
    const fs::path rel = inner_root.empty() ? fs::path("..") : start.lexically_relative(inner);
    bool below_inner = !rel.empty() && *rel.begin() != "..";
    for (fs::path p = start;; p = p.parent_path()) {
        struct stat st {};
        if ((p == start ? lstat(p.c_str(), &st) : stat(p.c_str(), &st)) != 0) {
            return p.string() + " cannot be examined (" + std::strerror(errno) + ")";
        }
        if (p == start || below_inner) {
            // What is trusted itself (a symlink's mode means nothing: its owner only).
            if (st.st_uid != geteuid() && st.st_uid != kRootUid) {
                return p.string() + " is owned by uid " + std::to_string(st.st_uid) + ", neither you nor root";
            }
            if (!S_ISLNK(st.st_mode) && (st.st_mode & kOthersWrite) != 0) {
                return p.string() + " is writable by group or others (mode " + octal_mode(st.st_mode) + ")";
            }
        } else if (const std::string why = parent_problem(st); !why.empty()) {
            return p.string() + " " + why;
        }
        if (p == inner) below_inner = false;
        if (p == p.root_path() || p.parent_path() == p) break;
    }
    return "";
}

CheckedDir trust_store(const fs::path& given, StoreUse use) {
    const fs::path home = absolute_clean(given);
    if (home == home.root_path()) {
        refuse(home, "the root directory", fix_for_home());
    }
    // The levels that do not exist yet, innermost last, under the deepest that does.
    std::vector<fs::path> missing;
    fs::path existing = home;
    struct stat st {};
    while (lstat(existing.c_str(), &st) != 0) {
        if (errno != ENOENT) throw JobError("cannot check " + existing.string() + ": " + std::strerror(errno));
        missing.insert(missing.begin(), existing);
        existing = existing.parent_path();
    }
    // The parents, resolved once (a /home -> /usr/home link is fine when every
    // directory it leads to passes), then the store's own levels without following.
    const fs::path top = missing.empty() ? home.parent_path() : existing;
    char real[PATH_MAX];
    if (realpath(top.c_str(), real) == nullptr) {
        throw JobError("cannot resolve " + top.string() + ": " + std::strerror(errno));
    }
    const bool shared = check_parents(home, real);
    if (!missing.empty() && use == StoreUse::Read) {
        return CheckedDir(home, -1);  // nothing stored yet: an empty store, created by the first run
    }
    int parent_fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent_fd < 0) throw JobError("cannot open " + std::string(real) + ": " + std::strerror(errno));
    if (missing.empty()) missing.push_back(home);
    int fd = -1;
    try {
        for (const fs::path& level : missing) {
            fd = open_level(parent_fd, level, use == StoreUse::Create);
            close(parent_fd);
            parent_fd = fd;
            if (fd < 0) return CheckedDir(home, -1);
            if (level != home) fchmod(fd, kPrivateDirMode);  // created by us: 0700 whatever the umask
        }
    } catch (...) {
        if (parent_fd >= 0) close(parent_fd);
        throw;
    }
    fstat(fd, &st);
    if (use == StoreUse::Create && (st.st_mode & kOthersAny) != 0) {
        if (fchmod(fd, kPrivateDirMode) == 0) st.st_mode = (st.st_mode & ~07777) | kPrivateDirMode;
    }
    if (shared && (st.st_mode & kOthersAny) != 0) {
        close(fd);
        refuse(home, "inside a directory others can write into, and not private (mode " +
                         octal_mode(st.st_mode) + ")",
               "chmod 700 " + home.string());
    }
    return CheckedDir(home, fd);
}

CheckedDir open_private_dir(const fs::path& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) throw JobError(path.string() + ": no such directory");
        refuse_open_failure(path, errno, true);
    }
    const std::string why = distrust_reason(fd, true);
    if (!why.empty()) {
        close(fd);
        refuse(path, why, fix_for(path, why, true));
    }
    return CheckedDir(path, fd);
}

CheckedDir make_checked_dir(const fs::path& path) {
    if (mkdir(path.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) {
        throw JobError("cannot create " + path.string() + ": " + std::strerror(errno));
    }
    CheckedDir dir = open_private_dir(path);
    struct stat st {};
    if (fstat(dir.fd(), &st) == 0 && (st.st_mode & 07777) != kPrivateDirMode) {
        fchmod(dir.fd(), kPrivateDirMode);  // whatever the umask
    }
    return dir;
}

int open_store_file(const fs::path& path, int flags) {
    // Relative to its directory, itself opened and checked: a file is never
    // reached through a directory that is not ours.
    const CheckedDir dir = open_private_dir(path.parent_path());
    const int fd = openat(dir.fd(), path.filename().c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                          kPrivateFileMode);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT && (flags & O_CREAT) == 0) return -1;
        refuse_open_failure(path, err, false);
    }
    const std::string why = distrust_reason(fd, false);
    if (!why.empty()) {
        close(fd);
        refuse(path, why, fix_for(path, why, false));
    }
    if ((flags & O_CREAT) != 0) {
        struct stat st {};
        if (fstat(fd, &st) == 0 && (st.st_mode & kOthersAny) != 0) fchmod(fd, kPrivateFileMode);
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

std::string read_store_file(const fs::path& path, std::size_t max_bytes) {
    const int fd = open_store_file(path, O_RDONLY);
    if (fd < 0) throw JobError(path.string() + ": missing");
    struct stat st {};
    if (fstat(fd, &st) == 0 && static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
        close(fd);
        throw JobError(path.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    std::string text;
    char buf[1 << 14];
    for (;;) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            close(fd);
            throw JobError("cannot read " + path.string() + ": " + std::strerror(err));
        }
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > max_bytes) {  // grew while read
            close(fd);
            throw JobError(path.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
        }
    }
    close(fd);
    return text;
}

void write_file_atomically(const fs::path& path, const std::string& text, bool durable) {
    // Everything relative to the checked directory: the temporary file, the
    // rename and the fsync of the directory.
    const CheckedDir dir = open_private_dir(path.parent_path());
    const std::string name = path.filename().string();
    const std::string tmp_name = name + ".tmp" + std::to_string(getpid());
    const fs::path tmp = path.parent_path() / tmp_name;
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dir.fd(), tmp_name.c_str(), flags, kPrivateFileMode);
    if (fd < 0 && errno == EEXIST) {
        unlinkat(dir.fd(), tmp_name.c_str(), 0);  // left by a dead process of our pid: never written through
        fd = openat(dir.fd(), tmp_name.c_str(), flags, kPrivateFileMode);
    }
    if (fd < 0) throw JobError("cannot write " + tmp.string() + ": " + std::strerror(errno));
    const auto fail = [&](int err) {
        if (fd >= 0) close(fd);
        unlinkat(dir.fd(), tmp_name.c_str(), 0);
        throw JobError("cannot write " + path.string() + ": " + std::strerror(err) + " (it is left as it was)");
    };
    fchmod(fd, kPrivateFileMode);  // whatever the umask
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
        const ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(n < 0 ? errno : ENOSPC);
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    if (durable && fsync(fd) != 0) fail(errno);
    const int closed = close(fd);
    fd = -1;
    if (closed != 0) fail(errno);
    if (renameat(dir.fd(), tmp_name.c_str(), dir.fd(), name.c_str()) != 0) {
        const int err = errno;
        unlinkat(dir.fd(), tmp_name.c_str(), 0);
        throw JobError("cannot replace " + path.string() + ": " + std::strerror(err) + " (it is left as it was)");
    }
    if (durable) fsync(dir.fd());
}

bool is_record_temp(const std::string& name) { return name.rfind("job.json.tmp", 0) == 0; }

}  // namespace portal
