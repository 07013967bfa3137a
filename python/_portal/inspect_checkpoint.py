"""`portal inspect PATH`: what a checkpoint holds and whether it is sound, read
WITHOUT unpickling anything (a checkpoint is code; this module never runs it).

    python3 -m _portal.inspect_checkpoint PATH [--json]

PATH is a checkpoint (the `checkpoint` link of a job, or one generation
directory) or a job directory.  Every check `portal resume` makes before it
unpickles is made here too, but all of them, not only up to the first failure:
owner and modes of every directory and file, the manifest's HMAC, the format and
version, and every file's size and sha256.  Printed for people by default, as one
JSON object with --json.  Exit status 0 when the checkpoint is sound, 1 when not
(each reason on the report, and the first also on stderr), 2 on a usage error.
"""
import argparse
import hashlib
import json
import os
import sys

from . import checkpoint as ck

__all__ = ["inspect", "main"]

_CHUNK = 8 << 20


def _human(n):
    if not isinstance(n, int):
        return "?"
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


def _resolve(path):
    """A job directory stands for its checkpoint."""
    if os.path.isdir(path) and not os.path.islink(path) and \
            not os.path.exists(os.path.join(path, ck.MANIFEST)) and \
            os.path.lexists(os.path.join(path, "checkpoint")):
        return os.path.join(path, "checkpoint")
    return path


def _attempt(problems, fn, *args):
    """fn(*args), or None with its CheckpointError's message added to problems."""
    try:
        return fn(*args)
    except ck.CheckpointError as exc:
        problems.append(str(exc))
        return None


def _check_file(directory, rel, record):
    """The state of one file against its record: (status, size, problem or None)."""
    path = os.path.join(directory, rel)
    problems = []
    fd = None
    opened = _attempt(problems, ck.open_trusted, directory, rel, "missing")
    if opened is not None:
        fd = opened[0]
    elif os.path.isfile(path) and not os.path.islink(path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # untrusted, but still checked
    if fd is None:
        return ("missing" if not os.path.lexists(path) else "untrusted"), None, problems
    try:
        size = os.fstat(fd).st_size
        want = record.get("size")
        if size != want:
            why = "truncated" if isinstance(want, int) and size < want else "larger than recorded"
            problems.append(f"checkpoint: {rel}: size {size} != {want} recorded ({why})")
            return ("truncated" if why == "truncated" else "wrong-size"), size, problems
        h = hashlib.sha256()
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            h.update(chunk)
    finally:
        os.close(fd)
    if h.hexdigest() != record.get("sha256"):
        problems.append(f"checkpoint: {rel}: sha256 does not match the manifest (corrupted)")
        return "corrupted", size, problems
    return ("ok" if not problems else "untrusted"), size, problems


def _sources(manifest):
    """{"files": N, "changed": [filename...]}: would the program's code still match."""
    changed = []
    recorded = manifest.get("sources") or {}
    for filename, sha in recorded.items():
        try:
            with open(filename, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != sha:
                    changed.append(filename)
        except OSError:
            changed.append(filename)
    return {"files": len(recorded), "changed": changed}


def inspect(path, key=None):
    """A report (a JSON-able dict) on the checkpoint at ``path``; ``report["sound"]``
    says whether `portal resume` would trust and load it, ``report["problems"]``
    why not.  Nothing is unpickled."""
    path = _resolve(path)
    problems = []
    report = {"path": os.path.abspath(path), "sound": False, "problems": problems}
    directory = _attempt(problems, ck.locate, path)
    if directory is None:
        directory = os.path.realpath(path)
        if not os.path.isdir(directory):
            return report
    report["directory"] = directory

    raw = _attempt(problems, ck.read_manifest_bytes, directory)
    if raw is None:
        try:
            with open(os.path.join(directory, ck.MANIFEST), "rb") as f:
                raw = f.read()    # not trusted: shown, never believed
        except OSError:
            return report
    manifest = _attempt(problems, ck.parse_manifest, raw)
    if manifest is None:
        return report
    status, message = ck.signature_status(raw, key)
    report["signature"] = status
    if message:
        problems.append(message)
    _attempt(problems, ck.check_manifest, manifest)

    for field in ("format", "format_version", "portal_version", "python", "created", "job",
                  "script", "argv", "loop", "total_bytes"):
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
        for sub in ck.subdirectories(records):
            _attempt(problems, ck.check_subdirectory, directory, sub)
        for rel, record in sorted(records.items()):
            if not isinstance(record, dict):
                continue           # check_manifest has said so
            st, size, file_problems = _check_file(directory, rel, record)
            problems.extend(file_problems)
            files.append({"name": rel, "size": size, "recorded_size": record.get("size"),
                          "sha256": record.get("sha256"), "status": st})
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


def format_report(r):
    lines = []
    add = lines.append
    target = r.get("directory")
    add(f"checkpoint   {r['path']}" + (f" -> {os.path.basename(target)}"
                                        if target and target != r["path"] else ""))
    if "format" in r or "format_version" in r:
        py = r.get("python") or {}
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
        add(f"loop         {_where(r['loop'])}, iteration {r['loop'].get('iteration')} (0-based)")
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
            add(f"               {f['name']:<{width}}  {_human(f['size']):>10}  "
                f"sha256 {str(f['sha256'])[:12]}...  {f['status']}")
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
    report = inspect(args.path)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(format_report(report))
    sys.stdout.flush()
    if not report["sound"]:
        first = report["problems"][0] if report["problems"] else f"{args.path}: no such checkpoint"
        more = len(report["problems"]) - 1
        sys.stderr.write(f"portal: inspect: {first}" + (f" (and {more} more)" if more > 0 else "")
                         + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
