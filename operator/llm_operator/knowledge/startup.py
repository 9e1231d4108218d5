"""The startup budget (pure): how long the kubelet lets vLLM start before it restarts
the container, and so how long the tuner waits for one server start.

    budget_seconds = STARTUP_BASE_SECONDS + ceil(weight bytes / load bandwidth)

The base (10 min) covers engine start, CUDA graph capture or torch.compile warm-up and
the KV cache's allocation; the second term reads every weight byte at the rate of the
storage they are on. The download from the Hub is not in it: the download init
container fetches the model before vLLM starts, within its own budget.

The load bandwidth is ``spec.model.loadBandwidth`` when given, else the operator's
``LLMOP_MODEL_LOAD_BANDWIDTH`` (Helm ``settings.modelLoadBandwidth``), else
:data:`DEFAULT_LOAD_BANDWIDTH`: 100Mi per second, at or below the sustained read rate
the storage vendors document for the volumes a model cache usually sits on (AWS EBS gp3's
baseline is 125 MiB/s; Filestore Basic HDD reads 100 MiB/s; EFS in bursting mode can fall
below it). Those are the vendors' figures, not measured here. At the former fixed
200 MB/s, Llama 3.1 70B in bf16 (141 GB) had 1,306 s, which a gp3 volume at its baseline
cannot meet (1,076 s of reading alone, before the engine starts): the kubelet killed vLLM
mid-load, forever. At 100Mi/s it has 600 + 1,345 = 1,945 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.models import MIN_LOAD_BANDWIDTH, parse_quantity

STARTUP_BASE_SECONDS = 600
DEFAULT_LOAD_BANDWIDTH = "100Mi"


@dataclass(frozen=True)
class StartupBudget:
    seconds: int
    load_bytes_per_second: int
    base_seconds: int
    load_seconds: int
    source: str  # "spec.model.loadBandwidth" | "operator setting" | "default"


def bandwidth_bytes(text: str) -> int:
    """A load bandwidth (a Kubernetes quantity of bytes per second) in bytes per second;
    ``ValueError`` when it is not a quantity of at least 1Mi."""
    value = int(parse_quantity(text))
    if value < MIN_LOAD_BANDWIDTH:
        raise ValueError(f"{text!r} per second is below 1Mi/s")
    return value


def startup_budget(weight_bytes: int, spec_bandwidth: str | None,
                   setting: str | None = None) -> StartupBudget:
    """The budget for ``weight_bytes`` at the first bandwidth given of the spec's, the
    operator's setting and :data:`DEFAULT_LOAD_BANDWIDTH`."""
    if spec_bandwidth:
        text, source = spec_bandwidth, "spec.model.loadBandwidth"
    elif setting:
        text, source = setting, "operator setting"
    else:
        text, source = DEFAULT_LOAD_BANDWIDTH, "default"
    rate = bandwidth_bytes(text)
    load = math.ceil(weight_bytes / rate)
    return StartupBudget(STARTUP_BASE_SECONDS + load, rate, STARTUP_BASE_SECONDS, load, source)
