"""Per-vertex regression on meshes (MeshGraphNet, a per-vertex MLP) on a code-generated PCA shape family."""

from tasks.mesh_regression import collate, dataset, metric, models, solver  # noqa: F401  (registrations)
