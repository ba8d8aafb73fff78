"""Hyperparameter search with Optuna (``tools/run_search.py``): space, worker, summary.

Nothing here is imported by ``scepter_like`` or ``scepter_like.solver``; optuna is imported
only by a running search.
"""
