"""Write a copy of a microagg job file that runs on a given Dask scheduler.

A batch system starts the scheduler when the allocation starts, so its address is known only then;
``microagg run`` takes the address from the job file's ``[cluster] scheduler``. This script writes a
copy of JOB.toml into DIRECTORY under the same file name (so the ``{job}`` template is unchanged) with
``[cluster] scheduler = ADDRESS`` (``connect_timeout`` kept, the local-cluster keys dropped) and with
every relative path made absolute against the original file's directory (so the paths mean what they
meant). Templates such as ``{date}`` are kept for ``microagg run`` to fill in. Prints the copy's path.

    python deploy/job_for_scheduler.py JOB.toml tcp://HOST:8786 DIRECTORY
    microagg run "$(python deploy/job_for_scheduler.py JOB.toml "$ADDRESS" "$TMPDIR")"

Used by deploy/slurm/ and deploy/plain/run-job.sh. Needs microagg installed (it resolves paths with
microagg's own job file rules). Comments of the original are not copied.
"""

import json
import os
import sys
import tomllib

LOCAL_CLUSTER_KEYS = ("workers", "threads_per_worker", "processes", "memory_limit")


def _value(value):
    """A TOML literal for the values a job file holds: strings, booleans, numbers and lists of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) in a job file")


def dumps(document):
    """TOML text of a job file document (sections of keys; nothing nested deeper)."""
    lines = []
    for section, keys in document.items():
        if not isinstance(keys, dict):
            raise TypeError(f"[{section}] is not a section")
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_value(value)}" for key, value in keys.items())
        lines.append("")
    return "\n".join(lines)


def for_scheduler(text, address, base):
    """The TOML text of job file ``text`` (from directory ``base``) pointed at scheduler ``address``."""
    from microagg.jobs.jobfile import SCHEMA, resolve

    document = tomllib.loads(text)
    for section, keys in SCHEMA.items():
        for key, spec in keys.items():
            value = document.get(section, {}).get(key)
            if spec.path and isinstance(value, str):  # [report] html may be true / false
                document[section][key] = resolve(value, base)
    cluster = {k: v for k, v in document.get("cluster", {}).items() if k not in LOCAL_CLUSTER_KEYS}
    cluster["scheduler"] = address
    document["cluster"] = cluster
    out = dumps(document)
    if tomllib.loads(out) != document:  # the copy must say exactly what the document says
        raise ValueError("the job file could not be written back faithfully")
    return out


def write(job_file, address, directory):
    """Write the copy of ``job_file`` pointed at ``address`` into ``directory``; return its path."""
    job_file = os.path.abspath(job_file)
    with open(job_file, "rb") as fh:
        text = fh.read().decode("utf-8")
    copy = os.path.join(directory, os.path.basename(job_file))
    if os.path.abspath(copy) == job_file:
        raise ValueError("DIRECTORY must not be the job file's own directory")
    body = for_scheduler(text, address, os.path.dirname(job_file))
    os.makedirs(directory, exist_ok=True)
    with open(copy, "w", encoding="utf-8") as fh:
        fh.write(f"# written by deploy/job_for_scheduler.py from {job_file}: runs on {address}\n\n{body}")
    return copy


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        print(write(*argv))
    except (OSError, ValueError, TypeError, tomllib.TOMLDecodeError) as exc:
        print(f"job_for_scheduler: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
