"""Window policies: how many positions the next forward verifies (L), decided afresh at every step.

- base: the policy protocol, fixed windows and AcceptanceWindow;
- auto: AutoWindow's decisions, and `window_policy`, the one place "auto" is defined;
- estimate: what AutoWindow knows of each width (tokens and seconds per step);
- memory: what it keeps across calls and processes (a model's acceptance prior, the measurement files).
"""
from mmspec.window.base import MAX_WINDOW, AcceptanceWindow, FixedWindow, WindowPolicy
from mmspec.window.estimate import Estimate, batch_progress
from mmspec.window.memory import PRIOR_FILE, WindowCache, WindowMemories, WindowMemory, load_prior, prior_at
from mmspec.window.auto import AUTO_WIDEST, AutoWindow, window_policy

__all__ = ["MAX_WINDOW", "AcceptanceWindow", "FixedWindow", "WindowPolicy", "Estimate", "batch_progress", "PRIOR_FILE",
           "WindowCache", "WindowMemories", "WindowMemory", "load_prior", "prior_at", "AUTO_WIDEST", "AutoWindow",
           "window_policy"]
