"""Numba's target CPU (microagg._cpu): deploy/'s x86-64-v3 kept where the CPU has its features, and
replaced by generic, before Numba is imported, where it does not (code for a level the CPU lacks dies
of SIGILL)."""

import logging
import subprocess
import sys

import pytest

from microagg import _cpu


@pytest.mark.parametrize("name", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_a_level_the_cpu_has_is_kept(name):
    environ = {"NUMBA_CPU_NAME": name}
    assert _cpu.check_numba_cpu(environ, flags=set(_cpu.V4) | {"sse2"}) == []
    assert environ == {"NUMBA_CPU_NAME": name}


def test_a_level_the_cpu_lacks_falls_back_to_generic_with_a_warning(caplog):
    environ = {"NUMBA_CPU_NAME": "x86-64-v3", "OTHER": "1"}
    with caplog.at_level(logging.WARNING, logger="microagg"):
        missing = _cpu.check_numba_cpu(environ, flags=set(_cpu.V3) - {"avx2", "fma"})
    assert missing == ["avx2", "fma"]
    assert environ == {"NUMBA_CPU_NAME": "generic", "OTHER": "1"}
    assert "NUMBA_CPU_NAME=x86-64-v3, but this CPU lacks avx2, fma" in caplog.text
    # AVX-512 missing: v4 falls back, v3 stays
    for name, expected in (("x86-64-v4", "generic"), ("x86-64-v3", "x86-64-v3")):
        environ = {"NUMBA_CPU_NAME": name}
        _cpu.check_numba_cpu(environ, flags=set(_cpu.V3))
        assert environ["NUMBA_CPU_NAME"] == expected


@pytest.mark.parametrize("environ", [{}, {"NUMBA_CPU_NAME": "generic"}, {"NUMBA_CPU_NAME": "znver3"},
                                     {"NUMBA_CPU_NAME": "host"}])
def test_other_cpu_names_are_left_alone(environ):
    before = dict(environ)
    assert _cpu.check_numba_cpu(environ, flags=set()) is None
    assert environ == before


def test_without_cpuinfo_nothing_is_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(_cpu, "cpu_flags", lambda: None)
    environ = {"NUMBA_CPU_NAME": "x86-64-v3"}
    assert _cpu.check_numba_cpu(environ) is None
    assert environ == {"NUMBA_CPU_NAME": "x86-64-v3"}


def test_cpu_flags_reads_the_first_processors_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert _cpu.cpu_flags(str(info), machine="x86_64") == {"fpu", "sse2", "avx2"}
    assert _cpu.cpu_flags(str(tmp_path / "missing"), machine="x86_64") is None
    # an ARM node has none of an x86-64 level's features: a level falls back to generic there
    assert _cpu.cpu_flags(str(info), machine="aarch64") == set()
    environ = {"NUMBA_CPU_NAME": "x86-64-v3"}
    assert _cpu.check_numba_cpu(environ, flags=_cpu.cpu_flags(str(info), machine="aarch64"))
    assert environ["NUMBA_CPU_NAME"] == "generic"


def test_importing_microagg_sets_numbas_target_before_numba_is_imported():
    """The real import path: a CPU without AVX2 (a fake /proc/cpuinfo) and NUMBA_CPU_NAME=x86-64-v3 give
    Numba generic code; this machine's own CPU keeps the level if it has it."""
    fake_cpu = (
        "import builtins, io\n"
        "real = builtins.open\n"
        "def fake(path, *args, **kwargs):\n"
        "    if path == '/proc/cpuinfo':\n"
        "        return io.StringIO('processor : 0\\nflags : fpu sse2 ssse3\\n')\n"
        "    return real(path, *args, **kwargs)\n"
        "builtins.open = fake\n"
    )
    show = "import microagg, numba; print(numba.config.CPU_NAME)"
    env = {"NUMBA_CPU_NAME": "x86-64-v3", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", fake_cpu + show], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["generic"]
    assert "NUMBA_CPU_NAME=x86-64-v3, but this CPU lacks abm, avx, avx2" in proc.stderr
    flags = _cpu.cpu_flags()
    if flags is None or not _cpu.V3 <= flags:
        pytest.skip("this machine's CPU is not x86-64-v3")
    proc = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.split() == ["x86-64-v3"] and "lacks" not in proc.stderr
