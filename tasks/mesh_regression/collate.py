"""Batches of graphs: samples with different vertex counts concatenated into one graph.

Per-vertex tensors (``features``, ``target``) are concatenated along the vertex axis;
``edge_index`` of each sample is shifted by the number of vertices before it, so the
batch is one disconnected graph; ``num_nodes`` [B] keeps each sample's vertex count so
outputs can be split back per sample.
"""

import torch

from scepter_like.data.registry import COLLATES

NODE_KEYS = ('features', 'target')


@COLLATES.register_function('GraphCollate')
def collate_graphs(samples):
    """One graph batch from a list of sample dicts (``features``, ``target``, optional ``edge_index``)."""
    num_nodes = torch.tensor([len(s['features']) for s in samples], dtype=torch.long)
    batch = {key: torch.cat([s[key] for s in samples]) for key in NODE_KEYS if key in samples[0]}
    if 'edge_index' in samples[0]:
        offsets = torch.cumsum(num_nodes, 0) - num_nodes
        batch['edge_index'] = torch.cat([s['edge_index'] + int(o) for s, o in zip(samples, offsets)], dim=1)
    batch['num_nodes'] = num_nodes
    return batch
