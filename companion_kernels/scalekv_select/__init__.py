"""ScaleKV's in-layer token selection (paper 03): window scores -> max-pool -> top-k -> gather.

``from companion_kernels.scalekv_select import scalekv_select`` (validated; ``impl="auto"``).
"""

from .api import IMPLS, SCORES, scalekv_select
from .reference import pooled_scores_reference, scalekv_select_reference, window_scores_reference

__all__ = ["IMPLS", "SCORES", "pooled_scores_reference", "scalekv_select", "scalekv_select_reference", "window_scores_reference"]
