"""`portal inspect PATH`: what a checkpoint holds and whether it is sound, read
WITHOUT unpickling anything (a checkpoint is code; this module never runs it).

    python3 -m _portal.checkpoint.inspect_checkpoint PATH [--json]

PATH is a checkpoint (the `checkpoint` link of a job, or one generation
directory) or a job directory.  Every check `portal resume` makes before it
unpickles is made here too, but all of them, not only up to the first failure:
owner and modes of every directory and file, the manifest's HMAC, the format and
version, and every file's size and digest (sha256, or blake3 for pack files of
format version 3).  Printed for people by default, as one
JSON object with --json.  Exit status 0 when the checkpoint is sound, 1 when not
(each reason on the report, and the first also on stderr), 2 on a usage error.
"""
import argparse
import hashlib
import json
import os
import stat
import sys

from _portal.checkpoint.format import (MANIFEST, CheckpointError, generation_name, plain_file_name,
                                       plain_job_id, subdirectories)
from _portal.checkpoint.hashing import digest_file, record_digest
from _portal.checkpoint.manifest import check_job, check_manifest, parse_manifest, signature_status
from _portal.checkpoint.read import (check_subdirectory, locate, open_trusted, read_manifest_bytes,
                                     read_source, read_untrusted_manifest_bytes)
from _portal.checkpoint.progress import size_text
from _portal.store.trust import shown

__all__ = ["inspect", "main"]



def _human(n):
    """A size read from the manifest ("?" where it is not a number)."""
    return size_text(n) if isinstance(n, int) else "?"


def _resolve(path):
    """A job directory stands for its checkpoint."""
    if os.path.isdir(path) and not os.path.islink(path) and \
            not os.path.exists(os.path.join(path, MANIFEST)) and \
            os.path.lexists(os.path.join(path, "checkpoint")):
        return os.path.join(path, "checkpoint")
    return path


def _attempt(problems, fn, *args):
    """fn(*args), or None with its CheckpointError's message added to problems."""
    try:
        return fn(*args)
    except CheckpointError as exc:
        problems.append(str(exc))
        return None


def _check_file(directory, rel, record):
    """The state of one file against its record: (status, size, problem or None).
    ``rel`` is a name check_manifest accepted (state.pickle, blobs/NNNN.bin): a
    name leading out of the checkpoint is reported, never opened."""
    if not plain_file_name(rel):
        return "refused", None, [f"checkpoint: {MANIFEST}: names a file {shown(rel)!r}, which "
                                 f"is not one of a checkpoint's (not opened)"]
    path = os.path.join(directory, rel)
    problems = []
    fd = None
    opened = _attempt(problems, open_trusted, directory, rel, "missing")
    if opened is not None:
        fd = opened[0]
    else:
        fd = _open_untrusted(path)      # not trusted, but still checked (never a FIFO)
    if fd is None:
        return ("missing" if not os.path.lexists(path) else "untrusted"), None, problems
    try:
        size = os.fstat(fd).st_size
        want = record.get("size")
        if size != want:
            why = "truncated" if isinstance(want, int) and size < want else "larger than recorded"
            problems.append(f"checkpoint: {rel}: size {size} != {shown(want)} recorded ({why})")
            return ("truncated" if why == "truncated" else "wrong-size"), size, problems
        digest = digest_file(fd, size, record)
    finally:
        os.close(fd)
    name, recorded = record_digest(record)
    if digest != recorded:
        problems.append(f"checkpoint: {rel}: {name} does not match the manifest (corrupted)")
        return "corrupted", size, problems
    return ("ok" if not problems else "untrusted"), size, problems


def _open_untrusted(path):
    """A descriptor of the regular file ``path`` (O_NOFOLLOW|O_NONBLOCK, fstat'ed),
    whoever owns it, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _sources(manifest):
    """{"files": N, "changed": [filename...]}: would the program's code still match."""
    changed = []
    recorded = manifest.get("sources") or {}
    if not isinstance(recorded, dict):
        return {"files": 0, "changed": []}
    for filename, sha in recorded.items():
        try:
            if hashlib.sha256(read_source(filename)).hexdigest() != sha:
                changed.append(filename)
        except (OSError, ValueError):
            changed.append(filename)
    return {"files": len(recorded), "changed": changed}


def inspect(path, key=None, job_id=None):
    """A report (a JSON-able dict) on the checkpoint at ``path``; ``report["sound"]``
    says whether `portal resume` would trust and load it, ``report["problems"]``
    why not.  Nothing is unpickled, and nothing the manifest names is followed
    before it is checked: the manifest is read size-capped from a checked
    descriptor, its signature verified over the raw bytes, then parsed with
    bounds and validated as `portal resume` validates it (checkpoint/read.py)."""
    path = _resolve(path)
    problems = []
    report = {"path": os.path.abspath(path), "sound": False, "problems": problems}
    directory = _attempt(problems, locate, path)
    if directory is None:
        # an untrusted generation is still shown; a link only to a generation beside it
        directory = os.path.abspath(path)
        if os.path.islink(directory):
            target = os.readlink(directory)
            if not generation_name(os.path.basename(directory), target):
                return report
            directory = os.path.join(os.path.dirname(directory), target)
        if os.path.islink(directory) or not os.path.isdir(directory):
            return report
    report["directory"] = directory

    raw = _attempt(problems, read_manifest_bytes, directory)
    if raw is None:
        raw = read_untrusted_manifest_bytes(directory)   # shown, never believed
        if raw is None:
            return report
    status, message = signature_status(raw, key)
    report["signature"] = status
    if message:
        problems.append(message)
    manifest = _attempt(problems, parse_manifest, raw)
    if manifest is None:
        return report
    _attempt(problems, check_manifest, manifest)
    if job_id is not None:
        _attempt(problems, check_job, manifest, job_id)

    for field in ("format", "format_version", "portal_version", "python", "created", "job",
                  "job_id", "script", "argv", "loop", "total_bytes"):
        if field in manifest:
            report[field] = manifest[field]
    error = manifest.get("error")
    if isinstance(error, dict):
        report["error"] = {k: error.get(k) for k in ("type", "message", "file", "line")}
    frames = manifest.get("frames")
    if isinstance(frames, list):
        report["frames"] = frames
    buffers = manifest.get("buffers")
    report["buffers"] = len(buffers) if isinstance(buffers, list) else None

    files = []
    records = manifest.get("files")
    if isinstance(records, dict):
        for sub in subdirectories(r for r in records if plain_file_name(r)):
            _attempt(problems, check_subdirectory, directory, sub)
        for rel, record in sorted(records.items()):
            if not isinstance(record, dict):
                continue           # check_manifest has said so
            st, size, file_problems = _check_file(directory, rel, record)
            problems.extend(p for p in file_problems if p not in problems)
            hash_name, recorded = record_digest(record)   # "sha256" or "blake3"
            files.append({"name": rel, "size": size, "recorded_size": record.get("size"),
                          hash_name: recorded, "status": st})
    report["files"] = files
    report["sources"] = _sources(manifest)
    report["sound"] = not problems
    return report


# --- printing ----------------------------------------------------------------------

def _where(d):
    if not isinstance(d, dict):
        return "?"
    text = f"{d.get('file')}:{d.get('line')}"
    if d.get("function"):
        text += f" in {d['function']}"
    return text


def _escaped(value):
    """The report with every string in it (keys too) safe to print (store.shown)."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


def format_report(r):
    """The report for people; every string from the checkpoint with its control
    characters escaped, so that a manifest cannot drive the terminal."""
    r = _escaped(r)
    lines = []
    add = lines.append
    target = r.get("directory")
    add(f"checkpoint   {r['path']}" + (f" -> {os.path.basename(target)}"
                                        if target and target != r["path"] else ""))
    if "format" in r or "format_version" in r:
        py = r.get("python") if isinstance(r.get("python"), dict) else {}
        add(f"format       {r.get('format')} version {r.get('format_version')} (written by "
            f"portal {r.get('portal_version')}, python {py.get('version')})")
    if "created" in r:
        add(f"created      {r['created']}")
    if "signature" in r:
        add("signature    " + {"valid": "valid (hmac-sha256 made with your key)",
                               "missing": "MISSING", "malformed": "MALFORMED",
                               "wrong": "WRONG (another key, or edited)",
                               "no-key": "cannot be verified (your key is missing or refused)"}
            [r["signature"]])
    for field in ("job", "script"):
        if field in r:
            add(f"{field:<12} {r[field]}")
    if "argv" in r and isinstance(r["argv"], list):
        add(f"argv         {' '.join(map(str, r['argv']))}")
    if "error" in r:
        e = r["error"]
        add(f"error        {e.get('type')}: {e.get('message')} at {e.get('file')}:{e.get('line')}")
    if isinstance(r.get("loop"), dict):
        # the iteration when the loop's iterator tells it (not a while loop's, nor a
        # range's on 3.12+, whose iterator no longer keeps where it started): as portal show
        iteration = r["loop"].get("iteration")
        add(f"loop         {_where(r['loop'])}"
            + (f", iteration {iteration} (0-based)" if isinstance(iteration, int) else ""))
    if r.get("frames"):
        add("frames       (outermost first)")
        for f in r["frames"]:
            add(f"               {_where(f)}")
    if "files" in r:
        total = r.get("total_bytes")
        add(f"size         {_human(total)} in {len(r['files']) + 1} files "
            f"(manifest included), {r.get('buffers')} out-of-band buffers")
        width = max([len(f["name"]) for f in r["files"]] + [4])
        for f in r["files"]:
            hash_name = "blake3" if "blake3" in f else "sha256"
            add(f"               {f['name']:<{width}}  {_human(f['size']):>10}  "
                f"{hash_name} {str(f[hash_name])[:12]}...  {f['status']}")
    src = r.get("sources")
    if src:
        changed = src["changed"]
        add(f"sources      {src['files']} files, " +
            ("unchanged" if not changed else
             f"{len(changed)} changed or missing (resume would refuse): {', '.join(changed)}"))
    if r["sound"]:
        add("sound        yes: every check passed")
    else:
        add("sound        NO")
        for p in r["problems"]:
            add(f"               {p}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="portal inspect",
        description="Read a checkpoint without running it: manifest, signature, frames, "
                    "sizes, every file's checksum verified. Exit 0 if sound, 1 if not.")
    parser.add_argument("path", metavar="PATH", help="a checkpoint or a job directory")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    try:
        report = inspect(args.path, job_id=_job_of(args.path))
        # --json: every non-ASCII character escaped too (\\u009b ...): safe on a terminal
        text = json.dumps(report, indent=1) + "\n" if args.json else format_report(report)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        sys.stderr.write(f"portal: inspect: {shown(args.path)}: cannot be inspected "
                         f"({type(exc).__name__}: {shown(exc)})\n")
        return 1
    sys.stdout.write(text)
    sys.stdout.flush()
    if not report["sound"]:
        first = report["problems"][0] if report["problems"] else f"{args.path}: no such checkpoint"
        more = len(report["problems"]) - 1
        sys.stderr.write(f"portal: inspect: {shown(first)}" +
                         (f" (and {more} more)" if more > 0 else "") + "\n")
        return 1
    return 0


def _job_of(path):
    """The job whose checkpoint ``path`` is (a job directory, or its `checkpoint`
    link), or None: inspect then also says when it is another job's (replayed)."""
    path = os.path.abspath(path)
    if os.path.basename(path) == "checkpoint":
        path = os.path.dirname(path)
    if not os.path.lexists(os.path.join(path, "job.json")):
        return None                 # not a job's directory
    name = os.path.basename(path)
    return name if plain_job_id(name) else None


if __name__ == "__main__":
    sys.exit(main())
