"""Published reference points (other models, other papers) and the issue's targets, to print and plot beside
what the acceptance suite measures. Points only, from the papers named in `source` (the SCD rows come from
secondary notes on the paper, to check against its tables)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    method: str
    model: str
    kind: str  # image | video: the panel it is drawn on
    window: int  # L, the x of the point
    ratio: float  # steps (NFE) ratio against AR
    source: str
    note: str = ""


SJD_PAC = "SJD-PAC (CVPR26, arXiv 2603.18599), ablation"
SCD = "SCD (ICML26, arXiv 2510.24211)"
PUBLISHED = (
    Published("SJD", "Lumina-mGPT 7B", "image", 32, 2.31, SJD_PAC),
    Published("SJD + proactive drafting", "Lumina-mGPT 7B", "image", 32, 2.71, SJD_PAC,
              "L not stated; the ablation is at L=32 until its last row"),
    Published("SJD + PD + adaptive continuation", "Lumina-mGPT 7B", "image", 32, 3.52, SJD_PAC),
    Published("SJD-PAC", "Lumina-mGPT 7B", "image", 64, 4.51, SJD_PAC),
    Published("SJD", "Lumina-mGPT 7B 768²", "image", 64, 2.31, SCD, "SCD's baseline, NFE 2390 -> 1036"),
    Published("SCD (MC or GS coupling)", "Lumina-mGPT 7B 768²", "image", 64, 4.21, SCD, "NFE 2390 -> 568"),
    Published("SCD (GS coupling)", "Cosmos-1-AR 4B", "video", 128, 13.6, SCD, "NFE 7680 -> 564, RealEstate10K"),
)

# the targets: NFE ratio (image, video; `exact` has its own) and text's mean acceptance length
TARGETS = {"image": 4.5, "image exact": 3.5, "video": 10.0, "text": 3.5}
TEXT_TARGET_WINDOW = 6
