"""Hooks run in ascending PRIORITY at all eight stages; ties keep config order."""

import pytest
from helpers import blob_solver_cfg, build_solver, write_blobs

from scepter_like.errors import ConfigError
from scepter_like.solver.hooks import HOOKS, Hook, LogHook
from scepter_like.solver.hooks.hook import STAGES

CALLS = []


@HOOKS.register_class()
class RecorderHook(Hook):
    para_dict = {'TAG': {'value': '', 'description': 'name in the record'}}

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger)
        self.tag = cfg.TAG


for _stage in STAGES[:8]:

    def _record(self, solver, _stage=_stage):
        CALLS.append((solver.mode, _stage, self.tag))

    setattr(RecorderHook, _stage, _record)


@HOOKS.register_class()
class OnlyAfterIterHook(Hook):
    para_dict = {}

    def after_iter(self, solver):
        CALLS.append((solver.mode, 'after_iter', 'only'))


def recorder(tag, priority=None):
    cfg = {'NAME': 'RecorderHook', 'TAG': tag}
    if priority is not None:
        cfg['PRIORITY'] = priority
    return cfg


def test_priority_order_ties_and_stage_skipping(tmp_path):
    CALLS.clear()
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    hooks = [
        {'NAME': 'BackwardHook'},
        recorder('late', 900),
        recorder('tie_a', 50),
        {'NAME': 'OnlyAfterIterHook', 'PRIORITY': 60},
        recorder('tie_b', 50),
        recorder('default'),  # Hook's default priority 500
        recorder('first', -10),
    ]
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks, MAX_EPOCHS=1, EVAL_HOOKS=[recorder('eval_hook', 1)])
    cfg['SOLVER']['TRAIN_DATA']['BATCH_SIZE'] = 16
    solver = build_solver(cfg)
    solver.solve()
    expected_train = ['first', 'tie_a', 'tie_b', 'default', 'late']
    for stage in ('before_epoch', 'after_epoch', 'before_all_iter', 'after_all_iter'):
        assert [t for m, s, t in CALLS if m == 'train' and s == stage] == expected_train, stage
    assert [t for m, s, t in CALLS if m == 'train' and s == 'before_iter'] == expected_train * 2
    after_iter = [t for m, s, t in CALLS if m == 'train' and s == 'after_iter']
    assert after_iter[:6] == ['first', 'tie_a', 'tie_b', 'only', 'default', 'late']
    assert len(after_iter) == 2 * 6  # 32 samples / 16 = 2 steps
    # before_solve / after_solve reach the hooks of every mode, by priority
    assert [t for _, s, t in CALLS if s == 'before_solve'] == [
        'first',
        'eval_hook',
        'tie_a',
        'tie_b',
        'default',
        'late',
    ]
    assert [t for _, s, t in CALLS if s == 'after_solve'] == ['first', 'eval_hook', 'tie_a', 'tie_b', 'default', 'late']
    # eval hooks run in eval mode only, at every per-epoch stage
    eval_stages = [s for m, s, t in CALLS if t == 'eval_hook' and m == 'eval']
    assert eval_stages[:3] == ['before_epoch', 'before_all_iter', 'before_iter']
    assert eval_stages[-2:] == ['after_all_iter', 'after_epoch']
    assert all(m == 'eval' for m, s, t in CALLS if t == 'eval_hook' and s not in ('before_solve', 'after_solve'))
    # whole-run shape: train epoch, then its evaluation
    modes = [m for m, s, t in CALLS if s == 'before_epoch' and t == 'first'] + ['eval']
    assert modes == ['train', 'eval']
    info = solver.get_hooks_info()
    assert 'RecorderHook(-10) -> RecorderHook(50) -> RecorderHook(50) -> OnlyAfterIterHook(60)' in info
    assert 'before_iter' in info and 'OnlyAfterIterHook' not in info.split('before_iter')[1].split('\n')[0]


def test_stage_table_skips_hooks_that_do_not_implement_a_stage(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    cfg = blob_solver_cfg(npz, tmp_path / 'w', hooks=[{'NAME': 'BackwardHook'}, {'NAME': 'OnlyAfterIterHook'}])
    solver = build_solver(cfg)
    owners = {type(fn.__self__).__name__ for fn in solver.stage_functions('before_iter', 'train')}
    assert 'OnlyAfterIterHook' not in owners
    owners = [type(fn.__self__).__name__ for fn in solver.stage_functions('after_iter', 'train')]
    assert owners == ['LogHook', 'OnlyAfterIterHook']  # (LogHook: added by default; BackwardHook: no stage)
    assert 'BackwardHook' not in solver.get_hooks_info()


def test_a_stage_method_the_solver_cannot_call_is_an_error_and_a_misspelled_one_a_warning(tmp_path, caplog):
    import pytest

    from scepter_like.errors import ConfigError

    class NoSolverHook(Hook):
        def after_iter(self):  # the solver calls after_iter(solver)
            pass

    class TypoHook(Hook):
        def after_itr(self, solver):  # never called
            pass

        def helper(self):  # not like a stage: no word about it
            pass

    npz = write_blobs(tmp_path / 'blobs.npz')
    try:
        HOOKS.register_class('OrderNoSolverHook')(NoSolverHook)
        HOOKS.register_class('OrderTypoHook')(TypoHook)
        hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'OrderNoSolverHook'}]
        with pytest.raises(ConfigError, match=r'^SOLVER\.TRAIN_HOOKS\[1\]: NoSolverHook\.after_iter\(\) cannot be'):
            build_solver(blob_solver_cfg(npz, tmp_path / 'a', hooks))
        build_solver(
            blob_solver_cfg(npz, tmp_path / 'b', [{'NAME': 'BackwardHook'}], EVAL_HOOKS=[{'NAME': 'OrderTypoHook'}])
        )
    finally:
        HOOKS._entries.pop('OrderNoSolverHook', None)
        HOOKS._entries.pop('OrderTypoHook', None)
    warnings = [r.getMessage() for r in caplog.records if 'is not a stage' in r.getMessage()]
    assert warnings == [
        'SOLVER.EVAL_HOOKS[0]: TypoHook.after_itr is not a stage, so the solver never calls it;'
        ' did you mean after_iter?'
    ]


def test_a_registered_hook_class_that_is_no_hook_is_one_error_naming_its_place(tmp_path):
    """A plain class registered in HOOKS ended in AttributeError: 'PlainHook' object has no attribute 'implements'."""
    import pytest

    from scepter_like.errors import ConfigError

    class PlainHook:
        para_dict = {'PRIORITY': {'value': 10, 'description': 'p'}}

        def __init__(self, cfg, logger=None):
            self.priority = cfg.PRIORITY

        def after_epoch(self, solver):
            pass

    npz = write_blobs(tmp_path / 'blobs.npz')
    try:
        HOOKS.register_class('OrderPlainHook')(PlainHook)
        hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'OrderPlainHook'}]
        with pytest.raises(
            ConfigError,
            match=r"^SOLVER\.TRAIN_HOOKS\[1\]: PlainHook does not subclass Hook, .*; subclass scepter_like's Hook"
            r' \(from scepter_like\.solver\.hooks import Hook\)',
        ):
            build_solver(blob_solver_cfg(npz, tmp_path / 'a', hooks))
    finally:
        HOOKS._entries.pop('OrderPlainHook', None)


@HOOKS.register_class()
class ScepterPriorityHook(Hook):
    """scepter's way: a para_dict without PRIORITY, and the hook's own default read with cfg.get."""

    para_dict = [{'SCALE': {'value': 2.0, 'description': 'a key of its own'}}]

    def __init__(self, cfg, logger=None):
        super().__init__(cfg, logger=logger)
        self.priority = cfg.get('PRIORITY', 50)

    def after_iter(self, solver):
        pass


def test_a_scepter_hook_that_declares_no_priority_keeps_its_own_default(tmp_path):
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'ScepterPriorityHook'}, {'NAME': 'OnlyAfterIterHook'}]
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks))
    order = [(type(h).__name__, h.priority) for h in solver.hooks_dict['train']]
    # before LogHook (100), as in scepter; the base's PRIORITY (500) once filled the config and overrode the 50
    assert order[:3] == [('BackwardHook', 0), ('ScepterPriorityHook', 50), ('LogHook', 100)]
    assert ('OnlyAfterIterHook', 500) in order  # a hook of this project's style still gets Hook's default
    hooks[1]['PRIORITY'] = 700
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'w2', hooks=hooks))
    assert [h.priority for h in solver.hooks_dict['train'] if type(h).__name__ == 'ScepterPriorityHook'] == [700]


def test_an_after_iter_hook_ordered_before_backward_hook_is_told_the_update_has_run(tmp_path, caplog):
    """scepter runs such a hook before the backward (it may add to solver.loss); here that change would be lost."""
    npz = write_blobs(tmp_path / 'd.npz', n=32)
    hooks = [{'NAME': 'BackwardHook'}, {'NAME': 'OnlyAfterIterHook', 'PRIORITY': -10}, recorder('after', 10)]
    with caplog.at_level('WARNING'):
        build_solver(blob_solver_cfg(npz, tmp_path / 'w', hooks=hooks))
    warned = [r.getMessage() for r in caplog.records if 'runs after_iter before BackwardHook' in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith('OnlyAfterIterHook(-10) runs after_iter before BackwardHook(0)')
    assert 'change the loss in run_step_train or the model' in warned[0]


@HOOKS.register_class()
class StepLinesHook(LogHook):  # a subclass; a name unlike LogHook keeps other tests' did-you-mean lists
    pass


def test_a_run_takes_one_hook_of_each_once_per_mode_kind_and_a_subclass_counts(tmp_path):
    npz = write_blobs(tmp_path / 'blobs.npz')
    train = [{'NAME': 'BackwardHook'}, {'NAME': 'LogHook'}]
    solver = build_solver(blob_solver_cfg(npz, tmp_path / 'a', train, EVAL_HOOKS=[{'NAME': 'LogHook'}]))
    assert [type(h).__name__ for h in solver.hooks_dict['eval']] == ['LogHook']  # another mode's: fine
    cfg = blob_solver_cfg(npz, tmp_path / 'b', [*train, {'NAME': 'StepLinesHook'}])
    with pytest.raises(
        ConfigError, match=r'^SOLVER\.TRAIN_HOOKS\[2\]: a second LogHook after SOLVER\.TRAIN_HOOKS\[1\]'
    ):
        build_solver(cfg)
