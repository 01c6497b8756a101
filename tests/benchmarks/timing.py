"""What every benchmark step shares: a device sync inside the timed call, warm-up first."""

import torch

WARMUP_STEPS = 3


def warmed_step(fn, device: torch.device, warmup: int = WARMUP_STEPS):
    """``fn`` followed by a device synchronisation (GPU), already called ``warmup`` times.

    The warm-up compiles kernels and fills caches before anything is timed; the
    sync makes the timed region cover the device work the call queued.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        result = fn()
        sync()
        return result

    for _ in range(warmup):
        step()
    return step
