"""The job store, as the interpreter process sees it.

    $PORTAL_HOME (default ~/.portal)/
      jobs/<JOB>/job.json     the job record (JSON, written atomically); the
                              directory is flock(2)ed around each update
      jobs/<JOB>/checkpoint   the current checkpoint (see checkpoint/format.py)

The supervisor (portal-run, portal resume) creates the job and records its runs
(docs/job-store.md); the interpreter records a suspension, which only it can
describe.  A job id is the script's name and six hex digits (`train-3f9a2c`).
Directories are created 0700 and files 0600: a checkpoint is code.  Every
directory and file is checked on its open descriptor (store/trust.py) before use.
"""
import json
import os
import secrets
import time

from _portal.store import trust as store
from _portal.job_contract import EXPIRY_SECONDS, ID_STEM_MAX, RECORD_MAX_BYTES, RECORD_VERSION  # contract/job_record.json, generated


MAX_RECORD_BYTES = RECORD_MAX_BYTES   # a record is a few KiB; larger is not one of ours
MAX_RECORD_DEPTH = 16          # objects and arrays nested deeper are not a record
MAX_RECORD_INT_DIGITS = 20     # a record's numbers are sizes, times, pids
RECORD_NAME = "job.json"


class RecordError(store.PortalError):
    """The job record cannot be read: the message names it and says why."""


def portal_home(environ=None):
    """The store's absolute path (fixed at start-up: a chdir of the program's
    does not move it)."""
    return store.home() if environ is None else store.home_from(environ)


def new_job_id(script):
    # Never a leading "-" (an id is an operand of portal's commands: job_store.cpp).
    stem = os.path.splitext(os.path.basename(script or "job"))[0].lstrip("-")
    stem = "".join(c if c.isascii() and c.isalnum() or c in "-_" else "_" for c in stem)[:ID_STEM_MAX] or "job"
    return f"{stem}-{secrets.token_hex(3)}"


# The fields the interpreter reads or keeps, and the JSON types they must have.
_RECORD_TYPES = {"id": str, "state": str, "record_version": int, "runs": list,
                 "script": (str, type(None)), "cwd": (str, type(None)),
                 "argv": (list, type(None)), "created": str, "updated": str}


def parse_record(raw, label=RECORD_NAME):
    """The job record in ``raw`` (bytes), checked: a JSON object whose known
    fields have their types.  Raises RecordError."""
    try:
        record = store.parse_json(raw, MAX_RECORD_DEPTH, MAX_RECORD_INT_DIGITS)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{label}: is damaged (not valid json at line {exc.lineno} "
                          f"column {exc.colno})") from None
    except UnicodeDecodeError:
        raise RecordError(f"{label}: is damaged (not utf-8)") from None
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"{label}: is damaged ({exc})") from None
    if not isinstance(record, dict):
        raise RecordError(f"{label}: is damaged (not a json object)")
    for field, kind in _RECORD_TYPES.items():
        if field in record and (not isinstance(record[field], kind) or
                                isinstance(record[field], bool)):
            raise RecordError(f"{label}: is damaged (its {field!r} is a "
                              f"{type(record[field]).__name__})")
    version = record.get("record_version", RECORD_VERSION)
    if version > RECORD_VERSION:
        raise RecordError(f"{label}: has record version {version}; this portal reads "
                          f"{RECORD_VERSION}: use the newer portal that wrote it")
    return record


class Job:
    def __init__(self, job_dir):
        self.dir = os.path.abspath(job_dir)
        self.id = os.path.basename(self.dir.rstrip("/"))

    @classmethod
    def create(cls, script, home=None):
        """A new job directory in the (trusted) store; StoreError if refused."""
        home = store.require(create=True) if home is None else home
        jobs = os.path.join(home, "jobs")
        store.make_private_dir(jobs)
        while True:
            path = os.path.join(jobs, new_job_id(script))
            try:
                os.mkdir(path, store.PRIVATE_DIR_MODE)
            except FileExistsError:
                continue
            fd = store.open_dir(path)
            try:
                os.fchmod(fd, store.PRIVATE_DIR_MODE)   # whatever the umask
            finally:
                os.close(fd)
            return cls(path)

    @property
    def record_path(self):
        return os.path.join(self.dir, RECORD_NAME)

    def read_record(self):
        """The record, checked ({} when there is none yet); RecordError or
        StoreError when it cannot be trusted or read."""
        try:
            raw = store.read_checked(self.record_path, MAX_RECORD_BYTES,
                                     label=f"job {self.id}: {RECORD_NAME}")
        except FileNotFoundError:
            return {}
        return parse_record(raw, f"job {self.id}: {RECORD_NAME}")

    def write_record(self, record):
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        store.atomic_write(self.record_path, text.encode("utf-8"))

    def update_record(self, **fields):
        """Read-modify-write under an flock of the job's directory, which the
        supervisor (C++, src/jobs/job_store.cpp) takes too: neither loses the
        other's fields.  The directory is opened O_NOFOLLOW and checked first."""
        return self.modify_record(lambda record: record.update(fields))

    def modify_record(self, change):
        """update_record with `change(record)` (in place) as the modification: a
        field computed from the record's own value (a count) under the lock."""
        import fcntl
        fd = store.open_dir(self.dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            record = self.read_record()
            change(record)
            record.setdefault("id", self.id)
            record.setdefault("record_version", RECORD_VERSION)
            record["updated"] = utc_iso(time.time())
            self.write_record(record)
            return record
        finally:
            os.close(fd)


def utc_iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
