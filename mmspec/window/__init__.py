"""Window policies: how many positions the next forward verifies (L), decided afresh at every step.

- base: the policy protocol, fixed windows and AcceptanceWindow;
- auto: AutoWindow's decisions;
- spec: the policies by name (WINDOWS) and `WindowSpec`, the one place a window argument becomes a policy;
- estimate: what AutoWindow knows of each L it may choose (tokens and seconds per step);
- memory: what it keeps across calls and processes (a model's acceptance prior, the measurement files).
"""
from mmspec.window.base import MAX_WINDOW, AcceptanceWindow, FixedWindow, WindowPolicy
from mmspec.window.estimate import Estimate, batch_progress
from mmspec.window.memory import PRIOR_FILE, WindowCache, WindowMemories, WindowMemory, load_prior, prior_at
from mmspec.window.auto import AUTO_WIDEST, AutoConfig, AutoWindow
from mmspec.window.spec import WINDOWS, WindowSpec, window_help

__all__ = ["MAX_WINDOW", "AcceptanceWindow", "FixedWindow", "WindowPolicy", "Estimate", "batch_progress", "PRIOR_FILE",
           "WindowCache", "WindowMemories", "WindowMemory", "load_prior", "prior_at", "AUTO_WIDEST", "AutoConfig", "AutoWindow",
           "WINDOWS", "WindowSpec", "window_help"]
