"""SOLVERS: training / evaluation loops."""

from scepter_like.registry import Registry

SOLVERS = Registry('SOLVERS')
