"""Issue 24, item 7: odd command lines end in one clear message and exit code 2, never a
traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: bytes | str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, env=env,
        timeout=120, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["generate", "--device", "tpu"], b"not a device this app can use"),
        (["compare", "--device", "tpu"], b"not a device this app can use"),
        (["generate", "--prompt", b"caf\xff!"], b"not valid UTF-8 (byte 0xff"),
        (["generate", "--temperature", "1e-320"], b"temperature must be 0 (greedy) or >= 1e-06"),
        (["generate", "--num-beams", "1000000"], b"from 1 to 64 (the bound)"),
        (["generate", "--max-new-tokens", "1000000000000"], b"from 1 to 100000 (the bound)"),
        (["compare", "--gamma", "100000000"], b"from 1 to 64 (the bound)"),
        (["generate", "--show-probs", "1000000000"], b"from 0 to 1000 (the bound)"),
    ],
)
def test_odd_command_lines_get_a_message_and_exit_code_2(args, words):
    done = _cli(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr and words in done.stderr


def test_a_tiny_temperature_is_refused_by_the_settings_check():
    from engine.sampling.settings import SamplerSettings

    with pytest.raises(ValueError, match="or >= 1e-06"):
        SamplerSettings(temperature=1e-320)
    assert SamplerSettings(temperature=0.0).temperature == 0.0
    assert SamplerSettings(temperature=1e-6).temperature == 1e-6
