"""LOSS_AGGREGATORS: how the model's ``loss_*`` terms become the one loss that is minimised."""

from scepter_like.registry import Registry

LOSS_AGGREGATORS = Registry('LOSS_AGGREGATORS')
