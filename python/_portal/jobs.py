"""The job store, as the interpreter process sees it.

    $PORTAL_HOME (default ~/.portal)/
      jobs/<JOB>/job.json     the job record (JSON, written atomically); the
                              directory is flock(2)ed around each update
      jobs/<JOB>/checkpoint   the current checkpoint (see checkpoint.py)

The supervisor (portal-run, portal resume) creates the job and records its runs
(docs/job-store.md); the interpreter records a suspension, which only it can
describe.  A job id is the script's name and six hex digits (`train-3f9a2c`).
Directories are created 0700 and files 0600: a checkpoint is code.
"""
import json
import os
import secrets
import time

from _portal.job_contract import EXPIRY_SECONDS, RECORD_VERSION  # contract/job_record.json, generated


def portal_home(environ=os.environ):
    return environ.get("PORTAL_HOME") or os.path.join(os.path.expanduser("~"), ".portal")


def _mkdir_private(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def new_job_id(script):
    stem = os.path.splitext(os.path.basename(script or "job"))[0] or "job"
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:32]
    return f"{stem}-{secrets.token_hex(3)}"


class Job:
    def __init__(self, job_dir):
        self.dir = job_dir
        self.id = os.path.basename(job_dir.rstrip("/"))

    @classmethod
    def create(cls, script, home=None):
        jobs = os.path.join(home or portal_home(), "jobs")
        _mkdir_private(os.path.dirname(jobs))
        _mkdir_private(jobs)
        while True:
            path = os.path.join(jobs, new_job_id(script))
            try:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)   # whatever the umask
                return cls(path)
            except FileExistsError:
                continue

    @property
    def record_path(self):
        return os.path.join(self.dir, "job.json")

    def read_record(self):
        try:
            with open(self.record_path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def write_record(self, record):
        tmp = f"{self.record_path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)   # whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.record_path)

    def update_record(self, **fields):
        """Read-modify-write under an flock of the job's directory, which the
        supervisor (C++, src/jobs/job_store.cpp) takes too: neither loses the
        other's fields."""
        import fcntl
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            record = self.read_record()
            record.update(fields)
            record.setdefault("id", self.id)
            record.setdefault("record_version", RECORD_VERSION)
            record["updated"] = utc_iso(time.time())
            self.write_record(record)
            return record
        finally:
            os.close(fd)


def utc_iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
