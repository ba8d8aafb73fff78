"""Task-specific components (dataset readers, models, metrics), one package per task."""
