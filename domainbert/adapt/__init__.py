"""Adaptation strategies that are not a training stage of their own.

- :mod:`~domainbert.adapt.embed`: mean-pooled sentence embeddings of any encoder (one home for the pooling).
- :mod:`~domainbert.adapt.probe`: logistic regression on frozen embeddings, the cheapest baseline a user has,
  and the initialisation of a mean-pooling classification head.
- :mod:`~domainbert.adapt.select`: corpus curation by similarity to the task's texts (kNN-TAPT).
- :mod:`~domainbert.adapt.stats`: paired bootstrap intervals and the verdict sentence of the report.
"""
