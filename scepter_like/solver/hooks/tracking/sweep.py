"""SweepTracking: one parent per sweep (``run_train.py -m``) or search study, each run a child of it.

For every tracker hook in the config's TRAIN_HOOKS the sweep opens a parent (MLflow: a
run the trial runs nest under; W&B: a group name), adds to each child run's overrides the
keys that make it a child (``SOLVER.TRAIN_HOOKS.<i>.PARENT_RUN_ID=...``, ``RUN_NAME``), and
closes the parent at the end with the sweep's final values and summary files.
"""

import copy
import sys

from scepter_like.config import apply_overrides, value_text
from scepter_like.solver.hooks.registry import HOOKS
from scepter_like.solver.hooks.tracking.base import TrackerHook, one_line


class SweepTracking:
    """The trackers of ``cfg`` (a loaded Config) with the parent of the sweep ``name`` in each."""

    def __init__(self, cfg, name, params, group_ids=None):
        self.trackers = []  # (override prefix, hook, group id)
        for index, entry in enumerate(cfg.SOLVER.get('TRAIN_HOOKS') or []):
            hook_name = entry.get('NAME') if hasattr(entry, 'get') else None
            hook_class = HOOKS.get(hook_name) if isinstance(hook_name, str) and hook_name in HOOKS else None
            if not (isinstance(hook_class, type) and issubclass(hook_class, TrackerHook)):
                continue
            hook = HOOKS.build(copy.deepcopy(entry))
            prefix = f'SOLVER.TRAIN_HOOKS.{index}'
            self.trackers.append((prefix, hook, hook.open_group(name, params, (group_ids or {}).get(prefix))))

    @property
    def group_ids(self):
        """``{override prefix: parent id}``: give it back as ``group_ids`` to continue the same parents."""
        return {prefix: group_id for prefix, _, group_id in self.trackers}

    def child_overrides(self, child_name):
        """Override words that make a run called ``child_name`` a child of the parents."""
        return [
            f'{prefix}.{key}={value_text(value)}'
            for prefix, hook, group_id in self.trackers
            for key, value in hook.child_settings(group_id, child_name).items()
        ]

    def detach(self, cfg):
        """Make ``cfg`` (a child run's config, a Config) a run of its own again: the keys ``child_overrides`` set take
        the sweep's config's values back (a best trial's config rerun is no child of the study)."""
        apply_overrides(
            cfg,
            [
                f'{prefix}.{key}={value_text(hook.cfg.get(key))}'
                for prefix, hook, group_id in self.trackers
                for key in hook.child_settings(group_id, '')
            ],
        )

    def end_child(self, child_name, status):
        """End the runs called ``child_name`` still open under the parents (their process died, so could not)."""
        self._each(
            f'ending the dead run {child_name} under the sweep parent {{}}',
            lambda hook, gid: hook.end_children(gid, child_name, status),
        )

    def close(self, status, values=None, files=()):
        """End every parent (FINISHED / FAILED)."""
        self._each('closing the sweep parent {}', lambda hook, gid: hook.close_group(gid, status, values or {}, files))

    def _each(self, what, call):
        """``call(hook, group id)`` for each tracker; one failing is one warning line on stderr saying ``what`` (its
        ``{}``: the group id); the runs themselves are recorded, only a run's end is missing."""
        for _, hook, group_id in self.trackers:
            try:
                call(hook, group_id)
            except Exception as e:
                print(
                    f'warning: {type(hook).__name__}: {what.format(group_id)} failed ({one_line(e)})',
                    file=sys.stderr,
                )
