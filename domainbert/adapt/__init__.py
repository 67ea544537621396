"""Adaptation strategies that are not a training stage of their own.

- :mod:`~domainbert.adapt.probe_cmd`: ``domainbert probe``, logistic regression on frozen embeddings, the cheapest
  baseline a user has (the embedding, the probe and their cache live in ``core``, which the modules use too).
- :mod:`~domainbert.adapt.select`: corpus curation by similarity to the task's texts (kNN-TAPT).
- :mod:`~domainbert.adapt.pseudo`: pseudolabels for self-training; :mod:`~domainbert.adapt.soup`: weight averages.
- :mod:`~domainbert.adapt.vocab`: domain vocabulary (its commands: :mod:`~domainbert.adapt.vocab_cli`);
  :mod:`~domainbert.adapt.watch`: the probe watched while adapting.
- The paired bootstrap intervals and the report's verdict sentence are in :mod:`domainbert.core.stats`.
"""
