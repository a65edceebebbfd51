"""One more sample of bench section 11's first GPU row (the SmolLM2-135M shape in bf16, top-20,
pipelined vs generate, today's session and the captured step alone): how far one run's figure
moves on the same machine. Run on the device machine by ``gpu_checks.sh row``."""

import torch

from engine.drivers.bench_pipeline import _smollm2_rows

if __name__ == "__main__":
    ids = [(37 * i + 11) % 5000 + 100 for i in range(16)]
    print(torch.cuda.get_device_name())
    for _ in range(2):
        _smollm2_rows(print, torch.bfloat16, ids, 128)
