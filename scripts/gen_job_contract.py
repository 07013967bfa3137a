"""Generates the contract between Portal's sides from contract/job_record.json.

    gen_job_contract.py CONTRACT_JSON OUT_HPP OUT_PY OUT_H

One definition, three renderings: C++ (include/portal/job_contract.hpp, in the
build tree), Python (_portal/job_contract.py, staged and installed with the
package) and C (include/portal/env_contract.h: the environment variables' names,
for the preload library).  None is edited by hand.
"""
import json
import sys

TYPES = ("string", "integer", "array", "object", "null", "boolean", "number")


def load(path):
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    for name, types in [kv for key in ("fields", "run_fields", "program_fields") for kv in c[key].items()]:
        bad = [t for t in types if t not in TYPES]
        if bad:
            raise SystemExit(f"gen_job_contract: {path}: field {name}: unknown type {bad[0]}")
    for name, entry in c["environment"].items():
        if not name.startswith("PORTAL_") or not name[7:].replace("_", "").isalnum() \
                or not name.isupper() or set(entry) != {"meaning", "set_by", "read_by"}:
            raise SystemExit(f"gen_job_contract: {path}: environment variable {name}: "
                             f"a PORTAL_ name with meaning, set_by and read_by")
    return c


def _env_suffix(name):
    """PORTAL_FAKE_OOM -> FAKE_OOM"""
    return name[len("PORTAL_"):]


def _camel(suffix):
    """FAKE_OOM -> FakeOom"""
    return "".join(part.capitalize() for part in suffix.split("_"))


def c_header(c, source):
    lines = "".join(f"/* {e['meaning']} (set by {e['set_by']}; read by {', '.join(e['read_by'])}) */\n"
                    f'#define PORTAL_ENV_{_env_suffix(n)} "{n}"\n'
                    for n, e in c["environment"].items())
    return f"""/* env_contract.h: GENERATED from {source} by scripts/gen_job_contract.py.
   Do not edit: change the contract file, and C, C++ and Python follow.
   The environment variables Portal's sides set for each other. */
#ifndef PORTAL_ENV_CONTRACT_H
#define PORTAL_ENV_CONTRACT_H

{lines}
#endif
"""


def cpp(c, source):
    def table(key):
        return ",\n".join(f'    {{"{n}", {" | ".join("k" + t.capitalize() for t in ts)}}}'
                           for n, ts in c[key].items())
    states = ", ".join(f'"{s}"' for s in c["states"])
    env = "\n".join(f'inline constexpr const char* k{_camel(_env_suffix(n))} = "{n}";'
                    for n in c["environment"])
    return f"""// job_contract.hpp: GENERATED from {source} by scripts/gen_job_contract.py.
// Do not edit: change the contract file, and both C++ and Python follow.
#pragma once

#include <cstddef>
#include <ctime>

namespace portal::contract {{

constexpr int kRecordVersion = {c["record_version"]};
constexpr int kSuspendedExitStatus = {c["suspended_exit_status"]};
constexpr std::time_t kExpirySeconds = {c["expiry_seconds"]};
constexpr std::size_t kRecordMaxBytes = {c["record_max_bytes"]};
constexpr std::size_t kManifestMaxBytes = {c["manifest_max_bytes"]};
constexpr std::size_t kIdStemMax = {c["id_stem_max"]};
constexpr int kIdHexDigits = {c["id_hex_digits"]};
constexpr const char* kIdPattern = R"({c["id_pattern"]})";

// JSON types, as a bit set per field.
constexpr unsigned kString = 1, kInteger = 2, kArray = 4, kObject = 8, kNull = 16, kBoolean = 32, kNumber = 64;

struct Field {{
    const char* name;
    unsigned types;
}};

// The record's top-level fields; a field not named here is free (new fields are optional).
inline constexpr Field kFields[] = {{
{table("fields")},
}};
// The fields of each entry of "runs".
inline constexpr Field kRunFields[] = {{
{table("run_fields")},
}};
// The fields of "program".
inline constexpr Field kProgramFields[] = {{
{table("program_fields")},
}};

// The states a record may say (the CLI adds "lost" and "unreadable", never written).
inline constexpr const char* kStates[] = {{{states}}};

// The environment variables one side sets for the other (meanings: env_contract.h).
namespace env {{
{env}
}}  // namespace env

}}  // namespace portal::contract
"""


def py(c, source):
    def table(key):
        return "".join(f"    {n!r}: {tuple(ts)!r},\n" for n, ts in c[key].items())
    environment = "".join(f"    {n!r}: ({e['meaning']!r}, {e['set_by']!r}, {tuple(e['read_by'])!r}),\n"
                          for n, e in c["environment"].items())
    env = "".join(f"ENV_{_env_suffix(n)} = {n!r}\n" for n in c["environment"])
    return f'''"""The job-record contract: GENERATED from {source} by scripts/gen_job_contract.py.

Do not edit: change the contract file, and both C++ and Python follow."""

RECORD_VERSION = {c["record_version"]}
SUSPENDED_EXIT_STATUS = {c["suspended_exit_status"]}
EXPIRY_SECONDS = {c["expiry_seconds"]}
RECORD_MAX_BYTES = {c["record_max_bytes"]}
MANIFEST_MAX_BYTES = {c["manifest_max_bytes"]}
ID_STEM_MAX = {c["id_stem_max"]}
ID_HEX_DIGITS = {c["id_hex_digits"]}
ID_PATTERN = {c["id_pattern"]!r}
STATES = {tuple(c["states"])!r}
# JSON type names per field: "string", "integer", "array", "object", "null", ...
FIELDS = {{
{table("fields")}}}
RUN_FIELDS = {{
{table("run_fields")}}}
PROGRAM_FIELDS = {{
{table("program_fields")}}}
# The environment variables one side sets for the other: name -> (meaning, set by, read by).
ENVIRONMENT = {{
{environment}}}
{env}
'''


def main(argv):
    source, out_hpp, out_py, out_h = argv[1:5]
    c = load(source)
    name = "contract/job_record.json"
    for path, text in ((out_hpp, cpp(c, name)), (out_py, py(c, name)), (out_h, c_header(c, name))):
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue  # unchanged: nothing rebuilds
        except FileNotFoundError:
            pass
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv)
