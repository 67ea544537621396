"""LightningModules, one per stage and task."""
