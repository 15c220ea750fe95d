"""Device identity: what a lockfile is keyed by, and what a lock entry records."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any


def slugify(model: str) -> str:
    """Stable, file-name-safe slug of a device model name.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``;
    ``"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"`` -> ``"intel-xeon-platinum-8481c"``.
    """
    text = model.lower()
    text = re.sub(r"\((r|tm|c)\)", " ", text)
    text = re.sub(r"\b(cpu|processor)\b", " ", text)
    text = re.sub(r"@.*$", " ", text)  # clock speed is not part of the model
    text = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return text or "unknown-device"


@dataclass
class DeviceInfo:
    """Identity and limits of the device a runner measures on."""

    model: str  # human name, e.g. "NVIDIA H100 80GB HBM3"
    kind: str  # "cuda", "cpu", "replay", ...
    versions: dict[str, str] = field(default_factory=dict)  # driver, cuda, cupy, pycuda, compiler, ...
    properties: dict[str, Any] = field(default_factory=dict)  # compute capability, SMs, memory, limits

    @property
    def slug(self) -> str:
        prefix = "cpu-" if self.kind == "cpu" and not slugify(self.model).startswith("cpu") else ""
        return prefix + slugify(self.model)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["slug"] = self.slug
        return data
