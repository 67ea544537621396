"""LightningDataModules and the readers they share."""
