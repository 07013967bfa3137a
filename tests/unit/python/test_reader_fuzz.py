"""A seeded mutator over the two readers of untrusted bytes on the Python side:
the checkpoint manifest (checkpoint.load_manifest_bytes, which resume and inspect
use) and the job record (jobs.parse_record).  Thousands of mutated inputs, each
must be accepted or refused with the reader's own error (a PortalError, whose
message is a `portal:` line's), never another exception, never a hang: each
reader's whole run has a time budget (about 30 s for both, in CI).

The mutations that matter most reach past the signature: the manifest is mutated
as a document (a field replaced by another type, deep nesting, huge integers,
control characters, names leading out of the checkpoint) and re-signed with the
test key, so the parser and the validator see them; raw byte mutations (flips,
cuts, splices) test the signature and the parser on what is not re-signed.
Seeds are fixed: a failure names its seed and case, and reproduces.
"""
import copy
import json
import os
import random
import time

import pytest

from _portal.checkpoint import format as ckformat, manifest as ckmanifest
from _portal.store import jobs, signing
from _portal.store.trust import PortalError

KEY = bytes(range(32))
JOB = "train-3f9a2c"
CASES = int(os.environ.get("PORTAL_FUZZ_CASES", "20000"))
BUDGET_S = 15.0            # per reader


def _manifest():
    blob = "blobs/0000.bin"
    return {
        "format_version": 1, "format": "portal-checkpoint", "portal_version": "0.1.0",
        "python": {"version": "3.11.2", "implementation": "cpython", "magic": ckformat.PYTHON_MAGIC},
        "created": "2026-12-01T00:00:00.000Z", "job": JOB, "job_id": JOB,
        "script": "/home/u/train.py", "argv": ["train.py", "--lr", "0.1"],
        "error": {"type": "MemoryError", "message": "", "file": "/home/u/train.py", "line": 12},
        "loop": {"file": "/home/u/train.py", "line": 10, "iteration": 3, "function": "train"},
        "sources": {"/home/u/train.py": "ab" * 32},
        "runtime": {"main_filename": "/home/u/train.py", "cwd": "/home/u", "user_code": [],
                    "policy": {}, "environ": {}},
        "frames": [{"function": "train", "file": "/home/u/train.py", "line": 10}],
        "files": {"state.pickle": {"size": 900, "sha256": "cd" * 32},
                  blob: {"size": 4096 + 800, "sha256": "ef" * 32}},
        "buffers": [[blob, 0, 4000], [blob, 4096, 800]],
        "total_bytes": 12345,
    }


def _signed(manifest):
    return ckmanifest.signed_manifest_text(manifest, KEY).encode("utf-8")


def test_the_pristine_manifest_is_accepted():
    """Else the mutations below would all be refused for the wrong reason."""
    raw = _signed(_manifest())
    assert ckmanifest.load_manifest_bytes(raw, KEY, JOB)["job_id"] == JOB


STRANGE = [None, True, False, 0, -1, 1.5, -4096, 2 ** 63, 10 ** 19, "", "..", "/etc/passwd",
           "../../x", "blobs/../../x", "\x1b[2J\x9b", "blobs/0001.bin", "state.pickle", [],
           {}, [[]], {"size": 1}, "a" * 1000, ["blobs/0000.bin", 0, 1],
           [["blobs/0000.bin", 0, 1]] * 3]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    if not path:
        return value
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


def _nested(rng):
    depth = rng.choice([10, 31, 33, 100, 5000])
    return json.loads("[" * min(depth, 900) + "]" * min(depth, 900)) if depth < 900 else \
        "[" * depth + "]" * depth   # too deep for json.loads itself: kept as text below


def _mutate_document(rng, manifest):
    doc = copy.deepcopy(manifest)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        how = rng.random()
        if how < 0.5:
            doc = _set(doc, path, copy.deepcopy(rng.choice(STRANGE)))
        elif how < 0.6 and path:
            target = doc
            for part in path[:-1]:
                target = target[part]
            if isinstance(target, dict):
                del target[path[-1]]
            elif isinstance(target, list):
                target.pop(path[-1])
        elif how < 0.8:
            value = _nested(rng)
            if isinstance(value, str):
                return None, value
            doc = _set(doc, path, value)
        else:
            n = rng.choice([1, 17, 4095, 4096, 1 << 40, 1 << 62])
            doc = _set(doc, path, rng.choice([n, -n, n + 1]))
        if not isinstance(doc, dict):
            break
    return doc, None


def _mutate_bytes(rng, raw):
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        i = rng.randrange(len(data))
        how = rng.random()
        if how < 0.3:
            data[i] ^= 1 << rng.randrange(8)
        elif how < 0.5:
            del data[i:i + rng.randint(1, 64)]
        elif how < 0.7:
            data[i:i] = rng.choice([b"[", b"{", b"\"", b"\\", b"\x00", b"\xff", b"9" * 50,
                                    b"NaN", b"-", b",", b"}", b"]"]) * rng.randint(1, 50)
        else:
            j = rng.randrange(len(data))
            data[i:i] = data[j:j + rng.randint(1, 200)]
    return bytes(data)


def _expect_portal_error_only(fn, arg, what):
    try:
        fn(arg)
    except PortalError as exc:
        text = str(exc)
        assert text and "\n" not in text and "\x1b" not in text, (what, text)
    # any other exception fails the test, naming the case


def test_fuzz_the_manifest_reader():
    rng = random.Random(20261201)
    pristine = _manifest()
    signed = _signed(pristine)
    start = time.monotonic()
    kinds = {"document": 0, "bytes": 0, "signed-bytes": 0}
    for case in range(CASES):
        assert time.monotonic() - start < BUDGET_S * 2, f"too slow at case {case}"
        r = rng.random()
        if r < 0.6:
            doc, text = _mutate_document(rng, pristine)
            if text is not None:      # nested too deep for json.dumps: as text
                prefix = b'{"format_version": 1, "x": ' + text.encode()
                raw = prefix + ckmanifest._signature_tail(signing.sign(KEY, prefix)).encode()
            elif isinstance(doc, dict) and doc:
                raw = _signed(doc)
            else:                     # the whole document replaced: not an object
                raw = json.dumps(doc).encode()
            kinds["document"] += 1
        elif r < 0.8:
            raw = _mutate_bytes(rng, signed)
            kinds["bytes"] += 1
        else:                     # byte damage inside the signed part, then re-signed
            body = signed[:ckmanifest._TAIL.search(signed).start()]
            body = _mutate_bytes(rng, body)
            raw = body + ckmanifest._signature_tail(signing.sign(KEY, body)).encode()
            kinds["signed-bytes"] += 1
        _expect_portal_error_only(lambda b: ckmanifest.load_manifest_bytes(b, KEY, JOB), raw,
                                  f"manifest case {case}")
    assert min(kinds.values()) > CASES // 10, kinds


def _record():
    return {"record_version": 1, "id": JOB, "state": "suspended", "created": "2026-12-01T00:00:00Z",
            "updated": "2026-12-01T00:00:00Z", "script": "/home/u/train.py", "cwd": "/home/u",
            "argv": ["train.py"], "runs": [{"kind": "run", "pid": 12, "exit_status": 75}],
            "expires_at": "2026-12-04T00:00:00Z", "checkpoint_bytes": 4096}


def test_fuzz_the_job_record_reader():
    rng = random.Random(75)
    pristine = _record()
    text = json.dumps(pristine, indent=2).encode()
    assert jobs.parse_record(text) == pristine
    start = time.monotonic()
    for case in range(CASES):
        assert time.monotonic() - start < BUDGET_S * 2, f"too slow at case {case}"
        if rng.random() < 0.6:
            doc, deep = _mutate_document(rng, pristine)
            raw = deep.encode() if deep is not None else json.dumps(doc).encode()
        else:
            raw = _mutate_bytes(rng, text)
        _expect_portal_error_only(jobs.parse_record, raw, f"record case {case}")


@pytest.mark.parametrize("raw", [b"[" * 100000, b"{\"a\":" * 100000, b"1" * 100000,
                                 b"\"" + b"\\" * 100001, b"{\"state\": null}", b"{\"runs\": 5}",
                                 b"{\"record_version\": 99}", b"{\"record_version\": true}"],
                         ids=["nested-arrays", "nested-objects", "huge-int", "backslashes",
                              "null-state", "runs-not-a-list", "newer-version", "bool-version"])
def test_the_record_reader_refuses_what_crashed_the_cli(raw):
    with pytest.raises(jobs.RecordError) as e:
        jobs.parse_record(raw)
    assert str(e.value).startswith("job.json: ")
