"""Two processes opening the bundled GGUF model at once: one converts it, the other waits for
it and loads the finished cache (before, the second deleted the first one's temporary folder
or failed to rename onto the finished one: "Directory not empty")."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from filelock import FileLock

from engine.models.catalog import BUNDLED
from engine.models.loading import MANIFEST, gguf_cache_folder

ROOT = Path(__file__).resolve().parents[2]
CONVERT = (
    "import sys, torch; from engine.models.catalog import BUNDLED; "
    "from engine.models.loading import converted_gguf; "
    "print(converted_gguf(BUNDLED['smollm2-135m'].path, torch.float32, "
    "lambda m: print(m, flush=True)), flush=True)"
)


def test_two_processes_convert_once_and_share_the_cache(tmp_path):
    env = dict(os.environ, DECODING_LAB_CACHE=str(tmp_path), HF_HUB_OFFLINE="1")
    source = BUNDLED["smollm2-135m"].path
    os.environ["DECODING_LAB_CACHE"], old = str(tmp_path), os.environ.get("DECODING_LAB_CACHE")
    try:
        final = gguf_cache_folder(source, torch.float32)
    finally:
        if old is None:
            del os.environ["DECODING_LAB_CACHE"]
        else:
            os.environ["DECODING_LAB_CACHE"] = old
    final.parent.mkdir(parents=True)
    # hold the lock until both have reached it (each says it is waiting), then let go
    held = FileLock(str(final.parent / f".{final.name}.lock"))
    held.acquire()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONVERT],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs: list[list[str]] = [[], []]
    readers = [
        threading.Thread(target=lambda p=p, out=out: out.extend(p.stdout), daemon=True)
        for p, out in zip(procs, outputs, strict=True)
    ]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 180
        while (
            time.monotonic() < deadline
            and not all(any("waiting for it" in line for line in out) for out in outputs)
            and all(p.poll() is None for p in procs)
        ):
            time.sleep(0.1)
    finally:
        held.release()
    for p, reader in zip(procs, readers, strict=True):
        p.wait(timeout=600)
        reader.join(timeout=10)
    texts = ["".join(out) for out in outputs]
    assert all("waiting for it" in text for text in texts), texts
    assert [p.returncode for p in procs] == [0, 0], texts
    assert sum("Converting the GGUF file" in text for text in texts) == 1, texts
    assert all(out[-1].strip() == str(final) for out in outputs), texts
    assert (final / MANIFEST).is_file()
    assert not list(final.parent.glob(f".tmp-{final.name}-*"))
