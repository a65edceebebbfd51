"""What the process does before torch loads (engine.runtime.launch, issue 57): main.py's first
lines and the packaged build's runtime hook note the machine's load before anything imports
torch; and ``release_pool`` frees a thread's OpenMP pool. Each in a fresh interpreter, where
torch is not imported yet."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "resources" / "packaging" / "decoding-lab.spec"
HOOK = ROOT / "resources" / "packaging" / "rthook_launch.py"

# Runs ``first`` (a file, as a script: main.py's top, the runtime hook), then imports torch; an
# import hook notes whether engine.runtime.launch had noted the load when torch began to load.
WATCH = r"""
import importlib.abc, json, runpy, sys
sys.path.insert(0, {root!r})
seen = {{}}

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "at_torch" not in seen:
            launch = sys.modules.get("engine.runtime.launch")
            seen["at_torch"] = launch is not None and launch.started() is not None
        return None

sys.meta_path.insert(0, Watch())
runpy.run_path({first!r}, run_name="first")
seen["torch_before_end"] = "at_torch" in seen
import torch  # noqa: F401
print(json.dumps(seen))
"""


def _watch(first: Path) -> dict:
    code = WATCH.format(root=str(ROOT), first=str(first))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the load is read from /proc/stat")
@pytest.mark.parametrize("first", [ROOT / "main.py", HOOK], ids=["main.py", "runtime hook"])
def test_the_load_is_noted_before_torch_loads(first):
    seen = _watch(first)
    assert seen["torch_before_end"] is False  # neither imports torch itself
    assert seen["at_torch"] is True


def test_the_packaged_build_runs_the_hook_before_main():
    spec = SPEC.read_text(encoding="utf-8")
    hooks = re.search(r"runtime_hooks=\[(.*?)\]", spec, re.S)
    assert hooks is not None and "rthook_launch.py" in hooks.group(1)
    assert "engine.runtime.launch import prepare" in HOOK.read_text(encoding="utf-8")


def test_prepare_notes_the_load_once():
    from engine.runtime import launch

    launch.prepare()
    first = launch.started()
    launch.prepare()
    assert launch.started() is first
    assert first is None or len(first) == 3


POOL = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
import torch
from engine.runtime.threads import release_pool

def tasks():
    return len(os.listdir("/proc/self/task"))

torch.set_num_threads(2)
before = tasks()
torch.ones(4_000_000).add_(1)  # a parallel region on this thread: its pool's thread stays
with_pool = tasks()
freed = release_pool()
end = time.monotonic() + 10
while tasks() >= with_pool and time.monotonic() < end:
    time.sleep(0.01)
print(json.dumps({{"before": before, "with_pool": with_pool, "after": tasks(), "freed": freed}}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="threads are counted in /proc")
def test_release_pool_frees_the_calling_threads_openmp_pool():
    code = POOL.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got["freed"]:
        pytest.skip("not libgomp here")
    assert got["with_pool"] == got["before"] + 1  # the pool's second thread
    assert got["after"] == got["before"]
