"""Progress of a render: a bar with outputs done / failed / total and the run's throughput, then a summary."""
from __future__ import annotations

import time

from tqdm.auto import tqdm


class Progress:
    """Rates count this run's work only: outputs already done count towards the bar, not the speed."""

    def __init__(self, total: int, skipped: int, enabled: bool = True):
        self.total, self.skipped = total, skipped
        self.done = self.failed = self.tokens = 0
        self.t0 = time.perf_counter()
        self.bar = tqdm(total=total, initial=skipped, desc="render", unit="out", disable=not enabled,
                        mininterval=1.0, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total}{postfix} "
                                                    "[{elapsed}<{remaining}]")
        self.bar.set_postfix_str(self._rates(), refresh=False)

    def update(self, failed: bool, tokens: int):
        self.failed += failed
        self.done += not failed
        self.tokens += tokens
        self.bar.set_postfix_str(self._rates(), refresh=False)
        self.bar.update(1)

    def close(self) -> dict:
        self.bar.close()
        seconds = time.perf_counter() - self.t0
        return {"total": self.total, "skipped": self.skipped, "rendered": self.done, "failed": self.failed,
                "seconds": round(seconds, 2), "outputs_per_minute": round(60 * self.done / max(seconds, 1e-9), 2),
                "tokens_per_second": round(self.tokens / max(seconds, 1e-9), 1)}

    def _rates(self) -> str:
        seconds = max(time.perf_counter() - self.t0, 1e-9)
        return (f"done {self.skipped + self.done}, failed {self.failed}, {60 * self.done / seconds:.1f} out/min, "
                f"{self.tokens / seconds:.0f} tok/s")
