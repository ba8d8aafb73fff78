"""HOOKS: the solver's hooks, built from TRAIN_HOOKS / EVAL_HOOKS / TEST_HOOKS."""

from scepter_like.registry import Registry

HOOKS = Registry('HOOKS')
