"""Experiment trackers as hooks: MLflowLogHook and WandbLogHook (base.py says what they record).

Their libraries are imported only when a run starts (``pip install 'scepter_like[mlflow]'``
/ ``'scepter_like[wandb]'``); docs/tracking.md shows both.
"""

from scepter_like.solver.hooks.tracking.base import TrackerHook
from scepter_like.solver.hooks.tracking.mlflow_hook import MLflowLogHook
from scepter_like.solver.hooks.tracking.sweep import SweepTracking
from scepter_like.solver.hooks.tracking.wandb_hook import WandbLogHook

__all__ = ['MLflowLogHook', 'SweepTracking', 'TrackerHook', 'WandbLogHook']
