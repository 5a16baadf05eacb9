"""Numba's cache of the kernels (kernels/_jit.py): an entry is used only while the sources it was compiled
from are unchanged, its own module's and those of the package modules it imports."""

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from microagg.kernels import _jit

KERNELS = Path(_jit.__file__).parent

PROBE = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from kcopy import noise, stats
draw = noise.laplace_draws(np.ones((1, 1)), np.array([7], dtype=np.int64), 3, 0)
loss = stats.sse(np.arange(12.0).reshape(6, 2), np.array([0, 0, 0, 1, 1, 1], dtype=np.int64), 2)
print(json.dumps({"draw": float(draw[0, 0]), "sse": float(loss),
                  **{f"{name}_{kind}": sum(getattr(kernel.stats, "cache_" + kind).values())
                     for name, kernel in (("draw", noise.laplace_draws), ("sse", stats.sse))
                     for kind in ("hits", "misses")}}))
"""


def _probe(root, cache):
    """Two kernels of a copy of the package, called in a fresh interpreter: their values, and how often each
    was loaded from the cache (hits) or compiled (misses)."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(root)], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "NUMBA_CACHE_DIR": str(cache)})
    return json.loads(done.stdout)


def test_a_kernel_compiles_again_when_a_kernel_of_another_module_it_calls_changes(tmp_path):
    # noise.laplace_draws calls blocking.splitmix64 (compiled into it); stats.sse calls nothing of blocking
    shutil.copytree(KERNELS, tmp_path / "kcopy", ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    first = _probe(tmp_path, cache)
    assert (first["draw_misses"], first["sse_misses"]) == (1, 1)
    again = _probe(tmp_path, cache)
    assert (again["draw_hits"], again["draw_misses"], again["sse_hits"], again["sse_misses"]) == (1, 0, 1, 0)
    assert again["draw"] == first["draw"]

    blocking = tmp_path / "kcopy" / "blocking.py"
    source = blocking.read_text()
    assert source.count("0x9E3779B97F4A7C15") == 1  # splitmix64's increment
    blocking.write_text(source.replace("0x9E3779B97F4A7C15", "0x9E3779B97F4A7C17"))
    changed = _probe(tmp_path, cache)
    # Numba alone checks laplace_draws against noise.py only: it loaded the old splitmix64's code
    assert changed["draw_misses"] == 1 and changed["draw_hits"] == 0
    assert changed["draw"] != first["draw"]
    assert (changed["sse_hits"], changed["sse_misses"]) == (1, 0)  # stats imports nothing of blocking
    assert changed["sse"] == first["sse"]
    # and the new draw is what a copy compiled from scratch gives
    shutil.copytree(tmp_path / "kcopy", tmp_path / "fresh" / "kcopy", ignore=shutil.ignore_patterns("__pycache__"))
    assert _probe(tmp_path / "fresh", tmp_path / "fresh-cache")["draw"] == changed["draw"]


def _write_package(root, modules):
    root.mkdir()
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)


def test_a_modules_stamp_covers_the_package_modules_it_imports_transitively(tmp_path):
    modules = {
        "_jit": "import numba\n",
        "a": "from ._jit import jit\nfrom .b import f\n",
        "b": "from ._jit import jit\n\n\ndef g():\n    from .c import h  # imported in a function\n",
        "c": "from ._jit import jit\nX = 1\n",
        "d": "from . import _jit, e\n",
        "e": "Y = 1\n",
        "lone": "import numpy as np\n",
    }
    _write_package(tmp_path / "one", modules)
    before = _jit.source_stamps(tmp_path / "one")
    assert len(set(before.values())) == len(modules)
    _write_package(tmp_path / "two", {**modules, "c": modules["c"].replace("X = 1", "X = 2")})
    after = _jit.source_stamps(tmp_path / "two")
    assert {name for name in modules if after[name] != before[name]} == {"a", "b", "c"}
    _write_package(tmp_path / "three", {**modules, "e": "Y = 2\n"})
    assert {name for name, stamp in _jit.source_stamps(tmp_path / "three").items() if stamp != before[name]} == {"d", "e"}
    _write_package(tmp_path / "four", {**modules, "_jit": "import numba  # options changed\n"})
    assert {name for name, stamp in _jit.source_stamps(tmp_path / "four").items()
            if stamp != before[name]} == {"_jit", "a", "b", "c", "d"}  # e and lone import no _jit: no kernels


def test_the_imports_found_are_those_of_the_syntax_tree_for_every_kernel_module():
    for path in sorted(KERNELS.glob("*.py")):
        tree = ast.parse(path.read_bytes())
        expected = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                expected |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        assert _jit._imports(path.read_bytes()) == expected, path.name


def test_every_kernel_of_the_package_carries_its_modules_stamp():
    mdav, noise, refine, windows = (importlib.import_module(f"microagg.kernels.{name}")
                                    for name in ("mdav", "noise", "refine", "windows"))
    for kernel, module in ((mdav.mdav, "mdav"), (refine.refine, "refine"), (windows.split_windows, "windows"),
                           (noise.laplace_draws, "noise")):
        stamp = kernel._cache._cache_file._source_stamp
        assert stamp[1] == _jit.STAMPS[module]
    assert _jit.STAMPS["refine"] != _jit.STAMPS["windows"]  # windows imports refine, not the reverse
