"""The manifest of a checkpoint (grammar in format.py): its signed text as the
writer lays it out, its signature (HMAC-SHA256 with the user's key), and every
check a reader makes of it before it believes anything in it."""
import json
import platform
import re

from _portal.checkpoint.format import (ALIGN, FORMAT_NAME, FORMAT_VERSION, MANIFEST,
                                       MAX_MANIFEST_DEPTH, MAX_MANIFEST_INT_DIGITS, PORTAL_VERSION,
                                       PYTHON_MAGIC, STATE, SUPPORTED_VERSIONS, FILE_NAME_RE,
                                       HEX_DIGEST_RE, JOB_ID_RE, chunk_ok, fail, is_int,
                                       layout_of)
from _portal.checkpoint.hashing import BLAKE3, SHA256, chunk_hash
from _portal.store import signing, trust as store
from _portal.store.trust import shown


def _signed_part(manifest):
    """The signed bytes of the manifest's text: its JSON (indent 1) up to, not
    including, the closing "\\n}" (docs/checkpoint-format.md, "Signature")."""
    body = json.dumps(manifest, indent=1, ensure_ascii=False)
    assert body.endswith("\n}")
    return body[:-2]


def _signature_tail(mac):
    return f',\n "hmac": "{mac}"\n}}\n'


# What a signed manifest ends with; the HMAC covers every byte before it.
_TAIL = re.compile(rb',\n "hmac": "([0-9a-f]{64})"\n}\n\Z')


def manifest_text(manifest, data_bytes, key):
    """The signed JSON text, whose "total_bytes" counts the manifest's own size too
    (the signature has a fixed length)."""
    total = data_bytes
    tail = len(_signature_tail("0" * 64))
    for _ in range(4):
        manifest["total_bytes"] = total
        signed = _signed_part(manifest)
        new_total = data_bytes + len(signed.encode("utf-8")) + tail
        if new_total == total:
            break
        total = new_total
    return signed + _signature_tail(signing.sign(key, signed.encode("utf-8")))


def signed_manifest_text(manifest, key):
    """The text of ``manifest`` (any "hmac" in it dropped) signed with ``key``, as
    the writer lays it out (total_bytes is left as it is)."""
    manifest = {k: v for k, v in manifest.items() if k != "hmac"}
    signed = _signed_part(manifest)
    return signed + _signature_tail(signing.sign(key, signed.encode("utf-8")))


def parse_manifest(raw):
    """The manifest's JSON object (not yet checked): bounded depth and integers,
    no duplicate keys, no NaN (store.parse_json)."""
    try:
        manifest = store.parse_json(raw, MAX_MANIFEST_DEPTH, MAX_MANIFEST_INT_DIGITS)
    except UnicodeDecodeError:
        fail(f"checkpoint: {MANIFEST}: corrupted (not utf-8)")
    except json.JSONDecodeError as exc:
        fail(f"checkpoint: {MANIFEST}: corrupted (not valid json at line {exc.lineno} "
              f"column {exc.colno})")
    except (ValueError, RecursionError) as exc:
        fail(f"checkpoint: {MANIFEST}: corrupted ({shown(exc)})")
    if not isinstance(manifest, dict):
        fail(f"checkpoint: {MANIFEST}: corrupted (not a json object)")
    return manifest


def signature_status(raw, key=None):
    """("valid" | "missing" | "malformed" | "no-key" | "wrong", message or None) of the
    manifest file's bytes ``raw`` against ``key`` (default: the user's key)."""
    m = _TAIL.search(raw)
    if m is None:
        if b'"hmac"' in raw:
            return "malformed", (f"checkpoint: {MANIFEST}: its signature (hmac) is malformed "
                                 f"or misplaced: the manifest was edited")
        return "missing", (f"checkpoint: {MANIFEST}: carries no signature (hmac): it was not "
                           f"made by you with this portal, or it was edited or cut short")
    if key is None:
        try:
            key = signing.load_key()
        except signing.SigningKeyError as exc:
            return "no-key", f"checkpoint: cannot be verified: {exc}"
        if key is None:
            return "no-key", (f"checkpoint: cannot be verified: you have no key "
                              f"({signing.key_path()} is missing), so it was not made by you")
    if not signing.verify(key, raw[:m.start()], m.group(1).decode("ascii")):
        return "wrong", (f"checkpoint: {MANIFEST}: its signature (hmac) is wrong: it was not "
                         f"made by you (another key), or it was edited since")
    return "valid", None


def check_signature(raw, key=None):
    """Refuse a manifest whose HMAC is missing or not made with ``key`` (default:
    the user's key).  ``raw`` is the manifest file's bytes."""
    status, message = signature_status(raw, key)
    if status != "valid":
        fail(message)


def load_manifest_bytes(raw, key=None, job_id=None):
    """The manifest in the file bytes ``raw``: the signature first, over the raw
    bytes (``key``, default the user's); only then is the text parsed (with
    bounds), and everything in it validated (check_manifest), then, given
    ``job_id``, bound to that job.  Any problem is a CheckpointError, nothing else
    (the fuzz test, tests/unit/python/test_reader_fuzz.py, holds it to that)."""
    check_signature(raw, key)
    manifest = parse_manifest(raw)
    check_manifest(manifest)
    if job_id is not None:
        check_job(manifest, job_id)
    return manifest


def _is_str_map(value):
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _corrupted(why):
    fail(f"checkpoint: {MANIFEST}: corrupted ({why})")


def _check_tables(files, buffers, version=FORMAT_VERSION):
    if not isinstance(files, dict) or STATE not in files or not isinstance(buffers, list):
        _corrupted("no files or buffers table")
    for rel, rec in files.items():
        if not FILE_NAME_RE.fullmatch(rel):
            _corrupted(f"names a file {shown(rel)!r}, which is not one of a checkpoint's")
        # version 1: every file hashed whole; 2: pack files by sha256 chunks; 3:
        # by blake3 chunks (state.pickle: sha256 of the whole file in every version)
        digest = BLAKE3.name if version >= 3 and rel != STATE else SHA256.name
        keys = {"size", digest} if version == 1 or rel == STATE else \
            {"size", digest, "chunk"}
        if not isinstance(rec, dict) or set(rec) != keys or \
                not is_int(rec["size"]) or not isinstance(rec[digest], str) or \
                not HEX_DIGEST_RE.fullmatch(rec[digest]) or \
                ("chunk" in keys and not chunk_ok(rec["chunk"])):
            _corrupted(f"bad entry for {rel!r}")
    for i, entry in enumerate(buffers):
        ok = isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and \
            is_int(entry[1]) and is_int(entry[2])
        if not ok:
            _corrupted(f"bad buffer entry {i}")
        rel, offset, size = entry
        if rel not in files or rel == STATE:
            fail(f"checkpoint: {MANIFEST}: buffer {i} is in {shown(rel)!r}, which is not a "
                  f"recorded pack file")
        if offset % ALIGN:
            fail(f"checkpoint: {MANIFEST}: buffer {i} is at offset {offset} of {rel}, "
                  f"not {ALIGN}-aligned")
        if offset + size > files[rel]["size"]:
            fail(f"checkpoint: {MANIFEST}: buffer {i} lies outside {rel}")
    # The table must be the very layout the writer makes from these sizes: in
    # stream order, each buffer right after the one before it, no overlap, no
    # gap, no duplicate, no pack file that holds no buffer.
    packs, table = layout_of([entry[2] for entry in buffers])
    for i, (entry, want) in enumerate(zip(buffers, table)):
        if entry != want:
            fail(f"checkpoint: {MANIFEST}: buffer {i} is at {entry[0]}:{entry[1]}, not where "
                  f"the writer puts it ({want[0]}:{want[1]}): the buffer table is damaged")
    recorded = {rel: rec["size"] for rel, rec in files.items() if rel != STATE}
    if recorded != packs:
        fail(f"checkpoint: {MANIFEST}: its pack files ({', '.join(sorted(recorded)) or 'none'}) "
              f"are not those its buffers need ({', '.join(sorted(packs)) or 'none'}, of "
              f"those sizes): the buffer table is damaged")


def _check_fields(manifest):
    if not is_int(manifest.get("total_bytes")):
        _corrupted("no total_bytes")
    job_id = manifest.get("job_id")
    if job_id is not None and not (isinstance(job_id, str) and JOB_ID_RE.fullmatch(job_id)):
        _corrupted("bad job_id")
    sources = manifest.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        _corrupted("bad sources table")
    runtime = manifest.get("runtime")
    if runtime is not None:
        ok = isinstance(runtime, dict) and isinstance(runtime.get("main_filename"), str) and \
            isinstance(runtime.get("cwd", ""), (str, type(None))) and \
            _is_str_map(runtime.get("environ", {})) and \
            isinstance(runtime.get("user_code", []), list) and \
            all(isinstance(p, str) for p in runtime.get("user_code", [])) and \
            _is_str_map(runtime.get("policy") or {}) and \
            isinstance(runtime.get("command", ""), str)
        if not ok:
            _corrupted("bad runtime context")
    for field in ("error", "loop"):
        if field in manifest and not isinstance(manifest[field], (dict, type(None))):
            _corrupted(f"bad {field}")
    for field in ("argv", "frames"):
        if field in manifest and not isinstance(manifest[field], (list, type(None))):
            _corrupted(f"bad {field}")


def check_manifest(manifest):
    """Refuse a manifest of another format, version or interpreter, and one whose
    tables or fields are not what the writer makes (signed or not: a user's own
    damaged manifest must not give wrong numbers)."""
    fmt = manifest.get("format")
    if fmt != FORMAT_NAME:
        fail(f"checkpoint: unknown format {shown(fmt)!r} (expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        fail(f"checkpoint format version {shown(version)} is not supported by portal "
              f"{PORTAL_VERSION} (supports {supported})")
    if version >= 3:
        chunk_hash(version)               # refused by name if this build cannot hash it
    python = manifest.get("python")
    if not isinstance(python, dict):
        python = {}
    if python.get("magic") != PYTHON_MAGIC:
        fail(f"checkpoint: written by python {shown(python.get('version', '?'))} "
              f"(bytecode magic {shown(python.get('magic'))}), this is python "
              f"{platform.python_version()} (magic {PYTHON_MAGIC})")
    _check_tables(manifest.get("files"), manifest.get("buffers"), version)
    _check_fields(manifest)


def check_job(manifest, job_id):
    """Refuse a checkpoint that is not of job ``job_id`` (a replayed or moved one:
    the job id is inside the signed bytes)."""
    theirs = manifest.get("job_id")
    if theirs is None:
        fail(f"checkpoint: it names no job (made before checkpoints were bound to their "
              f"job), so it cannot be shown to be job {job_id}'s")
    if theirs != job_id:
        fail(f"checkpoint: it belongs to job {shown(theirs)}, not {job_id} (replayed or moved)")
